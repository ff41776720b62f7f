"""Residual fusion: a residual ``add`` joins the epilogue of the ``conv2d`` producing one operand.

After partitioning, where an integer ``add`` (with its ReLU, merged by :func:`fuse`) and the
``conv2d`` producing one of its operands both run on the accelerator, and the conv's output has
no other reader and is no graph output, the two become one ``conv2d_add`` node::

    t = conv2d(x)                       (x, skip) -> conv2d_add -> y
    y = add(t, skip)        ->          attrs: the conv's, add_shift, add_relu

The conv's requantised int8 ``t`` then stays in the accumulators
(:mod:`compiler.ops.residual`): no STORE of ``t``, no LOAD of it back, no GEMM and reset for
it. Bit-exact: the fused operator clips ``t`` exactly as the conv's STORE narrows it, and the
add of two int8 values is the add's. The quantised adds of this compiler share their operands'
scale (both come in at the add's input scale, its ``shift`` rescales the sum), so every
integer add qualifies; none needs a multiply.

It does not fire where the config cannot run the fused operator (``block_in != block_out``:
no identity weight tile; or the epilogue's buffers do not fit), where either node is on the
CPU, or where ``t`` has another reader; nor on a config with the post-processing store
(``store.postproc``), where it does not pay: there the unfused conv's requantisation rides in
its STORE, while the fused one must run it on the ALU to clip ``t`` before the add, and the
convolutions are compute-bound (ResNet-18 on default, which has the option: 0.2% more cycles
fused, ``docs/notes/residual-fusion.md``). Where both operands qualify (a downsampling block's
conv and its projection), the operand listed first is fused.

The fused node keeps the conv's name and takes the add's place in the node order (the skip is
computed by then); ``attrs["fusion"]`` gains ``"add"`` in its ops and the add in ``absorbed``,
and ``attrs["partition"]``'s segments are recomputed.
"""

from __future__ import annotations

from typing import Any

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.graph.ir import Graph, Node
from compiler.graph.ops import op_pattern
from compiler.graph.passes.common import prune_values
from compiler.ops.registry import accel_op

__all__ = ["fuse_residual"]


def _conv_operand(g: Graph, add: Node) -> tuple[Node, str] | None:
    """The conv2d the add may absorb and the add's other operand (the skip), or None."""
    if add.op != "add" or add.attrs.get("target") != "accel" or len(set(add.inputs)) != 2 \
            or g.values[add.outputs[0]].dtype != "int8" or len(g.values[add.inputs[0]].shape) != 4:
        return None
    for k, v in enumerate(add.inputs):
        conv = g.producer(v)
        if (conv is not None and conv.op == "conv2d" and conv.attrs.get("target") == "accel"
                and len(g.consumers(v)) == 1 and v not in g.outputs):
            return conv, add.inputs[1 - k]
    return None


def _fused(conv: Node, add: Node, skip: str) -> Node:
    attrs = dict(conv.attrs)
    attrs.update(add_shift=int(add.attrs.get("shift", 0)),
                 add_relu=bool(add.attrs.get("relu", False)))
    return Node(conv.name, "conv2d_add", [conv.inputs[0], skip], list(add.outputs), attrs)


def _supported(node: Node, g: Graph, cfg: HwConfig) -> bool:
    entry = accel_op(node.op)
    if entry is None:
        return False
    try:
        return bool(entry.supports(entry.workload(node, g), cfg))
    except LoweringError:
        return False


def fuse_residual(graph: Graph, cfg: HwConfig) -> Graph:
    """Fuse each residual add into the conv2d producing one of its operands, where the
    accelerator runs both, ``cfg`` runs the fused operator and it pays (see the module
    docstring).

    Parameters
    ----------
    graph
        A partitioned integer graph without layout transforms; not modified.
    cfg
        The hardware.

    Returns
    -------
    Graph
        The fused copy.
    """
    g = graph.copy()
    if cfg.store.postproc:
        return g  # the conv's requantisation is free in its STORE; see the module docstring
    absorbed: dict[str, str] = {}  # conv name -> add name
    for add in list(g.nodes):
        found = _conv_operand(g, add)
        if found is None:
            continue
        conv, skip = found
        node = _fused(conv, add, skip)
        node.attrs["target"] = "accel"
        if not _supported(node, g, cfg):
            continue
        g.nodes = [node if n is add else n for n in g.nodes if n is not conv]
        absorbed[conv.name] = add.name
    if not absorbed:
        return g
    prune_values(g)
    if "quantization" in g.attrs:  # forget the scales of the conv outputs fused away
        scales = g.attrs["quantization"]["scale_shift"]
        g.attrs["quantization"]["scale_shift"] = {v: s for v, s in scales.items()
                                                  if v in g.values}
    _report(g, absorbed)
    return g


def _report(g: Graph, absorbed: dict[str, str]) -> None:
    """Update ``attrs["fusion"]`` and ``attrs["partition"]["segments"]`` (in place)."""
    report: list[dict[str, Any]] = g.attrs.get("fusion", [])
    by_node = {entry["node"]: entry for entry in report}
    for conv, add in absorbed.items():
        add_entry = by_node.pop(add, None)
        entry = by_node.setdefault(conv, {"node": conv, "pattern": op_pattern("conv2d").value,
                                          "ops": ["conv2d"], "absorbed": []})
        entry["ops"] = [*entry["ops"], *(add_entry["ops"] if add_entry else ["add"])]
        entry["absorbed"] = [*entry["absorbed"], add,
                             *(add_entry["absorbed"] if add_entry else [])]
    g.attrs["fusion"] = [by_node[n.name] for n in g.nodes if n.name in by_node]
    if "partition" in g.attrs:
        segments: list[dict[str, Any]] = []
        for n in g.nodes:
            target = n.attrs.get("target", "cpu")
            if not segments or segments[-1]["target"] != target:
                segments.append({"target": target, "nodes": []})
            segments[-1]["nodes"].append(n.name)
        g.attrs["partition"]["segments"] = segments
