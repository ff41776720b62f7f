"""Dependency insertion: push/pop token statements between the load, compute and store modules.

Each hardware statement runs on one module (LOAD INP/WGT on load; LOAD UOP/ACC, GEMM and ALU on
compute; STORE on store). Within one statement list, when a later statement on module B touches
an on-chip buffer that an earlier one on module A wrote (or reads one A will overwrite), A pushes
a token after its statement and B pops one before its own::

    dma_load INP inp ...              dma_load INP inp ...
    dma_load WGT wgt ...              dma_load WGT wgt ...
    gemm acc += inp . wgt      ->     push load->compute
                                      pop load->compute
                                      gemm acc += inp . wgt

Across iterations of a loop, a buffer that the next iteration's producer overwrites while this
iteration's consumer may still read it gets a "buffer free" token going back up the pipeline:
the consumer pushes it unless this is the very last iteration, the producer pops it unless this
is the very first (counted over every enclosing serial loop, so it also links the last channel
chunk of one output tile to the first of the next). Where several statements of one loop body
carry such tokens on one queue and one runs several iterations per iteration of the body, they
are joined into one chain (:func:`_chain`). At the end, compute waits for the last store
before FINISH.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel.machine.config import HwConfig
from accel.machine.isa import MemType, Module, TokenQueue
from compiler.errors import LoweringError
from compiler.te import BinOp, Cmp, Expr, IntImm, Var
from compiler.tir import (
    Allocate,
    Alu,
    Buffer,
    DepPop,
    DepPush,
    DmaCopy,
    For,
    ForKind,
    Gemm,
    PrimFunc,
    Seq,
    Stmt,
    UopLoop,
    map_stmts,
    stmts,
)

__all__ = ["insert_dependencies", "module_of_stmt"]

_QUEUE = {
    (Module.LOAD, Module.COMPUTE): TokenQueue.L2C,
    (Module.COMPUTE, Module.LOAD): TokenQueue.C2L,
    (Module.COMPUTE, Module.STORE): TokenQueue.C2S,
    (Module.STORE, Module.COMPUTE): TokenQueue.S2C,
}


def module_of_stmt(s: Stmt) -> Module | None:
    """The module a hardware statement runs on (None for loops and token statements)."""
    if isinstance(s, DmaCopy):
        if s.store:
            return Module.STORE
        return Module.LOAD if s.mem_type in (MemType.INP, MemType.WGT) else Module.COMPUTE
    if isinstance(s, (Gemm, Alu, UopLoop)):
        return Module.COMPUTE
    return None


@dataclass
class _Access:
    """Which modules write and read which on-chip buffers inside a statement."""

    writes: dict[Buffer, set[Module]]
    reads: dict[Buffer, set[Module]]

    @property
    def modules(self) -> set[Module]:
        out: set[Module] = set()
        for d in (self.writes, self.reads):
            for ms in d.values():
                out |= ms
        return out


def _access(node: Stmt) -> _Access:
    acc = _Access({}, {})

    def add(d: dict[Buffer, set[Module]], b: Buffer | None, m: Module) -> None:
        if b is not None and b.scope != "dram":
            d.setdefault(b, set()).add(m)

    for s in stmts(node):
        inner = s.op if isinstance(s, UopLoop) else s
        m = module_of_stmt(s)
        if m is None:
            continue
        if isinstance(inner, DmaCopy):
            if inner.store:
                add(acc.reads, inner.sram.buffer, m)
            else:
                add(acc.writes, inner.sram.buffer, m)
        elif isinstance(inner, Gemm):
            add(acc.writes, inner.dst.buffer, m)
            add(acc.reads, inner.src.buffer if inner.src else None, m)   # a copying reset too
            if not inner.reset:
                add(acc.reads, inner.dst.buffer, m)
                add(acc.reads, inner.wgt.buffer if inner.wgt else None, m)
        elif isinstance(inner, Alu):
            add(acc.writes, inner.dst.buffer, m)
            add(acc.reads, inner.dst.buffer, m)
            add(acc.reads, inner.src.buffer if inner.src else None, m)
    return acc


def _needs(first: _Access, second: _Access) -> set[tuple[Module, Module]]:
    """(from, to) module pairs ordering ``second`` after ``first`` (RAW, WAR, WAW)."""
    pairs = set()
    for buf, writers in first.writes.items():
        for m2 in second.reads.get(buf, set()) | second.writes.get(buf, set()):
            pairs |= {(m1, m2) for m1 in writers if m1 != m2}
    for buf, readers in first.reads.items():
        for m2 in second.writes.get(buf, set()):
            pairs |= {(m1, m2) for m1 in readers if m1 != m2}
    return pairs


def _check_pair(pair: tuple[Module, Module], where: str) -> TokenQueue:
    try:
        return _QUEUE[pair]
    except KeyError:
        raise LoweringError(
            f"dependency insertion at {where}: {pair[0].name.lower()} and "
            f"{pair[1].name.lower()} are not adjacent pipeline stages; route the data through "
            "compute"
        ) from None


def _any_nonzero(loops: list[tuple[Var, int]]) -> Expr:
    total: Expr = IntImm(0)
    for v, _ in loops:
        total = BinOp("+", total, v)
    return Cmp(">=", total, IntImm(1))


def _not_last(loops: list[tuple[Var, int]]) -> Expr:
    total: Expr = IntImm(0)
    for v, n in loops:
        total = BinOp("+", total, BinOp("-", IntImm(n - 1), v))
    return Cmp(">=", total, IntImm(1))


def insert_dependencies(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Insert :class:`DepPush` / :class:`DepPop` (see the module docstring)."""
    body = _insert(func.body, [], func.name)
    # Before FINISH compute waits for the last store, so all work has drained.
    has_store = any(module_of_stmt(s) is Module.STORE for s in stmts(body))
    if has_store:
        body = Seq([body, DepPush(Module.STORE, TokenQueue.S2C),
                    DepPop(Module.COMPUTE, TokenQueue.S2C)])
    return func.with_body(body)


def _items(node: Stmt) -> tuple[list[Stmt], list[Allocate]]:
    """The statement list directly under ``node``, looking through allocations."""
    allocs = []
    while isinstance(node, Allocate):
        allocs.append(node)
        node = node.body
    return (node.body if isinstance(node, Seq) else [node]), allocs


def _rewrap(items: list[Stmt], allocs: list[Allocate]) -> Stmt:
    node: Stmt = items[0] if len(items) == 1 else Seq(items)
    for a in reversed(allocs):
        node = Allocate(a.buffer, node)
    return node


def _insert(node: Stmt, serial: list[tuple[Var, int]], where: str) -> Stmt:
    if isinstance(node, For):
        loops = serial + ([(node.var, node.extent)] if node.kind is ForKind.SERIAL else [])
        body = _insert(node.body, loops, node.var.name)
        if node.kind is ForKind.SERIAL:
            body = _loop_carried(body, loops, node.var.name)
        return For(node.var, node.extent, body, node.kind, node.pragma, node.intrinsic)
    if isinstance(node, (Seq, Allocate)):
        items, allocs = _items(node)
        items = [_insert(s, serial, where) for s in items]
        return _rewrap(_forward(items, where), allocs)
    return node


def _forward(items: list[Stmt], where: str) -> list[Stmt]:
    """Tokens between statements of one list, earlier to later."""
    access = [_access(s) for s in items]
    pushes: dict[int, list[DepPush]] = {}
    pops: dict[int, list[DepPop]] = {}
    synced: dict[tuple[Module, Module], int] = {}
    for j in range(len(items)):
        for pair in sorted(_pairs_before(access, j), key=lambda p: (p[0], p[1])):
            i = max(k for k in range(j) if pair in _needs(access[k], access[j]))
            if synced.get(pair, -1) >= i:
                continue
            queue = _check_pair(pair, where)
            pushes.setdefault(i, []).append(DepPush(pair[0], queue))
            pops.setdefault(j, []).append(DepPop(pair[1], queue))
            synced[pair] = i
    out: list[Stmt] = []
    for k, s in enumerate(items):
        out.extend(pops.get(k, []))
        out.append(s)
        out.extend(pushes.get(k, []))
    return out


def _pairs_before(access: list[_Access], j: int) -> set[tuple[Module, Module]]:
    pairs: set[tuple[Module, Module]] = set()
    for k in range(j):
        pairs |= _needs(access[k], access[j])
    return pairs


def _loop_carried(body: Stmt, loops: list[tuple[Var, int]], where: str) -> Stmt:
    """Back-edge tokens: statement i of one iteration before statement j <= i of the next."""
    items, _allocs = _descend(body)
    chained = _chain(items)
    if chained != items:
        body, items = _redescend(body, chained), chained
    access = [_access(s) for s in items]
    pushes: dict[int, list[DepPush]] = {}
    pops: dict[int, list[DepPop]] = {}
    done: set[tuple[Module, Module]] = set()
    for j in range(len(items)):
        for i in range(len(items) - 1, j - 1, -1):
            if i == j:
                continue  # within one compound statement: its own loops handle it
            for pair in _needs(access[i], access[j]):
                if pair in done:
                    continue
                queue = _check_pair(pair, where)
                pushes.setdefault(i, []).append(DepPush(pair[0], queue, _not_last(loops)))
                pops.setdefault(j, []).append(DepPop(pair[1], queue, _any_nonzero(loops)))
                done.add(pair)
    if not pushes:
        return body
    out: list[Stmt] = []
    for k, s in enumerate(items):
        out.extend(pops.get(k, []))
        out.append(s)
        out.extend(pushes.get(k, []))
    return _redescend(body, out)


def _chain(items: list[Stmt]) -> list[Stmt]:
    """Join the back-edge tokens that several statements of one loop body carry on one queue
    into a single chain, where their own would pair wrongly.

    Each inner loop's back-edge tokens are guarded by the count over every enclosing loop: its
    consumer pushes unless this is the very last iteration, its producer pops unless it is the
    very first. A token queue only counts, so the k-th pop takes the k-th push. When two
    statements of a body carry such tokens on one queue and one of them runs more than one
    iteration per iteration of the body (a convolution's input-channel chunks, then the
    residual skip's one copy), the first chunk of the next output tile would take the token
    the skip's consumer pushed, and overwrite data a chunk still reads. Chained, every
    statement but the first pops before its first iteration and every one but the last pushes
    after its last, so each producer waits for the consumer of the use just before it in
    program order, at or after the previous use of its own buffer. Bodies whose statements
    carry one use each per iteration (two buffers alternating, as the add's) keep their own
    tokens, which pair exactly.
    """
    out = list(items)
    for queue in TokenQueue:
        users = [k for k, s in enumerate(out) if _guarded(s, queue)]
        if len(users) < 2 or all(_uses_per_run(out[k], queue) == 1 for k in users):
            continue
        for k in users[1:]:
            out[k] = _unguard(out[k], DepPop, queue)
        for k in users[:-1]:
            out[k] = _unguard(out[k], DepPush, queue)
    return out


def _guarded(s: Stmt, queue: TokenQueue) -> bool:
    """Does ``s`` hold a back-edge (guarded) token statement on ``queue``?"""
    return any(isinstance(n, (DepPush, DepPop)) and n.queue is queue and n.cond is not None
               for n in stmts(s))


def _uses_per_run(s: Stmt, queue: TokenQueue) -> int:
    """How many times the guarded pops on ``queue`` in ``s`` run per run of ``s`` (the
    product of the extents of the loops around them, guards aside); 0 without any."""
    if isinstance(s, DepPop):
        return int(s.queue is queue and s.cond is not None)
    if isinstance(s, For):
        inner = _uses_per_run(s.body, queue)
        return inner if s.kind is ForKind.VTHREAD else s.extent * inner
    if isinstance(s, Allocate):
        return _uses_per_run(s.body, queue)
    if isinstance(s, Seq):
        return sum(_uses_per_run(x, queue) for x in s.body)
    return 0


def _unguard(s: Stmt, kind: type[DepPush] | type[DepPop], queue: TokenQueue) -> Stmt:
    """``s`` with its guarded ``kind`` token statements on ``queue`` made unconditional."""
    def fn(n: Stmt) -> Stmt | None:
        if isinstance(n, kind) and n.queue is queue and n.cond is not None:
            return kind(n.module, n.queue)
        return None

    return map_stmts(s, fn)


def _descend(node: Stmt) -> tuple[list[Stmt], list[Stmt]]:
    """The statement list of a loop body, looking through allocations and vthread loops."""
    wrappers: list[Stmt] = []
    while True:
        if isinstance(node, Allocate) or (isinstance(node, For) and node.kind is ForKind.VTHREAD):
            wrappers.append(node)
            node = node.body
        else:
            break
    return (node.body if isinstance(node, Seq) else [node]), wrappers


def _redescend(node: Stmt, items: list[Stmt]) -> Stmt:
    if isinstance(node, Allocate):
        return Allocate(node.buffer, _redescend(node.body, items))
    if isinstance(node, For) and node.kind is ForKind.VTHREAD:
        return For(node.var, node.extent, _redescend(node.body, items), node.kind,
                   node.pragma, node.intrinsic)
    return Seq(items)
