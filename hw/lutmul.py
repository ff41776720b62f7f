"""Multiplication from AND gates and adders, for products that need not take a DSP block,
and balanced adder trees."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value

from hw.primitives import lut4

__all__ = ["carry_save", "compress_lut4", "mul_low_lut", "mul_low_lut_parts", "tree_sum"]


def tree_sum(terms: list[object], width: int | None = None) -> object:
    """``sum(terms)`` as a balanced tree of adders (each sum cut to ``width`` bits if given)."""
    while len(terms) > 1:
        terms = [((terms[i] + terms[i + 1])[:width] if width else terms[i] + terms[i + 1])
                 if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0][:width] if width else terms[0]


def carry_save(terms: list[object], width: int) -> tuple[object, object]:
    """Two values whose sum mod ``2**width`` is ``sum(terms)`` mod ``2**width``, in LUTs (no
    carry chain): one adder after this is the only carry chain of the whole sum.

    Each level takes the terms five (or four) at a time through column counters: per bit, the
    count of the group's bits as three bits of weight 1, 2 and 4, each a function of five
    inputs (one LUT5 level on ECP5, a LUT4 pair and its PFU multiplexer), so five terms
    become three; three terms left over take a 3:2 compressor (per bit a three-input XOR and
    a majority). Five terms become two in two levels where 3:2 compressors alone take three.
    """
    def compress(a: object, b: object, c: object) -> list[object]:
        total, carry = _full_add(a, b, c)
        return [total[:width], Cat(Const(0), carry)[:width]]

    def count(group: list[object]) -> list[object]:
        a, b, c, d, e = group + [Const(0, width)] * (5 - len(group))
        s1, c1 = _full_add(a, b, c)
        ones, c2 = _full_add(s1, d, e)
        return [ones[:width], Cat(Const(0), c1 ^ c2)[:width],
                Cat(Const(0, 2), c1 & c2)[:width]]

    rest = [Cat(t)[:width] for t in terms]
    while len(rest) > 2:
        nxt = []
        while len(rest) >= 4:
            nxt += count(rest[:5])
            rest = rest[5:]
        if len(rest) == 3:
            nxt += compress(*rest)
            rest = []
        rest = nxt + rest
    rest += [Const(0, width)] * (2 - len(rest))
    return rest[0], rest[1]


def _full_add(a: object, b: object, c: object) -> tuple[object, object]:
    """Per bit, the sum and carry of three bits: a three-input XOR and a majority."""
    return a ^ b ^ c, (a & b) | (a & c) | (b & c)


def compress_lut4(m: Module, a: Value, b: Value, c: Value, name: str) -> tuple[Signal, Value]:
    """:func:`carry_save`'s 3:2 compressor as instantiated ECP5 ``LUT4`` cells
    (:func:`hw.primitives.lut4`, ``{name}_sum`` and ``{name}_carry``), so that Yosys's mapper
    cannot fold its inputs deeper: each bit of ``a``, ``b``, ``c`` (equal widths) passes one
    LUT. Returns two values whose sum mod ``2**width`` is ``a + b + c`` mod ``2**width``."""
    width = len(a)
    zero = Const(0, width)
    total = lut4(m, a, b, c, zero, lambda x, y, z, _: _full_add(x, y, z)[0], f"{name}_sum")
    carry = lut4(m, a, b, c, zero, lambda x, y, z, _: _full_add(x, y, z)[1], f"{name}_carry")
    return total, Cat(Const(0), carry[:width - 1])


def mul_low_lut(m: Module, pairs: list[tuple[object, object]], width: int, name: str,
                extra: tuple[object, ...] = (), booth: bool = False) -> Signal:
    """``(sum(x * y for x, y in pairs) + sum(extra)) mod 2**width`` from AND gates and adders
    (no multiplier).

    Every bit ``i`` of ``y`` contributes ``x << i`` truncated to ``width`` bits (with ``booth``,
    a radix-4 Booth digit of ``y`` contributes a row: :func:`_booth_rows`); the addends and
    ``extra`` are summed in a balanced tree in which each node keeps only the bits above its
    lowest non-zero one, so no adder is wider than the bits it can change. Synthesis maps this
    to LUTs and carry chains, keeping the FPGA's multiplier blocks for the GEMM array.
    """
    (out,) = mul_low_lut_parts(m, pairs, width, name, parts=1, booth=booth, extra=extra)
    return out


def _binary_rows(pairs: list[tuple[object, object]], width: int) -> list[tuple[object, int]]:
    """Addends ``(value, shift)`` of ``sum(x * y) mod 2**width``: ``x << i`` for each bit
    ``i`` of ``y`` that is set."""
    rows = []
    for x, y in pairs:
        for i in range(min(width, len(y))):
            rows.append((Mux(y[i], x[:width - i], 0), i))
    return rows


def _booth_rows(pairs: list[tuple[object, object]], width: int) -> list[tuple[object, int]]:
    """Addends of ``sum(x * y) mod 2**width`` by radix-4 Booth recoding of ``y``: half as many
    as :func:`_binary_rows`.

    ``y`` (unsigned, zero-extended) is ``sum(d_j * 4**j) mod 2**width`` with digits
    ``d_j = -2 y[2j+1] + y[2j] + y[2j-1]`` in -2..2, ``j < J = min(ceil(width / 2),
    len(y) // 2 + 1)`` (the digits above ``y``'s last are 0, and its last is not negative, so a
    short ``y`` costs as few rows as it has digits). Row ``j`` is
    ``d_j * x`` on the ``width - 2j`` bits it can change: ``x`` or ``2x`` picked per bit and
    inverted when ``d_j < 0``; the ``+1`` completing that negation sits in the next row's two
    free bits below its own (each bit a function of five inputs: three of ``y``, two of
    ``x``). The last row has at most two bits and is formed exactly, so no extra addend is
    needed.
    """
    def bit(v: object, i: int) -> object:          # zero outside ``v``
        return v[i] if 0 <= i < len(v) else Const(0)

    rows = []
    for x, y in pairs:
        n_digits = min((width + 1) // 2, len(y) // 2 + 1)
        wide = Cat(x, Const(0, max(0, width - len(x))))    # x on at least ``width`` bits
        carry = None                     # the previous row's +1, when it was negated
        for j in range(n_digits):
            hi, mid, lo = bit(y, 2 * j + 1), bit(y, 2 * j), bit(y, 2 * j - 1)
            one = mid ^ lo                                  # |d| == 1
            two = (hi & ~mid & ~lo) | (~hi & mid & lo)      # |d| == 2
            neg = hi & ~(mid & lo)                          # d < 0
            bits = width - 2 * j
            mask = Mux(neg, (1 << bits) - 1, 0)
            # Whole-row operations (one per row, not per bit: the Verilog stays short).
            sel = Mux(one, wide[:bits], 0) | Mux(two, Cat(Const(0), wide[:bits - 1]), 0)
            last = j == n_digits - 1                        # one or two bits: exact
            body = ((sel ^ mask) + neg)[:bits] if last else (sel ^ mask)[:bits]
            if carry is None:
                rows.append((body, 2 * j))
            else:
                rows.append((Cat(carry, Const(0), body), 2 * j - 2))
            carry = neg
    return rows


def mul_low_lut_parts(m: Module, pairs: list[tuple[object, object]], width: int, name: str,
                      parts: int, booth: bool = False,
                      extra: tuple[object, ...] = ()) -> list[Signal]:
    """The tree of :func:`mul_low_lut` stopped at ``parts`` partial sums (a power of two):
    their sum mod ``2**width`` is the result. A caller registers them and adds them in the next
    cycle, so the tree's levels are split between two pipeline stages. With ``booth`` the
    addends come from a radix-4 Booth recoding of each ``y`` (:func:`_booth_rows`): half as
    many, so one adder level fewer, each addend bit a five-input function instead of an AND.
    ``extra`` values are further addends."""
    if parts < 1 or parts & (parts - 1):
        raise ValueError(f"parts must be a power of two >= 1, not {parts}")
    nodes = _booth_rows(pairs, width) if booth else _binary_rows(pairs, width)
    nodes = [(Cat(v)[:width], 0) for v in extra] + nodes
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
