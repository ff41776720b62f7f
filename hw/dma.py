"""DMA engines: 2-D strided copies between DRAM and the on-chip buffers, in bursts.

Cycle behaviour (``accel.machine.costs.mem_cycles``, the channel's rules in
``accel.machine.memory``): after the decode cycle the engine presents its bursts of at most
``dram.max_burst`` bytes one after another, each row on its own or, when the rows merge
(``memory.merges``), the rows as one run whose length ``y_size * x_size`` is formed in
``memory.MERGE_SETUP_CYCLES`` cycles first; each next request from the cycle after the previous
grant, so that with ``dram.max_outstanding > 1`` a burst's latency overlaps the beats before
it. The request side (:meth:`_Engine._requests`) and the data side are apart: the data side
takes the beats as they come, in order, and counts them by rows and elements (never by
bursts: a burst ends inside a row only at a whole beat). A LOAD's DRAM part ends with its last
beat, a STORE's with its last write's response (``wr_ack``); a LOAD then writes its zero
padding, one element per cycle. A zero-size LOAD or STORE takes the decode cycle only.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from accel.machine.costs import POSTPROC_SETUP_CYCLES
from accel.machine.isa import MemType, Opcode
from accel.machine.memory import MERGE_SETUP_CYCLES
from hw.dram import dram_port
from hw.lutmul import mul_low_lut, mul_low_lut_parts
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
class _Request:
    """The request side's registers (:meth:`_Engine._requests`): the request presented and
    what the grant loads next. Each is set at decode, at a merged run's setup, or at a grant,
    so the request and what a grant loads come from flip-flops, the late grant only enabling
    them."""

    addr: Signal                # the request presented: byte address ...
    nbytes: Signal              # ... and size, ``min(rem, max_burst)``
    rem: Signal                 # bytes of the run left, the request's included
    more: Signal                # ``rem > max_burst``: the run goes on after this request
    run_dram: Signal            # the run's (a row's) first byte
    stride: Signal              # bytes from a row to the next
    row_bytes: Signal
    first: Signal               # a row's first request, ``min(row_bytes, max_burst)``
    first_more: Signal          # ... and whether the row goes on after it
    runs_left: Signal
    last_run: Signal            # ``runs_left == 1``


@dataclass
class _Rows:
    """The data side's place in the block: elements left in the row (the beat's included) and
    rows left, with the flags that end them in registers (:meth:`_Engine._data_rows`)."""

    elems: Signal
    last_elems: Signal          # the next element-completing beat ends the row
    rows: Signal
    last_row: Signal            # ``rows == 1``
    row_end: Signal             # a beat ends a row now
    all_end: Signal             # ... and the block's data


class _Engine(wiring.Component):
    """Shared decode of the row/burst walk of LOAD and STORE."""

    def __init__(self, params: RtlParams, members: dict[str, object],
                 opcode: Opcode = Opcode.LOAD) -> None:
        self._p = params
        members.update({
            "start": In(1),
            "idle": In(1),
            "insn": In(params.formats[opcode]),
            "last": Out(1),
            "dram": Out(dram_port(params)),
        })
        super().__init__(members)

    def _requests(self, m: Module, shifts: list[int], pick: object, write: bool,
                  elem_bits: int, post_now: object = None) -> dict[str, Signal]:
        """The request side: presents the instruction's bursts one after another, each next
        one from the cycle after the previous grant, until the last is granted.

        ``shifts`` are the element size shifts of the engine's memory types and ``pick`` the
        index into them of the decoded instruction's type (``Const(0)`` for a single type);
        ``elem_bits`` bounds ``y_size * x_size`` of a valid instruction (its buffer's depth).
        ``post_now`` marks a decoded STORE ACC, whose first request waits
        ``costs.POSTPROC_SETUP_CYCLES`` for the post-processing stream.
        Returns ``granted`` (a request granted now), ``zero`` (the decoded instruction moves
        nothing), ``asking`` and ``done`` (the last request has been granted)."""
        p = self._p
        cfg = p.cfg
        size_bits = cfg.isa.size_bits + max(g.elem_shift for g in p.buffers.values())
        s = {"granted": Signal(), "zero": Signal(), "asking": Signal(), "done": Signal()}
        r = _Request(Signal(p.dram_addr_bits), Signal(p.burst_bytes_bits), Signal(size_bits),
                     Signal(), Signal(p.dram_addr_bits), Signal(size_bits), Signal(size_bits),
                     Signal(p.burst_bytes_bits), Signal(), Signal(cfg.isa.size_bits), Signal())
        m.d.comb += [
            self.dram.req.payload.addr.eq(r.addr),
            self.dram.req.payload.bytes.eq(r.nbytes),
            self.dram.req.payload.write.eq(int(write)),
            self.dram.req.valid.eq(s["asking"]),
            s["granted"].eq(self.dram.req.valid & self.dram.req.ready),
            s["zero"].eq(_moves_nothing(self.insn)),
        ]
        merge = self._request_decode(m, s, r, shifts, pick, post_now)
        self._request_merge(m, s, r, merge, shifts, pick, elem_bits)
        self._request_step(m, s, r)
        return s

    def _request_decode(self, m: Module, s: dict[str, Signal], r: _Request,
                        shifts: list[int], pick: object, post_now: object) -> Signal:
        """The request side's registers, which hold the decoded instruction's values from the
        cycle after its decode (loaded while ``idle``; ``asking``, ``done`` and the countdown at
        ``start``): the first row's address, length and stride, its first request and the rows
        to go; returns ``merge`` (the rows
        merge: the request waits for the run's length). The first request waits
        ``costs.mem_setup_cycles`` after the decode (a countdown, ``setup``)."""
        p = self._p
        cfg = p.cfg
        max_burst = cfg.dram.max_burst
        beat_shift = (cfg.dram.bytes_per_cycle - 1).bit_length()
        size_bits = cfg.isa.size_bits + max(g.elem_shift for g in p.buffers.values())
        insn = self.insn
        # At decode: ``x_size << shift > max_burst`` is ``x_size > max_burst >> shift``, one
        # compare per memory type beside the type's decode; likewise whether a row is a whole
        # number of beats (``memory.merges``).
        shift = Signal(4)
        long_row = Signal()
        whole_beats = Signal()
        for i, sh in enumerate(shifts):
            with m.If(pick == i):
                low = max(0, beat_shift - sh)           # x_size's bits below a beat
                m.d.comb += [shift.eq(sh), long_row.eq(insn.x_size > (max_burst >> sh)),
                             whole_beats.eq(insn.x_size[:low] == 0 if low else 1)]
        row_bytes_now = Signal(size_bits)
        base_now = Signal(p.dram_addr_bits)
        first_now = Signal(p.burst_bytes_bits)
        merge_now = Signal()
        m.d.comb += [
            row_bytes_now.eq(insn.x_size << shift),
            base_now.eq(insn.dram_base << shift),
            first_now.eq(Mux(long_row, max_burst, row_bytes_now)),
            merge_now.eq(Const(int(cfg.dram.merge_rows)) & (insn.y_size > 1)
                         & (insn.x_stride == insn.x_size) & whole_beats),
        ]
        merge = Signal()            # the run's first setup cycle: the rows merge
        with m.If(self.idle):
            m.d.sync += [
                r.run_dram.eq(base_now),
                r.addr.eq(base_now),
                r.stride.eq(insn.x_stride << shift),
                r.row_bytes.eq(row_bytes_now),
                r.rem.eq(row_bytes_now),
                r.nbytes.eq(first_now),
                r.first.eq(first_now),
                r.more.eq(long_row),
                r.first_more.eq(long_row),
                r.runs_left.eq(insn.y_size),
                r.last_run.eq(insn.y_size == 1),
            ]
        with m.If(self.start):
            m.d.sync += s["done"].eq(s["zero"])
        m.d.sync += merge.eq(self.start & ~s["zero"] & merge_now)
        # The setup: none, a merged run's length, a STORE ACC's stream, or the longer of both.
        post = Const(0) if post_now is None else post_now
        cycles = Signal(range(max(MERGE_SETUP_CYCLES, POSTPROC_SETUP_CYCLES) + 1))
        m.d.comb += cycles.eq(Mux(post, POSTPROC_SETUP_CYCLES,
                                  Mux(merge_now, MERGE_SETUP_CYCLES, 0)))
        setup = Signal.like(cycles, name="setup_left")
        with m.If(self.start):
            m.d.sync += [setup.eq(Mux(s["zero"], 0, cycles)),
                         s["asking"].eq(~s["zero"] & (cycles == 0))]
        with m.Elif(setup != 0):
            m.d.sync += setup.eq(setup - 1)
            with m.If(setup == 1):
                m.d.sync += s["asking"].eq(1)
        return merge

    def _request_merge(self, m: Module, s: dict[str, Signal], r: _Request, merge: Signal,
                       shifts: list[int], pick: object, elem_bits: int) -> None:
        """A merged run's setup (``memory.MERGE_SETUP_CYCLES`` = 2): the run's length
        ``y_size * x_size`` from LUTs (the FPGA's multiplier blocks are the GEMM array's) as two
        partial sums in the first cycle, added and compared with a burst in the second; the
        first request is presented in the cycle after."""
        p = self._p
        cfg = p.cfg
        max_burst = cfg.dram.max_burst
        # The instruction's sizes, registered at decode (the run's setup reads no late input).
        y_q, x_q = Signal(cfg.isa.size_bits), Signal(cfg.isa.size_bits)
        shift_q = Signal(4)
        with m.If(self.idle):
            m.d.sync += [y_q.eq(self.insn.y_size), x_q.eq(self.insn.x_size)]
            for i, sh in enumerate(shifts):
                with m.If(pick == i):
                    m.d.sync += shift_q.eq(sh)
        parts = mul_low_lut_parts(m, [(x_q, y_q)], elem_bits, "run_elems", parts=2, booth=True)
        parts_q = [Signal(elem_bits, name=f"run_elems_q{k}") for k in range(2)]
        merge2 = Signal()
        m.d.sync += [q.eq(v) for q, v in zip(parts_q, parts, strict=True)]
        m.d.sync += merge2.eq(merge)
        elems = Signal(elem_bits)
        total = Signal.like(r.rem)
        m.d.comb += [elems.eq(parts_q[0] + parts_q[1]), total.eq(elems << shift_q)]
        with m.If(merge2):
            m.d.sync += [
                r.rem.eq(total),
                r.nbytes.eq(Mux(total > max_burst, max_burst, total)),
                r.more.eq(total > max_burst),
                r.runs_left.eq(1),
                r.last_run.eq(1),
            ]

    def _request_step(self, m: Module, s: dict[str, Signal], r: _Request) -> None:
        """At a grant, the next request: the run's next burst, the next row's first, or none.
        ``rem - max_burst`` and ``rem > 2 * max_burst`` come from registers, beside the
        arbiter's grant, which only enables the registers."""
        max_burst = self._p.cfg.dram.max_burst
        after = Signal.like(r.rem)
        more_after = Signal()
        m.d.comb += [after.eq(r.rem - max_burst), more_after.eq(r.rem > 2 * max_burst)]
        with m.If(s["granted"]):
            with m.If(r.more):
                m.d.sync += [
                    r.addr.eq(r.addr + max_burst),
                    r.rem.eq(after),
                    r.nbytes.eq(Mux(more_after, max_burst, after)),
                    r.more.eq(more_after),
                ]
            with m.Elif(~r.last_run):
                m.d.sync += [
                    r.run_dram.eq(r.run_dram + r.stride),
                    r.addr.eq(r.run_dram + r.stride),
                    r.rem.eq(r.row_bytes),
                    r.nbytes.eq(r.first),
                    r.more.eq(r.first_more),
                    r.runs_left.eq(r.runs_left - 1),
                    r.last_run.eq(r.runs_left == 2),
                ]
            with m.Else():
                m.d.sync += [s["asking"].eq(0), s["done"].eq(1)]


    def _data_rows(self, m: Module, geoms: list[BufferGeometry], t_now: object, tsel: object,
                   elems: Signal, step: Signal, completes: Signal) -> _Rows:
        """The data side's rows: ``elems`` (the row's elements left, this beat's included) and
        the rows; ``step`` elements of the row are done by a beat that ``completes`` some (an
        element wider than a beat completes on its last beat).

        ``geoms`` are the engine's buffers, ``t_now`` / ``tsel`` the decoded / running one's
        index into them. A row's end is a registered flag (``last_elems``: the next completing
        beat ends it), so a beat's end of a row or of the block is a gate of flip-flops."""
        cfg = self._p.cfg
        insn = self.insn
        size_bits = cfg.isa.size_bits
        last_elems = Signal(name="row_last_elems")
        rows = Signal(size_bits, name="data_rows")
        last_row = Signal(name="data_last_row")
        x_size_q = Signal(size_bits, name="row_elems_q")
        x_last_q = Signal(name="row_last_elems_q")
        out = _Rows(elems, last_elems, rows, last_row, Signal(name="row_end"),
                    Signal(name="all_end"))
        # Per buffer: elements a full beat completes (``lanes``; 1 for an element of one beat
        # or more) and whether the next completing beat ends a row of ``n``.
        def fits(n: object, g: BufferGeometry, beats: int = 1) -> object:
            return n <= g.lanes * beats if g.lanes > 1 else n == beats
        x_last_now = Signal()
        for i, g in enumerate(geoms):
            with m.If(t_now == i):
                m.d.comb += x_last_now.eq(fits(insn.x_size, g))
        more_last = Signal()            # ``last_elems`` after a completing beat in a row
        for i, g in enumerate(geoms):
            with m.If(tsel == i):
                m.d.comb += more_last.eq(fits(elems, g, 2))
        m.d.comb += [out.row_end.eq(self.dram.rsp_valid & completes & last_elems),
                     out.all_end.eq(out.row_end & last_row)]
        with m.If(self.idle):
            m.d.sync += [elems.eq(insn.x_size), last_elems.eq(x_last_now),
                         x_size_q.eq(insn.x_size), x_last_q.eq(x_last_now),
                         rows.eq(insn.y_size), last_row.eq(insn.y_size == 1)]
        with m.Elif(out.row_end):
            m.d.sync += [elems.eq(x_size_q), last_elems.eq(x_last_q),
                         rows.eq(rows - 1), last_row.eq(rows == 2)]
        with m.Elif(self.dram.rsp_valid & completes):
            m.d.sync += [elems.eq(elems - step), last_elems.eq(more_last)]
        return out


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
    setup: Signal               # the cycle after decode: the block's geometry is formed
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
    mid_zero_q: Signal          # mid_q == 0: no side padding


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
    mid_zero: Signal
    rows_in: Signal
    nxt_addr: Signal
    nxt_seg: Signal
    nxt_rows: Signal

    def seg_after(self, rows: object, of: object = lambda v: v) -> object:
        """Length of the segment after a jump: the tail without side padding or after
        the last row, else the side padding between rows (``of`` it: a flag of both
        lengths, picked like them)."""
        return Mux(self.mid_zero | (rows <= 1), of(self.tail_q), of(self.mid_q))

    def final(self, rows: Value) -> Value:
        """``seg_final`` for a segment after which ``rows`` data rows are left."""
        return (rows == 0) | self.seg_after(rows, lambda v: v == 0)

    def final_after_jump(self) -> Value:
        """``final(nxt_rows)``, the segment after a jump being the last, from ``rows_in``
        without ``nxt_rows``' subtractor: without side padding the jump is to the tail (no
        rows left); else ``rows_in - 1`` rows are left, none (the tail follows the last row)
        or one whose side segment is the tail, empty or not. (At 7d6e6e3 the subtractor and
        the compares behind it were default's worst path at seed 4 on the 45F, 10.07 ns.)"""
        return (self.mid_zero | (self.rows_in == 1)
                | ((self.rows_in == 2) & (self.tail_q == 0)))

    def next_segment(self, m: Module) -> None:
        """Moves the walk to the next segment (``nxt_*``)."""
        m.d.sync += [self.pad_addr.eq(self.nxt_addr), self.seg_left.eq(self.nxt_seg),
                     self.pad_rows.eq(self.nxt_rows),
                     self.seg_final.eq(self.final_after_jump()),
                     self.seg_big.eq(self.seg_after(self.rows_in, lambda v: v > 1)),
                     self.seg_one.eq(self.seg_after(self.rows_in, lambda v: v == 1))]


@dataclass
class _Beats:
    """Where :class:`LoadEngine`'s data beats are in an element wider than a beat."""

    beat_in_elem: Signal        # beats of the element so far
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
    idle : In
        No instruction of the module runs (``DepControl.busy`` low; every decode cycle is
        such a cycle). The registers the engine decodes an instruction into (addresses,
        sizes, strides, the padded block) load in every idle cycle, so that they hold the
        decoded instruction's values from the cycle after its decode on; ``start`` enables
        only those that begin the run (the request's ``asking`` and ``done``, the setup
        countdowns, the state), which keeps its fan-out, the end of the module's issue
        path, small.
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
        ``wr_<buffer>`` falls in these cycles. A flip-flop, so that a writer sharing a port
        with this engine can pick its data early.
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
        geoms = self._geoms()
        t_now, tsel = self._target(m)
        s = self._requests(m, [g.elem_shift for g in geoms], t_now, write=False,
                           elem_bits=max(g.addr_bits for g in geoms) + 1)
        blk = self._block(m, s)
        walk = self._pad_walk(m, blk)
        beats = self._beat_regs(m)
        elems = Signal(self._p.cfg.isa.size_bits, name="row_elems")
        step, completes = self._steps(m, tsel, beats, elems)
        rows = self._data_rows(m, geoms, t_now, tsel, elems, step, completes)
        padding, loading, moving_next = self._fsm(m, blk, walk, rows, s)
        self._write_ports(m, t_now, tsel, moving_next, blk, walk, beats, padding, loading,
                          rows)
        self._step_pointers(m, blk, rows, beats, step, completes, loading)
        return m

    def _target(self, m: Module) -> tuple[Signal, Signal]:
        """The decoded instruction's target (``t_now``, an index into ``targets``) and the
        running one's (``tsel``, registered at decode)."""
        insn = self.insn
        t_now = Signal(range(len(self._targets)))
        tsel = Signal(range(len(self._targets)))
        for i, t in enumerate(self._targets):
            with m.If(insn.mem_type == int(t)):
                m.d.comb += t_now.eq(i)
        with m.If(self.idle):
            m.d.sync += tsel.eq(t_now)
        return t_now, tsel

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
        with m.If(self.idle):
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
        mid_zero_q = Signal()             # x_pad_0 == x_pad_1 == 0: no side padding
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
                mid_zero_q.eq((fields.x_pad_0 == 0) & (fields.x_pad_1 == 0)),
            ]
        return _Block(fields, setup, setup2, cols, row_sram, elem_ptr, head_q, mid_q, tail_q,
                      x_size_q, x_size1_q, no_pad_q, head_zero_q, jump_data, mid_zero_q)

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
                        blk.mid_q, blk.tail_q, blk.mid_zero_q, rows_in, nxt_addr, nxt_seg,
                        nxt_rows)
        m.d.comb += nxt_seg.eq(walk.seg_after(rows_in))
        with m.If(blk.mid_zero_q):
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

    def _beat_regs(self, m: Module) -> _Beats:
        """The beat within an element and the element's earlier beats."""
        p = self._p
        max_beats = max(g.beats_per_elem for g in self._geoms())
        beat_in_elem = Signal(range(max_beats + 1))
        shreg = Signal(p.beat_bits * max(1, max_beats - 1))
        return _Beats(beat_in_elem, shreg)

    def _steps(self, m: Module, tsel: Signal, beats: _Beats, elems: Signal
               ) -> tuple[Signal, Signal]:
        """``step``, the elements the next data beat completes (from registers only: the beat
        strobe comes late and only enables the pointers' registers), and ``completes``, it
        completes any (an element wider than a beat completes on its last beat)."""
        geoms = self._geoms()
        step = Signal(range(max(g.lanes for g in geoms) + 1))
        completes = Signal()
        for i, (t, g) in enumerate(zip(self._targets, geoms, strict=True)):
            with m.If(tsel == i):
                if g.lanes > 1:
                    m.d.comb += [step.eq(_lanes_now(m, g, elems, t.buffer)),
                                 completes.eq(1)]
                elif g.beats_per_elem > 1:
                    m.d.comb += [step.eq(1),
                                 completes.eq(beats.beat_in_elem == g.beats_per_elem - 1)]
                else:
                    m.d.comb += [step.eq(1), completes.eq(1)]
        return step, completes

    def _fsm(self, m: Module, blk: _Block, walk: _PadWalk, rows: _Rows, s: dict[str, Signal]
             ) -> tuple[Signal, Signal, Signal]:
        """The engine's states: IDLE, DATA (its requests go out and its beats come in, from the
        cycle after decode) and PAD (the padding walk); returns ``padding``, ``loading`` (a data
        beat) and ``moving_next``."""
        pad_addr, seg_left, seg_big, seg_one = (walk.pad_addr, walk.seg_left, walk.seg_big,
                                                 walk.seg_one)
        padding = Signal()
        loading = Signal()
        # ``moving`` (see ``_write_ports``) as it will be in the next cycle: DATA past its
        # setup cycle (``blk.setup`` is ``start & ~zero`` registered) or PAD.
        moving_next = Signal(name="moving_next")

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start & ~s["zero"]):
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += loading.eq(self.dram.rsp_valid)
                with m.If(rows.all_end):
                    with m.If(blk.no_pad_q):
                        m.d.comb += self.last.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.comb += moving_next.eq(1)
                        m.next = "PAD"
                        with m.If(blk.jump_data):
                            m.d.sync += pad_addr.eq(blk.row_sram + blk.cols)
                with m.Else():
                    m.d.comb += moving_next.eq(~(self.start & ~s["zero"]))
            with m.State("PAD"):
                m.d.comb += padding.eq(1)
                m.d.comb += moving_next.eq(~walk.pad_end)
                with m.If(seg_big):
                    m.d.sync += [pad_addr.eq(pad_addr + 1), seg_left.eq(seg_left - 1),
                                 seg_big.eq(seg_left > 2), seg_one.eq(seg_left == 2)]
                with m.Else():
                    walk.next_segment(m)
                with m.If(walk.pad_end):
                    m.d.comb += self.last.eq(1)
                    m.next = "IDLE"
        return padding, loading, moving_next

    def _write_ports(self, m: Module, t_now: Signal, tsel: Signal, moving_next: Signal,
                     blk: _Block, walk: _PadWalk, beats: _Beats, padding: Signal,
                     loading: Signal, rows: _Rows) -> None:
        """The targets' write ports (``wr_<buffer>``, ``writing_<buffer>``): data beats at
        ``elem_ptr``, zeros at ``pad_addr``."""
        p = self._p
        geoms = self._geoms()
        beat_in_elem, shreg = beats.beat_in_elem, beats.shreg
        max_beats = max(g.beats_per_elem for g in geoms)
        # ``writing``: past the request's setup (the cycle after decode), moving data or padding
        # (DATA but not ``blk.setup``, or PAD), for the running instruction's target. The first
        # beat comes two cycles after decode at the soonest (a request granted in the cycle
        # after it, ``latency >= 1``). Each is a register, formed a cycle ahead from the state's
        # next value (``moving_next``) and the target's (``tsel`` loads ``t_now`` while idle):
        # compute's result register picks LOAD ACC's data with it, and its select fans out to
        # every bit of that register (at 7fd4183 the gates in front of it led the worst path of
        # default_postproc at seeds 6 and 7 on the 45F, 10.69 and 10.92 ns).
        # Data path: one write port per target.
        for i, (t, g) in enumerate(zip(self._targets, geoms, strict=True)):
            wr = getattr(self, f"wr_{t.buffer}")
            mine = Signal(name=f"mine_{t.buffer}")
            writing = getattr(self, f"writing_{t.buffer}")
            writing_q = Signal(name=f"writing_{t.buffer}_q")
            m.d.comb += [mine.eq(tsel == i), writing.eq(writing_q)]
            m.d.sync += writing_q.eq(moving_next & Mux(self.idle, t_now == i, tsel == i))
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
                    n = _lanes_now(m, g, rows.elems, f"wr_{t.buffer}")
                    m.d.comb += wr.en.eq((Const(1, g.lanes + 1) << n) - 1)
                elif g.beats_per_elem > 1:
                    elem_done = beat_in_elem == g.beats_per_elem - 1
                    m.d.sync += shreg.eq(Cat(shreg[p.beat_bits:], self.dram.rsp_data))
                    with m.If(elem_done):
                        m.d.comb += wr.en.eq(1)
                        m.d.sync += beat_in_elem.eq(0)
                    with m.Else():
                        m.d.sync += beat_in_elem.eq(beat_in_elem + 1)
                else:
                    m.d.comb += wr.en.eq(1)

    def _step_pointers(self, m: Module, blk: _Block, rows: _Rows, beats: _Beats,
                       step: Signal, completes: Signal, loading: Signal) -> None:
        """The data pointers' steps: ``elem_ptr`` by ``step`` with each beat that completes
        elements, both it and ``row_sram`` to the next row at a row's end; the beat count
        restarts at decode."""
        row_sram, elem_ptr, cols = blk.row_sram, blk.elem_ptr, blk.cols
        with m.If(self.idle):
            m.d.sync += beats.beat_in_elem.eq(0)
        with m.If(rows.row_end):
            m.d.sync += [row_sram.eq(row_sram + cols), elem_ptr.eq(row_sram + cols)]
        with m.Elif(loading & completes):
            m.d.sync += elem_ptr.eq(elem_ptr + step)


class StoreEngine(_Engine):
    """SRAM -> DRAM: the out buffer, or with ``store.postproc`` the acc buffer's copy through the
    post-processing stream (:class:`hw.postproc.PostStream`) for a STORE ACC.

    Parameters
    ----------
    params
        RTL parameters of the config.

    Ports
    -----
    start, idle, insn, last, dram
        As for :class:`LoadEngine` (write requests; ``insn`` in the STORE format).
    rd : Out(BufferRead)
        Out-buffer reads, one element ahead of the beat that sends it.
    rd_acc : Out(BufferRead)
        With ``store.postproc``: reads of the acc buffer's copy, a beat's elements at a time.
    """

    def __init__(self, params: RtlParams) -> None:
        members: dict[str, object] = {"rd": Out(BufferRead(params.buffers["out"]))}
        if params.cfg.store.postproc:
            members["rd_acc"] = Out(BufferRead(params.buffers["acc"],
                                               lanes=params.buffers["out"].lanes))
        super().__init__(params, members, opcode=Opcode.STORE)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        g = p.buffers["out"]
        insn = self.insn
        post = p.cfg.store.postproc
        post_now = (insn.mem_type == int(MemType.ACC)) if post else None
        s = self._requests(m, [g.elem_shift], Const(0), write=True, elem_bits=g.addr_bits + 1,
                           post_now=post_now)
        elem_ptr = Signal(g.addr_bits)
        elems = Signal(p.cfg.isa.size_bits, name="row_elems")
        beat_in_elem = Signal(range(g.beats_per_elem + 1))
        nxt = Signal(g.addr_bits)
        sending = Signal()
        step = Signal(range(g.lanes + 1))
        completes = Signal()
        # The elements the beats send: the out buffer's read-ahead, or a STORE ACC's stream.
        source = Signal(g.lanes * g.elem_bits)
        m.d.comb += source.eq(self.rd.data)
        if post:
            source = self._post_source(m, source, sending & completes, step)
        m.d.comb += nxt.eq(elem_ptr)
        if g.lanes > 1:
            n = _lanes_now(m, g, elems, "out")
            m.d.comb += [step.eq(n), completes.eq(1), self.dram.wr_data.eq(source)]
        elif g.beats_per_elem > 1:
            k = g.beats_per_elem
            m.d.comb += [step.eq(1), completes.eq(beat_in_elem == k - 1),
                         self.dram.wr_data.eq(source.word_select(beat_in_elem, p.beat_bits))]
            with m.If(sending):
                with m.If(completes):
                    m.d.sync += beat_in_elem.eq(0)
                with m.Else():
                    m.d.sync += beat_in_elem.eq(beat_in_elem + 1)
        else:
            m.d.comb += [step.eq(1), completes.eq(1), self.dram.wr_data.eq(source)]
        # The out buffer's elements follow each other from ``sram_base``, rows included: the
        # rows only tell how many elements a beat carries (the last beat of a row may be
        # partial).
        self._data_rows(m, [g], Const(0), Const(0), elems, step, completes)
        with m.If(sending & completes):
            m.d.comb += nxt.eq(elem_ptr + step)
        # Read ahead: the port shows the element of the next beat (from the cycle after decode;
        # the first beat comes later still).
        m.d.comb += self.rd.addr.eq(nxt)
        with m.If(self.idle):
            m.d.sync += [elem_ptr.eq(insn.sram_base), beat_in_elem.eq(0)]
        with m.Else():
            m.d.sync += elem_ptr.eq(nxt)

        # Writes in flight (granted, not yet answered): the instruction ends with the response
        # of its last, once every request has been granted.
        in_flight = Signal(range(p.cfg.dram.max_outstanding + 1))
        m.d.sync += in_flight.eq(in_flight + s["granted"] - self.dram.wr_ack)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start & ~s["zero"]):
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += sending.eq(self.dram.rsp_valid)
                with m.If(self.dram.wr_ack & (in_flight == 1) & s["done"]):
                    m.d.comb += self.last.eq(1)
                    m.next = "IDLE"
        return m

    def _post_source(self, m: Module, out_data: Value, took: Value, step: Value) -> Signal:
        """With ``store.postproc``: the stream of a STORE ACC (:class:`PostStream`), which takes
        the fields of every STORE while the engine is idle, and the beats' source: the stream's
        front while the running STORE is a STORE ACC (``post_q``), the out buffer's read-ahead
        otherwise."""
        from hw.postproc import PostStream

        insn = self.insn
        m.submodules.post = stream = PostStream(self._p)
        wiring.connect(m, stream.rd, wiring.flipped(self.rd_acc))
        post_q = Signal()
        is_post = Signal()
        m.d.comb += [
            is_post.eq(insn.mem_type == int(MemType.ACC)),
            stream.idle.eq(self.idle),
            stream.base.eq(insn.sram_base),
            stream.shift.eq(insn.shift),
            stream.clip_lo.eq(insn.clip_lo),
            stream.clip_hi.eq(insn.clip_hi),
            stream.take.eq(Mux(took & post_q, step, 0)),
        ]
        with m.If(self.idle):
            m.d.sync += post_q.eq(is_post)
        source = Signal.like(out_data, name="store_source")
        m.d.comb += source.eq(Mux(post_q, stream.data, out_data))
        return source
