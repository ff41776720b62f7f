"""Constant folding and batch-norm folding."""

from __future__ import annotations

import numpy as np

from compiler.graph.ir import Graph, Node, unique_name
from compiler.graph.passes.common import prune_params, prune_values
from compiler.graph.reference import run_reference, to_logical

__all__ = ["fold_batch_norm", "fold_constants"]


def fold_constants(graph: Graph) -> Graph:
    """Evaluate at compile time every node whose inputs are all constants.

    A node (other than ``constant``) whose every input is produced by a ``constant`` node is run
    through the reference executor and replaced by a ``constant`` node of the same name whose
    ``value`` param (named after its output) holds the result. Constant nodes that nothing reads
    any more, and params that nothing names, are dropped.

    Parameters
    ----------
    graph
        Any typed graph; not modified.

    Returns
    -------
    Graph
        The folded copy.
    """
    g = graph.copy()
    constants: dict[str, Node] = {}
    nodes: list[Node] = []
    for n in g.nodes:
        if n.op != "constant" and n.inputs and all(v in constants for v in n.inputs):
            (out,) = n.outputs
            feeds = list(dict.fromkeys(constants[v].name for v in n.inputs))
            sub_nodes = [c for c in constants.values() if c.name in feeds] + [n]
            used = {v for s in sub_nodes for v in (*s.inputs, *s.outputs)}
            sub = Graph(f"{g.name}.fold", [], [out], {v: g.values[v] for v in used},
                        sub_nodes, g.params)
            value = to_logical(run_reference(sub, {})[out], g.values[out])
            pname = unique_name(g.params, out)
            g.params[pname] = np.ascontiguousarray(value)
            n = Node(n.name, "constant", [], [out], {"value": pname})
        if n.op == "constant":
            constants[n.outputs[0]] = n
        nodes.append(n)
    # Drop constants nobody reads (backwards, so chains of dead constants go too).
    read = set(g.outputs)
    kept: list[Node] = []
    for n in reversed(nodes):
        if n.op == "constant" and n.outputs[0] not in read:
            continue
        read.update(n.inputs)
        kept.append(n)
    g.nodes = kept[::-1]
    prune_params(g)
    prune_values(g)
    return g


def fold_batch_norm(graph: Graph) -> Graph:
    """Fold each float ``batch_norm`` that follows a float ``conv2d`` or ``dense`` into it.

    With ``k = scale / sqrt(var + epsilon)``: ``w' = w * k`` per output channel and
    ``b' = (b - mean) * k + beta`` (``b = 0`` if the layer had no bias). The folded layer takes
    the batch norm's output name; its new params are ``<layer>.bn_weight`` / ``<layer>.bn_bias``.
    A batch norm is left alone when its input is not such a layer, has another reader, is a
    graph output, or the layer already applies a ReLU.

    Parameters
    ----------
    graph
        Any typed graph; not modified.

    Returns
    -------
    Graph
        The folded copy.
    """
    g = graph.copy()
    removed: set[str] = set()
    for bn in g.nodes:
        if bn.op != "batch_norm":
            continue
        x = bn.inputs[0]
        layer = g.producer(x)
        if (layer is None or layer.op not in ("conv2d", "dense")
                or np.dtype(g.values[x].dtype).kind != "f" or layer.attrs.get("relu")
                or len(g.consumers(x)) != 1 or x in g.outputs):
            continue
        p = {key: g.params[bn.attrs[key]].astype(np.float64)
             for key in ("scale", "bias", "mean", "var")}
        k = p["scale"] / np.sqrt(p["var"] + float(bn.attrs.get("epsilon", 1e-5)))
        w = g.params[layer.attrs["weight"]].astype(np.float64)
        old_bias = layer.attrs.get("bias")
        b = np.zeros(w.shape[0]) if old_bias is None else g.params[old_bias].astype(np.float64)
        w_name = unique_name(g.params, f"{layer.name}.bn_weight")
        g.params[w_name] = (w * k.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
        b_name = unique_name(g.params, f"{layer.name}.bn_bias")
        g.params[b_name] = ((b - p["mean"]) * k + p["bias"]).astype(np.float32)
        rest = {k: v for k, v in layer.attrs.items() if k not in ("weight", "bias")}
        layer.attrs = {"weight": w_name, "bias": b_name, **rest}
        layer.outputs = list(bn.outputs)
        removed.add(bn.name)
    g.nodes = [n for n in g.nodes if n.name not in removed]
    prune_params(g)
    prune_values(g)
    return g
