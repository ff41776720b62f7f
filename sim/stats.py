"""Results of a timing simulation: ``SimStats`` and its Chrome trace-event (Perfetto) export."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.machine.actions import ActionCounts

__all__ = ["MODULES", "ModuleStats", "SimStats", "Slice"]

MODULES = ("fetch", "load", "compute", "store")

CMD_EMPTY = "cmd_empty"
"""Stall cause: waiting for an instruction (includes the idle tail after a module's last one)."""
DRAM_CONTENTION = "dram_contention"
"""Stall cause: waiting for the DRAM channel: a grant, a free slot among
``dram.max_outstanding``, or the data bus busy with other requesters' beats."""
DRAM_LATENCY = "dram_latency"
"""Stall cause: waiting for data granted and on its way (a read's access latency, a write's
response)."""
QUEUE_FULL = "queue_full"
"""Stall cause of fetch: the destination command queue is full."""


def pop_cause(queue: str) -> str:
    """Stall cause: waiting for a token in ``queue`` (e.g. ``"token load->compute"``)."""
    return f"token {queue}"


def push_cause(queue: str) -> str:
    """Stall cause: ``queue`` is full, so the token cannot be pushed downstream."""
    return f"full {queue}"


@dataclass
class ModuleStats:
    """Per-module cycle accounting: ``busy + sum(stalls.values()) == SimStats.cycles``.

    ``active`` counts the cycles the module runs an instruction, from its decode cycle through
    its last (DRAM waits inside it included); fetch's run from cycle 0 through its last
    dispatch. It is what the energy model charges a module's clock for
    (:mod:`accel.machine.energy`), and what the RTL counts (``hw.activity``).
    """

    busy: int = 0
    stalls: dict[str, int] = field(default_factory=dict)
    insns: int = 0
    active: int = 0

    def stall(self, cause: str, cycles: int) -> None:
        if cycles:
            self.stalls[cause] = self.stalls.get(cause, 0) + cycles

    @property
    def stall_total(self) -> int:
        return sum(self.stalls.values())

    def largest_stall(self) -> str | None:
        """The cause with the most stall cycles (None when the module never stalled)."""
        return max(self.stalls, key=lambda c: self.stalls[c]) if self.stalls else None

    def to_dict(self) -> dict[str, Any]:
        return {"busy": self.busy, "stalls": dict(self.stalls), "insns": self.insns,
                "active": self.active}


@dataclass(frozen=True)
class Slice:
    """One instruction's execution on a module: ``[start, end)`` in cycles."""

    module: str
    index: int
    name: str
    start: int
    end: int


@dataclass
class SimStats:
    """What the timing simulator measured.

    Attributes
    ----------
    cycles
        Cycle at which FINISH retired.
    modules
        ``fetch``, ``load``, ``compute``, ``store`` -> :class:`ModuleStats`.
    macs
        Multiply-accumulates the GEMM core performed (reset GEMMs do none).
    gemm_busy, alu_busy
        Cycles the GEMM core / ALU spent executing instructions.
    bytes_read, bytes_written
        Bytes read from / written to each on-chip buffer (uop, inp, wgt, acc, out).
    dram_bytes
        Bytes moved over the DRAM channel (instructions, loads and stores).
    dram_write_bytes, dram_transactions
        Of those, the bytes written; the transactions granted.
    dram_busy
        Cycles the DRAM data bus carried a beat.
    peak_dram_bytes_per_cycle
        The data bus's width (``dram.bytes_per_cycle``).
    insn_counts
        Instructions by opcode (``LOAD_INP``, ``GEMM``, ``ALU_ADD``, ...).
    dram_loaded, dram_stored
        DRAM bytes read per destination buffer (padding excluded) and written from out.
    actions
        Every action that costs energy (:mod:`accel.machine.actions`): the functional
        simulator's counts of the instructions retired, instruction fetch included.
    """

    cycles: int
    peak_macs_per_cycle: int
    clock_mhz: float
    modules: dict[str, ModuleStats]
    peak_dram_bytes_per_cycle: int = 0
    macs: int = 0
    gemm_busy: int = 0
    alu_busy: int = 0
    bytes_read: dict[str, int] = field(default_factory=dict)
    bytes_written: dict[str, int] = field(default_factory=dict)
    dram_bytes: int = 0
    dram_write_bytes: int = 0
    dram_transactions: int = 0
    dram_busy: int = 0
    insn_counts: dict[str, int] = field(default_factory=dict)
    dram_loaded: dict[str, int] = field(default_factory=dict)
    dram_stored: int = 0
    actions: ActionCounts = field(default_factory=ActionCounts)
    timeline: list[Slice] = field(default_factory=list, repr=False)
    counters: list[tuple[str, int, float]] = field(default_factory=list, repr=False)

    @property
    def gemm_utilization(self) -> float:
        """MACs performed / (cycles x peak MACs per cycle), 0..1."""
        if not self.cycles:
            return 0.0
        return self.macs / (self.cycles * self.peak_macs_per_cycle)

    @property
    def dram_bytes_per_cycle(self) -> float:
        """Achieved DRAM bandwidth over the whole run, bytes per cycle."""
        return self.dram_bytes / self.cycles if self.cycles else 0.0

    @property
    def dram_bandwidth_share(self) -> float:
        """Achieved DRAM bandwidth over the whole run as a share of the peak, 0..1."""
        peak = self.peak_dram_bytes_per_cycle
        return self.dram_bytes_per_cycle / peak if peak else 0.0

    @property
    def dram_gbytes_per_s(self) -> float:
        """Achieved DRAM bandwidth at the config's clock, GB/s."""
        return self.dram_bytes_per_cycle * self.clock_mhz / 1000.0

    @property
    def milliseconds(self) -> float:
        """Run time at the config's clock."""
        return self.cycles / (self.clock_mhz * 1000.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the timeline and counters are left to :meth:`write_trace`)."""
        return {
            "cycles": self.cycles,
            "milliseconds": self.milliseconds,
            "gemm_utilization": self.gemm_utilization,
            "macs": self.macs,
            "gemm_busy": self.gemm_busy,
            "alu_busy": self.alu_busy,
            "modules": {name: m.to_dict() for name, m in self.modules.items()},
            "bytes_read": dict(self.bytes_read),
            "bytes_written": dict(self.bytes_written),
            "dram_bytes": self.dram_bytes,
            "dram_write_bytes": self.dram_write_bytes,
            "dram_transactions": self.dram_transactions,
            "dram_busy": self.dram_busy,
            "dram_bytes_per_cycle": self.dram_bytes_per_cycle,
            "peak_dram_bytes_per_cycle": self.peak_dram_bytes_per_cycle,
            "dram_bandwidth_share": self.dram_bandwidth_share,
            "dram_gbytes_per_s": self.dram_gbytes_per_s,
            "insn_counts": dict(self.insn_counts),
            "dram_loaded": dict(self.dram_loaded),
            "dram_stored": self.dram_stored,
            "actions": self.actions.to_dict(),
        }

    def trace_events(self) -> list[dict[str, Any]]:
        """Chrome trace events: one track per module, counters for queues and DRAM.

        Timestamps are microseconds at the config's clock, so Perfetto shows real time; each
        slice's ``args`` carry the instruction index and its cycles.
        """
        us = 1.0 / self.clock_mhz
        events: list[dict[str, Any]] = [
            {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "accelerator"}},
        ]
        for tid, name in enumerate(MODULES):
            events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name",
                           "args": {"name": name}})
        tids = {name: tid for tid, name in enumerate(MODULES)}
        for s in self.timeline:
            events.append({
                "ph": "X", "pid": 1, "tid": tids[s.module], "name": s.name,
                "ts": s.start * us, "dur": (s.end - s.start) * us,
                "args": {"index": s.index, "start_cycle": s.start, "cycles": s.end - s.start},
            })
        for name, cycle, value in self.counters:
            events.append({"ph": "C", "pid": 1, "name": name, "ts": cycle * us,
                           "args": {"value": value}})
        return events

    def write_trace(self, path: str | Path) -> None:
        """Write Chrome trace-event JSON that Perfetto (ui.perfetto.dev) opens."""
        path = Path(path)
        data = {"traceEvents": self.trace_events(), "displayTimeUnit": "ns",
                "otherData": {"cycles": self.cycles, "clock_mhz": self.clock_mhz}}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
