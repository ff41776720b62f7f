"""The load and store modules: dependency control plus a DMA engine each."""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from accel.machine.isa import MemType
from hw.control import DepControl
from hw.dma import LoadEngine, StoreEngine, mem_predecode
from hw.dram import dram_port
from hw.params import RtlParams
from hw.queues import token_stream
from hw.sram import BufferRead, BufferWrite

__all__ = ["LoadUnit", "StoreUnit"]


class LoadUnit(wiring.Component):
    """Runs LOAD INP / LOAD WGT: 2-D strided DMA with zero padding into the inp/wgt buffers.

    Parameters
    ----------
    params
        RTL parameters of the config.

    Ports
    -----
    cmd : In(stream)
        The load command queue.
    cmd_pre : In
        :func:`~hw.dma.mem_predecode` of the queue's head.
    c2l : In(token stream)
        Tokens compute->load (``pop_next``).
    l2c : Out(token stream)
        Tokens load->compute (``push_next``).
    l2c_room : In
        ``room`` of the ``l2c`` queue.
    dram : Out(DramPort)
        DRAM reads.
    wr_inp, wr_wgt : Out(BufferWrite)
        Buffer writes.
    issue, retire : Out
        Decode cycle / last cycle of an instruction (for tracing).
    """

    predecode = staticmethod(mem_predecode)
    """What the command queue stores beside each instruction (``cmd_pre``)."""

    def __init__(self, params: RtlParams) -> None:
        self._p = params
        super().__init__({
            "cmd": In(stream.Signature(params.insn_layout)),
            "cmd_pre": In(1),
            "c2l": In(token_stream()),
            "l2c": Out(token_stream()),
            "l2c_room": In(1),
            "dram": Out(dram_port(params)),
            "wr_inp": Out(BufferWrite(params.buffers["inp"])),
            "wr_wgt": Out(BufferWrite(params.buffers["wgt"])),
            "issue": Out(1),
            "retire": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        m.submodules.control = ctrl = DepControl(
            p.insn_layout, pops=("pop_next",), pushes=("push_next",), token_depth=p.token_depth,
            pre_bits=1, single_pre=True)
        m.submodules.engine = eng = LoadEngine(p, (MemType.INP, MemType.WGT))
        wiring.connect(m, wiring.flipped(self.cmd), ctrl.cmd)
        wiring.connect(m, wiring.flipped(self.c2l), ctrl.pop_next)
        wiring.connect(m, ctrl.push_next, wiring.flipped(self.l2c))
        wiring.connect(m, eng.dram, wiring.flipped(self.dram))
        wiring.connect(m, eng.wr_inp, wiring.flipped(self.wr_inp))
        wiring.connect(m, eng.wr_wgt, wiring.flipped(self.wr_wgt))
        m.d.comb += [
            ctrl.push_next_room.eq(self.l2c_room),
            eng.start.eq(ctrl.start),
            eng.idle.eq(~ctrl.busy),
            eng.insn.eq(ctrl.insn.mem),
            ctrl.cmd_pre.eq(self.cmd_pre),
            ctrl.last.eq(eng.last),
            self.issue.eq(ctrl.start),
            self.retire.eq(ctrl.retire),
        ]
        return m


class StoreUnit(wiring.Component):
    """Runs STORE OUT: 2-D strided DMA from the out buffer to DRAM.

    Parameters
    ----------
    params
        RTL parameters of the config.

    Ports
    -----
    cmd : In(stream)
        The store command queue.
    cmd_pre : In
        :func:`~hw.dma.mem_predecode` of the queue's head.
    c2s : In(token stream)
        Tokens compute->store (``pop_prev``).
    s2c : Out(token stream)
        Tokens store->compute (``push_prev``).
    s2c_room : In
        ``room`` of the ``s2c`` queue.
    dram : Out(DramPort)
        DRAM writes.
    rd_out : Out(BufferRead)
        Out-buffer reads.
    issue, retire : Out
        Decode cycle / last cycle of an instruction (for tracing).
    """

    predecode = staticmethod(mem_predecode)
    """What the command queue stores beside each instruction (``cmd_pre``)."""

    def __init__(self, params: RtlParams) -> None:
        self._p = params
        super().__init__({
            "cmd": In(stream.Signature(params.insn_layout)),
            "cmd_pre": In(1),
            "c2s": In(token_stream()),
            "s2c": Out(token_stream()),
            "s2c_room": In(1),
            "dram": Out(dram_port(params)),
            "rd_out": Out(BufferRead(params.buffers["out"])),
            **({"rd_acc": Out(BufferRead(params.buffers["acc"],
                                        lanes=params.buffers["out"].lanes))}
               if params.cfg.store.postproc else {}),
            "issue": Out(1),
            "retire": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        m.submodules.control = ctrl = DepControl(
            p.insn_layout, pops=("pop_prev",), pushes=("push_prev",), token_depth=p.token_depth,
            pre_bits=1, single_pre=True)
        m.submodules.engine = eng = StoreEngine(p)
        wiring.connect(m, wiring.flipped(self.cmd), ctrl.cmd)
        wiring.connect(m, wiring.flipped(self.c2s), ctrl.pop_prev)
        wiring.connect(m, ctrl.push_prev, wiring.flipped(self.s2c))
        wiring.connect(m, eng.dram, wiring.flipped(self.dram))
        wiring.connect(m, eng.rd, wiring.flipped(self.rd_out))
        if p.cfg.store.postproc:
            wiring.connect(m, eng.rd_acc, wiring.flipped(self.rd_acc))
        m.d.comb += [
            ctrl.push_prev_room.eq(self.s2c_room),
            eng.start.eq(ctrl.start),
            eng.idle.eq(~ctrl.busy),
            eng.insn.eq(ctrl.insn.store),
            ctrl.cmd_pre.eq(self.cmd_pre),
            ctrl.last.eq(eng.last),
            self.issue.eq(ctrl.start),
            self.retire.eq(ctrl.retire),
        ]
        return m
