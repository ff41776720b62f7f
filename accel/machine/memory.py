"""The DRAM channel: who may ask for it, who gets it, and when a granted transaction's data
moves. The one description that the timing simulator (``sim.timing.DramChannel``), the RTL's
arbiter (``hw.dram``) and the RTL's DRAM models (``hw.dram_model`` and the Verilator harness
``hw/harness/main.cpp``) follow; ``tests/test_hw_cosim.py`` runs all of them against each other.

Notation: ``L = dram.latency``, ``bpc = dram.bytes_per_cycle``, ``N = dram.max_outstanding``;
a transaction of ``b`` bytes has ``beats(b) = ceil(b / bpc)`` beats.

**Requests and grants.** Four requesters (:data:`REQUESTERS`: fetch, load, compute, store) each
present at most one request at a time. In every cycle in which fewer than ``N`` transactions are
in flight, the arbiter grants one of the requests presented in that cycle (at its end):

- ``priority``: the first in :data:`REQUESTERS` order;
- ``round_robin``: the first after the one granted last, in that order, cyclically (so a
  requester that asks waits at most one grant of each of the others).

A requester granted in cycle ``g`` may present its next request from cycle ``g + 1``.

**The data bus** carries one beat a cycle, the transactions' beats in the order they were
granted, each transaction's beats back to back. Transaction ``k``, granted in cycle ``g``::

    read:   first beat  d_k = max(g + L, e_(k-1))        write:  d_k = max(g + 1, e_(k-1))
    beats in cycles d_k .. e_k - 1, with e_k = d_k + beats(b)
    read:   done in cycle e_k (its data has all arrived)
    write:  done in cycle e_k + L - 1 (its response: L - 1 cycles after the last beat)

A transaction in flight holds one of the ``N`` slots until it is done; a grant may reuse the
slot in that same cycle. So with the bus idle a read or a write takes ``L + beats(b)`` cycles
from its grant to its end, and with ``N = 1`` the channel serves one transaction at a time,
each holding it ``L + beats(b)`` cycles: the original channel. Read beat ``j`` carries the bytes
``addr + j * bpc ..`` (the last may be partial); a write beat takes the write data in its cycle.

**LOAD and STORE** move their rows in transactions of at most ``dram.max_burst`` bytes
(:func:`mem_bursts`): each row on its own, or, with ``dram.merge_rows``, the rows as one run of
bytes when they can be (:func:`merges`: more than one row, contiguous in DRAM, each a whole
number of beats, so that no beat carries the end of one row and the start of the next). The
module requests its bursts one after another, the first in the cycle after the decode (a
merged run: :data:`MERGE_SETUP_CYCLES` later, once the RTL has formed its length
``y_size * x_size``), each next one from the cycle after the previous grant; the instruction's
DRAM part ends when the last transaction is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from accel.machine.config import HwConfig
from accel.machine.isa import MemInsn

__all__ = ["MERGE_SETUP_CYCLES", "REQUESTERS", "DataBus", "Transaction", "arbitrate", "beats",
           "burst_runs", "dram_elem_bytes", "mem_bursts", "merges"]

REQUESTERS = ("fetch", "load", "compute", "store")
"""The DRAM channel's requesters, in fixed-priority order (first wins)."""

MERGE_SETUP_CYCLES = 2
"""Cycles a merged LOAD/STORE waits after its decode before its first request: the RTL forms
the run's length (``y_size * x_size`` elements, a multiply in LUTs, then a compare with a
burst) in registers first."""


def beats(nbytes: int, cfg: HwConfig) -> int:
    """Data beats of a transaction of ``nbytes``."""
    return -(-nbytes // cfg.dram.bytes_per_cycle)


def arbitrate(asking: Sequence[bool], arbiter: str, last: int) -> int | None:
    """Which of :data:`REQUESTERS` (by index) is granted among those ``asking``.

    ``last`` is the index granted last (``-1`` before any grant); only ``round_robin`` reads it.
    None when nobody asks.
    """
    n = len(REQUESTERS)
    order = range(n) if arbiter == "priority" else [(last + 1 + i) % n for i in range(n)]
    return next((i for i in order if asking[i]), None)


@dataclass(frozen=True)
class Transaction:
    """The cycles of one granted transaction (see the module docstring)."""

    granted: int
    first_beat: int
    end_beats: int
    done: int
    nbytes: int
    write: bool

    @property
    def beats(self) -> int:
        return self.end_beats - self.first_beat


class DataBus:
    """The in-order data bus: what each grant leads to, given those before it."""

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        self.free = 0
        """The first cycle in which the bus carries no granted transaction's beat."""

    def grant(self, cycle: int, nbytes: int, write: bool) -> Transaction:
        """Place the beats of a transaction granted in ``cycle``; return its cycles."""
        return Transaction(cycle, *self.place(cycle, nbytes, write), nbytes, write)

    def place(self, cycle: int, nbytes: int, write: bool) -> tuple[int, int, int]:
        """:meth:`grant`'s cycles alone: its first beat, the end of its beats, done."""
        latency = self.cfg.dram.latency
        first = max(cycle + (1 if write else latency), self.free)
        end = first + beats(nbytes, self.cfg)
        self.free = end
        return first, end, end + latency - 1 if write else end


def dram_elem_bytes(insn: MemInsn, cfg: HwConfig) -> int:
    """Bytes of one element of a LOAD/STORE on the DRAM side: a tile or micro-op word of its
    buffer; an out tile for every STORE (a STORE ACC narrows acc tiles to out tiles)."""
    return cfg.out_tile_bytes if insn.store else cfg.tile_bytes(insn.mem_type.buffer)


def merges(insn: MemInsn, cfg: HwConfig) -> bool:
    """A LOAD/STORE whose rows move as one run: ``dram.merge_rows`` is on and it has more than
    one row, contiguous in DRAM (``x_stride == x_size``), each a whole number of beats."""
    row = insn.x_size * dram_elem_bytes(insn, cfg)
    return (cfg.dram.merge_rows and insn.y_size > 1 and insn.x_stride == insn.x_size
            and row > 0 and row % cfg.dram.bytes_per_cycle == 0)


def mem_bursts(insn: MemInsn, cfg: HwConfig) -> list[int]:
    """Byte sizes of the DRAM transactions of a LOAD/STORE, in order (empty when no data).

    Each row of ``x_size`` elements is split into bursts of ``dram.max_burst`` bytes; when the
    rows merge (:func:`merges`), the ``y_size`` rows are one run of ``y_size * x_size``
    elements split the same way.
    """
    one, runs = burst_runs(insn, cfg)
    return list(one) * runs


def burst_runs(insn: MemInsn, cfg: HwConfig) -> tuple[tuple[int, ...], int]:
    """:func:`mem_bursts` as the bursts of one run (a row, or the merged rows) and how many
    runs repeat them."""
    row = insn.x_size * dram_elem_bytes(insn, cfg)
    if not insn.y_size or not row:
        return (), 0
    burst = cfg.dram.max_burst
    runs, size = (1, insn.y_size * row) if merges(insn, cfg) else (insn.y_size, row)
    return (burst,) * (size // burst) + ((size % burst,) if size % burst else ()), runs
