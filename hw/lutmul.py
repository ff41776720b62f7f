"""Multiplication from AND gates and adders, for products that need not take a DSP block,
and balanced adder trees."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal

__all__ = ["mul_low_lut", "mul_low_lut_parts", "tree_sum"]


def tree_sum(terms: list[object], width: int | None = None) -> object:
    """``sum(terms)`` as a balanced tree of adders (each sum cut to ``width`` bits if given)."""
    while len(terms) > 1:
        terms = [((terms[i] + terms[i + 1])[:width] if width else terms[i] + terms[i + 1])
                 if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0][:width] if width else terms[0]


def mul_low_lut(m: Module, pairs: list[tuple[object, object]], width: int, name: str) -> Signal:
    """``sum(x * y for x, y in pairs) mod 2**width`` from AND gates and adders (no multiplier).

    Every bit ``i`` of ``y`` contributes ``x << i`` truncated to ``width`` bits; the addends are
    summed in a balanced tree in which each node keeps only the bits above its lowest non-zero
    one, so no adder is wider than the bits it can change. Synthesis maps this to LUTs and
    carry chains, keeping the FPGA's multiplier blocks for the GEMM array.
    """
    (out,) = mul_low_lut_parts(m, pairs, width, name, parts=1)
    return out


def mul_low_lut_parts(m: Module, pairs: list[tuple[object, object]], width: int, name: str,
                      parts: int) -> list[Signal]:
    """The tree of :func:`mul_low_lut` stopped at ``parts`` partial sums (a power of two):
    their sum mod ``2**width`` is the result. A caller registers them and adds them in the next
    cycle, so the tree's levels are split between two pipeline stages."""
    if parts < 1 or parts & (parts - 1):
        raise ValueError(f"parts must be a power of two >= 1, not {parts}")
    nodes: list[tuple[object, int]] = []              # (value, shift): value << shift
    for x, y in pairs:
        for i in range(min(width, len(y))):
            nodes.append((Mux(y[i], x[:width - i], 0), i))
    if not nodes:
        return [Signal(width, name=f"{name}_{k}") for k in range(parts)]
    while len(nodes) > parts:
        nodes.sort(key=lambda node: node[1])
        merged = []
        for k in range(0, len(nodes) - 1, 2):
            (va, sa), (vb, sb) = nodes[k], nodes[k + 1]
            s = min(sa, sb)
            merged.append((((va << (sa - s)) + (vb << (sb - s)))[:width - s], s))
        if len(nodes) % 2:
            merged.append(nodes[-1])
        nodes = merged
    outs = []
    for k in range(parts):
        out = Signal(width, name=name if parts == 1 else f"{name}_{k}")
        if k < len(nodes):
            value, shift = nodes[k]
            m.d.comb += out.eq(value << shift)
        outs.append(out)
    return outs
