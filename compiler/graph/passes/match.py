"""Pattern matching of what frameworks export decomposed: LayerNorm, GELU, a dense layer's bias.

``match_patterns`` rewrites, in a float graph:

- **LayerNorm** (PyTorch's export before opset 17, and hand-written ones)::

      m = reduce_mean(x, last axis)    d = sub(x, m)     p = pow(d, 2)  (or mul(d, d))
      v = reduce_mean(p, last axis)    e = add(v, eps)   s = sqrt(e)    n = div(d, s)
      [y = mul(n, gamma)]  [z = add(y, beta)]

  into ``layer_norm(x)`` with ``scale`` = gamma (ones without it) and ``bias`` = beta (zeros);
- **GELU**, erf form ``x * 0.5 * (1 + erf(x / sqrt 2))`` in any order of its products (a
  division by sqrt 2 or a product with 1 / sqrt 2), and tanh form ``0.5 * x * (1 + tanh(sqrt(2
  / pi) * (x + 0.044715 * x^3)))`` (``pow(x, 3)`` or ``x * x * x``), into ``gelu(x)``;
- **a bias add** after a float ``dense`` (ONNX ``MatMul`` then ``Add``) into the dense layer's
  ``bias``, so that quantisation folds it into the int32 accumulator.

A pattern is replaced only when its inner values have no reader outside it and are not graph
outputs, and its constants are what the pattern needs (within 1e-3 relative for sqrt 2 and the
tanh coefficients, 1e-6 for 0.5 and 1). Nodes left unread are removed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.graph.ir import Graph, Node, unique_name
from compiler.graph.passes.common import prune_params, prune_values

__all__ = ["match_patterns"]


class _View:
    """Lookups on a graph being rewritten."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.producer = {v: n for n in g.nodes for v in n.outputs}
        self.readers: dict[str, list[Node]] = {}
        for n in g.nodes:
            for v in n.inputs:
                self.readers.setdefault(v, []).append(n)

    def node(self, v: str, op: str) -> Node | None:
        n = self.producer.get(v)
        return n if n is not None and n.op == op else None

    def const(self, v: str) -> np.ndarray | None:
        n = self.producer.get(v)
        if n is None or n.op != "constant":
            return None
        return np.asarray(self.g.params[n.attrs["value"]], dtype=np.float64)

    def scalar(self, v: str, want: float, rel: float) -> bool:
        c = self.const(v)
        return c is not None and c.size == 1 and math.isclose(float(c.reshape(-1)[0]), want,
                                                              rel_tol=rel, abs_tol=0.0)

    def private(self, values: list[str], users: set[str]) -> bool:
        """Every value is read only by nodes named in ``users`` and is not an output."""
        return all(v not in self.g.outputs and all(r.name in users for r in
                                                   self.readers.get(v, [])) for v in values)

    def other(self, n: Node, v: str) -> str | None:
        """The input of binary node ``n`` that is not ``v``."""
        if len(n.inputs) != 2 or v not in n.inputs:
            return None
        return n.inputs[1] if n.inputs[0] == v else n.inputs[0]


def _last_axis_mean(view: _View, n: Node | None) -> bool:
    if n is None:
        return False
    rank = len(view.g.values[n.inputs[0]].shape)
    return tuple(n.attrs.get("axes", ())) == (rank - 1,) and bool(n.attrs.get("keepdims", True))


def _layer_norm(view: _View, div: Node) -> tuple[str, list[Node], dict[str, Any], str] | None:
    """(x, matched nodes, attrs, output) of a LayerNorm ending at ``div`` (and its affine)."""
    d, s = div.inputs
    sub, sqrt = view.node(d, "sub"), view.node(s, "sqrt")
    if sub is None or sqrt is None:
        return None
    x, m = sub.inputs
    mean = view.node(m, "reduce_mean")
    if mean is None or mean.inputs[0] != x or not _last_axis_mean(view, mean):
        return None
    add = view.node(sqrt.inputs[0], "add")
    if add is None:
        return None
    var_v = next((v for v in add.inputs if view.node(v, "reduce_mean")), None)
    eps_v = view.other(add, var_v) if var_v else None
    eps = view.const(eps_v) if eps_v else None
    if var_v is None or eps is None or eps.size != 1:
        return None
    var = view.node(var_v, "reduce_mean")
    assert var is not None
    sq = view.producer.get(var.inputs[0])
    if not _last_axis_mean(view, var) or sq is None or not (
            (sq.op == "pow" and sq.inputs[0] == d and view.scalar(sq.inputs[1], 2.0, 1e-6))
            or (sq.op == "mul" and sq.inputs == [d, d])):
        return None
    nodes = [mean, sub, sq, var, add, sqrt, div]
    h = view.g.values[x].shape[-1]
    gamma, beta = np.ones(h), np.zeros(h)
    out = div.outputs[0]
    readers = view.readers.get(out, [])
    if len(readers) == 1 and readers[0].op == "mul":
        c = view.const(view.other(readers[0], out) or "")
        if c is not None and c.size in (1, h):
            gamma, nodes, out = np.broadcast_to(c.reshape(-1), (h,)), [*nodes, readers[0]], \
                readers[0].outputs[0]
            readers = view.readers.get(out, [])
    if len(readers) == 1 and readers[0].op == "add":
        c = view.const(view.other(readers[0], out) or "")
        if c is not None and c.size in (1, h):
            beta, nodes, out = np.broadcast_to(c.reshape(-1), (h,)), [*nodes, readers[0]], \
                readers[0].outputs[0]
    inner = [v for n in nodes for v in n.outputs if v != out]
    if not view.private(inner, {n.name for n in nodes}):
        return None
    return x, nodes, {"gamma": gamma, "beta": beta, "epsilon": float(eps.reshape(-1)[0])}, out


def _product_chain(view: _View, top: Node) -> list[tuple[str, Node | None]]:
    """The factors of a tree of ``mul`` nodes rooted at ``top`` (with the node each factor
    came from)."""
    out: list[tuple[str, Node | None]] = []
    for v in top.inputs:
        n = view.node(v, "mul")
        if n is not None and len(view.readers.get(v, [])) == 1 and v not in view.g.outputs:
            out.extend(_product_chain(view, n))
        else:
            out.append((v, top))
    return out


def _gelu(view: _View, top: Node) -> tuple[str, list[Node], str] | None:
    """(x, matched nodes, form) of a GELU whose outermost product is ``top``."""
    factors = _product_chain(view, top)
    muls = list({id(n): n for _, n in factors if n is not None}.values())
    values = [v for v, _ in factors]
    if len(values) != 3:
        return None
    half = [v for v in values if view.scalar(v, 0.5, 1e-6)]
    plus = [v for v in values if view.node(v, "add")]
    if len(half) != 1 or len(plus) != 1:
        return None
    add = view.node(plus[0], "add")
    assert add is not None
    x = next(v for v in values if v not in (half[0], plus[0]))
    inner = next((v for v in add.inputs if view.node(v, "erf") or view.node(v, "tanh")), None)
    if inner is None or not view.scalar(view.other(add, inner) or "", 1.0, 1e-6):
        return None
    fn = view.producer[inner]
    arg = view.producer.get(fn.inputs[0])
    nodes = [*muls, add, fn]
    if fn.op == "erf":
        if arg is None or arg.inputs[0] != x or not (
                (arg.op == "div" and view.scalar(arg.inputs[1], math.sqrt(2), 1e-3))
                or (arg.op == "mul" and view.scalar(arg.inputs[1], 1 / math.sqrt(2), 1e-3))):
            return None
        nodes.append(arg)
        form = "erf"
    else:
        matched = _tanh_argument(view, arg, x)
        if matched is None:
            return None
        nodes.extend(matched)
        form = "tanh"
    inner_values = [v for n in nodes for v in n.outputs if v != top.outputs[0]]
    if not view.private(inner_values, {n.name for n in nodes}):
        return None
    return x, nodes, form


def _tanh_argument(view: _View, scale: Node | None, x: str) -> list[Node] | None:
    """``sqrt(2/pi) * (x + 0.044715 * x^3)``: the nodes, or None."""
    if scale is None or scale.op != "mul":
        return None
    k = next((v for v in scale.inputs if view.scalar(v, math.sqrt(2 / math.pi), 1e-3)), None)
    inner = view.node(view.other(scale, k) or "", "add") if k else None
    if inner is None or x not in inner.inputs:
        return None
    cube_term = view.node(view.other(inner, x) or "", "mul")
    if cube_term is None:
        return None
    c = next((v for v in cube_term.inputs if view.scalar(v, 0.044715, 1e-3)), None)
    cube_v = view.other(cube_term, c) if c else None
    cube = view.producer.get(cube_v or "")
    if cube is None:
        return None
    if cube.op == "pow" and cube.inputs[0] == x and view.scalar(cube.inputs[1], 3.0, 1e-6):
        return [scale, inner, cube_term, cube]
    if cube.op == "mul" and x in cube.inputs:
        sq = view.node(view.other(cube, x) or "", "mul")
        if sq is not None and sq.inputs == [x, x]:
            return [scale, inner, cube_term, cube, sq]
    return None


def _dense_bias(view: _View, add: Node) -> tuple[Node, np.ndarray] | None:
    for v in add.inputs:
        dense = view.node(v, "dense")
        c = view.const(view.other(add, v) or "")
        if dense is None or c is None or dense.attrs.get("bias") is not None:
            continue
        n = view.g.values[v].shape[-1]
        if c.size == n and c.shape[-1:] == (n,) and view.private([v], {add.name}) \
                and np.dtype(view.g.values[v].dtype).kind == "f":
            return dense, c.reshape(-1)
    return None


def match_patterns(graph: Graph) -> Graph:
    """Replace decomposed LayerNorm and GELU patterns, and bias adds after dense layers (see
    the module docstring).

    Parameters
    ----------
    graph
        A typed graph; not modified.

    Returns
    -------
    Graph
        The rewritten copy (the same graph when nothing matched); ``attrs["matched"]`` counts
        the replacements by kind.
    """
    g = graph.copy()
    counts = {"layer_norm": 0, "gelu": 0, "dense_bias": 0}
    changed = True
    while changed:
        changed = False
        view = _View(g)
        for n in g.nodes:
            if n.op == "div" and (ln := _layer_norm(view, n)) is not None:
                x, nodes, attrs, out = ln
                name = nodes[-1].name
                gamma = unique_name(g.params, f"{name}.gamma")
                g.params[gamma] = np.asarray(attrs["gamma"], np.float32)
                beta = unique_name(g.params, f"{name}.beta")
                g.params[beta] = np.asarray(attrs["beta"], np.float32)
                new = Node(name, "layer_norm", [x], [out], {"scale": gamma, "bias": beta,
                                                            "epsilon": attrs["epsilon"]})
                kind = "layer_norm"
            elif n.op == "mul" and (ge := _gelu(view, n)) is not None:
                x, nodes, form = ge
                new = Node(n.name, "gelu", [x], [n.outputs[0]], {"form": form})
                nodes = [*nodes]
                kind = "gelu"
            elif n.op == "add" and (db := _dense_bias(view, n)) is not None:
                dense, bias = db
                name = unique_name(g.params, f"{dense.name}.bias")
                g.params[name] = bias.astype(np.float32)
                dense.attrs["bias"] = name
                dense.outputs = list(n.outputs)
                g.nodes = [m for m in g.nodes if m is not n]
                counts["dense_bias"] += 1
                changed = True
                break
            else:
                continue
            drop = {id(m) for m in nodes}
            last = max(i for i, m in enumerate(g.nodes) if id(m) in drop)
            g.nodes = [new if i == last else m for i, m in enumerate(g.nodes)
                       if id(m) not in drop or i == last]
            counts[kind] += 1
            changed = True
            break
    if not any(counts.values()):
        return g
    _drop_unread(g)
    prune_params(g)
    prune_values(g)
    g.attrs["matched"] = counts
    return g


def _drop_unread(g: Graph) -> None:
    """Remove nodes (constants among them) whose outputs nothing reads."""
    read = set(g.outputs)
    kept: list[Node] = []
    for n in reversed(g.nodes):
        if not any(v in read for v in n.outputs):
            continue
        read.update(n.inputs)
        kept.append(n)
    g.nodes = kept[::-1]
