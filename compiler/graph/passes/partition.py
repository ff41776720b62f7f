"""Partitioning into accelerator and fallback (CPU) nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.graph.ir import Graph, GraphError, Node
from compiler.graph.passes.common import node_macs

__all__ = ["Supports", "default_supports", "partition", "partition_report"]

Supports = Callable[[Node, Graph], bool]


def default_supports(cfg: HwConfig) -> Supports:
    """What ``cfg``'s accelerator runs: int8 nodes of a registered accelerator operator
    (:mod:`compiler.ops.registry`) whose entry's partition rule accepts the node's workload.

    Every input and the output must be int8 (the GEMM core's precision). The rule itself is
    the entry's: conv2d and dense when their smallest tiling fits the buffers, the residual add
    where ``block_in == block_out`` (it runs as GEMMs against an identity tile). A node whose
    workload cannot be formed (``LoweringError``) runs on the CPU.

    Parameters
    ----------
    cfg
        The hardware.

    Returns
    -------
    Callable[[Node, Graph], bool]
    """
    from compiler.ops.registry import accel_op

    def supports(node: Node, graph: Graph) -> bool:
        entry = accel_op(node.op)
        if entry is None:
            return False
        if any(graph.values[v].dtype != "int8" for v in (*node.inputs, *node.outputs)):
            return False
        try:
            return bool(entry.supports(entry.workload(node, graph), cfg))
        except LoweringError:
            return False

    return supports


def partition(graph: Graph, supports: Supports) -> Graph:
    """Set every node's ``attrs["target"]`` to ``"accel"`` or ``"cpu"`` as ``supports`` says.

    Also reports ``graph.attrs["partition"]``: ``segments`` (maximal runs of consecutive nodes
    with one target, in node order: ``{"target", "nodes"}``), ``accel_macs`` and
    ``total_macs`` (multiply-accumulates, :func:`~compiler.graph.passes.common.node_macs`).

    Parameters
    ----------
    graph
        A typed graph without layout transforms; not modified.
    supports
        ``supports(node, graph)``: may the accelerator run this node?

    Returns
    -------
    Graph
        The partitioned copy.

    Raises
    ------
    GraphError
        The graph already holds layout transforms (partition runs before ``pack_layout``).
    """
    g = graph.copy()
    for n in g.nodes:
        if n.op in ("layout_pack", "layout_unpack"):
            raise GraphError(f"{g.name}: partition must run before pack_layout (node {n.name} "
                             f"is a {n.op})")
        n.attrs["target"] = "accel" if supports(n, g) else "cpu"
    g.attrs["partition"] = partition_report(g)
    return g


def partition_report(graph: Graph) -> dict[str, Any]:
    """``graph.attrs["partition"]`` of a graph whose nodes have targets: ``segments``,
    ``accel_macs``, ``total_macs`` (see :func:`partition`; a pass that adds nodes after
    partitioning recomputes it)."""
    segments: list[dict[str, Any]] = []
    accel_macs = total_macs = 0
    for n in graph.nodes:
        target = n.attrs["target"]
        macs = node_macs(n, graph)
        total_macs += macs
        accel_macs += macs if target == "accel" else 0
        if not segments or segments[-1]["target"] != target:
            segments.append({"target": target, "nodes": []})
        segments[-1]["nodes"].append(n.name)
    return {"segments": segments, "accel_macs": accel_macs, "total_macs": total_macs}
