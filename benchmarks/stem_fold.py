"""ResNet-18's stem (C1) with each window fold on the timing simulator: what the rule picks.

For each config, Table 2's C1 (3 -> 64 channels, 7x7, stride 2, padding 3, at ``--size``
square; seeded int8 data, weights and bias, shift 8, ReLU) as a one-node graph, optimised as
``optimize`` does but with ``fold_conv_windows`` forced to each candidate: none, the columns
(a 1x7 gather), the rows (7x1), the whole window (7x7). Each runs on the timing simulator
through ``Executable`` and must give the unfolded convolution's output exactly. Columns: the
folded convolution's input channels, the GEMM core's padded MACs per output value, the conv2d
heuristic's cycle estimate (the rule's cost), the simulated cycles, GEMM utilisation, DRAM
KiB and energy (uJ) of the convolution, the host milliseconds of the gather and its pack, and
the DRAM plan's peak (KiB). ``*`` marks the fold ``choose_fold`` picks.

    python benchmarks/stem_fold.py [--configs default,vta_1x16x16] [--size 224]
"""

from __future__ import annotations

import argparse

import numpy as np

import accel
from accel.machine.config import HwConfig
from compiler.graph.ir import Graph, Node, TensorType
from compiler.graph.ops import infer_types
from compiler.graph.passes import (
    default_supports,
    fold_conv_windows,
    fuse,
    pack_layout,
    partition,
    plan_memory,
)
from compiler.graph.passes.window import WindowFold, choose_fold
from compiler.ops.heuristic import default_conv2d_knobs, estimate_conv2d_cycles
from compiler.ops.registry import CONV2D
from compiler.ops.workloads import RESNET18_LAYERS
from runtime.executable import Executable

CANDIDATES: dict[str, WindowFold | None] = {
    "none": None, "columns": WindowFold(False, True), "rows": WindowFold(True, False),
    "window": WindowFold(True, True)}


def stem(size: int, seed: int) -> Graph:
    """C1 at ``size`` x ``size`` as a graph of one conv2d, ``x`` -> ``y``."""
    _, cin, cout, k, s = RESNET18_LAYERS["C1"]
    rng = np.random.default_rng(seed)
    params = {"w": rng.integers(-128, 128, (cout, cin, k, k), dtype=np.int8),
              "b": rng.integers(-2**12, 2**12, cout, dtype=np.int32)}
    attrs = {"weight": "w", "bias": "b", "stride": (s, s), "padding": (k // 2, k // 2),
             "shift": 8, "relu": True}
    return infer_types(Graph("stem", ["x"], ["y"], {"x": TensorType((1, cin, size, size),
                                                                      "int8")},
                             [Node("conv1", "conv2d", ["x"], ["y"], attrs)], params))


def measure(graph: Graph, cfg: HwConfig, x: np.ndarray) -> None:
    partitioned = partition(fuse(graph), default_supports(cfg))
    wl = CONV2D.workload(partitioned.nodes[0], partitioned)
    picked = choose_fold(wl, cfg)
    print(f"{cfg.name}: C1 at {graph.values['x'].shape[2]}x{graph.values['x'].shape[3]}, "
          f"{wl.macs / (wl.out_channels * wl.out_height * wl.out_width):.0f} MACs per output "
          "value")
    print(f"{'fold':9} {'chans':>5} {'padded':>6} {'estimate':>10} {'cycles':>10} {'util':>5} "
          f"{'DRAM KiB':>8} {'uJ':>8} {'gather ms':>9} {'plan KiB':>8}")
    want = None
    for label, fold in CANDIDATES.items():
        g = plan_memory(pack_layout(fold_conv_windows(partitioned, cfg,
                                                      lambda wl, cfg, f=fold: f), cfg))
        folded = fold.workload(wl) if fold is not None else wl
        estimate = estimate_conv2d_cycles(folded, default_conv2d_knobs(folded, cfg), cfg)
        out, report = Executable(g, cfg).run(x, backend="sim")
        if want is None:
            want = out["y"]
        assert np.array_equal(out["y"], want), f"{label}: not the unfolded conv's output"
        conv = next(layer for layer in report.layers if layer.name == "conv1")
        host = sum(layer.host_ms for layer in report.layers if layer.target == "cpu"
                   and layer.op in ("fold_window", "layout_pack"))
        _, cib, _ = folded.blocks(cfg)
        per_output = cib * cfg.block_in * folded.kernel_h * folded.kernel_w
        mark = "*" if fold == picked else " "
        plan_kib = g.attrs["memory_plan"]["peak_bytes"] / 1024
        print(f"{label + mark:9} {folded.in_channels:5d} {per_output:6d} {estimate:10,.0f} "
              f"{conv.cycles:10,d} {conv.gemm_utilization:5.3f} {conv.dram_kib:8.1f} "
              f"{conv.energy_uj:8.1f} {host:9.2f} {plan_kib:8.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="default,vta_1x16x16")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    graph = stem(args.size, args.seed)
    x = np.random.default_rng(args.seed + 1).integers(-128, 128, graph.values["x"].shape,
                                                      dtype=np.int8)
    for name in args.configs.split(","):
        measure(graph, accel.load_config(name), x)


if __name__ == "__main__":
    main()
