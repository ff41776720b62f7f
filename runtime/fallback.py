"""Fallback kernels by graph operator: how a node runs on a kernel module (numpy or CuPy).

Each entry maps a node (its attributes and params) and its plain-layout input arrays onto one
call of a kernel module (:mod:`runtime.kernels` on the CPU, :mod:`runtime.kernels_gpu` on a GPU;
both have the same functions). The executable runs every node that is not on the accelerator
through this table, and checks accelerator nodes against it. Operators without an entry
(quantize, dequantize, constant) run on :func:`compiler.graph.reference.run_node`, their one
definition. An operator of a test or an extension joins with :func:`register_fallback`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from compiler.graph.ir import Graph, Node

__all__ = ["FallbackFn", "fallback_kernel", "register_fallback"]

FallbackFn = Callable[[ModuleType, Node, Graph, list[np.ndarray]], Any]
"""``fn(kernels, node, graph, inputs) -> output`` on plain-layout arrays."""


def _pair(v: Any) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, tuple | list) else (int(v), int(v))


def _param(graph: Graph, node: Node, key: str) -> np.ndarray | None:
    name = node.attrs.get(key)
    return None if name is None else graph.params[name]


def _requant(node: Node) -> dict[str, Any]:
    return {"shift": int(node.attrs.get("shift", 0)), "relu": bool(node.attrs.get("relu", False))}


def _conv2d(k: ModuleType, node: Node, g: Graph, xs: list[np.ndarray]) -> Any:
    a = node.attrs
    return k.conv2d(xs[0], _param(g, node, "weight"), _param(g, node, "bias"),
                    stride=_pair(a.get("stride", 1)), padding=_pair(a.get("padding", 0)),
                    groups=int(a.get("groups", 1)), **_requant(node))


def _conv2d_add(k: ModuleType, node: Node, g: Graph, xs: list[np.ndarray]) -> Any:
    t = _conv2d(k, node, g, xs[:1])
    return k.add(t, xs[1], shift=int(node.attrs.get("add_shift", 0)),
                 relu=bool(node.attrs.get("add_relu", False)))


def _dense(k: ModuleType, node: Node, g: Graph, xs: list[np.ndarray]) -> Any:
    x = xs[0]  # any rank: every axis but the last are rows
    y = k.dense(x.reshape(-1, x.shape[-1]), _param(g, node, "weight"), _param(g, node, "bias"),
                **_requant(node))
    return y.reshape(*x.shape[:-1], y.shape[-1])


def _add(k: ModuleType, node: Node, g: Graph, xs: list[np.ndarray]) -> Any:
    if xs[0].dtype.kind == "f":  # a float add broadcasts (ONNX's Add)
        return k.elementwise("add", xs[0], xs[1])
    shape = xs[0].shape  # the integer kernel takes NCHW: any other rank as (rows, C, 1, 1)
    if len(shape) != 4:
        flat = [x.reshape(-1, shape[-1], 1, 1) for x in xs]
        return k.add(*flat, **_requant(node)).reshape(shape)
    return k.add(xs[0], xs[1], **_requant(node))


def _batch_matmul(k: ModuleType, node: Node, g: Graph, xs: list[np.ndarray]) -> Any:
    if xs[0].dtype.kind == "f":  # a float graph's, before quantisation: float64, as reference
        return np.matmul(np.asarray(xs[0], np.float64), np.asarray(xs[1], np.float64)
                         ).astype(np.float32)
    return k.batch_matmul(xs[0], xs[1], **_requant(node))


def _slice(k: ModuleType, node: Node, g: Graph, xs: list[np.ndarray]) -> Any:
    a, x = node.attrs, xs[0]
    axis = int(a.get("axis", 0)) % x.ndim
    return k.slice_axis(x, axis, int(a.get("start", 0)), int(a.get("stop", x.shape[axis])),
                        int(a.get("step", 1)))


def _pool_args(node: Node) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    a = node.attrs
    return (_pair(a["kernel"]), _pair(a.get("stride") or a["kernel"]),
            _pair(a.get("padding", 0)))


def _flatten(k: ModuleType, node: Node, g: Graph, xs: list[np.ndarray]) -> Any:
    return xs[0].reshape(xs[0].shape[0], -1)


_FALLBACK: dict[str, FallbackFn] = {
    "conv2d": _conv2d,
    "conv2d_add": _conv2d_add,
    "dense": _dense,
    "add": _add,
    "relu": lambda k, node, g, xs: k.relu(xs[0]),
    "clip": lambda k, node, g, xs: k.clip(
        xs[0], node.attrs.get("min"), node.attrs.get("max"),
        node.attrs.get("scale_shift") if xs[0].dtype == np.int8 else None),
    "max_pool2d": lambda k, node, g, xs: k.max_pool2d(xs[0], *_pool_args(node),
                                                      bool(node.attrs.get("ceil_mode"))),
    "avg_pool2d": lambda k, node, g, xs: k.avg_pool2d(xs[0], *_pool_args(node)),
    "global_avg_pool": lambda k, node, g, xs: k.global_avg_pool(xs[0]),
    "flatten": _flatten,
    "batch_matmul": _batch_matmul,
    "softmax": lambda k, node, g, xs: k.softmax(xs[0], int(node.attrs.get("axis", -1)),
                                                bool(node.attrs.get("causal", False))),
    "rms_norm": lambda k, node, g, xs: k.rms_norm(
        xs[0], _param(g, node, "scale"), float(node.attrs.get("epsilon", 1e-6))),
    "rotary": lambda k, node, g, xs: k.rotary(xs[0], _param(g, node, "cos"),
                                              _param(g, node, "sin"),
                                              int(node.attrs["head_dim"])),
    "layer_norm": lambda k, node, g, xs: k.layer_norm(
        xs[0], _param(g, node, "scale"), _param(g, node, "bias"),
        float(node.attrs.get("epsilon", 1e-5))),
    "gelu": lambda k, node, g, xs: k.gelu(xs[0], str(node.attrs.get("form", "erf"))),
    **dict.fromkeys(("sub", "mul", "div", "pow", "sqrt", "erf", "tanh", "sigmoid"),
                    lambda k, node, g, xs: k.elementwise(node.op, *xs)),
    "where": lambda k, node, g, xs: k.where(_param(g, node, "condition"), xs[0], xs[1]),
    **dict.fromkeys(("reduce_mean", "reduce_sum", "reduce_max"),
                    lambda k, node, g, xs: k.reduce(node.op, xs[0],
                                                    node.attrs.get("axes", range(xs[0].ndim)),
                                                    bool(node.attrs.get("keepdims", True)))),
    "transpose": lambda k, node, g, xs: k.transpose(xs[0], node.attrs["perm"]),
    "reshape": lambda k, node, g, xs: k.reshape(xs[0], node.attrs["shape"]),
    "take": lambda k, node, g, xs: k.take(xs[0], _param(g, node, "indices"),
                                          int(node.attrs.get("axis", 0))),
    "slice": _slice,
    "concat": lambda k, node, g, xs: k.concat(xs, int(node.attrs.get("axis", 0))),
    "embedding": lambda k, node, g, xs: k.embedding(xs[0], _param(g, node, "table")),
    "fold_window": lambda k, node, g, xs: k.fold_window(
        xs[0], _pair(node.attrs["kernel"]), _pair(node.attrs.get("stride", 1)),
        _pair(node.attrs.get("padding", 0))),
}


def register_fallback(op: str, fn: FallbackFn) -> None:
    """Add (or replace) the fallback kernel of graph operator ``op``."""
    _FALLBACK[op] = fn


def fallback_kernel(op: str) -> FallbackFn | None:
    """The fallback kernel of ``op``, or None (then the node runs on the reference code)."""
    return _FALLBACK.get(op)
