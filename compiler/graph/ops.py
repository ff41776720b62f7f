"""Operator registry as data: each operator's fusion category and its type inference.

Every operator name that may appear in a :class:`~compiler.graph.ir.Graph` has one
:class:`OpDef` in :data:`OPS`: its :class:`OpPattern` (the fusion category of the TVM paper) and
a function that computes its output types from its input types and attributes. Type inference
works on *logical* shapes (``NCHW`` / ``NC``); a blocked layout (``NCHW1n8c``) only says how a
value is stored and never changes its logical shape (see :func:`physical_shape`).

Categories (TVM, OSDI'18, §3):

- ``INJECTIVE``: one-to-one maps (elementwise ``relu``, ``add``, ``batch_norm``, ``quantize``,
  ``dequantize``; ``flatten`` and the layout transforms);
- ``REDUCTION``: outputs reduce windows of the input (the pools);
- ``COMPLEX_OUT_FUSABLE``: ``conv2d`` and ``dense``, onto whose output elementwise operators fuse;
- ``OPAQUE``: cannot be fused (``constant``).
"""

from __future__ import annotations

import enum
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
    """One operator: name, fusion category, number of value inputs, type inference."""

    name: str
    pattern: OpPattern
    arity: int
    infer: InferFn


# --------------------------------------------------------------------------- layouts
_LAYOUT = re.compile(r"^(NCHW|NC)(\d+)n(\d+)c$")


def parse_layout(layout: str) -> tuple[str, int, int] | None:
    """Split a blocked layout ``NCHW{b}n{c}c`` / ``NC{b}n{c}c`` into (base, b, c).

    Returns None for the plain layouts (``NCHW``, ``NC``, ``ANY``).
    """
    m = _LAYOUT.match(layout)
    return None if m is None else (m.group(1), int(m.group(2)), int(m.group(3)))


def blocked_layout(rank: int, batch: int, block: int) -> str:
    """The blocked layout name of a rank-4 (NCHW) or rank-2 (NC) value."""
    return f"{'NCHW' if rank == 4 else 'NC'}{batch}n{block}c"


def physical_shape(t: TensorType) -> tuple[int, ...]:
    """Shape of the array that stores a value: its logical shape, or the blocked shape
    ``(N/b, C/c, H, W, b, c)`` (``(N/b, C/c, b, c)`` for ``NC``), rounded up."""
    parsed = parse_layout(t.layout)
    if parsed is None:
        return t.shape
    _, b, c = parsed
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
    if w.shape[1] != x.shape[1]:
        raise _err(graph, node, f"weight {w.shape} has {w.shape[1]} input channels, input "
                   f"{x} has {x.shape[1]}")
    _check_bias(graph, node, x.dtype, w.shape[0])
    _check_requant(graph, node, x.dtype, w)
    oh, ow = _window(graph, node, x.shape[2:], (w.shape[2], w.shape[3]),
                     _pair(graph, node, "stride", 1), _pair(graph, node, "padding", 0))
    return [TensorType((x.shape[0], w.shape[0], oh, ow), x.dtype)]


def _infer_dense(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    (x,) = ins
    _rank(graph, node, x, 2, "input")
    w = _param(graph, node, "weight")
    if w is None or w.ndim != 2:
        raise _err(graph, node, "needs a 2-D (N, K) 'weight' param")
    if w.shape[1] != x.shape[1]:
        raise _err(graph, node, f"weight {w.shape} has K={w.shape[1]}, input {x} has "
                   f"K={x.shape[1]}")
    _check_bias(graph, node, x.dtype, w.shape[0])
    _check_requant(graph, node, x.dtype, w)
    return [TensorType((x.shape[0], w.shape[0]), x.dtype)]


def _check_bias(graph: Graph, node: Node, dtype: str, channels: int) -> None:
    b = _param(graph, node, "bias")
    if b is None:
        return
    want = "float32" if _is_float(dtype) else "int32"
    if b.shape != (channels,) or str(b.dtype) != want:
        raise _err(graph, node, f"bias must be {want} of shape ({channels},), got "
                   f"{b.dtype} {b.shape}")


def _check_requant(graph: Graph, node: Node, dtype: str, w: np.ndarray | None) -> None:
    if _is_float(dtype):
        if w is not None and not _is_float(str(w.dtype)):
            raise _err(graph, node, f"a float {node.op} needs a float weight, got {w.dtype}")
        return
    if dtype != "int8":
        raise _err(graph, node, f"integer operators take int8 values, got {dtype}")
    if w is not None and w.dtype != np.int8:
        raise _err(graph, node, f"weight must be int8, got {w.dtype}")
    shift = node.attrs.get("shift", 0)
    if not isinstance(shift, int | np.integer) or not 0 <= shift <= 31:
        raise _err(graph, node, f"shift must be an int in 0..31, got {shift!r}")


def _infer_add(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    a, b = ins
    if a.shape != b.shape:
        raise _err(graph, node, f"operands must have one shape, got {a} and {b}")
    dtype = _same_dtype(graph, node, ins)
    _check_requant(graph, node, dtype, None)
    return [TensorType(a.shape, dtype)]


def _infer_same(node: Node, ins: list[TensorType], graph: Graph) -> list[TensorType]:
    return [TensorType(ins[0].shape, ins[0].dtype)]


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
    oh, ow = _window(graph, node, x.shape[2:], kernel, stride, padding)
    return [TensorType((x.shape[0], x.shape[1], oh, ow), x.dtype)]


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
    if parsed is None or {"NCHW": 4, "NC": 2}[parsed[0]] != len(x.shape):
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
    OpDef("dense", _C, 1, _infer_dense),
    OpDef("add", _I, 2, _infer_add),
    OpDef("relu", _I, 1, _infer_same),
    OpDef("flatten", _I, 1, _infer_flatten),
    OpDef("max_pool2d", _R, 1, _infer_pool),
    OpDef("avg_pool2d", _R, 1, _infer_pool),
    OpDef("global_avg_pool", _R, 1, _infer_global_pool),
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
        if len(n.inputs) != d.arity or len(n.outputs) != 1:
            raise _err(g, n, f"takes {d.arity} input(s) and gives 1 output, got "
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
                if parsed is not None and {"NCHW": 4, "NC": 2}[parsed[0]] == len(t.shape):
                    layout = old.layout
            types[name] = TensorType(t.shape, t.dtype, layout)
    for v in g.outputs:
        if v not in types:
            raise GraphError(f"{g.name}: output {v!r} is never produced")
    g.values = types
    return g
