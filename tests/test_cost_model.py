"""The heuristic's cycle model against the timing simulator.

``compiler.ops.heuristic.estimate_conv2d_cycles`` must rank the knob settings of ResNet-18's
layers as the simulator does: over a seeded sample of 40 of each layer's candidates (all of
them where there are fewer; of those whose programs have at most 10,000 instructions, which
keeps the sample's simulation to minutes: see ``benchmarks/cost_model.py``), Spearman's rank
correlation between estimate and simulated cycles is at least 0.9, and the setting the
heuristic picks (``default_conv2d_knobs``) simulates within 3% of the fastest setting simulated
for the layer (the sample, the pick and the model's four best). The comparison is
``benchmarks/cost_model.py``'s (which prints the same figures); the default run checks a
sample of 6 on a 1x1 layer of each config; the full form (C1-C12 on ``default`` and
``vta_1x16x16``) is ``benchmarks/cost_model.py``'s figure, and an opt-in test here
(``-m benchmark``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import accel
from compiler.ops.heuristic import (
    NEAR_TIE,
    _plan,
    conv2d_cycles_floor,
    default_conv2d_knobs,
    estimate_conv2d_cycles,
    knob_candidates,
)
from compiler.ops.workloads import RESNET18_LAYERS, resnet18_layer

_spec = importlib.util.spec_from_file_location(
    "cost_model_bench", Path(__file__).resolve().parent.parent / "benchmarks" / "cost_model.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # its dataclass and process pool look it up by name
_spec.loader.exec_module(bench)

SAMPLE = 40
MIN_SPEARMAN = 0.9
PICK_SLACK = 1.03
CONFIGS = ("default", "vta_1x16x16")


def test_spearman_by_hand() -> None:
    assert bench.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert bench.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties share their mean rank: (5, 5, 9, 7) ranks (0.5, 0.5, 3, 2)
    assert list(bench.ranks([5, 5, 9, 7])) == [0.5, 0.5, 3, 2]
    assert bench.spearman([1, 2, 3, 4], [5, 5, 9, 7]) == pytest.approx(
        np.corrcoef([0, 1, 2, 3], [0.5, 0.5, 3, 2])[0, 1])


def check_layer(config: str, layer: str, sample: int, jobs: int = 1) -> None:
    r = bench.rank_layer(config, layer, sample, jobs)
    assert r.spearman >= MIN_SPEARMAN, f"{config} {layer}: Spearman {r.spearman:.3f}"
    assert r.pick_cycles <= PICK_SLACK * r.best_cycles, (
        f"{config} {layer}: the heuristic's {r.pick} takes {r.pick_cycles} cycles, "
        f"{r.best} {r.best_cycles}")


@pytest.mark.parametrize(("config", "layer"), [("default", "C8"), ("vta_1x16x16", "C11")])
def test_ranking_sampled(config: str, layer: str) -> None:
    check_layer(config, layer, 6)


@pytest.mark.benchmark
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("layer", list(RESNET18_LAYERS))
def test_ranking_every_layer(config: str, layer: str) -> None:
    check_layer(config, layer, SAMPLE, jobs=2)


@pytest.mark.parametrize("config", [*CONFIGS, "default_alu", "tiny"])
@pytest.mark.parametrize("layer", ["C1", "C2", "C5", "C11"])
def test_the_floor_is_below_every_estimate(config: str, layer: str) -> None:
    """The heuristic's search stops at a floor above its best estimate: it finds the
    candidate with the lowest estimate only if no estimate is below its floor."""
    cfg = accel.load_config(config)
    wl = resnet18_layer(layer)
    for k in knob_candidates(wl, cfg)[::3]:
        assert estimate_conv2d_cycles(wl, k, cfg) >= conv2d_cycles_floor(wl, k, cfg), k


def test_the_search_finds_the_lowest_estimate() -> None:
    """The pick is, of the candidates within NEAR_TIE of the lowest estimate (all of them
    priced, no search), the one that moves the fewest DRAM bytes."""
    cfg = accel.load_config("default")
    wl = resnet18_layer("C8")
    plans = {k: _plan(wl, k, cfg) for k in knob_candidates(wl, cfg)}
    lowest = min(p.cycles() for p in plans.values())
    near = [k for k, p in plans.items() if p.cycles() <= lowest * (1 + NEAR_TIE)]
    pick = default_conv2d_knobs(wl, cfg)
    assert pick in near
    assert round(plans[pick].dram_bytes()) == min(round(plans[k].dram_bytes()) for k in near)
