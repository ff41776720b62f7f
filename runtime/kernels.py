"""int8 operator kernels, written once for numpy and CuPy: the fallbacks and the semantic oracle
(DESIGN.md §4).

Every operator takes a keyword-only ``xp``, the array namespace of its array operands and of
its result: ``numpy`` (the default: the CPU fallback and the oracle) or ``cupy`` (the GPU
fallback; `runtime.kernels_gpu` calls these kernels with it). CuPy follows numpy's API, so the
code is shared; the two things that differ are named in one place, the namespace section below.
Every accelerator backend (functional sim, timing sim, RTL sim, GPU) must return arrays that are
identical to the ones these kernels return on numpy. The semantics, in one place:

- activations are int8 NCHW, conv weights int8 OIHW, bias int32 per output channel;
- conv2d / matmul accumulate in int32 with two's-complement wrap-around, add the bias (int32
  wrap-around), shift right arithmetically by ``shift`` (floor), apply ReLU if asked, clip to
  [-128, 127] and cast to int8 (see `requantize`, the one shared tail);
- pooling pads max-pool windows with -128 and avg-pool windows with 0 (count_include_pad);
  averages are floor divisions.

The fast path is im2col (``sliding_window_view``, no Python loop over pixels, built in tiles)
followed by a float BLAS GEMM that is exact. On numpy it is float32 with the reduction split
into chunks of at most `FLOAT32_CHUNK_K` products, whose sums (|sum| <= 1024 * 2**14 = 2**24)
float32 holds exactly, the chunk sums being accumulated in float64 (exact below 2**53); one
float64 GEMM for problems too small to amortise chunking. On CuPy it is always one float64 GEMM
(cuBLAS DGEMM): every partial sum of K products of at most 2**14 is an integer float64 holds
exactly while K <= 2**39, whatever order, blocking or split-K the library picks. float32 is not
used there because cuBLAS may run float32 GEMMs on TF32 tensor cores (CuPy does with
``CUPY_TF32=1``, and other libraries in the process can change the default math mode), whose
internal accumulation is not documented to be exact; TF32 applies to float32 only. The exact
integer result is then wrapped to int32.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, TypeGuard

import numpy as np
from numpy.typing import NDArray

from compiler.graph import nn

__all__ = [
    "FLOAT32_CHUNK_K",
    "add",
    "avg_pool2d",
    "batch_matmul",
    "check_add_args",
    "check_array",
    "check_batch_matmul_args",
    "check_bias",
    "check_conv2d_args",
    "check_flag",
    "check_fold_window_args",
    "check_groups",
    "check_matmul",
    "check_matmul_args",
    "check_pair",
    "check_shift",
    "clip",
    "concat",
    "conv2d",
    "conv2d_acc",
    "dense",
    "elementwise",
    "embedding",
    "fold_window",
    "gelu",
    "global_avg_pool",
    "is_int",
    "layer_norm",
    "matmul",
    "matmul_acc",
    "max_pool2d",
    "pool_windows",
    "reduce",
    "relu",
    "requantize",
    "reshape",
    "rms_norm",
    "rotary",
    "slice_axis",
    "softmax",
    "take",
    "transpose",
    "where",
]

#: Largest reduction length that one float32 GEMM may sum: 1024 products of at most
#: (-128) * (-128) = 2**14 sum to at most 2**24, the largest range float32 holds exactly.
FLOAT32_CHUNK_K = 1024

#: Largest reduction length for which one float64 GEMM is exact (K * 2**14 < 2**53).
_FLOAT64_EXACT_K = 2**39 - 1

#: Below this many multiply-accumulates, a multi-chunk float32 GEMM costs more in per-chunk
#: Python overhead than it saves, and one float64 GEMM (exact for K < 2**39) is faster.
_FLOAT64_MAX_MACS = 2**18

_INT8_MIN = -128
_INT8_MAX = 127
_MAX_SHIFT = 31

Pair = int | tuple[int, int]


# --------------------------------------------------------------------------- array namespaces
# What differs between numpy and CuPy, and nothing else: the float type of the exact GEMM, and
# how large an im2col tile may be. Everything else is numpy's API, which CuPy follows.

#: Size in bytes of the im2col matrix that conv2d builds per GEMM, by namespace. On numpy (float32,
#: a 3x3 conv's is 36x its int8 input) tiling over images and output rows bounds the memory of
#: large batches; tiles stay large because smaller ones were slower on ResNet-18 layers: more,
#: smaller BLAS calls, and below 4 MiB numpy no longer asks for huge pages, so every call
#: page-faults its temporaries in 4 KiB at a time (see benchmarks/kernels_conv2d.py). On CuPy
#: (float64) it bounds the device memory of large batches.
_CONV_TILE_BYTES = {"numpy": 16 * 2**20, "cupy": 256 * 2**20}


def _gemm_dtype(xp: ModuleType) -> type[np.floating[Any]]:
    """The float type of the exact GEMMs: float32 (chunked) on numpy, float64 on CuPy, whose
    float32 GEMMs may run on TF32 tensor cores (module docstring)."""
    return np.float32 if xp is np else np.float64


# --------------------------------------------------------------------------- validation helpers


def _describe(value: object, xp: ModuleType) -> str:
    """Say what a received value is, for error messages: dtype and shape, or type name."""
    if isinstance(value, xp.ndarray):
        return f"{value.dtype} with shape {value.shape}"
    return f"{type(value).__name__}"


def is_int(value: object) -> TypeGuard[numbers.Integral]:
    """True for Python and numpy integers, False for bools (``True`` is not a stride)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def check_array(
    op: str, name: str, value: object, dtype: type[np.generic], ndim: int | None, layout: str,
    xp: ModuleType = np,
) -> NDArray:
    """Check that ``value`` is an array of namespace ``xp`` of ``dtype`` (TypeError) and
    ``ndim`` (ValueError)."""
    wanted = f"{np.dtype(dtype).name} {layout}".rstrip()
    message = f"{op}: {name} must be {wanted}, got {_describe(value, xp)}"
    if not isinstance(value, xp.ndarray) or value.dtype != dtype:
        raise TypeError(message)
    if ndim is not None and value.ndim != ndim:
        raise ValueError(message)
    return value


def check_bias(
    op: str, bias: object, channels: int, xp: ModuleType = np
) -> NDArray[np.int32] | None:
    """Check an optional int32 bias of shape ``(channels,)``."""
    if bias is None:
        return None
    message = f"{op}: bias must be int32 of shape ({channels},), got {_describe(bias, xp)}"
    if not isinstance(bias, xp.ndarray) or bias.dtype != np.int32:
        raise TypeError(message)
    if bias.shape != (channels,):
        raise ValueError(message)
    return bias


def check_shift(op: str, shift: object) -> int:
    """Check a right-shift amount: an int in 0..31."""
    message = f"{op}: shift must be an int in 0..{_MAX_SHIFT}, got {shift!r}"
    if not is_int(shift):
        raise TypeError(message)
    if not 0 <= int(shift) <= _MAX_SHIFT:
        raise ValueError(message)
    return int(shift)


def check_pair(op: str, name: str, value: object, minimum: int) -> tuple[int, int]:
    """Turn an int or an (h, w) pair into an (h, w) tuple of ints, each >= ``minimum``."""
    kind = "positive" if minimum == 1 else "non-negative"
    message = f"{op}: {name} must be a {kind} int or an (h, w) pair of them, got {value!r}"
    if is_int(value):
        items: Sequence[Any] = (value, value)
    elif isinstance(value, tuple | list) and len(value) == 2:
        items = value
    else:
        raise TypeError(message)
    if not all(is_int(v) for v in items):
        raise TypeError(message)
    pair = (int(items[0]), int(items[1]))
    if min(pair) < minimum:
        raise ValueError(message)
    return pair


def check_groups(op: str, groups: object, channels: int, out_channels: int) -> int:
    """Check a convolution's ``groups``: a positive int that divides the input and output
    channels (``channels`` of ``x``, ``out_channels`` of ``w``)."""
    if not is_int(groups):
        raise TypeError(f"{op}: groups must be a positive int, got {groups!r}")
    g = int(groups)  # type: ignore[call-overload]
    if g < 1 or channels % g or out_channels % g:
        raise ValueError(f"{op}: groups must be a positive int dividing the {channels} input "
                         f"and {out_channels} output channels, got {g}")
    return g


def check_flag(op: str, name: str, value: object) -> bool:
    """Check a flag: a Python or numpy bool."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")
    return bool(value)


def _output_size(
    op: str, in_hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
    padding: tuple[int, int],
) -> tuple[int, int]:
    """Output (height, width) of a sliding window; ValueError if the kernel doesn't fit."""
    padded = (in_hw[0] + 2 * padding[0], in_hw[1] + 2 * padding[1])
    if kernel[0] > padded[0] or kernel[1] > padded[1]:
        raise ValueError(
            f"{op}: kernel {kernel[0]}x{kernel[1]} must fit the padded input, got padded input "
            f"{padded[0]}x{padded[1]} (input {in_hw[0]}x{in_hw[1]}, padding {padding})"
        )
    return (
        (padded[0] - kernel[0]) // stride[0] + 1,
        (padded[1] - kernel[1]) // stride[1] + 1,
    )


# --------------------------------------------------------------------------- exact int GEMM


def _wrap_int32(exact: NDArray[np.int64]) -> NDArray[np.int32]:
    """Two's-complement wrap of exact int64 values to int32 (integer casts are modular)."""
    return exact.astype(np.uint32).view(np.int32)


def _exact_gemm(a: NDArray[np.floating], b: NDArray[np.floating], xp: ModuleType
                ) -> NDArray[np.int32]:
    """Integer GEMM of int8-valued float matrices through float BLAS, wrapped to int32.

    float64 operands (CuPy's, see `_gemm_dtype`): one float64 GEMM. float32 operands: one
    float32 GEMM when K <= `FLOAT32_CHUNK_K`; else float32 GEMMs over K chunks of at most
    `FLOAT32_CHUNK_K` summed in float64, or, for tiny problems, one float64 GEMM. Every path
    computes the exact integer sum (no BLAS summation order can round it).

    Parameters
    ----------
    a : ndarray, shape (M, K), float32 or float64
        Holds int8 values only.
    b : ndarray, shape (K, N), the dtype of ``a``
        Holds int8 values only.
    xp : module
        The namespace of ``a`` and ``b``.

    Returns
    -------
    ndarray, shape (M, N), int32
        ``sum_k a[m, k] * b[k, n]`` with int32 wrap-around.
    """
    m, k = a.shape
    n = b.shape[1]
    # Chunk sums are exact integers and their float64 sum stays exact while K < 2**39, which no
    # array that fits in memory reaches.
    assert k <= _FLOAT64_EXACT_K
    if 0 in (m, k, n):  # cuBLAS is not asked for empty products
        return xp.zeros((m, n), dtype=np.int32)
    if a.dtype == np.float64:
        return _wrap_int32(xp.matmul(a, b).astype(np.int64))
    if k <= FLOAT32_CHUNK_K:
        # |sum| <= 2**24: the float32 result is exact and fits int32 without wrapping.
        return xp.matmul(a, b).astype(np.int32)
    if m * n * k < _FLOAT64_MAX_MACS:
        total = xp.matmul(a.astype(np.float64), b.astype(np.float64))
        return _wrap_int32(total.astype(np.int64))
    # Equal-sized chunks keep every GEMM about as deep, so none of them is a thin leftover.
    n_chunks = -(-k // FLOAT32_CHUNK_K)
    bounds = [i * k // n_chunks for i in range(n_chunks + 1)]  # steps <= ceil(k / n_chunks)
    total = xp.zeros((m, n), dtype=np.float64)
    chunk = xp.empty((m, n), dtype=np.float32)
    for lo, hi in itertools.pairwise(bounds):
        xp.matmul(a[:, lo:hi], b[lo:hi], out=chunk)
        total += chunk
    return _wrap_int32(total.astype(np.int64))


# --------------------------------------------------------------------------- requantize


def requantize(
    acc: NDArray[np.int32],
    shift: int,
    relu: bool = False,
    bias: NDArray[np.int32] | None = None,
    axis: int = 1,
    *,
    xp: ModuleType = np,
) -> NDArray[np.int8]:
    """Requantize an int32 accumulator to int8: the shared tail of conv2d, matmul and add.

    ``out = clip(relu?((acc + bias) >> shift), -128, 127).astype(int8)``, where the bias add
    wraps around in int32 and ``>>`` is an arithmetic (floor) shift.

    Parameters
    ----------
    acc : ndarray, int32, any shape
        Accumulator values.
    shift : int
        Right-shift amount in bits, 0..31.
    relu : bool
        Apply ``max(., 0)`` after the shift.
    bias : ndarray, shape (acc.shape[axis],), int32, optional
        Added along ``axis`` (per output channel), before the shift.
    axis : int
        Axis of ``acc`` the bias runs along: 1 for NCHW and for (M, N) matmul outputs.

    Returns
    -------
    ndarray, int8, same shape as ``acc``

    Raises
    ------
    TypeError
        ``acc`` or ``bias`` is not an int32 array, ``shift`` not an int, ``relu`` not a bool.
    ValueError
        ``shift`` outside 0..31, ``axis`` out of range, bias length differs from the axis.
    """
    op = "requantize"
    acc = check_array(op, "acc", acc, np.int32, None, "array", xp)
    shift = check_shift(op, shift)
    relu = check_flag(op, "relu", relu)
    if bias is None:
        return _requantize(acc, shift, relu, None, 0, False, xp)
    if not is_int(axis) or not -acc.ndim <= axis < acc.ndim:
        raise ValueError(
            f"{op}: axis must be an int in {-acc.ndim}..{acc.ndim - 1} for an acc of shape "
            f"{acc.shape}, got {axis!r}"
        )
    bias = check_bias(op, bias, acc.shape[axis], xp)
    return _requantize(acc, shift, relu, bias, int(axis), False, xp)


def _requantize(
    acc: NDArray[np.int32],
    shift: int,
    relu: bool,
    bias: NDArray[np.int32] | None,
    axis: int,
    scratch: bool,
    xp: ModuleType,
) -> NDArray[np.int8]:
    """The requantize semantics on checked operands; overwrites ``acc`` if ``scratch``."""
    out = acc
    if bias is not None:
        shape = [1] * acc.ndim
        shape[axis] = acc.shape[axis]
        # The int32 wrap-around add, on the bits as uint32: unsigned addition is modular in
        # numpy and in CUDA alike (signed overflow is undefined in C).
        bits = out.view(np.uint32)
        total = xp.add(bits, bias.view(np.uint32).reshape(shape), out=bits if scratch else None)
        out = total.view(np.int32)
        scratch = True
    if shift:
        out = xp.right_shift(out, shift, out=out if scratch else None)  # arithmetic for int32
    # ReLU then clip to [-128, 127] is one clip to [0, 127].
    low = 0 if relu else _INT8_MIN
    result = xp.empty(out.shape, dtype=np.int8)
    xp.clip(out, low, _INT8_MAX, out=result)  # int32 to int8 in range after the clip
    return result


def relu(x: NDArray[np.int8], *, xp: ModuleType = np) -> NDArray[np.int8]:
    """ReLU on int8: ``max(x, 0)``, any shape.

    Raises
    ------
    TypeError
        ``x`` is not an int8 array.
    """
    x = check_array("relu", "x", x, np.int8, None, "array", xp)
    return xp.maximum(x, np.int8(0))


# --------------------------------------------------------------------------- conv2d


def _windows(x: NDArray[Any], kernel: tuple[int, int], stride: tuple[int, int],
             out_hw: tuple[int, int], xp: ModuleType) -> NDArray[Any]:
    """The (N, C, OH, OW, KH, KW) sliding-window view of an (already padded) NCHW array."""
    windows = xp.lib.stride_tricks.sliding_window_view(x, kernel, axis=(2, 3))
    return windows[:, :, :: stride[0], :: stride[1]][:, :, : out_hw[0], : out_hw[1]]


def _conv2d_acc_tiles(
    x: NDArray[np.int8], w: NDArray[np.int8], stride: tuple[int, int],
    padding: tuple[int, int], out_hw: tuple[int, int], xp: ModuleType, groups: int = 1,
) -> Iterator[tuple[slice, slice, NDArray[np.int32]]]:
    """The conv2d accumulator, one tile of images x output rows at a time.

    Each tile is one im2col matrix (of the `_gemm_dtype`) of at most about `_CONV_TILE_BYTES`
    (or one output row of one image, if that is larger) and one exact GEMM; with ``groups``,
    one exact GEMM per group, batched (`_exact_group_gemm`).

    Yields
    ------
    images : slice
        The tile's range of the batch axis N.
    rows : slice
        The tile's range of output rows OH.
    acc : ndarray, shape (OC, images, rows, OW), int32
        The accumulator of that tile, in the GEMM's channel-major layout.
    """
    n = x.shape[0]
    oc, _, kh, kw = w.shape
    oh, ow = out_hw
    reduction = x.shape[1] * kh * kw  # of all groups together: the im2col matrix's rows
    dtype = _gemm_dtype(xp)
    xf = x.astype(dtype)
    if padding != (0, 0):
        xf = xp.pad(xf, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    windows = _windows(xf, (kh, kw), stride, out_hw, xp)
    # (groups, OC / groups, C / groups * KH * KW): a group's output channels read its inputs.
    weights = w.reshape(groups, oc // groups, w.shape[1] * kh * kw).astype(dtype)
    if groups == 1:
        weights = weights[0]
    tile_bytes = _CONV_TILE_BYTES[xp.__name__]
    item = np.dtype(dtype).itemsize
    image_bytes = max(1, reduction * oh * ow * item)
    if image_bytes <= tile_bytes:
        n_step, row_step = max(1, tile_bytes // image_bytes), oh
    else:
        n_step, row_step = 1, max(1, tile_bytes // max(1, reduction * ow * item))
    for n0 in range(0, n, n_step):
        images = slice(n0, min(n, n0 + n_step))
        for r0 in range(0, oh, row_step):
            rows = slice(r0, min(oh, r0 + row_step))
            tile = windows[images, :, rows]  # (n_t, C, r_t, OW, KH, KW)
            n_t, r_t = tile.shape[0], tile.shape[2]
            # Rows ordered (c, kh, kw) like w flattened per output channel; columns (n, oh, ow).
            cols = tile.transpose(1, 4, 5, 0, 2, 3).reshape(reduction, n_t * r_t * ow)
            if groups == 1:
                acc = _exact_gemm(weights, cols, xp)  # (OC, n_t * r_t * OW)
            else:  # rows (group, c, kh, kw): the groups' matrices one after another
                acc = _exact_group_gemm(weights, cols.reshape(groups, -1, cols.shape[1]), xp)
            yield images, rows, acc.reshape(oc, n_t, r_t, ow)


def _exact_group_gemm(a: NDArray[np.floating], b: NDArray[np.floating], xp: ModuleType
                      ) -> NDArray[np.int32]:
    """`_exact_gemm` of every group at once: ``a`` (G, M, K) and ``b`` (G, K, N) holding
    int8 values, the (G * M, N) int32 products stacked. float32 when K <= `FLOAT32_CHUNK_K`
    (every sum an integer below 2**24: exact), else float64 (exact while K < 2**39)."""
    g, m, k = a.shape
    n = b.shape[2]
    if 0 in (g, m, k, n):  # cuBLAS is not asked for empty products
        return xp.zeros((g * m, n), dtype=np.int32)
    if a.dtype == np.float32 and k <= FLOAT32_CHUNK_K:
        return xp.matmul(a, b).astype(np.int32).reshape(g * m, n)
    total = xp.matmul(a.astype(np.float64), b.astype(np.float64))
    return _wrap_int32(total.astype(np.int64)).reshape(g * m, n)


def _check_conv(
    op: str, x: object, w: object, stride: object, padding: object, xp: ModuleType,
    groups: object = 1,
) -> tuple[NDArray[np.int8], NDArray[np.int8], tuple[int, int], tuple[int, int], tuple[int, int]]:
    """Validate conv2d operands; return x, w, stride, padding and output (OH, OW)."""
    x = check_array(op, "x", x, np.int8, 4, "NCHW", xp)
    w = check_array(op, "w", w, np.int8, 4, "OIHW", xp)
    groups = check_groups(op, groups, x.shape[1], w.shape[0])
    if w.shape[1] * groups != x.shape[1]:
        per = "" if groups == 1 else f" per group ({groups} groups)"
        raise ValueError(
            f"{op}: w must have {x.shape[1] // groups} input channels{per} to match x of shape "
            f"{x.shape}, got w of shape {w.shape}"
        )
    if w.shape[2] < 1 or w.shape[3] < 1:
        raise ValueError(f"{op}: w must have a kernel of at least 1x1, got w of shape {w.shape}")
    stride_hw = check_pair(op, "stride", stride, 1)
    padding_hw = check_pair(op, "padding", padding, 0)
    kernel = (int(w.shape[2]), int(w.shape[3]))
    out_hw = _output_size(op, (x.shape[2], x.shape[3]), kernel, stride_hw, padding_hw)
    return x, w, stride_hw, padding_hw, out_hw


def conv2d_acc(
    x: NDArray[np.int8], w: NDArray[np.int8], stride: Pair = 1, padding: Pair = 0, *,
    groups: int = 1, xp: ModuleType = np,
) -> NDArray[np.int32]:
    """Raw int32 accumulator of a 2-D convolution (cross-correlation, zero padding).

    ``acc[n, o, i, j] = sum_{c, kh, kw} x_pad[n, g*C/G + c, i*sh + kh, j*sw + kw] * w[o, c, kh,
    kw]`` with two's-complement int32 wrap-around, where output channel ``o`` is in group
    ``g = o // (OC/G)`` of the ``G = groups`` (``G = 1``: every input channel; ``G = C = OC``:
    a depthwise convolution).

    Parameters
    ----------
    x : ndarray, shape (N, C, H, W), int8
        Input activations.
    w : ndarray, shape (OC, C / groups, KH, KW), int8
        Weights.
    stride : int or (int, int)
        Window step (sh, sw) in pixels, >= 1.
    padding : int or (int, int)
        Zero padding (ph, pw) in pixels added on both sides, >= 0.
    groups : int
        Channel groups, dividing C and OC (ONNX's ``group``).

    Returns
    -------
    ndarray, shape (N, OC, OH, OW), int32
        ``OH = (H + 2*ph - KH) // sh + 1``, ``OW`` likewise.

    Raises
    ------
    TypeError
        ``x`` or ``w`` is not an int8 array; stride / padding not ints or pairs of ints.
    ValueError
        Wrong ndim, channel mismatch, empty kernel, stride < 1, padding < 0, kernel larger than
        the padded input.
    """
    x, w, stride_hw, padding_hw, out_hw = _check_conv("conv2d_acc", x, w, stride, padding, xp,
                                                      groups)
    out = xp.empty((x.shape[0], w.shape[0], *out_hw), dtype=np.int32)
    for images, rows, acc in _conv2d_acc_tiles(x, w, stride_hw, padding_hw, out_hw, xp,
                                               int(groups)):
        out[images, :, rows] = acc.transpose(1, 0, 2, 3)
    return out


def conv2d(
    x: NDArray[np.int8],
    w: NDArray[np.int8],
    bias: NDArray[np.int32] | None = None,
    stride: Pair = 1,
    padding: Pair = 0,
    shift: int = 0,
    relu: bool = False,
    *,
    groups: int = 1,
    xp: ModuleType = np,
) -> NDArray[np.int8]:
    """Quantized 2-D convolution: `conv2d_acc`, then `requantize` (bias, shift, ReLU, clip).

    Parameters
    ----------
    x : ndarray, shape (N, C, H, W), int8
        Input activations.
    w : ndarray, shape (OC, C / groups, KH, KW), int8
        Weights (``groups``: as `conv2d_acc`).
    bias : ndarray, shape (OC,), int32, optional
        Per-output-channel bias, added to the accumulator with int32 wrap-around.
    stride : int or (int, int)
        Window step (sh, sw) in pixels, >= 1.
    padding : int or (int, int)
        Zero padding (ph, pw) in pixels added on both sides, >= 0.
    shift : int
        Arithmetic right shift in bits, 0..31.
    relu : bool
        Apply ReLU after the shift.
    groups : int
        Channel groups, dividing C and OC (as `conv2d_acc`).

    Returns
    -------
    ndarray, shape (N, OC, OH, OW), int8

    Raises
    ------
    TypeError
        An operand of the wrong dtype or type (see `conv2d_acc`, `requantize`).
    ValueError
        Wrong ndim, channel mismatch, bad stride / padding, kernel larger than the padded input,
        bias of the wrong length, shift outside 0..31.
    """
    op = "conv2d"
    x, w, stride_hw, padding_hw, out_hw = _check_conv(op, x, w, stride, padding, xp, groups)
    bias = check_bias(op, bias, w.shape[0], xp)
    shift = check_shift(op, shift)
    relu = check_flag(op, "relu", relu)
    out = xp.empty((x.shape[0], w.shape[0], *out_hw), dtype=np.int8)
    for images, rows, acc in _conv2d_acc_tiles(x, w, stride_hw, padding_hw, out_hw, xp,
                                               int(groups)):
        # Requantize before going to NCHW: the transpose then moves int8 instead of int32.
        tile = _requantize(acc, shift, relu, bias, 0, True, xp)
        out[images, :, rows] = tile.transpose(1, 0, 2, 3)
    return out


# --------------------------------------------------------------------------- matmul / dense


def check_matmul(op: str, a: object, b: object, b_name: str, xp: ModuleType = np
                 ) -> tuple[NDArray, NDArray]:
    """Check int8 matrix operands: ``a`` (M, K) and ``b`` (K, N), or (N, K) named ``w``."""
    a = check_array(op, "a" if b_name == "b" else "x", a, np.int8, 2, "(M, K)", xp)
    layout = "(K, N)" if b_name == "b" else "(N, K)"
    b = check_array(op, b_name, b, np.int8, 2, layout, xp)
    k_axis = 0 if b_name == "b" else 1
    if b.shape[k_axis] != a.shape[1]:
        raise ValueError(
            f"{op}: {b_name} must be {layout} with K={a.shape[1]} to match {a.shape}, "
            f"got {b_name} of shape {b.shape}"
        )
    return a, b


def matmul_acc(a: NDArray[np.int8], b: NDArray[np.int8], *, xp: ModuleType = np
               ) -> NDArray[np.int32]:
    """Raw int32 accumulator of an int8 matrix product, with int32 wrap-around.

    Parameters
    ----------
    a : ndarray, shape (M, K), int8
    b : ndarray, shape (K, N), int8

    Returns
    -------
    ndarray, shape (M, N), int32

    Raises
    ------
    TypeError
        ``a`` or ``b`` is not an int8 array.
    ValueError
        Not 2-D, or the inner dimensions differ.
    """
    a, b = check_matmul("matmul_acc", a, b, "b", xp)
    return _matmul_acc(a, b, xp)


def _matmul_acc(a: NDArray[np.int8], b: NDArray[np.int8], xp: ModuleType) -> NDArray[np.int32]:
    """The exact wrapped accumulator of checked int8 matrices."""
    dtype = _gemm_dtype(xp)
    return _exact_gemm(a.astype(dtype), b.astype(dtype), xp)


def _matmul_requant(
    op: str, a: NDArray[np.int8], b: NDArray[np.int8], bias: object, shift: object,
    relu: object, xp: ModuleType,
) -> NDArray[np.int8]:
    """Check the epilogue's arguments; ``a @ b`` requantized (bias per column of ``b``)."""
    bias = check_bias(op, bias, b.shape[1], xp)
    shift = check_shift(op, shift)
    relu = check_flag(op, "relu", relu)
    return _requantize(_matmul_acc(a, b, xp), shift, relu, bias, 1, True, xp)


def matmul(
    a: NDArray[np.int8],
    b: NDArray[np.int8],
    bias: NDArray[np.int32] | None = None,
    shift: int = 0,
    relu: bool = False,
    *,
    xp: ModuleType = np,
) -> NDArray[np.int8]:
    """Quantized matrix product: `matmul_acc`, then `requantize` (bias, shift, ReLU, clip).

    Parameters
    ----------
    a : ndarray, shape (M, K), int8
    b : ndarray, shape (K, N), int8
    bias : ndarray, shape (N,), int32, optional
        Per-output-column bias, added with int32 wrap-around.
    shift : int
        Arithmetic right shift in bits, 0..31.
    relu : bool
        Apply ReLU after the shift.

    Returns
    -------
    ndarray, shape (M, N), int8

    Raises
    ------
    TypeError
        An operand of the wrong dtype or type.
    ValueError
        Not 2-D, inner dimensions differ, bias of the wrong length, shift outside 0..31.
    """
    a, b = check_matmul("matmul", a, b, "b", xp)
    return _matmul_requant("matmul", a, b, bias, shift, relu, xp)


def dense(
    x: NDArray[np.int8],
    w: NDArray[np.int8],
    bias: NDArray[np.int32] | None = None,
    shift: int = 0,
    relu: bool = False,
    *,
    xp: ModuleType = np,
) -> NDArray[np.int8]:
    """Fully connected layer with OI weights: ``matmul(x, w.T, bias, shift, relu)``.

    Parameters
    ----------
    x : ndarray, shape (M, K), int8
        M rows (batch) of K input features.
    w : ndarray, shape (N, K), int8
        N output features by K input features (OI layout).
    bias : ndarray, shape (N,), int32, optional
    shift : int
        Arithmetic right shift in bits, 0..31.
    relu : bool
        Apply ReLU after the shift.

    Returns
    -------
    ndarray, shape (M, N), int8

    Raises
    ------
    TypeError, ValueError
        As `matmul`, with ``w``'s K on its second axis.
    """
    x, w = check_matmul("dense", x, w, "w", xp)
    return _matmul_requant("dense", x, w.T, bias, shift, relu, xp)


# --------------------------------------------------------------------------- pooling


def pool_windows(
    op: str, x: object, kernel: object, stride: object, padding: object, pad_value: int,
    xp: ModuleType = np,
) -> NDArray[np.int8]:
    """Validate pooling operands; return the (N, C, OH, OW, KH, KW) window view of padded x."""
    x = check_array(op, "x", x, np.int8, 4, "NCHW", xp)
    kernel_hw = check_pair(op, "kernel", kernel, 1)
    stride_hw = kernel_hw if stride is None else check_pair(op, "stride", stride, 1)
    padding_hw = check_pair(op, "padding", padding, 0)
    if padding_hw[0] >= kernel_hw[0] or padding_hw[1] >= kernel_hw[1]:
        raise ValueError(
            f"{op}: padding must be smaller than the kernel {kernel_hw}, got {padding_hw}"
        )
    out_hw = _output_size(op, (x.shape[2], x.shape[3]), kernel_hw, stride_hw, padding_hw)
    if padding_hw != (0, 0):
        pads = ((0, 0), (0, 0), (padding_hw[0],) * 2, (padding_hw[1],) * 2)
        x = xp.pad(x, pads, constant_values=np.int8(pad_value))
    return _windows(x, kernel_hw, stride_hw, out_hw, xp)


def max_pool2d(
    x: NDArray[np.int8], kernel: Pair, stride: Pair | None = None, padding: Pair = 0,
    ceil_mode: bool = False, *, xp: ModuleType = np,
) -> NDArray[np.int8]:
    """2-D max pooling; padding cells hold -128, so they never beat a real value. With
    ``ceil_mode`` the output has ONNX's ceil-mode size (:func:`compiler.graph.nn.ceil_extra`:
    more -128 cells below and right).

    Parameters
    ----------
    x : ndarray, shape (N, C, H, W), int8
    kernel : int or (int, int)
        Window (KH, KW), >= 1.
    stride : int or (int, int), optional
        Window step, >= 1; defaults to ``kernel``.
    padding : int or (int, int)
        Padding on both sides, >= 0 and smaller than the kernel (so that no window is all
        padding).

    Returns
    -------
    ndarray, shape (N, C, OH, OW), int8

    Raises
    ------
    TypeError
        ``x`` not int8; kernel / stride / padding not ints or pairs of ints.
    ValueError
        Wrong ndim, kernel or stride < 1, padding < 0 or >= kernel, kernel larger than the
        padded input.
    """
    if ceil_mode:
        x = check_array("max_pool2d", "x", x, np.int8, 4, "NCHW", xp)
        k_hw = check_pair("max_pool2d", "kernel", kernel, 1)
        s_hw = k_hw if stride is None else check_pair("max_pool2d", "stride", stride, 1)
        eh, ew = nn.ceil_extra(x.shape[2:], k_hw, s_hw,
                               check_pair("max_pool2d", "padding", padding, 0))
        x = xp.pad(x, ((0, 0), (0, 0), (0, eh), (0, ew)), constant_values=np.int8(_INT8_MIN))
    windows = pool_windows("max_pool2d", x, kernel, stride, padding, _INT8_MIN, xp)
    return windows.max(axis=(4, 5))


def avg_pool2d(
    x: NDArray[np.int8], kernel: Pair, stride: Pair | None = None, padding: Pair = 0, *,
    xp: ModuleType = np,
) -> NDArray[np.int8]:
    """2-D average pooling: floor(window sum / (KH*KW)), zero padding counted (count_include_pad).

    Takes the arguments of `max_pool2d` (``padding`` is zero padding here) and raises as it
    does. The result, shape (N, C, OH, OW), int8, is always in range: an average of int8 values
    is an int8 value.
    """
    windows = pool_windows("avg_pool2d", x, kernel, stride, padding, 0, xp)
    kh, kw = windows.shape[4:]
    # int64 keeps the window sum exact for any window size (int32 would do below 2**24 cells).
    sums = windows.sum(axis=(4, 5), dtype=np.int64)
    return (sums // (kh * kw)).astype(np.int8)


def global_avg_pool(x: NDArray[np.int8], *, xp: ModuleType = np) -> NDArray[np.int8]:
    """Global average pooling: floor(sum over H, W / (H*W)) per image and channel.

    Parameters
    ----------
    x : ndarray, shape (N, C, H, W), int8
        H and W must be >= 1.

    Returns
    -------
    ndarray, shape (N, C, 1, 1), int8

    Raises
    ------
    TypeError
        ``x`` is not an int8 array.
    ValueError
        ``x`` is not 4-D, or has an empty spatial extent.
    """
    op = "global_avg_pool"
    x = check_array(op, "x", x, np.int8, 4, "NCHW", xp)
    if x.shape[2] < 1 or x.shape[3] < 1:
        raise ValueError(f"{op}: x must have H, W >= 1, got shape {x.shape}")
    sums = x.sum(axis=(2, 3), keepdims=True, dtype=np.int64)
    return (sums // (x.shape[2] * x.shape[3])).astype(np.int8)


# --------------------------------------------------------------------------- elementwise


def add(
    a: NDArray[np.int8], b: NDArray[np.int8], shift: int = 0, relu: bool = False, *,
    xp: ModuleType = np,
) -> NDArray[np.int8]:
    """Residual add with requantization: ``clip(relu?((a + b) >> shift))`` computed in int32.

    Parameters
    ----------
    a, b : ndarray, int8, same shape
    shift : int
        Arithmetic right shift in bits, 0..31.
    relu : bool
        Apply ReLU after the shift.

    Returns
    -------
    ndarray, int8, same shape as ``a``

    Raises
    ------
    TypeError
        ``a`` or ``b`` not int8, ``shift`` not an int.
    ValueError
        Shapes differ, or shift outside 0..31.
    """
    a, b, shift, relu = _check_add("add", a, b, None, shift, relu, xp)
    acc = a.astype(np.int32) + b.astype(np.int32)
    return _requantize(acc, shift, relu, None, 0, True, xp)


def _check_add(
    op: str, a: object, b: object, ndim: int | None, shift: object, relu: object,
    xp: ModuleType,
) -> tuple[NDArray[np.int8], NDArray[np.int8], int, bool]:
    """Check two int8 arrays of one shape (of rank ``ndim``, if given), shift and relu."""
    layout = "array" if ndim is None else "NCHW"
    a = check_array(op, "a", a, np.int8, ndim, layout, xp)
    b = check_array(op, "b", b, np.int8, ndim, layout, xp)
    if a.shape != b.shape:
        raise ValueError(f"{op}: b must have a's shape {a.shape}, got shape {b.shape}")
    return a, b, check_shift(op, shift), check_flag(op, "relu", relu)


# --------------------------------------------------------------------------- argument checks
def check_conv2d_args(
    op: str, x: object, w: object, bias: object, stride: object, padding: object,
    shift: object, relu: object, xp: ModuleType = np, groups: object = 1,
) -> tuple[NDArray[np.int8], NDArray[np.int8], NDArray[np.int32] | None, tuple[int, int],
           tuple[int, int], int, bool]:
    """Validate conv2d arguments exactly as `conv2d` does (same messages, prefixed ``op``).

    Returns x, w, bias, (sh, sw), (ph, pw), shift, relu. Backends call this so that every
    entry point rejects bad input with one wording.
    """
    x, w, stride_hw, padding_hw, _ = _check_conv(op, x, w, stride, padding, xp, groups)
    return (x, w, check_bias(op, bias, w.shape[0], xp), stride_hw, padding_hw,
            check_shift(op, shift), check_flag(op, "relu", relu))


def check_add_args(
    op: str, a: object, b: object, shift: object, relu: object, xp: ModuleType = np,
) -> tuple[NDArray[np.int8], NDArray[np.int8], int, bool]:
    """Validate residual-add arguments (two int8 NCHW arrays of one shape, shift, relu)."""
    return _check_add(op, a, b, 4, shift, relu, xp)


def check_matmul_args(
    op: str, a: object, b: object, bias: object, shift: object, relu: object,
    xp: ModuleType = np,
) -> tuple[NDArray[np.int8], NDArray[np.int8], NDArray[np.int32] | None, int, bool]:
    """Validate matmul arguments exactly as `matmul` does; returns a, b, bias, shift, relu."""
    a, b = check_matmul(op, a, b, "b", xp)
    return (a, b, check_bias(op, bias, b.shape[1], xp), check_shift(op, shift),
            check_flag(op, "relu", relu))


# --------------------------------------------------------------------------- transformers
# The float operators and the data movement are defined once, for numpy and CuPy alike, in
# compiler.graph.nn (float64 inside, float32 out); these call them with the kernels' ``xp``.


def batch_matmul(a: NDArray[np.int8], b: NDArray[np.int8], shift: int = 0,
                 relu: bool = False, *, xp: ModuleType = np) -> NDArray[np.int8]:
    """Per group: ``clip(relu?((a @ b) >> shift))`` with int32 accumulation (wrap-around).

    Parameters
    ----------
    a : ndarray, shape (..., M, K), int8
    b : ndarray, shape (..., K, N), int8, the same leading axes
    shift, relu
        As `matmul` (no bias).

    Returns
    -------
    ndarray, shape (..., M, N), int8

    Raises
    ------
    TypeError, ValueError
        Not int8, shapes that do not multiply, shift outside 0..31.
    """
    a, b, shift, relu = check_batch_matmul_args("batch_matmul", a, b, shift, relu, xp)
    # float64 holds every partial sum of int8 products exactly below 2**39 of them.
    exact = xp.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
    acc = _wrap_int32(exact).astype(np.int64) >> shift
    return xp.clip(acc, 0 if relu else _INT8_MIN, _INT8_MAX).astype(np.int8)


def check_batch_matmul_args(op: str, a: object, b: object, shift: object, relu: object,
                            xp: ModuleType = np
                            ) -> tuple[NDArray[np.int8], NDArray[np.int8], int, bool]:
    """Validate `batch_matmul`'s operands (TypeError / ValueError naming what was wrong)."""
    a = check_array(op, "a", a, np.int8, None, "(..., M, K)", xp)
    b = check_array(op, "b", b, np.int8, None, "(..., K, N)", xp)
    if a.ndim < 2 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{op}: a {a.shape} and b {b.shape} do not multiply (same leading "
                         "axes, (..., M, K) @ (..., K, N))")
    return a, b, check_shift(op, shift), check_flag(op, "relu", relu)


def softmax(x: NDArray[np.float32], axis: int = -1, causal: bool = False, *,
            xp: ModuleType = np) -> NDArray[np.float32]:
    """Softmax along ``axis``, causal or not (:func:`compiler.graph.nn.softmax`)."""
    return nn.softmax(x, axis, xp=xp, causal=causal)  # type: ignore[no-any-return]


def clip(x: NDArray[Any], low: float | None, high: float | None,
         scale_shift: int | None = None, *, xp: ModuleType = np) -> NDArray[Any]:
    """``x`` clamped to ``[low, high]``, on int8 at ``scale_shift``
    (:func:`compiler.graph.nn.clip`)."""
    return nn.clip(x, low, high, scale_shift, xp=xp)  # type: ignore[no-any-return]


def rms_norm(x: NDArray[np.float32], gamma: NDArray[np.float32], epsilon: float = 1e-6, *,
             xp: ModuleType = np) -> NDArray[np.float32]:
    """RMS normalisation over the last axis (:func:`compiler.graph.nn.rms_norm`)."""
    return nn.rms_norm(x, gamma, epsilon, xp=xp)  # type: ignore[no-any-return]


def rotary(x: NDArray[np.float32], cos: NDArray[np.float32], sin: NDArray[np.float32],
           head_dim: int, *, xp: ModuleType = np) -> NDArray[np.float32]:
    """Rotary position embedding (:func:`compiler.graph.nn.rotary`)."""
    return nn.rotary(x, cos, sin, head_dim, xp=xp)  # type: ignore[no-any-return]


def layer_norm(x: NDArray[np.float32], gamma: NDArray[np.float32], beta: NDArray[np.float32],
               epsilon: float = 1e-5, *, xp: ModuleType = np) -> NDArray[np.float32]:
    """Layer normalisation over the last axis (:func:`compiler.graph.nn.layer_norm`)."""
    return nn.layer_norm(x, gamma, beta, epsilon, xp=xp)  # type: ignore[no-any-return]


def gelu(x: NDArray[np.float32], form: str = "erf", *, xp: ModuleType = np
         ) -> NDArray[np.float32]:
    """GELU, ``erf`` or ``tanh`` form (:func:`compiler.graph.nn.gelu`)."""
    return nn.gelu(x, form, xp=xp)  # type: ignore[no-any-return]


def elementwise(op: str, *args: NDArray[Any], xp: ModuleType = np) -> NDArray[np.float32]:
    """A float elementwise operator with broadcasting (:func:`compiler.graph.nn.elementwise`)."""
    return nn.elementwise(op, args, xp=xp)  # type: ignore[no-any-return]


def where(cond: NDArray[Any], x: NDArray[Any], y: NDArray[Any], *, xp: ModuleType = np
          ) -> NDArray[np.float32]:
    """``x`` where ``cond`` else ``y`` (:func:`compiler.graph.nn.where`)."""
    return nn.where(cond, x, y, xp=xp)  # type: ignore[no-any-return]


def reduce(op: str, x: NDArray[Any], axes: Sequence[int], keepdims: bool = True, *,
           xp: ModuleType = np) -> NDArray[np.float32]:
    """A float reduction (:func:`compiler.graph.nn.reduce`)."""
    return nn.reduce(op, x, axes, keepdims, xp=xp)  # type: ignore[no-any-return]


def transpose(x: NDArray[Any], perm: Sequence[int], *, xp: ModuleType = np) -> NDArray[Any]:
    """Axes permuted (:func:`compiler.graph.nn.transpose`)."""
    return nn.transpose(x, perm, xp=xp)  # type: ignore[no-any-return]


def reshape(x: NDArray[Any], shape: Sequence[int], *, xp: ModuleType = np) -> NDArray[Any]:
    """Reshaped in C order (:func:`compiler.graph.nn.reshape`)."""
    return nn.reshape(x, shape, xp=xp)  # type: ignore[no-any-return]


def take(x: NDArray[Any], indices: NDArray[Any], axis: int, *, xp: ModuleType = np
         ) -> NDArray[Any]:
    """Entries gathered along ``axis`` (:func:`compiler.graph.nn.take`)."""
    return nn.take(x, indices, axis, xp=xp)  # type: ignore[no-any-return]


def slice_axis(x: NDArray[Any], axis: int, start: int, stop: int, step: int = 1, *,
               xp: ModuleType = np) -> NDArray[Any]:
    """``start:stop:step`` along ``axis`` (:func:`compiler.graph.nn.slice_axis`)."""
    return nn.slice_axis(x, axis, start, stop, step, xp=xp)  # type: ignore[no-any-return]


def concat(xs: Sequence[NDArray[Any]], axis: int, *, xp: ModuleType = np) -> NDArray[Any]:
    """Arrays joined along ``axis`` (:func:`compiler.graph.nn.concat`)."""
    return nn.concat(xs, axis, xp=xp)  # type: ignore[no-any-return]


def embedding(ids: NDArray[Any], table: NDArray[Any], *, xp: ModuleType = np) -> NDArray[Any]:
    """Rows of ``table`` by id (:func:`compiler.graph.nn.embedding`)."""
    return nn.embedding(ids, table, xp=xp)  # type: ignore[no-any-return]


def check_fold_window_args(kernel: object, stride: object, padding: object
                           ) -> tuple[tuple[int, int], ...]:
    """``fold_window``'s window, stride and padding as checked (h, w) pairs."""
    return (check_pair("fold_window", "kernel", kernel, 1),
            check_pair("fold_window", "stride", stride, 1),
            check_pair("fold_window", "padding", padding, 0))


def fold_window(x: NDArray[Any], kernel: Pair, stride: Pair = 1, padding: Pair = 0, *,
                xp: ModuleType = np) -> NDArray[Any]:
    """Each window of the zero-padded NCHW image gathered into channels, (N, C, H, W) ->
    (N, KH*KW*C, OH, OW) (:func:`compiler.graph.nn.fold_window`).

    Raises
    ------
    TypeError, ValueError
        A window, stride or padding that is not an int or (h, w) pair in range; an image that
        is not rank 4 or smaller than the window.
    """
    pairs = check_fold_window_args(kernel, stride, padding)
    return nn.fold_window(x, *pairs, xp=xp)  # type: ignore[no-any-return]
