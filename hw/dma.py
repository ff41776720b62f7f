"""DMA engines: 2-D strided copies between DRAM and the on-chip buffers, in whole bursts.

Cycle behaviour (``accel.machine.costs.mem_cycles``): the decode cycle, then for each row of
``y_size``, each burst of at most ``dram.max_burst`` bytes of the row's ``x_size`` elements is
requested in the cycle after the previous one ended and holds the channel ``latency + beats``
cycles;
a LOAD then writes its zero padding, one element per cycle. A zero-size LOAD or STORE takes
the decode cycle only.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from accel.machine.isa import MemType, Opcode
from hw.dram import dram_port
from hw.lutmul import mul_low_lut
from hw.params import BufferGeometry, RtlParams
from hw.sram import BufferRead, BufferWrite

__all__ = ["LoadEngine", "StoreEngine", "mem_predecode"]


def _moves_nothing(mem: object) -> object:
    """A LOAD or STORE (a view of the memory-instruction layout) of zero size."""
    return (mem.y_size == 0) | (mem.x_size == 0)


def mem_predecode(insn: object) -> object:
    """The bit a LOAD or STORE's command queue stores beside it (formed by
    :class:`~hw.fetch.Fetch`): it moves nothing (a zero size), so it ends in its decode
    cycle."""
    return _moves_nothing(insn.mem)


class _Engine(wiring.Component):
    """Shared decode of the row/burst walk of LOAD and STORE."""

    def __init__(self, params: RtlParams, members: dict[str, object]) -> None:
        self._p = params
        members.update({
            "start": In(1),
            "insn": In(params.formats[Opcode.LOAD]),
            "last": Out(1),
            "dram": Out(dram_port(params)),
        })
        super().__init__(members)

    def _walk(self, m: Module, shifts: list[int], pick: object, write: bool
              ) -> dict[str, Signal]:
        """Row/burst state and the request logic; returns the signals the data path uses.

        ``shifts`` are the element size shifts of the engine's memory types and ``pick`` the
        index into them of the decoded instruction's type (``Const(0)`` for a single type)."""
        p = self._p
        cfg = p.cfg
        bpc = cfg.dram.bytes_per_cycle
        max_burst = cfg.dram.max_burst
        beat_shift = (bpc - 1).bit_length()
        size_bits = cfg.isa.size_bits + max(g.elem_shift for g in p.buffers.values())
        insn = self.insn
        s = {
            "row_dram": Signal(p.dram_addr_bits),
            "stride": Signal(size_bits),
            "row_bytes": Signal(size_bits),
            "rows_left": Signal(cfg.isa.size_bits),
            "beats_left": Signal(p.burst_bytes_bits),
            "req_bytes": Signal(p.burst_bytes_bits),
            "granted": Signal(),
            "beat": Signal(),
            "burst_end": Signal(),
            "row_end": Signal(),
            "all_end": Signal(),
            "zero": Signal(),
            "asking": Signal(),     # the REQ state as a flip-flop of its own: the request
        }
        # The next request is kept in registers: its address, its size (``min(rem,
        # max_burst)`` of the ``rem`` bytes left in the row) and whether it ends the row, each
        # set when the previous burst or row ends (or at decode), so the request and what the
        # grant loads come from flip-flops, not from a subtract and a compare.
        req_addr = Signal(p.dram_addr_bits)
        rem = Signal(size_bits)
        ends_row = Signal()
        first_req = Signal(p.burst_bytes_bits)     # a row's first request, and its flag
        first_ends_row = Signal()
        one_beat = Signal()
        last_row = Signal()
        m.d.comb += [
            self.dram.req.payload.addr.eq(req_addr),
            self.dram.req.payload.bytes.eq(s["req_bytes"]),
            self.dram.req.payload.write.eq(int(write)),
            self.dram.req.valid.eq(s["asking"]),
            s["granted"].eq(self.dram.req.valid & self.dram.req.ready),
            s["beat"].eq(self.dram.rsp_valid),
            s["burst_end"].eq(s["beat"] & one_beat),
            s["row_end"].eq(s["burst_end"] & ends_row),
            s["all_end"].eq(s["row_end"] & last_row),
            s["zero"].eq(_moves_nothing(insn)),
        ]
        # At decode: ``x_size << shift > max_burst`` is ``x_size > max_burst >> shift``, one
        # compare per memory type beside the type's decode.
        shift = Signal(4)
        long_row = Signal()
        for i, sh in enumerate(shifts):
            with m.If(pick == i):
                m.d.comb += [shift.eq(sh), long_row.eq(insn.x_size > (max_burst >> sh))]
        row_bytes_now = Signal(size_bits)
        base_now = Signal(p.dram_addr_bits)
        req_now = Signal(p.burst_bytes_bits)
        m.d.comb += [
            row_bytes_now.eq(insn.x_size << shift),
            base_now.eq(insn.dram_base << shift),
            req_now.eq(Mux(long_row, max_burst, row_bytes_now)),
        ]
        # The end-of-burst/row/block tests are registered flags, set when their counters are
        # (``beats_left == 1``, ``rem <= max_burst``, ``rows_left == 1``), so the beat that ends
        # an instruction reaches ``last`` through a few gates only.
        with m.If(self.start):
            m.d.sync += [
                s["row_dram"].eq(base_now),
                req_addr.eq(base_now),
                s["stride"].eq(insn.x_stride << shift),
                s["row_bytes"].eq(row_bytes_now),
                rem.eq(row_bytes_now),
                s["req_bytes"].eq(req_now),
                first_req.eq(req_now),
                ends_row.eq(~long_row),
                first_ends_row.eq(~long_row),
                s["rows_left"].eq(insn.y_size),
                last_row.eq(insn.y_size == 1),
            ]
        with m.If(s["granted"]):
            m.d.sync += [
                s["beats_left"].eq((s["req_bytes"] + bpc - 1) >> beat_shift),
                one_beat.eq(s["req_bytes"] <= bpc),
            ]
        with m.Elif(s["beat"]):
            m.d.sync += [s["beats_left"].eq(s["beats_left"] - 1),
                         one_beat.eq(s["beats_left"] == 2)]
        # ``rem`` after the burst in flight, and whether more than a burst is left then, from
        # ``rem`` alone (a burst that does not end its row is a whole one, ``max_burst``
        # bytes), registered in every cycle: the burst's end loads them with no subtract and
        # compare in front of it. ``rem`` changes only in a cycle a burst or row ends (or at
        # decode), and the next burst ends two cycles later at the soonest (its request is
        # granted in the next cycle at the soonest and its first beat comes ``latency >= 1``
        # after that), when these registers hold the new ``rem``'s values.
        rem_after = Signal(size_bits)
        more_after = Signal()
        m.d.sync += [rem_after.eq(rem - max_burst), more_after.eq(rem > 2 * max_burst)]
        with m.If(s["row_end"]):
            m.d.sync += [
                s["row_dram"].eq(s["row_dram"] + s["stride"]),
                req_addr.eq(s["row_dram"] + s["stride"]),
                rem.eq(s["row_bytes"]),
                s["req_bytes"].eq(first_req),
                ends_row.eq(first_ends_row),
                s["rows_left"].eq(s["rows_left"] - 1),
                last_row.eq(s["rows_left"] == 2),
            ]
        with m.Elif(s["burst_end"]):
            m.d.sync += [
                req_addr.eq(req_addr + max_burst),
                rem.eq(rem_after),
                s["req_bytes"].eq(Mux(more_after, max_burst, rem_after)),
                ends_row.eq(~more_after),
            ]
        return s


def _lanes_now(m: Module, g: BufferGeometry, elems_left: Signal, tag: str) -> Signal:
    """Elements a beat carries: ``min(lanes, elems_left)``."""
    n = Signal(range(g.lanes + 1), name=f"lanes_now_{tag}")
    m.d.comb += n.eq(Mux(elems_left > g.lanes, g.lanes, elems_left))
    return n


class LoadEngine(_Engine):
    """DRAM -> SRAM with zero padding, for the memory types in ``targets``.

    Parameters
    ----------
    params
        RTL parameters of the config.
    targets
        Memory types this engine loads (INP and WGT for the load module, UOP and ACC for
        compute); each gets a write port named ``wr_<buffer>``.

    Ports
    -----
    start : In
        Decode cycle of a LOAD (``insn`` valid).
    insn : In
        The LOAD instruction (memory-instruction layout).
    last : Out
        The last cycle of an instruction that moves something (never its decode cycle).
    dram : Out(DramPort)
        Read requests.
    wr_<buffer> : Out(BufferWrite)
        Element writes, data and padding.
    writing_<buffer> : Out
        A LOAD of this buffer is past its request, moving data or padding: every write of
        ``wr_<buffer>`` falls in these cycles. From flip-flops through one gate, so that a
        writer sharing a port with this engine can pick its data early.
    """

    def __init__(self, params: RtlParams, targets: tuple[MemType, ...]) -> None:
        if not targets:
            raise ValueError("targets must name at least one memory type")
        self._targets = tuple(targets)
        members: dict[str, object] = {}
        for t in targets:
            members[f"wr_{t.buffer}"] = Out(BufferWrite(params.buffer_of(t)))
            members[f"writing_{t.buffer}"] = Out(1)
        super().__init__(params, members)

    @property
    def targets(self) -> tuple[MemType, ...]:
        return self._targets

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        cfg = p.cfg
        insn = self.insn
        geoms = [p.buffer_of(t) for t in self._targets]
        addr_bits = max(g.addr_bits for g in geoms)
        size_bits = cfg.isa.size_bits
        pad_bits = cfg.isa.pad_bits

        # Target of the instruction being decoded (start) and of the one running (tsel).
        t_now = Signal(range(len(geoms)))
        tsel = Signal(range(len(geoms)))
        for i, t in enumerate(self._targets):
            with m.If(insn.mem_type == int(t)):
                m.d.comb += t_now.eq(i)
        with m.If(self.start):
            m.d.sync += tsel.eq(t_now)
        shift_run = Signal(4)
        for i, g in enumerate(geoms):
            with m.If(tsel == i):
                m.d.comb += shift_run.eq(g.elem_shift)
        s = self._walk(m, [g.elem_shift for g in geoms], t_now, write=False)

        # Geometry of the padded block, without multipliers. The decode cycle registers a copy
        # of the instruction with the row length ``cols`` and ``sram_base + x_pad_0``; the
        # setup cycle after it forms the first data element's address
        # ``sram_base + x_pad_0 + y_pad_0 * cols`` and the head and tail lengths (each a
        # pad_bits-wide Booth shift-and-add with one more addend: two adder levels) before the
        # first data beat, which comes later still (latency >= 1). The padding walk's registers
        # are set in the cycle after that (``setup2``) from those registered lengths: the padding
        # is written after the data, so no earlier than the third cycle after decode.
        # The data rows of a block without side padding end where the tail begins, so that jump
        # is taken from ``row_sram`` once the data is in; the walk ends on its last element.
        fields = Signal(self.insn.shape())
        setup = Signal()
        setup2 = Signal()
        cols_now = Signal(size_bits + 2)
        cols = Signal(size_bits + 2)
        base_x = Signal(addr_bits)
        no_pad = Signal()
        m.d.comb += cols_now.eq(insn.x_pad_0 + insn.x_size + insn.x_pad_1)
        with m.If(self.start):
            m.d.sync += [
                fields.eq(insn),
                cols.eq(cols_now),
                base_x.eq(insn.sram_base + insn.x_pad_0),
                no_pad.eq((insn.y_pad_0 == 0) & (insn.y_pad_1 == 0) & (insn.x_pad_0 == 0)
                          & (insn.x_pad_1 == 0)),
            ]
        m.d.sync += [setup.eq(self.start & ~s["zero"]), setup2.eq(setup)]
        first = mul_low_lut(m, [(cols, fields.y_pad_0)], addr_bits, "first_elem",
                            extra=(base_x,), booth=True)
        head = mul_low_lut(m, [(cols, fields.y_pad_0)], addr_bits, "head",
                           extra=(fields.x_pad_0,), booth=True)   # y_pad_0 * cols + x_pad_0
        tail = mul_low_lut(m, [(cols, fields.y_pad_1)], addr_bits + 1, "tail",
                           extra=(fields.x_pad_1,), booth=True)   # x_pad_1 + y_pad_1 * cols

        row_sram = Signal(addr_bits)
        elem_ptr = Signal(addr_bits)
        # Pad walk: the padding is a head segment, side segments between data rows and a tail;
        # pad_addr walks it one element per cycle, seg_left counts down the current segment.
        pad_addr = Signal(addr_bits)
        seg_left = Signal(addr_bits + 1)
        pad_rows = Signal(size_bits)
        head_q = Signal(addr_bits)
        mid_q = Signal(pad_bits + 1)      # x_pad_0 + x_pad_1, between data rows
        tail_q = Signal(addr_bits + 1)
        x_size_q = Signal(size_bits)
        x_size1_q = Signal(size_bits + 1)  # x_size + 1: from the walk's position, one adder
        no_pad_q = Signal()
        head_zero_q = Signal()            # y_pad_0 == x_pad_0 == 0: the padding starts after data
        jump_data = Signal()              # no head and no side padding: start at the tail

        # Next padding segment after jumping over a data row (to ``jumped``) with ``rows_in`` data
        # rows left: over one row to the side padding between rows (or, after the last, to the
        # tail); without side padding, over all rows at once to the tail, which starts where
        # the last data row ended (``row_sram``, only used once the data is in). In the
        # ``setup2`` cycle this starts at the block, later at the walk's position (the element
        # after ``pad_addr``, hence ``x_size + 1`` from it).
        jumped = Signal(addr_bits)        # the element after the jump over a data row
        rows_in = Signal(size_bits)
        with m.If(setup2):
            m.d.comb += [jumped.eq(fields.sram_base + x_size_q), rows_in.eq(fields.y_size)]
        with m.Else():
            m.d.comb += [jumped.eq(pad_addr + x_size1_q), rows_in.eq(pad_rows)]

        def seg_after(rows: object, of: object = lambda v: v) -> object:
            """Length of the segment after a jump: the tail without side padding or after
            the last row, else the side padding between rows (``of`` it: a flag of both
            lengths, picked like them)."""
            return Mux((mid_q == 0) | (rows <= 1), of(tail_q), of(mid_q))

        nxt_addr = Signal(addr_bits)
        nxt_seg = Signal(addr_bits + 1)
        nxt_rows = Signal(size_bits)
        # ``seg_left > 1`` and ``== 1`` are registered flags, set with ``seg_left``.
        seg_big = Signal()
        seg_one = Signal()
        m.d.comb += nxt_seg.eq(seg_after(rows_in))
        with m.If(mid_q == 0):
            m.d.comb += [nxt_addr.eq(row_sram), nxt_rows.eq(0)]
        with m.Else():
            m.d.comb += [nxt_addr.eq(jumped), nxt_rows.eq(rows_in - 1)]
        # The element written now is the last of the padding: the last of a segment after which
        # none follows (no data rows left, or the next segment is empty). Whether one follows
        # is a registered flag (``seg_final``), set with ``pad_rows`` from the value it takes,
        # so that ``pad_end``, which goes on through ``last`` into the module's token pushes,
        # is one gate of two flip-flops rather than compares and a carry chain.
        def final(rows: Value) -> Value:
            return (rows == 0) | seg_after(rows, lambda v: v == 0)

        seg_final = Signal()
        pad_end = Signal()
        m.d.comb += pad_end.eq(seg_one & seg_final)

        head_zero = (fields.y_pad_0 == 0) & (fields.x_pad_0 == 0)
        with m.If(setup):
            m.d.sync += [
                row_sram.eq(first),
                elem_ptr.eq(first),
                no_pad_q.eq(no_pad),
                head_q.eq(head),
                mid_q.eq(fields.x_pad_0 + fields.x_pad_1),
                tail_q.eq(tail),
                x_size_q.eq(fields.x_size),
                x_size1_q.eq(fields.x_size + 1),
                head_zero_q.eq(head_zero),
                jump_data.eq(head_zero & (fields.x_pad_1 == 0)),
            ]
        def next_segment() -> None:
            m.d.sync += [pad_addr.eq(nxt_addr), seg_left.eq(nxt_seg), pad_rows.eq(nxt_rows),
                         seg_final.eq(final(nxt_rows)),
                         seg_big.eq(seg_after(rows_in, lambda v: v > 1)),
                         seg_one.eq(seg_after(rows_in, lambda v: v == 1))]

        with m.If(setup2):
            with m.If(head_zero_q):
                next_segment()
            with m.Else():
                m.d.sync += [pad_addr.eq(fields.sram_base), seg_left.eq(head_q),
                             pad_rows.eq(fields.y_size), seg_final.eq(final(fields.y_size)),
                             seg_big.eq(head_q > 1),
                             seg_one.eq(head_q == 1)]

        # Data path: one write port per target.
        elems_left = Signal(cfg.dram.max_burst.bit_length() + 1)
        beat_in_elem = Signal(range(max(g.beats_per_elem for g in geoms) + 1))
        max_beats = max(g.beats_per_elem for g in geoms)
        shreg = Signal(p.beat_bits * max(1, max_beats - 1))
        with m.If(s["granted"]):
            m.d.sync += elems_left.eq(s["req_bytes"] >> shift_run)
        padding = Signal()
        loading = Signal()

        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(self.start & ~s["zero"]):
                    m.next = "REQ"
                    m.d.sync += s["asking"].eq(1)
            with m.State("REQ"):
                with m.If(s["granted"]):
                    m.next = "XFER"
                    m.d.sync += s["asking"].eq(0)
            with m.State("XFER"):
                m.d.comb += loading.eq(s["beat"])
                with m.If(s["all_end"]):
                    with m.If(no_pad_q):
                        m.d.comb += self.last.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "PAD"
                        with m.If(jump_data):
                            m.d.sync += pad_addr.eq(row_sram + cols)
                with m.Elif(s["burst_end"]):
                    m.next = "REQ"
                    m.d.sync += s["asking"].eq(1)
            with m.State("PAD"):
                m.d.comb += padding.eq(1)
                with m.If(seg_big):
                    m.d.sync += [pad_addr.eq(pad_addr + 1), seg_left.eq(seg_left - 1),
                                 seg_big.eq(seg_left > 2), seg_one.eq(seg_left == 2)]
                with m.Else():
                    next_segment()
                with m.If(pad_end):
                    m.d.comb += self.last.eq(1)
                    m.next = "IDLE"

        # ``step``: elements the next data beat completes, from registers only (the beat strobe
        # comes late and only enables the pointer's register).
        step = Signal(range(max(g.lanes for g in geoms) + 1))
        for i, (t, g) in enumerate(zip(self._targets, geoms, strict=True)):
            wr = getattr(self, f"wr_{t.buffer}")
            mine = Signal(name=f"mine_{t.buffer}")
            m.d.comb += [
                mine.eq(tsel == i),
                getattr(self, f"writing_{t.buffer}").eq(
                    (fsm.ongoing("XFER") | fsm.ongoing("PAD")) & mine),
            ]
            if g.lanes > 1:
                n = _lanes_now(m, g, elems_left, t.buffer)
                step_t: object = n
            elif g.beats_per_elem > 1:
                k = g.beats_per_elem
                elem_done = Signal(name=f"elem_done_{t.buffer}")
                m.d.comb += elem_done.eq(beat_in_elem == k - 1)
                step_t = elem_done
            else:
                step_t = 1
            with m.If(mine):
                m.d.comb += step.eq(step_t)
            # The address and the data are the walk's (zeros while padding) whether or not a
            # write goes: only the enables wait for the beat strobe and the target, so the
            # data reach the buffers (and compute's result register, for LOAD ACC) from
            # registers through one gate.
            if g.lanes == 1 and g.beats_per_elem > 1:
                w = p.beat_bits
                data = Signal(g.elem_bits, name=f"elem_{t.buffer}")
                m.d.comb += data.eq(Cat(shreg[w * (max_beats - g.beats_per_elem):],
                                        self.dram.rsp_data))
            else:
                data = self.dram.rsp_data
            m.d.comb += [wr.addr.eq(Mux(padding, pad_addr, elem_ptr)),
                         wr.data.eq(Mux(padding, 0, data))]
            with m.If(padding & mine):
                m.d.comb += wr.en.eq(1)
            with m.Elif(loading & mine):
                if g.lanes > 1:
                    m.d.comb += wr.en.eq((Const(1, g.lanes + 1) << n) - 1)
                    m.d.sync += elems_left.eq(elems_left - n)
                elif g.beats_per_elem > 1:
                    m.d.sync += shreg.eq(Cat(shreg[p.beat_bits:], self.dram.rsp_data))
                    with m.If(elem_done):
                        m.d.comb += wr.en.eq(1)
                        m.d.sync += beat_in_elem.eq(0)
                    with m.Else():
                        m.d.sync += beat_in_elem.eq(beat_in_elem + 1)
                else:
                    m.d.comb += wr.en.eq(1)
        with m.If(self.start):
            m.d.sync += beat_in_elem.eq(0)
        with m.If(loading):
            with m.If(s["row_end"]):
                m.d.sync += [row_sram.eq(row_sram + cols), elem_ptr.eq(row_sram + cols)]
            with m.Else():
                m.d.sync += elem_ptr.eq(elem_ptr + step)
        return m


class StoreEngine(_Engine):
    """SRAM (out buffer) -> DRAM.

    Parameters
    ----------
    params
        RTL parameters of the config.

    Ports
    -----
    start, insn, last, dram
        As for :class:`LoadEngine` (write requests).
    rd : Out(BufferRead)
        Out-buffer reads, one element ahead of the beat that sends it.
    """

    def __init__(self, params: RtlParams) -> None:
        super().__init__(params, {"rd": Out(BufferRead(params.buffers["out"]))})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        g = p.buffers["out"]
        insn = self.insn
        s = self._walk(m, [g.elem_shift], Const(0), write=True)
        elem_ptr = Signal(g.addr_bits)
        elems_left = Signal(p.cfg.dram.max_burst.bit_length() + 1)
        beat_in_elem = Signal(range(g.beats_per_elem + 1))
        nxt = Signal(g.addr_bits)
        sending = Signal()
        with m.If(s["granted"]):
            m.d.sync += elems_left.eq(s["req_bytes"] >> g.elem_shift)
        m.d.comb += nxt.eq(elem_ptr)
        if g.lanes > 1:
            n = _lanes_now(m, g, elems_left, "out")
            with m.If(sending):
                m.d.comb += nxt.eq(elem_ptr + n)
                m.d.sync += elems_left.eq(elems_left - n)
            m.d.comb += self.dram.wr_data.eq(self.rd.data)
        elif g.beats_per_elem > 1:
            k = g.beats_per_elem
            m.d.comb += self.dram.wr_data.eq(self.rd.data.word_select(beat_in_elem, p.beat_bits))
            with m.If(sending):
                with m.If(beat_in_elem == k - 1):
                    m.d.comb += nxt.eq(elem_ptr + 1)
                    m.d.sync += beat_in_elem.eq(0)
                with m.Else():
                    m.d.sync += beat_in_elem.eq(beat_in_elem + 1)
        else:
            m.d.comb += self.dram.wr_data.eq(self.rd.data)
            with m.If(sending):
                m.d.comb += nxt.eq(elem_ptr + 1)
        # Read ahead: the port shows the element of the next beat (from the cycle after decode;
        # the first beat comes later still).
        m.d.comb += self.rd.addr.eq(nxt)
        with m.If(self.start):
            m.d.sync += [elem_ptr.eq(insn.sram_base), beat_in_elem.eq(0)]
        with m.Else():
            m.d.sync += elem_ptr.eq(nxt)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start & ~s["zero"]):
                    m.next = "REQ"
                    m.d.sync += s["asking"].eq(1)
            with m.State("REQ"):
                with m.If(s["granted"]):
                    m.next = "XFER"
                    m.d.sync += s["asking"].eq(0)
            with m.State("XFER"):
                m.d.comb += sending.eq(s["beat"])
                with m.If(s["all_end"]):
                    m.d.comb += self.last.eq(1)
                    m.next = "IDLE"
                with m.Elif(s["burst_end"]):
                    m.next = "REQ"
                    m.d.sync += s["asking"].eq(1)
        return m
