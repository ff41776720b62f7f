"""The whole accelerator: fetch, three command queues, load, compute, store, four token queues,
the inp/wgt/out buffers and the DRAM arbiter, with one DRAM port and start/done control."""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from accel.machine.config import HwConfig
from hw.compute import Compute, uop_read_lanes
from hw.dram import DramArbiter, dram_port
from hw.fetch import QUEUES, Fetch
from hw.params import BufferGeometry, RtlParams
from hw.queues import CommandQueue, TokenQueue
from hw.sram import SramBuffer
from hw.units import LoadUnit, StoreUnit

__all__ = ["CYCLE_BITS", "Accelerator", "MemorySpec", "memories"]

CYCLE_BITS = 48
"""Width of the ``cycles`` counter."""


class Accelerator(wiring.Component):
    """The accelerator for one config.

    Pulse ``start`` for one cycle with ``insn_addr`` and ``insn_count`` set; the next cycle is
    cycle 0 of the run (fetch's first DRAM request, the timing simulator's time 0). ``done``
    rises when FINISH retires and ``cycles`` then holds the run's length in cycles, the
    timing simulator's ``SimStats.cycles``.

    Parameters
    ----------
    cfg
        The hardware config; every width and depth comes from it.

    Raises
    ------
    TypeError
        ``cfg`` is not a :class:`~accel.machine.config.HwConfig`.
    ValueError
        The config cannot be built with the cycle costs of ``accel.machine.costs``
        (:func:`hw.params.check_rtl_config`).

    Ports
    -----
    dram : Out(DramPort)
        The DRAM channel (see :mod:`hw.dram` for the protocol).
    start : In
        Start a run.
    insn_addr : In
        Byte address of the first instruction (16-byte aligned).
    insn_count : In
        Number of instructions.
    done : Out
        FINISH has retired (until the next ``start``).
    cycles : Out
        Cycles since the run began; stops when ``done`` rises.
    active, stalled : Out
        With ``status``: per module (bit 0 load, 1 compute, 2 store), this cycle the module runs
        an instruction (its decode cycle through its last, ``ModuleStats.active``'s cycles) /
        has one, in its command queue or held, that it does not run (it waits on a token or on
        room to push one). For the counters of :mod:`hw.axi`; without ``status`` there are
        no such ports and the design is the same as before them.
    """

    STATUS_MODULES = ("load", "compute", "store")
    """The modules of the ``active`` and ``stalled`` bits, bit 0 first."""

    def __init__(self, cfg: HwConfig, status: bool = False) -> None:
        try:
            if not isinstance(cfg, HwConfig):
                raise TypeError(f"cfg must be a HwConfig, not {type(cfg).__name__}")
            p = RtlParams.of(cfg)
        except (TypeError, ValueError):
            self._MustUse__silence = True  # never built: no "created but never used" warning
            raise
        self._cfg = cfg
        self._p = p
        self._status = status
        members = {
            "dram": Out(dram_port(p)),
            "start": In(1),
            "insn_addr": In(p.dram_addr_bits),
            "insn_count": In(32),
            "done": Out(1),
            "cycles": Out(CYCLE_BITS),
        }
        if status:
            members |= {"active": Out(len(self.STATUS_MODULES)),
                        "stalled": Out(len(self.STATUS_MODULES))}
        super().__init__(members)

    @property
    def cfg(self) -> HwConfig:
        return self._cfg

    @property
    def params(self) -> RtlParams:
        return self._p

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        d = p.token_depth
        m.submodules.load = load = LoadUnit(p)
        m.submodules.compute = compute = Compute(p)
        m.submodules.store = store = StoreUnit(p)
        units = {"load": load, "compute": compute, "store": store}
        m.submodules.fetch = fetch = _fetch(p, units)
        m.submodules.arbiter = arb = DramArbiter(p.dram_addr_bits, p.burst_bytes_bits,
                                                 p.beat_bits, p.cfg.dram.max_outstanding,
                                                 p.cfg.dram.arbiter)
        # Per-module issue/retire strobes, for testbenches that trace instruction timelines.
        self.trace_points = {name: (u.issue, u.retire) for name, u in units.items()}
        for q in QUEUES:
            cq = CommandQueue(p.insn_layout, p.cmd_depth, pre_bits=fetch.pre_bits(q))
            m.submodules[f"{q}_cmd_queue"] = cq
            wiring.connect(m, getattr(fetch, f"cmd_{q}"), cq.w)
            wiring.connect(m, cq.r, units[q].cmd)
            m.d.comb += [cq.w_pre.eq(getattr(fetch, f"pre_{q}")), units[q].cmd_pre.eq(cq.r_pre)]
            m.d.comb += [getattr(fetch, f"room_{q}").eq(cq.room),
                         getattr(fetch, f"room_next_{q}").eq(cq.room_next)]
            if self._status and q in self.STATUS_MODULES:
                self._module_status(m, self.STATUS_MODULES.index(q), units[q], cq)
        tq = {}
        for name in ("l2c", "c2l", "c2s", "s2c"):
            tq[name] = m.submodules[f"{name}_token_queue"] = TokenQueue(d)
        wiring.connect(m, load.l2c, tq["l2c"].push)
        wiring.connect(m, tq["l2c"].pop, compute.l2c)
        wiring.connect(m, compute.c2l, tq["c2l"].push)
        wiring.connect(m, tq["c2l"].pop, load.c2l)
        wiring.connect(m, compute.c2s, tq["c2s"].push)
        wiring.connect(m, tq["c2s"].pop, store.c2s)
        wiring.connect(m, store.s2c, tq["s2c"].push)
        wiring.connect(m, tq["s2c"].pop, compute.s2c)
        m.d.comb += [
            load.l2c_room.eq(tq["l2c"].room),
            store.s2c_room.eq(tq["s2c"].room),
            compute.c2l_room.eq(tq["c2l"].room),
            compute.c2s_room.eq(tq["c2s"].room),
            compute.c2l_room_next.eq(tq["c2l"].room_next),
            tq["c2s"].hold.eq(compute.c2s_hold),
        ]
        for name in ("l2c", "c2l", "s2c"):
            m.d.comb += tq[name].hold.eq(0)

        for name, unit in (("fetch", fetch), ("load", load), ("compute", compute),
                           ("store", store)):
            wiring.connect(m, unit.dram, getattr(arb, name))
        wiring.connect(m, arb.dram, wiring.flipped(self.dram))

        m.submodules.inp_buffer = inp = SramBuffer(p.buffers["inp"], transparent=False,
                                                   write_register=True)
        m.submodules.wgt_buffer = wgt = SramBuffer(p.buffers["wgt"], transparent=False,
                                                   write_register=True)
        m.submodules.out_buffer = out = SramBuffer(p.buffers["out"])
        wiring.connect(m, load.wr_inp, inp.w)
        wiring.connect(m, load.wr_wgt, wgt.w)
        wiring.connect(m, compute.rd_inp, inp.r)
        wiring.connect(m, compute.rd_wgt, wgt.r)
        wiring.connect(m, compute.wr_out, out.w)
        wiring.connect(m, store.rd_out, out.r)
        if p.cfg.store.postproc:
            # The store's copy of the acc buffer: the acc RAM's two ports are the compute
            # module's (``hw.postproc``). Read like the out buffer (transparent), so the store's
            # first read sees the compute module's last write as it sees it there.
            m.submodules.acc_copy = acc_copy = SramBuffer(
                p.buffers["acc"], read_lanes=_acc_copy_read_lanes(p))
            wiring.connect(m, compute.wr_acc_copy, acc_copy.w)
            wiring.connect(m, store.rd_acc, acc_copy.r)

        running = Signal()
        m.d.comb += [
            fetch.start.eq(self.start),
            fetch.insn_addr.eq(self.insn_addr),
            fetch.insn_count.eq(self.insn_count),
        ]
        with m.If(self.start):
            m.d.sync += [running.eq(1), self.done.eq(0), self.cycles.eq(0)]
        with m.Elif(running):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            with m.If(compute.finish):
                m.d.sync += [running.eq(0), self.done.eq(1)]
        return m


    def _module_status(self, m: Module, bit: int, unit: LoadUnit | Compute | StoreUnit,
                       cq: CommandQueue) -> None:
        """``active`` and ``stalled`` of one module, from its issue and retire strobes and its
        command queue's handshake: an instruction runs from its issue through its retire (the
        next one issues after that cycle), and is held from its take off the queue until its
        issue."""
        running = Signal(name=f"status_running_{bit}")
        held = Signal(name=f"status_held_{bit}")
        active = Signal(name=f"status_active_{bit}")
        taken = cq.r.valid & cq.r.ready
        m.d.comb += [
            active.eq(unit.issue | running),
            self.active[bit].eq(active),
            self.stalled[bit].eq((cq.r.valid | held) & ~active),
        ]
        m.d.sync += [running.eq((running | unit.issue) & ~unit.retire),
                     held.eq((held | taken) & ~unit.issue)]


def _fetch(p: RtlParams, units: dict[str, LoadUnit | Compute | StoreUnit]) -> Fetch:
    return Fetch(p, predecode={q: u.predecode for q, u in units.items()})


def _acc_copy_read_lanes(p: RtlParams) -> int:
    """The store reads its copy of the acc buffer as it reads the out buffer."""
    return p.buffers["out"].lanes


@dataclass(frozen=True)
class MemorySpec:
    """One memory of the design as Yosys maps it: ``depth`` words of ``width`` bits, one write
    port and one read port; ``name`` is its instance path (``compute.acc_buffer.bank0``)."""

    name: str
    depth: int
    width: int


def memories(cfg: HwConfig) -> list[MemorySpec]:
    """Every memory :class:`Accelerator` ``(cfg)`` builds, without elaborating it: the buffers'
    banks (:meth:`hw.sram.SramBuffer.banks_of`), the command queues' entries (an instruction
    and what fetch predecodes for the queue) and fetch's two instruction buffers. Milliseconds
    (the units are constructed, not elaborated); ``tests/test_area_model.py`` checks the list
    against the memories of the generated Verilog.

    Raises
    ------
    ValueError
        The RTL cannot build ``cfg`` (:func:`hw.params.check_rtl_config`).
    """
    p = RtlParams.of(cfg)
    units = {"load": LoadUnit(p), "compute": Compute(p), "store": StoreUnit(p)}
    fetch = _fetch(p, units)
    for unit in (*units.values(), fetch):
        unit._MustUse__silence = True  # read for its parameters, never elaborated
    out: list[MemorySpec] = []

    def buffer(name: str, geom: BufferGeometry, read_lanes: int | None = None,
               store_bits: int | None = None) -> None:
        banks = SramBuffer.banks_of(geom, read_lanes)
        for b in range(banks):
            out.append(MemorySpec(f"{name}.bank{b}", geom.depth // banks,
                                  store_bits or geom.store_bits))

    buffer("fetch.buffer", p.insn_buffer)
    buffer("fetch.pre_buffer", p.insn_buffer, store_bits=fetch.pre_entry_bits)
    for q in QUEUES:
        out.append(MemorySpec(f"{q}_cmd_queue.mem", p.cmd_depth,
                              p.insn_bits + fetch.pre_bits(q)))
    buffer("compute.uop_buffer", p.buffers["uop"], uop_read_lanes(p))
    buffer("compute.acc_buffer", p.buffers["acc"])
    buffer("inp_buffer", p.buffers["inp"])
    buffer("wgt_buffer", p.buffers["wgt"])
    buffer("out_buffer", p.buffers["out"])
    if cfg.store.postproc:
        buffer("acc_copy", p.buffers["acc"], _acc_copy_read_lanes(p))
    return out
