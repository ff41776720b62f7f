"""DMA engines: 2-D strided copies between DRAM and the on-chip buffers, in whole bursts.

Cycle behaviour (``accel.machine.costs.mem_cycles``): the decode cycle, then for each row of
``y_size``, each burst of at most ``dram.max_burst`` bytes of the row's ``x_size`` elements is
requested in the cycle after the previous one ended and holds the channel ``latency + beats``
cycles;
a LOAD then writes its zero padding, one element per cycle. A zero-size LOAD or STORE takes
the decode cycle only.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
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


@dataclass
class _NextRequest:
    """The walk's next DRAM request and its end flags, in registers (:meth:`_Engine._walk`)."""

    req_addr: Signal
    rem: Signal                 # bytes left in the row
    ends_row: Signal            # the request ends its row
    first_req: Signal           # a row's first request
    first_ends_row: Signal      # ... ends its row
    one_beat: Signal            # beats_left == 1
    last_row: Signal            # rows_left == 1


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
        nxt = _NextRequest(req_addr, rem, ends_row, first_req, first_ends_row, one_beat,
                           last_row)
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
        self._walk_decode(m, s, nxt, shifts, pick)
        self._walk_step(m, s, nxt)
        return s

    def _walk_decode(self, m: Module, s: dict[str, Signal], nxt: _NextRequest,
                     shifts: list[int], pick: object) -> None:
        """The walk's registers loaded at decode (``start``): the first row's address, length
        and stride, its first request (``nxt``) and the rows to go."""
        p = self._p
        cfg = p.cfg
        max_burst = cfg.dram.max_burst
        size_bits = cfg.isa.size_bits + max(g.elem_shift for g in p.buffers.values())
        insn = self.insn
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
                nxt.req_addr.eq(base_now),
                s["stride"].eq(insn.x_stride << shift),
                s["row_bytes"].eq(row_bytes_now),
                nxt.rem.eq(row_bytes_now),
                s["req_bytes"].eq(req_now),
                nxt.first_req.eq(req_now),
                nxt.ends_row.eq(~long_row),
                nxt.first_ends_row.eq(~long_row),
                s["rows_left"].eq(insn.y_size),
                nxt.last_row.eq(insn.y_size == 1),
            ]

    def _walk_step(self, m: Module, s: dict[str, Signal], nxt: _NextRequest) -> None:
        """The walk's registers after decode: the beats left of the granted burst, and the next
        request (``nxt``) once a burst or a row ends."""
        p = self._p
        cfg = p.cfg
        bpc = cfg.dram.bytes_per_cycle
        max_burst = cfg.dram.max_burst
        beat_shift = (bpc - 1).bit_length()
        size_bits = cfg.isa.size_bits + max(g.elem_shift for g in p.buffers.values())
        req_addr, rem = nxt.req_addr, nxt.rem
        with m.If(s["granted"]):
            m.d.sync += [
                s["beats_left"].eq((s["req_bytes"] + bpc - 1) >> beat_shift),
                nxt.one_beat.eq(s["req_bytes"] <= bpc),
            ]
        with m.Elif(s["beat"]):
            m.d.sync += [s["beats_left"].eq(s["beats_left"] - 1),
                         nxt.one_beat.eq(s["beats_left"] == 2)]
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
                s["req_bytes"].eq(nxt.first_req),
                nxt.ends_row.eq(nxt.first_ends_row),
                s["rows_left"].eq(s["rows_left"] - 1),
                nxt.last_row.eq(s["rows_left"] == 2),
            ]
        with m.Elif(s["burst_end"]):
            m.d.sync += [
                req_addr.eq(req_addr + max_burst),
                rem.eq(rem_after),
                s["req_bytes"].eq(Mux(more_after, max_burst, rem_after)),
                nxt.ends_row.eq(~more_after),
            ]


def _lanes_now(m: Module, g: BufferGeometry, elems_left: Signal, tag: str) -> Signal:
    """Elements a beat carries: ``min(lanes, elems_left)``."""
    n = Signal(range(g.lanes + 1), name=f"lanes_now_{tag}")
    m.d.comb += n.eq(Mux(elems_left > g.lanes, g.lanes, elems_left))
    return n


@dataclass
class _Block:
    """:class:`LoadEngine`'s padded block, registered in the decode and setup cycles, and the
    data pointers set from it."""

    fields: data.View           # the instruction, registered at decode
    setup2: Signal              # the second cycle after decode: the padding walk starts
    cols: Signal                # the row length, padding included
    row_sram: Signal            # the first element of the data row being loaded
    elem_ptr: Signal            # the next data element
    head_q: Signal              # the padding's head segment, y_pad_0 * cols + x_pad_0
    mid_q: Signal               # its side segments
    tail_q: Signal              # its tail, x_pad_1 + y_pad_1 * cols
    x_size_q: Signal
    x_size1_q: Signal
    no_pad_q: Signal
    head_zero_q: Signal
    jump_data: Signal


@dataclass
class _PadWalk:
    """:class:`LoadEngine`'s padding walk: its registers, and the segment after a jump over a
    data row (``nxt_*``, from ``rows_in`` data rows left)."""

    pad_addr: Signal
    seg_left: Signal
    pad_rows: Signal
    seg_big: Signal             # seg_left > 1
    seg_one: Signal             # seg_left == 1
    seg_final: Signal           # no segment follows this one
    pad_end: Signal             # the element written now is the padding's last
    mid_q: Signal               # from :class:`_Block`
    tail_q: Signal
    rows_in: Signal
    nxt_addr: Signal
    nxt_seg: Signal
    nxt_rows: Signal

    def seg_after(self, rows: object, of: object = lambda v: v) -> object:
        """Length of the segment after a jump: the tail without side padding or after
        the last row, else the side padding between rows (``of`` it: a flag of both
        lengths, picked like them)."""
        return Mux((self.mid_q == 0) | (rows <= 1), of(self.tail_q), of(self.mid_q))

    def final(self, rows: Value) -> Value:
        """``seg_final`` for a segment after which ``rows`` data rows are left."""
        return (rows == 0) | self.seg_after(rows, lambda v: v == 0)

    def next_segment(self, m: Module) -> None:
        """Moves the walk to the next segment (``nxt_*``)."""
        m.d.sync += [self.pad_addr.eq(self.nxt_addr), self.seg_left.eq(self.nxt_seg),
                     self.pad_rows.eq(self.nxt_rows),
                     self.seg_final.eq(self.final(self.nxt_rows)),
                     self.seg_big.eq(self.seg_after(self.rows_in, lambda v: v > 1)),
                     self.seg_one.eq(self.seg_after(self.rows_in, lambda v: v == 1))]


@dataclass
class _Beats:
    """Where :class:`LoadEngine`'s data beats are, in the burst and in an element."""

    elems_left: Signal          # elements left in the burst
    beat_in_elem: Signal        # beats of the element so far (an element wider than a beat)
    shreg: Signal               # those beats' data


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

    def _geoms(self) -> list[BufferGeometry]:
        """The buffers of the engine's targets, in ``targets``' order."""
        return [self._p.buffer_of(t) for t in self._targets]

    def elaborate(self, platform: object) -> Module:
        m = Module()
        # The parts add their statements in this order, which the generated Verilog's names
        # and numbering follow: keep it.
        t_now, tsel, shift_run = self._target(m)
        s = self._walk(m, [g.elem_shift for g in self._geoms()], t_now, write=False)
        blk = self._block(m, s)
        walk = self._pad_walk(m, blk)
        beats = self._beat_regs(m, s, shift_run)
        fsm, padding, loading = self._fsm(m, s, blk, walk)
        step = self._write_ports(m, fsm, tsel, blk, walk, beats, padding, loading)
        self._step_pointers(m, s, blk, beats, step, loading)
        return m

    def _target(self, m: Module) -> tuple[Signal, Signal, Signal]:
        """The decoded instruction's target (``t_now``, an index into ``targets``), the running
        one's (``tsel``, registered at decode) and its element size shift (``shift_run``)."""
        insn = self.insn
        geoms = self._geoms()
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
        return t_now, tsel, shift_run

    def _block(self, m: Module, s: dict[str, Signal]) -> _Block:
        """The padded block's geometry: the instruction registered at decode, then in the setup
        cycle the first data element (``row_sram``, ``elem_ptr``) and the padding's lengths."""
        p = self._p
        cfg = p.cfg
        insn = self.insn
        addr_bits = max(g.addr_bits for g in self._geoms())
        size_bits = cfg.isa.size_bits
        pad_bits = cfg.isa.pad_bits
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
        head_q = Signal(addr_bits)
        mid_q = Signal(pad_bits + 1)      # x_pad_0 + x_pad_1, between data rows
        tail_q = Signal(addr_bits + 1)
        x_size_q = Signal(size_bits)
        x_size1_q = Signal(size_bits + 1)  # x_size + 1: from the walk's position, one adder
        no_pad_q = Signal()
        head_zero_q = Signal()            # y_pad_0 == x_pad_0 == 0: the padding starts after data
        jump_data = Signal()              # no head and no side padding: start at the tail
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
        return _Block(fields, setup2, cols, row_sram, elem_ptr, head_q, mid_q, tail_q, x_size_q,
                      x_size1_q, no_pad_q, head_zero_q, jump_data)

    def _pad_walk(self, m: Module, blk: _Block) -> _PadWalk:
        """The padding walk's registers, its next segment after a jump over a data row
        (``nxt_*``) and ``pad_end``; the walk starts from ``blk`` in the ``setup2`` cycle."""
        cfg = self._p.cfg
        addr_bits = max(g.addr_bits for g in self._geoms())
        size_bits = cfg.isa.size_bits
        fields, setup2 = blk.fields, blk.setup2
        # Pad walk: the padding is a head segment, side segments between data rows and a tail;
        # pad_addr walks it one element per cycle, seg_left counts down the current segment.
        pad_addr = Signal(addr_bits)
        seg_left = Signal(addr_bits + 1)
        pad_rows = Signal(size_bits)

        # Next padding segment after jumping over a data row (to ``jumped``) with ``rows_in`` data
        # rows left: over one row to the side padding between rows (or, after the last, to the
        # tail); without side padding, over all rows at once to the tail, which starts where
        # the last data row ended (``row_sram``, only used once the data is in). In the
        # ``setup2`` cycle this starts at the block, later at the walk's position (the element
        # after ``pad_addr``, hence ``x_size + 1`` from it).
        jumped = Signal(addr_bits)        # the element after the jump over a data row
        rows_in = Signal(size_bits)
        with m.If(setup2):
            m.d.comb += [jumped.eq(fields.sram_base + blk.x_size_q), rows_in.eq(fields.y_size)]
        with m.Else():
            m.d.comb += [jumped.eq(pad_addr + blk.x_size1_q), rows_in.eq(pad_rows)]

        nxt_addr = Signal(addr_bits)
        nxt_seg = Signal(addr_bits + 1)
        nxt_rows = Signal(size_bits)
        # ``seg_left > 1`` and ``== 1`` are registered flags, set with ``seg_left``.
        seg_big = Signal()
        seg_one = Signal()
        seg_final = Signal()
        pad_end = Signal()
        walk = _PadWalk(pad_addr, seg_left, pad_rows, seg_big, seg_one, seg_final, pad_end,
                        blk.mid_q, blk.tail_q, rows_in, nxt_addr, nxt_seg, nxt_rows)
        m.d.comb += nxt_seg.eq(walk.seg_after(rows_in))
        with m.If(blk.mid_q == 0):
            m.d.comb += [nxt_addr.eq(blk.row_sram), nxt_rows.eq(0)]
        with m.Else():
            m.d.comb += [nxt_addr.eq(jumped), nxt_rows.eq(rows_in - 1)]
        # The element written now is the last of the padding: the last of a segment after which
        # none follows (no data rows left, or the next segment is empty). Whether one follows
        # is a registered flag (``seg_final``), set with ``pad_rows`` from the value it takes,
        # so that ``pad_end``, which goes on through ``last`` into the module's token pushes,
        # is one gate of two flip-flops rather than compares and a carry chain.
        m.d.comb += pad_end.eq(seg_one & seg_final)

        with m.If(setup2):
            with m.If(blk.head_zero_q):
                walk.next_segment(m)
            with m.Else():
                m.d.sync += [pad_addr.eq(fields.sram_base), seg_left.eq(blk.head_q),
                             pad_rows.eq(fields.y_size), seg_final.eq(walk.final(fields.y_size)),
                             seg_big.eq(blk.head_q > 1),
                             seg_one.eq(blk.head_q == 1)]
        return walk

    def _beat_regs(self, m: Module, s: dict[str, Signal], shift_run: Signal) -> _Beats:
        """The data beats' counters: the elements left in the burst (set at its grant), the
        beat within an element and the element's earlier beats."""
        p = self._p
        cfg = p.cfg
        geoms = self._geoms()
        elems_left = Signal(cfg.dram.max_burst.bit_length() + 1)
        beat_in_elem = Signal(range(max(g.beats_per_elem for g in geoms) + 1))
        max_beats = max(g.beats_per_elem for g in geoms)
        shreg = Signal(p.beat_bits * max(1, max_beats - 1))
        with m.If(s["granted"]):
            m.d.sync += elems_left.eq(s["req_bytes"] >> shift_run)
        return _Beats(elems_left, beat_in_elem, shreg)

    def _fsm(self, m: Module, s: dict[str, Signal], blk: _Block, walk: _PadWalk
             ) -> tuple[object, Signal, Signal]:
        """The engine's states: IDLE, REQ (a burst requested), XFER (its beats) and PAD (the
        padding walk); returns the FSM, ``padding`` and ``loading`` (a data beat)."""
        pad_addr, seg_left, seg_big, seg_one = (walk.pad_addr, walk.seg_left, walk.seg_big,
                                                 walk.seg_one)
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
                    with m.If(blk.no_pad_q):
                        m.d.comb += self.last.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "PAD"
                        with m.If(blk.jump_data):
                            m.d.sync += pad_addr.eq(blk.row_sram + blk.cols)
                with m.Elif(s["burst_end"]):
                    m.next = "REQ"
                    m.d.sync += s["asking"].eq(1)
            with m.State("PAD"):
                m.d.comb += padding.eq(1)
                with m.If(seg_big):
                    m.d.sync += [pad_addr.eq(pad_addr + 1), seg_left.eq(seg_left - 1),
                                 seg_big.eq(seg_left > 2), seg_one.eq(seg_left == 2)]
                with m.Else():
                    walk.next_segment(m)
                with m.If(walk.pad_end):
                    m.d.comb += self.last.eq(1)
                    m.next = "IDLE"
        return fsm, padding, loading

    def _write_ports(self, m: Module, fsm: object, tsel: Signal, blk: _Block, walk: _PadWalk,
                     beats: _Beats, padding: Signal, loading: Signal) -> Signal:
        """The targets' write ports (``wr_<buffer>``, ``writing_<buffer>``): data beats at
        ``elem_ptr``, zeros at ``pad_addr``; returns ``step``, the elements a data beat ends."""
        p = self._p
        geoms = self._geoms()
        elems_left, beat_in_elem, shreg = beats.elems_left, beats.beat_in_elem, beats.shreg
        max_beats = max(g.beats_per_elem for g in geoms)
        # Data path: one write port per target.
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
            m.d.comb += [wr.addr.eq(Mux(padding, walk.pad_addr, blk.elem_ptr)),
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
        return step

    def _step_pointers(self, m: Module, s: dict[str, Signal], blk: _Block, beats: _Beats,
                       step: Signal, loading: Signal) -> None:
        """The data pointers' steps: ``elem_ptr`` by ``step`` with each data beat, both it and
        ``row_sram`` to the next row at a row's end; the beat count restarts at decode."""
        row_sram, elem_ptr, cols = blk.row_sram, blk.elem_ptr, blk.cols
        with m.If(self.start):
            m.d.sync += beats.beat_in_elem.eq(0)
        with m.If(loading):
            with m.If(s["row_end"]):
                m.d.sync += [row_sram.eq(row_sram + cols), elem_ptr.eq(row_sram + cols)]
            with m.Else():
                m.d.sync += elem_ptr.eq(elem_ptr + step)


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
