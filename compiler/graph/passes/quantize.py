"""Quantisation of a float graph to int8 with power-of-two scales.

What becomes integer: conv2d, dense, batch_matmul and an add of two activations of one shape
(the accelerator's operators), and the data movement between them (relu, pools, flatten,
reshape, transpose, take, slice, concat: ``_SAME_SCALE``). Every other operator (softmax,
layer_norm, gelu, an add of a constant, ...) stays float on the fallback; a ``quantize`` node
goes on each edge from a float producer to an integer consumer, a ``dequantize`` node on each
edge the other way.

Every int8 value ``v`` gets a scale ``2**-s_v`` (``s_v`` = its ``scale_shift``): the real number
``r`` is held as the int8 ``q = clip(rint(r * 2**s_v), -128, 127)``.

Calibration: the float graph runs on the sample inputs; ``amax_v`` is the largest ``|r|`` seen
and ``s_v = floor(log2(127 / amax_v))``, the finest power-of-two scale at which no calibration
value clips. Weights get one scale per tensor the same way from ``max |w|``.

Constraints between scales (solved by lowering scales, never raising them, so nothing that fit
starts to clip):

- the data movement does not rescale: inputs and output share one scale;
- ``add`` sums integers, so its two inputs share one scale, and its output scale may only be
  coarser (``s_out <= s_in``, ``shift = s_in - s_out``);
- a value in several such groups takes the coarsest (smallest ``s``) of their calibrated scales.

A batch_matmul's accumulator holds ``r * 2**(s_a + s_b)``: ``shift = s_a + s_b - s_out``, the
output scale lowered as for dense. The shift of a conv2d / dense: the int32 accumulator holds
``r * 2**(s_in + s_w)``, so
``shift = s_in + s_w - s_out``. A negative shift (output finer than the accumulator) cannot be
done by a right shift, so the output scale is lowered to ``s_in + s_w`` instead; a shift above
31 lowers ``s_w``, and so does a bias that would not fit int32 at ``s_in + s_w``. The float
bias becomes ``rint(b * 2**(s_in + s_w))`` in int32, plus
``2**(shift - 1)`` when ``shift > 0``: the accumulator's floor shift then rounds to nearest
(half up) instead of always down. ``quantize`` nodes enter at the graph inputs (named
``<x>.quantize``, output ``<x>.q``) and ``dequantize`` nodes leave at the int8 outputs (the
integer value is renamed ``<y>.q``), so the graph still takes and returns float32; the
scales are reported in ``graph.attrs["quantization"]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from compiler.graph.ir import Graph, GraphError, Node, TensorType, unique_name
from compiler.graph.ops import infer_types
from compiler.graph.passes.common import needs_quantization, prune_params
from compiler.graph.reference import run_reference

__all__ = ["Calibration", "quantize"]

Calibration = Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]]

#: Operators that only move or select values: an int8 input gives an int8 output at the same
#: scale. Between integer operators they stay integer; between float ones, float.
_SAME_SCALE = ("relu", "clip", "max_pool2d", "avg_pool2d", "global_avg_pool", "flatten", "reshape",
               "transpose", "take", "slice", "concat")
_INT32 = (-(2**31), 2**31 - 1)


def _shift_for(amax: float) -> int:
    """Finest power-of-two scale shift at which ``amax`` still fits 127."""
    if not amax > 0 or not math.isfinite(amax):
        return 0
    return math.floor(math.log2(127.0 / amax))


def _is_integer_node(graph: Graph, n: Node, constants: set[str]) -> bool:
    """Does ``n`` become an integer (accelerator) operator: conv2d, dense, batch_matmul of
    two activations, and an add of two activations of one shape (a residual add)? An add of a
    constant or with broadcasting stays a float operator."""
    if n.op in ("conv2d", "dense", "batch_matmul"):
        return not any(v in constants for v in n.inputs)
    if n.op == "add":
        a, b = (graph.values[v] for v in n.inputs)
        return a.shape == b.shape and not any(v in constants for v in n.inputs)
    return False


def _check_quantizable(graph: Graph) -> None:
    for n in graph.nodes:
        where = f"{graph.name}: node {n.name} ({n.op}) cannot be quantized"
        if n.op == "batch_norm":
            raise GraphError(f"{where}: a batch_norm that does not follow a conv2d or dense "
                             "is not supported (run fold_batch_norm first)")
        if n.op in ("quantize", "dequantize"):
            raise GraphError(f"{where}: the graph is already quantized")


def _calibrate(graph: Graph, calibration: Calibration) -> dict[str, float]:
    """Largest |value| of every value over the calibration inputs."""
    samples = [calibration] if isinstance(calibration, Mapping) else list(calibration)
    if not samples:
        raise GraphError(f"{graph.name}: quantize needs at least one calibration input")
    amax: dict[str, float] = {}
    for i, sample in enumerate(samples):
        g = graph.copy()
        arrays = {}
        for v in graph.inputs:
            if v not in sample:
                raise GraphError(f"{graph.name}: calibration sample {i} has no array for "
                                 f"input {v!r}")
            want_dtype = graph.values[v].dtype
            x = np.asarray(sample[v], dtype=np.float32 if np.dtype(want_dtype).kind == "f"
                           else want_dtype)
            want = graph.values[v].shape
            if x.ndim != len(want) or x.shape[1:] != want[1:]:
                raise GraphError(f"{graph.name}: calibration sample {i}: input {v!r} must "
                                 f"have shape (any, {', '.join(map(str, want[1:]))}), got "
                                 f"{x.shape}")
            g.values[v] = TensorType(x.shape, str(x.dtype), graph.values[v].layout)
            arrays[v] = x
        env = run_reference(infer_types(g), arrays, keep=True)
        for v, x in env.items():
            m = float(np.max(np.abs(x.astype(np.float64)))) if x.size else 0.0
            amax[v] = max(amax.get(v, 0.0), m)
    return amax


class _Groups:
    """Union-find over value names; each group holds one scale shift."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, v: str) -> str:
        self.parent.setdefault(v, v)
        while self.parent[v] != v:
            self.parent[v] = self.parent[self.parent[v]]
            v = self.parent[v]
        return v

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def _weight_shift(w: np.ndarray) -> int:
    return _shift_for(float(np.max(np.abs(w))) if w.size else 0.0)


def _solve_scales(graph: Graph, amax: dict[str, float], ints: set[str],
                  int_nodes: list[Node]) -> dict[str, int]:
    """A scale shift per int8 value meeting the constraints of the module docstring."""
    groups = _Groups()
    for v in ints:
        groups.find(v)
    for n in graph.nodes:
        if n.op in _SAME_SCALE and n.outputs[0] in ints:
            for v in n.inputs:
                groups.union(v, n.outputs[0])
        elif n.op == "add" and n in int_nodes:
            groups.union(n.inputs[0], n.inputs[1])
    scale: dict[str, int] = {}
    for v in ints:
        root = groups.find(v)
        scale[root] = min(scale.get(root, 127), _shift_for(amax.get(v, 0.0)))
    for _ in range(len(graph.nodes) + 1):
        changed = False
        for n in int_nodes:
            out = groups.find(n.outputs[0])
            s_in = scale[groups.find(n.inputs[0])]
            if n.op == "add":
                limit = s_in
            elif n.op == "batch_matmul":
                limit = s_in + scale[groups.find(n.inputs[1])]
            else:
                limit = s_in + _weight_shift(graph.params[n.attrs["weight"]])
            if scale[out] > limit:
                scale[out] = limit
                changed = True
        if not changed:
            break
    return {v: scale[groups.find(v)] for v in ints}


def _quantize_layer(g: Graph, n: Node, s_in: int, s_out: int) -> None:
    """Turn float conv2d / dense ``n`` into its int8 form (in place)."""
    w = g.params[n.attrs["weight"]].astype(np.float64)
    s_w = _weight_shift(w)
    shift = s_in + s_w - s_out
    if shift > 31:
        s_w -= shift - 31
        shift = 31
    assert shift >= 0, "scales were solved so that shifts are non-negative"
    old_bias = n.attrs.get("bias")
    b = np.zeros(w.shape[0]) if old_bias is None else g.params[old_bias].astype(np.float64)

    def int_bias() -> np.ndarray:
        return np.rint(b * 2.0 ** (s_in + s_w)) + (2 ** (shift - 1) if shift > 0 else 0)

    # A bias that the accumulator's scale would push past int32 (activations that have all
    # but vanished, as in a randomly initialised GoogLeNet, leave a very fine input scale):
    # a coarser weight scale, not a clipped bias, which would be wrong by orders of magnitude.
    qb = int_bias()
    while shift > 0 and b.size and np.abs(qb).max() > _INT32[1]:
        s_w, shift = s_w - 1, shift - 1
        qb = int_bias()
    g.params[n.attrs["weight"]] = np.clip(np.rint(w * 2.0**s_w), -127, 127).astype(np.int8)
    b_name = old_bias if old_bias is not None else unique_name(g.params, f"{n.name}.bias")
    g.params[b_name] = np.clip(qb, *_INT32).astype(np.int32)
    attrs = {"weight": n.attrs["weight"], "bias": b_name}
    if n.op == "conv2d":
        attrs["stride"] = n.attrs.get("stride", (1, 1))
        attrs["padding"] = n.attrs.get("padding", (0, 0))
    attrs["shift"] = shift
    attrs["relu"] = bool(n.attrs.get("relu", False))
    n.attrs = {**attrs, **{k: v for k, v in n.attrs.items() if k not in attrs}}


def quantize(graph: Graph, calibration: Calibration) -> Graph:
    """Quantize a float graph to int8 with power-of-two scales (see the module docstring).

    Parameters
    ----------
    graph
        A typed float graph of conv2d, dense, add, relu, pools and flatten (batch norms folded,
        constants folded); not modified. An integer graph is returned as a copy.
    calibration
        Sample inputs: one mapping from input name to float array, or a sequence of them. The
        batch size may differ from the graph's; the other dimensions must match.

    Returns
    -------
    Graph
        An int8 graph with a ``quantize`` node per input (``<x>.q``), a ``dequantize`` node per
        output (the integer value is renamed ``<y>.q``), and ``attrs["quantization"]`` =
        ``{"scale_shift": {value: s}}`` (value = int8 * 2**-s).

    Raises
    ------
    GraphError
        An operator without a quantization rule (a batch norm that could not be folded, a
        constant operand, an already quantized graph), or calibration inputs that are missing
        or of the wrong shape.
    """
    if not needs_quantization(graph):
        return graph.copy()
    _check_quantizable(graph)
    amax = _calibrate(graph, calibration)
    constants = {n.outputs[0] for n in graph.nodes if n.op == "constant"}
    int_nodes = [n for n in graph.nodes if _is_integer_node(graph, n, constants)]

    def is_float(v: str) -> bool:
        return np.dtype(graph.values[v].dtype).kind == "f"

    # int8 values: those of integer operators, spread through the data movement between them.
    ints = {v for n in int_nodes for v in (*n.inputs, *n.outputs) if is_float(v)}
    changed = True
    while changed:
        changed = False
        for n in graph.nodes:
            vals = [v for v in (*n.inputs, *n.outputs) if is_float(v)]
            if n.op in _SAME_SCALE and any(v in ints for v in vals) \
                    and not all(v in ints for v in vals):
                ints.update(vals)
                changed = True
    scales = _solve_scales(graph, amax, ints, int_nodes)
    g = graph.copy()
    int_names = {n.name for n in int_nodes}
    for n in g.nodes:
        if n.name not in int_names:
            continue
        if n.op in ("conv2d", "dense"):
            _quantize_layer(g, n, scales[n.inputs[0]], scales[n.outputs[0]])
        elif n.op == "batch_matmul":
            shift = scales[n.inputs[0]] + scales[n.inputs[1]] - scales[n.outputs[0]]
            n.attrs = {"shift": shift, "relu": bool(n.attrs.get("relu", False)),
                       **{k: v for k, v in n.attrs.items() if k not in ("shift", "relu")}}
        else:
            s_in, s_out = scales[n.inputs[0]], scales[n.outputs[0]]
            n.attrs = {"shift": s_in - s_out, "relu": bool(n.attrs.get("relu", False)),
                       **{k: v for k, v in n.attrs.items() if k not in ("shift", "relu")}}
    final = dict(scales)
    # Conversions at the edges between integer and float operators: a quantize node per value
    # that an integer-mode node reads from a float producer (graph inputs first), a dequantize
    # node per int8 value a float node reads; int8 graph outputs leave as float under their
    # own names.
    wants_int = {n.name for n in g.nodes if n.name in int_names
                 or (n.op in _SAME_SCALE and n.outputs[0] in ints)}
    produced_int = {v for n in g.nodes if n.name in wants_int for v in n.outputs}
    taken = {n.name for n in g.nodes} | {f"{y}.dequantize" for y in g.outputs}
    entry: list[Node] = []
    body: list[Node] = []
    converted: dict[tuple[str, str], str] = {}

    def convert(v: str, op: str, into: list[Node]) -> str:
        if (v, op) not in converted:
            out = unique_name(g.values, f"{v}.q" if op == "quantize" else f"{v}.f")
            g.values[out] = g.values[v]
            name = unique_name(taken, f"{v}.{op}")
            taken.add(name)
            into.append(Node(name, op, [v], [out], {"scale_shift": scales[v]}))
            final[out] = scales[v]
            converted[(v, op)] = out
        return converted[(v, op)]

    for x in g.inputs:
        if is_float(x) and any(c.name in wants_int for c in g.consumers(x)):
            convert(x, "quantize", entry)
    for n in g.nodes:
        want = n.name in wants_int
        inputs = []
        for v in n.inputs:
            have = v in produced_int
            if not is_float(v) or have == want:
                inputs.append(v)
            else:
                inputs.append(convert(v, "quantize" if want else "dequantize", body))
        n.inputs = inputs
        body.append(n)
    g.nodes = body
    exits: list[Node] = []
    for y in list(dict.fromkeys(g.outputs)):
        if y not in produced_int:
            continue
        q = unique_name(g.values, f"{y}.q")
        producer = g.producer(y)
        if producer is None:
            raise GraphError(f"{g.name}: output {y!r} is a graph input; nothing to quantize")
        producer.outputs = [q if v == y else v for v in producer.outputs]
        for n in g.nodes:
            n.inputs = [q if v == y else v for v in n.inputs]
        g.values[q] = g.values[y]
        exits.append(Node(f"{y}.dequantize", "dequantize", [q], [y],
                          {"scale_shift": scales[y]}))
        final[q] = scales[y]
        produced_int.add(q)
    g.nodes = entry + g.nodes + exits
    int8_values = produced_int | {n.outputs[0] for n in entry + g.nodes if n.op == "quantize"}
    for v, t in list(g.values.items()):
        if v not in g.inputs and v in int8_values:
            g.values[v] = TensorType(t.shape, "int8", t.layout)
    for n in g.nodes:  # an int8 clip rounds its bounds at its value's scale
        if n.op == "clip" and n.outputs[0] in int8_values:
            n.attrs["scale_shift"] = int(final[n.outputs[0]])
    prune_params(g)
    g = infer_types(g)
    g.attrs["quantization"] = {"scale_shift": {
        v: int(final[v]) for v, t in g.values.items() if v in final and t.dtype == "int8"}}
    return g
