"""Time runtime.kernels.conv2d (numpy) against runtime.kernels_gpu.conv2d (CuPy) on ResNet-18.

The layers are C1-C12 of the TVM paper (Table 2, batch 1; see benchmarks/kernels_conv2d.py),
each with a bias, shift 8 and ReLU. For each layer it prints the median time of

- ``numpy``: the numpy kernel;
- ``gpu host``: the GPU kernel on numpy arrays, so including the copies to and from the GPU
  (what the runtime's ``--fallback gpu`` pays per call);
- ``gpu dev``: the GPU kernel on operands already on the GPU, result left there (synchronized
  before the clock is read);

and the speed-ups numpy / gpu. Every GPU result is first checked to equal the numpy one.

Run from the repository root on a machine with a CUDA GPU and CuPy:
``python benchmarks/kernels_gpu.py [--repeats N] [--layers C2,C3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels_conv2d import RESNET18_LAYERS, ConvLayer

try:
    from runtime import kernels, kernels_gpu
except ImportError:  # not installed: run from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from runtime import kernels, kernels_gpu


def median_seconds(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    """Median wall time of ``fn(); sync()`` over ``repeats`` runs, after two warm-up runs."""
    for _ in range(2):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_layer(
    layer: ConvLayer, repeats: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """Return (numpy, gpu on host arrays, gpu on device arrays) median seconds for one layer."""
    import cupy as cp

    x = rng.integers(-128, 128, (1, layer.in_channels, layer.size, layer.size), dtype=np.int8)
    w = rng.integers(
        -128, 128, (layer.out_channels, layer.in_channels, layer.kernel, layer.kernel),
        dtype=np.int8,
    )
    bias = rng.integers(-1000, 1000, layer.out_channels, dtype=np.int32)
    args = (layer.stride, layer.padding, 8, True)
    got = kernels_gpu.conv2d(x, w, bias, *args)
    want = kernels.conv2d(x, w, bias, *args)
    if not (got.dtype == want.dtype and np.array_equal(got, want)):
        raise SystemExit(f"{layer.name}: the GPU result differs from the numpy one")
    xd, wd, bd = cp.asarray(x), cp.asarray(w), cp.asarray(bias)
    sync = cp.cuda.Device().synchronize
    # GPU first: BLAS threads left spinning by the numpy kernel would slow the host-side
    # (Python, launch) work that dominates the GPU kernel's time at batch 1.
    dev_s = median_seconds(lambda: kernels_gpu.conv2d(xd, wd, bd, *args), repeats, sync)
    host_s = median_seconds(lambda: kernels_gpu.conv2d(x, w, bias, *args), repeats, sync)
    numpy_s = median_seconds(lambda: kernels.conv2d(x, w, bias, *args), repeats, lambda: None)
    return numpy_s, host_s, dev_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per layer (median)")
    parser.add_argument("--layers", default="", help="comma-separated names, e.g. C2,C3")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if not kernels_gpu.available():
        print(f"no usable GPU: {kernels_gpu.unavailable_reason()}")
        return 1
    layers = RESNET18_LAYERS
    if args.layers:
        wanted = [name.strip().upper() for name in args.layers.split(",") if name.strip()]
        unknown = sorted(set(wanted) - {layer.name for layer in RESNET18_LAYERS})
        if unknown:
            parser.error(f"--layers: unknown layer(s) {unknown}, expected names among C1..C12")
        layers = [layer for layer in RESNET18_LAYERS if layer.name in wanted]

    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    print(
        f"numpy {np.__version__}, cupy {cp.__version__}, GPU {props['name'].decode()}, "
        f"repeats {args.repeats} (median), batch 1, conv2d with bias, shift 8, ReLU"
    )
    rng = np.random.default_rng(2018)
    header = (
        f"{'layer':<6}{'GMACs':>7}{'numpy ms':>10}{'gpu host ms':>13}{'gpu dev ms':>12}"
        f"{'numpy/host':>12}{'numpy/dev':>11}"
    )
    print(header)
    print("-" * len(header))
    totals = [0.0, 0.0, 0.0]
    for layer in layers:
        times = time_layer(layer, args.repeats, rng)
        totals = [t + s for t, s in zip(totals, times, strict=True)]
        numpy_s, host_s, dev_s = times
        print(
            f"{layer.name:<6}{layer.gmacs:>7.3f}{numpy_s * 1e3:>10.2f}{host_s * 1e3:>13.3f}"
            f"{dev_s * 1e3:>12.3f}{numpy_s / host_s:>12.1f}{numpy_s / dev_s:>11.1f}"
        )
    print("-" * len(header))
    gmacs = sum(layer.gmacs for layer in layers)
    numpy_s, host_s, dev_s = totals
    print(
        f"{'total':<6}{gmacs:>7.3f}{numpy_s * 1e3:>10.2f}{host_s * 1e3:>13.3f}"
        f"{dev_s * 1e3:>12.3f}{numpy_s / host_s:>12.1f}{numpy_s / dev_s:>11.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
