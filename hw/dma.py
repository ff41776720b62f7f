"""DMA engines: 2-D strided copies between DRAM and the on-chip buffers, in whole bursts.

Cycle behaviour (``sim.costs.mem_cycles``): the decode cycle, then for each row of ``y_size``,
each burst of at most ``dram.max_burst`` bytes of the row's ``x_size`` elements is requested
in the cycle after the previous one ended and holds the channel ``latency + beats`` cycles;
a LOAD then writes its zero padding, one element per cycle. A zero-size LOAD or STORE takes
the decode cycle only.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from accel.isa import MemType, Opcode
from hw.dram import dram_port
from hw.lutmul import mul_low_lut
from hw.params import BufferGeometry, RtlParams
from hw.sram import BufferRead, BufferWrite

__all__ = ["LoadEngine", "StoreEngine"]


class _Engine(wiring.Component):
    """Shared decode of the row/burst walk of LOAD and STORE."""

    def __init__(self, params: RtlParams, members: dict[str, object]) -> None:
        self._p = params
        members.update({
            "start": In(1),
            "insn": In(params.formats[Opcode.LOAD]),
            "single": Out(1),
            "last": Out(1),
            "dram": Out(dram_port(params)),
        })
        super().__init__(members)

    def _walk(self, m: Module, shift: object, write: bool) -> dict[str, Signal]:
        """Row/burst state and the request logic; returns the signals the data path uses."""
        p = self._p
        cfg = p.cfg
        bpc = cfg.dram.bytes_per_cycle
        beat_shift = (bpc - 1).bit_length()
        size_bits = cfg.isa.size_bits + max(g.elem_shift for g in p.buffers.values())
        insn = self.insn
        s = {
            "row_dram": Signal(p.dram_addr_bits),
            "stride": Signal(size_bits),
            "row_bytes": Signal(size_bits),
            "row_off": Signal(size_bits),
            "rows_left": Signal(cfg.isa.size_bits),
            "burst": Signal(p.burst_bytes_bits),
            "beats_left": Signal(p.burst_bytes_bits),
            "req_bytes": Signal(p.burst_bytes_bits),
            "granted": Signal(),
            "beat": Signal(),
            "burst_end": Signal(),
            "row_end": Signal(),
            "all_end": Signal(),
            "zero": Signal(),
        }
        remaining = Signal(size_bits)
        one_beat = Signal()
        burst_ends_row = Signal()
        last_row = Signal()
        m.d.comb += [
            remaining.eq(s["row_bytes"] - s["row_off"]),
            s["req_bytes"].eq(Mux(remaining > cfg.dram.max_burst, cfg.dram.max_burst,
                                  remaining)),
            self.dram.req.payload.addr.eq(s["row_dram"] + s["row_off"]),
            self.dram.req.payload.bytes.eq(s["req_bytes"]),
            self.dram.req.payload.write.eq(int(write)),
            s["granted"].eq(self.dram.req.valid & self.dram.req.ready),
            s["beat"].eq(self.dram.rsp_valid),
            s["burst_end"].eq(s["beat"] & one_beat),
            s["row_end"].eq(s["burst_end"] & burst_ends_row),
            s["all_end"].eq(s["row_end"] & last_row),
            s["zero"].eq((insn.y_size == 0) | (insn.x_size == 0)),
            self.single.eq(s["zero"]),
        ]
        # The end-of-burst/row/block tests are registered flags, set when their counters are
        # (``beats_left == 1``, ``row_off + burst == row_bytes``, ``rows_left == 1``), so the
        # beat that ends an instruction reaches ``last`` through a few gates only.
        with m.If(self.start):
            m.d.sync += [
                s["row_dram"].eq(insn.dram_base << shift),
                s["stride"].eq(insn.x_stride << shift),
                s["row_bytes"].eq(insn.x_size << shift),
                s["row_off"].eq(0),
                s["rows_left"].eq(insn.y_size),
                last_row.eq(insn.y_size == 1),
            ]
        with m.If(s["granted"]):
            m.d.sync += [
                s["burst"].eq(s["req_bytes"]),
                s["beats_left"].eq((s["req_bytes"] + bpc - 1) >> beat_shift),
                one_beat.eq(s["req_bytes"] <= bpc),
                burst_ends_row.eq(remaining <= cfg.dram.max_burst),
            ]
        with m.Elif(s["beat"]):
            m.d.sync += [s["beats_left"].eq(s["beats_left"] - 1),
                         one_beat.eq(s["beats_left"] == 2)]
        with m.If(s["burst_end"]):
            m.d.sync += s["row_off"].eq(s["row_off"] + s["burst"])
        with m.If(s["row_end"]):
            m.d.sync += [
                s["row_off"].eq(0),
                s["row_dram"].eq(s["row_dram"] + s["stride"]),
                s["rows_left"].eq(s["rows_left"] - 1),
                last_row.eq(s["rows_left"] == 2),
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
    single : Out
        ``insn`` moves nothing (a zero size): it ends in its decode cycle.
    last : Out
        The last cycle of an instruction that moves something (never its decode cycle).
    dram : Out(DramPort)
        Read requests.
    wr_<buffer> : Out(BufferWrite)
        Element writes, data and padding.
    """

    def __init__(self, params: RtlParams, targets: tuple[MemType, ...]) -> None:
        if not targets:
            raise ValueError("targets must name at least one memory type")
        self._targets = tuple(targets)
        members = {f"wr_{t.buffer}": Out(BufferWrite(params.buffer_of(t))) for t in targets}
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
        shift_now = Signal(4)
        shift_run = Signal(4)
        for i, g in enumerate(geoms):
            with m.If(t_now == i):
                m.d.comb += shift_now.eq(g.elem_shift)
            with m.If(tsel == i):
                m.d.comb += shift_run.eq(g.elem_shift)
        s = self._walk(m, shift_now, write=False)

        # Geometry of the padded block, without multipliers. The decode cycle registers a copy
        # of the instruction with the row length ``cols`` and ``sram_base + x_pad_0``; the
        # setup cycle after it forms ``y_pad_0 * cols`` and ``y_pad_1 * cols`` (pad_bits-wide
        # shift-and-add) before the first data beat, which comes later still (latency >= 1).
        # The data rows of a block without side padding end where the tail begins, so that jump
        # is taken from ``row_sram`` once the data is in; the walk ends on its last element.
        fields = Signal(self.insn.shape())
        setup = Signal()
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
        m.d.sync += setup.eq(self.start & ~s["zero"])
        head_rows = mul_low_lut(m, [(cols, fields.y_pad_0)], addr_bits, "head_rows")
        tail_rows = mul_low_lut(m, [(cols, fields.y_pad_1)], addr_bits + 1, "tail_rows")
        head = Signal(addr_bits)          # y_pad_0 * cols + x_pad_0
        head_zero = Signal()
        mid = Signal(pad_bits + 1)        # x_pad_0 + x_pad_1, between data rows
        tail = Signal(addr_bits + 1)      # x_pad_1 + y_pad_1 * cols
        m.d.comb += [
            head.eq(head_rows + fields.x_pad_0),
            head_zero.eq((fields.y_pad_0 == 0) & (fields.x_pad_0 == 0)),
            mid.eq(fields.x_pad_0 + fields.x_pad_1),
            tail.eq(tail_rows + fields.x_pad_1),
        ]

        row_sram = Signal(addr_bits)
        elem_ptr = Signal(addr_bits)
        # Pad walk: the padding is a head segment, side segments between data rows and a tail;
        # pad_addr walks it one element per cycle, seg_left counts down the current segment.
        pad_addr = Signal(addr_bits)
        seg_left = Signal(addr_bits + 1)
        pad_rows = Signal(size_bits)
        mid_q = Signal.like(mid)
        tail_q = Signal.like(tail)
        x_size_q = Signal(size_bits)
        no_pad_q = Signal()
        jump_data = Signal()              # no head and no side padding: start at the tail

        # Next padding segment after jumping over data from position ``at`` with ``rows_in`` data
        # rows left: over one row to the side padding between rows (or, after the last, to the
        # tail); without side padding, over all rows at once to the tail, which starts where
        # the last data row ended (``row_sram``, only used once the data is in). In the setup
        # cycle this reads the computed geometry, later the registered one.
        mid_sel = Signal.like(mid)
        tail_sel = Signal.like(tail)
        x_size_sel = Signal(size_bits)
        at = Signal(addr_bits)
        rows_in = Signal(size_bits)
        with m.If(setup):
            m.d.comb += [mid_sel.eq(mid), tail_sel.eq(tail), x_size_sel.eq(fields.x_size),
                         at.eq(fields.sram_base), rows_in.eq(fields.y_size)]
        with m.Else():
            m.d.comb += [mid_sel.eq(mid_q), tail_sel.eq(tail_q), x_size_sel.eq(x_size_q),
                         at.eq(pad_addr + 1), rows_in.eq(pad_rows)]
        def seg_after(mid_len: object, tail_len: object, rows: object) -> object:
            """Length of the segment after a jump: the tail without side padding or after
            the last row, else the side padding between rows."""
            return Mux((mid_len == 0) | (rows <= 1), tail_len, mid_len)

        nxt_addr = Signal(addr_bits)
        nxt_seg = Signal(addr_bits + 1)
        nxt_rows = Signal(size_bits)
        m.d.comb += nxt_seg.eq(seg_after(mid_sel, tail_sel, rows_in))
        with m.If(mid_sel == 0):
            m.d.comb += [nxt_addr.eq(row_sram), nxt_rows.eq(0)]
        with m.Else():
            m.d.comb += [nxt_addr.eq(at + x_size_sel), nxt_rows.eq(rows_in - 1)]
        # The element written now is the last of the padding. Only the PAD state asks, never in
        # the setup cycle, so this reads the registered geometry alone (no path from the setup
        # cycle's shift-and-add products to ``last``).
        pad_end = Signal()
        run_seg = Signal.like(nxt_seg)
        m.d.comb += [
            run_seg.eq(seg_after(mid_q, tail_q, pad_rows)),
            pad_end.eq((seg_left == 1) & ((pad_rows == 0) | (run_seg == 0))),
        ]

        with m.If(setup):
            m.d.sync += [
                row_sram.eq(base_x + head_rows),
                elem_ptr.eq(base_x + head_rows),
                no_pad_q.eq(no_pad),
                mid_q.eq(mid),
                tail_q.eq(tail),
                x_size_q.eq(fields.x_size),
                jump_data.eq(head_zero & (mid == 0)),
            ]
            with m.If(head_zero):
                m.d.sync += [pad_addr.eq(nxt_addr), seg_left.eq(nxt_seg), pad_rows.eq(nxt_rows)]
            with m.Else():
                m.d.sync += [pad_addr.eq(fields.sram_base), seg_left.eq(head),
                             pad_rows.eq(fields.y_size)]

        # Data path: one write port per target.
        elems_left = Signal(cfg.dram.max_burst.bit_length() + 1)
        beat_in_elem = Signal(range(max(g.beats_per_elem for g in geoms) + 1))
        max_beats = max(g.beats_per_elem for g in geoms)
        shreg = Signal(p.beat_bits * max(1, max_beats - 1))
        with m.If(s["granted"]):
            m.d.sync += elems_left.eq(s["req_bytes"] >> shift_run)
        padding = Signal()
        loading = Signal()

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start & ~s["zero"]):
                    m.next = "REQ"
            with m.State("REQ"):
                m.d.comb += self.dram.req.valid.eq(1)
                with m.If(s["granted"]):
                    m.next = "XFER"
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
            with m.State("PAD"):
                m.d.comb += padding.eq(1)
                with m.If(seg_left > 1):
                    m.d.sync += [pad_addr.eq(pad_addr + 1), seg_left.eq(seg_left - 1)]
                with m.Else():
                    m.d.sync += [pad_addr.eq(nxt_addr), seg_left.eq(nxt_seg),
                                 pad_rows.eq(nxt_rows)]
                with m.If(pad_end):
                    m.d.comb += self.last.eq(1)
                    m.next = "IDLE"

        step = Signal(range(max(g.lanes for g in geoms) + 1))
        for i, (t, g) in enumerate(zip(self._targets, geoms, strict=True)):
            wr = getattr(self, f"wr_{t.buffer}")
            mine = Signal(name=f"mine_{t.buffer}")
            m.d.comb += mine.eq(tsel == i)
            with m.If(padding & mine):
                m.d.comb += [wr.addr.eq(pad_addr), wr.en.eq(1), wr.data.eq(0)]
            with m.Elif(loading & mine):
                if g.lanes > 1:
                    n = _lanes_now(m, g, elems_left, t.buffer)
                    m.d.comb += [
                        wr.addr.eq(elem_ptr),
                        wr.en.eq((Const(1, g.lanes + 1) << n) - 1),
                        wr.data.eq(self.dram.rsp_data),
                        step.eq(n),
                    ]
                    m.d.sync += elems_left.eq(elems_left - n)
                elif g.beats_per_elem > 1:
                    k = g.beats_per_elem
                    w = p.beat_bits
                    full = Signal(g.elem_bits, name=f"elem_{t.buffer}")
                    m.d.comb += full.eq(Cat(shreg[w * (max_beats - k):], self.dram.rsp_data))
                    m.d.sync += shreg.eq(Cat(shreg[w:], self.dram.rsp_data))
                    with m.If(beat_in_elem == k - 1):
                        m.d.comb += [wr.addr.eq(elem_ptr), wr.en.eq(1), wr.data.eq(full),
                                     step.eq(1)]
                        m.d.sync += beat_in_elem.eq(0)
                    with m.Else():
                        m.d.sync += beat_in_elem.eq(beat_in_elem + 1)
                else:
                    m.d.comb += [wr.addr.eq(elem_ptr), wr.en.eq(1),
                                 wr.data.eq(self.dram.rsp_data), step.eq(1)]
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
    start, insn, single, last, dram
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
        s = self._walk(m, g.elem_shift, write=True)
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
            with m.State("REQ"):
                m.d.comb += self.dram.req.valid.eq(1)
                with m.If(s["granted"]):
                    m.next = "XFER"
            with m.State("XFER"):
                m.d.comb += sending.eq(s["beat"])
                with m.If(s["all_end"]):
                    m.d.comb += self.last.eq(1)
                    m.next = "IDLE"
                with m.Elif(s["burst_end"]):
                    m.next = "REQ"
        return m
