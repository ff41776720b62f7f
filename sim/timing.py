"""The SimPy cycle-level timing simulator.

One process per module - fetch, load, compute, store - each started by its own constructor;
bounded ``simpy.Store`` command queues and token queues sized from the config, so back-pressure
is real; one shared :class:`DramChannel`. Events are per instruction and per DRAM burst, never
per clock cycle. Every delay comes from :mod:`accel.machine.costs`.

Functional effects are applied by :class:`~sim.functional.FunctionalSimulator` when the timing
model retires each instruction, so the DRAM results are those of ``fsim`` for any correctly
synchronised program.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from accel.machine import costs
from accel.machine.config import HwConfig
from accel.machine.dram import Dram, place_program
from accel.machine.isa import (
    DEP_QUEUES,
    INSN_BYTES,
    AluInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    MemInsn,
    Module,
    TokenQueue,
    module_of,
)
from accel.machine.memory import (
    REQUESTERS,
    DataBus,
    Transaction,
    arbitrate,
    mem_bursts,
)
from accel.machine.program import Program, ProgramError, SimulationDeadlock, count_key
from sim.functional import FunctionalSimulator
from sim.stats import (
    CMD_EMPTY,
    DRAM_CONTENTION,
    DRAM_LATENCY,
    MODULES,
    QUEUE_FULL,
    ModuleStats,
    SimStats,
    Slice,
    pop_cause,
    push_cause,
)

__all__ = ["DramChannel", "Queue", "TimingSimulator", "run_timing"]

Process = Generator[simpy.Event, Any, Any]

_AFTER_ALL = 2
"""SimPy event priority processed after every URGENT (0) and NORMAL (1) event of a time step."""


class _EndOfCycle(simpy.Event):
    """An event processed after all other events of the current cycle, like a ``Timeout`` of 0
    with a lower priority: everything the cycle's events cause at the same time comes first."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, _AFTER_ALL)


@dataclass
class _Request:
    grant: simpy.Event
    nbytes: int
    write: bool
    asked: int


class DramChannel:
    """The DRAM channel of :mod:`accel.machine.memory`: ``dram.max_outstanding`` transactions
    in flight, one grant per cycle among the requests presented then, an in-order data bus.

    Arbitration happens at the end of a cycle, after every other event of that cycle, so that
    every request presented in the cycle (by whichever module, in whatever event order) competes,
    and a slot freed in the cycle (a transaction done) can be granted again in it. Nothing in the
    result depends on the order SimPy processes one cycle's events in, which is what lets the
    RTL's arbiter (``hw.dram``) match it.
    """

    def __init__(self, env: simpy.Environment, cfg: HwConfig, sim: TimingSimulator) -> None:
        self.env = env
        self.cfg = cfg
        self.sim = sim
        self.bus = DataBus(cfg)
        self.in_flight = 0
        self.last = -1
        self._waiting: dict[int, _Request] = {}
        self._next: int | None = None       # the cycle of the arbitration scheduled
        self.transactions: list[tuple[str, Transaction]] = []

    def request(self, who: str, nbytes: int, write: bool) -> Generator[simpy.Event, Any,
                                                                       Transaction]:
        """Present a request of ``nbytes`` (at most one burst); return its transaction once
        granted (its cycles are known at the grant: the bus is in order)."""
        req = _Request(self.env.event(), nbytes, write, int(self.env.now))
        self._waiting[REQUESTERS.index(who)] = req
        self._arbitrate_at(req.asked)
        txn = yield req.grant
        return txn

    def _arbitrate_at(self, cycle: int) -> None:
        if self._next is not None and self._next <= cycle:
            return          # an earlier arbitration reschedules itself while requests wait
        self._next = cycle
        now = int(self.env.now)
        if cycle == now:
            _EndOfCycle(self.env).callbacks.append(lambda _: self._grant(cycle))
        else:
            self.env.timeout(cycle - now).callbacks.append(
                lambda _: _EndOfCycle(self.env).callbacks.append(lambda _: self._grant(cycle)))

    def _grant(self, cycle: int) -> None:
        if self._next != cycle:
            return          # superseded by an earlier one
        self._next = None
        if not self._waiting or self.in_flight >= self.cfg.dram.max_outstanding:
            return          # a request or a freed slot schedules the next arbitration
        asking = [i in self._waiting for i in range(len(REQUESTERS))]
        who = arbitrate(asking, self.cfg.dram.arbiter, self.last)
        assert who is not None
        self.last = who
        req = self._waiting.pop(who)
        txn = self.bus.grant(cycle, req.nbytes, req.write)
        self.in_flight += 1
        self.env.timeout(txn.done - cycle).callbacks.append(self._release)
        stats = self.sim.stats
        stats.dram_bytes += req.nbytes
        stats.dram_write_bytes += req.nbytes if req.write else 0
        stats.dram_transactions += 1
        stats.dram_busy += txn.beats
        if self.sim.trace:
            self.transactions.append((REQUESTERS[who], txn))
        req.grant.succeed(txn)
        if self._waiting:
            self._arbitrate_at(cycle + 1)

    def _release(self, _: simpy.Event) -> None:
        self.in_flight -= 1
        self._arbitrate_at(int(self.env.now))


class Queue(simpy.Store):
    """A bounded FIFO that remembers how many entries left it in the current cycle (the moment
    an entry is handed to a getter, not when the getter's process resumes), for
    :meth:`TimingSimulator.put`."""

    def __init__(self, env: simpy.Environment, capacity: int) -> None:
        super().__init__(env, capacity)
        self._env = env
        self._taken = (-1, 0)
        self._arrivals: deque[float] = deque()
        self.arrived = -1.0
        """When the entry last handed to a getter entered the queue."""

    def taken_at(self, now: float) -> int:
        """Entries taken at time ``now``."""
        time, count = self._taken
        return count if time == now else 0

    def _do_put(self, event: simpy.resources.store.StorePut) -> bool | None:
        if len(self.items) < self.capacity:
            self._arrivals.append(self._env.now)
        return super()._do_put(event)

    def _do_get(self, event: simpy.resources.store.StoreGet) -> bool | None:
        if self.items:
            now = self._env.now
            self._taken = (now, self.taken_at(now) + 1)
            # Arrival times belong to the newest entries (an entry placed in ``items``
            # directly has none).
            known = len(self._arrivals) >= len(self.items)
            self.arrived = self._arrivals.popleft() if known else -1.0
        return super()._do_get(event)


class _Unit:
    """Shared plumbing of the instruction-executing modules."""

    name: str

    def __init__(self, sim: TimingSimulator, module: Module) -> None:
        self.sim = sim
        self.env = sim.env
        self.cfg = sim.cfg
        self.module = module
        self.name = module.name.lower()
        self.stats = sim.stats.modules[self.name]
        self.cmd_queue = sim.cmd_queues[module]
        self.waiting: str | None = "an instruction (command queue empty)"
        self.current: tuple[int, Insn] | None = None
        self.last_retired = -1
        self.process = self.env.process(self.run())

    def run(self) -> Process:
        while True:
            self.waiting = "an instruction (command queue empty)"
            asked = self.env.now
            index, insn = yield self.cmd_queue.get()
            self.sim.queue_level(f"{self.name} command queue", self.cmd_queue)
            self.stats.stall(CMD_EMPTY, self.env.now - asked)
            self.current = (index, insn)
            yield from self._pop_tokens(index, insn)
            self.waiting = None
            start = self.env.now
            yield from self.execute(index, insn)
            self.stats.active += int(self.env.now - start)
            self.sim.retire(self.module, index, insn, start)
            self.last_retired = index
            self.stats.insns += 1
            if isinstance(insn, FinishInsn):
                self.current = None
                self.sim.finish(index, insn)
                return
            yield from self._push_tokens(index, insn)
            self.current = None

    def _pop_tokens(self, index: int, insn: Insn) -> Process:
        for flag in insn.deps():
            if not flag.startswith("pop"):
                continue
            queue = DEP_QUEUES[(self.module, flag)]
            self.waiting = f"pop {queue.value}"
            asked = self.env.now
            yield self.sim.token_queues[queue].get()
            self.sim.queue_level(f"tokens {queue.value}", self.sim.token_queues[queue])
            self.stats.stall(pop_cause(queue.value), self.env.now - asked)

    def _push_tokens(self, index: int, insn: Insn) -> Process:
        for flag in insn.deps():
            if not flag.startswith("push"):
                continue
            queue = DEP_QUEUES[(self.module, flag)]
            self.waiting = f"push {queue.value} (queue full)"
            asked = self.env.now
            yield from self.sim.put(self.sim.token_queues[queue], index)
            self.sim.queue_level(f"tokens {queue.value}", self.sim.token_queues[queue])
            self.stats.stall(push_cause(queue.value), self.env.now - asked)
            self.sim.last_push[queue] = index
        self.waiting = None

    def execute(self, index: int, insn: Insn) -> Process:
        if isinstance(insn, MemInsn):
            yield from self._memory(insn)
            return
        cycles = costs.insn_compute_cycles(insn, self.cfg)
        self.stats.busy += cycles
        yield self.env.timeout(cycles)

    def _memory(self, insn: MemInsn) -> Process:
        self.stats.busy += costs.DECODE_CYCLES
        yield self.env.timeout(costs.DECODE_CYCLES)
        asks: list[int] = []
        txns: list[Transaction] = []
        bursts = mem_bursts(insn, self.cfg)
        setup = costs.mem_setup_cycles(insn, self.cfg)
        if setup:
            self.stats.busy += setup
            yield self.env.timeout(setup)
        for i, nbytes in enumerate(bursts):
            if i:       # the next request from the cycle after the grant
                yield self.env.timeout(1)
            asks.append(int(self.env.now))
            txns.append((yield from self.sim.dram.request(self.name, nbytes, insn.store)))
        if txns:
            yield self.env.timeout(txns[-1].done - self.env.now)
            account_dram_wait(self.stats, asks, txns, self.cfg.dram.latency)
        pad = costs.mem_pad_cycles(insn)
        if pad:
            self.stats.busy += pad
            yield self.env.timeout(pad)


class LoadModule(_Unit):
    """Runs LOAD INP / LOAD WGT: 2-D strided DMA from DRAM with zero padding."""

    def __init__(self, sim: TimingSimulator) -> None:
        super().__init__(sim, Module.LOAD)


class ComputeModule(_Unit):
    """Runs LOAD UOP / LOAD ACC, GEMM, ALU and FINISH."""

    def __init__(self, sim: TimingSimulator) -> None:
        super().__init__(sim, Module.COMPUTE)
        self.last_start = -2.0

    def execute(self, index: int, insn: Insn) -> Process:
        start = self.env.now
        arrived = self.cmd_queue.arrived
        previous, self.last_start = self.last_start, start
        if (isinstance(insn, (GemmInsn, AluInsn)) and insn.n_uops
                and (arrived == start or previous == start - 1)):
            # The first micro-op was not read ahead of the decode (``costs``).
            self.stats.busy += costs.UOP_PREFETCH_MISS_CYCLES
            yield self.env.timeout(costs.UOP_PREFETCH_MISS_CYCLES)
        yield from super().execute(index, insn)


class StoreModule(_Unit):
    """Runs STORE OUT: 2-D strided DMA from the out buffer to DRAM."""

    def __init__(self, sim: TimingSimulator) -> None:
        super().__init__(sim, Module.STORE)


class FetchModule:
    """Reads the instruction stream from DRAM in bursts and routes it to the command queues."""

    def __init__(self, sim: TimingSimulator, insns: list[Insn]) -> None:
        self.sim = sim
        self.env = sim.env
        self.insns = insns
        self.stats = sim.stats.modules["fetch"]
        self.dispatched = 0
        self.waiting: str | None = None
        self.process = self.env.process(self.run())

    def run(self) -> Process:
        batch = costs.fetch_batch_size(self.sim.cfg)
        n = len(self.insns)
        while self.dispatched < n:
            k = min(batch, n - self.dispatched)
            self.waiting = "DRAM"
            asked = int(self.env.now)
            txn = yield from self.sim.dram.request("fetch", k * INSN_BYTES, False)
            yield self.env.timeout(txn.done - self.env.now)
            account_dram_wait(self.stats, [asked], [txn], self.sim.cfg.dram.latency)
            for index in range(self.dispatched, self.dispatched + k):
                insn = self.insns[index]
                self.stats.busy += 1
                yield self.env.timeout(1)
                self.stats.active = int(self.env.now)   # from cycle 0 through this dispatch
                queue = self.sim.cmd_queues[module_of(insn)]
                self.waiting = f"room in the {module_of(insn).name.lower()} command queue"
                asked = self.env.now
                yield from self.sim.put(queue, (index, insn))
                self.sim.queue_level(f"{module_of(insn).name.lower()} command queue", queue)
                self.stats.stall(QUEUE_FULL, self.env.now - asked)
                self.dispatched += 1
                self.stats.insns += 1
            self.waiting = None


@dataclass
class _Finish:
    index: int
    cycle: int


class TimingSimulator:
    """Cycle-level model of the whole accelerator for one config.

    Parameters
    ----------
    cfg
        The hardware: queue depths, DRAM channel, pipeline parameters.
    trace
        Record queue-occupancy and DRAM-bandwidth counters for :meth:`SimStats.write_trace`
        (instruction slices are always recorded).
    """

    def __init__(self, cfg: HwConfig, trace: bool = False) -> None:
        self.cfg = cfg
        self.trace = trace

    # ------------------------------------------------------------------ hooks for modules
    def queue_level(self, name: str, store: simpy.Store) -> None:
        if self.trace:
            self.stats.counters.append((name, int(self.env.now), float(len(store.items))))

    def put(self, store: Queue, item: object) -> Process:
        """Put ``item`` into a bounded queue; a producer that found it full goes on one cycle
        after the consumer made room.

        "Full" counts the entries the queue held at the start of this cycle plus those put
        since: an entry taken in this same cycle does not make room until the next one, in
        whatever order SimPy processes the cycle's events. The RTL's producers see a queue's
        room only in its registered level (``hw.queues``), hence the extra cycle.
        """
        full = len(store.items) + store.taken_at(self.env.now) >= store.capacity
        yield store.put(item)
        if full:
            yield self.env.timeout(costs.QUEUE_FULL_RESUME_CYCLES)

    def retire(self, module: Module, index: int, insn: Insn, start: int) -> None:
        self.fsim.execute(insn, index, self.dram_image)
        self.stats.timeline.append(
            Slice(module.name.lower(), index, slice_name(insn), int(start), int(self.env.now))
        )
        account_buffers(self.stats, insn, self.cfg)
        if isinstance(insn, GemmInsn):
            self.stats.gemm_busy += costs.gemm_cycles(insn, self.cfg)
            if not insn.reset:
                cfg = self.cfg
                self.stats.macs += insn.n_uops * cfg.batch * cfg.block_in * cfg.block_out
        elif isinstance(insn, AluInsn):
            self.stats.alu_busy += costs.alu_cycles(insn, self.cfg)

    def finish(self, index: int, insn: Insn) -> None:
        self.finished = _Finish(index, int(self.env.now))
        self.done.succeed()

    # ------------------------------------------------------------------ run
    def run(self, program: Program, dram: Dram) -> SimStats:
        """Simulate ``program`` on ``dram`` (modified in place, exactly as ``fsim`` would).

        Raises
        ------
        ProgramError
            Static errors, or instructions or tokens left when FINISH retires.
        SimulationDeadlock
            The event queue ran dry before FINISH; the message says who waits on what.
        """
        cfg = self.cfg
        if program.config != cfg:
            raise ProgramError(
                f"program was built for config {program.config.name}, not {cfg.name}"
            )
        program.validate()
        place_program(program, dram)
        self.env = simpy.Environment()
        self.dram_image = dram
        self.fsim = FunctionalSimulator(cfg)
        self.stats = SimStats(
            cycles=0,
            peak_macs_per_cycle=cfg.peak_macs_per_cycle,
            clock_mhz=cfg.clock_mhz,
            modules={name: ModuleStats() for name in MODULES},
            peak_dram_bytes_per_cycle=cfg.dram.bytes_per_cycle,
        )
        self.finished: _Finish | None = None
        self.done = self.env.event()
        self.last_push: dict[TokenQueue, int] = {}
        self.cmd_queues = {m: Queue(self.env, cfg.queues.cmd_depth) for m in Module}
        self.token_queues = {q: Queue(self.env, cfg.queues.token_depth) for q in TokenQueue}
        self.dram = DramChannel(self.env, cfg, self)
        self.fetch = FetchModule(self, program.insns)
        self.units = {
            Module.LOAD: LoadModule(self),
            Module.COMPUTE: ComputeModule(self),
            Module.STORE: StoreModule(self),
        }
        try:
            self.env.run(until=self.done)
        except RuntimeError as exc:
            if self.finished is not None or "until" not in str(exc):
                raise
            raise SimulationDeadlock(self._deadlock_report()) from None
        finished = self.finished
        assert finished is not None
        # Let anything still runnable drain, then report what FINISH left behind.
        self.env.run()
        self._check_leftovers(finished.index)
        self.stats.cycles = finished.cycle
        if self.trace:
            self.stats.counters.extend(bandwidth_track(
                (t.first_beat, t.end_beats, t.nbytes) for _, t in self.dram.transactions))
        self.stats.insn_counts = dict(self.fsim.stats.insn_counts)
        self.stats.actions = self.fsim.stats.actions
        self.stats.actions.add_fetch(len(program.insns), cfg)
        self.stats.dram_loaded = dict(self.fsim.stats.bytes_loaded)
        self.stats.dram_stored = self.fsim.stats.bytes_stored
        for m in self.stats.modules.values():
            m.stall(CMD_EMPTY, finished.cycle - m.busy - m.stall_total)
        return self.stats

    def _check_leftovers(self, finish_index: int) -> None:
        for module, unit in self.units.items():
            left = [i for i, _ in self.cmd_queues[module].items]
            if unit.current is not None:
                left.insert(0, unit.current[0])
            if left:
                raise ProgramError(
                    f"FINISH at instruction {finish_index} retired with {len(left)} "
                    f"{unit.name} instruction(s) never run, from instruction {min(left)}"
                )
        if self.fetch.dispatched < len(self.fetch.insns):
            raise ProgramError(
                f"FINISH at instruction {finish_index} retired with "
                f"{len(self.fetch.insns) - self.fetch.dispatched} instruction(s) never fetched"
            )
        left_tokens = [
            f"{q.value}={len(s.items)} (last pushed by instruction {self.last_push.get(q, '?')})"
            for q, s in self.token_queues.items()
            if s.items
        ]
        if left_tokens:
            raise ProgramError(
                f"FINISH at instruction {finish_index} left tokens in {', '.join(left_tokens)}"
            )

    def _deadlock_report(self) -> str:
        parts = []
        for unit in self.units.values():
            if unit.current is None:
                parts.append(f"{unit.name} waits for {unit.waiting}")
            else:
                index, insn = unit.current
                parts.append(
                    f"{unit.name} waits at instruction {index} ({count_key(insn)}) to "
                    f"{unit.waiting}"
                )
        fetch = self.fetch
        if fetch.dispatched < len(fetch.insns):
            parts.append(
                f"fetch waits for {fetch.waiting} at instruction {fetch.dispatched}"
            )
        else:
            parts.append(f"fetch has dispatched all {len(fetch.insns)} instructions")
        tokens = " ".join(f"{q.value}={len(s.items)}" for q, s in self.token_queues.items())
        return f"deadlock at cycle {int(self.env.now)}: {'; '.join(parts)}; tokens: {tokens}"


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint ``[lo, hi)`` cycle intervals covering the same cycles."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(i for i in intervals if i[1] > i[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Cycles in both of two sorted, disjoint interval lists."""
    total, j = 0, 0
    for lo, hi in a:
        while j < len(b) and b[j][1] <= lo:
            j += 1
        k = j
        while k < len(b) and b[k][0] < hi:
            total += min(hi, b[k][1]) - max(lo, b[k][0])
            k += 1
    return total


def account_dram_wait(stats: ModuleStats, asks: list[int], txns: list[Transaction],
                      latency: int) -> None:
    """Split a module's cycles from its first DRAM request to its last transaction's end.

    Each cycle is ``busy`` when one of its own beats is on the bus; else a DRAM *latency* stall
    when one of its transactions is within its access latency (a read's ``L`` cycles from the
    grant, a write's wait for its response); else a DRAM *contention* stall (waiting for a grant,
    for a free slot, or for the bus to carry other requesters' beats first).
    """
    beats = _union([(t.first_beat, t.end_beats) for t in txns])
    waiting = _union([(t.end_beats, t.done) if t.write else (t.granted, t.granted + latency)
                      for t in txns])
    busy = sum(hi - lo for lo, hi in beats)
    latent = sum(hi - lo for lo, hi in waiting) - _overlap(waiting, beats)
    span = txns[-1].done - asks[0]
    stats.busy += busy
    stats.stall(DRAM_LATENCY, latent)
    stats.stall(DRAM_CONTENTION, span - busy - latent)


BANDWIDTH_TRACK = "dram bytes/cycle"


def bandwidth_track(txns: Iterable[tuple[int, int, int]]) -> list[tuple[str, int, float]]:
    """The data bus's bytes per cycle over time, from the transactions' ``(first_beat,
    end_beats, nbytes)`` in grant order: each transaction's rate from its first beat, 0 after
    its last unless the next one's beats follow at once."""
    rows = np.array(list(txns), dtype=np.int64).reshape(-1, 3)
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    first, end, nbytes = rows[:, 0], rows[:, 1], rows[:, 2]
    gap = np.ones(len(rows), bool)
    gap[:-1] = first[1:] > end[:-1]
    # Each transaction's rate, then (where a gap follows) its zero, in that order.
    cycles = np.stack([first, end], axis=1).ravel()
    values = np.stack([nbytes / (end - first), np.zeros(len(rows))], axis=1).ravel()
    keep = np.stack([np.ones(len(rows), bool), gap], axis=1).ravel()
    return list(zip(itertools.repeat(BANDWIDTH_TRACK), cycles[keep].tolist(),
                    values[keep].tolist()))


def slice_name(insn: Insn) -> str:
    """A trace slice's name for ``insn``: opcode, operand and shape."""
    if isinstance(insn, MemInsn):
        return f"{insn.opcode.name} {insn.mem_type.name} {insn.y_size}x{insn.x_size}"
    if isinstance(insn, (GemmInsn, AluInsn)):
        if isinstance(insn, GemmInsn):
            head = "GEMM reset from acc" if insn.from_acc else "GEMM reset" if insn.reset \
                else "GEMM"
        else:
            head = f"ALU {insn.alu_op.name}"
        return f"{head} {insn.iter_out}x{insn.iter_in}x{insn.uop_end - insn.uop_bgn}"
    return insn.opcode.name


def _add(d: dict[str, int], key: str, n: int) -> None:
    if n:
        d[key] = d.get(key, 0) + n


def account_buffers(stats: SimStats, insn: Insn, cfg: HwConfig) -> None:
    """On-chip buffer traffic of one instruction, in bytes."""
    rd, wr = stats.bytes_read, stats.bytes_written
    if isinstance(insn, MemInsn):
        buf = insn.mem_type.buffer
        if insn.store:
            _add(rd, buf, insn.y_size * insn.x_size * cfg.tile_bytes(buf))
        else:
            _add(wr, buf, insn.sram_elems * cfg.tile_bytes(buf))
        return
    if not isinstance(insn, (GemmInsn, AluInsn)):
        return
    n = insn.n_uops
    _add(rd, "uop", n * cfg.uop_bytes)
    _add(wr, "acc", n * cfg.acc_tile_bytes)
    _add(wr, "out", n * cfg.out_tile_bytes)
    if isinstance(insn, GemmInsn):
        if insn.from_acc:
            _add(rd, "acc", n * cfg.acc_tile_bytes)
        if not insn.reset:
            _add(rd, "inp", n * cfg.inp_tile_bytes)
            _add(rd, "wgt", n * cfg.wgt_tile_bytes)
            _add(rd, "acc", n * cfg.acc_tile_bytes)
    else:
        _add(rd, "acc", n * cfg.acc_tile_bytes * (1 if insn.use_imm else 2))


def run_timing(program: Program, dram: Dram, trace: bool = False) -> SimStats:
    """Simulate ``program`` with a fresh :class:`TimingSimulator` for its config."""
    return TimingSimulator(program.config, trace=trace).run(program, dram)
