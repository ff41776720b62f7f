"""A fast timing engine beside the SimPy reference (:mod:`sim.timing`), exact to the cycle.

:class:`FastTimingSimulator` gives the :class:`~sim.stats.SimStats` that
:class:`sim.timing.TimingSimulator` gives - every count, every stall, the timeline's slices and,
with ``trace``, the counters, in the same order - and raises the same errors with the same
messages, several times faster. It is the same model run by a lean event loop:

- **The same events in the same order.** SimPy processes a time step's events by priority, then
  in the order they were scheduled. Which of two modules retiring in one cycle comes first in
  the timeline (and in the functional simulator), and what a queue's occupancy counter reads
  when a producer and a consumer touch it in one cycle, depend on that order; the cycles
  themselves do not (``sim.timing``'s queue-full rule and end-of-cycle arbitration). So the
  processes here - generators, as the reference's - wait on the events the reference's wait on
  (timeouts, the put and get events of the command and token queues, DRAM grants), scheduled at
  the same points into a heap of ``(cycle, priority, sequence, callback, argument)``, with
  SimPy's priorities, and each event runs what the SimPy event's callbacks run.
- **Shortcuts that keep that order.** An event that would be the very next one popped - nothing
  in the heap at an earlier cycle, or at the same cycle and priority (such an event was
  scheduled earlier, so comes first) - is handled at once instead of a round trip through the
  heap: a process's own timeout, a queue's put or get event, the end-of-cycle arbitration of a
  request, and a DRAM grant, which SimPy processes right after its arbitration. A transaction's
  end is not an event: the arbitration counts the transactions still in flight, and when all
  ``dram.max_outstanding`` slots are taken it arbitrates next when the first of them is done
  (which is what SimPy's release event leads to; arbitrations in between find no free slot).
  Events without a callback in the reference (a process ending) are left out, and an
  arbitration for the next cycle is scheduled at once at its end-of-cycle priority (SimPy's
  detour through a timeout cannot change its place: only arbitrations run at that priority,
  and all of one cycle grant the same way). A deadlock is reported at the reference's last
  event: the last one here or the last transaction's end.
- **Nothing computed twice.** Everything that depends on an instruction alone - its module,
  tokens, cycle costs, DRAM bursts, slice name, buffer traffic, action counts - is computed
  once per distinct instruction (instructions that differ only in addresses, immediates, loop
  factors or post-processing share it) with the reference's own helpers; so are, by their
  arguments relative to the cycle, ``DataBus.grant``'s outcomes, ``account_dram_wait``'s splits
  and ``arbitrate``'s choices.
- **Optional data work.** With ``functional=True`` (the default) each retiring instruction is
  executed by :class:`~sim.functional.FunctionalSimulator`, as the reference does, so the DRAM
  image ends as ``fsim`` leaves it. With ``functional=False`` nothing is executed: the counts the
  reference takes from the functional simulator (``insn_counts``, ``actions``, ``dram_loaded``,
  ``dram_stored``) are counted from the instructions (:class:`RetireCounter`); the DRAM image
  only gets the program's regions and micro-op table, and the functional simulator's run-time
  checks (a buffer index out of range, a DRAM range beyond the image) are not made.

Use::

    from sim.fast_timing import FastTimingSimulator
    stats = FastTimingSimulator(cfg, trace=False).run(program, dram)        # as TimingSimulator
    stats = FastTimingSimulator(cfg, functional=False).run(program)         # timing only
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import operator
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

from accel.machine import costs
from accel.machine.actions import ActionCounts
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
from accel.machine.memory import REQUESTERS, DataBus, Transaction, arbitrate, mem_bursts
from accel.machine.program import Program, ProgramError, SimulationDeadlock, count_key
from sim.functional import FsimStats, FunctionalSimulator
from sim.stats import (
    CMD_EMPTY,
    MODULES,
    QUEUE_FULL,
    ModuleStats,
    SimStats,
    Slice,
    pop_cause,
    push_cause,
)
from sim.timing import account_buffers, account_dram_wait, bandwidth_track, slice_name

__all__ = ["FastTimingSimulator", "RetireCounter", "run_fast_timing"]

_NORMAL = 1
"""SimPy's priority of timeouts and triggered events."""
_END_OF_CYCLE = 2
"""``sim.timing._AFTER_ALL``: the DRAM channel's arbitration, after every other event."""

_TOKEN_QUEUES = tuple(TokenQueue)
_QUEUE_INDEX = {q: i for i, q in enumerate(_TOKEN_QUEUES)}
_WAIT_CMD = "an instruction (command queue empty)"

# Fields of each instruction class that nothing this engine computes from an instruction reads
# (costs, bursts, slice names, buffer traffic, action and byte counts): instructions that differ
# only in these share their static record. Any field not named here is part of the key.
_NOT_READ = {
    MemInsn: {"sram_base", "dram_base", "shift", "clip_lo", "clip_hi"},
    GemmInsn: {"dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in",
               "wgt_factor_out", "wgt_factor_in"},
    AluInsn: {"dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in", "imm"},
    FinishInsn: set(),
}
_KEY_FIELDS: dict[type, Callable[[Insn], Any]] = {
    cls: operator.attrgetter(*[f.name for f in dataclasses.fields(cls) if f.name not in skip])
    for cls, skip in _NOT_READ.items()
}

Process = Generator[None, Any, None]
Txn = tuple[int, int, int, int, int, bool]
"""A granted transaction: :class:`~accel.machine.memory.Transaction`'s fields, in order."""


# ---------------------------------------------------------------------- per instruction
class _Static:
    """What the engine needs of an instruction, computed once per distinct instruction."""

    __slots__ = ("actions", "alu_busy", "bursts", "count_key", "cycles", "finish", "gemm_busy",
                 "loaded", "macs", "memory", "module", "module_name", "name", "pad", "pops",
                 "pushes", "rd", "retired", "room", "setup", "stored", "uops", "wr", "write")

    def __init__(self, insn: Insn, cfg: HwConfig) -> None:
        module = module_of(insn)
        self.module = int(module)
        self.module_name = module.name.lower()
        flags = insn.deps()
        self.pops = tuple(_QUEUE_INDEX[DEP_QUEUES[(module, f)]] for f in flags
                          if f.startswith("pop"))
        self.pushes = tuple(_QUEUE_INDEX[DEP_QUEUES[(module, f)]] for f in flags
                            if f.startswith("push"))
        self.memory = isinstance(insn, MemInsn)
        self.finish = isinstance(insn, FinishInsn)
        self.uops = isinstance(insn, (GemmInsn, AluInsn)) and insn.n_uops > 0
        self.room = f"room in the {self.module_name} command queue"
        if isinstance(insn, MemInsn):
            self.cycles = 0
            self.bursts = tuple(mem_bursts(insn, cfg))
            self.write = insn.store
            self.setup = costs.mem_setup_cycles(insn, cfg)
            self.pad = costs.mem_pad_cycles(insn)
        else:
            self.cycles = costs.insn_compute_cycles(insn, cfg)
            self.bursts, self.write, self.setup, self.pad = (), False, 0, 0
        self.name = slice_name(insn)
        scratch = SimStats(cycles=0, peak_macs_per_cycle=0, clock_mhz=0.0, modules={})
        account_buffers(scratch, insn, cfg)
        self.rd = tuple(scratch.bytes_read.items())
        self.wr = tuple(scratch.bytes_written.items())
        self.gemm_busy = self.macs = self.alu_busy = 0
        if isinstance(insn, GemmInsn):
            self.gemm_busy = costs.gemm_cycles(insn, cfg)
            if not insn.reset:
                self.macs = insn.n_uops * cfg.batch * cfg.block_in * cfg.block_out
        elif isinstance(insn, AluInsn):
            self.alu_busy = costs.alu_cycles(insn, cfg)
        # What the functional simulator counts when it executes the instruction.
        self.count_key = count_key(insn)
        self.actions: ActionCounts | None = None       # filled in by RetireCounter
        self.loaded: tuple[str, int] | None = None
        self.stored = 0
        if isinstance(insn, MemInsn) and insn.y_size and insn.x_size:
            if insn.store:
                self.stored = insn.y_size * insn.x_size * cfg.out_tile_bytes
            else:
                buffer = insn.mem_type.buffer
                self.loaded = (buffer, insn.y_size * insn.x_size * cfg.tile_bytes(buffer))
        self.retired = 0


def _statics(insns: list[Insn], cfg: HwConfig,
             cache: dict[Any, _Static] | None = None) -> list[_Static]:
    """The static record of every instruction, shared by those alike (and with ``cache``)."""
    if cache is None:
        cache = {}
    out = []
    for insn in insns:
        cls = type(insn)
        getter = _KEY_FIELDS.get(cls)
        key = (cls, getter(insn)) if getter is not None else insn
        rec = cache.get(key)
        if rec is None:
            rec = cache[key] = _Static(insn, cfg)
        out.append(rec)
    return out


class RetireCounter:
    """The counts :class:`~sim.functional.FunctionalSimulator` keeps, without executing:
    ``insn_counts``, ``actions``, ``bytes_loaded`` and ``bytes_stored`` of a
    :class:`~sim.functional.FsimStats`, for the instructions :meth:`add` is given in retire
    order (``insn_counts`` keeps the order in which each key first retires, as fsim's does).

    Each distinct instruction's action counts are computed once (``ActionCounts.add_insn``) and
    multiplied out in :meth:`stats`.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        self.insn_counts: dict[str, int] = {}
        self._seen: dict[int, _Static] = {}
        self._cache: dict[Any, _Static] = {}

    def add_static(self, rec: _Static) -> None:
        counts = self.insn_counts
        counts[rec.count_key] = counts.get(rec.count_key, 0) + 1
        if not rec.retired:
            self._seen[id(rec)] = rec
        rec.retired += 1

    def add(self, insn: Insn) -> None:
        """Count one retired instruction."""
        (rec,) = _statics([insn], self.cfg, self._cache)
        _with_actions([rec], [insn], self.cfg)
        self.add_static(rec)

    def stats(self, n_fetched: int | None = None) -> FsimStats:
        """The counts so far as fsim's stats (with ``n_fetched`` instructions' fetch added to
        the actions, as ``FunctionalSimulator.run`` adds it)."""
        out = FsimStats()
        out.insn_counts = dict(self.insn_counts)
        actions = out.actions
        fields = [f.name for f in dataclasses.fields(ActionCounts)]
        for rec in self._seen.values():
            n = rec.retired
            if rec.actions is None:
                raise AssertionError("static record without action counts")
            for name in fields:
                delta = getattr(rec.actions, name)
                if isinstance(delta, dict):
                    total = getattr(actions, name)
                    for k, v in delta.items():
                        if v:
                            total[k] += v * n
                elif delta:
                    setattr(actions, name, getattr(actions, name) + delta * n)
            if rec.loaded is not None:
                out.bytes_loaded[rec.loaded[0]] += rec.loaded[1] * n
            out.bytes_stored += rec.stored * n
        if n_fetched is not None:
            actions.add_fetch(n_fetched, self.cfg)
        return out


def _with_actions(statics: list[_Static], insns: list[Insn], cfg: HwConfig) -> None:
    for rec, insn in zip(statics, insns, strict=True):
        if rec.actions is None:
            rec.actions = ActionCounts()
            rec.actions.add_insn(insn, cfg)


# ---------------------------------------------------------------------- queues and units
class _Queue:
    """A bounded FIFO with ``simpy.Store``'s put and get events and
    :class:`sim.timing.Queue`'s bookkeeping (entries taken this cycle, arrival times). One
    producer and one consumer each, so at most one blocked put and one waiting get."""

    __slots__ = ("arrivals", "arrived", "cap", "getter", "items", "name", "putter", "taken",
                 "taken_at")

    def __init__(self, capacity: int, name: str) -> None:
        self.items: deque[int] = deque()
        self.cap = capacity
        self.arrivals: deque[int] = deque()
        self.arrived = -1
        self.taken_at = -1
        self.taken = 0
        self.getter: Callable[[Any], Any] | None = None
        self.putter: tuple[Callable[[Any], Any], int] | None = None
        self.name = name


class _Unit:
    __slots__ = ("current", "last_start", "name", "stats", "waiting")

    def __init__(self, name: str, stats: ModuleStats) -> None:
        self.name = name
        self.stats = stats
        self.waiting: str | None = _WAIT_CMD
        self.current: int | None = None
        self.last_start = -2


class FastTimingSimulator:
    """Cycle-level model of the whole accelerator, :class:`sim.timing.TimingSimulator`'s,
    exactly, in a lean event loop (module docstring).

    Parameters
    ----------
    cfg
        The hardware.
    trace
        Record queue-occupancy and DRAM-bandwidth counters, as the reference does.
    functional
        Execute each retiring instruction on the DRAM image (the reference's behaviour). False:
        timing and counts only, the same stats.
    """

    def __init__(self, cfg: HwConfig, trace: bool = False, functional: bool = True) -> None:
        self.cfg = cfg
        self.trace = trace
        self.functional = functional

    def run(self, program: Program, dram: Dram | None = None) -> SimStats:
        """Simulate ``program`` on ``dram`` (modified in place, as ``fsim`` would, when
        ``functional``; a fresh empty image when None).

        Raises
        ------
        ProgramError
            Static errors, or instructions or tokens left when FINISH retires.
        SimulationDeadlock
            Nothing left to happen before FINISH; the message says who waits on what.
        """
        cfg = self.cfg
        if program.config != cfg:
            raise ProgramError(
                f"program was built for config {program.config.name}, not {cfg.name}"
            )
        program.validate()
        if dram is None:
            dram = Dram()
        place_program(program, dram)
        return _Run(cfg, self.trace, self.functional, program, dram).run()


def run_fast_timing(program: Program, dram: Dram | None = None, trace: bool = False,
                    functional: bool = True) -> SimStats:
    """Simulate ``program`` with a fresh :class:`FastTimingSimulator` for its config."""
    return FastTimingSimulator(program.config, trace=trace,
                               functional=functional).run(program, dram)


# ---------------------------------------------------------------------- the run
class _Run:
    """One simulation: the event heap, the queues, the DRAM channel and the four processes
    (the module docstring says how it follows SimPy's order)."""

    def __init__(self, cfg: HwConfig, trace: bool, functional: bool, program: Program,
                 dram: Dram) -> None:
        self.cfg = cfg
        self.trace = trace
        self.program = program
        self.insns = list(program.insns)
        self.statics = _statics(self.insns, cfg)
        self.dram_image = dram
        self.now = 0
        self.heap: list[tuple[int, int, int, Callable[[Any], Any], Any]] = []
        self.seq = itertools.count().__next__
        self.stats = SimStats(
            cycles=0,
            peak_macs_per_cycle=cfg.peak_macs_per_cycle,
            clock_mhz=cfg.clock_mhz,
            modules={name: ModuleStats() for name in MODULES},
            peak_dram_bytes_per_cycle=cfg.dram.bytes_per_cycle,
        )
        self.finished: tuple[int, int] | None = None
        self.last_push: dict[TokenQueue, int] = {}
        self.cmd_queues = [_Queue(cfg.queues.cmd_depth, f"{m.name.lower()} command queue")
                           for m in Module]
        self.token_queues = [_Queue(cfg.queues.token_depth, f"tokens {q.value}")
                             for q in _TOKEN_QUEUES]
        self.units = [_Unit(m.name.lower(), self.stats.modules[m.name.lower()])
                      for m in Module]
        self.dispatched = 0
        self.fetch_waiting: str | None = None
        # The DRAM channel (sim.timing.DramChannel).
        self.bus_free = DataBus(cfg).free   # the first cycle without a granted beat
        self.bus_outcomes: dict[tuple[int, bool, int], tuple[int, int, int]] = {}
        self.max_outstanding = cfg.dram.max_outstanding
        self.arbiter = cfg.dram.arbiter
        self.dones: list[int] = []          # the cycles the transactions in flight are done
        self.last_done = 0
        self.blocked_until = 0              # all slots taken before this cycle
        self.last_grant = -1
        self.asking = 0                     # the requesters asking, a bit each
        self.choices: dict[int, int] = {}   # arbitrate's answers by (asking, last grant)
        self.requests: dict[int, tuple[int, bool, Callable[[Any], Any]]] = {}
        self.next_arbitration: int | None = None
        self.beats: list[tuple[int, int, int]] = []  # with trace: (first, end, nbytes)
        self.waits: dict[tuple[Any, ...], tuple[int, tuple[tuple[str, int], ...]]] = {}
        if functional:
            self.fsim: FunctionalSimulator | None = FunctionalSimulator(cfg)
            self.counter: RetireCounter | None = None
        else:
            _with_actions(self.statics, self.insns, cfg)
            self.fsim = None
            self.counter = RetireCounter(cfg)

    # ------------------------------------------------------------------ the event loop
    def run(self) -> SimStats:
        heap = self.heap
        pop = heapq.heappop
        processes = [self._fetch()] + [self._unit(m) for m in Module]
        self.senders = [p.send for p in processes]
        for process in processes:
            next(process)               # to its "started" point: local set-up only
        for process in processes:       # SimPy's Initialize events: urgent, in creation order
            heapq.heappush(heap, (0, 0, self.seq(), process.send, None))
        while heap:
            try:
                while heap:
                    self.now, _, _, callback, arg = pop(heap)
                    callback(arg)
            except StopIteration:
                continue        # a process ended (fetch, or compute at FINISH)
        if self.finished is None:
            # SimPy's last event: the last one processed here, or a transaction's end.
            self.now = max(self.now, self.last_done)
            raise SimulationDeadlock(self._deadlock_report())
        finish_index, finish_cycle = self.finished
        self._check_leftovers(finish_index)
        stats = self.stats
        stats.cycles = finish_cycle
        if self.trace:
            stats.counters.extend(bandwidth_track(self.beats))
        if self.counter is not None:
            fstats = self.counter.stats()
        else:
            assert self.fsim is not None
            fstats = self.fsim.stats
        stats.insn_counts = dict(fstats.insn_counts)
        stats.actions = fstats.actions
        stats.actions.add_fetch(len(self.insns), self.cfg)
        stats.dram_loaded = dict(fstats.bytes_loaded)
        stats.dram_stored = fstats.bytes_stored
        for m in stats.modules.values():
            m.stall(CMD_EMPTY, finish_cycle - m.busy - m.stall_total)
        return stats

    # ------------------------------------------------------------------ store events
    # simpy.Store with one producer and one consumer. A get takes the front entry at once if
    # there is one; its event is processed later in the cycle (callbacks: the store's
    # _trigger_put, then the getter). A put into a queue with room appends at once; its event
    # likewise (callbacks: _trigger_get, then the putter). A blocked put completes when a
    # processed get makes room, a waiting get when a processed put brings an entry.
    def _take(self, q: _Queue) -> int:
        """sim.timing.Queue._do_get: the front entry, counted as taken in this cycle."""
        now = self.now
        if q.taken_at == now:
            q.taken += 1
        else:
            q.taken_at, q.taken = now, 1
        q.arrived = q.arrivals.popleft()
        return q.items.popleft()

    def _trigger_put(self, q: _Queue) -> None:
        putter = q.putter
        if putter is not None and len(q.items) < q.cap:
            q.putter = None
            q.items.append(putter[1])
            q.arrivals.append(self.now)
            heapq.heappush(self.heap, (self.now, _NORMAL, self.seq(), self._put_done,
                                       (q, putter[0])))

    def _trigger_get(self, q: _Queue) -> None:
        getter = q.getter
        if getter is not None and q.items:
            q.getter = None
            item = self._take(q)
            heapq.heappush(self.heap, (self.now, _NORMAL, self.seq(), self._got,
                                       (q, getter, item)))

    def _got(self, arg: tuple[_Queue, Callable[[Any], Any], int]) -> None:
        q, resume, item = arg
        self._trigger_put(q)
        resume(item)

    def _put_done(self, arg: tuple[_Queue, Callable[[Any], Any]]) -> None:
        q, resume = arg
        self._trigger_get(q)
        resume(None)

    # ------------------------------------------------------------------ the DRAM channel
    def _present(self, who: int, nbytes: int, write: bool,
                 resume: Callable[[Any], Any]) -> Txn | None:
        """``DramChannel.request``: present a request now. The transaction if it is granted
        without another event in between (the arbitrations up to its grant are the next
        events), the requester going on at its grant's cycle; else None: the requester waits,
        and is resumed with its transaction."""
        self.requests[who] = (nbytes, write, resume)
        self.asking |= 1 << who
        now = self.now
        pending = self.next_arbitration
        if (pending is not None and pending <= now) or now < self.blocked_until:
            return None
        heap = self.heap
        if heap and (h := heap[0])[0] == now and h[1] < _END_OF_CYCLE:
            self.next_arbitration = now
            heapq.heappush(heap, (now, _END_OF_CYCLE, self.seq(), self._arbitration, now))
            return None
        cycle = now
        while True:
            granted = self._grant(cycle)
            if granted is not None:
                break
            cycle = self.blocked_until     # every slot taken: the next arbitration is then
            if heap and ((h := heap[0])[0] < cycle
                         or (h[0] == cycle and h[1] < _END_OF_CYCLE)):
                self._arbitrate_at(cycle)
                return None
            self.now = cycle
        if granted[0] is resume:
            return granted[1]
        heapq.heappush(heap, (cycle, _NORMAL, self.seq(), granted[0], granted[1]))
        return None

    def _arbitrate_at(self, cycle: int) -> None:
        pending = self.next_arbitration
        if pending is not None and pending <= cycle:
            return
        if cycle < self.blocked_until:
            return      # every slot is taken until then, and an arbitration is pending there
        self.next_arbitration = cycle
        heapq.heappush(self.heap, (cycle, _END_OF_CYCLE, self.seq(), self._arbitration, cycle))

    def _arbitration(self, cycle: int) -> None:
        """The arbitration at the end of ``cycle``, an event (``DramChannel._grant``)."""
        if self.next_arbitration != cycle:
            return          # superseded by an earlier one
        granted = self._grant(cycle)
        if granted is not None:
            granted[0](granted[1])      # the grant event: the next one SimPy processes
        elif self.blocked_until > cycle:
            self._arbitrate_at(self.blocked_until)

    def _grant(self, cycle: int) -> tuple[Callable[[Any], Any], Txn] | None:
        """Grant one of the requests presented (at the end of ``cycle``); the requester to
        resume and its transaction, or None: no request, or every slot taken (then
        ``blocked_until`` is the cycle the first transaction in flight is done, when the
        caller arbitrates again)."""
        self.next_arbitration = None
        requests = self.requests
        if not requests:
            return None
        dones = self.dones
        while dones and dones[0] <= cycle:
            heapq.heappop(dones)
        if len(dones) >= self.max_outstanding:
            self.blocked_until = dones[0]
            return None
        key = self.asking << 3 | (self.last_grant & 7)
        who = self.choices.get(key)
        if who is None:
            who = arbitrate([bool(self.asking >> i & 1) for i in range(len(REQUESTERS))],
                            self.arbiter, self.last_grant)
            assert who is not None
            self.choices[key] = who
        self.last_grant = who
        self.asking ^= 1 << who
        nbytes, write, resume = requests.pop(who)
        # DataBus.grant, by the outcome relative to the grant of the same transaction at the
        # same distance from the bus's free cycle (any distance in the past alike: a
        # transaction's beats never start before its grant).
        gap = self.bus_free - cycle
        key = (nbytes, write, gap if gap > -1 else -1)
        outcome = self.bus_outcomes.get(key)
        if outcome is None:
            scratch = DataBus(self.cfg)
            scratch.free = key[2]
            t = scratch.grant(0, nbytes, write)
            outcome = self.bus_outcomes[key] = (t.first_beat, t.end_beats, t.done)
        first, end, done = cycle + outcome[0], cycle + outcome[1], cycle + outcome[2]
        self.bus_free = end
        txn = (cycle, first, end, done, nbytes, write)     # Transaction's fields
        heapq.heappush(dones, done)
        if done > self.last_done:
            self.last_done = done
        stats = self.stats
        stats.dram_bytes += nbytes
        if write:
            stats.dram_write_bytes += nbytes
        stats.dram_transactions += 1
        stats.dram_busy += end - first
        if self.trace:
            self.beats.append((first, end, nbytes))
        if requests:
            if len(dones) >= self.max_outstanding and dones[0] > cycle + 1:
                # The next cycle's arbitration would find every slot taken.
                self.blocked_until = dones[0]
                self._arbitrate_at(dones[0])
            else:
                self._arbitrate_at(cycle + 1)
        return resume, txn

    def _dram_wait(self, stats: ModuleStats, asks: list[int], txns: list[Txn]) -> None:
        """``account_dram_wait``, remembered by the transactions' cycles from the first ask."""
        a0 = asks[0]
        if len(txns) == 1:
            t = txns[0]
            key: tuple[Any, ...] = (t[0] - a0, t[1] - a0, t[2] - a0, t[3] - a0, t[5])
        else:
            key = tuple((t[0] - a0, t[1] - a0, t[2] - a0, t[3] - a0, t[5]) for t in txns)
        split = self.waits.get(key)
        if split is None:
            scratch = ModuleStats()
            account_dram_wait(scratch, asks, [Transaction(*t) for t in txns],
                              self.cfg.dram.latency)
            split = self.waits[key] = (scratch.busy, tuple(scratch.stalls.items()))
        stats.busy += split[0]
        for cause, n in split[1]:
            stats.stall(cause, n)

    # ------------------------------------------------------------------ processes
    # A wait for one's own timeout at ``t``, or for a put or get event now, goes through the
    # heap only when an event already there comes first: one at an earlier cycle, or at the
    # same cycle and priority (scheduled earlier). Otherwise it is the next event anyway.
    def _fetch(self) -> Process:
        """sim.timing.FetchModule.run."""
        cfg = self.cfg
        stats = self.stats.modules["fetch"]
        heap, seq, push = self.heap, self.seq, heapq.heappush
        statics, queues = self.statics, self.cmd_queues
        counters = self.stats.counters if self.trace else None
        batch = costs.fetch_batch_size(cfg)
        full_resume = costs.QUEUE_FULL_RESUME_CYCLES
        put_done, trigger_get = self._put_done, self._trigger_get
        n = len(self.insns)
        yield           # started
        resume = self.senders[0]
        while self.dispatched < n:
            k = min(batch, n - self.dispatched)
            self.fetch_waiting = "DRAM"
            asked = self.now
            txn = self._present(0, k * INSN_BYTES, False, resume)
            if txn is None:
                txn = yield
            t = txn[3]
            if heap and ((h := heap[0])[0] < t or (h[0] == t and h[1] < _END_OF_CYCLE)):
                push(heap, (t, _NORMAL, seq(), resume, None))
                yield
            else:
                self.now = t
            self._dram_wait(stats, [asked], [txn])
            for index in range(self.dispatched, self.dispatched + k):
                rec = statics[index]
                stats.busy += 1
                t = self.now + 1
                if heap and ((h := heap[0])[0] < t or (h[0] == t and h[1] < _END_OF_CYCLE)):
                    push(heap, (t, _NORMAL, seq(), resume, None))
                    yield
                else:
                    self.now = t
                now = self.now
                stats.active = now
                q = queues[rec.module]
                self.fetch_waiting = rec.room
                asked = now
                items = q.items
                full = len(items) + (q.taken if q.taken_at == now else 0) >= q.cap
                if len(items) < q.cap:
                    items.append(index)
                    q.arrivals.append(now)
                    if heap and (h := heap[0])[0] == now and h[1] < _END_OF_CYCLE:
                        push(heap, (now, _NORMAL, seq(), put_done, (q, resume)))
                        yield
                    else:
                        trigger_get(q)
                else:
                    q.putter = (resume, index)
                    yield
                if full:
                    t = self.now + full_resume
                    if heap and ((h := heap[0])[0] < t
                                 or (h[0] == t and h[1] < _END_OF_CYCLE)):
                        push(heap, (t, _NORMAL, seq(), resume, None))
                        yield
                    else:
                        self.now = t
                now = self.now
                if counters is not None:
                    counters.append((q.name, now, float(len(items))))
                if now != asked:
                    stats.stall(QUEUE_FULL, now - asked)
                self.dispatched += 1
                stats.insns += 1
            self.fetch_waiting = None

    def _unit(self, module: Module) -> Process:
        """sim.timing._Unit.run, with ComputeModule.execute's micro-op prefetch rule."""
        unit = self.units[module]
        stats = unit.stats
        heap, seq, push = self.heap, self.seq, heapq.heappush
        statics, insns = self.statics, self.insns
        cmd_queue, token_queues = self.cmd_queues[module], self.token_queues
        counters = self.stats.counters if self.trace else None
        compute = module is Module.COMPUTE
        who = REQUESTERS.index(unit.name)
        pop_waits = [f"pop {q.value}" for q in _TOKEN_QUEUES]
        push_waits = [f"push {q.value} (queue full)" for q in _TOKEN_QUEUES]
        pop_causes = [pop_cause(q.value) for q in _TOKEN_QUEUES]
        push_causes = [push_cause(q.value) for q in _TOKEN_QUEUES]
        last_push = self.last_push
        retire, present, dram_wait = self._retire, self._present, self._dram_wait
        take, got, put_done = self._take, self._got, self._put_done
        trigger_put, trigger_get = self._trigger_put, self._trigger_get
        miss, decode = costs.UOP_PREFETCH_MISS_CYCLES, costs.DECODE_CYCLES
        full_resume = costs.QUEUE_FULL_RESUME_CYCLES
        yield           # started
        resume = self.senders[1 + module]
        while True:
            unit.waiting = _WAIT_CMD
            asked = now = self.now
            q = cmd_queue
            if q.items:
                index = take(q)
                if heap and (h := heap[0])[0] == now and h[1] < _END_OF_CYCLE:
                    push(heap, (now, _NORMAL, seq(), got, (q, resume, index)))
                    index = yield
                else:
                    trigger_put(q)
            else:
                q.getter = resume
                index = yield
            now = self.now
            if counters is not None:
                counters.append((q.name, now, float(len(q.items))))
            if now != asked:
                stats.stall(CMD_EMPTY, now - asked)
            unit.current = index
            rec = statics[index]
            for i in rec.pops:
                unit.waiting = pop_waits[i]
                asked = now
                q = token_queues[i]
                if q.items:
                    item = take(q)
                    if heap and (h := heap[0])[0] == now and h[1] < _END_OF_CYCLE:
                        push(heap, (now, _NORMAL, seq(), got, (q, resume, item)))
                        yield
                    else:
                        trigger_put(q)
                else:
                    q.getter = resume
                    yield
                now = self.now
                if counters is not None:
                    counters.append((q.name, now, float(len(q.items))))
                if now != asked:
                    stats.stall(pop_causes[i], now - asked)
            unit.waiting = None
            start = now
            if compute:
                arrived = cmd_queue.arrived
                previous, unit.last_start = unit.last_start, start
                if rec.uops and (arrived == start or previous == start - 1):
                    stats.busy += miss
                    t = now + miss
                    if heap and ((h := heap[0])[0] < t
                                 or (h[0] == t and h[1] < _END_OF_CYCLE)):
                        push(heap, (t, _NORMAL, seq(), resume, None))
                        yield
                    else:
                        self.now = t
            if rec.memory:
                stats.busy += decode
                t = self.now + decode
                if heap and ((h := heap[0])[0] < t or (h[0] == t and h[1] < _END_OF_CYCLE)):
                    push(heap, (t, _NORMAL, seq(), resume, None))
                    yield
                else:
                    self.now = t
                setup = rec.setup
                if setup:
                    stats.busy += setup
                    t = self.now + setup
                    if heap and ((h := heap[0])[0] < t
                                 or (h[0] == t and h[1] < _END_OF_CYCLE)):
                        push(heap, (t, _NORMAL, seq(), resume, None))
                        yield
                    else:
                        self.now = t
                bursts = rec.bursts
                if bursts:
                    write = rec.write
                    asks = [self.now]
                    txn = present(who, bursts[0], write, resume)
                    if txn is None:
                        txn = yield
                    txns: list[Txn] = [txn]
                    for nbytes in bursts[1:]:
                        t = self.now + 1    # the next request from the cycle after the grant
                        if heap and ((h := heap[0])[0] < t
                                     or (h[0] == t and h[1] < _END_OF_CYCLE)):
                            push(heap, (t, _NORMAL, seq(), resume, None))
                            yield
                        else:
                            self.now = t
                        asks.append(self.now)
                        txn = present(who, nbytes, write, resume)
                        if txn is None:
                            txn = yield
                        txns.append(txn)
                    t = txns[-1][3]
                    if heap and ((h := heap[0])[0] < t
                                 or (h[0] == t and h[1] < _END_OF_CYCLE)):
                        push(heap, (t, _NORMAL, seq(), resume, None))
                        yield
                    else:
                        self.now = t
                    dram_wait(stats, asks, txns)
                pad = rec.pad
                if pad:
                    stats.busy += pad
                    t = self.now + pad
                    if heap and ((h := heap[0])[0] < t
                                 or (h[0] == t and h[1] < _END_OF_CYCLE)):
                        push(heap, (t, _NORMAL, seq(), resume, None))
                        yield
                    else:
                        self.now = t
            else:
                cycles = rec.cycles
                stats.busy += cycles
                t = self.now + cycles
                if heap and ((h := heap[0])[0] < t or (h[0] == t and h[1] < _END_OF_CYCLE)):
                    push(heap, (t, _NORMAL, seq(), resume, None))
                    yield
                else:
                    self.now = t
            now = self.now
            stats.active += now - start
            retire(index, insns[index], rec, start)
            stats.insns += 1
            if rec.finish:
                unit.current = None
                self.finished = (index, now)
                return
            for i in rec.pushes:
                unit.waiting = push_waits[i]
                asked = now
                q = token_queues[i]
                items = q.items
                full = len(items) + (q.taken if q.taken_at == now else 0) >= q.cap
                if len(items) < q.cap:
                    items.append(index)
                    q.arrivals.append(now)
                    if heap and (h := heap[0])[0] == now and h[1] < _END_OF_CYCLE:
                        push(heap, (now, _NORMAL, seq(), put_done, (q, resume)))
                        yield
                    else:
                        trigger_get(q)
                else:
                    q.putter = (resume, index)
                    yield
                if full:
                    t = self.now + full_resume
                    if heap and ((h := heap[0])[0] < t
                                 or (h[0] == t and h[1] < _END_OF_CYCLE)):
                        push(heap, (t, _NORMAL, seq(), resume, None))
                        yield
                    else:
                        self.now = t
                now = self.now
                if counters is not None:
                    counters.append((q.name, now, float(len(items))))
                if now != asked:
                    stats.stall(push_causes[i], now - asked)
                last_push[_TOKEN_QUEUES[i]] = index
            unit.waiting = None
            unit.current = None

    def _retire(self, index: int, insn: Insn, rec: _Static, start: int) -> None:
        """sim.timing.TimingSimulator.retire."""
        if self.fsim is not None:
            self.fsim.execute(insn, index, self.dram_image)
        else:
            assert self.counter is not None
            self.counter.add_static(rec)
        stats = self.stats
        stats.timeline.append(Slice(rec.module_name, index, rec.name, start, self.now))
        rd, wr = stats.bytes_read, stats.bytes_written
        for key, n in rec.rd:
            rd[key] = rd.get(key, 0) + n
        for key, n in rec.wr:
            wr[key] = wr.get(key, 0) + n
        if rec.gemm_busy:
            stats.gemm_busy += rec.gemm_busy
            stats.macs += rec.macs
        elif rec.alu_busy:
            stats.alu_busy += rec.alu_busy

    # ------------------------------------------------------------------ reports
    def _check_leftovers(self, finish_index: int) -> None:
        """sim.timing.TimingSimulator._check_leftovers."""
        for queue, unit in zip(self.cmd_queues, self.units, strict=True):
            left = list(queue.items)
            if unit.current is not None:
                left.insert(0, unit.current)
            if left:
                raise ProgramError(
                    f"FINISH at instruction {finish_index} retired with {len(left)} "
                    f"{unit.name} instruction(s) never run, from instruction {min(left)}"
                )
        n = len(self.insns)
        if self.dispatched < n:
            raise ProgramError(
                f"FINISH at instruction {finish_index} retired with "
                f"{n - self.dispatched} instruction(s) never fetched"
            )
        left_tokens = [
            f"{q.value}={len(s.items)} (last pushed by instruction {self.last_push.get(q, '?')})"
            for q, s in zip(_TOKEN_QUEUES, self.token_queues, strict=True)
            if s.items
        ]
        if left_tokens:
            raise ProgramError(
                f"FINISH at instruction {finish_index} left tokens in {', '.join(left_tokens)}"
            )

    def _deadlock_report(self) -> str:
        """sim.timing.TimingSimulator._deadlock_report."""
        parts = []
        for unit in self.units:
            if unit.current is None:
                parts.append(f"{unit.name} waits for {unit.waiting}")
            else:
                insn = self.insns[unit.current]
                parts.append(
                    f"{unit.name} waits at instruction {unit.current} ({count_key(insn)}) to "
                    f"{unit.waiting}"
                )
        n = len(self.insns)
        if self.dispatched < n:
            parts.append(f"fetch waits for {self.fetch_waiting} at instruction {self.dispatched}")
        else:
            parts.append(f"fetch has dispatched all {n} instructions")
        tokens = " ".join(f"{q.value}={len(s.items)}"
                          for q, s in zip(_TOKEN_QUEUES, self.token_queues, strict=True))
        return f"deadlock at cycle {int(self.now)}: {'; '.join(parts)}; tokens: {tokens}"
