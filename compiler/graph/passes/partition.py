"""Partitioning into accelerator and fallback (CPU) nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.graph.ir import Graph, GraphError, Node
from compiler.graph.passes.common import node_macs

__all__ = ["Supports", "default_supports", "partition"]

Supports = Callable[[Node, Graph], bool]


def _hw(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def default_supports(cfg: HwConfig) -> Supports:
    """What ``cfg``'s accelerator runs: int8 ``conv2d`` and ``dense`` nodes that tile.

    A conv2d is supported when :func:`compiler.ops.heuristic.knob_candidates` finds a fitting
    tiling (checked in O(1): the all-ones tiling is a candidate, and it fits whenever any
    candidate does, since buffer use only grows with tile sizes); a dense when
    :func:`compiler.ops.matmul.default_matmul_knobs` finds one. Everything else runs on the
    CPU (the compiler has no accelerator lowering for pooling yet). A residual ``add`` runs
    on the accelerator as GEMMs against an identity tile where ``block_in == block_out``.

    Parameters
    ----------
    cfg
        The hardware.

    Returns
    -------
    Callable[[Node, Graph], bool]
    """
    from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload
    from compiler.ops.heuristic import fits
    from compiler.ops.matmul import MatmulWorkload, default_matmul_knobs

    def supports(node: Node, graph: Graph) -> bool:
        if node.op == "add":
            from compiler.ops.eltwise import AddKnobs, AddWorkload, check_add_config, fits_add

            x, y = (graph.values[v] for v in node.inputs)
            if x.dtype != "int8" or y.dtype != "int8" or x.shape != y.shape or len(x.shape) != 4:
                return False
            try:
                awl = AddWorkload(*x.shape, int(node.attrs.get("shift", 0)),
                                  bool(node.attrs.get("relu", False)))
                check_add_config(awl, cfg)
                return fits_add(awl, AddKnobs(), cfg)
            except LoweringError:
                return False
        if node.op not in ("conv2d", "dense"):
            return False
        x = graph.values[node.inputs[0]]
        if x.dtype != "int8":
            return False
        w = graph.params[node.attrs["weight"]]
        bias = node.attrs.get("bias") is not None
        shift, relu = int(node.attrs.get("shift", 0)), bool(node.attrs.get("relu", False))
        try:
            if node.op == "dense":
                default_matmul_knobs(MatmulWorkload(x.shape[0], x.shape[1], w.shape[0], bias,
                                                    shift, relu), cfg)
                return True
            sh, sw = _hw(node.attrs.get("stride", 1))
            ph, pw = _hw(node.attrs.get("padding", 0))
            wl = Conv2dWorkload(x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0],
                                w.shape[2], w.shape[3], sh, sw, ph, pw, bias, shift, relu)
            return fits(wl, Conv2dKnobs(), cfg)
        except LoweringError:
            return False

    return supports


def partition(graph: Graph, supports: Supports) -> Graph:
    """Set every node's ``attrs["target"]`` to ``"accel"`` or ``"cpu"`` as ``supports`` says.

    Also reports ``graph.attrs["partition"]``: ``segments`` (maximal runs of consecutive nodes
    with one target, in node order: ``{"target", "nodes"}``), ``accel_macs`` and
    ``total_macs`` (multiply-accumulates of conv2d / dense nodes).

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
    segments: list[dict[str, Any]] = []
    accel_macs = total_macs = 0
    for n in g.nodes:
        if n.op in ("layout_pack", "layout_unpack"):
            raise GraphError(f"{g.name}: partition must run before pack_layout (node {n.name} "
                             f"is a {n.op})")
        target = "accel" if supports(n, g) else "cpu"
        n.attrs["target"] = target
        macs = node_macs(n, g)
        total_macs += macs
        accel_macs += macs if target == "accel" else 0
        if not segments or segments[-1]["target"] != target:
            segments.append({"target": target, "nodes": []})
        segments[-1]["nodes"].append(n.name)
    g.attrs["partition"] = {"segments": segments, "accel_macs": accel_macs,
                            "total_macs": total_macs}
    return g
