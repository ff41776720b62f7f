"""Plain Python-loop models of the operators in `runtime.kernels`, used only by the tests.

Each model walks the output elements and window positions with explicit for-loops over Python
ints, spelling DESIGN.md §4 out literally, and shares no code with the kernels it checks. Only
for small shapes: it is slow on purpose.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

INT8_MIN = -128
INT8_MAX = 127


def wrap_int32(value: int) -> int:
    """Two's-complement wrap of a Python int to the int32 range."""
    return (value + 2**31) % 2**32 - 2**31


def requantize_value(acc: int, shift: int, relu: bool) -> int:
    """One accumulator value (already wrapped, bias added) to an int8 value."""
    value = acc >> shift  # Python's >> on ints is an arithmetic (floor) shift
    if relu:
        value = max(value, 0)
    return min(max(value, INT8_MIN), INT8_MAX)


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def conv2d_acc(
    x: NDArray[np.int8],
    w: NDArray[np.int8],
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    groups: int = 1,
) -> NDArray[np.int32]:
    """int32 accumulator of a zero-padded cross-correlation, one output element at a time;
    output channel ``o`` reads the input channels of its group (``o // (OC / groups)``)."""
    n_batch, _, height, width = x.shape
    out_channels, channels, kh, kw = w.shape
    per_group = out_channels // groups
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    oh = (height + 2 * ph - kh) // sh + 1
    ow = (width + 2 * pw - kw) // sw + 1
    out = np.zeros((n_batch, out_channels, oh, ow), dtype=np.int32)
    for n in range(n_batch):
        for o in range(out_channels):
            for i in range(oh):
                for j in range(ow):
                    total = 0
                    for c in range(channels):
                        for dy in range(kh):
                            for dx in range(kw):
                                y = i * sh + dy - ph
                                xx = j * sw + dx - pw
                                ci = o // per_group * channels + c
                                if 0 <= y < height and 0 <= xx < width:
                                    total += int(x[n, ci, y, xx]) * int(w[o, c, dy, dx])
                    out[n, o, i, j] = wrap_int32(total)
    return out


def conv2d(
    x: NDArray[np.int8],
    w: NDArray[np.int8],
    bias: NDArray[np.int32] | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    shift: int = 0,
    relu: bool = False,
    groups: int = 1,
) -> NDArray[np.int8]:
    """Quantized conv2d: accumulate, add bias (int32 wrap), shift, ReLU, clip."""
    acc = conv2d_acc(x, w, stride, padding, groups)
    out = np.zeros(acc.shape, dtype=np.int8)
    n_batch, out_channels, oh, ow = acc.shape
    for n in range(n_batch):
        for o in range(out_channels):
            b = 0 if bias is None else int(bias[o])
            for i in range(oh):
                for j in range(ow):
                    value = wrap_int32(int(acc[n, o, i, j]) + b)
                    out[n, o, i, j] = requantize_value(value, shift, relu)
    return out


def matmul_acc(a: NDArray[np.int8], b: NDArray[np.int8]) -> NDArray[np.int32]:
    """int32 accumulator of a (M, K) x (K, N) product, one element at a time."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=np.int32)
    for i in range(m):
        for j in range(n):
            total = 0
            for p in range(k):
                total += int(a[i, p]) * int(b[p, j])
            out[i, j] = wrap_int32(total)
    return out


def matmul(
    a: NDArray[np.int8],
    b: NDArray[np.int8],
    bias: NDArray[np.int32] | None = None,
    shift: int = 0,
    relu: bool = False,
) -> NDArray[np.int8]:
    """Quantized matmul: accumulate, add bias per column (int32 wrap), shift, ReLU, clip."""
    acc = matmul_acc(a, b)
    out = np.zeros(acc.shape, dtype=np.int8)
    for i in range(acc.shape[0]):
        for j in range(acc.shape[1]):
            b_j = 0 if bias is None else int(bias[j])
            out[i, j] = requantize_value(wrap_int32(int(acc[i, j]) + b_j), shift, relu)
    return out


def _pool(
    x: NDArray[np.int8],
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] | None,
    padding: int | tuple[int, int],
    pad_value: int,
) -> tuple[list[list[list[list[list[int]]]]], tuple[int, int]]:
    """Windows of every output position as lists of Python ints (padding cells = pad_value)."""
    n_batch, channels, height, width = x.shape
    kh, kw = _pair(kernel)
    sh, sw = _pair(kernel if stride is None else stride)
    ph, pw = _pair(padding)
    oh = (height + 2 * ph - kh) // sh + 1
    ow = (width + 2 * pw - kw) // sw + 1
    windows: list[list[list[list[list[int]]]]] = []
    for n in range(n_batch):
        per_channel = []
        for c in range(channels):
            rows = []
            for i in range(oh):
                row = []
                for j in range(ow):
                    cells = []
                    for dy in range(kh):
                        for dx in range(kw):
                            y = i * sh + dy - ph
                            xx = j * sw + dx - pw
                            inside = 0 <= y < height and 0 <= xx < width
                            cells.append(int(x[n, c, y, xx]) if inside else pad_value)
                    row.append(cells)
                rows.append(row)
            per_channel.append(rows)
        windows.append(per_channel)
    return windows, (kh, kw)


def max_pool2d(
    x: NDArray[np.int8],
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
) -> NDArray[np.int8]:
    """Max pooling, padding cells -128."""
    windows, _ = _pool(x, kernel, stride, padding, INT8_MIN)
    return np.array(
        [[[[max(cells) for cells in row] for row in rows] for rows in ch] for ch in windows],
        dtype=np.int8,
    )


def avg_pool2d(
    x: NDArray[np.int8],
    kernel: int | tuple[int, int],
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
) -> NDArray[np.int8]:
    """Average pooling, zero padding counted, floor division by the window size."""
    windows, (kh, kw) = _pool(x, kernel, stride, padding, 0)
    return np.array(
        [
            [[[sum(cells) // (kh * kw) for cells in row] for row in rows] for rows in ch]
            for ch in windows
        ],
        dtype=np.int8,
    )


def global_avg_pool(x: NDArray[np.int8]) -> NDArray[np.int8]:
    """floor(sum over H, W / (H*W)), shape (N, C, 1, 1)."""
    n_batch, channels, height, width = x.shape
    out = np.zeros((n_batch, channels, 1, 1), dtype=np.int8)
    for n in range(n_batch):
        for c in range(channels):
            total = 0
            for y in range(height):
                for xx in range(width):
                    total += int(x[n, c, y, xx])
            out[n, c, 0, 0] = total // (height * width)
    return out


def add(
    a: NDArray[np.int8], b: NDArray[np.int8], shift: int = 0, relu: bool = False
) -> NDArray[np.int8]:
    """Elementwise a + b in Python ints, then shift, ReLU, clip."""
    flat = [
        requantize_value(int(p) + int(q), shift, relu)
        for p, q in zip(a.ravel().tolist(), b.ravel().tolist(), strict=True)
    ]
    return np.array(flat, dtype=np.int8).reshape(a.shape)
