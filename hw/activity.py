"""Activity counters of the RTL: the design's own signals, counted in simulation.

Each :class:`Probe` names existing signals of the design by their path under ``top`` (the
names Amaranth gives them, which its Verilog keeps) and counts, in every cycle of a run, the
set bits of one signal (or its value) where some others hold given values. Nothing is added
to the design: the Amaranth engine reads the signals from its testbench
(:class:`AmaranthCounters`), the Verilator engine counts them in the simulation wrapper
through hierarchical references (:func:`verilog_counters`, ``hw.verilator.wrapper_verilog``).
A run counts its cycles 0 up to the one FINISH retires in, the timing simulator's
``SimStats.cycles`` of them. A GEMM or ALU result is written up to
``hw.params.WRITE_AFTER_LAST`` cycles after its instruction's last cycle, which may be after
FINISH's (FINISH may decode in the next cycle): the acc and out writes of results are counted
a cycle ahead of their write enable, where the result is formed (``compute.wb_valid``, which
``compute.w_valid`` registers unless LOAD ACC is writing), at most a cycle after the
instruction's last, so within the run.

:func:`probes` lists them, each under the :class:`accel.machine.actions.ActionCounts` count it
checks (that module's docstring defines every count by these signals); :func:`action_counts`
turns a run's counter values and its DRAM model's counts into an ``ActionCounts``, and
:func:`active_cycles` gives each module's active cycles. To count a new buffer or port, add
its probes here (the signal path and the conditions) and its count in
``accel.machine.actions``; ``tests/test_energy_rtl.py`` then checks the two against each
other on random programs and a compiled layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accel.machine.actions import ActionCounts
from accel.machine.config import HwConfig
from accel.machine.isa import AluOp
from hw.params import writeback_stage

__all__ = ["COUNTER_BITS", "AmaranthCounters", "Probe", "action_counts", "active_cycles",
           "probes", "verilog_counters"]

COUNTER_BITS = 64
"""Width of each counter in the Verilator wrapper."""

_CMD_QUEUES = ("load", "compute", "store")
_TOKEN_QUEUES = ("l2c", "c2l", "c2s", "s2c")


@dataclass(frozen=True)
class Probe:
    """One counter: per cycle, the set bits of ``signal`` (``ones``) or its unsigned value
    (``value``), where every ``(path, value)`` of ``when`` holds.

    ``count`` is the :class:`~accel.machine.actions.ActionCounts` count it adds to, as
    ``field`` or ``field.key`` (``reads.acc``), or ``active.<module>`` for active cycles;
    several probes may add to one count.
    """

    count: str
    signal: str
    when: tuple[tuple[str, int], ...] = ()
    mode: str = "ones"


def probes(cfg: HwConfig) -> tuple[Probe, ...]:
    """The counters of ``cfg``'s design (the GEMM's acc read stage depends on its depth)."""
    gemm = (("compute.alu_q", 0), ("compute.reset_q", 0))
    alu = (("compute.alu_q", 1),)
    acc_read = writeback_stage(cfg, "gemm") - 3    # stage of the GEMM's acc[dst] read
    # A result's write, in the cycle before its write enable (module docstring).
    result = (("compute.engine.writing_acc", 0),)
    out: list[Probe] = [
        Probe("gemm_uops", "compute.v1", gemm),
        Probe("gemm_reset_uops", "compute.v1", (("compute.alu_q", 0), ("compute.reset_q", 1))),
        *(Probe(f"alu_uops.{op.name}", "compute.v1", (*alu, ("compute.op_q", int(op))))
          for op in AluOp),
        Probe("reads.uop", "compute.v1"),
        Probe("reads.inp", "compute.v1", gemm),
        Probe("reads.wgt", "compute.v1", gemm),
        Probe("reads.acc", f"compute.v{acc_read}", gemm),
        Probe("reads.acc", "compute.v3", alu),
        Probe("reads.acc", "compute.v2", (*alu, ("compute.use_imm_q", 0))),
        Probe("writes.acc", "compute.wb_valid", result),
        Probe("writes.acc", "compute.w_load"),
        Probe("writes.out", "compute.wb_valid", result),
        Probe("writes.uop", "compute.engine.wr_uop__en"),
        Probe("writes.inp", "load.wr_inp__en"),
        Probe("writes.wgt", "load.wr_wgt__en"),
        Probe("writes.insn", "fetch.w_en"),
        Probe("reads.insn", "fetch.dispatch"),
        *(Probe(f"cmd_pushes.{q}", f"{q}_cmd_queue.w_fire") for q in _CMD_QUEUES),
        *(Probe(f"cmd_pops.{q}", f"{q}_cmd_queue.r_fire") for q in _CMD_QUEUES),
        *(Probe(f"token_pushes.{q}", f"{q}_token_queue.pushed") for q in _TOKEN_QUEUES),
        *(Probe(f"token_pops.{q}", f"{q}_token_queue.popped") for q in _TOKEN_QUEUES),
        Probe("active.fetch", "fetch.busy"),
    ]
    sent = (("store.engine.sending", 1), ("store.engine.completes", 1))
    if cfg.store.postproc:
        out += [Probe("reads.out", "store.engine.step", (*sent, ("store.engine.post_q", 0)),
                      "value"),
                Probe("reads.acc_copy", "store.engine.step", (*sent, ("store.engine.post_q", 1)),
                      "value"),
                Probe("writes.acc_copy", "compute.wb_valid", result),
                Probe("writes.acc_copy", "compute.w_load")]
    else:
        out.append(Probe("reads.out", "store.engine.step", sent, "value"))
    if cfg.gemm.reset_from_acc:
        out.append(Probe("reads.acc", f"compute.v{acc_read}",
                         (("compute.alu_q", 0), ("compute.reset_q", 1),
                          ("compute.from_acc_q", 1))))
    for m in ("load", "compute", "store"):
        out += [Probe(f"active.{m}", f"{m}.control.start"),
                Probe(f"active.{m}", f"{m}.control.executing")]
    return tuple(out)


def _totals(cfg: HwConfig, counters: Sequence[int]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for probe, n in zip(probes(cfg), counters, strict=True):
        totals[probe.count] = totals.get(probe.count, 0) + int(n)
    return totals


def action_counts(cfg: HwConfig, counters: Sequence[int], dram: Mapping[str, int]
                  ) -> ActionCounts:
    """The :class:`ActionCounts` of a run from its counters (in :func:`probes`' order) and its
    DRAM model's counts (``dram_bytes_read``, ``dram_bytes_written``, ``dram_read_txns``,
    ``dram_write_txns``, ``dram_beats``)."""
    out = ActionCounts()
    for count, n in _totals(cfg, counters).items():
        name, _, key = count.partition(".")
        if name == "active":
            continue
        if key:
            getattr(out, name)[key] += n
        else:
            setattr(out, name, getattr(out, name) + n)
    out.macs = out.gemm_uops * cfg.batch * cfg.block_in * cfg.block_out
    out.insns = out.reads["insn"]
    out.dram_read_bytes = int(dram["dram_bytes_read"])
    out.dram_write_bytes = int(dram["dram_bytes_written"])
    out.dram_read_txns = int(dram["dram_read_txns"])
    out.dram_write_txns = int(dram["dram_write_txns"])
    out.dram_beats = int(dram["dram_beats"])
    return out


def active_cycles(cfg: HwConfig, counters: Sequence[int]) -> dict[str, int]:
    """Each module's active cycles (``ModuleStats.active``) from a run's counters."""
    totals = _totals(cfg, counters)
    return {m: totals[f"active.{m}"] for m in ("fetch", "load", "compute", "store")}


# ---------------------------------------------------------------------- Verilator
def _ref(path: str) -> str:
    """A hierarchical reference from the wrapper (whose instance of the design is ``top``)."""
    return f"top.{path}"


def verilog_counters(cfg: HwConfig, clear: str, clk: str = "clk") -> tuple[str, str]:
    """Verilog of the counters for the simulation wrapper: ``(ports, body)``.

    ``ports`` declares an output ``cnt<i>`` per probe; ``body`` counts, clearing every counter
    in a cycle where ``clear`` (the wrapper's registered ``start``) is high, so they count from
    program cycle 0 on.
    """
    ports, body = [], []
    for i, p in enumerate(probes(cfg)):
        ports.append(f"output reg [{COUNTER_BITS - 1}:0] cnt{i} = 0")
        value = (f"$countones({_ref(p.signal)})" if p.mode == "ones" else _ref(p.signal))
        cond = " && ".join(f"({_ref(path)} == {v})" for path, v in p.when) or "1'b1"
        body.append(f"  always @(posedge {clk}) if ({clear}) cnt{i} <= 0; "
                    f"else if ({cond}) cnt{i} <= cnt{i} + {COUNTER_BITS}'({value});")
    return ",\n  ".join(ports), "\n".join(body)


# ---------------------------------------------------------------------- Amaranth
class AmaranthCounters:
    """The probes of ``cfg`` on Amaranth's simulator: :meth:`sample` once per cycle.

    Parameters
    ----------
    cfg
        The config of the design.
    design
        The simulator's prepared design (``Simulator._design``: its fragments' names are
        the design's, the Verilog's).

    Raises
    ------
    RuntimeError
        A probe's signal is not in the design (renamed or removed): the message names it.
    """

    def __init__(self, cfg: HwConfig, design: Any) -> None:
        names: dict[tuple[tuple[str, ...], str], Any] = {}
        for info in design.fragments.values():
            for signal, name in info.signal_names.items():
                names.setdefault((tuple(info.name[1:]), name), signal)
        self.probes = probes(cfg)
        paths = list(dict.fromkeys(path for p in self.probes
                                   for path in (p.signal, *(w for w, _ in p.when))))
        self._signals = []
        for path in paths:
            *where, name = path.split(".")
            signal = names.get((tuple(where), name))
            if signal is None:
                raise RuntimeError(f"RTL counter: no signal {path} in the design (hw.activity "
                                   "names it)")
            self._signals.append(signal)
        # Per probe: the index of its signal, its conditions (index, value), whether it counts
        # set bits. The signals are read one by one: Amaranth evaluates a compound value (a
        # concatenation of them) by walking its tree on every read, several times slower.
        at = {path: i for i, path in enumerate(paths)}
        self._plan = [(at[p.signal], tuple((at[w], v) for w, v in p.when), p.mode == "ones")
                      for p in self.probes]
        self.counts = [0] * len(self.probes)

    def sample(self, ctx: Any) -> None:
        """Add this cycle's counts (``ctx`` a testbench context)."""
        values = [ctx.get(signal) for signal in self._signals]
        counts = self.counts
        for i, (signal, when, ones) in enumerate(self._plan):
            v = values[signal]
            if v and all(values[w] == want for w, want in when):
                counts[i] += v.bit_count() if ones else v
