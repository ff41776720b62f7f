"""Tests of runtime.kernels_gpu: every GPU kernel against the numpy kernel, bit for bit.

The numpy kernels (runtime.kernels) are the oracle: on every input the GPU kernels must return
identical arrays (dtype, shape, values) and raise identical errors. Skipped as a whole on
machines without a usable CUDA GPU and CuPy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from compiler.ops.workloads import RESNET18_LAYERS as TABLE2
from runtime import kernels, kernels_gpu

pytestmark = pytest.mark.gpu

if not kernels_gpu.available():
    pytest.skip(
        f"runtime.kernels_gpu needs a CUDA GPU with CuPy: {kernels_gpu.unavailable_reason()}",
        allow_module_level=True,
    )

import cupy as cp  # noqa: E402  (importable: the skip above did not fire)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

# ResNet-18 conv layers of the TVM paper (Table 2), batch 1: (name, size, C, OC, kernel, stride),
# padding kernel // 2.
RESNET18_LAYERS = [(name, *shape) for name, shape in TABLE2.items()]


def rand_int8(rng: np.random.Generator, shape: tuple[int, ...]) -> NDArray[np.int8]:
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def rand_bias(rng: np.random.Generator, n: int) -> NDArray[np.int32]:
    """Bias of a random scale: small, accumulator-sized, or anywhere in int32 (wraps)."""
    scale = int(rng.choice([100, 2**16, 2**31 - 1]))
    return rng.integers(-scale, scale, size=n, dtype=np.int32, endpoint=True)


def rand_shift(rng: np.random.Generator) -> int:
    return int(rng.choice([0, 31, *rng.integers(0, 32, size=4)]))


def same(name: str, *args: Any, **kwargs: Any) -> np.ndarray:
    """Run kernel ``name`` on the CPU and the GPU; assert identical numpy results."""
    want = getattr(kernels, name)(*args, **kwargs)
    got = getattr(kernels_gpu, name)(*args, **kwargs)
    assert type(got) is np.ndarray, type(got)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)
    return got


# --------------------------------------------------------------------------- availability


def test_available_and_reason_agree() -> None:
    assert kernels_gpu.available() is True
    assert kernels_gpu.unavailable_reason() is None


# --------------------------------------------------------------------------- conv2d


def random_conv_case(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    kh, kw = (int(v) for v in rng.integers(1, 8, size=2))
    ph, pw = (int(v) for v in rng.integers(0, 4, size=2))
    sh, sw = (int(v) for v in rng.integers(1, 4, size=2))
    square = rng.random() < 0.5  # int arguments half the time, (h, w) pairs otherwise
    if square:
        sw, pw = sh, ph
    n, c, oc = int(rng.integers(1, 4)), int(rng.integers(1, 71)), int(rng.integers(1, 71))
    h = int(rng.integers(max(1, kh - 2 * ph), 33))
    w = int(rng.integers(max(1, kw - 2 * pw), 33))
    return {
        "x": rand_int8(rng, (n, c, h, w)),
        "w": rand_int8(rng, (oc, c, kh, kw)),
        "bias": rand_bias(rng, oc) if rng.random() < 0.7 else None,
        "stride": sh if square else (sh, sw),
        "padding": ph if square else (ph, pw),
        "shift": rand_shift(rng),
        "relu": bool(rng.random() < 0.5),
    }


@pytest.mark.parametrize("seed", range(60))
def test_conv2d_random_shapes(seed: int) -> None:
    case = random_conv_case(seed)
    same("conv2d", **case)
    same("conv2d_acc", case["x"], case["w"], case["stride"], case["padding"])


@pytest.mark.parametrize(("name", "size", "c", "oc", "k", "s"), RESNET18_LAYERS)
def test_conv2d_resnet18_layers(name: str, size: int, c: int, oc: int, k: int, s: int) -> None:
    rng = np.random.default_rng(int(name[1:]))
    x = rand_int8(rng, (1, c, size, size))
    w = rand_int8(rng, (oc, c, k, k))
    bias = rng.integers(-(2**20), 2**20, size=oc, dtype=np.int32)
    for shift, relu in [(0, False), (9, True), (14, False)]:
        same("conv2d", x, w, bias, s, k // 2, shift, relu)
    same("conv2d_acc", x, w, s, k // 2)


def test_conv2d_acc_wraps_around_int32() -> None:
    # K = 16384 * 3 * 3 = 147456 products of (-128) * (-128): 2415919104 > INT32_MAX.
    x = np.full((1, 16384, 3, 3), -128, dtype=np.int8)
    w = np.full((2, 16384, 3, 3), -128, dtype=np.int8)
    acc = same("conv2d_acc", x, w)
    assert acc.ravel().tolist() == [147456 * 16384 - 2**32] * 2
    same("conv2d", x, w)
    same("conv2d", x, w, np.array([INT32_MAX, INT32_MIN], dtype=np.int32), shift=3)
    # Random large-magnitude values over K = 3500 * 7 * 7 = 171500, padding 3 (49 windows):
    # every product has magnitude >= 118 * 115, so every full-window sum leaves int32.
    rng = np.random.default_rng(3)
    x = rng.integers(-128, -117, size=(1, 3500, 7, 7), dtype=np.int8)
    w = rng.integers(-128, -114, size=(3, 3500, 7, 7), dtype=np.int8)
    w[1] = 120  # negative products: sums wrap the other way
    acc = same("conv2d_acc", x, w, padding=3)
    exact = (x.astype(np.int64) * w.astype(np.int64)).sum(axis=(1, 2, 3))
    assert (np.abs(exact) > INT32_MAX).all()
    np.testing.assert_array_equal(acc[0, :, 3, 3], (exact + 2**31) % 2**32 - 2**31)
    same("conv2d", x, w, rand_bias(rng, 3), 1, 3, 20, False)


@pytest.mark.parametrize("tile_bytes", [1, 3000, 200_000])
def test_conv2d_tiling_does_not_change_results(
    tile_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny tiles force one output row per GEMM; middling ones split images, or rows.
    monkeypatch.setitem(kernels._CONV_TILE_BYTES, "cupy", tile_bytes)
    rng = np.random.default_rng(tile_bytes)
    x = rand_int8(rng, (3, 5, 13, 11))
    w = rand_int8(rng, (7, 5, 3, 3))
    same("conv2d", x, w, rand_bias(rng, 7), (2, 1), 1, 4, True)
    same("conv2d_acc", x, w, 1, (0, 2))


def test_conv2d_accepts_views_and_empty_operands() -> None:
    rng = np.random.default_rng(11)
    x = rand_int8(rng, (2, 6, 12, 10))[:, ::2, :, ::-1]  # non-contiguous views
    w = np.asfortranarray(rand_int8(rng, (4, 3, 3, 3)))
    same("conv2d", x, w, None, 1, 1, 2, False)
    same("conv2d", np.zeros((0, 3, 5, 5), np.int8), rand_int8(rng, (4, 3, 3, 3)))
    same("conv2d", rand_int8(rng, (2, 3, 5, 5)), np.zeros((0, 3, 3, 3), np.int8))
    same("conv2d_acc", np.zeros((2, 0, 5, 5), np.int8), np.zeros((4, 0, 2, 2), np.int8))


# --------------------------------------------------------------------------- matmul / dense


@pytest.mark.parametrize("seed", range(30))
def test_matmul_dense_random_shapes(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    m, k, n = (int(v) for v in rng.integers(1, 300, size=3))
    if seed % 5 == 0:
        k = int(rng.integers(1000, 5000))  # past the numpy kernel's float32 chunk size
    a, b = rand_int8(rng, (m, k)), rand_int8(rng, (k, n))
    bias = rand_bias(rng, n) if rng.random() < 0.7 else None
    shift, relu = rand_shift(rng), bool(rng.random() < 0.5)
    same("matmul_acc", a, b)
    same("matmul", a, b, bias, shift, relu)
    same("dense", a, np.ascontiguousarray(b.T), bias, shift, relu)
    same("dense", a, b.T, bias, shift, relu)  # a transposed view as weights


def test_matmul_acc_wraps_around_int32() -> None:
    k = 140_000
    a = np.full((2, k), -128, dtype=np.int8)
    b = np.full((k, 3), -128, dtype=np.int8)
    assert same("matmul_acc", a, b).ravel().tolist() == [k * 2**14 - 2**32] * 6
    same("matmul", a, b, np.array([1, INT32_MAX, INT32_MIN], np.int32), 7, False)
    same("dense", a, np.ascontiguousarray(b.T), None, 0, True)
    k = 300_000
    rng = np.random.default_rng(7)
    a = rng.integers(-128, -100, size=(3, k), dtype=np.int8)
    b = rng.integers(-128, -60, size=(k, 4), dtype=np.int8)
    b[:, 0] = 120
    assert (np.abs(a.astype(np.int64) @ b.astype(np.int64)) > INT32_MAX).all()
    same("matmul_acc", a, b)
    same("matmul", a, b, rand_bias(rng, 4), 25, False)


def test_matmul_empty_operands() -> None:
    rng = np.random.default_rng(5)
    same("matmul_acc", rand_int8(rng, (3, 0)), rand_int8(rng, (0, 4)))
    same("matmul", rand_int8(rng, (0, 5)), rand_int8(rng, (5, 4)), None, 1, True)
    same("dense", rand_int8(rng, (3, 5)), rand_int8(rng, (0, 5)))


# --------------------------------------------------------------------------- requantize / add


@pytest.mark.parametrize("seed", range(20))
def test_requantize_add_relu_random(seed: int) -> None:
    rng = np.random.default_rng(2000 + seed)
    shape = tuple(int(v) for v in rng.integers(1, 9, size=int(rng.integers(1, 5))))
    acc = rng.integers(INT32_MIN, INT32_MAX, size=shape, dtype=np.int32, endpoint=True)
    acc.ravel()[: min(acc.size, 4)] = [INT32_MIN, INT32_MAX, -1, 0][: min(acc.size, 4)]
    shift, relu = rand_shift(rng), bool(rng.random() < 0.5)
    same("requantize", acc, shift, relu)
    axis = int(rng.integers(-len(shape), len(shape)))
    same("requantize", acc, shift, relu, rand_bias(rng, shape[axis]), axis)
    a, b = rand_int8(rng, shape), rand_int8(rng, shape)
    same("add", a, b, shift, relu)
    same("relu", a)


def test_requantize_edges_and_leaves_input_alone() -> None:
    values = [INT32_MIN, -(2**16), -129, -128, -127, -3, -1, 0, 1, 126, 127, 128, INT32_MAX]
    acc = np.array(values, dtype=np.int32)
    before = acc.copy()
    for shift in range(32):
        for relu in (False, True):
            same("requantize", acc, shift, relu)
    bias = np.array([[INT32_MAX, INT32_MIN]], dtype=np.int32)
    same("requantize", np.array([[INT32_MAX, INT32_MIN]], np.int32), 0, False,
         np.array([1, -1], np.int32), -1)
    same("requantize", bias.T.copy(), 3, True, np.array([INT32_MAX, 5], np.int32), 0)
    np.testing.assert_array_equal(acc, before)


def test_add_at_bounds() -> None:
    grid = np.array(np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)), dtype=np.int8)
    for shift in (0, 1, 7, 8, 31):
        for relu in (False, True):
            same("add", grid[0], grid[1], shift, relu)
    same("relu", grid)


# --------------------------------------------------------------------------- pooling


@pytest.mark.parametrize("seed", range(40))
def test_pools_random_shapes(seed: int) -> None:
    rng = np.random.default_rng(3000 + seed)
    kh, kw = (int(v) for v in rng.integers(1, 8, size=2))
    ph, pw = int(rng.integers(0, min(kh, 4))), int(rng.integers(0, min(kw, 4)))
    n, c = int(rng.integers(1, 4)), int(rng.integers(1, 71))
    h = int(rng.integers(max(1, kh - 2 * ph), 33))
    w = int(rng.integers(max(1, kw - 2 * pw), 33))
    x = rand_int8(rng, (n, c, h, w))
    if seed % 4 == 0:
        x[:] = -128  # windows of -128 only: the padding must not win or lose
    stride: Any = None if seed % 3 == 0 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    for name in ("max_pool2d", "avg_pool2d"):
        same(name, x, (kh, kw), stride, (ph, pw))
    if kh == kw and ph == pw:
        same("max_pool2d", x, kh, None, ph)
    same("global_avg_pool", x)


def test_global_avg_pool_floors_and_handles_big_extents() -> None:
    rng = np.random.default_rng(9)
    same("global_avg_pool", np.full((2, 3, 300, 300), -128, np.int8))
    same("global_avg_pool", np.full((1, 2, 1, 3), -1, np.int8))  # -3 // 3 and floors
    same("global_avg_pool", rand_int8(rng, (1, 4, 7, 1)))
    same("global_avg_pool", np.zeros((0, 3, 2, 2), np.int8))


# --------------------------------------------------------------------------- cupy in, cupy out


def _all_calls(rng: np.random.Generator) -> list[tuple[str, tuple[Any, ...]]]:
    x = rand_int8(rng, (2, 5, 9, 8))
    w = rand_int8(rng, (6, 5, 3, 3))
    a, b = rand_int8(rng, (7, 33)), rand_int8(rng, (33, 4))
    acc = rng.integers(INT32_MIN, INT32_MAX, size=(2, 6, 3, 3), dtype=np.int32)
    return [
        ("conv2d", (x, w, rand_bias(rng, 6), 2, 1, 5, True)),
        ("conv2d_acc", (x, w, 1, 1)),
        ("matmul", (a, b, rand_bias(rng, 4), 3, False)),
        ("matmul_acc", (a, b)),
        ("dense", (a, np.ascontiguousarray(b.T), None, 2, True)),
        ("requantize", (acc, 4, False, rand_bias(rng, 6), 1)),
        ("relu", (x,)),
        ("add", (x, x[::-1].copy(), 1, False)),
        ("max_pool2d", (x, 3, 2, 1)),
        ("avg_pool2d", (x, (2, 3), None, (1, 0))),
        ("global_avg_pool", (x,)),
    ]


@pytest.mark.parametrize("index", range(11))
def test_cupy_operands_give_cupy_results(index: int) -> None:
    name, args = _all_calls(np.random.default_rng(index))[index]
    want = getattr(kernels, name)(*args)
    on_device = tuple(cp.asarray(v) if isinstance(v, np.ndarray) else v for v in args)
    got = getattr(kernels_gpu, name)(*on_device)
    assert isinstance(got, cp.ndarray)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(cp.asnumpy(got), want)
    # One operand on the device is enough to keep the result there.
    mixed = (on_device[0], *args[1:])
    assert isinstance(getattr(kernels_gpu, name)(*mixed), cp.ndarray)


# --------------------------------------------------------------------------- identical errors

X = np.zeros((1, 3, 8, 8), dtype=np.int8)
W = np.zeros((4, 3, 3, 3), dtype=np.int8)
A = np.zeros((2, 5), dtype=np.int8)
B = np.zeros((5, 3), dtype=np.int8)
ACC = np.zeros((2, 3), dtype=np.int32)

BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("conv2d", (np.zeros((1, 3, 8), np.float32), W), {}),
    ("conv2d", (np.zeros((3, 8, 8), np.int8), W), {}),
    ("conv2d", ([[1]], W), {}),
    ("conv2d", (X, W.astype(np.int16)), {}),
    ("conv2d", (X, np.zeros((4, 2, 3, 3), np.int8)), {}),
    ("conv2d", (X, np.zeros((4, 3, 0, 3), np.int8)), {}),
    ("conv2d", (np.zeros((1, 3, 2, 4), np.int8), np.zeros((4, 3, 5, 5), np.int8)),
     {"padding": 1}),
    ("conv2d_acc", (np.zeros((1, 3, 2, 4), np.int8), np.zeros((4, 3, 5, 5), np.int8)),
     {"padding": 1}),
    ("conv2d", (X, W), {"stride": 0}),
    ("conv2d", (X, W), {"stride": (1, -2)}),
    ("conv2d", (X, W), {"stride": 1.5}),
    ("conv2d", (X, W), {"stride": True}),
    ("conv2d", (X, W), {"stride": (1, 2, 3)}),
    ("conv2d", (X, W), {"padding": -1}),
    ("conv2d", (X, W), {"shift": -1}),
    ("conv2d", (X, W), {"shift": 32}),
    ("conv2d", (X, W), {"shift": 2.0}),
    ("conv2d", (X, W), {"relu": 1}),
    ("conv2d", (X, W), {"bias": np.zeros(4, np.int64)}),
    ("conv2d", (X, W), {"bias": np.zeros(3, np.int32)}),
    ("conv2d_acc", (X, W), {"stride": (0, 1)}),
    ("matmul", (A, np.zeros((4, 3), np.int8)), {}),
    ("matmul_acc", (A.ravel(), B), {}),
    ("matmul", (A, B.astype(np.float64)), {}),
    ("matmul", (A, B), {"bias": np.zeros(2, np.int32)}),
    ("matmul", (A, B), {"shift": 40}),
    ("matmul", (A, B), {"relu": "yes"}),
    ("dense", (A, np.zeros((3, 4), np.int8)), {}),
    ("dense", (A.view(np.uint8), B.T), {}),
    ("dense", (A, B.T), {"bias": np.zeros(5, np.int32)}),
    ("dense", (A, B.T), {"shift": -2}),
    ("requantize", (ACC.astype(np.int64), 0), {}),
    ("requantize", (ACC, 0), {"bias": np.zeros(3, np.int32), "axis": 2}),
    ("requantize", (ACC, 0), {"bias": np.zeros(3, np.int32), "axis": 1.0}),
    ("requantize", (ACC, 0), {"bias": np.zeros(2, np.int32), "axis": 1}),
    ("requantize", (ACC, -3), {}),
    ("requantize", (ACC, 0), {"relu": None}),
    ("relu", (ACC,), {}),
    ("add", (A, A.T), {}),
    ("add", (A, A.astype(np.int32)), {}),
    ("add", (A, A), {"shift": 99}),
    ("global_avg_pool", (np.zeros((3, 8), np.int8),), {}),
    ("fold_window", (X, 3, (1, 0)), {}),
    ("fold_window", (X, 2.5), {}),
    ("fold_window", (X, 9), {}),
    ("fold_window", (X[0], 3), {}),
    ("global_avg_pool", (np.zeros((1, 3, 0, 4), np.int8),), {}),
    *[
        (pool, args, kwargs)
        for pool in ("max_pool2d", "avg_pool2d")
        for args, kwargs in [
            ((X, 2), {"padding": (2, 0)}),
            ((X, 0), {}),
            ((X, 2), {"stride": (0, 1)}),
            ((X, 9), {}),
            ((X.astype(np.float32), 2), {}),
            ((np.zeros((1, 3, 8), np.int8), 2), {}),
            ((X, (2, 2, 2)), {}),
        ]
    ],
]


def _error(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Exception:
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info.value


@pytest.mark.parametrize("on_device", [False, True], ids=["numpy", "cupy"])
@pytest.mark.parametrize(
    ("name", "args", "kwargs"), BAD_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)]
)
def test_errors_are_identical(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], on_device: bool
) -> None:
    want = _error(getattr(kernels, name), args, kwargs)
    if on_device:  # the same values as CuPy arrays: same error, as if they were numpy arrays
        args = tuple(cp.asarray(v) if isinstance(v, np.ndarray) else v for v in args)
        kwargs = {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    got = _error(getattr(kernels_gpu, name), args, kwargs)
    assert type(got) is type(want)
    assert re.fullmatch(re.escape(str(want)), str(got)), (str(got), str(want))


# --------------------------------------------------------------------------- transformers
def test_transformer_kernels_match_numpy() -> None:
    """Integer kernels and data movement bit for bit; float kernels within one float32 ulp."""
    rng = np.random.default_rng(37)
    a, b = rand_int8(rng, (2, 3, 17, 24)), rand_int8(rng, (2, 3, 24, 9))
    for shift, relu in ((0, False), (7, True), (31, False)):
        same("batch_matmul", a, b, shift, relu)
    same("transpose", a, (0, 2, 1, 3))
    same("reshape", a, (6, 17, 24))
    same("take", a, np.array(0), 2)
    same("slice_axis", a, 3, 1, 20, 3)
    same("concat", [a, a[:, :1]], 1)
    same("embedding", rng.integers(0, 50, (2, 7)), rand_int8(rng, (50, 16)))
    x = (rng.standard_normal((3, 5, 96)) * 4).astype(np.float32)
    gamma = rng.standard_normal(96).astype(np.float32)
    beta = rng.standard_normal(96).astype(np.float32)
    for name, args in (("softmax", (x, -1)), ("layer_norm", (x, gamma, beta, 1e-12)),
                       ("gelu", (x, "erf")), ("gelu", (x, "tanh")),
                       ("elementwise", ("div", x, gamma + 9)), ("elementwise", ("erf", x)),
                       ("reduce", ("reduce_mean", x, (2,), True)),
                       ("where", (gamma > 0, x, beta))):
        want = getattr(kernels, name)(*args)
        got = getattr(kernels_gpu, name)(*args)
        assert type(got) is np.ndarray and got.dtype == want.dtype == np.float32
        np.testing.assert_array_max_ulp(got, want, maxulp=1)


def test_fold_window_matches_numpy() -> None:
    """The stem's gathers (whole window, columns) and a stride-1 one, bit for bit; a CuPy
    operand keeps the result on the device."""
    x = rand_int8(np.random.default_rng(41), (2, 3, 23, 17))
    for kernel, stride, padding in (((7, 7), 2, 3), ((1, 7), (1, 2), (0, 3)), (3, 1, 0)):
        same("fold_window", x, kernel, stride, padding)
    got = kernels_gpu.fold_window(cp.asarray(x), (1, 7), (1, 2), (0, 3))
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), kernels.fold_window(x, (1, 7), (1, 2), (0, 3)))
