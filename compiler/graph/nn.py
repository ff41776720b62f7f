"""Transformer operators, defined once for any numpy-like array module (numpy or CuPy).

The reference executor (:mod:`compiler.graph.reference`), the CPU fallback (``runtime.kernels``)
and the GPU fallback (``runtime.kernels_gpu``, with ``xp = cupy``) all call these functions, so
the three agree by construction where the arithmetic is the same:

- data movement (``transpose``, ``reshape``, ``take``, ``slice``, ``concat``, ``embedding``,
  and ``fold_window``, the gather of a convolution's windows into channels) is exact for any
  dtype, int8 included;
- the float operators compute in float64 and return float32: ``softmax`` (max-subtracted;
  causal, for decoders), ``layer_norm`` (mean and biased variance over the last axis),
  ``rms_norm`` (Llama's), ``rotary`` (rotary position embedding), ``gelu`` (the erf form, or the
  tanh approximation), elementwise ``sub`` / ``mul`` / ``div`` / ``pow`` / ``sqrt`` / ``erf`` /
  ``tanh`` / ``sigmoid`` with numpy broadcasting, ``where`` and the reductions. numpy and CuPy
  round their float64 ``exp``, ``tanh``, ``erf`` and ``sqrt`` differently in the last bits at
  most, so after the cast to float32 the two agree within one float32 ulp. Results below
  float32's smallest normal become a zero of their sign on both (the GPU's conversion flushes
  subnormals).

``erf`` (and ``erfc``, in ``gelu``) on numpy evaluates :func:`math.erf` (:func:`math.erfc`)
once per distinct input value (a dequantised int8 tensor has at most 256 of them); on CuPy it
is ``cupyx.scipy.special.erf`` (``erfc``). ``gelu`` is written without the cancellation of
``1 + erf(z)`` for negative inputs, so the agreement holds in its tail too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["GELU_FORMS", "ceil_extra", "clip", "concat", "elementwise", "embedding", "erf",
           "fold_window", "gelu", "layer_norm", "reduce", "reshape", "rms_norm", "rotary",
           "slice_axis", "softmax", "take", "transpose", "where"]

GELU_FORMS = ("erf", "tanh")
"""``gelu``'s forms: ``x/2 (1 + erf(x / sqrt 2))`` and ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715
x^3)))``."""

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _f64(x: Any, xp: Any) -> Any:
    return xp.asarray(x).astype(xp.float64)


_F32_TINY = float(np.finfo(np.float32).tiny)


def _f32(y: Any, xp: Any) -> Any:
    """A float64 result as float32, what would be a float32 subnormal flushed to a zero of its
    sign: the GPU's float64 -> float32 conversion flushes them, numpy's keeps them."""
    return xp.where(xp.abs(y) < _F32_TINY, 0.0 * y, y).astype(xp.float32)


def _special(name: str, x: Any, xp: Any) -> Any:
    """``math.<name>`` elementwise in float64: once per distinct value on numpy, CuPy's
    ``cupyx.scipy.special.<name>`` on CuPy."""
    x = _f64(x, xp)
    if xp is np:
        values, inverse = np.unique(x, return_inverse=True)
        fn = getattr(math, name)
        table = np.fromiter((fn(float(v)) for v in values), np.float64, len(values))
        return table[inverse].reshape(x.shape)
    import cupyx.scipy.special  # only where CuPy is the array module

    return getattr(cupyx.scipy.special, name)(x)


def erf(x: Any, xp: Any = np) -> Any:
    """The error function in float64 (see the module docstring)."""
    return _special("erf", x, xp)


def softmax(x: Any, axis: int = -1, xp: Any = np, causal: bool = False) -> Any:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``; float32.

    ``causal``: along the last axis, the row of query ``i`` (the second-last axis, ``Sq``
    rows) sees the keys ``j <= i + Sk - Sq`` only (``Sk`` keys, the last ``Sq`` of them the
    queries' own: a decoder's attention, with or without a KV cache), and is 0 on the others.
    Its sum is sequential, read at the row's last visible key: the same additions in the same
    order whatever the keys after it, so a row equals, bit for bit, the one row of a decoding
    step that sees the same keys (numpy's pairwise sum regroups with the length, which can
    change a float64 last bit).

    Raises
    ------
    ValueError
        ``causal`` along another axis than the last, or fewer keys than queries.
    """
    x = _f64(x, xp)
    if not causal:
        e = xp.exp(x - x.max(axis=axis, keepdims=True))
        return _f32(e / e.sum(axis=axis, keepdims=True), xp)
    if x.ndim < 2 or axis not in (-1, x.ndim - 1):
        raise ValueError(f"causal softmax is along the last of at least two axes, got axis "
                         f"{axis} of shape {tuple(x.shape)}")
    sq, sk = x.shape[-2], x.shape[-1]
    if sk < sq:
        raise ValueError(f"causal softmax: {sk} keys for {sq} queries (needs keys >= queries)")
    last = xp.arange(sq) + (sk - sq)  # each query's last visible key
    visible = xp.arange(sk)[None, :] <= last[:, None]
    top = xp.where(visible, x, -xp.inf).max(axis=-1, keepdims=True)
    e = xp.where(visible, xp.exp(x - top), 0.0)
    index = xp.broadcast_to(last[:, None], (*x.shape[:-1], 1))
    total = xp.take_along_axis(xp.cumsum(e, axis=-1), index, axis=-1)
    return _f32(e / total, xp)


def ceil_extra(in_hw: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
               padding: Sequence[int]) -> tuple[int, int]:
    """Cells to add below and right of a padded input so that the floor-mode window count is
    ONNX's and PyTorch's ``ceil_mode`` count: ``ceil((H + 2p - k) / s) + 1``, less one where the
    last window would start in the bottom (right) padding."""
    extra = []
    for h, k, s, p in zip(in_hw, kernel, stride, padding, strict=True):
        padded = h + 2 * p
        n = -(-(padded - k) // s) + 1
        if (n - 1) * s >= h + p:
            n -= 1
        extra.append(max(0, (n - 1) * s + k - padded))
    return extra[0], extra[1]


def clip(x: Any, low: float | None, high: float | None, scale_shift: int | None = None,
         xp: Any = np) -> Any:
    """``x`` clamped to ``[low, high]`` (None: no bound). On int8 (``scale_shift`` the
    value's scale, real = int8 * 2**-s) the bounds are ``rint(bound * 2**s)`` within int8:
    the same as clamping the real values and quantising, since rounding keeps order."""
    if scale_shift is None:
        y = xp.asarray(x)
        lo = -xp.inf if low is None else float(low)
        hi = xp.inf if high is None else float(high)
        return xp.clip(y, lo, hi).astype(y.dtype)
    bound = lambda v, d: d if v is None else int(min(127, max(-128, np.rint(  # noqa: E731
        float(v) * 2.0 ** int(scale_shift)))))
    return xp.clip(xp.asarray(x), bound(low, -128), bound(high, 127)).astype(xp.int8)


def rms_norm(x: Any, gamma: Any, epsilon: float = 1e-6, xp: Any = np) -> Any:
    """``x / sqrt(mean(x^2) + epsilon) * gamma`` over the last axis (Llama's RMSNorm);
    float32."""
    x = _f64(x, xp)
    ms = (x * x).mean(axis=-1, keepdims=True)
    return _f32(x / xp.sqrt(ms + float(epsilon)) * _f64(gamma, xp), xp)


def rotary(x: Any, cos: Any, sin: Any, head_dim: int, xp: Any = np) -> Any:
    """Rotary position embedding of ``x`` (..., S, heads * head_dim), Llama's (GPT-NeoX)
    half-split form: in each head, the pair ``(x[k], x[k + head_dim/2])`` of a token at
    position ``p`` is rotated by the angle whose ``cos`` and ``sin`` (S, head_dim/2) give at
    row ``p``; float32.

    Raises
    ------
    ValueError
        Tables of another shape, or a last axis that ``head_dim`` does not divide.
    """
    x = _f64(x, xp)
    s, width, half = x.shape[-2], x.shape[-1], head_dim // 2
    if head_dim % 2 or width % head_dim:
        raise ValueError(f"rotary: head_dim {head_dim} must be even and divide {width}")
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != (s, half):
            raise ValueError(f"rotary: {name} must have shape ({s}, {half}), got "
                             f"{tuple(t.shape)}")
    h = x.reshape(*x.shape[:-1], width // head_dim, head_dim)
    c, n = _f64(cos, xp)[:, None, :], _f64(sin, xp)[:, None, :]
    a, b = h[..., :half], h[..., half:]
    y = xp.concatenate([a * c - b * n, b * c + a * n], axis=-1)
    return _f32(y.reshape(x.shape), xp)


def layer_norm(x: Any, gamma: Any, beta: Any, epsilon: float = 1e-5, xp: Any = np) -> Any:
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over the last axis (biased
    variance, as ONNX's LayerNormalization); float32."""
    x = _f64(x, xp)
    mean = x.mean(axis=-1, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=-1, keepdims=True)
    y = d / xp.sqrt(var + float(epsilon)) * _f64(gamma, xp) + _f64(beta, xp)
    return _f32(y, xp)


def gelu(x: Any, form: str = "erf", xp: Any = np) -> Any:
    """GELU in its ``erf`` form or the ``tanh`` approximation; float32.

    Raises
    ------
    ValueError
        An unknown form.
    """
    x = _f64(x, xp)
    # Written without 1 + erf(...) or 1 + tanh(...), which cancel for negative x: there the
    # last bits of erf and tanh, which numpy and CuPy round differently, would be all that is
    # left (1 + erf(z) = erfc(-z); 1 + tanh(z) = 2 / (1 + exp(-2 z))).
    if form == "erf":
        y = 0.5 * x * _special("erfc", -x / math.sqrt(2.0), xp)
    elif form == "tanh":
        y = x / (1.0 + xp.exp(-2.0 * _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    else:
        raise ValueError(f"gelu: form must be one of {', '.join(GELU_FORMS)}, got {form!r}")
    return _f32(y, xp)


_ELEMENTWISE = {
    "add": lambda xp, a, b: a + b,
    "sub": lambda xp, a, b: a - b,
    "mul": lambda xp, a, b: a * b,
    "div": lambda xp, a, b: a / b,
    "pow": lambda xp, a, b: xp.power(a, b),
}
_UNARY = {
    "sqrt": lambda xp, a: xp.sqrt(a),
    "tanh": lambda xp, a: xp.tanh(a),
    "erf": lambda xp, a: erf(a, xp),
    # exp of -|x| only (no overflow), the two halves of the logistic function.
    "sigmoid": lambda xp, a: xp.where(a >= 0, 1.0 / (1.0 + xp.exp(-xp.abs(a))),
                                      xp.exp(-xp.abs(a)) / (1.0 + xp.exp(-xp.abs(a)))),
}


def elementwise(op: str, args: Sequence[Any], xp: Any = np) -> Any:
    """A float elementwise operator (``add``, ``sub``, ``mul``, ``div``, ``pow``, ``sqrt``,
    ``tanh``, ``erf``, ``sigmoid``) with numpy broadcasting, in float64, returned as float32."""
    xs = [_f64(a, xp) for a in args]
    fn = _ELEMENTWISE.get(op)
    y = fn(xp, *xs) if fn is not None else _UNARY[op](xp, *xs)
    return _f32(y, xp)


def where(cond: Any, x: Any, y: Any, xp: Any = np) -> Any:
    """``x`` where ``cond`` else ``y`` (broadcast), float32."""
    return _f32(xp.where(xp.asarray(cond, dtype=bool), _f64(x, xp), _f64(y, xp)), xp)


def reduce(op: str, x: Any, axes: Sequence[int], keepdims: bool, xp: Any = np) -> Any:
    """``reduce_mean`` / ``reduce_sum`` / ``reduce_max`` over ``axes``, float32."""
    x = _f64(x, xp)
    axis = tuple(int(a) for a in axes)
    fn = {"reduce_mean": x.mean, "reduce_sum": x.sum, "reduce_max": x.max}[op]
    return _f32(fn(axis=axis, keepdims=keepdims), xp)


def transpose(x: Any, perm: Sequence[int], xp: Any = np) -> Any:
    """``x`` with its axes permuted (any dtype). A strided view, not a copy: its reader copies
    it once into whatever layout it needs (attention's head split goes straight into the
    weight buffer's layout; see ``compiler.ops.batch_matmul.pack_weight_operand``)."""
    return xp.transpose(x, tuple(int(p) for p in perm))


def reshape(x: Any, shape: Sequence[int], xp: Any = np) -> Any:
    """``x`` reshaped (any dtype)."""
    return xp.ascontiguousarray(x).reshape(tuple(int(s) for s in shape))


def take(x: Any, indices: Any, axis: int, xp: Any = np) -> Any:
    """``numpy.take`` of constant ``indices`` along ``axis`` (any dtype)."""
    return xp.take(x, xp.asarray(indices, dtype=xp.int64), axis=int(axis))


def slice_axis(x: Any, axis: int, start: int, stop: int, step: int = 1, xp: Any = np) -> Any:
    """``x[..., start:stop:step, ...]`` along ``axis`` (a contiguous copy, any dtype)."""
    index = [slice(None)] * x.ndim
    index[int(axis)] = slice(int(start), int(stop), int(step))
    return xp.ascontiguousarray(x[tuple(index)])


def concat(xs: Sequence[Any], axis: int, xp: Any = np) -> Any:
    """Concatenation along ``axis`` (any dtype, all alike)."""
    return xp.concatenate([xp.asarray(x) for x in xs], axis=int(axis))


def embedding(ids: Any, table: Any, xp: Any = np) -> Any:
    """Rows of ``table`` picked by integer ``ids``: ``table[ids]`` (the table's dtype)."""
    return xp.asarray(table)[xp.asarray(ids, dtype=xp.int64)]


def fold_window(x: Any, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                xp: Any = np) -> Any:
    """Gather every ``kernel``-sized window of an NCHW image into channels (any dtype).

    The image is zero-padded by ``padding`` (rows, columns) on each side; output pixel
    ``(r, q)`` holds the window whose corner is padded pixel ``(r * stride[0], q * stride[1])``,
    with channel ``(i * kernel[1] + j) * C + c`` holding the window's row ``i``, column ``j``
    of channel ``c``. A convolution with the same window, stride and padding is then a 1x1
    convolution of the result (an im2col that keeps the image layout); a ``(1, KW)`` window
    with stride ``(1, SW)`` folds only the kernel's columns.

    Parameters
    ----------
    x : array, (N, C, H, W)
    kernel, stride, padding : (rows, columns)

    Returns
    -------
    array, (N, KH * KW * C, OH, OW), ``x``'s dtype, ``OH = (H + 2 PH - KH) // SH + 1``
    (``OW`` alike)

    Raises
    ------
    ValueError
        ``x`` is not rank 4, or the window does not fit the padded image.
    """
    (kh, kw), (sh, sw), (ph, pw) = (tuple(int(v) for v in p) for p in (kernel, stride, padding))
    if x.ndim != 4 or min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0:
        raise ValueError(f"fold_window: takes an NCHW image, a window, stride >= 1 and "
                         f"padding >= 0, got shape {tuple(x.shape)}, kernel {(kh, kw)}, "
                         f"stride {(sh, sw)}, padding {(ph, pw)}")
    n, c, h, w = x.shape
    if kh > h + 2 * ph or kw > w + 2 * pw:
        raise ValueError(f"fold_window: a {kh}x{kw} window does not fit the padded "
                         f"{h + 2 * ph}x{w + 2 * pw} image")
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    padded = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    out = xp.empty((n, kh, kw, c, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, i, j] = padded[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
    return out.reshape(n, kh * kw * c, oh, ow)
