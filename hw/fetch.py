"""Instruction fetch: reads the program from DRAM in bursts and routes it to the command queues.

Cycle behaviour (``sim.timing.FetchModule``): one transaction of ``min(max_burst // 16, left)``
instructions, then one instruction dispatched per cycle into its module's command queue; a
put into a full queue waits until that module takes an instruction (the queue's ``room``); the
next transaction is requested in the cycle the batch's last put succeeds.

Routing (``accel.machine.isa.module_of``): STORE -> store; LOAD of INP or WGT -> load; everything
else (LOAD of UOP or ACC, GEMM, ALU, FINISH) -> compute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from accel.machine.config import INSN_BITS
from accel.machine.isa import MemType, Opcode
from accel.machine.isa import Module as IsaModule
from hw.dram import dram_port
from hw.params import BufferGeometry, RtlParams
from hw.sram import SramBuffer

__all__ = ["Fetch"]

QUEUES = tuple(mod.name.lower() for mod in IsaModule)
"""Command queues in :class:`accel.machine.isa.Module` order: load, compute, store."""

_TARGET_BITS = (len(QUEUES) - 1).bit_length()


class Fetch(wiring.Component):
    """Fetch and dispatch.

    Parameters
    ----------
    params
        RTL parameters of the config.
    predecode
        Per queue (``load``, ``compute``, ``store``), optional: a function of an instruction (a
        view of ``params.insn_layout``) to the bits its module's command queue stores beside
        it (the module's ``predecode``). They are formed as the instruction arrives from DRAM
        and kept beside it in fetch's buffer, so that no compare sits between the buffer and
        the queues.

    Ports
    -----
    start : In
        Begin fetching ``insn_count`` instructions from byte ``insn_addr``.
    insn_addr : In
        Byte address of the first instruction (16-byte aligned).
    insn_count : In
        Number of instructions.
    dram : Out(DramPort)
        Read requests.
    cmd_load, cmd_compute, cmd_store : Out(stream)
        Instructions to the command queues.
    pre_load, pre_compute, pre_store : Out
        For the queues with a ``predecode``: its bits of the instruction dispatched.
    room_load, room_compute, room_store : In
        The queue accepts a pending put this cycle (``CommandQueue.room``).
    room_next_load, room_next_compute, room_next_store : In
        The queue's ``room`` in the next cycle (``CommandQueue.room_next``): fetch's DRAM
        request is a register formed from it.
    busy : Out
        Instructions remain to be fetched or dispatched.
    """

    def __init__(self, params: RtlParams,
                 predecode: Mapping[str, Callable[[object], Value]] | None = None) -> None:
        self._p = params
        self._predecode = {q: f for q, f in (predecode or {}).items() if f is not None}
        unknown = sorted(set(self._predecode) - set(QUEUES))
        if unknown:
            raise ValueError(f"predecode for unknown queues {unknown}; the queues are "
                             f"{', '.join(QUEUES)}")
        self._pre_widths = {q: len(Value.cast(f(Signal(params.insn_layout))))
                            for q, f in self._predecode.items()}
        members: dict[str, object] = {
            "start": In(1),
            "insn_addr": In(params.dram_addr_bits),
            "insn_count": In(32),
            "dram": Out(dram_port(params)),
            "busy": Out(1),
        }
        for q in QUEUES:
            members[f"cmd_{q}"] = Out(stream.Signature(params.insn_layout))
            members[f"room_{q}"] = In(1)
            members[f"room_next_{q}"] = In(1)
            if self._pre_widths.get(q):
                members[f"pre_{q}"] = Out(self._pre_widths[q])
        super().__init__(members)

    @property
    def pre_entry_bits(self) -> int:
        """Bits fetch keeps beside each buffered instruction: its queue's index and every
        queue's predecoded bits."""
        return _TARGET_BITS + sum(self._pre_widths.values())

    def pre_bits(self, queue: str) -> int:
        """Width of ``pre_<queue>`` (0 when that queue has no predecode)."""
        return self._pre_widths.get(queue, 0)

    def _pre_of(self, m: Module, raw: Value, name: str) -> Value:
        """What fetch keeps beside the instruction ``raw`` (a buffer element): the index of
        its queue (:func:`accel.machine.isa.module_of`), then every queue's predecoded bits."""
        insn = Signal(self._p.insn_layout, name=name)
        m.d.comb += insn.eq(raw[:self._p.insn_bits])
        opcode = insn.raw[:3]
        mem_type = insn.mem.mem_type
        target = Mux(opcode == int(Opcode.STORE), QUEUES.index("store"),
                     Mux((opcode == int(Opcode.LOAD))
                         & ((mem_type == int(MemType.INP)) | (mem_type == int(MemType.WGT))),
                         QUEUES.index("load"), QUEUES.index("compute")))
        return Cat(target[:_TARGET_BITS],
                   *(self._predecode[q](insn) for q in QUEUES if self._pre_widths.get(q)))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        g = p.insn_buffer
        batch = p.fetch_batch
        bpc = p.cfg.dram.bytes_per_cycle
        m.submodules.buffer = buf = SramBuffer(g)
        # Each instruction's queue and predecoded bits, formed as it arrives, in a buffer of
        # their own addressed like the instructions': no compare of the instruction lies
        # between the buffer and the queues.
        pre_bits = self.pre_entry_bits
        pg = BufferGeometry(name="insn_pre", elem_bits=pre_bits, store_bits=pre_bits,
                            depth=g.depth, lanes=g.lanes, beats_per_elem=1)
        m.submodules.pre_buffer = pbuf = SramBuffer(pg)

        ptr = Signal(p.dram_addr_bits)
        left = Signal(32)
        k = Signal(range(batch + 1))
        j = Signal(range(batch + 1))
        pend = Signal()
        pq = Signal(range(len(QUEUES)))
        beats_left = Signal(p.burst_bytes_bits)
        wr_ptr = Signal(range(batch + 1))
        beat_in = Signal(range(g.beats_per_elem + 1))
        shreg = Signal(p.beat_bits * max(1, g.beats_per_elem - 1))

        rooms = [getattr(self, f"room_{q}") for q in QUEUES]
        room_sel = Signal()
        for i, room in enumerate(rooms):
            with m.If(pq == i):
                m.d.comb += room_sel.eq(room)
        ok = Signal()
        m.d.comb += ok.eq(~pend | room_sel)

        k_now = Signal(range(batch + 1))
        m.d.comb += [
            k_now.eq(Mux(left > batch, batch, left)),
            self.dram.req.payload.addr.eq(ptr),
            self.dram.req.payload.bytes.eq(k_now * (INSN_BITS // 8)),
            self.dram.req.payload.write.eq(0),
            self.dram.wr_data.eq(0),
        ]
        # The request, ``asking & ok``, is a register of its own, formed from the next cycle's
        # ``asking``, ``pend``, ``pq`` and the queues' next ``room``: the arbiter's grant, and
        # through it every other requester's ``ready``, starts at a flip-flop, as the DMA
        # engines' requests do. (Formed behind the queues' ``room`` registers, it ran on into
        # the arbiter and the store engine: 10.56-10.77 ns at seeds 5 and 6 on the 45F at
        # 0dd8d51, docs/notes/memory-system.md.)
        granted = Signal()
        asking = Signal()       # the REQ state as a flip-flop of its own
        req_on = Signal()       # ``asking & ok``, registered
        m.d.comb += [self.dram.req.valid.eq(req_on),
                     granted.eq(self.dram.req.valid & self.dram.req.ready)]
        asking_n = Signal()
        pend_n = Signal()
        pq_n = Signal.like(pq)
        room_next_sel = Signal()
        m.d.comb += [asking_n.eq(asking), pend_n.eq(pend), pq_n.eq(pq)]
        for i, q in enumerate(QUEUES):
            with m.If(pq_n == i):
                m.d.comb += room_next_sel.eq(getattr(self, f"room_next_{q}"))
        m.d.sync += [asking.eq(asking_n), pend.eq(pend_n), pq.eq(pq_n),
                     req_on.eq(asking_n & (~pend_n | room_next_sel))]
        beat = Signal()
        m.d.comb += beat.eq(self.dram.rsp_valid)

        # Route the instruction at the buffer's read port.
        word = Signal(p.insn_layout)
        target = Signal(_TARGET_BITS)
        m.d.comb += [word.eq(buf.r.data[:p.insn_bits]), target.eq(pbuf.r.data[:_TARGET_BITS])]
        dispatch = Signal()
        for i, q in enumerate(QUEUES):
            port = getattr(self, f"cmd_{q}")
            m.d.comb += [port.payload.eq(word), port.valid.eq(dispatch & (target == i))]

        read_at = Signal(range(batch + 1))
        m.d.comb += buf.r.addr.eq(read_at)
        m.d.comb += pbuf.r.addr.eq(read_at)
        at = _TARGET_BITS
        for q in QUEUES:
            if self._pre_widths.get(q):
                width = self._pre_widths[q]
                m.d.comb += getattr(self, f"pre_{q}").eq(pbuf.r.data[at:at + width])
                at += width
        m.d.comb += read_at.eq(j)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start & (self.insn_count != 0)):
                    m.d.sync += [ptr.eq(self.insn_addr), left.eq(self.insn_count)]
                    m.d.comb += [pend_n.eq(0), asking_n.eq(1)]
                    m.next = "REQ"
            with m.State("REQ"):
                m.d.comb += self.busy.eq(1)
                with m.If(granted):
                    m.d.comb += [asking_n.eq(0), pend_n.eq(0)]
                    m.d.sync += [
                        k.eq(k_now), j.eq(0), wr_ptr.eq(0), beat_in.eq(0),
                        beats_left.eq((k_now * (INSN_BITS // 8) + bpc - 1)
                                      >> (bpc - 1).bit_length()),
                    ]
                    m.next = "XFER"
            with m.State("XFER"):
                m.d.comb += self.busy.eq(1)
                with m.If(beat):
                    m.d.sync += beats_left.eq(beats_left - 1)
                    with m.If(beats_left == 1):
                        m.d.comb += read_at.eq(0)
                        m.next = "DISPATCH"
            with m.State("DISPATCH"):
                m.d.comb += [self.busy.eq(1), dispatch.eq(ok)]
                with m.If(ok):
                    m.d.comb += read_at.eq(j + 1)
                    m.d.comb += [pend_n.eq(1), pq_n.eq(target)]
                    m.d.sync += [
                        j.eq(j + 1), ptr.eq(ptr + INSN_BITS // 8), left.eq(left - 1),
                    ]
                    with m.If(j == k - 1):
                        with m.If(left == 1):
                            m.next = "IDLE"
                        with m.Else():
                            m.next = "REQ"
                            m.d.comb += asking_n.eq(1)

        # Beats -> instruction buffer.
        # Both buffers are written alike: the same address and enables, the instructions
        # (``lanes`` of them per beat, or one from ``beats_per_elem`` beats) and their bits.
        # The data (and the predecode formed from them) are the beat's whether or not one
        # arrives, so that only the enables depend on the response's strobe: gated by it, the
        # predecode's compares started two LUT levels after it.
        written = Signal(g.lanes * g.elem_bits)
        w_en = Signal(g.lanes)
        if g.lanes == 1 and g.beats_per_elem > 1:
            m.d.comb += written.eq(Cat(shreg, self.dram.rsp_data))
        else:
            m.d.comb += written.eq(self.dram.rsp_data)
        with m.If(beat):
            if g.lanes > 1:
                m.d.comb += w_en.eq(-1)
                m.d.sync += wr_ptr.eq(wr_ptr + g.lanes)
            elif g.beats_per_elem > 1:
                w = p.beat_bits
                m.d.sync += shreg.eq(Cat(shreg[w:], self.dram.rsp_data))
                with m.If(beat_in == g.beats_per_elem - 1):
                    m.d.comb += w_en.eq(1)
                    m.d.sync += [wr_ptr.eq(wr_ptr + 1), beat_in.eq(0)]
                with m.Else():
                    m.d.sync += beat_in.eq(beat_in + 1)
            else:
                m.d.comb += w_en.eq(1)
                m.d.sync += wr_ptr.eq(wr_ptr + 1)
        m.d.comb += [buf.w.addr.eq(wr_ptr), buf.w.en.eq(w_en), buf.w.data.eq(written)]
        m.d.comb += [
            pbuf.w.addr.eq(wr_ptr),
            pbuf.w.en.eq(w_en),
            pbuf.w.data.eq(Cat(*(
                self._pre_of(m, written.word_select(i, g.elem_bits), f"arriving{i}")
                for i in range(g.lanes)))),
        ]
        return m
