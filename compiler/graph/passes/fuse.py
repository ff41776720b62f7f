"""Operator fusion by category (TVM's rules, restricted to what the accelerator fuses).

A complex-out-fusable operator (``conv2d``, ``dense``) fuses the elementwise operators that
follow it into one accelerator operator: bias, requantisation and ReLU are attributes of the
integer ``conv2d`` / ``dense`` already (the ALU runs them on the accumulator), so what this pass
still merges is a separate ``relu`` node. The injective residual ``add`` likewise absorbs a
following ``relu`` (``add`` + ReLU on the ALU); a ``relu`` after a ``relu`` disappears.

A ``relu`` is merged into its producer only when it is the producer's single reader and the
producer's output is not a graph output (someone would otherwise see the value before the ReLU).
Merging is exact on int8: ``max(clip(v), 0) == clip(v, 0, 127)``.

The fused groups are reported in ``graph.attrs["fusion"]``: one entry per operator that carries
more than its bare computation, ``{"node", "pattern", "ops", "absorbed"}``, where ``ops`` lists
the stages run as one operator (``["conv2d", "bias", "requantize", "relu"]``) and ``absorbed``
the names of the nodes this pass removed into it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.graph.ir import Graph, Node
from compiler.graph.ops import op_pattern
from compiler.graph.passes.common import prune_values

__all__ = ["fuse"]

_FUSE_RELU_INTO = ("conv2d", "dense", "add", "relu")


def _stages(n: Node, graph: Graph) -> list[str]:
    ops = [n.op]
    if n.op not in ("conv2d", "dense", "add"):
        return ops
    if n.attrs.get("bias") is not None:
        ops.append("bias")
    if np.dtype(graph.values[n.outputs[0]].dtype).kind != "f":
        ops.append("requantize")
    if n.attrs.get("relu"):
        ops.append("relu")
    return ops


def fuse(graph: Graph) -> Graph:
    """Merge each fusable ``relu`` into its producer; report the fused groups.

    Parameters
    ----------
    graph
        A typed graph (integer or float); not modified.

    Returns
    -------
    Graph
        The fused copy, with ``attrs["fusion"]`` (see the module docstring).
    """
    g = graph.copy()
    absorbed: dict[str, list[str]] = {}
    removed: set[str] = set()
    for n in g.nodes:
        if n.op != "relu":
            continue
        x = n.inputs[0]
        p = g.producer(x)
        if (p is None or p.name in removed or p.op not in _FUSE_RELU_INTO
                or len(g.consumers(x)) != 1 or x in g.outputs):
            continue
        if p.op != "relu":
            p.attrs["relu"] = True
        p.outputs = list(n.outputs)
        removed.add(n.name)
        absorbed.setdefault(p.name, []).extend([*absorbed.pop(n.name, []), n.name])
    g.nodes = [n for n in g.nodes if n.name not in removed]
    prune_values(g)
    if "quantization" in g.attrs:  # forget the scales of values merged away
        scales = g.attrs["quantization"]["scale_shift"]
        g.attrs["quantization"]["scale_shift"] = {v: s for v, s in scales.items()
                                                  if v in g.values}
    report: list[dict[str, Any]] = []
    for n in g.nodes:
        ops = _stages(n, g)
        if len(ops) > 1 or n.name in absorbed:
            report.append({"node": n.name, "pattern": op_pattern(n.op).value, "ops": ops,
                           "absorbed": absorbed.get(n.name, [])})
    g.attrs["fusion"] = report
    return g
