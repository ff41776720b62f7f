"""The heuristic's cycle model against the timing simulator, on ResNet-18's layers.

For each layer and config: a seeded sample of the layer's knob candidates
(``compiler.ops.heuristic.knob_candidates`` whose programs have at most ``--max-insns``
instructions by the model's count, ``conv2d_instructions``; every such candidate where there
are fewer; the seed the layer's number) is compiled and simulated (``accel.conv2d(...,
backend="sim")``), and compared with ``estimate_conv2d_cycles``:

- ``spearman``: Spearman's rank correlation between estimate and simulated cycles over the
  sample (ties share their mean rank);
- ``pick``: the simulated cycles of the heuristic's choice (``default_conv2d_knobs``) over the
  fewest simulated for the layer, the sample and the model's four best candidates together
  (1.000: the choice is the fastest setting simulated);
- ``est/sim``: the estimate of the choice over its simulated cycles.

The issue's bar: Spearman at least 0.9 and pick at most 1.03 on every layer of C1-C12, on
default and vta_1x16x16; ``tests/test_cost_model.py`` asserts it with this module's
:func:`rank_layer`. The instruction cap is what makes that affordable: the timing simulator
takes about 0.2-0.3 ms an instruction, a 40-setting sample of all candidates of every layer
holds 16.6 million instructions (over an hour on two cores), a sample of those up to 10,000
instructions 3.0 million. Those left out are the finest tilings: by the model's estimate at
least 2x slower than the layer's best on most layers, but within 1-2% of it on the large 3x3
layers (C1, C2, C6, C9 on default), which need many tiles whatever the tiling. The heuristic's
pick and the model's best are simulated whatever their size. ``--jobs`` spreads the
candidates over processes.

    python benchmarks/cost_model.py [--configs default,vta_1x16x16] [--layers C1,C2]
                                    [--sample 40] [--jobs 2] [--max-insns 10000]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

import accel
from compiler.ops.conv2d import Conv2dKnobs
from compiler.ops.heuristic import (
    conv2d_instructions,
    default_conv2d_knobs,
    estimate_conv2d_cycles,
    knob_candidates,
)
from compiler.ops.workloads import RESNET18_LAYERS, resnet18_layer

TOP = 4
"""The model's best candidates simulated beside the sample (the pick's rivals)."""

MAX_INSNS = 10_000
"""The sampled population: candidates whose programs have at most this many instructions."""


def ranks(values: list[float]) -> np.ndarray:
    """Ranks from 0, ties sharing the mean of their ranks."""
    a = np.asarray(values, dtype=float)
    r = np.empty(len(a))
    r[np.argsort(a, kind="stable")] = np.arange(len(a))
    for v in np.unique(a):
        tie = a == v
        r[tie] = r[tie].mean()
    return r


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation: Pearson's on the ranks, ties averaged."""
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def simulate(config: str, layer: str, k: Conv2dKnobs) -> int:
    """Cycles of ``layer`` under ``k`` on the timing simulator (random int8 data)."""
    cfg = accel.load_config(config)
    wl = resnet18_layer(layer)
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (wl.batch, wl.in_channels, wl.height, wl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.out_channels, wl.in_channels, wl.kernel_h, wl.kernel_w),
                     dtype=np.int8)
    bias = rng.integers(-(1 << 12), 1 << 12, wl.out_channels, dtype=np.int32)
    _, report = accel.conv2d(x, w, bias=bias, stride=(wl.stride_h, wl.stride_w),
                             padding=(wl.pad_h, wl.pad_w), shift=wl.shift, relu=wl.relu,
                             config=cfg, backend="sim", knobs=k)
    return report.cycles


@dataclass(frozen=True)
class LayerRank:
    """How the model ranked one layer's candidates (see the module docstring)."""

    config: str
    layer: str
    candidates: int
    sampled: int
    spearman: float
    pick: Conv2dKnobs
    pick_cycles: int
    pick_estimate: float
    best: Conv2dKnobs
    best_cycles: int

    @property
    def pick_ratio(self) -> float:
        return self.pick_cycles / self.best_cycles


def rank_layer(config: str, layer: str, sample: int, jobs: int = 1,
               max_insns: int = MAX_INSNS) -> LayerRank:
    """Simulate a seeded sample of ``layer``'s candidates of at most ``max_insns``
    instructions, the heuristic's choice and the model's :data:`TOP` best on ``config``;
    compare with the estimates."""
    cfg = accel.load_config(config)
    wl = resnet18_layer(layer)
    cands = [k for k in knob_candidates(wl, cfg) if conv2d_instructions(wl, k, cfg) <= max_insns]
    rng = np.random.default_rng(int(layer[1:]))
    chosen = [cands[i] for i in sorted(rng.choice(len(cands), min(sample, len(cands)),
                                                  replace=False))]
    est = {k: estimate_conv2d_cycles(wl, k, cfg) for k in cands}
    pick = default_conv2d_knobs(wl, cfg)
    extra = [k for k in [pick, *sorted(cands, key=est.__getitem__)[:TOP]] if k not in chosen]
    todo = chosen + list(dict.fromkeys(extra))
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            cycles = list(pool.map(simulate, [config] * len(todo), [layer] * len(todo), todo))
    else:
        cycles = [simulate(config, layer, k) for k in todo]
    sim = dict(zip(todo, cycles, strict=True))
    best = min(sim, key=sim.__getitem__)
    return LayerRank(config, layer, len(cands), len(chosen),
                     spearman([est[k] for k in chosen], [sim[k] for k in chosen]),
                     pick, sim[pick], est[pick], best, sim[best])


def knobs_text(k: Conv2dKnobs) -> str:
    return (f"b{k.tile_b} h{k.tile_h} w{k.tile_w} ci{k.tile_ci} co{k.tile_co} "
            f"vt{k.oc_nthread}x{k.h_nthread}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="default,vta_1x16x16")
    ap.add_argument("--layers", default=",".join(RESNET18_LAYERS))
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--max-insns", type=int, default=MAX_INSNS)
    args = ap.parse_args(argv)
    start = time.time()
    print(f"{'config':12s} {'layer':5s} {'cands':>5s} {'n':>3s} {'spearman':>8s} "
          f"{'pick':>10s} {'best':>10s} {'pick':>6s} {'est/sim':>7s}  knobs (pick)")
    rows = []
    for config in args.configs.split(","):
        for layer in args.layers.split(","):
            t = time.time()
            r = rank_layer(config, layer, args.sample, args.jobs, args.max_insns)
            rows.append(r)
            print(f"{config:12s} {layer:5s} {r.candidates:5d} {r.sampled:3d} {r.spearman:8.3f} "
                  f"{r.pick_cycles:10,d} {r.best_cycles:10,d} {r.pick_ratio:6.3f} "
                  f"{r.pick_estimate / r.pick_cycles:7.3f}  {knobs_text(r.pick)}", flush=True)
            print(f"  ({time.time() - t:.0f} s)", file=sys.stderr, flush=True)
    worst_rho = min(rows, key=lambda r: r.spearman)
    worst_pick = max(rows, key=lambda r: r.pick_ratio)
    print(f"summary: {len(rows)} layers; lowest Spearman {worst_rho.spearman:.3f} "
          f"({worst_rho.config} {worst_rho.layer}), highest pick/best {worst_pick.pick_ratio:.3f} "
          f"({worst_pick.config} {worst_pick.layer}); {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
