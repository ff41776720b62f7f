"""The load and store modules: dependency control plus a DMA engine each."""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Member, Out

from accel.machine.isa import MemType
from hw.control import CommandUnit, DepControl
from hw.dma import LoadEngine, StoreEngine, mem_predecode
from hw.dram import dram_port
from hw.params import RtlParams
from hw.queues import token_stream
from hw.sram import BufferRead, BufferWrite

__all__ = ["LoadUnit", "StoreUnit"]


class _DmaUnit(CommandUnit):
    """A module of one DMA engine (load or store) behind its dependency control, which pops
    tokens from one queue and pushes them into one (the compute module's both ways).

    Subclasses name the token ports and the engine, and wire the engine's buffer ports.

    Parameters
    ----------
    params
        RTL parameters of the config.
    buffers
        The engine's buffer ports (after ``dram``).

    Ports
    -----
    cmd, cmd_pre, issue, retire
        As for :class:`~hw.control.CommandUnit` (``cmd_pre``: :func:`~hw.dma.mem_predecode`
        of the queue's head).
    ``pop_port`` : In(token stream), ``push_port`` : Out(token stream)
        Tokens from compute (``pop_flag``) and to it (``push_flag``).
    ``push_port`` + ``_room`` : In
        ``room`` of the pushed queue.
    dram : Out(DramPort)
        The engine's DRAM requests.
    """

    predecode = staticmethod(mem_predecode)
    """What the command queue stores beside each instruction (``cmd_pre``)."""

    pop_port: str
    """The port of the tokens popped (``c2l``, ``c2s``)."""
    pop_flag: str
    """The dependency flag that pops them (``pop_next``, ``pop_prev``)."""
    push_port: str
    """The port of the tokens pushed (``l2c``, ``s2c``)."""
    push_flag: str
    """The dependency flag that pushes them (``push_next``, ``push_prev``)."""
    insn_format: str
    """The field of ``insn_layout`` the engine decodes (``mem``, ``store``)."""

    def __init__(self, params: RtlParams, buffers: dict[str, Member]) -> None:
        super().__init__(params, 1, {
            self.pop_port: In(token_stream()),
            self.push_port: Out(token_stream()),
            f"{self.push_port}_room": In(1),
            "dram": Out(dram_port(params)),
            **buffers,
        })

    def _engine(self) -> LoadEngine | StoreEngine:
        """The DMA engine (a new one)."""
        raise NotImplementedError

    def _connect_buffers(self, m: Module, eng: LoadEngine | StoreEngine) -> None:
        """Wire the engine's buffer ports to this module's."""
        raise NotImplementedError

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        m.submodules.control = ctrl = DepControl(
            p.insn_layout, pops=(self.pop_flag,), pushes=(self.push_flag,),
            token_depth=p.token_depth, pre_bits=1, single_pre=True)
        m.submodules.engine = eng = self._engine()
        wiring.connect(m, wiring.flipped(self.cmd), ctrl.cmd)
        wiring.connect(m, wiring.flipped(getattr(self, self.pop_port)),
                       getattr(ctrl, self.pop_flag))
        wiring.connect(m, getattr(ctrl, self.push_flag),
                       wiring.flipped(getattr(self, self.push_port)))
        wiring.connect(m, eng.dram, wiring.flipped(self.dram))
        self._connect_buffers(m, eng)
        m.d.comb += [
            getattr(ctrl, f"{self.push_flag}_room").eq(getattr(self, f"{self.push_port}_room")),
            eng.start.eq(ctrl.start),
            eng.idle.eq(~ctrl.busy),
            eng.insn.eq(getattr(ctrl.insn, self.insn_format)),
            ctrl.cmd_pre.eq(self.cmd_pre),
            ctrl.last.eq(eng.last),
            self.issue.eq(ctrl.start),
            self.retire.eq(ctrl.retire),
        ]
        return m


class LoadUnit(_DmaUnit):
    """Runs LOAD INP / LOAD WGT: 2-D strided DMA with zero padding into the inp/wgt buffers.

    Parameters
    ----------
    params
        RTL parameters of the config.

    Ports
    -----
    cmd, cmd_pre, issue, retire, dram
        As for every DMA module (DRAM reads).
    c2l : In(token stream)
        Tokens compute->load (``pop_next``).
    l2c : Out(token stream)
        Tokens load->compute (``push_next``).
    l2c_room : In
        ``room`` of the ``l2c`` queue.
    wr_inp, wr_wgt : Out(BufferWrite)
        Buffer writes.
    """

    pop_port, pop_flag = "c2l", "pop_next"
    push_port, push_flag = "l2c", "push_next"
    insn_format = "mem"

    def __init__(self, params: RtlParams) -> None:
        super().__init__(params, {
            "wr_inp": Out(BufferWrite(params.buffers["inp"])),
            "wr_wgt": Out(BufferWrite(params.buffers["wgt"])),
        })

    def _engine(self) -> LoadEngine:
        return LoadEngine(self._p, (MemType.INP, MemType.WGT))

    def _connect_buffers(self, m: Module, eng: LoadEngine) -> None:
        wiring.connect(m, eng.wr_inp, wiring.flipped(self.wr_inp))
        wiring.connect(m, eng.wr_wgt, wiring.flipped(self.wr_wgt))


class StoreUnit(_DmaUnit):
    """Runs STORE OUT: 2-D strided DMA from the out buffer to DRAM.

    Parameters
    ----------
    params
        RTL parameters of the config.

    Ports
    -----
    cmd, cmd_pre, issue, retire, dram
        As for every DMA module (DRAM writes).
    c2s : In(token stream)
        Tokens compute->store (``pop_prev``).
    s2c : Out(token stream)
        Tokens store->compute (``push_prev``).
    s2c_room : In
        ``room`` of the ``s2c`` queue.
    rd_out : Out(BufferRead)
        Out-buffer reads.
    rd_acc : Out(BufferRead)
        With ``store.postproc``: reads of the store's copy of the acc buffer.
    """

    pop_port, pop_flag = "c2s", "pop_prev"
    push_port, push_flag = "s2c", "push_prev"
    insn_format = "store"

    def __init__(self, params: RtlParams) -> None:
        super().__init__(params, {
            "rd_out": Out(BufferRead(params.buffers["out"])),
            **({"rd_acc": Out(BufferRead(params.buffers["acc"],
                                        lanes=params.buffers["out"].lanes))}
               if params.cfg.store.postproc else {}),
        })

    def _engine(self) -> StoreEngine:
        return StoreEngine(self._p)

    def _connect_buffers(self, m: Module, eng: StoreEngine) -> None:
        wiring.connect(m, eng.rd, wiring.flipped(self.rd_out))
        if self._p.cfg.store.postproc:
            wiring.connect(m, eng.rd_acc, wiring.flipped(self.rd_acc))
