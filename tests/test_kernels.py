"""Tests of the kernels on both array namespaces, numpy and cupy, from one file.

First the kernels' own tests (structure, exact error text, behaviour against loop_reference),
each on every namespace through the ``ops`` fixture: `runtime.kernels` (numpy) and
`runtime.kernels_gpu` (the same kernels on cupy, taking and returning numpy arrays). Then the
GPU fallback against the numpy kernels, bit for bit (identical arrays, dtypes, shapes and errors),
through the ``device`` fixture. The cupy ones are marked ``gpu`` and skipped, with the reason,
where no CUDA GPU with CuPy is usable.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any

import loop_reference as ref
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from compiler.ops.workloads import RESNET18_LAYERS as TABLE2
from runtime import kernels, kernels_gpu

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
HYPOTHESIS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def rand_int8(rng: np.random.Generator, shape: tuple[int, ...]) -> NDArray[np.int8]:
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def rand_bias(rng: np.random.Generator, n: int, scale: int = 5000) -> NDArray[np.int32]:
    return rng.integers(-scale, scale + 1, size=n, dtype=np.int32)


def namespace_name(ops: ModuleType) -> str:
    """The array namespace an ``ops`` module computes on."""
    return "numpy" if ops is kernels else "cupy"


def _gpu_kernels() -> ModuleType:
    """`runtime.kernels_gpu`, or a skip saying why no GPU is usable."""
    if not kernels_gpu.available():
        pytest.skip(f"runtime.kernels_gpu needs a CUDA GPU with CuPy: "
                    f"{kernels_gpu.unavailable_reason()}")
    return kernels_gpu


GPU = pytest.param("cupy", marks=pytest.mark.gpu)


@pytest.fixture(scope="module", params=["numpy", GPU])
def ops(request: pytest.FixtureRequest) -> ModuleType:
    """The kernels on one namespace, taking and returning numpy arrays."""
    return kernels if request.param == "numpy" else _gpu_kernels()


@pytest.fixture(scope="module", params=[GPU])
def device(request: pytest.FixtureRequest) -> ModuleType:
    """The kernels on each namespace but numpy's, to compare with the numpy oracle."""
    return _gpu_kernels()


def exact_wrapped(a: NDArray[np.int8], b: NDArray[np.int8]) -> NDArray[np.int32]:
    """Independent oracle for large K: exact int64 product, wrapped modulo 2**32."""
    exact = a.astype(np.int64) @ b.astype(np.int64)
    return ((exact + 2**31) % 2**32 - 2**31).astype(np.int32)


# --------------------------------------------------------------------------- structure


def test_public_names_exist_and_return_documented_dtypes_and_shapes(ops: ModuleType) -> None:
    for name in ops.__all__:
        assert hasattr(ops, name), name
    assert set(kernels_gpu.__all__) - {"available", "namespace", "unavailable_reason"} <= set(
        kernels.__all__)
    rng = np.random.default_rng(0)
    x = rand_int8(rng, (2, 3, 9, 7))
    w = rand_int8(rng, (5, 3, 3, 3))
    acc = ops.conv2d_acc(x, w, stride=2, padding=1)
    assert (acc.dtype, acc.shape) == (np.int32, (2, 5, 5, 4))
    out = ops.conv2d(x, w, stride=2, padding=1)
    assert (out.dtype, out.shape) == (np.int8, (2, 5, 5, 4))
    assert out.flags.c_contiguous
    a, b = rand_int8(rng, (4, 6)), rand_int8(rng, (6, 3))
    assert ops.matmul_acc(a, b).dtype == np.int32
    assert ops.matmul(a, b).shape == (4, 3)
    assert ops.dense(a, b.T).shape == (4, 3)
    assert ops.max_pool2d(x, 2).shape == (2, 3, 4, 3)
    assert ops.avg_pool2d(x, 3, stride=2, padding=1).shape == (2, 3, 5, 4)
    assert ops.global_avg_pool(x).shape == (2, 3, 1, 1)
    assert ops.add(x, x).dtype == np.int8
    assert ops.relu(x).dtype == np.int8
    assert kernels.FLOAT32_CHUNK_K * 128 * 128 == 2**24


# --------------------------------------------------------------------------- error messages


X = np.zeros((1, 3, 8, 8), dtype=np.int8)
W = np.zeros((4, 3, 3, 3), dtype=np.int8)
A = np.zeros((2, 5), dtype=np.int8)
B = np.zeros((5, 3), dtype=np.int8)


def _raises(
    error: type[Exception], message: str
) -> AbstractContextManager[pytest.ExceptionInfo[Exception]]:
    """pytest.raises pinning the whole message text."""
    return pytest.raises(error, match="^" + re.escape(message) + "$")


def test_conv2d_rejects_float_input(ops: ModuleType) -> None:
    x = np.zeros((1, 3, 8), dtype=np.float32)
    with _raises(TypeError, "conv2d: x must be int8 NCHW, got float32 with shape (1, 3, 8)"):
        ops.conv2d(x, W)


def test_conv2d_rejects_wrong_ndim(ops: ModuleType) -> None:
    x = np.zeros((3, 8, 8), dtype=np.int8)
    with _raises(ValueError, "conv2d: x must be int8 NCHW, got int8 with shape (3, 8, 8)"):
        ops.conv2d(x, W)


def test_conv2d_rejects_non_array_and_wrong_weight_dtype(ops: ModuleType) -> None:
    with _raises(TypeError, "conv2d: x must be int8 NCHW, got list"):
        ops.conv2d([[1]], W)  # type: ignore[arg-type]
    w = W.astype(np.int16)
    with _raises(TypeError, "conv2d: w must be int8 OIHW, got int16 with shape (4, 3, 3, 3)"):
        ops.conv2d(X, w)


def test_conv2d_rejects_channel_mismatch(ops: ModuleType) -> None:
    w = np.zeros((4, 2, 3, 3), dtype=np.int8)
    message = (
        "conv2d: w must have 3 input channels to match x of shape (1, 3, 8, 8), "
        "got w of shape (4, 2, 3, 3)"
    )
    with _raises(ValueError, message):
        ops.conv2d(X, w)


def test_conv2d_rejects_empty_kernel(ops: ModuleType) -> None:
    w = np.zeros((4, 3, 0, 3), dtype=np.int8)
    with _raises(ValueError, "conv2d: w must have a kernel of at least 1x1, got w of shape "
                 "(4, 3, 0, 3)"):
        ops.conv2d(X, w)


def test_conv2d_rejects_kernel_larger_than_padded_input(ops: ModuleType) -> None:
    x = np.zeros((1, 3, 2, 4), dtype=np.int8)
    w = np.zeros((4, 3, 5, 5), dtype=np.int8)
    message = (
        "conv2d: kernel 5x5 must fit the padded input, got padded input 4x6 "
        "(input 2x4, padding (1, 1))"
    )
    with _raises(ValueError, message):
        ops.conv2d(x, w, padding=1)
    with _raises(ValueError, message.replace("conv2d:", "conv2d_acc:")):
        ops.conv2d_acc(x, w, padding=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"stride": 0}, ValueError,
         "conv2d: stride must be a positive int or an (h, w) pair of them, got 0"),
        ({"stride": (1, -2)}, ValueError,
         "conv2d: stride must be a positive int or an (h, w) pair of them, got (1, -2)"),
        ({"stride": 1.5}, TypeError,
         "conv2d: stride must be a positive int or an (h, w) pair of them, got 1.5"),
        ({"stride": True}, TypeError,
         "conv2d: stride must be a positive int or an (h, w) pair of them, got True"),
        ({"stride": (1, 2, 3)}, TypeError,
         "conv2d: stride must be a positive int or an (h, w) pair of them, got (1, 2, 3)"),
        ({"padding": -1}, ValueError,
         "conv2d: padding must be a non-negative int or an (h, w) pair of them, got -1"),
        ({"shift": -1}, ValueError, "conv2d: shift must be an int in 0..31, got -1"),
        ({"shift": 32}, ValueError, "conv2d: shift must be an int in 0..31, got 32"),
        ({"shift": 2.0}, TypeError, "conv2d: shift must be an int in 0..31, got 2.0"),
        ({"relu": 1}, TypeError, "conv2d: relu must be a bool, got 1"),
        ({"bias": np.zeros(4, dtype=np.int64)}, TypeError,
         "conv2d: bias must be int32 of shape (4,), got int64 with shape (4,)"),
        ({"bias": np.zeros(3, dtype=np.int32)}, ValueError,
         "conv2d: bias must be int32 of shape (4,), got int32 with shape (3,)"),
    ],
)
def test_conv2d_rejects_bad_parameters(
    ops: ModuleType, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with _raises(error, message):
        ops.conv2d(X, W, **kwargs)  # type: ignore[arg-type]


def test_matmul_family_rejects_bad_operands(ops: ModuleType) -> None:
    with _raises(ValueError, "matmul: b must be (K, N) with K=5 to match (2, 5), "
                 "got b of shape (4, 3)"):
        ops.matmul(A, np.zeros((4, 3), dtype=np.int8))
    with _raises(ValueError, "matmul_acc: a must be int8 (M, K), got int8 with shape (10,)"):
        ops.matmul_acc(A.ravel(), B)
    with _raises(TypeError, "matmul: b must be int8 (K, N), got float64 with shape (5, 3)"):
        ops.matmul(A, B.astype(np.float64))
    with _raises(ValueError, "matmul: bias must be int32 of shape (3,), got int32 with shape "
                 "(2,)"):
        ops.matmul(A, B, bias=np.zeros(2, dtype=np.int32))
    with _raises(ValueError, "dense: w must be (N, K) with K=5 to match (2, 5), "
                 "got w of shape (3, 4)"):
        ops.dense(A, np.zeros((3, 4), dtype=np.int8))
    with _raises(TypeError, "dense: x must be int8 (M, K), got uint8 with shape (2, 5)"):
        ops.dense(A.view(np.uint8), B.T)


def test_requantize_relu_add_reject_bad_operands(ops: ModuleType) -> None:
    acc = np.zeros((2, 3), dtype=np.int32)
    with _raises(TypeError, "requantize: acc must be int32 array, got int64 with shape (2, 3)"):
        ops.requantize(acc.astype(np.int64), 0)
    with _raises(ValueError, "requantize: axis must be an int in -2..1 for an acc of shape "
                 "(2, 3), got 2"):
        ops.requantize(acc, 0, bias=np.zeros(3, dtype=np.int32), axis=2)
    with _raises(ValueError, "requantize: bias must be int32 of shape (3,), got int32 with "
                 "shape (2,)"):
        ops.requantize(acc, 0, bias=np.zeros(2, dtype=np.int32), axis=1)
    with _raises(ValueError, "requantize: shift must be an int in 0..31, got -3"):
        ops.requantize(acc, -3)
    with _raises(TypeError, "relu: x must be int8 array, got int32 with shape (2, 3)"):
        ops.relu(acc)  # type: ignore[arg-type]
    with _raises(ValueError, "add: b must have a's shape (2, 5), got shape (5, 2)"):
        ops.add(A, A.T)
    with _raises(TypeError, "add: b must be int8 array, got int32 with shape (2, 5)"):
        ops.add(A, A.astype(np.int32))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
def test_pools_reject_bad_windows(ops: ModuleType, name: str) -> None:
    pool = getattr(ops, name)
    with _raises(ValueError, f"{name}: padding must be smaller than the kernel (2, 2), got (2, 0)"):
        pool(X, 2, padding=(2, 0))
    with _raises(ValueError, f"{name}: kernel must be a positive int or an (h, w) pair of them, "
                 "got 0"):
        pool(X, 0)
    with _raises(ValueError, f"{name}: stride must be a positive int or an (h, w) pair of them, "
                 "got (0, 1)"):
        pool(X, 2, stride=(0, 1))
    with _raises(ValueError, f"{name}: kernel 9x9 must fit the padded input, got padded input "
                 "8x8 (input 8x8, padding (0, 0))"):
        pool(X, 9)
    with _raises(TypeError, f"{name}: x must be int8 NCHW, got float32 with shape (1, 3, 8, 8)"):
        pool(X.astype(np.float32), 2)


def test_global_avg_pool_rejects_bad_input(ops: ModuleType) -> None:
    with _raises(ValueError, "global_avg_pool: x must be int8 NCHW, got int8 with shape (3, 8)"):
        ops.global_avg_pool(np.zeros((3, 8), dtype=np.int8))
    with _raises(ValueError, "global_avg_pool: x must have H, W >= 1, got shape (1, 3, 0, 4)"):
        ops.global_avg_pool(np.zeros((1, 3, 0, 4), dtype=np.int8))


# --------------------------------------------------------------------------- conv2d behaviour

CONV_CASES = [
    # (N, C, H, W, OC, KH, KW, stride, padding)
    (1, 3, 8, 8, 4, 3, 3, 1, 1),
    (2, 3, 7, 9, 5, 3, 3, 2, 1),
    (1, 4, 6, 5, 3, 1, 1, 1, 0),  # 1x1
    (2, 4, 6, 5, 3, 1, 1, 2, 0),  # 1x1 strided
    (2, 2, 5, 5, 3, 5, 5, 1, 0),  # kernel == input
    (1, 2, 3, 4, 2, 5, 6, 1, 1),  # kernel == padded input
    (1, 3, 9, 7, 2, 3, 2, (2, 1), (1, 0)),  # non-square everything
    (1, 2, 4, 4, 2, 3, 3, 3, 2),  # padding wider than the input's border
    (1, 1, 1, 1, 1, 1, 1, 1, 0),
    (3, 3, 11, 11, 4, 7, 7, 2, 3),  # C1-like 7x7 / 2, batch 3
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(c) for c in CONV_CASES])
def test_conv2d_matches_loop_reference(ops: ModuleType, case: tuple) -> None:
    n, c, h, w_, oc, kh, kw, stride, padding = case
    rng = np.random.default_rng(hash(case) % 2**32)
    x = rand_int8(rng, (n, c, h, w_))
    w = rand_int8(rng, (oc, c, kh, kw))
    bias = rand_bias(rng, oc)
    expected_acc = ref.conv2d_acc(x, w, stride, padding)
    np.testing.assert_array_equal(ops.conv2d_acc(x, w, stride, padding), expected_acc)
    for shift, relu in [(0, False), (7, True), (9, False), (31, True)]:
        got = ops.conv2d(x, w, bias, stride, padding, shift=shift, relu=relu)
        np.testing.assert_array_equal(got, ref.conv2d(x, w, bias, stride, padding, shift, relu))


@pytest.mark.parametrize("tile_bytes", [1, 2000, 20_000, 2**30])
def test_conv2d_tiling_does_not_change_results(
    ops: ModuleType, tile_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One image's im2col is K * OH * OW * 4 = 27 * 6 * 7 * 4 = 4536 bytes. 1: one output row of
    # one image per tile; 2000: two rows (the last tile of each image has two too); 20_000: four
    # images per tile, so the second tile is partial; 2**30: everything in one tile.
    # (On cupy, whose im2col is float64, the byte counts are twice these.)
    monkeypatch.setitem(kernels._CONV_TILE_BYTES, namespace_name(ops), tile_bytes)
    rng = np.random.default_rng(5)
    x = rand_int8(rng, (5, 3, 11, 9))
    w = rand_int8(rng, (4, 3, 3, 3))
    bias = rand_bias(rng, 4)
    stride, padding = (2, 1), (1, 0)
    acc = ops.conv2d_acc(x, w, stride, padding)
    assert acc.shape == (5, 4, 6, 7)
    np.testing.assert_array_equal(acc, ref.conv2d_acc(x, w, stride, padding))
    np.testing.assert_array_equal(
        ops.conv2d(x, w, bias, stride, padding, shift=5, relu=True),
        ref.conv2d(x, w, bias, stride, padding, 5, True),
    )


def test_conv2d_batch_equals_per_image_and_accepts_views(ops: ModuleType) -> None:
    rng = np.random.default_rng(1)
    base = rand_int8(rng, (3, 4, 10, 12))
    x = base[:, :, ::2, 1::2]  # non-contiguous view, shape (3, 4, 5, 6)
    w = rand_int8(rng, (6, 4, 3, 3))
    batched = ops.conv2d(x, w, padding=1, shift=6)
    for i in range(3):
        single = ops.conv2d(x[i : i + 1], w, padding=1, shift=6)
        np.testing.assert_array_equal(batched[i : i + 1], single)
    np.testing.assert_array_equal(batched, ref.conv2d(x, w, None, 1, 1, 6, False))


def test_conv2d_empty_batch_gives_empty_output(ops: ModuleType) -> None:
    x = np.zeros((0, 3, 8, 8), dtype=np.int8)
    assert ops.conv2d(x, W, padding=1).shape == (0, 4, 8, 8)


@st.composite
def conv_problems(draw: st.DrawFn) -> tuple:
    n = draw(st.integers(1, 2))
    c = draw(st.integers(1, 4))
    h, w_ = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    oc = draw(st.integers(1, 4))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    assume(kh <= h + 2 * padding[0] and kw <= w_ + 2 * padding[1])
    return n, c, h, w_, oc, kh, kw, stride, padding


@HYPOTHESIS
@given(
    problem=conv_problems(),
    seed=st.integers(0, 2**32 - 1),
    extremes=st.booleans(),
    shift=st.integers(0, 31),
    relu=st.booleans(),
    with_bias=st.booleans(),
)
def test_conv2d_matches_loop_reference_hypothesis(
    ops: ModuleType, problem: tuple, seed: int, extremes: bool, shift: int, relu: bool,
    with_bias: bool,
) -> None:
    n, c, h, w_, oc, kh, kw, stride, padding = problem
    rng = np.random.default_rng(seed)
    if extremes:  # values at the int8 bounds make products and sums as large as they get
        x = rng.choice(np.array([-128, 127, -1, 0], dtype=np.int8), size=(n, c, h, w_))
        w = rng.choice(np.array([-128, 127], dtype=np.int8), size=(oc, c, kh, kw))
    else:
        x, w = rand_int8(rng, (n, c, h, w_)), rand_int8(rng, (oc, c, kh, kw))
    bias = rand_bias(rng, oc, scale=2**31 - 1) if with_bias else None
    got = ops.conv2d(x, w, bias, stride, padding, shift, relu)
    np.testing.assert_array_equal(got, ref.conv2d(x, w, bias, stride, padding, shift, relu))


@HYPOTHESIS
@given(
    n=st.integers(1, 2), groups=st.integers(1, 4), per_in=st.integers(1, 3),
    per_out=st.integers(1, 3), size=st.integers(3, 7), kernel=st.integers(1, 3),
    stride=st.integers(1, 2), padding=st.integers(0, 1), seed=st.integers(0, 2**32 - 1),
    shift=st.integers(0, 12), relu=st.booleans(), tile_bytes=st.sampled_from([1, 2**30]),
)
def test_grouped_conv2d_matches_loop_reference_hypothesis(
    ops: ModuleType, n: int, groups: int, per_in: int, per_out: int, size: int, kernel: int,
    stride: int, padding: int, seed: int, shift: int, relu: bool, tile_bytes: int,
) -> None:
    """Grouped and depthwise (``per_in == 1``) convolutions: each group's output channels
    read only its input channels, tiled or not; equal to the groups run one by one."""
    rng = np.random.default_rng(seed)
    x = rand_int8(rng, (n, groups * per_in, size, size))
    w = rand_int8(rng, (groups * per_out, per_in, kernel, kernel))
    bias = rand_bias(rng, groups * per_out)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(kernels._CONV_TILE_BYTES, namespace_name(ops), tile_bytes)
        acc = ops.conv2d_acc(x, w, stride, padding, groups=groups)
        got = ops.conv2d(x, w, bias, stride, padding, shift, relu, groups=groups)
    np.testing.assert_array_equal(acc, ref.conv2d_acc(x, w, stride, padding, groups))
    np.testing.assert_array_equal(got, ref.conv2d(x, w, bias, stride, padding, shift, relu,
                                                  groups))
    one_by_one = [ops.conv2d(x[:, g * per_in:(g + 1) * per_in], w[g * per_out:(g + 1) * per_out],
                             bias[g * per_out:(g + 1) * per_out], stride, padding, shift, relu)
                  for g in range(groups)]
    np.testing.assert_array_equal(got, np.concatenate(one_by_one, axis=1))


def test_grouped_conv2d_deep_groups_are_exact(ops: ModuleType) -> None:
    """Groups deeper than FLOAT32_CHUNK_K (600 channels x 3x3 = 5400 products per group) at
    the int8 extremes: the float64 path, exact (88,473,600 needs more than float32's 24
    bits)."""
    x = np.full((1, 1200, 3, 3), -128, dtype=np.int8)
    w = np.full((4, 600, 3, 3), -128, dtype=np.int8)
    acc = ops.conv2d_acc(x, w, groups=2)
    assert int(acc[0, 0, 0, 0]) == 600 * 9 * 16384 and acc.dtype == np.int32


def test_conv2d_empty_channels(ops: ModuleType) -> None:
    """No output channels, or no input channels (every sum empty: zeros), with and without
    groups: the weight matrix is shaped from the weight, not inferred from its size."""
    rng = np.random.default_rng(2)
    assert ops.conv2d(rand_int8(rng, (2, 4, 5, 5)), np.zeros((0, 2, 3, 3), np.int8),
                      groups=2).shape == (2, 0, 3, 3)
    acc = ops.conv2d_acc(np.zeros((2, 0, 5, 5), np.int8), np.zeros((4, 0, 2, 2), np.int8))
    assert acc.shape == (2, 4, 4, 4) and not acc.any()


@pytest.mark.parametrize(("groups", "w_shape", "message"), [
    (0, (4, 4, 3, 3), "groups must be a positive int dividing the 4 input and 4 output "
                      "channels, got 0"),
    (3, (4, 4, 3, 3), "groups must be a positive int dividing the 4 input and 4 output "
                      "channels, got 3"),
    (2, (4, 4, 3, 3), "w must have 2 input channels per group (2 groups) to match x of shape "
                      "(1, 4, 6, 6), got w of shape (4, 4, 3, 3)"),
])
def test_conv2d_rejects_bad_groups(ops: ModuleType, groups: int, w_shape: tuple,
                                   message: str) -> None:
    x = np.zeros((1, 4, 6, 6), dtype=np.int8)
    with pytest.raises(ValueError, match=f"^{re.escape(f'conv2d: {message}')}$"):
        ops.conv2d(x, np.zeros(w_shape, dtype=np.int8), groups=groups)
    with pytest.raises(TypeError, match=r"^conv2d: groups must be a positive int, got 1.5$"):
        ops.conv2d(x, np.zeros(w_shape, dtype=np.int8), groups=1.5)  # type: ignore[arg-type]


def test_conv2d_acc_wraps_around_int32(ops: ModuleType) -> None:
    # K = 16384 * 3 * 3 = 147456 products of (-128) * (-128): 2415919104 > INT32_MAX.
    x = np.full((1, 16384, 3, 3), -128, dtype=np.int8)
    w = np.full((2, 16384, 3, 3), -128, dtype=np.int8)
    acc = ops.conv2d_acc(x, w)
    wrapped = 147456 * 16384 - 2**32
    assert wrapped == -1879048192
    np.testing.assert_array_equal(acc, np.full((1, 2, 1, 1), wrapped, dtype=np.int32))
    # A saturating (non-wrapping) accumulator would give 127 here.
    assert ops.conv2d(x, w).ravel().tolist() == [-128, -128]


# --------------------------------------------------------------------------- matmul behaviour


@HYPOTHESIS
@given(
    m=st.integers(1, 6),
    k=st.integers(1, 40),
    n=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
    shift=st.integers(0, 31),
    relu=st.booleans(),
    with_bias=st.booleans(),
)
def test_matmul_matches_loop_reference_hypothesis(
    ops: ModuleType, m: int, k: int, n: int, seed: int, shift: int, relu: bool, with_bias: bool
) -> None:
    rng = np.random.default_rng(seed)
    a, b = rand_int8(rng, (m, k)), rand_int8(rng, (k, n))
    bias = rand_bias(rng, n, scale=2**31 - 1) if with_bias else None
    np.testing.assert_array_equal(ops.matmul_acc(a, b), ref.matmul_acc(a, b))
    got = ops.matmul(a, b, bias, shift, relu)
    np.testing.assert_array_equal(got, ref.matmul(a, b, bias, shift, relu))
    np.testing.assert_array_equal(ops.dense(a, np.ascontiguousarray(b.T), bias, shift, relu),
                                  got)


@pytest.mark.parametrize("path", ["float32-chunks", "float64"])
@pytest.mark.parametrize("k", [1023, 1024, 1025, 2049, 3000, 20_000])
def test_matmul_exact_around_float32_chunk_boundary(
    ops: ModuleType, k: int, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Force the GEMM path: tiny problems take the float64 one unless the threshold is 0.
    monkeypatch.setattr(kernels, "_FLOAT64_MAX_MACS", 0 if path == "float32-chunks" else 2**62)
    rng = np.random.default_rng(k)
    # Worst case for float32: every product is (-128) * (-128) = 2**14.
    a = np.full((2, k), -128, dtype=np.int8)
    b = np.full((k, 3), -128, dtype=np.int8)
    np.testing.assert_array_equal(ops.matmul_acc(a, b), np.full((2, 3), k * 2**14))
    # Partial sums far above 2**24 that are odd: float32 without chunking would round them.
    a[:, ::7] = 1
    b[::7, :] = 1
    odd = (k + 6) // 7
    expected = (k - odd) * 2**14 + odd
    np.testing.assert_array_equal(ops.matmul_acc(a, b), np.full((2, 3), expected))
    # Mixed signs and a column of -128, against the loop reference.
    a = rand_int8(rng, (3, k))
    b = rand_int8(rng, (k, 2))
    b[:, 1] = -128
    np.testing.assert_array_equal(ops.matmul_acc(a, b), ref.matmul_acc(a, b))


def test_matmul_acc_wraps_around_int32(ops: ModuleType) -> None:
    k = 140_000
    a = np.full((2, k), -128, dtype=np.int8)
    b = np.full((k, 3), -128, dtype=np.int8)
    assert k * 2**14 > INT32_MAX
    expected = k * 2**14 - 2**32
    np.testing.assert_array_equal(ops.matmul_acc(a, b), np.full((2, 3), expected))
    # 1 x 1 output: few enough MACs for the single float64 GEMM path, which must wrap too.
    assert ops.matmul_acc(a[:1], b[:, :1]).tolist() == [[expected]]
    # Large-magnitude random values over a longer K: every sum is outside the int32 range.
    k = 300_000
    rng = np.random.default_rng(7)
    a = rng.integers(-128, -100, size=(3, k), dtype=np.int8)
    b = rng.integers(-128, -60, size=(k, 4), dtype=np.int8)
    b[:, 0] = 120  # a column of negative products, whose sums wrap the other way
    expected_arr = exact_wrapped(a, b)
    assert (np.abs(a.astype(np.int64) @ b.astype(np.int64)) > INT32_MAX).all()
    np.testing.assert_array_equal(ops.matmul_acc(a, b), expected_arr)


# --------------------------------------------------------------------------- requantize / relu


def test_requantize_clip_bounds_and_shift_edges(ops: ModuleType) -> None:
    values = [INT32_MIN, -(2**16), -129, -128, -127, -3, -1, 0, 1, 126, 127, 128, INT32_MAX]
    acc = np.array(values, dtype=np.int32)
    expected_0 = [-128, -128, -128, -128, -127, -3, -1, 0, 1, 126, 127, 127, 127]
    assert ops.requantize(acc, 0).tolist() == expected_0
    # Shift 31: floor division by 2**31 leaves -1 for every negative value and 0 otherwise.
    assert ops.requantize(acc, 31).tolist() == [-1] * 7 + [0] * 6
    # Shift 1 floors: -3 >> 1 == -2 and -1 >> 1 == -1 (truncation would give -1 and 0).
    assert ops.requantize(acc, 1).tolist() == [
        -128, -128, -65, -64, -64, -2, -1, 0, 0, 63, 63, 64, 127,
    ]
    assert ops.requantize(acc, 0, relu=True).tolist() == [max(v, 0) for v in expected_0]
    assert ops.requantize(acc, 31, relu=True).tolist() == [0] * 13
    assert [ref.requantize_value(v, 1, False) for v in values] == ops.requantize(
        acc, 1
    ).tolist()


def test_requantize_bias_wraps_and_broadcasts_along_axis(ops: ModuleType) -> None:
    acc = np.array([[INT32_MAX, INT32_MIN]], dtype=np.int32)
    bias = np.array([1, -1], dtype=np.int32)
    # INT32_MAX + 1 wraps to INT32_MIN; INT32_MIN - 1 wraps to INT32_MAX.
    assert ops.requantize(acc, 0, bias=bias).tolist() == [[-128, 127]]
    acc4 = np.zeros((2, 3, 2, 2), dtype=np.int32)
    bias3 = np.array([-5, 0, 7], dtype=np.int32)
    out = ops.requantize(acc4, 0, bias=bias3, axis=1)
    for channel, value in enumerate([-5, 0, 7]):
        assert (out[:, channel] == value).all()
    out_last = ops.requantize(np.zeros((2, 3), dtype=np.int32), 0, bias=bias3, axis=-1)
    assert out_last.tolist() == [[-5, 0, 7], [-5, 0, 7]]
    out_first = ops.requantize(np.zeros((3, 2), dtype=np.int32), 0, bias=bias3, axis=0)
    assert out_first.tolist() == [[-5, -5], [0, 0], [7, 7]]


def test_requantize_leaves_its_input_alone(ops: ModuleType) -> None:
    acc = np.array([[1000, -1000], [7, -7]], dtype=np.int32)
    before = acc.copy()
    out = ops.requantize(acc, 2, relu=True, bias=np.array([1, 2], np.int32))
    assert out.tolist() == [[127, 0], [2, 0]]
    ops.requantize(acc, 3)
    np.testing.assert_array_equal(acc, before)


def test_conv2d_and_matmul_bias_is_per_output_channel(ops: ModuleType) -> None:
    x = np.zeros((2, 3, 4, 4), dtype=np.int8)
    w = np.zeros((3, 3, 3, 3), dtype=np.int8)
    bias = np.array([-300, 20, 300], dtype=np.int32)
    out = ops.conv2d(x, w, bias, padding=1, shift=1)
    assert out.shape == (2, 3, 4, 4)
    assert [set(out[:, o].ravel().tolist()) for o in range(3)] == [{-128}, {10}, {127}]
    out_mm = ops.matmul(np.zeros((2, 4), np.int8), np.zeros((4, 3), np.int8), bias)
    assert out_mm.tolist() == [[-128, 20, 127]] * 2


def test_relu_zeroes_negatives_only(ops: ModuleType) -> None:
    x = np.array([-128, -1, 0, 1, 127], dtype=np.int8)
    out = ops.relu(x)
    assert out.dtype == np.int8
    assert out.tolist() == [0, 0, 0, 1, 127]


# --------------------------------------------------------------------------- pooling


POOL_CASES = [
    # (N, C, H, W, kernel, stride, padding)
    (1, 2, 6, 6, 2, None, 0),
    (2, 3, 7, 5, 3, 2, 1),
    (1, 2, 8, 8, 3, 1, 1),
    (1, 1, 5, 7, (2, 3), (1, 2), (1, 0)),
    (2, 2, 4, 4, 4, None, 0),  # kernel == input
    (1, 2, 3, 3, 1, 1, 0),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=[str(c) for c in POOL_CASES])
def test_pools_match_loop_reference(ops: ModuleType, case: tuple) -> None:
    n, c, h, w_, kernel, stride, padding = case
    rng = np.random.default_rng(len(str(case)))
    x = rand_int8(rng, (n, c, h, w_))
    np.testing.assert_array_equal(
        ops.max_pool2d(x, kernel, stride, padding), ref.max_pool2d(x, kernel, stride, padding)
    )
    np.testing.assert_array_equal(
        ops.avg_pool2d(x, kernel, stride, padding), ref.avg_pool2d(x, kernel, stride, padding)
    )


def test_max_pool_padding_never_wins_over_negative_values(ops: ModuleType) -> None:
    x = np.full((1, 1, 3, 3), -100, dtype=np.int8)
    x[0, 0, 2, 2] = -128
    out = ops.max_pool2d(x, 3, stride=1, padding=1)
    # Zero padding would give 0 everywhere; -128 padding leaves the real maxima.
    assert out.ravel().tolist() == [-100] * 9
    low = np.full((1, 1, 2, 2), -128, dtype=np.int8)
    assert ops.max_pool2d(low, 2, stride=1, padding=1).ravel().tolist() == [-128] * 9


def test_avg_pool_floors_and_counts_padding(ops: ModuleType) -> None:
    x = np.array([[[[-1, 0], [0, 0]]]], dtype=np.int8)
    assert ops.avg_pool2d(x, 2).item() == -1  # floor(-1 / 4), truncation would give 0
    x = np.full((1, 1, 2, 2), 8, dtype=np.int8)
    # 3x3 windows at stride 1, padding 1: corners see 4 real cells of 8 out of 9 -> 32 // 9 = 3.
    assert ops.avg_pool2d(x, 3, stride=1, padding=1).ravel().tolist() == [3, 3, 3, 3]
    extremes = np.full((1, 1, 4, 4), -128, dtype=np.int8)
    assert ops.avg_pool2d(extremes, 4).item() == -128
    assert ops.avg_pool2d(np.full((1, 1, 4, 4), 127, np.int8), 4).item() == 127


def test_global_avg_pool_matches_reference_and_floors(ops: ModuleType) -> None:
    rng = np.random.default_rng(3)
    x = rand_int8(rng, (2, 5, 7, 3))
    np.testing.assert_array_equal(ops.global_avg_pool(x), ref.global_avg_pool(x))
    x = np.zeros((1, 1, 3, 3), dtype=np.int8)
    x[0, 0, 0, 0] = -1
    assert ops.global_avg_pool(x).item() == -1
    assert ops.global_avg_pool(np.full((1, 2, 5, 5), 127, np.int8)).ravel().tolist() == [
        127,
        127,
    ]


# --------------------------------------------------------------------------- add


def test_add_matches_reference_at_bounds(ops: ModuleType) -> None:
    values = np.array([-128, -127, -1, 0, 1, 126, 127], dtype=np.int8)
    a, b = np.meshgrid(values, values)
    for shift, relu in [(0, False), (1, False), (1, True), (31, False)]:
        np.testing.assert_array_equal(
            ops.add(a, b, shift, relu), ref.add(a, b, shift, relu)
        )
    pair = (np.array([127, -128, -128], np.int8), np.array([127, -128, 1], np.int8))
    assert ops.add(*pair).tolist() == [127, -128, -127]
    assert ops.add(*pair, shift=1).tolist() == [127, -128, -64]
    assert ops.add(*pair, shift=1, relu=True).tolist() == [127, 0, 0]


def test_add_matches_reference_on_random_nchw(ops: ModuleType) -> None:
    rng = np.random.default_rng(11)
    a, b = rand_int8(rng, (2, 3, 4, 5)), rand_int8(rng, (2, 3, 4, 5))
    np.testing.assert_array_equal(ops.add(a, b, 1, True), ref.add(a, b, 1, True))


# --------------------------------------------------------------------------- device vs numpy
# ResNet-18 conv layers of the TVM paper (Table 2), batch 1: (name, size, C, OC, kernel, stride),
# padding kernel // 2.
RESNET18_LAYERS = [(name, *shape) for name, shape in TABLE2.items()]


def rand_bias_any_scale(rng: np.random.Generator, n: int) -> NDArray[np.int32]:
    """Bias of a random scale: small, accumulator-sized, or anywhere in int32 (wraps)."""
    scale = int(rng.choice([100, 2**16, 2**31 - 1]))
    return rng.integers(-scale, scale, size=n, dtype=np.int32, endpoint=True)


def rand_shift(rng: np.random.Generator) -> int:
    return int(rng.choice([0, 31, *rng.integers(0, 32, size=4)]))


def same(device: ModuleType, name: str, *args: Any, **kwargs: Any) -> np.ndarray:
    """Run kernel ``name`` on numpy and on ``device``; assert identical numpy results."""
    want = getattr(kernels, name)(*args, **kwargs)
    got = getattr(device, name)(*args, **kwargs)
    assert type(got) is np.ndarray, type(got)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)
    return got


# --------------------------------------------------------------------------- availability


def test_available_and_reason_agree(device: ModuleType) -> None:
    assert device.available() is True
    assert device.unavailable_reason() is None


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
        "bias": rand_bias_any_scale(rng, oc) if rng.random() < 0.7 else None,
        "stride": sh if square else (sh, sw),
        "padding": ph if square else (ph, pw),
        "shift": rand_shift(rng),
        "relu": bool(rng.random() < 0.5),
    }


@pytest.mark.parametrize("seed", range(60))
def test_conv2d_random_shapes(device: ModuleType, seed: int) -> None:
    case = random_conv_case(seed)
    same(device, "conv2d", **case)
    same(device, "conv2d_acc", case["x"], case["w"], case["stride"], case["padding"])


@pytest.mark.parametrize(("name", "size", "c", "oc", "k", "s"), RESNET18_LAYERS)
def test_conv2d_resnet18_layers(
    device: ModuleType, name: str, size: int, c: int, oc: int, k: int, s: int
) -> None:
    rng = np.random.default_rng(int(name[1:]))
    x = rand_int8(rng, (1, c, size, size))
    w = rand_int8(rng, (oc, c, k, k))
    bias = rng.integers(-(2**20), 2**20, size=oc, dtype=np.int32)
    for shift, relu in [(0, False), (9, True), (14, False)]:
        same(device, "conv2d", x, w, bias, s, k // 2, shift, relu)
    same(device, "conv2d_acc", x, w, s, k // 2)


def test_conv2d_acc_wraps_around_int32_like_numpy(device: ModuleType) -> None:
    # K = 16384 * 3 * 3 = 147456 products of (-128) * (-128): 2415919104 > INT32_MAX.
    x = np.full((1, 16384, 3, 3), -128, dtype=np.int8)
    w = np.full((2, 16384, 3, 3), -128, dtype=np.int8)
    acc = same(device, "conv2d_acc", x, w)
    assert acc.ravel().tolist() == [147456 * 16384 - 2**32] * 2
    same(device, "conv2d", x, w)
    same(device, "conv2d", x, w, np.array([INT32_MAX, INT32_MIN], dtype=np.int32), shift=3)
    # Random large-magnitude values over K = 3500 * 7 * 7 = 171500, padding 3 (49 windows):
    # every product has magnitude >= 118 * 115, so every full-window sum leaves int32.
    rng = np.random.default_rng(3)
    x = rng.integers(-128, -117, size=(1, 3500, 7, 7), dtype=np.int8)
    w = rng.integers(-128, -114, size=(3, 3500, 7, 7), dtype=np.int8)
    w[1] = 120  # negative products: sums wrap the other way
    acc = same(device, "conv2d_acc", x, w, padding=3)
    exact = (x.astype(np.int64) * w.astype(np.int64)).sum(axis=(1, 2, 3))
    assert (np.abs(exact) > INT32_MAX).all()
    np.testing.assert_array_equal(acc[0, :, 3, 3], (exact + 2**31) % 2**32 - 2**31)
    same(device, "conv2d", x, w, rand_bias_any_scale(rng, 3), 1, 3, 20, False)


@pytest.mark.parametrize("tile_bytes", [1, 3000, 200_000])
def test_conv2d_tiling_does_not_change_results_like_numpy(
    device: ModuleType, tile_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny tiles force one output row per GEMM; middling ones split images, or rows.
    monkeypatch.setitem(kernels._CONV_TILE_BYTES, namespace_name(device), tile_bytes)
    rng = np.random.default_rng(tile_bytes)
    x = rand_int8(rng, (3, 5, 13, 11))
    w = rand_int8(rng, (7, 5, 3, 3))
    same(device, "conv2d", x, w, rand_bias_any_scale(rng, 7), (2, 1), 1, 4, True)
    same(device, "conv2d_acc", x, w, 1, (0, 2))


def test_conv2d_accepts_views_and_empty_operands(device: ModuleType) -> None:
    rng = np.random.default_rng(11)
    x = rand_int8(rng, (2, 6, 12, 10))[:, ::2, :, ::-1]  # non-contiguous views
    w = np.asfortranarray(rand_int8(rng, (4, 3, 3, 3)))
    same(device, "conv2d", x, w, None, 1, 1, 2, False)
    same(device, "conv2d", np.zeros((0, 3, 5, 5), np.int8), rand_int8(rng, (4, 3, 3, 3)))
    same(device, "conv2d", rand_int8(rng, (2, 3, 5, 5)), np.zeros((0, 3, 3, 3), np.int8))
    same(device, "conv2d_acc", np.zeros((2, 0, 5, 5), np.int8), np.zeros((4, 0, 2, 2), np.int8))


# --------------------------------------------------------------------------- matmul / dense


@pytest.mark.parametrize("seed", range(30))
def test_matmul_dense_random_shapes(device: ModuleType, seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    m, k, n = (int(v) for v in rng.integers(1, 300, size=3))
    if seed % 5 == 0:
        k = int(rng.integers(1000, 5000))  # past the numpy kernel's float32 chunk size
    a, b = rand_int8(rng, (m, k)), rand_int8(rng, (k, n))
    bias = rand_bias_any_scale(rng, n) if rng.random() < 0.7 else None
    shift, relu = rand_shift(rng), bool(rng.random() < 0.5)
    same(device, "matmul_acc", a, b)
    same(device, "matmul", a, b, bias, shift, relu)
    same(device, "dense", a, np.ascontiguousarray(b.T), bias, shift, relu)
    same(device, "dense", a, b.T, bias, shift, relu)  # a transposed view as weights


def test_matmul_acc_wraps_around_int32_like_numpy(device: ModuleType) -> None:
    k = 140_000
    a = np.full((2, k), -128, dtype=np.int8)
    b = np.full((k, 3), -128, dtype=np.int8)
    assert same(device, "matmul_acc", a, b).ravel().tolist() == [k * 2**14 - 2**32] * 6
    same(device, "matmul", a, b, np.array([1, INT32_MAX, INT32_MIN], np.int32), 7, False)
    same(device, "dense", a, np.ascontiguousarray(b.T), None, 0, True)
    k = 300_000
    rng = np.random.default_rng(7)
    a = rng.integers(-128, -100, size=(3, k), dtype=np.int8)
    b = rng.integers(-128, -60, size=(k, 4), dtype=np.int8)
    b[:, 0] = 120
    assert (np.abs(a.astype(np.int64) @ b.astype(np.int64)) > INT32_MAX).all()
    same(device, "matmul_acc", a, b)
    same(device, "matmul", a, b, rand_bias_any_scale(rng, 4), 25, False)


def test_matmul_empty_operands(device: ModuleType) -> None:
    rng = np.random.default_rng(5)
    same(device, "matmul_acc", rand_int8(rng, (3, 0)), rand_int8(rng, (0, 4)))
    same(device, "matmul", rand_int8(rng, (0, 5)), rand_int8(rng, (5, 4)), None, 1, True)
    same(device, "dense", rand_int8(rng, (3, 5)), rand_int8(rng, (0, 5)))


# --------------------------------------------------------------------------- requantize / add


@pytest.mark.parametrize("seed", range(20))
def test_requantize_add_relu_random(device: ModuleType, seed: int) -> None:
    rng = np.random.default_rng(2000 + seed)
    shape = tuple(int(v) for v in rng.integers(1, 9, size=int(rng.integers(1, 5))))
    acc = rng.integers(INT32_MIN, INT32_MAX, size=shape, dtype=np.int32, endpoint=True)
    acc.ravel()[: min(acc.size, 4)] = [INT32_MIN, INT32_MAX, -1, 0][: min(acc.size, 4)]
    shift, relu = rand_shift(rng), bool(rng.random() < 0.5)
    same(device, "requantize", acc, shift, relu)
    axis = int(rng.integers(-len(shape), len(shape)))
    same(device, "requantize", acc, shift, relu, rand_bias_any_scale(rng, shape[axis]), axis)
    a, b = rand_int8(rng, shape), rand_int8(rng, shape)
    same(device, "add", a, b, shift, relu)
    same(device, "relu", a)


def test_requantize_edges_and_leaves_input_alone(device: ModuleType) -> None:
    values = [INT32_MIN, -(2**16), -129, -128, -127, -3, -1, 0, 1, 126, 127, 128, INT32_MAX]
    acc = np.array(values, dtype=np.int32)
    before = acc.copy()
    for shift in range(32):
        for relu in (False, True):
            same(device, "requantize", acc, shift, relu)
    bias = np.array([[INT32_MAX, INT32_MIN]], dtype=np.int32)
    same(device, "requantize", np.array([[INT32_MAX, INT32_MIN]], np.int32), 0, False,
         np.array([1, -1], np.int32), -1)
    same(device, "requantize", bias.T.copy(), 3, True, np.array([INT32_MAX, 5], np.int32), 0)
    np.testing.assert_array_equal(acc, before)


def test_add_at_bounds(device: ModuleType) -> None:
    grid = np.array(np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)), dtype=np.int8)
    for shift in (0, 1, 7, 8, 31):
        for relu in (False, True):
            same(device, "add", grid[0], grid[1], shift, relu)
    same(device, "relu", grid)


# --------------------------------------------------------------------------- pooling


@pytest.mark.parametrize("seed", range(40))
def test_pools_random_shapes(device: ModuleType, seed: int) -> None:
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
        same(device, name, x, (kh, kw), stride, (ph, pw))
    if kh == kw and ph == pw:
        same(device, "max_pool2d", x, kh, None, ph)
    same(device, "max_pool2d", x, (kh, kw), stride, (ph, pw), True)  # ceil_mode
    same(device, "global_avg_pool", x)


def test_global_avg_pool_floors_and_handles_big_extents(device: ModuleType) -> None:
    rng = np.random.default_rng(9)
    same(device, "global_avg_pool", np.full((2, 3, 300, 300), -128, np.int8))
    same(device, "global_avg_pool", np.full((1, 2, 1, 3), -1, np.int8))  # -3 // 3 and floors
    same(device, "global_avg_pool", rand_int8(rng, (1, 4, 7, 1)))
    same(device, "global_avg_pool", np.zeros((0, 3, 2, 2), np.int8))


# --------------------------------------------------------------------------- cupy in, cupy out


def _all_calls(rng: np.random.Generator) -> list[tuple[str, tuple[Any, ...]]]:
    x = rand_int8(rng, (2, 5, 9, 8))
    w = rand_int8(rng, (6, 5, 3, 3))
    a, b = rand_int8(rng, (7, 33)), rand_int8(rng, (33, 4))
    acc = rng.integers(INT32_MIN, INT32_MAX, size=(2, 6, 3, 3), dtype=np.int32)
    return [
        ("conv2d", (x, w, rand_bias_any_scale(rng, 6), 2, 1, 5, True)),
        ("conv2d_acc", (x, w, 1, 1)),
        ("matmul", (a, b, rand_bias_any_scale(rng, 4), 3, False)),
        ("matmul_acc", (a, b)),
        ("dense", (a, np.ascontiguousarray(b.T), None, 2, True)),
        ("requantize", (acc, 4, False, rand_bias_any_scale(rng, 6), 1)),
        ("relu", (x,)),
        ("add", (x, x[::-1].copy(), 1, False)),
        ("max_pool2d", (x, 3, 2, 1)),
        ("avg_pool2d", (x, (2, 3), None, (1, 0))),
        ("global_avg_pool", (x,)),
    ]


@pytest.mark.parametrize("index", range(11))
def test_cupy_operands_give_cupy_results(device: ModuleType, index: int) -> None:
    cp = device.namespace()
    name, args = _all_calls(np.random.default_rng(index))[index]
    want = getattr(kernels, name)(*args)
    on_device = tuple(cp.asarray(v) if isinstance(v, np.ndarray) else v for v in args)
    got = getattr(device, name)(*on_device)
    assert isinstance(got, cp.ndarray)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(cp.asnumpy(got), want)
    # One operand on the device is enough to keep the result there.
    mixed = (on_device[0], *args[1:])
    assert isinstance(getattr(device, name)(*mixed), cp.ndarray)


# --------------------------------------------------------------------------- identical errors

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
    device: ModuleType, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], on_device: bool
) -> None:
    want = _error(getattr(kernels, name), args, kwargs)
    if on_device:  # the same values as CuPy arrays: same error, as if they were numpy arrays
        cp = device.namespace()
        args = tuple(cp.asarray(v) if isinstance(v, np.ndarray) else v for v in args)
        kwargs = {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    got = _error(getattr(device, name), args, kwargs)
    assert type(got) is type(want)
    assert re.fullmatch(re.escape(str(want)), str(got)), (str(got), str(want))


# --------------------------------------------------------------------------- transformers
def test_transformer_kernels_match_numpy(device: ModuleType) -> None:
    """Integer kernels and data movement bit for bit; float kernels within one float32 ulp."""
    rng = np.random.default_rng(37)
    a, b = rand_int8(rng, (2, 3, 17, 24)), rand_int8(rng, (2, 3, 24, 9))
    for shift, relu in ((0, False), (7, True), (31, False)):
        same(device, "batch_matmul", a, b, shift, relu)
    same(device, "transpose", a, (0, 2, 1, 3))
    same(device, "reshape", a, (6, 17, 24))
    same(device, "take", a, np.array(0), 2)
    same(device, "slice_axis", a, 3, 1, 20, 3)
    same(device, "concat", [a, a[:, :1]], 1)
    same(device, "embedding", rng.integers(0, 50, (2, 7)), rand_int8(rng, (50, 16)))
    same(device, "clip", a, None, 6.0, 4)
    same(device, "clip", a, -1.3, 0.7, 2)
    x = (rng.standard_normal((3, 5, 96)) * 4).astype(np.float32)
    gamma = rng.standard_normal(96).astype(np.float32)
    beta = rng.standard_normal(96).astype(np.float32)
    angle = np.arange(5)[:, None] * rng.uniform(0, 1, 16)[None, :]
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    for name, args in (("softmax", (x, -1)), ("layer_norm", (x, gamma, beta, 1e-12)),
                       ("softmax", (x, -1, True)), ("rms_norm", (x, gamma, 1e-6)),
                       ("rotary", (x, cos, sin, 32)),
                       ("gelu", (x, "erf")), ("gelu", (x, "tanh")),
                       ("elementwise", ("div", x, gamma + 9)), ("elementwise", ("erf", x)),
                       ("elementwise", ("sigmoid", x * 30)),
                       ("reduce", ("reduce_mean", x, (2,), True)),
                       ("where", (gamma > 0, x, beta))):
        want = getattr(kernels, name)(*args)
        got = getattr(device, name)(*args)
        assert type(got) is np.ndarray and got.dtype == want.dtype == np.float32
        np.testing.assert_array_max_ulp(got, want, maxulp=1)


def test_fold_window_matches_numpy(device: ModuleType) -> None:
    """The stem's gathers (whole window, columns) and a stride-1 one, bit for bit; a CuPy
    operand keeps the result on the device."""
    x = rand_int8(np.random.default_rng(41), (2, 3, 23, 17))
    for kernel, stride, padding in (((7, 7), 2, 3), ((1, 7), (1, 2), (0, 3)), (3, 1, 0)):
        same(device, "fold_window", x, kernel, stride, padding)
    cp = device.namespace()
    got = device.fold_window(cp.asarray(x), (1, 7), (1, 2), (0, 3))
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), kernels.fold_window(x, (1, 7), (1, 2), (0, 3)))
