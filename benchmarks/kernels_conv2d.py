"""Time runtime.kernels.conv2d on the ResNet-18 layers of the TVM paper (Table 2, batch 1).

For each layer it prints the kernel's median time next to a float64 BLAS lower bound: the time
of only the float64 GEMM ``(OC x K) @ (K x OH*OW)`` on im2col matrices built before timing. The
ratio kernel / bound says how much the exact-int8 machinery (im2col, float32 chunks, wrap,
requantize) costs over the bare GEMM.

Run from the repository root: ``python benchmarks/kernels_conv2d.py [--repeats N]
[--layers C2,C3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    from runtime import kernels
except ImportError:  # not installed: run from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from runtime import kernels
from compiler.ops.workloads import RESNET18_LAYERS as TABLE2


@dataclass(frozen=True)
class ConvLayer:
    """One conv2d layer: square input of side ``size``, square kernel, batch 1."""

    name: str
    size: int
    in_channels: int
    out_channels: int
    kernel: int
    stride: int

    @property
    def padding(self) -> int:
        return self.kernel // 2  # 7x7 -> 3, 3x3 -> 1, 1x1 -> 0

    @property
    def out_size(self) -> int:
        return (self.size + 2 * self.padding - self.kernel) // self.stride + 1

    @property
    def reduction(self) -> int:
        """K of the GEMM: products summed per output element."""
        return self.in_channels * self.kernel * self.kernel

    @property
    def gmacs(self) -> float:
        return self.out_channels * self.reduction * self.out_size**2 / 1e9


RESNET18_LAYERS = [ConvLayer(name, *shape) for name, shape in TABLE2.items()]


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_layer(layer: ConvLayer, repeats: int, rng: np.random.Generator) -> tuple[float, float]:
    """Return (kernel seconds, float64 GEMM bound seconds) for one layer."""
    x = rng.integers(-128, 128, (1, layer.in_channels, layer.size, layer.size), dtype=np.int8)
    w = rng.integers(
        -128, 128, (layer.out_channels, layer.in_channels, layer.kernel, layer.kernel),
        dtype=np.int8,
    )
    bias = rng.integers(-1000, 1000, layer.out_channels, dtype=np.int32)
    kernel_s = median_seconds(
        lambda: kernels.conv2d(x, w, bias, layer.stride, layer.padding, shift=8, relu=True),
        repeats,
    )
    weights = rng.integers(-128, 128, (layer.out_channels, layer.reduction)).astype(np.float64)
    cols = rng.integers(-128, 128, (layer.reduction, layer.out_size**2)).astype(np.float64)
    bound_s = median_seconds(lambda: weights @ cols, repeats)
    return kernel_s, bound_s


def threadpool_line() -> str | None:
    """One line describing the BLAS thread pools, if threadpoolctl is installed."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    pools = [
        f"{p.get('internal_api')} {p.get('version')} x{p.get('num_threads')}"
        for p in threadpool_info()
    ]
    return "threadpools: " + ", ".join(pools)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per layer (median)")
    parser.add_argument("--layers", default="", help="comma-separated names, e.g. C2,C3")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    layers = RESNET18_LAYERS
    if args.layers:
        wanted = [name.strip().upper() for name in args.layers.split(",") if name.strip()]
        known = {layer.name for layer in RESNET18_LAYERS}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            parser.error(f"--layers: unknown layer(s) {unknown}, expected names among C1..C12")
        layers = [layer for layer in RESNET18_LAYERS if layer.name in wanted]

    print(f"numpy {np.__version__}, repeats {args.repeats} (median), batch 1")
    line = threadpool_line()
    if line:
        print(line)
    rng = np.random.default_rng(2018)
    header = f"{'layer':<6}{'GMACs':>8}{'kernel ms':>12}{'BLAS-bound ms':>15}{'ratio':>8}"
    print(header)
    print("-" * len(header))
    total_gmacs = total_kernel = total_bound = 0.0
    for layer in layers:
        kernel_s, bound_s = time_layer(layer, args.repeats, rng)
        total_gmacs += layer.gmacs
        total_kernel += kernel_s
        total_bound += bound_s
        print(
            f"{layer.name:<6}{layer.gmacs:>8.3f}{kernel_s * 1e3:>12.2f}{bound_s * 1e3:>15.2f}"
            f"{kernel_s / bound_s:>8.2f}"
        )
    print("-" * len(header))
    print(
        f"{'total':<6}{total_gmacs:>8.3f}{total_kernel * 1e3:>12.2f}{total_bound * 1e3:>15.2f}"
        f"{total_kernel / total_bound:>8.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
