"""Layout packing: accelerator nodes exchange values in the blocked layout.

The accelerator reads activations as ``NCHW{b}n{i}c`` tiles and writes ``NCHW{b}n{o}c`` tiles
(``b`` = the config's batch, ``i`` / ``o`` = block_in / block_out; a dense layer's ``(N, K)``
input counts as ``NC``: ``NC{b}n{i}c``). Which inputs an accelerator node reads blocked by
``block_in`` and which by ``block_out`` is its registry entry's (``AccelOp.inputs``). After
this pass:

- every output of an accelerator node has the blocked layout in its type and the name
  ``<value>.<layout>`` (``layer1.0.conv1.NCHW1n8c``); values in their plain layout keep their
  names, so graph inputs and outputs never change name;
- a ``layout_pack`` node (``<value>.pack``) is inserted before the first accelerator node that
  reads a plain value, a ``layout_unpack`` node (``<value>.unpack``) before the first CPU node
  (or graph output) that reads a blocked one, each once per value: transforms appear only at
  partition boundaries, and two accelerator nodes in a row hand over the blocked value as is
  (when block_in differs from block_out, the value is unpacked and repacked);
- layout nodes get ``target = "cpu"``.

Types keep their logical shapes; the stored array's shape is
:func:`compiler.graph.ops.physical_shape` (channels zero-padded to the block).
"""

from __future__ import annotations

from accel.machine.config import HwConfig
from compiler.graph.ir import Graph, GraphError, Node, TensorType, unique_name
from compiler.graph.ops import blocked_layout, infer_types, parse_layout
from compiler.graph.passes.common import require_targets
from compiler.ops.accel_op import Block, Operand
from compiler.ops.registry import accel_op

__all__ = ["pack_layout"]


def pack_layout(graph: Graph, cfg: HwConfig) -> Graph:
    """Give values between accelerator nodes the blocked layout; insert layout transforms at
    partition boundaries only (see the module docstring).

    Parameters
    ----------
    graph
        A partitioned graph (every node has ``attrs["target"]``), not yet packed; not modified.
    cfg
        The hardware: its batch, block_in and block_out set the blocked layouts.

    Returns
    -------
    Graph
        The packed copy.

    Raises
    ------
    GraphError
        A node without a target, or a graph that is already packed.
    """
    require_targets(graph, "pack_layout")
    for v, t in graph.values.items():
        if parse_layout(t.layout) is not None:
            raise GraphError(f"{graph.name}: pack_layout ran already (value {v!r} is {t})")
    g = graph.copy()
    types = graph.values
    node_names = {n.name for n in g.nodes}
    have: dict[str, dict[str, str]] = {v: {types[v].layout: v} for v in g.inputs}
    values: dict[str, TensorType] = {v: types[v] for v in g.inputs}
    nodes: list[Node] = []

    def ensure(v: str, layout: str) -> str:
        """The name of ``v`` in ``layout``, inserting transforms as needed."""
        if layout in have[v]:
            return have[v][layout]
        plain = types[v].layout
        if layout == plain:
            src_layout, src = next(iter(have[v].items()))
            op, name, attrs = "layout_unpack", v, {"layout": src_layout}
        else:
            src = ensure(v, plain)
            op, name, attrs = "layout_pack", f"{v}.{layout}", {"layout": layout}
        node_name = unique_name(node_names, f"{v}.{op.split('_')[1]}")
        node_names.add(node_name)
        nodes.append(Node(node_name, op, [src], [name], {**attrs, "target": "cpu"}))
        values[name] = TensorType(types[v].shape, types[v].dtype, layout)
        have[v][layout] = name
        return name

    def layout_for(n: Node, v: str, block: Block, image: bool) -> str:
        rank = len(types[v].shape)
        if n.attrs["target"] == "accel" and rank >= 2 and block is not Block.CUSTOM:
            return blocked_layout(rank, cfg.batch,
                                  cfg.block_in if block is Block.IN else cfg.block_out, image)
        return types[v].layout

    for n in g.nodes:
        entry = accel_op(n.op)
        operands = entry.inputs if entry is not None else \
            tuple(Operand(v, Block.OUT) for v in n.inputs)
        n.inputs = [ensure(v, layout_for(n, v, op.block, op.image))
                    for v, op in zip(n.inputs, operands, strict=True)]
        outputs = []
        for v in n.outputs:
            layout = layout_for(n, v, Block.OUT, entry.output_image if entry else True)
            name = v if layout == types[v].layout else f"{v}.{layout}"
            have[v] = {layout: name}
            values[name] = TensorType(types[v].shape, types[v].dtype, layout)
            outputs.append(name)
        n.outputs = outputs
        nodes.append(n)
    for v in g.outputs:
        ensure(v, types[v].layout)
    g.nodes = nodes
    g.values = values
    g = infer_types(g)
    g.verify()
    return g
