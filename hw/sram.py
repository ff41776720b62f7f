"""On-chip SRAM buffers: ``lanes`` interleaved banks of :class:`amaranth.lib.memory.Memory`.

A buffer element is a tile (or a micro-op word). When an element is narrower than a DRAM beat,
one beat carries several consecutive elements; the buffer is then split into ``lanes`` banks,
element ``e`` living in bank ``e % lanes`` at row ``e // lanes``, so that a beat's elements are
written in one cycle whatever the alignment of its first element. Both ports address the
buffer by element index and carry ``lanes`` elements, lane ``i`` being element ``addr + i``.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.params import BufferGeometry
from hw.primitives import family_of, lut4

__all__ = ["BufferRead", "BufferWrite", "SramBuffer", "late_mux"]


def _late_bit(fixed: int, code: int, a: int, b: int) -> int:
    return code if fixed else (a if code else b)


def late_mux(m: Module, name: str, take_a: Value, a: Value, take_b: Value, b: Value,
             rest: Value, family: str | None = None) -> Value:
    """``Mux(take_a, a, Mux(take_b, b, rest))``, for ECP5 with each bit of the late inputs
    ``a`` and ``b`` through one LUT.

    For two inputs that arrive late in the cycle (block-RAM data, a multiplier's product, a
    carry chain's sum), whose bits should pass a single LUT of four inputs on their way to a
    register. For ECP5 (``family``) each bit is an instantiated ``LUT4``
    (:func:`hw.primitives.lut4`) of the two late bits and two signals formed from the selects
    and ``rest``: ``{name}_fixed`` (neither is taken: the bit is the code) and
    ``{name}_code`` (that bit, or else 1 for ``a``, 0 for ``b``). Left to itself, Yosys's
    mapper sees through any such signals, kept or not, and spends two levels on the late
    inputs. Other families get the plain multiplexers (a LUT6 holds a bit's five inputs). The
    width is ``rest``'s.
    """
    width = len(rest)
    if family != "ecp5":
        return Mux(take_a, a[:width], Mux(take_b, b[:width], rest))
    fixed = Signal(name=f"{name}_fixed", attrs={"keep": 1})
    code = Signal(width, name=f"{name}_code", attrs={"keep": 1})
    m.d.comb += [fixed.eq(~take_a & ~take_b),
                 code.eq(Mux(fixed, rest, take_a.replicate(width)))]
    return lut4(m, fixed.replicate(width), code, a[:width], b[:width], _late_bit,
                f"{name}_late")


class BufferWrite(wiring.Signature):
    """A write port, seen from the writer.

    Members
    -------
    addr : Out
        Element index of lane 0.
    en : Out
        One write enable per lane; lane ``i`` writes element ``addr + i``.
    data : Out
        ``lanes`` elements, lane 0 in the least significant bits.
    """

    def __init__(self, geom: BufferGeometry) -> None:
        self.geom = geom
        super().__init__({
            "addr": Out(geom.addr_bits),
            "en": Out(geom.lanes),
            "data": Out(geom.lanes * geom.elem_bits),
        })

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BufferWrite) and other.geom == self.geom

    def __hash__(self) -> int:
        return hash(("BufferWrite", self.geom))


class BufferRead(wiring.Signature):
    """A synchronous read port, seen from the reader.

    Members
    -------
    addr : Out
        Element index of lane 0; sampled at the clock edge.
    data : In
        The ``lanes`` elements ``addr``, ``addr + 1``, ... at the address of the previous cycle
        (zero-extended when the buffer keeps fewer bits than an element); ``lanes`` is the
        geometry's unless given. Whether a write at the same edge is visible depends on the
        buffer (``SramBuffer(transparent=...)``).
    """

    def __init__(self, geom: BufferGeometry, lanes: int | None = None) -> None:
        self.geom = geom
        self.lanes = geom.lanes if lanes is None else lanes
        super().__init__({
            "addr": Out(geom.addr_bits),
            "data": In(self.lanes * geom.elem_bits),
        })

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, BufferRead) and other.geom == self.geom
                and other.lanes == self.lanes)

    def __hash__(self) -> int:
        return hash(("BufferRead", self.geom, self.lanes))


class SramBuffer(wiring.Component):
    """One buffer: a write port and a synchronous read port.

    Parameters
    ----------
    geom
        Depth, element width, bits kept per element and number of lanes (banks).
    transparent
        A read at the edge of a write to the same element returns the new data. Amaranth
        writes a transparent port as a registered address in front of an asynchronous read,
        and Yosys then folds the reader's next register into the block RAM as its data latch
        (ECP5's DP16KD then runs without its output register, 5.8 ns clock-to-out, and the
        depth mux follows it). A non-transparent port registers the data instead, so the
        reader's register stays a fabric flip-flop after the mux: the GEMM operand buffers
        (whose reads and writes tokens keep apart) and the micro-op buffer (whose reader
        forwards a write itself) use it. What such a read returns at the edge of a write to
        the same element is left unspecified (the simulators return the old data, the
        netlist may return either; the memories carry Yosys's ``no_rw_check``), so its
        readers must not depend on it.
    read_lanes
        Consecutive elements a read returns (a power of two; default: the write lanes). The
        buffer has ``max(lanes, read_lanes)`` banks.
    write_register
        Register each bank's write address, enable and data (after the lanes are rotated to
        their banks) in front of the memory, so that the writer's logic and the route to the
        block RAM do not share a cycle: a write lands a cycle after it is presented, and a
        read sees it two cycles after, not one. For buffers whose readers wait for a token
        after the writer's last write: the GEMM operand buffers, which LOAD writes until its
        last cycle, whose token compute sees in the next cycle at the earliest, in which it
        decodes and issues the first micro-op, which reads a cycle later (stage 1); and the
        micro-op buffer, whose reader forwards the two writes it cannot see itself
        (``Compute._uop_fetch``).
    pick
        Add a port ``pick`` (in), sampled with ``r.addr``, and a port ``picked`` (out): the one
        element ``addr + pick`` (``pick`` below ``read_lanes``) of what ``r.data`` returns.
        Its bank is selected by a kept signal (``keep``) formed from registers only, so the
        block RAMs' data pass one multiplexer of the banks (not the lane rotation's and then
        the reader's own), which the reader's next multiplexer can share a LUT with: for the
        micro-op buffer, whose reader picks one of the two micro-ops a read returns.
        With it come ports ``force`` and ``forced`` (in, in the cycle the data arrive, like
        ``picked``): where ``force`` is set, ``picked`` is ``forced`` instead (the reader's
        forwarding of writes the read cannot see). With two banks, built for ECP5, each bit
        of ``picked`` is then one LUT of four inputs, two of them the banks' data
        (:func:`late_mux`; the other two, ``pick_fixed`` and ``pick_code``, come from the
        select, ``force`` and ``forced``).

    Ports
    -----
    w : In(BufferWrite)
        Write port (the writer drives it).
    r : In(BufferRead)
        Read port (the reader drives ``addr``, receives ``data``).
    pick : In(range(read_lanes)), picked : Out(elem_bits)
        With ``pick``: the element offset and the element (see above).
    force : In(1), forced : In(elem_bits)
        With ``pick``: ``picked`` is ``forced`` where ``force`` is set (see above).
    """

    def __init__(self, geom: BufferGeometry, transparent: bool = True,
                 read_lanes: int | None = None, write_register: bool = False,
                 pick: bool = False) -> None:
        banks = self.banks_of(geom, read_lanes)
        read_lanes = geom.lanes if read_lanes is None else read_lanes
        self._geom = geom
        self._transparent = transparent
        self._write_register = write_register
        self._banks = banks
        ports = {"w": In(BufferWrite(geom)), "r": In(BufferRead(geom, read_lanes))}
        if pick:
            ports.update({"pick": In(range(read_lanes)), "picked": Out(geom.elem_bits),
                          "force": In(1), "forced": In(geom.elem_bits)})
        self._pick = pick
        super().__init__(ports)

    @staticmethod
    def banks_of(geom: BufferGeometry, read_lanes: int | None = None) -> int:
        """The banks a buffer of ``geom`` read ``read_lanes`` at a time is built of, each a
        memory of ``geom.depth // banks`` rows of ``geom.store_bits``.

        Raises
        ------
        ValueError
            ``read_lanes`` is not a power of two, or the depth not a multiple of the banks.
        """
        read_lanes = geom.lanes if read_lanes is None else read_lanes
        if read_lanes < 1 or read_lanes & (read_lanes - 1):
            raise ValueError(f"read_lanes must be a power of two, not {read_lanes}")
        banks = max(geom.lanes, read_lanes)
        if geom.depth % banks:
            raise ValueError(
                f"{geom.name} buffer depth {geom.depth} is not a multiple of its "
                f"{banks} lanes"
            )
        return banks

    @property
    def geom(self) -> BufferGeometry:
        return self._geom

    def elaborate(self, platform: object) -> Module:
        m = Module()
        g = self._geom
        k = self._banks
        lane_bits = (k - 1).bit_length()
        rows = g.depth // k
        banks = []
        for b in range(k):
            # A non-transparent bank's reader never uses what a read returns at the edge of a
            # write to the same row; Yosys is told so (``no_rw_check``) and adds no logic
            # emulating read-first behaviour (a registered address compare and a multiplexer
            # after the block RAM, on the read path).
            attrs = {} if self._transparent else {"no_rw_check": 1}
            mem = Memory(shape=g.store_bits, depth=rows, init=[], attrs=attrs)
            m.submodules[f"bank{b}"] = mem
            wp = mem.write_port()
            rp = mem.read_port(transparent_for=(wp,) if self._transparent else ())
            banks.append((wp, rp))

        # Write lanes beyond the port's (when reads return more elements than a beat writes)
        # never write.
        w_lanes = [self.w.data[i * g.elem_bits:(i + 1) * g.elem_bits] for i in range(g.lanes)]
        w_lanes += [Const(0, g.elem_bits)] * (k - g.lanes)
        w_en = [self.w.en[i] for i in range(g.lanes)] + [Const(0)] * (k - g.lanes)
        write = m.d.sync if self._write_register else m.d.comb
        if k == 1:
            wp, rp = banks[0]
            write += [
                wp.addr.eq(self.w.addr),
                wp.en.eq(self.w.en[0]),
                wp.data.eq(self.w.data[:g.store_bits]),
            ]
            m.d.comb += [
                rp.addr.eq(self.r.addr),
                rp.en.eq(1),
                self.r.data.eq(rp.data),
            ]
            if self._pick:                              # one lane: ``pick`` is 0
                m.d.comb += self.picked.eq(Mux(self.force, self.forced, rp.data))
            return m

        w_lo = self.w.addr[:lane_bits]
        w_hi = self.w.addr[lane_bits:]
        r_lo = self.r.addr[:lane_bits]
        r_hi = self.r.addr[lane_bits:]
        r_lo_q = Signal(lane_bits)
        m.d.sync += r_lo_q.eq(r_lo)
        data_arr = Array(w_lanes)
        en_arr = Array(w_en)
        for b, (wp, rp) in enumerate(banks):
            lane = Signal(lane_bits, name=f"w_lane{b}")
            m.d.comb += lane.eq(b - w_lo)
            write += [
                wp.addr.eq(w_hi + (b < w_lo)),
                wp.en.eq(en_arr[lane]),
                wp.data.eq(data_arr[lane][:g.store_bits]),
            ]
            m.d.comb += [
                rp.addr.eq(r_hi + (b < r_lo)),
                rp.en.eq(1),
            ]
        bank_data = Array(rp.data for _, rp in banks)
        outs = []
        for i in range(self.r.signature.lanes):
            sel = Signal(lane_bits, name=f"r_sel{i}")
            m.d.comb += sel.eq(r_lo_q + i)
            lane_out = Signal(g.elem_bits, name=f"r_lane{i}")
            m.d.comb += lane_out.eq(bank_data[sel])
            outs.append(lane_out)
        m.d.comb += self.r.data.eq(Cat(*outs))
        if self._pick:
            pick_q = Signal.like(self.pick, name="pick_q")
            bank = Signal(lane_bits, name="pick_bank", attrs={"keep": 1})
            m.d.sync += pick_q.eq(self.pick)
            m.d.comb += bank.eq(r_lo_q + pick_q)
            if k == 2 and family_of(platform) == "ecp5":
                # One LUT after the RAMs (Yosys's mapper otherwise puts the bank select and
                # ``force``'s multiplexer in two). The bits beyond those kept are ``forced``'s.
                # Elsewhere late_mux is the multiplexers below (a LUT6 holds a bit's inputs).
                (_, rp0), (_, rp1) = banks
                kept = late_mux(m, "pick", ~self.force & bank, rp1.data,
                                ~self.force & ~bank, rp0.data, self.forced[:g.store_bits],
                                "ecp5")
                m.d.comb += self.picked.eq(
                    Cat(kept, Mux(self.force, self.forced[g.store_bits:], 0)))
            else:
                m.d.comb += self.picked.eq(Mux(self.force, self.forced, bank_data[bank]))
        return m
