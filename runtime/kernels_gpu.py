"""CuPy int8 operator kernels: the runtime's ``--fallback gpu`` path.

Every function here has the signature of its namesake in `runtime.kernels` and returns an array
identical to the one it returns (same dtype, shape and values, bit for bit); the module docstring
of `runtime.kernels` defines the semantics. Arguments are validated by the numpy module's own
checks before any device work, so bad input raises the same exception with the same message.
numpy operands are copied to the GPU and the result back to the host; if any array operand is a
CuPy array, the result stays on the device as a CuPy array. CuPy is imported lazily:
`available` says whether it and a CUDA GPU are usable, and never raises.

Why the results are exact
-------------------------
The products are summed by a **float64** GEMM (cuBLAS DGEMM through ``cupy.matmul``) on int8
values converted to float64. Each product is an integer of magnitude at most
(-128) * (-128) = 2**14, and every partial sum of K of them is an integer of magnitude at most
K * 2**14, which float64 holds exactly while K * 2**14 <= 2**53, i.e. K <= 2**39 (no array that
fits in GPU memory comes close). So every addition is exact whatever order, blocking or split-K
cuBLAS picks, and FMA versus separate multiply-add makes no difference. The exact sum is then
converted to int64 and wrapped to int32 modulo 2**32, as the numpy kernels do.

The float32 route of the numpy kernels (chunks of at most 1024 products, |sum| <= 2**24) is not
used on the GPU: cuBLAS may run float32 GEMMs on TF32 tensor cores (CuPy does when ``CUPY_TF32=1``,
and other libraries in the process can change the default math mode), and whether the tensor
cores' internal accumulation is exact is not documented. TF32 applies to float32 only, so float64
is immune to these settings. Integer GEMM (int8 IMMA through ``cublasGemmEx``) would be faster but
has layout constraints and undocumented overflow behaviour. On data-centre GPUs (A100, H100,
H200) float64 tensor cores make DGEMM fast; on consumer GPUs with 1/32 or 1/64 rate FP64 these
kernels stay exact but are slower.

Everything around the GEMM is integer code in CuPy elementwise kernels (compiled once per process
by NVRTC): an im2col kernel that reads the int8 input with implicit zero padding, and one fused
requantize kernel (wrap to int32, int32 wrap-around bias add done in unsigned arithmetic,
arithmetic right shift, ReLU, clip to int8). Pooling, add and relu are elementwise kernels with
the numpy semantics spelled out (padding -128 for max, 0 for average, floor division).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from compiler.graph import nn
from runtime import kernels as _np_kernels
from runtime.kernels import (
    Pair,
    check_array,
    check_batch_matmul_args,
    check_bias,
    check_conv2d_args,
    check_flag,
    check_fold_window_args,
    check_matmul,
    check_matmul_args,
    check_pair,
    check_shift,
    is_int,
    pool_windows,
)

__all__ = [
    "add",
    "available",
    "avg_pool2d",
    "batch_matmul",
    "concat",
    "conv2d",
    "conv2d_acc",
    "dense",
    "elementwise",
    "embedding",
    "fold_window",
    "gelu",
    "global_avg_pool",
    "layer_norm",
    "matmul",
    "matmul_acc",
    "max_pool2d",
    "reduce",
    "relu",
    "requantize",
    "reshape",
    "slice_axis",
    "softmax",
    "take",
    "transpose",
    "unavailable_reason",
    "where",
]

#: Largest reduction length for which a float64 GEMM of int8 values is exact (K * 2**14 <= 2**53).
_FLOAT64_EXACT_K = 2**39

#: Size in bytes of the float64 im2col matrix that conv2d builds per GEMM. Tiling over images and
#: output rows bounds the device memory of large batches.
_CONV_TILE_BYTES = 256 * 2**20

_INT8_MIN = -128
_INT8_MAX = 127


# --------------------------------------------------------------------------- cupy, lazily


@functools.cache
def _probe() -> tuple[Any, str | None]:
    """Import CuPy and run one tiny kernel; return (cupy or None, reason it is unusable)."""
    try:
        import cupy as cp
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, f"CuPy cannot be imported: {type(exc).__name__}: {exc}"
    try:
        count = cp.cuda.runtime.getDeviceCount()
        if count < 1:
            return None, "no CUDA GPU is visible"
        # Compile and run one elementwise kernel and one DGEMM, so that NVRTC and cuBLAS work.
        probe = cp.arange(4, dtype=cp.float64).reshape(2, 2)
        if int((probe @ probe).sum() + (probe > 1).sum()) != 24:
            return None, "a CuPy smoke test on the GPU returned a wrong result"
    except Exception as exc:  # no driver, no device, NVRTC or cuBLAS missing
        return None, f"CuPy cannot use a CUDA GPU: {type(exc).__name__}: {exc}"
    return cp, None


def available() -> bool:
    """True if CuPy imports and can run kernels on a CUDA GPU; never raises."""
    try:
        return _probe()[0] is not None
    except Exception:
        return False


def unavailable_reason() -> str | None:
    """Why `available` is False (None when it is True); never raises."""
    try:
        return _probe()[1]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _cupy() -> Any:
    """The cupy module; RuntimeError if it or a GPU is unusable."""
    cp, reason = _probe()
    if cp is None:
        raise RuntimeError(f"runtime.kernels_gpu: no usable CUDA GPU: {reason}")
    return cp


# --------------------------------------------------------------------------- operand handling


def _is_cupy(value: object) -> bool:
    """True for a CuPy array, without importing CuPy."""
    module = type(value).__module__.split(".")[0]
    return module == "cupy" and hasattr(value, "__cuda_array_interface__")


def _host_view(value: object) -> object:
    """What the numpy checks should see: a CuPy array becomes a zero-stride numpy array of its
    dtype and shape (no data copied), so the checks accept it and word their errors as for a
    numpy array; anything else passes unchanged."""
    if _is_cupy(value):
        dtype, shape = value.dtype, value.shape  # type: ignore[attr-defined]
        return np.broadcast_to(np.zeros((), dtype=dtype), shape)
    return value


class _Operands:
    """Checked operands of one call: their host views, and where the result must go."""

    def __init__(self, *values: object) -> None:
        self.originals = values
        self.on_device = any(_is_cupy(v) for v in values)
        self.views = tuple(_host_view(v) for v in values)

    def device(self, index: int) -> Any:
        """Operand ``index`` as a C-contiguous CuPy array (copied to the GPU if on the host), of
        the operand's rank (``ascontiguousarray`` would make a 0-d operand 1-d)."""
        cp = _cupy()
        value = self.originals[index]
        if value is None:
            return None
        array = cp.asarray(value)
        return array if array.ndim == 0 else cp.ascontiguousarray(array)

    def result(self, out: Any) -> Any:
        """Return ``out`` as it should leave: on the device, or copied to the host."""
        if self.on_device:
            return out
        return _cupy().asnumpy(out)


# --------------------------------------------------------------------------- elementwise kernels


@functools.cache
def _kernel(name: str) -> Any:
    """Build (once) the CuPy elementwise kernel ``name``."""
    cp = _cupy()
    if name == "im2col":
        # cols[n, k, p] for one tile: k runs over (c, kh, kw) like w.reshape(OC, K), p over the
        # tile's (oh, ow); reads outside the input are the zero padding.
        return cp.ElementwiseKernel(
            "raw int8 x, int64 C, int64 H, int64 W, int64 KH, int64 KW, int64 SH, int64 SW, "
            "int64 PH, int64 PW, int64 OW, int64 N0, int64 R0, int64 PT",
            "float64 col",
            """
            const long long kk = C * KH * KW;
            const long long idx = i;
            const long long p = idx % PT;
            const long long t = idx / PT;
            const long long k = t % kk;
            const long long n = t / kk + N0;
            const long long kw = k % KW;
            const long long kh = (k / KW) % KH;
            const long long c = k / (KW * KH);
            const long long h = (p / OW + R0) * SH + kh - PH;
            const long long w = (p % OW) * SW + kw - PW;
            double v = 0.0;
            if (h >= 0 && h < H && w >= 0 && w < W) {
                v = (double)x[((n * C + c) * H + h) * W + w];
            }
            col = v;
            """,
            "accel_im2col_f64",
        )
    if name == "requantize":
        # acc is the exact sum (float64) or an int32 accumulator; bias[(i / inner) % nch].
        return cp.ElementwiseKernel(
            "T acc, raw int32 bias, int64 inner, int64 nch, int32 shift, bool do_relu, "
            "bool has_bias",
            "int8 out",
            """
            const long long exact = (long long)acc;
            unsigned int u = (unsigned int)(unsigned long long)exact;  /* wrap modulo 2**32 */
            if (has_bias) {
                const long long ch = ((long long)i / inner) % nch;
                u += (unsigned int)bias[ch];                           /* int32 wrap-around */
            }
            int v = (int)u;
            v >>= shift;                                               /* arithmetic: floor */
            const int low = do_relu ? 0 : -128;
            v = v < low ? low : (v > 127 ? 127 : v);
            out = (signed char)v;
            """,
            "accel_requantize_i8",
        )
    if name == "wrap":
        return cp.ElementwiseKernel(
            "float64 acc",
            "int32 out",
            "out = (int)(unsigned int)(unsigned long long)(long long)acc;",
            "accel_wrap_i32",
        )
    if name == "max_pool":
        return cp.ElementwiseKernel(
            "raw int8 x, int64 C, int64 H, int64 W, int64 KH, int64 KW, int64 SH, int64 SW, "
            "int64 PH, int64 PW, int64 OH, int64 OW",
            "int8 out",
            """
            const long long idx = i;
            const long long ow = idx % OW;
            const long long oh = (idx / OW) % OH;
            const long long nc = idx / (OW * OH);
            const long long base = nc * H * W;
            int m = -128;  /* the padding value: never beats a real value */
            for (long long kh = 0; kh < KH; ++kh) {
                const long long h = oh * SH + kh - PH;
                if (h < 0 || h >= H) continue;
                for (long long kw = 0; kw < KW; ++kw) {
                    const long long w = ow * SW + kw - PW;
                    if (w < 0 || w >= W) continue;
                    const int v = x[base + h * W + w];
                    m = v > m ? v : m;
                }
            }
            out = (signed char)m;
            """,
            "accel_max_pool_i8",
        )
    if name == "avg_pool":
        return cp.ElementwiseKernel(
            "raw int8 x, int64 C, int64 H, int64 W, int64 KH, int64 KW, int64 SH, int64 SW, "
            "int64 PH, int64 PW, int64 OH, int64 OW",
            "int8 out",
            """
            const long long idx = i;
            const long long ow = idx % OW;
            const long long oh = (idx / OW) % OH;
            const long long nc = idx / (OW * OH);
            const long long base = nc * H * W;
            long long s = 0;  /* zero padding adds nothing but counts in the divisor */
            for (long long kh = 0; kh < KH; ++kh) {
                const long long h = oh * SH + kh - PH;
                if (h < 0 || h >= H) continue;
                for (long long kw = 0; kw < KW; ++kw) {
                    const long long w = ow * SW + kw - PW;
                    if (w < 0 || w >= W) continue;
                    s += x[base + h * W + w];
                }
            }
            const long long d = KH * KW;
            long long q = s / d;                     /* C truncates toward zero ... */
            if (s % d != 0 && s < 0) q -= 1;         /* ... floor division rounds down */
            out = (signed char)q;
            """,
            "accel_avg_pool_i8",
        )
    if name == "floor_div":
        return cp.ElementwiseKernel(
            "int64 s, int64 d",
            "int8 out",
            """
            long long q = s / d;
            if (s % d != 0 && s < 0) q -= 1;
            out = (signed char)q;
            """,
            "accel_floor_div_i8",
        )
    if name == "add":
        return cp.ElementwiseKernel(
            "int8 a, int8 b, int32 shift, bool do_relu",
            "int8 out",
            """
            int v = (int)a + (int)b;
            v >>= shift;
            const int low = do_relu ? 0 : -128;
            v = v < low ? low : (v > 127 ? 127 : v);
            out = (signed char)v;
            """,
            "accel_add_i8",
        )
    if name == "relu":
        return cp.ElementwiseKernel(
            "int8 x", "int8 out", "out = x > 0 ? x : (signed char)0;", "accel_relu_i8"
        )
    raise KeyError(name)


def _requantize_device(acc: Any, shift: int, relu: bool, bias: Any, axis: int) -> Any:
    """Fused requantize of a device accumulator (float64 exact sums or int32) to int8."""
    cp = _cupy()
    acc = cp.ascontiguousarray(acc)
    out = cp.empty(acc.shape, dtype=cp.int8)
    if out.size == 0:
        return out
    if bias is None:
        bias_arg, inner, nch = cp.zeros(1, dtype=cp.int32), 1, 1
    else:
        bias_arg = bias
        nch = acc.shape[axis]
        inner = int(np.prod(acc.shape[axis + 1 :], dtype=np.int64))
    _kernel("requantize")(
        acc, bias_arg, inner, nch, np.int32(shift), bool(relu), bias is not None, out
    )
    return out


# --------------------------------------------------------------------------- exact GEMM


def _exact_gemm_f64(a: Any, b: Any) -> Any:
    """float64 product of int8-valued operands: exact integer sums (see the module docstring).

    ``a`` is (M, K) and ``b`` is (K, N) or (B, K, N); the result is (M, N) or (B, M, N).
    """
    cp = _cupy()
    k = a.shape[-1]
    assert k <= _FLOAT64_EXACT_K
    shape = (*b.shape[:-2], a.shape[0], b.shape[-1])
    if k == 0 or 0 in shape:
        return cp.zeros(shape, dtype=cp.float64)
    return cp.matmul(a, b)


def _matmul_device(a: Any, b: Any) -> Any:
    cp = _cupy()
    return _exact_gemm_f64(a.astype(cp.float64), b.astype(cp.float64))


# --------------------------------------------------------------------------- requantize / relu


def requantize(
    acc: NDArray[np.int32],
    shift: int,
    relu: bool = False,
    bias: NDArray[np.int32] | None = None,
    axis: int = 1,
) -> NDArray[np.int8]:
    """GPU `runtime.kernels.requantize`: ``clip(relu?((acc + bias) >> shift))`` to int8."""
    op = "requantize"
    ops = _Operands(acc, bias)
    acc_v, bias_v = ops.views
    acc_v = check_array(op, "acc", acc_v, np.int32, None, "array")
    shift = check_shift(op, shift)
    relu = check_flag(op, "relu", relu)
    if bias is not None:
        if not is_int(axis) or not -acc_v.ndim <= axis < acc_v.ndim:
            # Let the numpy kernel word the error: it raises before computing anything.
            _np_kernels.requantize(acc_v, shift, relu, bias_v, axis)  # type: ignore[arg-type]
            raise AssertionError("unreachable: numpy requantize accepted a bad axis")
        axis = int(axis) % acc_v.ndim
        check_bias(op, bias_v, acc_v.shape[axis])
    out = _requantize_device(ops.device(0), shift, relu, ops.device(1), int(axis))
    return ops.result(out)


def relu(x: NDArray[np.int8]) -> NDArray[np.int8]:
    """GPU `runtime.kernels.relu`: ``max(x, 0)`` on int8, any shape."""
    ops = _Operands(x)
    check_array("relu", "x", ops.views[0], np.int8, None, "array")
    return ops.result(_kernel("relu")(ops.device(0)))


# --------------------------------------------------------------------------- conv2d


def _conv_tiles(
    x: Any, w: Any, stride: tuple[int, int], padding: tuple[int, int], out_hw: tuple[int, int]
) -> Iterator[tuple[slice, slice, Any]]:
    """Exact conv2d sums per tile of images x output rows, as float64 (n_t, OC, r_t, OW)."""
    cp = _cupy()
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    oh, ow = out_hw
    reduction = c * kh * kw
    weights = w.reshape(oc, reduction).astype(cp.float64)
    image_bytes = max(1, reduction * oh * ow * 8)
    if image_bytes <= _CONV_TILE_BYTES:
        n_step, row_step = max(1, _CONV_TILE_BYTES // image_bytes), oh
    else:
        n_step, row_step = 1, max(1, _CONV_TILE_BYTES // max(1, reduction * ow * 8))
    im2col = _kernel("im2col")
    for n0 in range(0, n, n_step):
        images = slice(n0, min(n, n0 + n_step))
        n_t = images.stop - n0
        for r0 in range(0, oh, row_step):
            rows = slice(r0, min(oh, r0 + row_step))
            r_t = rows.stop - r0
            cols = cp.empty((n_t, reduction, r_t * ow), dtype=cp.float64)
            if cols.size:
                im2col(
                    x,
                    c,
                    h,
                    wd,
                    kh,
                    kw,
                    stride[0],
                    stride[1],
                    padding[0],
                    padding[1],
                    ow,
                    n0,
                    r0,
                    r_t * ow,
                    cols,
                )
            acc = _exact_gemm_f64(weights, cols)  # (n_t, OC, r_t * OW)
            yield images, rows, acc.reshape(n_t, oc, r_t, ow)


def _conv_out_hw(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    stride: tuple[int, int],
    padding: tuple[int, int],
) -> tuple[int, int]:
    """Output (OH, OW) of checked conv operands (the check made sure the kernel fits)."""
    return (
        (x_shape[2] + 2 * padding[0] - w_shape[2]) // stride[0] + 1,
        (x_shape[3] + 2 * padding[1] - w_shape[3]) // stride[1] + 1,
    )


def conv2d_acc(
    x: NDArray[np.int8], w: NDArray[np.int8], stride: Pair = 1, padding: Pair = 0
) -> NDArray[np.int32]:
    """GPU `runtime.kernels.conv2d_acc`: raw int32 accumulator, int32 wrap-around."""
    ops = _Operands(x, w)
    x_v, w_v, _, stride_hw, padding_hw, _, _ = check_conv2d_args(
        "conv2d_acc", *ops.views, None, stride, padding, 0, False
    )
    cp = _cupy()
    out_hw = _conv_out_hw(x_v.shape, w_v.shape, stride_hw, padding_hw)
    out = cp.empty((x_v.shape[0], w_v.shape[0], *out_hw), dtype=cp.int32)
    xd, wd = ops.device(0), ops.device(1)
    wrap = _kernel("wrap")
    for images, rows, acc in _conv_tiles(xd, wd, stride_hw, padding_hw, out_hw):
        out[images, :, rows] = wrap(acc)
    return ops.result(out)


def conv2d(
    x: NDArray[np.int8],
    w: NDArray[np.int8],
    bias: NDArray[np.int32] | None = None,
    stride: Pair = 1,
    padding: Pair = 0,
    shift: int = 0,
    relu: bool = False,
) -> NDArray[np.int8]:
    """GPU `runtime.kernels.conv2d`: exact conv2d sums, then bias, shift, ReLU, clip to int8."""
    ops = _Operands(x, w, bias)
    x_v, w_v, _, stride_hw, padding_hw, shift, relu = check_conv2d_args(
        "conv2d", *ops.views, stride, padding, shift, relu
    )
    cp = _cupy()
    out_hw = _conv_out_hw(x_v.shape, w_v.shape, stride_hw, padding_hw)
    out = cp.empty((x_v.shape[0], w_v.shape[0], *out_hw), dtype=cp.int8)
    xd, wd, bd = ops.device(0), ops.device(1), ops.device(2)
    for images, rows, acc in _conv_tiles(xd, wd, stride_hw, padding_hw, out_hw):
        tile = _requantize_device(acc, shift, relu, bd, axis=1)
        if images == slice(0, out.shape[0]) and rows == slice(0, out.shape[2]):
            out = tile  # one tile: already the whole NCHW result
        else:
            out[images, :, rows] = tile
    return ops.result(out)


# --------------------------------------------------------------------------- matmul / dense


def matmul_acc(a: NDArray[np.int8], b: NDArray[np.int8]) -> NDArray[np.int32]:
    """GPU `runtime.kernels.matmul_acc`: raw int32 accumulator, int32 wrap-around."""
    ops = _Operands(a, b)
    check_matmul("matmul_acc", *ops.views, "b")
    acc = _matmul_device(ops.device(0), ops.device(1))
    return ops.result(_kernel("wrap")(acc))


def matmul(
    a: NDArray[np.int8],
    b: NDArray[np.int8],
    bias: NDArray[np.int32] | None = None,
    shift: int = 0,
    relu: bool = False,
) -> NDArray[np.int8]:
    """GPU `runtime.kernels.matmul`: exact product, then bias, shift, ReLU, clip to int8."""
    ops = _Operands(a, b, bias)
    _, _, _, shift, relu = check_matmul_args("matmul", *ops.views, shift, relu)
    acc = _matmul_device(ops.device(0), ops.device(1))
    return ops.result(_requantize_device(acc, shift, relu, ops.device(2), axis=1))


def dense(
    x: NDArray[np.int8],
    w: NDArray[np.int8],
    bias: NDArray[np.int32] | None = None,
    shift: int = 0,
    relu: bool = False,
) -> NDArray[np.int8]:
    """GPU `runtime.kernels.dense`: ``matmul(x, w.T, bias, shift, relu)`` with OI weights."""
    op = "dense"
    ops = _Operands(x, w, bias)
    x_v, w_v, bias_v = ops.views
    x_v, w_v = check_matmul(op, x_v, w_v, "w")
    check_bias(op, bias_v, w_v.shape[0])
    shift = check_shift(op, shift)
    relu = check_flag(op, "relu", relu)
    acc = _matmul_device(ops.device(0), ops.device(1).T)
    return ops.result(_requantize_device(acc, shift, relu, ops.device(2), axis=1))


# --------------------------------------------------------------------------- pooling


def _pool(
    op: str,
    name: str,
    pad_value: int,
    x: object,
    kernel: object,
    stride: object,
    padding: object,
) -> Any:
    ops = _Operands(x)
    x_v = check_array(op, "x", ops.views[0], np.int8, 4, "NCHW")
    # The numpy helper validates kernel, stride and padding; given one image of one channel
    # (a zero-stride view, so its padding costs H*W bytes at most), it words every error as
    # for x itself, since from here on the messages only mention H and W.
    one = np.broadcast_to(np.zeros((), dtype=np.int8), (1, 1, *x_v.shape[2:]))
    windows = pool_windows(op, one, kernel, stride, padding, pad_value)
    kernel_hw = check_pair(op, "kernel", kernel, 1)
    stride_hw = kernel_hw if stride is None else check_pair(op, "stride", stride, 1)
    padding_hw = check_pair(op, "padding", padding, 0)
    oh, ow = windows.shape[2:4]
    n, c, h, w = x_v.shape
    cp = _cupy()
    out = cp.empty((n, c, oh, ow), dtype=cp.int8)
    if out.size:
        _kernel(name)(ops.device(0), c, h, w, *kernel_hw, *stride_hw, *padding_hw, oh, ow, out)
    return ops.result(out)


def max_pool2d(
    x: NDArray[np.int8], kernel: Pair, stride: Pair | None = None, padding: Pair = 0
) -> NDArray[np.int8]:
    """GPU `runtime.kernels.max_pool2d`: padding cells hold -128."""
    return _pool("max_pool2d", "max_pool", _INT8_MIN, x, kernel, stride, padding)


def avg_pool2d(
    x: NDArray[np.int8], kernel: Pair, stride: Pair | None = None, padding: Pair = 0
) -> NDArray[np.int8]:
    """GPU `runtime.kernels.avg_pool2d`: floor(window sum / (KH*KW)), zero padding counted."""
    return _pool("avg_pool2d", "avg_pool", 0, x, kernel, stride, padding)


def global_avg_pool(x: NDArray[np.int8]) -> NDArray[np.int8]:
    """GPU `runtime.kernels.global_avg_pool`: floor(sum over H, W / (H*W)) per (n, c)."""
    op = "global_avg_pool"
    ops = _Operands(x)
    x_v = check_array(op, "x", ops.views[0], np.int8, 4, "NCHW")
    if x_v.shape[2] < 1 or x_v.shape[3] < 1:
        # Let the numpy kernel word the error (it raises before summing anything).
        _np_kernels.global_avg_pool(x_v)
        raise AssertionError("unreachable: numpy global_avg_pool accepted an empty extent")
    cp = _cupy()
    n, c, h, w = x_v.shape
    if n * c == 0:
        return ops.result(cp.empty((n, c, 1, 1), dtype=cp.int8))
    sums = ops.device(0).sum(axis=(2, 3), keepdims=True, dtype=cp.int64)  # exact integers
    return ops.result(_kernel("floor_div")(sums, np.int64(h * w)))


# --------------------------------------------------------------------------- elementwise


def add(
    a: NDArray[np.int8], b: NDArray[np.int8], shift: int = 0, relu: bool = False
) -> NDArray[np.int8]:
    """GPU `runtime.kernels.add`: ``clip(relu?((a + b) >> shift))`` computed in int32."""
    op = "add"
    ops = _Operands(a, b)
    a_v = check_array(op, "a", ops.views[0], np.int8, None, "array")
    b_v = check_array(op, "b", ops.views[1], np.int8, None, "array")
    if a_v.shape != b_v.shape:
        # Let the numpy kernel word the error: it raises before computing anything.
        _np_kernels.add(a_v, b_v, shift, relu)
        raise AssertionError("unreachable: numpy add accepted operands of different shapes")
    shift = check_shift(op, shift)
    relu = check_flag(op, "relu", relu)
    out = _kernel("add")(ops.device(0), ops.device(1), np.int32(shift), relu)
    return ops.result(out)


# --------------------------------------------------------------------------- transformers
# compiler.graph.nn defines these for any array module; here they run with xp = cupy.


def batch_matmul(a: NDArray[np.int8], b: NDArray[np.int8], shift: int = 0,
                 relu: bool = False) -> NDArray[np.int8]:
    """GPU `runtime.kernels.batch_matmul`: exact float64 products, int32 wrap, shift, clip."""
    ops = _Operands(a, b)
    _, _, shift, relu = check_batch_matmul_args("batch_matmul", *ops.views, shift, relu)
    cp = _cupy()
    exact = cp.matmul(ops.device(0).astype(cp.float64), ops.device(1).astype(cp.float64))
    acc = _kernel("wrap")(exact).astype(cp.int64) >> int(shift)
    return ops.result(cp.clip(acc, 0 if relu else -128, 127).astype(cp.int8))


def _nn_call(fn: Any, arrays: tuple[Any, ...], *args: Any) -> Any:
    """``fn(*arrays on the device, *args, xp=cupy)``, the result where the operands were."""
    ops = _Operands(*arrays)
    out = fn(*(ops.device(i) for i in range(len(arrays))), *args, xp=_cupy())
    return ops.result(out)


def softmax(x: NDArray[np.float32], axis: int = -1) -> NDArray[np.float32]:
    return _nn_call(nn.softmax, (x,), axis)  # type: ignore[no-any-return]


def layer_norm(x: NDArray[np.float32], gamma: NDArray[np.float32], beta: NDArray[np.float32],
               epsilon: float = 1e-5) -> NDArray[np.float32]:
    return _nn_call(nn.layer_norm, (x, gamma, beta), epsilon)  # type: ignore[no-any-return]


def gelu(x: NDArray[np.float32], form: str = "erf") -> NDArray[np.float32]:
    return _nn_call(nn.gelu, (x,), form)  # type: ignore[no-any-return]


def elementwise(op: str, *args: NDArray[Any]) -> NDArray[np.float32]:
    ops = _Operands(*args)
    out = nn.elementwise(op, [ops.device(i) for i in range(len(args))], xp=_cupy())
    return ops.result(out)  # type: ignore[no-any-return]


def where(cond: NDArray[Any], x: NDArray[Any], y: NDArray[Any]) -> NDArray[np.float32]:
    return _nn_call(nn.where, (cond, x, y))  # type: ignore[no-any-return]


def reduce(op: str, x: NDArray[Any], axes: Any, keepdims: bool = True) -> NDArray[np.float32]:
    ops = _Operands(x)
    out = nn.reduce(op, ops.device(0), axes, keepdims, xp=_cupy())
    return ops.result(out)  # type: ignore[no-any-return]


def transpose(x: NDArray[Any], perm: Any) -> NDArray[Any]:
    return _nn_call(nn.transpose, (x,), perm)  # type: ignore[no-any-return]


def reshape(x: NDArray[Any], shape: Any) -> NDArray[Any]:
    return _nn_call(nn.reshape, (x,), shape)  # type: ignore[no-any-return]


def take(x: NDArray[Any], indices: NDArray[Any], axis: int) -> NDArray[Any]:
    return _nn_call(nn.take, (x, indices), axis)  # type: ignore[no-any-return]


def slice_axis(x: NDArray[Any], axis: int, start: int, stop: int, step: int = 1) -> NDArray[Any]:
    return _nn_call(nn.slice_axis, (x,), axis, start, stop, step)  # type: ignore[no-any-return]


def concat(xs: Any, axis: int) -> NDArray[Any]:
    ops = _Operands(*xs)
    out = nn.concat([ops.device(i) for i in range(len(xs))], axis, xp=_cupy())
    return ops.result(out)  # type: ignore[no-any-return]


def embedding(ids: NDArray[Any], table: NDArray[Any]) -> NDArray[Any]:
    return _nn_call(nn.embedding, (ids, table))  # type: ignore[no-any-return]


def fold_window(x: NDArray[Any], kernel: Pair, stride: Pair = 1, padding: Pair = 0) -> NDArray[Any]:
    return _nn_call(nn.fold_window, (x,),  # type: ignore[no-any-return]
                    *check_fold_window_args(kernel, stride, padding))
