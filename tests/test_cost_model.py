"""The heuristic's cycle model against the timing simulator.

``compiler.ops.heuristic.estimate_conv2d_cycles`` must rank the knob settings of ResNet-18's
layers as the simulator does: over a seeded sample of 40 of each layer's candidates (all of
them where there are fewer), Spearman's rank correlation between estimate and simulated cycles
is at least 0.9, and the setting the heuristic picks (``default_conv2d_knobs``) simulates within
3% of the fastest setting simulated for the layer (the sample and the model's four best). The
default run checks a sample of 6 on C11 of both configs; the full form, C1-C12 on
``default`` and ``vta_1x16x16``, is slow (the sample includes settings of 100,000
instructions).
"""

from __future__ import annotations

import numpy as np
import pytest

import accel
from accel.machine.config import HwConfig
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload
from compiler.ops.heuristic import (
    conv2d_cycles_floor,
    default_conv2d_knobs,
    estimate_conv2d_cycles,
    knob_candidates,
)
from compiler.ops.workloads import RESNET18_LAYERS, resnet18_layer

SAMPLE = 40
MIN_SPEARMAN = 0.9
PICK_SLACK = 1.03
CONFIGS = ("default", "vta_1x16x16")


def ranks(values: list[float]) -> np.ndarray:
    """Ranks from 0, ties sharing the mean of their ranks."""
    a = np.asarray(values, dtype=float)
    order = np.argsort(a, kind="stable")
    r = np.empty(len(a))
    r[order] = np.arange(len(a))
    for v in np.unique(a):
        tie = a == v
        r[tie] = r[tie].mean()
    return r


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (Pearson's on the ranks, ties averaged)."""
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def test_spearman_by_hand() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks (0, 1, 2, 3) against (0.5, 0.5, 3, 2): d = (-0.5, 0.5, -1, 1)
    assert spearman([1, 2, 3, 4], [5, 5, 9, 7]) == pytest.approx(
        np.corrcoef([0, 1, 2, 3], [0.5, 0.5, 3, 2])[0, 1])


def simulated_cycles(wl: Conv2dWorkload, k: Conv2dKnobs, cfg: HwConfig) -> int:
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (wl.batch, wl.in_channels, wl.height, wl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.out_channels, wl.in_channels, wl.kernel_h, wl.kernel_w),
                     dtype=np.int8)
    bias = rng.integers(-(1 << 12), 1 << 12, wl.out_channels, dtype=np.int32)
    _, report = accel.conv2d(x, w, bias=bias, stride=(wl.stride_h, wl.stride_w),
                             padding=(wl.pad_h, wl.pad_w), shift=wl.shift, relu=wl.relu,
                             config=cfg, backend="sim", knobs=k)
    return report.cycles


def check_layer(config: str, layer: str, sample: int) -> None:
    cfg = accel.load_config(config)
    wl = resnet18_layer(layer)
    cands = knob_candidates(wl, cfg)
    rng = np.random.default_rng(int(layer[1:]))
    chosen = [cands[i] for i in sorted(rng.choice(len(cands), min(sample, len(cands)),
                                                  replace=False))]
    sim = {k: simulated_cycles(wl, k, cfg) for k in chosen}
    est = [estimate_conv2d_cycles(wl, k, cfg) for k in chosen]
    rho = spearman(est, [sim[k] for k in chosen])
    pick = default_conv2d_knobs(wl, cfg)
    for k in [pick, *sorted(cands, key=lambda k: estimate_conv2d_cycles(wl, k, cfg))[:4]]:
        if k not in sim:
            sim[k] = simulated_cycles(wl, k, cfg)
    best = min(sim, key=sim.__getitem__)
    assert rho >= MIN_SPEARMAN, f"{config} {layer}: Spearman {rho:.3f} over {len(chosen)}"
    assert sim[pick] <= PICK_SLACK * sim[best], (
        f"{config} {layer}: the heuristic's {pick} takes {sim[pick]} cycles, "
        f"{best} {sim[best]}")


@pytest.mark.parametrize("config", CONFIGS)
def test_ranking_sampled(config: str) -> None:
    check_layer(config, "C11", 6)


@pytest.mark.parametrize("config", [*CONFIGS, "default_postproc", "tiny"])
@pytest.mark.parametrize("layer", ["C1", "C2", "C5", "C11"])
def test_the_floor_is_below_every_estimate(config: str, layer: str) -> None:
    """The heuristic's search stops at a floor above its best estimate: it finds the
    candidate with the lowest estimate only if no estimate is below its floor."""
    cfg = accel.load_config(config)
    wl = resnet18_layer(layer)
    for k in knob_candidates(wl, cfg)[::3]:
        assert estimate_conv2d_cycles(wl, k, cfg) >= conv2d_cycles_floor(wl, k, cfg), k


def test_the_search_finds_the_lowest_estimate() -> None:
    cfg = accel.load_config("default")
    wl = resnet18_layer("C8")
    cands = knob_candidates(wl, cfg)
    lowest = min(estimate_conv2d_cycles(wl, k, cfg) for k in cands)
    assert estimate_conv2d_cycles(wl, default_conv2d_knobs(wl, cfg), cfg) == lowest


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("layer", list(RESNET18_LAYERS))
def test_ranking_every_layer(config: str, layer: str) -> None:
    check_layer(config, layer, SAMPLE)
