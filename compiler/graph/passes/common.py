"""Helpers shared by the graph passes."""

from __future__ import annotations

import numpy as np

from compiler.graph.ir import Graph, GraphError, Node

__all__ = ["INTEGER_FORMS", "PARAM_KEYS", "is_float_graph", "needs_quantization", "node_macs",
           "prune_params", "replace_uses"]

#: Node attributes that name params.
PARAM_KEYS = ("weight", "bias", "scale", "mean", "var", "value", "table", "indices", "condition",
              "cos", "sin")


def replace_uses(graph: Graph, old: str, new: str, after: int = 0) -> None:
    """Read ``new`` instead of ``old`` in every node from index ``after`` on, and in the graph
    outputs (in place)."""
    for n in graph.nodes[after:]:
        n.inputs = [new if v == old else v for v in n.inputs]
    graph.outputs = [new if v == old else v for v in graph.outputs]


def prune_params(graph: Graph) -> None:
    """Drop params that no node attribute names (in place)."""
    used = {n.attrs[k] for n in graph.nodes for k in PARAM_KEYS if n.attrs.get(k) is not None}
    graph.params = {k: v for k, v in graph.params.items() if k in used}


def prune_values(graph: Graph) -> None:
    """Drop value types that are neither graph inputs nor node outputs (in place)."""
    live = set(graph.inputs) | {v for n in graph.nodes for v in n.outputs}
    graph.values = {k: t for k, t in graph.values.items() if k in live}


def is_float_graph(graph: Graph) -> bool:
    """Does the graph still compute in floats (beyond quantize / dequantize at its edges)?"""
    def is_float(v: str) -> bool:
        return np.dtype(graph.values[v].dtype).kind == "f"

    return any(n.op not in ("quantize", "dequantize") and any(map(is_float, n.inputs + n.outputs))
               for n in graph.nodes)


#: Operators that quantisation turns into integer ones (the accelerator's): a float one of these
#: means the graph still needs quantising. Float operators elsewhere (softmax, layer_norm,
#: gelu, ...) run on the fallback in float by design.
INTEGER_FORMS = ("conv2d", "dense", "batch_matmul", "add")


def needs_quantization(graph: Graph) -> bool:
    """Does a node with an integer form (:data:`INTEGER_FORMS`) still compute in floats?"""
    def is_float(v: str) -> bool:
        return np.dtype(graph.values[v].dtype).kind == "f"

    return any(n.op in INTEGER_FORMS and any(map(is_float, n.inputs + n.outputs))
               for n in graph.nodes)


def node_macs(node: Node, graph: Graph) -> int:
    """Multiply-accumulates of a node, as its accelerator operator's registry entry counts them
    (ROOFLINE.md: before channel padding); a grouped convolution with a fused add's, which has
    no accelerator workload, from its shapes; 0 for operators the accelerator has no entry for
    and for nodes whose workload cannot be formed."""
    from compiler.errors import LoweringError
    from compiler.ops.registry import accel_op

    if node.op == "conv2d_add" and int(node.attrs.get("groups", 1)) != 1:
        # A grouped convolution with a fused add, which the accelerator does not run:
        # counted all the same, each output summing its group's C / groups * KH * KW products.
        w = graph.params[node.attrs["weight"]]
        return int(np.prod(graph.values[node.outputs[0]].shape)) * int(np.prod(w.shape[1:]))
    entry = accel_op(node.op)
    if entry is None:
        return 0
    try:
        return int(entry.macs(entry.workload(node, graph)))
    except LoweringError:
        return 0


def require_targets(graph: Graph, pass_name: str) -> None:
    """Raise unless ``partition`` has set every node's target."""
    for n in graph.nodes:
        if n.attrs.get("target") not in ("accel", "cpu"):
            raise GraphError(f"{graph.name}: {pass_name} needs partition first: node {n.name} "
                             f"({n.op}) has no target")
