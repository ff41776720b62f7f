"""A plain numpy executor of graphs: the integer operators exactly, the float ones in float64.

The compiler may not import ``runtime``, so this module restates the integer semantics of
``runtime.kernels`` (DESIGN.md §4) in the simplest vectorised form, and the tests check that the
two agree op by op:

- conv2d / dense: im2col and one float64 GEMM. Products of int8 values are at most 2**14 and a
  float64 holds every integer below 2**53, so every partial sum, in any summation order, is exact
  for reductions shorter than 2**39; the exact sum is then wrapped to int32;
- requantisation: ``+ bias`` with int32 wrap-around, arithmetic shift right (floor), ReLU,
  clip to [-128, 127];
- add: ``(a + b) >> shift``, ReLU, clip; pools pad max-pool windows with -128 (``-inf`` for
  floats) and count zero padding in averages; integer averages are floor divisions;
- quantize: ``clip(rint(x * 2**s), -128, 127)`` (round half to even); dequantize: ``q * 2**-s``.

Float operators compute in float64 and store float32. Values whose type has a blocked layout
(``NCHW1n8c``) are stored packed (``accel.machine.dram.pack_activation``: zero padding); every
operator reads its inputs unpacked to their logical shape and packs its output as declared, so
``layout_pack`` / ``layout_unpack`` only move data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from accel.machine.dram import pack_activation, unpack_activation
from compiler.graph import nn
from compiler.graph.ir import Graph, GraphError, Node, TensorType
from compiler.graph.ops import parse_layout, physical_shape

__all__ = ["conv2d_acc", "dense_acc", "register_reference_kernel", "requantize", "run_node",
           "run_reference", "to_logical",
           "to_physical"]

#: Bound on the float64 im2col matrix built per GEMM; larger batches are split into images.
_IM2COL_BYTES = 64 * 2**20


# --------------------------------------------------------------------------- layouts
def to_physical(x: np.ndarray, t: TensorType) -> np.ndarray:
    """Store a logical array as type ``t`` says: packed if ``t.layout`` is blocked."""
    parsed = parse_layout(t.layout)
    if parsed is None:
        return x
    base, b, c = parsed
    if base == "TC":
        x = x.reshape(-1, x.shape[-1])
    if base in ("NC", "TC"):
        return np.ascontiguousarray(pack_activation(x[:, :, None, None], b, c)[:, :, 0, 0])
    return pack_activation(x, b, c)


def to_logical(x: np.ndarray, t: TensorType) -> np.ndarray:
    """Inverse of :func:`to_physical`: the array of logical shape ``t.shape``."""
    parsed = parse_layout(t.layout)
    if parsed is None:
        return x
    if parsed[0] in ("NC", "TC"):
        c = t.shape[-1]
        n = int(np.prod(t.shape[:-1], dtype=np.int64))
        flat = unpack_activation(x[:, :, None, None], (n, c, 1, 1))[:, :, 0, 0]
        return flat.reshape(t.shape)
    return unpack_activation(x, t.shape)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- helpers
def _pair(v: object) -> tuple[int, int]:
    if isinstance(v, tuple | list):
        return (int(v[0]), int(v[1]))
    return (int(v), int(v))  # type: ignore[call-overload]


def _is_int(x: np.ndarray) -> bool:
    return x.dtype.kind in "iu"


def _wrap32(x: np.ndarray) -> np.ndarray:
    """Two's-complement wrap of int64 values to the int32 range (kept as int64)."""
    return x.astype(np.int64).astype(np.uint32).view(np.int32).astype(np.int64)


def _requant(acc: np.ndarray, attrs: dict[str, Any], bias: np.ndarray | None,
             axis: int) -> np.ndarray:
    """int64 accumulator (already int32-wrapped) -> int8: bias, shift, ReLU, clip."""
    if bias is not None:
        shape = [1] * acc.ndim
        shape[axis] = -1
        acc = _wrap32(acc + bias.astype(np.int64).reshape(shape))
    acc = acc >> int(attrs.get("shift", 0))
    low = 0 if attrs.get("relu", False) else -128
    return np.clip(acc, low, 127).astype(np.int8)


def _float_tail(y: np.ndarray, node: Node, bias: np.ndarray | None, axis: int) -> np.ndarray:
    if bias is not None:
        shape = [1] * y.ndim
        shape[axis] = -1
        y = y + bias.astype(np.float64).reshape(shape)
    if node.attrs.get("relu", False):
        y = np.maximum(y, 0.0)
    return y.astype(np.float32)


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
             padding: tuple[int, int], pad_value: float) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) view of the padded input."""
    if padding != (0, 0):
        pads = ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2)
        x = np.pad(x, pads, constant_values=pad_value)
    oh = (x.shape[2] - kernel[0]) // stride[0] + 1
    ow = (x.shape[3] - kernel[1]) // stride[1] + 1
    win = sliding_window_view(x, kernel, axis=(2, 3))
    return win[:, :, :: stride[0], :: stride[1]][:, :, :oh, :ow]


def _param(graph: Graph, node: Node, key: str) -> np.ndarray | None:
    name = node.attrs.get(key)
    return None if name is None else graph.params[name]


# --------------------------------------------------------------------------- operators
def _conv_sum(x: np.ndarray, w: np.ndarray, stride: tuple[int, int],
              padding: tuple[int, int], groups: int = 1) -> np.ndarray:
    """float64 sum of a convolution (exact for int8 operands), shape (N, OC, OH, OW); with
    ``groups``, each group's output channels summed over its own input channels."""
    if groups != 1:
        cin, cout = x.shape[1] // groups, w.shape[0] // groups
        return np.concatenate([_conv_sum(x[:, g * cin:(g + 1) * cin],
                                         w[g * cout:(g + 1) * cout], stride, padding)
                               for g in range(groups)], axis=1)
    oc, c, kh, kw = w.shape
    win = _windows(x.astype(np.float64), (kh, kw), stride, padding, 0.0)
    n, _, oh, ow = win.shape[:4]
    wm = w.reshape(oc, c * kh * kw).astype(np.float64).T
    step = max(1, _IM2COL_BYTES // max(1, oh * ow * c * kh * kw * 8))
    acc = np.empty((n, oc, oh, ow), dtype=np.float64)
    for i in range(0, n, step):
        cols = win[i:i + step].transpose(0, 2, 3, 1, 4, 5).reshape(-1, c * kh * kw)
        acc[i:i + step] = (cols @ wm).reshape(-1, oh, ow, oc).transpose(0, 3, 1, 2)
    return acc


def conv2d_acc(x: np.ndarray, w: np.ndarray, stride: int | tuple[int, int] = 1,
               padding: int | tuple[int, int] = 0, groups: int = 1) -> np.ndarray:
    """int32 accumulator (wrapped, held in int64) of an int8 convolution.

    Parameters
    ----------
    x : ndarray, (N, C, H, W), int8
    w : ndarray, (OC, C / groups, KH, KW), int8
    stride, padding : int or (h, w)
    groups : int
        Channel groups (each output channel reads the input channels of its group).

    Returns
    -------
    ndarray, (N, OC, OH, OW), int64 holding int32 values
    """
    return _wrap32(_conv_sum(x, w, _pair(stride), _pair(padding), groups).astype(np.int64))


def dense_acc(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """int32 accumulator (wrapped, held in int64) of ``x (M, K) @ w (N, K).T``, int8 operands."""
    return _wrap32((x.astype(np.float64) @ w.astype(np.float64).T).astype(np.int64))


def requantize(acc: np.ndarray, bias: np.ndarray | None, shift: int, relu: bool,
               axis: int = 1) -> np.ndarray:
    """int32-valued accumulator -> int8, as ``runtime.kernels.requantize``."""
    return _requant(acc, {"shift": shift, "relu": relu}, bias, axis)


def _conv2d(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    (x,) = args
    w = _param(graph, node, "weight")
    assert w is not None
    bias = _param(graph, node, "bias")
    acc = _conv_sum(x, w, _pair(node.attrs.get("stride", 1)),
                    _pair(node.attrs.get("padding", 0)), int(node.attrs.get("groups", 1)))
    if _is_int(x):
        return _requant(_wrap32(acc.astype(np.int64)), node.attrs, bias, 1)
    return _float_tail(acc, node, bias, 1)


def _dense(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    (x,) = args
    w = _param(graph, node, "weight")
    assert w is not None
    bias = _param(graph, node, "bias")
    acc = x.astype(np.float64) @ w.astype(np.float64).T  # any rank: rows x features
    if _is_int(x):
        return _requant(_wrap32(acc.astype(np.int64)), node.attrs, bias, -1)
    return _float_tail(acc, node, bias, -1)


def _batch_matmul(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a, b = args
    acc = a.astype(np.float64) @ b.astype(np.float64)  # exact below 2**39 products
    if _is_int(a):
        return _requant(_wrap32(acc.astype(np.int64)), node.attrs, None, -1)
    return _float_tail(acc, node, None, -1)


def _conv2d_add(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    """conv2d of ``args[0]`` (int8 after its requantisation), then the residual add of the
    skip ``args[1]`` with ``add_shift`` and ``add_relu``."""
    x, skip = args
    t = _conv2d(node, [x], graph)
    add = {"shift": node.attrs.get("add_shift", 0), "relu": node.attrs.get("add_relu", False)}
    return _requant(t.astype(np.int64) + skip.astype(np.int64), add, None, 0)


def _add(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a, b = args
    if _is_int(a):
        return _requant(a.astype(np.int64) + b.astype(np.int64), node.attrs, None, 0)
    return _float_tail(a.astype(np.float64) + b.astype(np.float64), node, None, 0)


def _relu(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return np.maximum(args[0], args[0].dtype.type(0))


def _flatten(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return args[0].reshape(args[0].shape[0], -1)


def _pool_args(node: Node) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    kernel = _pair(node.attrs["kernel"])
    stride = kernel if node.attrs.get("stride") is None else _pair(node.attrs["stride"])
    return kernel, stride, _pair(node.attrs.get("padding", 0))


def _max_pool2d(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    (x,) = args
    low = -128 if _is_int(x) else -np.inf
    kernel, stride, padding = _pool_args(node)
    if node.attrs.get("ceil_mode"):
        eh, ew = nn.ceil_extra(x.shape[2:], kernel, stride, padding)
        x = np.pad(x, ((0, 0), (0, 0), (0, eh), (0, ew)), constant_values=low)
    return _windows(x, kernel, stride, padding, low).max(axis=(4, 5))


def _avg_pool2d(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    (x,) = args
    kernel, stride, padding = _pool_args(node)
    count = kernel[0] * kernel[1]
    if _is_int(x):
        sums = _windows(x, kernel, stride, padding, 0).sum(axis=(4, 5), dtype=np.int64)
        return (sums // count).astype(np.int8)
    win = _windows(x.astype(np.float64), kernel, stride, padding, 0.0)
    return (win.sum(axis=(4, 5)) / count).astype(np.float32)


def _global_avg_pool(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    (x,) = args
    count = x.shape[2] * x.shape[3]
    if _is_int(x):
        return (x.sum(axis=(2, 3), keepdims=True, dtype=np.int64) // count).astype(np.int8)
    return x.astype(np.float64).mean(axis=(2, 3), keepdims=True).astype(np.float32)


def _batch_norm(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    (x,) = args
    p = {k: graph.params[node.attrs[k]].astype(np.float64) for k in ("scale", "bias", "mean",
                                                                      "var")}
    k = p["scale"] / np.sqrt(p["var"] + float(node.attrs.get("epsilon", 1e-5)))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x.astype(np.float64) - p["mean"].reshape(shape)) * k.reshape(shape) \
        + p["bias"].reshape(shape)
    return y.astype(np.float32)


def _quantize(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    scaled = np.rint(args[0].astype(np.float64) * 2.0 ** int(node.attrs["scale_shift"]))
    return np.clip(scaled, -128, 127).astype(np.int8)


def _dequantize(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return (args[0].astype(np.float64) * 2.0 ** -int(node.attrs["scale_shift"])).astype(
        np.float32)


def _nn(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    """The operators of :mod:`compiler.graph.nn` (their one definition)."""
    a, op = node.attrs, node.op
    if op == "softmax":
        return nn.softmax(args[0], int(a.get("axis", -1)), causal=bool(a.get("causal", False)))
    if op == "layer_norm":
        return nn.layer_norm(args[0], graph.params[a["scale"]], graph.params[a["bias"]],
                             float(a.get("epsilon", 1e-5)))
    if op == "clip":
        return nn.clip(args[0], a.get("min"), a.get("max"), a.get("scale_shift")
                       if args[0].dtype == np.int8 else None)
    if op == "rms_norm":
        return nn.rms_norm(args[0], graph.params[a["scale"]], float(a.get("epsilon", 1e-6)))
    if op == "rotary":
        return nn.rotary(args[0], graph.params[a["cos"]], graph.params[a["sin"]],
                         int(a["head_dim"]))
    if op == "gelu":
        return nn.gelu(args[0], str(a.get("form", "erf")))
    if op in ("add", "sub", "mul", "div", "pow", "sqrt", "erf", "tanh", "sigmoid"):
        return nn.elementwise(op, args)
    if op == "where":
        return nn.where(graph.params[a["condition"]], args[0], args[1])
    if op.startswith("reduce_"):
        return nn.reduce(op, args[0], a.get("axes", range(args[0].ndim)),
                         bool(a.get("keepdims", True)))
    if op == "transpose":
        return nn.transpose(args[0], a["perm"])
    if op == "reshape":
        return nn.reshape(args[0], a["shape"])
    if op == "take":
        return nn.take(args[0], graph.params[a["indices"]], int(a.get("axis", 0)))
    if op == "slice":
        x = args[0]
        axis = int(a.get("axis", 0)) % x.ndim
        return nn.slice_axis(x, axis, int(a.get("start", 0)), int(a.get("stop", x.shape[axis])),
                             int(a.get("step", 1)))
    if op == "concat":
        return nn.concat(args, int(a.get("axis", 0)))
    if op == "embedding":
        return nn.embedding(args[0], graph.params[a["table"]])
    if op == "fold_window":
        return nn.fold_window(args[0], _pair(a["kernel"]), _pair(a.get("stride", 1)),
                              _pair(a.get("padding", 0)))
    raise GraphError(f"{graph.name}: node {node.name}: {op!r} is not a compiler.graph.nn "
                     "operator")


def _identity(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return args[0]


def _constant(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return graph.params[node.attrs["value"]]


_Kernel = Callable[[Node, list[np.ndarray], Graph], np.ndarray]

_KERNELS: dict[str, _Kernel] = {
    "conv2d": _conv2d, "conv2d_add": _conv2d_add, "dense": _dense,
    "batch_matmul": _batch_matmul, "relu": _relu,
    "flatten": _flatten,
    "max_pool2d": _max_pool2d, "avg_pool2d": _avg_pool2d, "global_avg_pool": _global_avg_pool,
    "batch_norm": _batch_norm, "quantize": _quantize, "dequantize": _dequantize,
    "layout_pack": _identity, "layout_unpack": _identity, "constant": _constant,
    **dict.fromkeys(("clip", "softmax", "layer_norm", "rms_norm", "rotary", "gelu", "sub",
                     "mul", "div", "pow", "sqrt", "erf", "tanh", "sigmoid", "where", "reduce_mean",
                     "reduce_sum", "reduce_max",
                     "transpose", "reshape", "take", "slice", "concat", "embedding",
                     "fold_window"), _nn),
    # An integer add requantises; a float one broadcasts (ONNX's Add).
    "add": lambda node, args, graph: (_add(node, args, graph)
                                      if _is_int(args[0]) or node.attrs.get("relu")
                                      else nn.elementwise("add", args)),
}


def register_reference_kernel(op: str, kernel: _Kernel) -> None:
    """Add (or replace) the reference kernel of operator ``op``: ``kernel(node, args, graph)``
    on plain-layout arrays (an operator of a test or an extension joins here)."""
    _KERNELS[op] = kernel


def run_node(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    """One node's reference output from its (physical) input arrays.

    Raises
    ------
    GraphError
        An operator without a reference kernel.
    """
    kernel = _KERNELS.get(node.op)
    if kernel is None:
        raise GraphError(f"{graph.name}: node {node.name} uses operator {node.op!r}, which has "
                         "no reference kernel")
    return kernel(node, args, graph)


# --------------------------------------------------------------------------- executor
def run_reference(graph: Graph, inputs: dict[str, np.ndarray],
                  keep: bool = False) -> dict[str, np.ndarray]:
    """Execute ``graph`` on numpy arrays, node by node in list order.

    Parameters
    ----------
    graph
        A graph with types for every value (see :func:`compiler.graph.ops.infer_types`).
    inputs
        One array per graph input, of its type's dtype and (physical) shape.
    keep
        Return every value (inputs and each node's output), not only the graph outputs.

    Returns
    -------
    dict[str, ndarray]
        Graph outputs (or every value) by name, stored as their types say: blocked layouts
        packed (use :func:`to_logical` to unpack).

    Raises
    ------
    GraphError
        A missing or mistyped input, an operator without a reference kernel, or an output whose
        shape or dtype differs from its declared type.
    """
    env: dict[str, np.ndarray] = {}
    for v in graph.inputs:
        if v not in inputs:
            raise GraphError(f"{graph.name}: no array given for input {v!r}")
        t = graph.values[v]
        x = np.asarray(inputs[v])
        if x.shape != physical_shape(t) or str(x.dtype) != t.dtype:
            raise GraphError(f"{graph.name}: input {v!r} must be {t.dtype} of shape "
                             f"{physical_shape(t)}, got {x.dtype} of shape {x.shape}")
        env[v] = x
    last_use: dict[str, int] = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            last_use[v] = i
    for i, n in enumerate(graph.nodes):
        kernel = _KERNELS.get(n.op)
        if kernel is None:
            raise GraphError(f"{graph.name}: node {n.name}: no reference kernel for {n.op!r}")
        args = [to_logical(env[v], graph.values[v]) for v in n.inputs]
        y = kernel(n, args, graph)
        (out,) = n.outputs
        t = graph.values[out]
        if y.shape != t.shape or str(y.dtype) != t.dtype:
            raise GraphError(f"{graph.name}: node {n.name} ({n.op}) gave {y.dtype} of shape "
                             f"{y.shape}, its type says {t}")
        env[out] = to_physical(y, t)
        if not keep:
            for v in n.inputs:
                if last_use[v] == i and v not in graph.outputs:
                    env.pop(v, None)
    if keep:
        return env
    return {v: env[v] for v in graph.outputs}
