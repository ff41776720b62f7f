"""Multiplication from AND gates and adders, for products that need not take a DSP block."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal

__all__ = ["mul_low_lut"]


def mul_low_lut(m: Module, pairs: list[tuple[object, object]], width: int, name: str) -> Signal:
    """``sum(x * y for x, y in pairs) mod 2**width`` from AND gates and adders (no multiplier).

    Every bit ``i`` of ``y`` contributes ``x << i`` truncated to ``width`` bits; the addends are
    summed in a balanced tree in which each node keeps only the bits above its lowest non-zero
    one, so no adder is wider than the bits it can change. Synthesis maps this to LUTs and
    carry chains, keeping the FPGA's multiplier blocks for the GEMM array.
    """
    nodes: list[tuple[object, int]] = []              # (value, shift): value << shift
    for x, y in pairs:
        for i in range(min(width, len(y))):
            nodes.append((Mux(y[i], x[:width - i], 0), i))
    if not nodes:
        return Signal(width, name=name)
    while len(nodes) > 1:
        nodes.sort(key=lambda node: node[1])
        merged = []
        for k in range(0, len(nodes) - 1, 2):
            (va, sa), (vb, sb) = nodes[k], nodes[k + 1]
            s = min(sa, sb)
            merged.append((((va << (sa - s)) + (vb << (sb - s)))[:width - s], s))
        if len(nodes) % 2:
            merged.append(nodes[-1])
        nodes = merged
    value, shift = nodes[0]
    out = Signal(width, name=name)
    m.d.comb += out.eq(value << shift)
    return out
