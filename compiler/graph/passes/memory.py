"""Static DRAM planning of activation buffers by liveness."""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.graph.ir import Graph
from compiler.graph.ops import physical_shape

__all__ = ["plan_memory"]


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def plan_memory(graph: Graph, alignment: int = 64) -> Graph:
    """Place every activation value in one DRAM arena, reusing the space of dead values.

    Lifetimes follow the final node order: step 0 holds the graph inputs, node ``i`` runs at
    step ``i + 1``; a value lives from the step that produces it to the last step that reads it
    (graph outputs to the end). Two values may share bytes only if their lifetimes do not meet,
    so a node's output never overlaps its inputs. Sizes are the stored (blocked, padded) sizes
    rounded up to ``alignment`` bytes. Placement is greedy first-fit: values by decreasing size
    (ties: earlier first), each at the lowest offset that overlaps no placed value it is live
    with. Params (weights, constants) are not planned here.

    Parameters
    ----------
    graph
        A typed graph in its final node order; not modified.
    alignment
        Offset and size granularity in bytes (64: a DRAM burst-friendly boundary that is a
        multiple of every tile size of the shipped configs).

    Returns
    -------
    Graph
        A copy with ``attrs["memory_plan"]`` = ``{"offsets": {value: byte offset},
        "sizes": {value: bytes}, "lifetimes": {value: (first, last) step}, "peak_bytes": arena
        size, "naive_bytes": sum of sizes (one buffer per value), "alignment": alignment}``.
    """
    g = graph.copy()
    end = len(g.nodes) + 1
    start: dict[str, int] = {v: 0 for v in g.inputs}
    constants = {n.outputs[0] for n in g.nodes if n.op == "constant"}
    for i, n in enumerate(g.nodes, start=1):
        for v in n.outputs:
            if v not in constants:
                start[v] = i
    last = dict(start)
    for i, n in enumerate(g.nodes, start=1):
        for v in n.inputs:
            if v in last:
                last[v] = max(last[v], i)
    for v in g.outputs:
        if v in last:
            last[v] = end
    sizes = {}
    for v in start:
        t = g.values[v]
        nbytes = int(np.prod(physical_shape(t))) * np.dtype(t.dtype).itemsize
        sizes[v] = _align(max(nbytes, 1), alignment)
    offsets: dict[str, int] = {}
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    for v in sorted(start, key=lambda v: (-sizes[v], start[v], v)):
        live = sorted((o, s) for o, s, a, b in placed if not (b < start[v] or last[v] < a))
        offset = 0
        for o, s in live:
            if offset + sizes[v] <= o:
                break
            offset = max(offset, o + s)
        offsets[v] = offset
        placed.append((offset, sizes[v], start[v], last[v]))
    plan: dict[str, Any] = {
        "offsets": {v: offsets[v] for v in start},
        "sizes": sizes,
        "lifetimes": {v: (start[v], last[v]) for v in start},
        "peak_bytes": max((offsets[v] + sizes[v] for v in start), default=0),
        "naive_bytes": sum(sizes.values()),
        "alignment": alignment,
    }
    g.attrs["memory_plan"] = plan
    return g
