"""The graph IR: operators (nodes) connected by named tensors (values), with constants.

A :class:`Graph` lists its nodes in topological order. Each value has a :class:`TensorType`
(shape, dtype, layout); each node has an operator name from :mod:`compiler.graph.ops`, input and
output value names, and attributes. Weights and biases are constants in ``Graph.params``,
referred to by name from node attributes (``attrs["weight"]``), never as graph inputs.

Integer operators (what runs, after quantisation) and their attributes:

==================  =====================================================================
conv2d              weight (OIHW int8 param), bias (int32 param or None), stride (h, w),
                    padding (h, w), shift, relu
dense               weight ((N, K) int8 param), bias, shift, relu
add                 shift, relu (two int8 inputs; residual add with requantisation)
conv2d_add          conv2d's, add_shift, add_relu: inputs (x, skip); ``add(conv2d(x), skip)``
                    as one operator (made by the fuse_residual pass)
relu, flatten       -
max_pool2d          kernel (h, w), stride (h, w), padding (h, w)
avg_pool2d          kernel, stride, padding;   global_avg_pool: -
fold_window         kernel (h, w), stride (h, w), padding (h, w): each window of the zero-padded
                    input gathered into channels, (N, C, H, W) -> (N, KH*KW*C, OH, OW)
                    (inserted by the ``fold_conv_windows`` pass; data movement, any dtype)
constant            value (param name): no inputs; a constant tensor that feeds a value
                    input (front ends; removed or produced by constant folding)
batch_matmul        shift, relu: two int8 inputs (..., M, K) @ (..., K, N) (attention)
embedding           table (int8 (V, H) param): integer ids in, table rows out
reshape, transpose  shape; perm (data movement, any dtype)
take, slice         indices (param), axis; axis, start, stop, step
concat              axis (one or more inputs)
==================  =====================================================================

dense takes inputs of any rank >= 2 (every axis but the last are rows). Float operators that
stay float on the fallback (see :mod:`compiler.graph.nn`): softmax (axis, causal), layer_norm
(scale, bias params, epsilon), rms_norm (scale param, epsilon), rotary (cos, sin params,
head_dim), gelu (form ``erf`` / ``tanh``), sub / mul / div / pow / sqrt / erf /
tanh / sigmoid and a float add (broadcasting), where (condition param), reduce_mean / reduce_sum /
reduce_max (axes, keepdims).

Float operators come from front ends (ONNX) and are removed by quantisation: conv2d, dense and
add with float dtypes, batch_norm (scale, bias, mean, var, epsilon params), quantize /
dequantize (attr ``scale_shift``: value = int8 * 2**-scale_shift).

Partitioning sets ``attrs["target"]`` to ``"accel"`` or ``"cpu"``; layout packing inserts
``layout_pack`` / ``layout_unpack`` nodes (attr ``layout``: the blocked layout, e.g.
``NCHW1n8c``) at the boundaries of accelerator segments.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Graph", "GraphError", "Node", "TensorType", "unique_name"]


class GraphError(ValueError):
    """A malformed graph; the message names the node or value."""


@dataclass(frozen=True)
class TensorType:
    """Shape, element type and layout of a value (``NCHW``, ``NC``, or a blocked layout)."""

    shape: tuple[int, ...]
    dtype: str
    layout: str = "NCHW"

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(s) for s in self.shape)}]{{{self.layout}}}"

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * int(np.dtype(self.dtype).itemsize)


@dataclass
class Node:
    """One operator application."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        shown = {k: v for k, v in self.attrs.items() if k not in ("weight", "bias")
                 or v is not None}
        attrs = ", ".join(f"{k}={v}" for k, v in shown.items())
        return (f"{', '.join(self.outputs)} = {self.op}({', '.join(self.inputs)})"
                + (f" {{{attrs}}}" if attrs else "") + f"  # {self.name}")


@dataclass
class Graph:
    """A network: input and output value names, value types, nodes, constant params."""

    name: str
    inputs: list[str]
    outputs: list[str]
    values: dict[str, TensorType]
    nodes: list[Node]
    params: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    """Results of analysis passes (e.g. ``memory_plan``)."""

    # ------------------------------------------------------------------ queries
    def producer(self, value: str) -> Node | None:
        for n in self.nodes:
            if value in n.outputs:
                return n
        return None

    def consumers(self, value: str) -> list[Node]:
        return [n for n in self.nodes if value in n.inputs]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise GraphError(f"{self.name}: no node named {name!r}")

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def copy(self) -> Graph:
        """A deep copy of the structure; params arrays are shared (treat them as immutable)."""
        return Graph(self.name, list(self.inputs), list(self.outputs), dict(self.values),
                     copy.deepcopy(self.nodes), dict(self.params), copy.deepcopy(self.attrs))

    # ------------------------------------------------------------------ text
    def to_text(self) -> str:
        """Readable listing (stable: tests compare it)."""
        lines = [f"graph {self.name}("
                 + ", ".join(f"{v}: {self.values[v]}" for v in self.inputs) + "):"]
        for n in self.nodes:
            types = ", ".join(str(self.values[o]) for o in n.outputs)
            lines.append(f"  {n}  -> {types}")
        lines.append(f"  return {', '.join(self.outputs)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    # ------------------------------------------------------------------ checks
    def verify(self) -> None:
        """Check topological order, unique producers, known values and params.

        Raises
        ------
        GraphError
            Naming the node and what is wrong.
        """
        defined = set(self.inputs)
        for v in self.inputs:
            if v not in self.values:
                raise GraphError(f"{self.name}: input {v!r} has no type")
        for n in self.nodes:
            for v in n.inputs:
                if v not in defined:
                    raise GraphError(f"{self.name}: node {n.name} ({n.op}) reads {v!r} before "
                                     "anything produces it")
            for v in n.outputs:
                if v in defined:
                    raise GraphError(f"{self.name}: node {n.name} ({n.op}) redefines {v!r}")
                if v not in self.values:
                    raise GraphError(f"{self.name}: node {n.name} ({n.op}) output {v!r} has "
                                     "no type")
                defined.add(v)
            for key in ("weight", "bias"):
                p = n.attrs.get(key)
                if p is not None and p not in self.params:
                    raise GraphError(f"{self.name}: node {n.name} ({n.op}) refers to missing "
                                     f"param {p!r}")
        for v in self.outputs:
            if v not in defined:
                raise GraphError(f"{self.name}: output {v!r} is never produced")


def unique_name(taken: object, base: str) -> str:
    """``base``, or ``base.1``, ``base.2``... whichever is not in ``taken``: a fresh node, value
    or param name for a front end or a pass to add."""
    if base not in taken:  # type: ignore[operator]
        return base
    i = 1
    while f"{base}.{i}" in taken:  # type: ignore[operator]
        i += 1
    return f"{base}.{i}"
