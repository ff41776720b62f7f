"""The token protocol without time: the order a program's instructions may retire in, and what
stops it.

The machine is four sequential processes, fetch and the load, compute and store modules, joined
by bounded FIFOs: three command queues of ``queues.cmd_depth`` entries (fetch puts each
instruction into its module's, in program order) and four token queues of
``queues.token_depth`` (``DEP_QUEUES``). A module takes the instruction in front of its command
queue, pops its tokens (``pop_prev`` first), executes it and pushes its tokens (``push_prev``
first); every take, pop and put waits while its queue is empty or full. Such a network of
processes is determinate (Kahn): whether it reaches FINISH, what it has retired by then, and
where it stops when it deadlocks do not depend on how long anything takes. So the functional
simulator retires instructions in the order :func:`retire_order` gives, and anything that only
needs to know whether a program can finish (the RTL backend, before or after a run that did
not) runs :func:`check_tokens` instead of a timing model. The timing simulator
(``sim.timing``) follows the same rules, with time.

FINISH (on compute) ends the run once its pops are done (its pushes are never made); load,
store and fetch then go on as far as they can, and whatever is left - instructions not run or
not fetched, tokens in a queue - is an error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from accel.machine.isa import DEP_QUEUES, FinishInsn, Insn, Module, TokenQueue, module_of
from accel.machine.program import Program, ProgramError, SimulationDeadlock, count_key

__all__ = ["check_tokens", "retire_order"]


@dataclass
class _Held:
    """The instruction a module has taken from its command queue and not yet finished."""

    index: int
    insn: Insn
    pops: deque[int]  # indices into _QUEUES
    pushes: deque[int]
    executed: bool = False


_QUEUES = tuple(TokenQueue)
"""The token queues; the machine counts tokens in a list in this order (an enum member's hash
is a Python call, and the machine looks its queues up a few times per instruction)."""

_DEP_QUEUES: dict[tuple[Module, bool, bool, bool, bool], tuple[tuple[int, ...], tuple[int, ...]]] \
    = {}


def _dep_queues(module: Module, insn: Insn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The token queues (as indices into ``_QUEUES``) ``insn`` pops and pushes on ``module``,
    in order (remembered per module and flags: a program asks for the same few combinations
    thousands of times)."""
    key = (module, insn.pop_prev, insn.pop_next, insn.push_prev, insn.push_next)
    found = _DEP_QUEUES.get(key)
    if found is None:
        flags = insn.deps()
        found = _DEP_QUEUES[key] = (
            tuple(_QUEUES.index(DEP_QUEUES[(module, f)]) for f in flags if f.startswith("pop")),
            tuple(_QUEUES.index(DEP_QUEUES[(module, f)]) for f in flags
                  if f.startswith("push")))
    return found


@dataclass
class _Machine:
    """The four processes' state: command queues and held instructions by module (indexed by
    its value), tokens by queue (indexed as ``_QUEUES``)."""

    program: Program
    route: list[Module]
    queues: list[deque[int]] = field(default_factory=lambda: [deque() for _ in Module])
    held: list[_Held | None] = field(default_factory=lambda: [None] * len(Module))
    tokens: list[int] = field(default_factory=lambda: [0] * len(_QUEUES))
    last_push: dict[int, int] = field(default_factory=dict)
    fetched: int = 0
    finish: int | None = None

    def __post_init__(self) -> None:
        self.cmd_depth = self.program.config.queues.cmd_depth
        self.token_depth = self.program.config.queues.token_depth

    def fetch(self) -> bool:
        """Dispatch instructions until a command queue is full; True if any moved."""
        start, n, depth = self.fetched, len(self.route), self.cmd_depth
        route, queues, fetched = self.route, self.queues, self.fetched
        while fetched < n:
            queue = queues[route[fetched]]
            if len(queue) >= depth:
                break
            queue.append(fetched)
            fetched += 1
        self.fetched = fetched
        return fetched != start

    def step(self, module: Module) -> Iterator[tuple[int, Insn]]:
        """Run ``module`` until it waits, yielding each instruction as it executes; returns
        (as the generator's value) True if it did anything."""
        moved = False
        tokens, waiting, insns = self.tokens, self.queues[module], self.program.insns
        while True:
            held = self.held[module]
            if held is None:
                if not waiting:
                    return moved
                index = waiting.popleft()
                insn = insns[index]
                pops, pushes = _dep_queues(module, insn)
                held = self.held[module] = _Held(index, insn, deque(pops), deque(pushes))
                moved = True
            while held.pops:
                if not tokens[held.pops[0]]:
                    return moved
                tokens[held.pops.popleft()] -= 1
                moved = True
            if not held.executed:
                held.executed = True
                yield held.index, held.insn
                if isinstance(held.insn, FinishInsn):
                    self.held[module] = None
                    self.finish = held.index
                    return True
            while held.pushes:
                queue = held.pushes[0]
                if tokens[queue] >= self.token_depth:
                    return moved
                tokens[held.pushes.popleft()] += 1
                self.last_push[queue] = held.index
                moved = True
            self.held[module] = None

    # ------------------------------------------------------------------ reports
    def deadlock_report(self) -> str:
        parts = []
        for module in Module:
            name = module.name.lower()
            held = self.held[module]
            if held is None:
                if module in self.route[self.fetched:]:
                    parts.append(f"{name} waits for an instruction (command queue empty)")
                else:
                    parts.append(f"{name} has no instructions left")
                continue
            if held.pops:
                what = f"pop {_QUEUES[held.pops[0]].value} (0 tokens)"
            else:
                what = f"push {_QUEUES[held.pushes[0]].value} (full, {self.token_depth} tokens)"
            parts.append(
                f"{name} waits at instruction {held.index} ({count_key(held.insn)}) to {what}")
        if self.fetched < len(self.route):
            queue = self.route[self.fetched].name.lower()
            parts.append(f"fetch waits at instruction {self.fetched} for room in the {queue} "
                         f"command queue ({self.cmd_depth} entries)")
        else:
            parts.append(f"fetch has dispatched all {len(self.route)} instructions")
        counts = " ".join(f"{q.value}={n}" for q, n in zip(_QUEUES, self.tokens, strict=True))
        return f"deadlock: {'; '.join(parts)}; tokens: {counts}"

    def check_leftovers(self) -> None:
        finish = self.finish
        for module in Module:
            left = [h.index for h in (self.held[module],) if h is not None]
            left += self.queues[module]
            if left:
                raise ProgramError(
                    f"FINISH at instruction {finish} retired with {len(left)} "
                    f"{module.name.lower()} instruction(s) never run, from instruction "
                    f"{min(left)}")
        if self.fetched < len(self.route):
            raise ProgramError(
                f"FINISH at instruction {finish} retired with "
                f"{len(self.route) - self.fetched} instruction(s) never fetched")
        left_tokens = [
            f"{q.value}={n} (last pushed by instruction {self.last_push.get(i, '?')})"
            for i, (q, n) in enumerate(zip(_QUEUES, self.tokens, strict=True)) if n
        ]
        if left_tokens:
            raise ProgramError(
                f"FINISH at instruction {finish} left tokens in {', '.join(left_tokens)}")


def retire_order(program: Program) -> Iterator[tuple[int, Insn]]:
    """``(index, instruction)`` of every instruction ``program`` executes, FINISH last, in an
    order the machine's token protocol allows (see the module docstring).

    The caller applies each instruction's effect as it is yielded; the program is not
    validated here (``Program.validate`` does that).

    Raises
    ------
    SimulationDeadlock
        No process can go on before FINISH; the message says who waits on what.
    ProgramError
        FINISH retired with instructions not run or not fetched, or with tokens left.
    """
    machine = _Machine(program, [module_of(insn) for insn in program.insns])
    while machine.finish is None:
        moved = machine.fetch()
        for module in Module:
            moved = (yield from machine.step(module)) or moved
            if machine.finish is not None:
                break
        if machine.finish is None and not moved:
            raise SimulationDeadlock(machine.deadlock_report())
    # FINISH has retired: the others drain what they can before the leftovers are counted.
    while machine.fetch() | (yield from machine.step(Module.LOAD)) \
            | (yield from machine.step(Module.STORE)):
        pass
    machine.check_leftovers()


def check_tokens(program: Program) -> None:
    """Run ``program``'s token protocol to FINISH without executing anything.

    Raises
    ------
    SimulationDeadlock, ProgramError
        As :func:`retire_order`.
    """
    for _ in retire_order(program):
        pass
