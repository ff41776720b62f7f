"""Operator registry as data: each operator's fusion category and its type inference.

Every operator name that may appear in a :class:`~compiler.graph.ir.Graph` has one
:class:`OpDef` in :data:`OPS`: its :class:`OpPattern` (the fusion category of the TVM paper) and
a function that computes its output types from its input types and attributes. Type inference
works on *logical* shapes (``NCHW`` / ``NC``); a blocked layout (``NCHW1n8c``) only says how a
value is stored and never changes its logical shape (see :func:`physical_shape`).

Categories (TVM, OSDI'18, §3):

- ``INJECTIVE``: one-to-one maps (elementwise ``relu``, ``add``, ``batch_norm``, ``quantize``,
  ``dequantize``; ``flatten``, the layout transforms and ``fold_window``, a gather);
- ``REDUCTION``: outputs reduce windows of the input (the pools);
- ``COMPLEX_OUT_FUSABLE``: ``conv2d`` and ``dense``, onto whose output elementwise operators fuse;
- ``OPAQUE``: cannot be fused (``constant``).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from compiler.graph.ir import Graph, GraphError, Node, TensorType

__all__ = [
    "OPS",
    "OpDef",
    "OpPattern",
    "blocked_layout",
    "infer_types",
    "layout_fits",
    "op_pattern",
    "parse_layout",
    "physical_shape",
    "register_op",
]


class OpPattern(enum.Enum):
    """Fusion category of an operator (TVM's ``OpPattern``)."""

    INJECTIVE = "injective"
    REDUCTION = "reduction"
    COMPLEX_OUT_FUSABLE = "complex_out_fusable"
    OPAQUE = "opaque"


InferFn = Callable[[Node, list[TensorType], Graph], list[TensorType]]


@dataclass(frozen=True)
class OpDef:
    """One operator: name, fusion category, number of value inputs (-1: one or more), type
    inference."""

    name: str
    pattern: OpPattern
    arity: int
    infer: InferFn


# --------------------------------------------------------------------------- layouts
_LAYOUT = re.compile(r"^(NCHW|NC|TC)(\d+)n(\d+)c$")


def parse_layout(layout: str) -> tuple[str, int, int] | None:
    """Split a blocked layout ``NCHW{b}n{c}c`` / ``NC{b}n{c}c`` / ``TC{b}n{c}c`` into
    (base, b, c).

    ``TC`` is a channels-last tensor of any rank >= 3 (tokens x channels: every axis but the
    last counts as rows), blocked as the ``(rows, C)`` matrix would be in ``NC``. Returns None
    for the plain layouts (``NCHW``, ``NC``, ``ANY``).
    """
    m = _LAYOUT.match(layout)
    return None if m is None else (m.group(1), int(m.group(2)), int(m.group(3)))


def layout_fits(base: str, rank: int) -> bool:
    """Can a value of ``rank`` have a blocked layout of ``base``?"""
    return {"NCHW": rank == 4, "NC": rank == 2}.get(base, rank >= 3)


def blocked_layout(rank: int, batch: int, block: int, image: bool = True) -> str:
    """The blocked layout name of a value: ``NCHW`` for a rank-4 image, ``NC`` for rank 2,
    ``TC`` for any other channels-last tensor (rank 4 with ``image=False``)."""
    base = "NC" if rank == 2 else "NCHW" if rank == 4 and image else "TC"
    return f"{base}{batch}n{block}c"


def physical_shape(t: TensorType) -> tuple[int, ...]:
    """Shape of the array that stores a value: its logical shape, or the blocked shape
    ``(N/b, C/c, H, W, b, c)`` (``(N/b, C/c, b, c)`` for ``NC``; ``(R/b, C/c, b, c)`` for
    ``TC``, ``R`` the product of all axes but the last), rounded up."""
    parsed = parse_layout(t.layout)
    if parsed is None:
        return t.shape
    base, b, c = parsed
    if base == "TC":
        rows = int(np.prod(t.shape[:-1], dtype=np.int64))
        return (-(-rows // b), -(-t.shape[-1] // c), b, c)
    n, ch = t.shape[0], t.shape[1]
    return (-(-n // b), -(-ch // c), *t.shape[2:], b, c)


def _plain_layout(shape: tuple[int, ...]) -> str:
    return {4: "NCHW", 2: "NC"}.get(len(shape), "ANY")


# --------------------------------------------------------------------------- helpers
def _err(graph: Graph, node: Node, what: str) -> GraphError:
    return GraphError(f"{graph.name}: node {node.name} ({node.op}): {what}")


def _pair(graph: Graph, node: Node, key: str, default: int | None = None) -> tuple[int, int]:
    v = node.attrs.get(key, default)
    if isinstance(v, int | np.integer) and not isinstance(v, bool):
        return (int(v), int(v))
    if isinstance(v, tuple | list) and len(v) == 2 and all(isinstance(i, int | np.integer)
                                                           for i in v):
        return (int(v[0]), int(v[1]))
    raise _err(graph, node, f"attribute {key!r} must be an int or an (h, w) pair, got {v!r}")


def _param(graph: Graph, node: Node, key: str) -> np.ndarray | None:
    name = node.attrs.get(key)
    if name is None:
        return None
    if name not in graph.params:
        raise _err(graph, node, f"attribute {key!r} names missing param {name!r}")
    return graph.params[name]


def _rank(graph: Graph, node: Node, t: TensorType, rank: int, what: str) -> None:
    if len(t.shape) != rank:
        raise _err(graph, node, f"{what} must have rank {rank}, got {t}")


def _is_float(dtype: str) -> bool:
    return np.dtype(dtype).kind == "f"


def _window(graph: Graph, node: Node, hw: tuple[int, int], kernel: tuple[int, int],
            stride: tuple[int, int], padding: tuple[int, int]) -> tuple[int, int]:
    if min(stride) < 1 or min(kernel) < 1 or min(padding) < 0:
        raise _err(graph, node, f"kernel {kernel}, stride {stride}, padding {padding} out of "
                   "range")
    out = []
    for i in range(2):
        padded = hw[i] + 2 * padding[i]
        if kernel[i] > padded:
            raise _err(graph, node, f"a {kernel[0]}x{kernel[1]} window does not fit the padded "
                       f"{hw[0] + 2 * padding[0]}x{hw[1] + 2 * padding[1]} input")
        out.append((padded - kernel[i]) // stride[i] + 1)
    return out[0], out[1]


def _same_dtype(graph: Graph, node: Node, ins: list[TensorType]) -> str:
    dtypes = {t.dtype for t in ins}
    if len(dtypes) != 1:
        raise _err(graph, node, f"inputs must share a dtype, got {', '.join(sorted(dtypes))}")
    return ins[0].dtype


# --------------------------------------------------------------------------- inference rules
def _infer_conv2d(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    _rank(graph, node, x, 4, "input")
    w = _param(graph, node, "weight")
    if w is None or w.ndim != 4:
        raise _err(graph, node, "needs a 4-D OIHW 'weight' param")
    groups = node.attrs.get("groups", 1)
    if not isinstance(groups, int | np.integer) or groups < 1 or x.shape[1] % groups \
            or w.shape[0] % groups:
        raise _err(graph, node, f"groups must be a positive int dividing the input's "
                   f"{x.shape[1]} and the weight's {w.shape[0]} channels, got {groups!r}")
    if w.shape[1] * groups != x.shape[1]:
        per = "" if groups == 1 else f" per group ({groups} groups)"
        raise _err(graph, node, f"weight {w.shape} has {w.shape[1]} input channels{per}, "
                   f"input {x} has {x.shape[1]}")
    _check_bias(graph, node, x.dtype, w.shape[0])
    _check_requant(graph, node, x.dtype, w)
    oh, ow = _window(graph, node, x.shape[2:], (w.shape[2], w.shape[3]),
                     _pair(graph, node, "stride", 1), _pair(graph, node, "padding", 0))
    return [TensorType((x.shape[0], w.shape[0], oh, ow), x.dtype)]


def _infer_dense(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    if len(x.shape) < 2:
        raise _err(graph, node, f"input must have rank >= 2, got {x}")
    w = _param(graph, node, "weight")
    if w is None or w.ndim != 2:
        raise _err(graph, node, "needs a 2-D (N, K) 'weight' param")
    if w.shape[1] != x.shape[-1]:
        raise _err(graph, node, f"weight {w.shape} has K={w.shape[1]}, input {x} has "
                   f"K={x.shape[-1]}")
    _check_bias(graph, node, x.dtype, w.shape[0])
    _check_requant(graph, node, x.dtype, w)
    return [TensorType((*x.shape[:-1], w.shape[0]), x.dtype)]


def _infer_batch_matmul(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    a, b = ins
    if len(a.shape) < 2 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise _err(graph, node, f"operands {a} and {b} do not multiply (same leading axes, "
                   "(..., M, K) @ (..., K, N))")
    dtype = _same_dtype(graph, node, ins)
    _check_requant(graph, node, dtype, None)
    return [TensorType((*a.shape[:-1], b.shape[-1]), dtype)]


def _check_bias(graph: Graph, node: Node, dtype: str, channels: int) -> None:
    b = _param(graph, node, "bias")
    if b is None:
        return
    want = "float32" if _is_float(dtype) else "int32"
    if b.shape != (channels,) or str(b.dtype) != want:
        raise _err(graph, node, f"bias must be {want} of shape ({channels},), got "
                   f"{b.dtype} {b.shape}")


def _check_requant(graph: Graph, node: Node, dtype: str, w: np.ndarray | None,
                   shift_attr: str = "shift") -> None:
    if _is_float(dtype):
        if w is not None and not _is_float(str(w.dtype)):
            raise _err(graph, node, f"a float {node.op} needs a float weight, got {w.dtype}")
        return
    if dtype != "int8":
        raise _err(graph, node, f"integer operators take int8 values, got {dtype}")
    if w is not None and w.dtype != np.int8:
        raise _err(graph, node, f"weight must be int8, got {w.dtype}")
    shift = node.attrs.get(shift_attr, 0)
    if not isinstance(shift, int | np.integer) or not 0 <= shift <= 31:
        raise _err(graph, node, f"{shift_attr} must be an int in 0..31, got {shift!r}")


def _infer_add(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    a, b = ins
    dtype = _same_dtype(graph, node, ins)
    if _is_float(dtype):  # a float add broadcasts, as ONNX's Add
        return _infer_broadcast(node, ins, graph)
    if a.shape != b.shape:
        raise _err(graph, node, f"operands must have one shape, got {a} and {b}")
    _check_requant(graph, node, dtype, None)
    return [TensorType(a.shape, dtype)]


def _infer_conv2d_add(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    """conv2d of input 0, then the add of input 1 (the skip: the conv's output type)."""
    (out,) = _infer_conv2d(node, ins[:1], graph)
    if (ins[1].shape, ins[1].dtype) != (out.shape, out.dtype):
        raise _err(graph, node, f"skip operand {ins[1]} must have the convolution's shape and "
                   f"type, {out}")
    _check_requant(graph, node, out.dtype, None, "add_shift")
    return [out]


def _broadcast(graph: Graph, node: Node, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*shapes))
    except ValueError:
        raise _err(graph, node, f"shapes {', '.join(map(str, shapes))} do not broadcast") \
            from None


def _infer_broadcast(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    """A float elementwise operator with numpy broadcasting."""
    for t in ins:
        if not _is_float(t.dtype):
            raise _err(graph, node, f"{node.op} is a float operator, got {t}")
    return [TensorType(_broadcast(graph, node, [t.shape for t in ins]), "float32")]


def _infer_float(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    """A float operator that keeps its input's shape (softmax, gelu, sqrt, ...)."""
    (x,) = ins
    if not _is_float(x.dtype):
        raise _err(graph, node, f"{node.op} is a float operator, got {x}")
    if node.op == "gelu" and node.attrs.get("form", "erf") not in ("erf", "tanh"):
        raise _err(graph, node, f"attribute 'form' must be 'erf' or 'tanh', got "
                   f"{node.attrs.get('form')!r}")
    return [TensorType(x.shape, "float32")]


def _infer_layer_norm(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    if not _is_float(x.dtype):
        raise _err(graph, node, f"layer_norm is a float operator, got {x}")
    for key in ("scale", "bias"):
        p = _param(graph, node, key)
        if p is None or p.shape != (x.shape[-1],):
            raise _err(graph, node, f"param {key!r} must have shape ({x.shape[-1]},)")
    return [TensorType(x.shape, "float32")]


def _infer_rms_norm(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    if not _is_float(x.dtype):
        raise _err(graph, node, f"rms_norm is a float operator, got {x}")
    p = _param(graph, node, "scale")
    if p is None or p.shape != (x.shape[-1],):
        raise _err(graph, node, f"param 'scale' must have shape ({x.shape[-1]},)")
    return [TensorType(x.shape, "float32")]


def _infer_rotary(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    if not _is_float(x.dtype) or len(x.shape) < 2:
        raise _err(graph, node, f"rotary is a float operator on (..., S, width), got {x}")
    d = node.attrs.get("head_dim")
    if not isinstance(d, int) or d < 2 or d % 2 or x.shape[-1] % d:
        raise _err(graph, node, f"attribute 'head_dim' must be an even int dividing "
                   f"{x.shape[-1]}, got {d!r}")
    for key in ("cos", "sin"):
        p = _param(graph, node, key)
        if p is None or p.shape != (x.shape[-2], d // 2):
            raise _err(graph, node, f"param {key!r} must have shape ({x.shape[-2]}, {d // 2})")
    return [TensorType(x.shape, "float32")]


def _infer_where(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    cond = _param(graph, node, "condition")
    if cond is None:
        raise _err(graph, node, "needs a constant 'condition' param")
    (out,) = _infer_broadcast(node, ins, graph)
    return [TensorType(_broadcast(graph, node, [out.shape, cond.shape]), "float32")]


def _axis(graph: Graph, node: Node, rank: int, key: str = "axis") -> int:
    a = node.attrs.get(key, -1)
    if not isinstance(a, int | np.integer) or not -rank <= a < rank:
        raise _err(graph, node, f"attribute {key!r} must be an axis of a rank-{rank} value, "
                   f"got {a!r}")
    return int(a) % rank


def _infer_reduce(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    if not _is_float(x.dtype):
        raise _err(graph, node, f"{node.op} is a float operator, got {x}")
    axes = {int(a) % len(x.shape) for a in node.attrs.get("axes", range(len(x.shape)))}
    keep = bool(node.attrs.get("keepdims", True))
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape) if keep or i not in axes)
    return [TensorType(shape, "float32")]


def _infer_transpose(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    perm = tuple(int(p) for p in node.attrs.get("perm", ()))
    if sorted(perm) != list(range(len(x.shape))):
        raise _err(graph, node, f"attribute 'perm' must permute {len(x.shape)} axes, got "
                   f"{perm}")
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


def _infer_reshape(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    shape = tuple(int(s) for s in node.attrs.get("shape", ()))
    if min(shape, default=1) < 1 or int(np.prod(shape, dtype=np.int64)) != x.size:
        raise _err(graph, node, f"cannot reshape {x} to {shape}")
    return [TensorType(shape, x.dtype)]


def _infer_take(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    idx = _param(graph, node, "indices")
    if idx is None or idx.dtype.kind not in "iu":
        raise _err(graph, node, "needs an integer 'indices' param")
    axis = _axis(graph, node, len(x.shape))
    if idx.size and not (-x.shape[axis] <= idx.min() and idx.max() < x.shape[axis]):
        raise _err(graph, node, f"indices out of range for axis {axis} of {x}")
    return [TensorType((*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]), x.dtype)]


def _infer_slice(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    axis = _axis(graph, node, len(x.shape))
    a = node.attrs
    size = len(range(*slice(int(a.get("start", 0)), int(a.get("stop", x.shape[axis])),
                            int(a.get("step", 1))).indices(x.shape[axis])))
    if size < 1:
        raise _err(graph, node, f"the slice of axis {axis} of {x} is empty")
    return [TensorType((*x.shape[:axis], size, *x.shape[axis + 1:]), x.dtype)]


def _infer_concat(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    dtype = _same_dtype(graph, node, ins)
    axis = _axis(graph, node, len(ins[0].shape))
    for t in ins:
        if len(t.shape) != len(ins[0].shape) or any(
                s != r for i, (s, r) in enumerate(zip(t.shape, ins[0].shape, strict=True))
                if i != axis):
            raise _err(graph, node, f"operands {', '.join(map(str, ins))} differ off axis "
                       f"{axis}")
    size = sum(t.shape[axis] for t in ins)
    return [TensorType((*ins[0].shape[:axis], size, *ins[0].shape[axis + 1:]), dtype)]


def _infer_embedding(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (ids,) = ins
    if np.dtype(ids.dtype).kind not in "iu":
        raise _err(graph, node, f"indices must be integers, got {ids}")
    table = _param(graph, node, "table")
    if table is None or table.ndim != 2:
        raise _err(graph, node, "needs a 2-D 'table' param")
    return [TensorType((*ids.shape, table.shape[1]), str(table.dtype))]


def _infer_same(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    return [TensorType(ins[0].shape, ins[0].dtype)]


def _infer_clip(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    """``clip``: attrs ``min`` / ``max`` (real numbers, either None), and ``scale_shift``
    on int8 (the value's scale, which the bounds are rounded at)."""
    (x,) = ins
    lo, hi = node.attrs.get("min"), node.attrs.get("max")
    for key, v in (("min", lo), ("max", hi)):
        if v is not None and not (isinstance(v, int | float) and math.isfinite(v)):
            raise _err(graph, node, f"attribute {key!r} must be a finite number or None, got "
                       f"{v!r}")
    if lo is not None and hi is not None and lo > hi:
        raise _err(graph, node, f"min {lo} is above max {hi}")
    if x.dtype == "int8" and not isinstance(node.attrs.get("scale_shift"), int):
        raise _err(graph, node, "an int8 clip needs its value's 'scale_shift'")
    return [TensorType(x.shape, x.dtype)]


def _infer_flatten(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    if len(x.shape) < 2:
        raise _err(graph, node, f"input must have rank >= 2, got {x}")
    return [TensorType((x.shape[0], x.size // x.shape[0]), x.dtype)]


def _infer_pool(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    _rank(graph, node, x, 4, "input")
    kernel = _pair(graph, node, "kernel")
    stride = _pair(graph, node, "stride", 1) if node.attrs.get("stride") is not None else kernel
    padding = _pair(graph, node, "padding", 0)
    if padding[0] >= kernel[0] or padding[1] >= kernel[1]:
        raise _err(graph, node, f"padding {padding} must be smaller than the kernel {kernel}")
    hw = x.shape[2:]
    if node.attrs.get("ceil_mode"):
        if node.op != "max_pool2d":
            raise _err(graph, node, "ceil_mode is supported on max_pool2d only")
        from compiler.graph.nn import ceil_extra

        extra = ceil_extra(hw, kernel, stride, padding)
        hw = (hw[0] + extra[0], hw[1] + extra[1])
    oh, ow = _window(graph, node, hw, kernel, stride, padding)
    return [TensorType((x.shape[0], x.shape[1], oh, ow), x.dtype)]


def _infer_fold_window(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    _rank(graph, node, x, 4, "input")
    kernel = _pair(graph, node, "kernel")
    oh, ow = _window(graph, node, x.shape[2:], kernel, _pair(graph, node, "stride", 1),
                     _pair(graph, node, "padding", 0))
    return [TensorType((x.shape[0], x.shape[1] * kernel[0] * kernel[1], oh, ow), x.dtype)]


def _infer_global_pool(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    _rank(graph, node, x, 4, "input")
    return [TensorType((x.shape[0], x.shape[1], 1, 1), x.dtype)]


def _infer_batch_norm(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    if not _is_float(x.dtype):
        raise _err(graph, node, f"batch_norm is a float operator, got {x}")
    for key in ("scale", "bias", "mean", "var"):
        p = _param(graph, node, key)
        if p is None or p.shape != (x.shape[1],):
            raise _err(graph, node, f"param {key!r} must have shape ({x.shape[1]},)")
    return [TensorType(x.shape, x.dtype)]


def _infer_quantize(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    if not _is_float(x.dtype):
        raise _err(graph, node, f"input must be float, got {x}")
    _scale_shift(graph, node)
    return [TensorType(x.shape, "int8")]


def _infer_dequantize(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    if x.dtype != "int8":
        raise _err(graph, node, f"input must be int8, got {x}")
    _scale_shift(graph, node)
    return [TensorType(x.shape, "float32")]


def _scale_shift(graph: Graph, node: Node) -> None:
    s = node.attrs.get("scale_shift")
    if not isinstance(s, int | np.integer) or isinstance(s, bool):
        raise _err(graph, node, f"attribute 'scale_shift' must be an int, got {s!r}")


def _infer_layout(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    layout = node.attrs.get("layout")
    parsed = parse_layout(layout) if isinstance(layout, str) else None
    if parsed is None or not layout_fits(parsed[0], len(x.shape)):
        raise _err(graph, node, f"attribute 'layout' must be a blocked layout for {x}, got "
                   f"{layout!r}")
    return [TensorType(x.shape, x.dtype)]


def _infer_constant(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    p = _param(graph, node, "value")
    if p is None:
        raise _err(graph, node, "needs a 'value' param")
    return [TensorType(tuple(int(s) for s in p.shape), str(p.dtype))]


_I, _R, _C, _O = (OpPattern.INJECTIVE, OpPattern.REDUCTION, OpPattern.COMPLEX_OUT_FUSABLE,
                  OpPattern.OPAQUE)

#: Every operator, by name.
OPS: dict[str, OpDef] = {d.name: d for d in (
    OpDef("conv2d", _C, 1, _infer_conv2d),
    OpDef("conv2d_add", _C, 2, _infer_conv2d_add),
    OpDef("dense", _C, 1, _infer_dense),
    OpDef("batch_matmul", _C, 2, _infer_batch_matmul),
    OpDef("add", _I, 2, _infer_add),
    OpDef("sub", _I, 2, _infer_broadcast),
    OpDef("mul", _I, 2, _infer_broadcast),
    OpDef("div", _I, 2, _infer_broadcast),
    OpDef("pow", _I, 2, _infer_broadcast),
    OpDef("sqrt", _I, 1, _infer_float),
    OpDef("erf", _I, 1, _infer_float),
    OpDef("tanh", _I, 1, _infer_float),
    OpDef("sigmoid", _I, 1, _infer_float),
    OpDef("gelu", _I, 1, _infer_float),
    OpDef("where", _I, 2, _infer_where),
    OpDef("softmax", _R, 1, _infer_float),
    OpDef("layer_norm", _R, 1, _infer_layer_norm),
    OpDef("rms_norm", _R, 1, _infer_rms_norm),
    OpDef("rotary", _I, 1, _infer_rotary),
    OpDef("reduce_mean", _R, 1, _infer_reduce),
    OpDef("reduce_sum", _R, 1, _infer_reduce),
    OpDef("reduce_max", _R, 1, _infer_reduce),
    OpDef("transpose", _I, 1, _infer_transpose),
    OpDef("reshape", _I, 1, _infer_reshape),
    OpDef("take", _I, 1, _infer_take),
    OpDef("slice", _I, 1, _infer_slice),
    OpDef("concat", _I, -1, _infer_concat),
    OpDef("embedding", _I, 1, _infer_embedding),
    OpDef("relu", _I, 1, _infer_same),
    OpDef("clip", _I, 1, _infer_clip),
    OpDef("flatten", _I, 1, _infer_flatten),
    OpDef("max_pool2d", _R, 1, _infer_pool),
    OpDef("avg_pool2d", _R, 1, _infer_pool),
    OpDef("global_avg_pool", _R, 1, _infer_global_pool),
    OpDef("fold_window", _I, 1, _infer_fold_window),
    OpDef("batch_norm", _I, 1, _infer_batch_norm),
    OpDef("quantize", _I, 1, _infer_quantize),
    OpDef("dequantize", _I, 1, _infer_dequantize),
    OpDef("layout_pack", _I, 1, _infer_layout),
    OpDef("layout_unpack", _I, 1, _infer_layout),
    OpDef("constant", _O, 0, _infer_constant),
)}


def register_op(opdef: OpDef) -> None:
    """Add (or replace) operator ``opdef.name`` (an operator of a test or an extension joins
    the graph IR here)."""
    OPS[opdef.name] = opdef


def op_pattern(op: str) -> OpPattern:
    """Fusion category of operator ``op``.

    Raises
    ------
    GraphError
        Unknown operator.
    """
    if op not in OPS:
        raise GraphError(f"unknown operator {op!r}")
    return OPS[op].pattern


def infer_types(graph: Graph) -> Graph:
    """Recompute the type of every node output from the graph inputs' types, in node order.

    Logical shape and dtype come from the operator rules; an output keeps the layout it already
    has when that layout suits its rank (a blocked layout set by ``pack_layout``), and gets
    ``NCHW`` / ``NC`` otherwise.

    Parameters
    ----------
    graph
        The graph; its input types must be set. It is not modified.

    Returns
    -------
    Graph
        A copy with ``values`` holding exactly the inputs' and node outputs' types.

    Raises
    ------
    GraphError
        Unknown operator, wrong arity, a value read before it is produced, or a rule's
        complaint (shape or dtype mismatch), naming the node.
    """
    g = graph.copy()
    types: dict[str, TensorType] = {}
    for v in g.inputs:
        if v not in graph.values:
            raise GraphError(f"{g.name}: input {v!r} has no type")
        types[v] = graph.values[v]
    for n in g.nodes:
        if n.op not in OPS:
            raise GraphError(f"{g.name}: node {n.name} uses unknown operator {n.op!r}")
        d = OPS[n.op]
        arity_ok = len(n.inputs) >= 1 if d.arity < 0 else len(n.inputs) == d.arity
        if not arity_ok or len(n.outputs) != 1:
            want = "one or more" if d.arity < 0 else str(d.arity)
            raise _err(g, n, f"takes {want} input(s) and gives 1 output, got "
                       f"{len(n.inputs)} and {len(n.outputs)}")
        for v in n.inputs:
            if v not in types:
                raise _err(g, n, f"reads {v!r} before anything produces it")
        outs = d.infer(n, [types[v] for v in n.inputs], g)
        for name, t in zip(n.outputs, outs, strict=True):
            if name in types:
                raise _err(g, n, f"redefines {name!r}")
            old = graph.values.get(name)
            layout = _plain_layout(t.shape)
            if old is not None and old.shape == t.shape:
                parsed = parse_layout(old.layout)
                if parsed is not None and layout_fits(parsed[0], len(t.shape)):
                    layout = old.layout
            types[name] = TensorType(t.shape, t.dtype, layout)
    for v in g.outputs:
        if v not in types:
            raise GraphError(f"{g.name}: output {v!r} is never produced")
    g.values = types
    return g
