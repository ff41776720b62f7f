"""Cycle costs of every instruction, written once.

The timing simulator takes its delays from here, and the RTL is built to take exactly these
cycles (tests compare them), so every formula is a function of the :class:`HwConfig` and the
instruction, with no tuned constants. Notation: ``bpc = dram.bytes_per_cycle``,
``L = dram.latency``, ``burst = dram.max_burst``.

DRAM transaction (one burst of ``b <= burst`` bytes; :mod:`accel.machine.memory` has the
channel's rules: grants, ``dram.max_outstanding`` transactions in flight, the in-order data bus).
With the bus idle, a read or a write takes, from its grant to its end::

    dram_cycles(b) = L + ceil(b / bpc)

Instruction fetch reads ``burst // 16`` instructions per transaction, then dispatches one
instruction per cycle into its module's command queue::

    fetch(k instructions) = dram_cycles(16 k) + k

LOAD / STORE: one decode cycle, then the DRAM transactions of ``memory.mem_bursts`` (row by
row, or the rows as one run with ``dram.merge_rows``), the first requested in the cycle after
the decode plus :func:`mem_setup_cycles` (a merged run's length: ``memory.MERGE_SETUP_CYCLES``;
a STORE ACC's post-processing pipeline filling: ``POSTPROC_SETUP_CYCLES``; the larger of the
two when both) and each next one in the cycle after the one before was granted; the DRAM part ends
when the last is done. A LOAD then writes its pad elements into SRAM at one element per cycle
(a zero-size LOAD writes none). With the channel to itself, bursts ``b_0 .. b_(n-1)`` are
granted at ``g_0 = 1`` and ``g_i = max(g_(i-1) + 1, done_(i-N))`` (a slot is free), and::

    mem = done_(n-1) + (rows * cols - y_size * x_size)     # LOAD padding only

with ``done_i`` from ``memory.DataBus``; at ``N = 1`` without merging this is the original
``1 + y_size * sum(dram_cycles(b) for b in the row's bursts) + padding``.

A put into a full bounded queue (command or token queue) completes when the consumer takes
an entry; the producer goes on ``QUEUE_FULL_RESUME_CYCLES`` = 1 cycle after that. A queue is
full when the entries it held at the start of the cycle plus those put since reach its depth
(an entry taken in the same cycle makes room only from the next)::

    resume = take_time + 1        (put into a full queue; else the put costs nothing)

GEMM and ALU: one decode cycle, one micro-op every ``ii`` cycles, then the pipeline drains::

    gemm = 1 + n_uops * gemm.ii + gemm.depth
    alu  = 1 + n_uops * ii_alu  + alu.depth
    ii_alu = alu.ii                 (an immediate operand: one acc read per micro-op)
           = max(alu.ii, 2)         (an acc operand: two reads through the one read port)

where ``n_uops = iter_out * iter_in * (uop_end - uop_bgn)``; an empty loop costs only the
decode cycle. FINISH costs the decode cycle. At ``alu.ii`` 1 an immediate ALU instruction's
consecutive micro-ops must write different acc tiles (the ALU forwards a result to the
micro-op two behind it at the earliest; fsim rejects the program otherwise).

The compute module reads each micro-op a cycle before it issues it, the first one in the cycle
before the decode, at the ``uop_bgn`` of the instruction then in front of the command queue.
A GEMM or ALU instruction with micro-ops that was not in front then - it arrived in an empty
queue in its decode cycle, or the compute instruction before it was decoded in the cycle
before (a single-cycle one) - issues its first micro-op a cycle late::

    + UOP_PREFETCH_MISS_CYCLES      (= 1, on such an instruction)

A program's cycles are at most its *serial* cycles (:func:`serial_cycles`), everything above
one after another: until FINISH some part of the machine is always in one of these activities
(a module or fetch waiting on a queue or the channel waits on one that is), so overlap can only
shorten the run.
"""

from __future__ import annotations

import functools
import threading

from accel.machine.config import HwConfig
from accel.machine.isa import INSN_BYTES, AluInsn, GemmInsn, Insn, MemInsn, MemType
from accel.machine.memory import (
    MERGE_SETUP_CYCLES,
    DataBus,
    burst_runs,
    dram_elem_bytes,
    merges,
)
from accel.machine.program import Program

__all__ = [
    "DECODE_CYCLES",
    "POSTPROC_SETUP_CYCLES",
    "QUEUE_FULL_RESUME_CYCLES",
    "UOP_PREFETCH_MISS_CYCLES",
    "alu_cycles",
    "alu_ii",
    "dram_cycles",
    "fetch_batch_size",
    "fetch_cycles",
    "gemm_cycles",
    "insn_compute_cycles",
    "mem_cycles",
    "mem_dram_cycles",
    "mem_elem_bytes",
    "mem_pad_cycles",
    "mem_setup_cycles",
    "serial_cycles",
]

DECODE_CYCLES = 1
"""Cycles a module spends decoding an instruction before it acts on it."""

QUEUE_FULL_RESUME_CYCLES = 1
"""Cycles after the consumer's take before a producer blocked on a full queue goes on."""

POSTPROC_SETUP_CYCLES = 5
"""Cycles a STORE ACC (``store.postproc``) waits after its decode before its first request:
the RTL reads the acc copy's first element (two registers: the block RAM's and one in the
fabric), shifts it, clips it and puts it in its queue, a cycle each, so that the first write
beat finds it ready (a write beat may come the cycle after its grant)."""

UOP_PREFETCH_MISS_CYCLES = 1
"""Extra cycles of a GEMM/ALU instruction whose first micro-op was not read ahead of its decode
(it was not in front of the compute command queue in the cycle before)."""


def dram_cycles(nbytes: int, cfg: HwConfig) -> int:
    """Cycles one DRAM transaction of ``nbytes`` holds the channel: latency plus beats."""
    return cfg.dram.latency + -(-nbytes // cfg.dram.bytes_per_cycle)


def fetch_batch_size(cfg: HwConfig) -> int:
    """Instructions read per fetch transaction."""
    return max(1, cfg.dram.max_burst // INSN_BYTES)


def fetch_cycles(k: int, cfg: HwConfig) -> int:
    """Cycles to fetch and dispatch ``k`` instructions read in one transaction."""
    return dram_cycles(k * INSN_BYTES, cfg) + k


def mem_elem_bytes(insn: MemInsn, cfg: HwConfig) -> int:
    """Bytes of one element (tile or micro-op word) a LOAD/STORE moves over DRAM."""
    return dram_elem_bytes(insn, cfg)


def mem_pad_cycles(insn: MemInsn) -> int:
    """Cycles a LOAD spends writing zero padding into SRAM (one element per cycle).

    A zero-size LOAD only carries tokens and writes no padding.
    """
    if insn.store or not (insn.y_size and insn.x_size):
        return 0
    return insn.rows * insn.cols - insn.y_size * insn.x_size


def mem_setup_cycles(insn: MemInsn, cfg: HwConfig) -> int:
    """Cycles between a LOAD/STORE's decode and the cycle before its first request: a merged
    run's setup, a STORE ACC's post-processing pipeline, the larger when both (the RTL does
    them side by side); 0 for everything else, and without data."""
    if not (insn.y_size and insn.x_size):  # no bursts (mem_bursts is empty)
        return 0
    post = insn.store and insn.mem_type is MemType.ACC
    return max(MERGE_SETUP_CYCLES if merges(insn, cfg) else 0,
               POSTPROC_SETUP_CYCLES if post else 0)


def mem_dram_cycles(insn: MemInsn, cfg: HwConfig) -> int:
    """Cycles from the cycle after a LOAD/STORE's decode to its last transaction's end, with the
    DRAM channel to itself (0 without data)."""
    return _bursts_done(*burst_runs(insn, cfg), mem_setup_cycles(insn, cfg), insn.store, cfg)


def _bursts_done(one: tuple[int, ...], runs: int, setup: int, write: bool,
                 cfg: HwConfig) -> int:
    """When the last of ``runs`` repeats of the bursts ``one`` (bytes, in order) is done,
    requested from cycle ``setup`` on, one a cycle, at most ``dram.max_outstanding`` not done
    (:class:`_BurstRuns`, remembered: a program's LOADs repeat a few row shapes, in many row
    counts)."""
    return _burst_runs(one, setup, write, cfg).done(runs)


class _BurstRuns:
    """The repeats of one run of bursts, stepped as far as a question needs.

    Every step is a max of sums, so once a run moves the whole state (the next request's
    cycle, the bus's free cycle, the last ``max_outstanding`` completions) by the same ``d``,
    each later run does too: the runs after it are added as ``d`` each, not stepped (the rows
    of a LOAD are one such run each). The runs stepped so far are kept, so the same row in
    another row count costs no more steps."""

    def __init__(self, one: tuple[int, ...], setup: int, write: bool, cfg: HwConfig) -> None:
        self._one, self._write = one, write
        self._bus = DataBus(cfg)
        self._outstanding = cfg.dram.max_outstanding
        self._done: list[int] = []  # every burst's completion so far
        self._cycle = setup  # the next request's
        self._before: tuple[int, ...] | None = None
        self.ends: list[int] = []  # when each run stepped so far is done
        self.step: int | None = None  # ``d``, once the runs repeat
        self._lock = threading.Lock()

    def done(self, runs: int) -> int:
        """When the last burst of ``runs`` runs is done (0 for none)."""
        with self._lock:
            while self.step is None and len(self.ends) < runs:
                self._run()
        if runs <= len(self.ends):
            return self.ends[runs - 1] if runs else 0
        return self.ends[-1] + (runs - len(self.ends)) * self.step  # type: ignore[operator]

    def _run(self) -> None:
        done, outstanding = self._done, self._outstanding
        for nbytes in self._one:
            if len(done) >= outstanding:
                self._cycle = max(self._cycle, done[len(done) - outstanding])
            done.append(self._bus.place(self._cycle, nbytes, self._write)[2])
            self._cycle += 1
        self.ends.append(done[-1])
        if len(done) < outstanding:
            return  # later requests wait on completions not made yet: not yet a state
        state = (self._cycle, self._bus.free, *done[-outstanding:])
        before, self._before = self._before, state
        if before is not None:
            d = self._cycle - before[0]
            if all(now - then == d for now, then in zip(state, before, strict=True)):
                self.step = d
                del done[:-outstanding]


@functools.lru_cache(maxsize=4096)
def _burst_runs(one: tuple[int, ...], setup: int, write: bool, cfg: HwConfig) -> _BurstRuns:
    return _BurstRuns(one, setup, write, cfg)


def mem_cycles(insn: MemInsn, cfg: HwConfig) -> int:
    """Total cycles of a LOAD/STORE with the DRAM channel to itself."""
    return DECODE_CYCLES + mem_dram_cycles(insn, cfg) + mem_pad_cycles(insn)


def gemm_cycles(insn: GemmInsn, cfg: HwConfig) -> int:
    """Cycles of a GEMM: decode, one micro-op per ``gemm.ii``, pipeline drain. A reset takes
    the same, zeros or (``from_acc``) copies of acc tiles alike: the copy reads acc where an
    accumulation reads it, in the same stage."""
    if not insn.n_uops:
        return DECODE_CYCLES
    return DECODE_CYCLES + insn.n_uops * cfg.gemm.ii + cfg.gemm.depth


def alu_cycles(insn: AluInsn, cfg: HwConfig) -> int:
    """Cycles of an ALU instruction: decode, one micro-op per :func:`alu_ii`, pipeline drain."""
    if not insn.n_uops:
        return DECODE_CYCLES
    return DECODE_CYCLES + insn.n_uops * alu_ii(insn.use_imm, cfg) + cfg.alu.depth


def alu_ii(use_imm: bool, cfg: HwConfig) -> int:
    """The ALU's initiation interval for an instruction: ``alu.ii`` with an immediate operand
    (one acc read per micro-op), at least 2 with an acc operand (two reads, one port)."""
    return cfg.alu.ii if use_imm else max(cfg.alu.ii, 2)


def insn_compute_cycles(insn: Insn, cfg: HwConfig) -> int:
    """Cycles of an instruction that does not touch DRAM (GEMM, ALU, FINISH)."""
    if isinstance(insn, GemmInsn):
        return gemm_cycles(insn, cfg)
    if isinstance(insn, AluInsn):
        return alu_cycles(insn, cfg)
    return DECODE_CYCLES


def serial_cycles(program: Program) -> int:
    """An upper bound on ``program``'s cycles: fetch, every instruction (each DRAM transaction
    with the channel to itself, a micro-op prefetch miss on every GEMM and ALU), and a
    :data:`QUEUE_FULL_RESUME_CYCLES` on every command and token put, one after another."""
    cfg = program.config
    n = len(program.insns)
    batch = fetch_batch_size(cfg)
    total = sum(fetch_cycles(min(batch, n - i), cfg) for i in range(0, n, batch))
    for insn in program.insns:
        if isinstance(insn, MemInsn):
            total += mem_cycles(insn, cfg)
        else:
            total += insn_compute_cycles(insn, cfg) + UOP_PREFETCH_MISS_CYCLES
        puts = 1 + sum(flag.startswith("push") for flag in insn.deps())
        total += puts * QUEUE_FULL_RESUME_CYCLES
    return total
