"""ResNet-18 conv layers (TVM's Table 2, C2-C12) on the timing simulator, 1 vs 2 virtual threads.

For every layer and config, three knob settings are compiled and run through ``accel.conv2d``
with ``backend="sim"``:

- ``1T``: the fitting candidate with ``oc_nthread == h_nthread == 1`` that
  ``compiler.ops.heuristic.estimate_conv2d_cycles`` ranks best (serialised load/compute/store);
- ``2T``: the best candidate with two virtual threads (latency hiding);
- the default heuristic (``default_conv2d_knobs``): one of the two, marked ``*`` (else a row of
  its own).

Columns: cycles, GEMM utilisation (``Report.gemm_utilization``), ALU busy (the share of the
cycles the compute module issues ALU micro-ops, ``Report.alu_busy``), the roofline bound and
efficiency (``../shared/ROOFLINE.md``: the conv2d operator's ``bound``, the same figure
``accel run`` reports per layer, over the cycles), DRAM bytes moved (sum of
``Report.bytes``, micro-op loads included) against the compulsory minimum (every input, weight,
bias and output byte moved once, in the blocked layouts with channels padded to the block; input
pixels that no window reads excluded), their ratio, compile time (``Report.compile_seconds``,
with the compile cache cleared per layer) and the knobs. One summary line per config gives the
mean GEMM utilisation over the layers for 1T, 2T and the heuristic (the issue's target: >= 0.90
on default with the heuristic; TVM reported 0.70 -> 0.88 from latency hiding), and the
heuristic's total cycles, roofline efficiency (sum of bounds over sum of cycles) and ALU busy
share. With ``--check``
(the default) every output is compared with ``runtime.kernels.conv2d``.

    python benchmarks/resnet_layers.py [--configs default,vta_1x16x16] [--layers C2,C9]
                                       [--no-check] [--seed 0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

import accel
from accel.machine.config import HwConfig
from compiler.ops.compiled import cache_clear
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload
from compiler.ops.heuristic import default_conv2d_knobs, estimate_conv2d_cycles, knob_candidates
from compiler.ops.registry import accel_op
from compiler.ops.workloads import RESNET18_LAYERS
from runtime import kernels

DEFAULT_LAYERS = [f"C{i}" for i in range(2, 13)]
DEFAULT_CONFIGS = ["default", "vta_1x16x16"]
SHIFT = 8


@dataclass
class Row:
    """One (layer, knob setting) measurement."""

    layer: str
    variant: str
    heuristic: bool
    knobs: Conv2dKnobs
    cycles: int
    utilization: float
    moved: int
    minimum: int
    compile_seconds: float
    exact: bool | None
    alu_busy: int
    bound: float

    @property
    def efficiency(self) -> float:
        """Roofline efficiency (ROOFLINE.md): the bound over the cycles."""
        return self.bound / self.cycles


def workload(layer: str) -> Conv2dWorkload:
    """The layer as compiled: batch 1, ResNet padding, bias, shift 8, ReLU."""
    size, cin, cout, k, s = RESNET18_LAYERS[layer]
    pad = {7: 3, 3: 1, 1: 0}[k]
    return Conv2dWorkload(1, cin, size, size, cout, k, k, s, s, pad, pad, True, SHIFT, True)


def _used(size: int, out: int, kernel: int, stride: int, pad: int) -> int:
    """How many of ``size`` input rows (or columns) some output window reads."""
    return len({o * stride + k - pad for o in range(out) for k in range(kernel)}
               & set(range(size)))


def compulsory_bytes(wl: Conv2dWorkload, cfg: HwConfig) -> int:
    """Input, weight, bias and output bytes moved exactly once, in ``cfg``'s blocked layouts.

    Input pixels that no window reads (a strided 1x1 conv skips rows and columns) are not
    compulsory; padding is made on chip, never moved.
    """
    nb, cib, cob = wl.blocks(cfg)
    rows = _used(wl.height, wl.out_height, wl.kernel_h, wl.stride_h, wl.pad_h)
    cols = _used(wl.width, wl.out_width, wl.kernel_w, wl.stride_w, wl.pad_w)
    inp = nb * cib * rows * cols * cfg.inp_tile_bytes
    wgt = cob * cib * wl.kernel_h * wl.kernel_w * cfg.wgt_tile_bytes
    bias = cob * cfg.acc_tile_bytes if wl.bias else 0
    out = nb * cob * wl.out_height * wl.out_width * cfg.out_tile_bytes
    return inp + wgt + bias + out


def best_knobs(wl: Conv2dWorkload, cfg: HwConfig, nthreads: int) -> Conv2dKnobs | None:
    """The fitting candidate with ``nthreads`` virtual threads and the fewest estimated cycles,
    ties broken as the default heuristic breaks them."""
    cands = [k for k in knob_candidates(wl, cfg) if k.nthreads == nthreads]
    if not cands:
        return None
    return min(cands, key=lambda k: (estimate_conv2d_cycles(wl, k, cfg), k.tile_ci))


def knobs_text(k: Conv2dKnobs) -> str:
    return (f"b{k.tile_b} h{k.tile_h} w{k.tile_w} ci{k.tile_ci} co{k.tile_co} "
            f"vt{k.oc_nthread}x{k.h_nthread}")


def measure_layer(layer: str, cfg: HwConfig, check: bool, rng: np.random.Generator) -> list[Row]:
    """Run the layer with the 1-thread, 2-thread and heuristic knobs (each distinct one once)."""
    wl = workload(layer)
    x = rng.integers(-128, 128, (wl.batch, wl.in_channels, wl.height, wl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.out_channels, wl.in_channels, wl.kernel_h, wl.kernel_w),
                     dtype=np.int8)
    bias = rng.integers(-(2**12), 2**12, wl.out_channels, dtype=np.int32)
    conv_args = {"bias": bias, "stride": (wl.stride_h, wl.stride_w),
                 "padding": (wl.pad_h, wl.pad_w), "shift": wl.shift, "relu": wl.relu}
    expected = kernels.conv2d(x, w, **conv_args) if check else None
    heuristic = default_conv2d_knobs(wl, cfg)
    variants: list[tuple[str, Conv2dKnobs]] = []
    for label, nthreads in (("1T", 1), ("2T", 2)):
        knobs = best_knobs(wl, cfg, nthreads)
        if knobs is not None:
            variants.append((label, knobs))
    if all(knobs != heuristic for _, knobs in variants):
        variants.append(("heur", heuristic))
    minimum = compulsory_bytes(wl, cfg)
    bound = accel_op("conv2d").bound(wl, cfg)
    cache_clear()
    rows = []
    for label, knobs in variants:
        y, report = accel.conv2d(x, w, **conv_args, config=cfg, backend="sim", knobs=knobs)
        assert report.cycles is not None and report.gemm_utilization is not None
        rows.append(Row(layer, label, knobs == heuristic, knobs, report.cycles,
                        report.gemm_utilization, sum(report.bytes.values()), minimum,
                        report.compile_seconds,
                        None if expected is None else bool(np.array_equal(y, expected)),
                        report.alu_busy or 0, bound))
    return rows


def print_table(cfg: HwConfig, rows: list[Row]) -> None:
    print(f"\nconfig {cfg.name}  ({cfg.batch}x{cfg.block_in}x{cfg.block_out} core, "
          f"{cfg.peak_macs_per_cycle} MACs/cycle, {cfg.clock_mhz:g} MHz)")
    header = (f"{'layer':<5} {'vt':<5} {'cycles':>10} {'GEMM util':>9} {'ALU busy':>8} "
              f"{'bound':>9} {'roof':>5} {'DRAM bytes':>11} {'minimum':>10} {'ratio':>6} "
              f"{'compile s':>9}  {'exact':<5}  knobs")
    print(header)
    print("-" * len(header))
    for r in rows:
        exact = "-" if r.exact is None else ("yes" if r.exact else "NO")
        mark = "*" if r.heuristic else " "
        print(f"{r.layer:<5} {r.variant + mark:<5} {r.cycles:>10,} {r.utilization:>9.3f} "
              f"{r.alu_busy / r.cycles:>8.3f} {r.bound:>9,.0f} {r.efficiency:>5.3f} "
              f"{r.moved:>11,} {r.minimum:>10,} {r.moved / r.minimum:>6.2f} "
              f"{r.compile_seconds:>9.3f}  {exact:<5}  {knobs_text(r.knobs)}")


def summary(cfg: HwConfig, rows: list[Row]) -> str:
    def mean(select: list[Row]) -> str:
        return f"{statistics.fmean(r.utilization for r in select):.3f}" if select else "n/a"

    def roof(select: list[Row]) -> str:
        cycles = sum(r.cycles for r in select)
        return f"{sum(r.bound for r in select) / cycles:.3f}" if cycles else "n/a"

    def alu(select: list[Row]) -> str:
        cycles = sum(r.cycles for r in select)
        return f"{sum(r.alu_busy for r in select) / cycles:.3f}" if cycles else "n/a"

    layers = sorted({r.layer for r in rows}, key=lambda name: int(name[1:]))
    one = [r for r in rows if r.variant == "1T"]
    two = [r for r in rows if r.variant == "2T"]
    heur = [r for r in rows if r.heuristic]
    cycles = {label: sum(r.cycles for r in sel) for label, sel in (("1T", one), ("2T", two))}
    speedup = cycles["1T"] / cycles["2T"] if one and two and len(one) == len(two) else float("nan")
    numbers = [int(name[1:]) for name in layers]
    consecutive = len(layers) > 2 and numbers == list(range(numbers[0], numbers[-1] + 1))
    span = f"{layers[0]}-{layers[-1]}" if consecutive else ",".join(layers)
    spatial = [r for r in heur if RESNET18_LAYERS[r.layer][3] > 1]
    return (f"summary {cfg.name}: mean GEMM utilisation over {span} ({len(layers)} layers): "
            f"1 thread {mean(one)}, 2 threads {mean(two)}, default heuristic {mean(heur)} "
            f"(its {len(spatial)} layers with k > 1: {mean(spatial)}); "
            f"total cycles 1T/2T = {speedup:.2f}x; heuristic: {sum(r.cycles for r in heur):,} "
            f"cycles, roofline efficiency {roof(heur)} (sum of bounds / sum of cycles), "
            f"ALU busy {alu(heur)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help="comma-separated config names or YAML paths "
                             f"(default {','.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--layers", default=",".join(DEFAULT_LAYERS),
                        help="comma-separated layers out of C1-C12 (default C2-C12)")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                        help="compare every output with runtime.kernels.conv2d (default on)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random tensors")
    args = parser.parse_args()
    layers = [name.strip().upper() for name in args.layers.split(",") if name.strip()]
    unknown = [name for name in layers if name not in RESNET18_LAYERS]
    if unknown:
        parser.error(f"unknown layers {', '.join(unknown)}; expected some of C1-C12")
    start = time.perf_counter()
    failures = 0
    summaries = []
    for name in (c.strip() for c in args.configs.split(",") if c.strip()):
        cfg = accel.load_config(name)
        rng = np.random.default_rng(args.seed)
        rows = [row for layer in layers for row in measure_layer(layer, cfg, args.check, rng)]
        print_table(cfg, rows)
        failures += sum(r.exact is False for r in rows)
        summaries.append(summary(cfg, rows))
        print(summaries[-1])
    print()
    for line in summaries:
        print(line)
    if args.check:
        print("check: " + ("all outputs bit-exact with runtime.kernels.conv2d" if not failures
                           else f"FAILED - {failures} outputs differ from runtime.kernels"))
    print(f"wall time {time.perf_counter() - start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
