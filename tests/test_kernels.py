"""Tests of runtime.kernels: structure, exact error text, then behaviour against loop_reference."""

from __future__ import annotations

import re
from contextlib import AbstractContextManager

import loop_reference as ref
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from runtime import kernels

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
HYPOTHESIS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def rand_int8(rng: np.random.Generator, shape: tuple[int, ...]) -> NDArray[np.int8]:
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def rand_bias(rng: np.random.Generator, n: int, scale: int = 5000) -> NDArray[np.int32]:
    return rng.integers(-scale, scale + 1, size=n, dtype=np.int32)


def exact_wrapped(a: NDArray[np.int8], b: NDArray[np.int8]) -> NDArray[np.int32]:
    """Independent oracle for large K: exact int64 product, wrapped modulo 2**32."""
    exact = a.astype(np.int64) @ b.astype(np.int64)
    return ((exact + 2**31) % 2**32 - 2**31).astype(np.int32)


# --------------------------------------------------------------------------- structure


def test_public_names_exist_and_return_documented_dtypes_and_shapes() -> None:
    for name in kernels.__all__:
        assert hasattr(kernels, name), name
    rng = np.random.default_rng(0)
    x = rand_int8(rng, (2, 3, 9, 7))
    w = rand_int8(rng, (5, 3, 3, 3))
    acc = kernels.conv2d_acc(x, w, stride=2, padding=1)
    assert (acc.dtype, acc.shape) == (np.int32, (2, 5, 5, 4))
    out = kernels.conv2d(x, w, stride=2, padding=1)
    assert (out.dtype, out.shape) == (np.int8, (2, 5, 5, 4))
    assert out.flags.c_contiguous
    a, b = rand_int8(rng, (4, 6)), rand_int8(rng, (6, 3))
    assert kernels.matmul_acc(a, b).dtype == np.int32
    assert kernels.matmul(a, b).shape == (4, 3)
    assert kernels.dense(a, b.T).shape == (4, 3)
    assert kernels.max_pool2d(x, 2).shape == (2, 3, 4, 3)
    assert kernels.avg_pool2d(x, 3, stride=2, padding=1).shape == (2, 3, 5, 4)
    assert kernels.global_avg_pool(x).shape == (2, 3, 1, 1)
    assert kernels.add(x, x).dtype == np.int8
    assert kernels.relu(x).dtype == np.int8
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


def test_conv2d_rejects_float_input() -> None:
    x = np.zeros((1, 3, 8), dtype=np.float32)
    with _raises(TypeError, "conv2d: x must be int8 NCHW, got float32 with shape (1, 3, 8)"):
        kernels.conv2d(x, W)


def test_conv2d_rejects_wrong_ndim() -> None:
    x = np.zeros((3, 8, 8), dtype=np.int8)
    with _raises(ValueError, "conv2d: x must be int8 NCHW, got int8 with shape (3, 8, 8)"):
        kernels.conv2d(x, W)


def test_conv2d_rejects_non_array_and_wrong_weight_dtype() -> None:
    with _raises(TypeError, "conv2d: x must be int8 NCHW, got list"):
        kernels.conv2d([[1]], W)  # type: ignore[arg-type]
    w = W.astype(np.int16)
    with _raises(TypeError, "conv2d: w must be int8 OIHW, got int16 with shape (4, 3, 3, 3)"):
        kernels.conv2d(X, w)


def test_conv2d_rejects_channel_mismatch() -> None:
    w = np.zeros((4, 2, 3, 3), dtype=np.int8)
    message = (
        "conv2d: w must have 3 input channels to match x of shape (1, 3, 8, 8), "
        "got w of shape (4, 2, 3, 3)"
    )
    with _raises(ValueError, message):
        kernels.conv2d(X, w)


def test_conv2d_rejects_empty_kernel() -> None:
    w = np.zeros((4, 3, 0, 3), dtype=np.int8)
    with _raises(ValueError, "conv2d: w must have a kernel of at least 1x1, got w of shape "
                 "(4, 3, 0, 3)"):
        kernels.conv2d(X, w)


def test_conv2d_rejects_kernel_larger_than_padded_input() -> None:
    x = np.zeros((1, 3, 2, 4), dtype=np.int8)
    w = np.zeros((4, 3, 5, 5), dtype=np.int8)
    message = (
        "conv2d: kernel 5x5 must fit the padded input, got padded input 4x6 "
        "(input 2x4, padding (1, 1))"
    )
    with _raises(ValueError, message):
        kernels.conv2d(x, w, padding=1)
    with _raises(ValueError, message.replace("conv2d:", "conv2d_acc:")):
        kernels.conv2d_acc(x, w, padding=1)


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
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with _raises(error, message):
        kernels.conv2d(X, W, **kwargs)  # type: ignore[arg-type]


def test_matmul_family_rejects_bad_operands() -> None:
    with _raises(ValueError, "matmul: b must be (K, N) with K=5 to match (2, 5), "
                 "got b of shape (4, 3)"):
        kernels.matmul(A, np.zeros((4, 3), dtype=np.int8))
    with _raises(ValueError, "matmul_acc: a must be int8 (M, K), got int8 with shape (10,)"):
        kernels.matmul_acc(A.ravel(), B)
    with _raises(TypeError, "matmul: b must be int8 (K, N), got float64 with shape (5, 3)"):
        kernels.matmul(A, B.astype(np.float64))
    with _raises(ValueError, "matmul: bias must be int32 of shape (3,), got int32 with shape "
                 "(2,)"):
        kernels.matmul(A, B, bias=np.zeros(2, dtype=np.int32))
    with _raises(ValueError, "dense: w must be (N, K) with K=5 to match (2, 5), "
                 "got w of shape (3, 4)"):
        kernels.dense(A, np.zeros((3, 4), dtype=np.int8))
    with _raises(TypeError, "dense: x must be int8 (M, K), got uint8 with shape (2, 5)"):
        kernels.dense(A.view(np.uint8), B.T)


def test_requantize_relu_add_reject_bad_operands() -> None:
    acc = np.zeros((2, 3), dtype=np.int32)
    with _raises(TypeError, "requantize: acc must be int32 array, got int64 with shape (2, 3)"):
        kernels.requantize(acc.astype(np.int64), 0)
    with _raises(ValueError, "requantize: axis must be an int in -2..1 for an acc of shape "
                 "(2, 3), got 2"):
        kernels.requantize(acc, 0, bias=np.zeros(3, dtype=np.int32), axis=2)
    with _raises(ValueError, "requantize: bias must be int32 of shape (3,), got int32 with "
                 "shape (2,)"):
        kernels.requantize(acc, 0, bias=np.zeros(2, dtype=np.int32), axis=1)
    with _raises(ValueError, "requantize: shift must be an int in 0..31, got -3"):
        kernels.requantize(acc, -3)
    with _raises(TypeError, "relu: x must be int8 array, got int32 with shape (2, 3)"):
        kernels.relu(acc)  # type: ignore[arg-type]
    with _raises(ValueError, "add: b must have a's shape (2, 5), got shape (5, 2)"):
        kernels.add(A, A.T)
    with _raises(TypeError, "add: b must be int8 array, got int32 with shape (2, 5)"):
        kernels.add(A, A.astype(np.int32))  # type: ignore[arg-type]


@pytest.mark.parametrize("pool", [kernels.max_pool2d, kernels.avg_pool2d])
def test_pools_reject_bad_windows(pool: object) -> None:
    assert callable(pool)
    name = pool.__name__
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


def test_global_avg_pool_rejects_bad_input() -> None:
    with _raises(ValueError, "global_avg_pool: x must be int8 NCHW, got int8 with shape (3, 8)"):
        kernels.global_avg_pool(np.zeros((3, 8), dtype=np.int8))
    with _raises(ValueError, "global_avg_pool: x must have H, W >= 1, got shape (1, 3, 0, 4)"):
        kernels.global_avg_pool(np.zeros((1, 3, 0, 4), dtype=np.int8))


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
def test_conv2d_matches_loop_reference(case: tuple) -> None:
    n, c, h, w_, oc, kh, kw, stride, padding = case
    rng = np.random.default_rng(hash(case) % 2**32)
    x = rand_int8(rng, (n, c, h, w_))
    w = rand_int8(rng, (oc, c, kh, kw))
    bias = rand_bias(rng, oc)
    expected_acc = ref.conv2d_acc(x, w, stride, padding)
    np.testing.assert_array_equal(kernels.conv2d_acc(x, w, stride, padding), expected_acc)
    for shift, relu in [(0, False), (7, True), (9, False), (31, True)]:
        got = kernels.conv2d(x, w, bias, stride, padding, shift=shift, relu=relu)
        np.testing.assert_array_equal(got, ref.conv2d(x, w, bias, stride, padding, shift, relu))


@pytest.mark.parametrize("tile_bytes", [1, 2000, 20_000, 2**30])
def test_conv2d_tiling_does_not_change_results(
    tile_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One image's im2col is K * OH * OW * 4 = 27 * 6 * 7 * 4 = 4536 bytes. 1: one output row of
    # one image per tile; 2000: two rows (the last tile of each image has two too); 20_000: four
    # images per tile, so the second tile is partial; 2**30: everything in one tile.
    monkeypatch.setitem(kernels._CONV_TILE_BYTES, "numpy", tile_bytes)
    rng = np.random.default_rng(5)
    x = rand_int8(rng, (5, 3, 11, 9))
    w = rand_int8(rng, (4, 3, 3, 3))
    bias = rand_bias(rng, 4)
    stride, padding = (2, 1), (1, 0)
    acc = kernels.conv2d_acc(x, w, stride, padding)
    assert acc.shape == (5, 4, 6, 7)
    np.testing.assert_array_equal(acc, ref.conv2d_acc(x, w, stride, padding))
    np.testing.assert_array_equal(
        kernels.conv2d(x, w, bias, stride, padding, shift=5, relu=True),
        ref.conv2d(x, w, bias, stride, padding, 5, True),
    )


def test_conv2d_batch_equals_per_image_and_accepts_views() -> None:
    rng = np.random.default_rng(1)
    base = rand_int8(rng, (3, 4, 10, 12))
    x = base[:, :, ::2, 1::2]  # non-contiguous view, shape (3, 4, 5, 6)
    w = rand_int8(rng, (6, 4, 3, 3))
    batched = kernels.conv2d(x, w, padding=1, shift=6)
    for i in range(3):
        single = kernels.conv2d(x[i : i + 1], w, padding=1, shift=6)
        np.testing.assert_array_equal(batched[i : i + 1], single)
    np.testing.assert_array_equal(batched, ref.conv2d(x, w, None, 1, 1, 6, False))


def test_conv2d_empty_batch_gives_empty_output() -> None:
    x = np.zeros((0, 3, 8, 8), dtype=np.int8)
    assert kernels.conv2d(x, W, padding=1).shape == (0, 4, 8, 8)


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
    problem: tuple, seed: int, extremes: bool, shift: int, relu: bool, with_bias: bool
) -> None:
    n, c, h, w_, oc, kh, kw, stride, padding = problem
    rng = np.random.default_rng(seed)
    if extremes:  # values at the int8 bounds make products and sums as large as they get
        x = rng.choice(np.array([-128, 127, -1, 0], dtype=np.int8), size=(n, c, h, w_))
        w = rng.choice(np.array([-128, 127], dtype=np.int8), size=(oc, c, kh, kw))
    else:
        x, w = rand_int8(rng, (n, c, h, w_)), rand_int8(rng, (oc, c, kh, kw))
    bias = rand_bias(rng, oc, scale=2**31 - 1) if with_bias else None
    got = kernels.conv2d(x, w, bias, stride, padding, shift, relu)
    np.testing.assert_array_equal(got, ref.conv2d(x, w, bias, stride, padding, shift, relu))


def test_conv2d_acc_wraps_around_int32() -> None:
    # K = 16384 * 3 * 3 = 147456 products of (-128) * (-128): 2415919104 > INT32_MAX.
    x = np.full((1, 16384, 3, 3), -128, dtype=np.int8)
    w = np.full((2, 16384, 3, 3), -128, dtype=np.int8)
    acc = kernels.conv2d_acc(x, w)
    wrapped = 147456 * 16384 - 2**32
    assert wrapped == -1879048192
    np.testing.assert_array_equal(acc, np.full((1, 2, 1, 1), wrapped, dtype=np.int32))
    # A saturating (non-wrapping) accumulator would give 127 here.
    assert kernels.conv2d(x, w).ravel().tolist() == [-128, -128]


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
    m: int, k: int, n: int, seed: int, shift: int, relu: bool, with_bias: bool
) -> None:
    rng = np.random.default_rng(seed)
    a, b = rand_int8(rng, (m, k)), rand_int8(rng, (k, n))
    bias = rand_bias(rng, n, scale=2**31 - 1) if with_bias else None
    np.testing.assert_array_equal(kernels.matmul_acc(a, b), ref.matmul_acc(a, b))
    got = kernels.matmul(a, b, bias, shift, relu)
    np.testing.assert_array_equal(got, ref.matmul(a, b, bias, shift, relu))
    np.testing.assert_array_equal(kernels.dense(a, np.ascontiguousarray(b.T), bias, shift, relu),
                                  got)


@pytest.mark.parametrize("path", ["float32-chunks", "float64"])
@pytest.mark.parametrize("k", [1023, 1024, 1025, 2049, 3000, 20_000])
def test_matmul_exact_around_float32_chunk_boundary(
    k: int, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Force the GEMM path: tiny problems take the float64 one unless the threshold is 0.
    monkeypatch.setattr(kernels, "_FLOAT64_MAX_MACS", 0 if path == "float32-chunks" else 2**62)
    rng = np.random.default_rng(k)
    # Worst case for float32: every product is (-128) * (-128) = 2**14.
    a = np.full((2, k), -128, dtype=np.int8)
    b = np.full((k, 3), -128, dtype=np.int8)
    np.testing.assert_array_equal(kernels.matmul_acc(a, b), np.full((2, 3), k * 2**14))
    # Partial sums far above 2**24 that are odd: float32 without chunking would round them.
    a[:, ::7] = 1
    b[::7, :] = 1
    odd = (k + 6) // 7
    expected = (k - odd) * 2**14 + odd
    np.testing.assert_array_equal(kernels.matmul_acc(a, b), np.full((2, 3), expected))
    # Mixed signs and a column of -128, against the loop reference.
    a = rand_int8(rng, (3, k))
    b = rand_int8(rng, (k, 2))
    b[:, 1] = -128
    np.testing.assert_array_equal(kernels.matmul_acc(a, b), ref.matmul_acc(a, b))


def test_matmul_acc_wraps_around_int32() -> None:
    k = 140_000
    a = np.full((2, k), -128, dtype=np.int8)
    b = np.full((k, 3), -128, dtype=np.int8)
    assert k * 2**14 > INT32_MAX
    expected = k * 2**14 - 2**32
    np.testing.assert_array_equal(kernels.matmul_acc(a, b), np.full((2, 3), expected))
    # 1 x 1 output: few enough MACs for the single float64 GEMM path, which must wrap too.
    assert kernels.matmul_acc(a[:1], b[:, :1]).tolist() == [[expected]]
    # Large-magnitude random values over a longer K: every sum is outside the int32 range.
    k = 300_000
    rng = np.random.default_rng(7)
    a = rng.integers(-128, -100, size=(3, k), dtype=np.int8)
    b = rng.integers(-128, -60, size=(k, 4), dtype=np.int8)
    b[:, 0] = 120  # a column of negative products, whose sums wrap the other way
    expected_arr = exact_wrapped(a, b)
    assert (np.abs(a.astype(np.int64) @ b.astype(np.int64)) > INT32_MAX).all()
    np.testing.assert_array_equal(kernels.matmul_acc(a, b), expected_arr)


# --------------------------------------------------------------------------- requantize / relu


def test_requantize_clip_bounds_and_shift_edges() -> None:
    values = [INT32_MIN, -(2**16), -129, -128, -127, -3, -1, 0, 1, 126, 127, 128, INT32_MAX]
    acc = np.array(values, dtype=np.int32)
    expected_0 = [-128, -128, -128, -128, -127, -3, -1, 0, 1, 126, 127, 127, 127]
    assert kernels.requantize(acc, 0).tolist() == expected_0
    # Shift 31: floor division by 2**31 leaves -1 for every negative value and 0 otherwise.
    assert kernels.requantize(acc, 31).tolist() == [-1] * 7 + [0] * 6
    # Shift 1 floors: -3 >> 1 == -2 and -1 >> 1 == -1 (truncation would give -1 and 0).
    assert kernels.requantize(acc, 1).tolist() == [
        -128, -128, -65, -64, -64, -2, -1, 0, 0, 63, 63, 64, 127,
    ]
    assert kernels.requantize(acc, 0, relu=True).tolist() == [max(v, 0) for v in expected_0]
    assert kernels.requantize(acc, 31, relu=True).tolist() == [0] * 13
    assert [ref.requantize_value(v, 1, False) for v in values] == kernels.requantize(
        acc, 1
    ).tolist()


def test_requantize_bias_wraps_and_broadcasts_along_axis() -> None:
    acc = np.array([[INT32_MAX, INT32_MIN]], dtype=np.int32)
    bias = np.array([1, -1], dtype=np.int32)
    # INT32_MAX + 1 wraps to INT32_MIN; INT32_MIN - 1 wraps to INT32_MAX.
    assert kernels.requantize(acc, 0, bias=bias).tolist() == [[-128, 127]]
    acc4 = np.zeros((2, 3, 2, 2), dtype=np.int32)
    bias3 = np.array([-5, 0, 7], dtype=np.int32)
    out = kernels.requantize(acc4, 0, bias=bias3, axis=1)
    for channel, value in enumerate([-5, 0, 7]):
        assert (out[:, channel] == value).all()
    out_last = kernels.requantize(np.zeros((2, 3), dtype=np.int32), 0, bias=bias3, axis=-1)
    assert out_last.tolist() == [[-5, 0, 7], [-5, 0, 7]]
    out_first = kernels.requantize(np.zeros((3, 2), dtype=np.int32), 0, bias=bias3, axis=0)
    assert out_first.tolist() == [[-5, -5], [0, 0], [7, 7]]


def test_requantize_leaves_its_input_alone() -> None:
    acc = np.array([[1000, -1000], [7, -7]], dtype=np.int32)
    before = acc.copy()
    out = kernels.requantize(acc, 2, relu=True, bias=np.array([1, 2], np.int32))
    assert out.tolist() == [[127, 0], [2, 0]]
    kernels.requantize(acc, 3)
    np.testing.assert_array_equal(acc, before)


def test_conv2d_and_matmul_bias_is_per_output_channel() -> None:
    x = np.zeros((2, 3, 4, 4), dtype=np.int8)
    w = np.zeros((3, 3, 3, 3), dtype=np.int8)
    bias = np.array([-300, 20, 300], dtype=np.int32)
    out = kernels.conv2d(x, w, bias, padding=1, shift=1)
    assert out.shape == (2, 3, 4, 4)
    assert [set(out[:, o].ravel().tolist()) for o in range(3)] == [{-128}, {10}, {127}]
    out_mm = kernels.matmul(np.zeros((2, 4), np.int8), np.zeros((4, 3), np.int8), bias)
    assert out_mm.tolist() == [[-128, 20, 127]] * 2


def test_relu_zeroes_negatives_only() -> None:
    x = np.array([-128, -1, 0, 1, 127], dtype=np.int8)
    out = kernels.relu(x)
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
def test_pools_match_loop_reference(case: tuple) -> None:
    n, c, h, w_, kernel, stride, padding = case
    rng = np.random.default_rng(len(str(case)))
    x = rand_int8(rng, (n, c, h, w_))
    np.testing.assert_array_equal(
        kernels.max_pool2d(x, kernel, stride, padding), ref.max_pool2d(x, kernel, stride, padding)
    )
    np.testing.assert_array_equal(
        kernels.avg_pool2d(x, kernel, stride, padding), ref.avg_pool2d(x, kernel, stride, padding)
    )


def test_max_pool_padding_never_wins_over_negative_values() -> None:
    x = np.full((1, 1, 3, 3), -100, dtype=np.int8)
    x[0, 0, 2, 2] = -128
    out = kernels.max_pool2d(x, 3, stride=1, padding=1)
    # Zero padding would give 0 everywhere; -128 padding leaves the real maxima.
    assert out.ravel().tolist() == [-100] * 9
    low = np.full((1, 1, 2, 2), -128, dtype=np.int8)
    assert kernels.max_pool2d(low, 2, stride=1, padding=1).ravel().tolist() == [-128] * 9


def test_avg_pool_floors_and_counts_padding() -> None:
    x = np.array([[[[-1, 0], [0, 0]]]], dtype=np.int8)
    assert kernels.avg_pool2d(x, 2).item() == -1  # floor(-1 / 4), truncation would give 0
    x = np.full((1, 1, 2, 2), 8, dtype=np.int8)
    # 3x3 windows at stride 1, padding 1: corners see 4 real cells of 8 out of 9 -> 32 // 9 = 3.
    assert kernels.avg_pool2d(x, 3, stride=1, padding=1).ravel().tolist() == [3, 3, 3, 3]
    extremes = np.full((1, 1, 4, 4), -128, dtype=np.int8)
    assert kernels.avg_pool2d(extremes, 4).item() == -128
    assert kernels.avg_pool2d(np.full((1, 1, 4, 4), 127, np.int8), 4).item() == 127


def test_global_avg_pool_matches_reference_and_floors() -> None:
    rng = np.random.default_rng(3)
    x = rand_int8(rng, (2, 5, 7, 3))
    np.testing.assert_array_equal(kernels.global_avg_pool(x), ref.global_avg_pool(x))
    x = np.zeros((1, 1, 3, 3), dtype=np.int8)
    x[0, 0, 0, 0] = -1
    assert kernels.global_avg_pool(x).item() == -1
    assert kernels.global_avg_pool(np.full((1, 2, 5, 5), 127, np.int8)).ravel().tolist() == [
        127,
        127,
    ]


# --------------------------------------------------------------------------- add


def test_add_matches_reference_at_bounds() -> None:
    values = np.array([-128, -127, -1, 0, 1, 126, 127], dtype=np.int8)
    a, b = np.meshgrid(values, values)
    for shift, relu in [(0, False), (1, False), (1, True), (31, False)]:
        np.testing.assert_array_equal(
            kernels.add(a, b, shift, relu), ref.add(a, b, shift, relu)
        )
    pair = (np.array([127, -128, -128], np.int8), np.array([127, -128, 1], np.int8))
    assert kernels.add(*pair).tolist() == [127, -128, -127]
    assert kernels.add(*pair, shift=1).tolist() == [127, -128, -64]
    assert kernels.add(*pair, shift=1, relu=True).tolist() == [127, 0, 0]


def test_add_matches_reference_on_random_nchw() -> None:
    rng = np.random.default_rng(11)
    a, b = rand_int8(rng, (2, 3, 4, 5)), rand_int8(rng, (2, 3, 4, 5))
    np.testing.assert_array_equal(kernels.add(a, b, 1, True), ref.add(a, b, 1, True))
