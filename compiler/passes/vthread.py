"""Virtual-thread injection: one instruction stream from several interleaved threads.

A loop marked ``vthread`` is unrolled: each thread gets its own copy of every buffer allocated
inside it, and the copies' statements are interleaved group by group, a group being a run of
statements (with their token pushes and pops) on one module. Loops present in every copy are
kept once with interleaved bodies. So thread 1's loads are queued right after thread 0's, and run
while thread 0 computes::

    for t in 0..2:  # vthread              alloc inp.v0, inp.v1
      alloc inp                            for c in 0..4:
      for c in 0..4:                   ->    <load group, t=0> <load group, t=1>
        <load group>                         <compute group, t=0> <compute group, t=1>
        <compute group>
"""

from __future__ import annotations

from dataclasses import replace

from accel.machine.config import HwConfig
from compiler.passes.deps import module_of_stmt
from compiler.te import (
    BinOp,
    Cast,
    Cmp,
    Expr,
    IntImm,
    Select,
    Var,
)
from compiler.tir import (
    Allocate,
    Alu,
    Buffer,
    BufferLoad,
    DepPop,
    DepPush,
    DmaCopy,
    For,
    ForKind,
    Gemm,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    TileRef,
    UopLoop,
    map_stmts,
    simplify,
    stmts,
)

__all__ = ["inject_virtual_threads"]


def inject_virtual_threads(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Unroll and interleave every ``vthread`` loop (innermost first)."""

    def rewrite(s: Stmt) -> Stmt | None:
        if isinstance(s, For) and s.kind is ForKind.VTHREAD:
            return _inject(s)
        return None

    return func.with_body(map_stmts(func.body, rewrite))


def _inject(loop: For) -> Stmt:
    local = [s.buffer for s in stmts(loop.body) if isinstance(s, Allocate)]
    copies = []
    allocs: list[Buffer] = []
    for t in range(loop.extent):
        buffers = {b: replace(b, name=f"{b.name}.v{t}") for b in local}
        allocs.extend(buffers.values())
        copies.append(_strip_allocs(_substitute(loop.body, {loop.var: IntImm(t)}, buffers)))
    body = _interleave(copies)
    for b in reversed(allocs):
        body = Allocate(b, body)
    return body


def _strip_allocs(node: Stmt) -> Stmt:
    def fn(s: Stmt) -> Stmt | None:
        return s.body if isinstance(s, Allocate) else None

    return map_stmts(node, fn)


def _key(s: Stmt) -> object:
    if isinstance(s, (DepPush, DepPop)):
        return s.module
    modules = {module_of_stmt(x) for x in stmts(s)} - {None}
    if len(modules) == 1:
        return modules.pop()
    return ("mixed", id(s))


def _groups(items: list[Stmt]) -> list[list[Stmt]]:
    groups: list[list[Stmt]] = []
    last: object = None
    for s in items:
        k = _key(s)
        if groups and k == last and not isinstance(k, tuple):
            groups[-1].append(s)
        else:
            groups.append([s])
        last = k
    return groups


def _interleave(copies: list[Stmt]) -> Stmt:
    first = copies[0]
    if isinstance(first, For) and all(isinstance(c, For) and c.var is first.var
                                       and c.extent == first.extent for c in copies):
        return For(first.var, first.extent,
                   _interleave([c.body for c in copies]),  # type: ignore[attr-defined]
                   first.kind, first.pragma, first.intrinsic)
    lists = [c.body if isinstance(c, Seq) else [c] for c in copies]
    grouped = [_groups(items) for items in lists]
    if any(len(g) != len(grouped[0]) for g in grouped):
        return Seq([s for items in lists for s in items])
    out: list[Stmt] = []
    for position in range(len(grouped[0])):
        parts = [g[position] for g in grouped]
        if len(parts[0]) == 1 and isinstance(_key(parts[0][0]), tuple):
            out.append(_interleave([p[0] for p in parts]))
        else:
            for p in parts:
                out.extend(p)
    return out[0] if len(out) == 1 else Seq(out)


def _substitute(node: Stmt, mapping: dict[Var, Expr], buffers: dict[Buffer, Buffer]) -> Stmt:
    def expr(e: Expr | None) -> Expr | None:
        if e is None:
            return None
        return simplify(_sub(e, mapping, buffers))

    def ref(r: TileRef | None) -> TileRef | None:
        if r is None:
            return None
        return TileRef(buffers.get(r.buffer, r.buffer), expr(r.index))  # type: ignore[arg-type]

    def fn(s: Stmt) -> Stmt | None:
        if isinstance(s, DmaCopy):
            return replace(s, sram=ref(s.sram), dram=ref(s.dram), y_size=expr(s.y_size),
                           x_size=expr(s.x_size), y_pad_0=expr(s.y_pad_0),
                           y_pad_1=expr(s.y_pad_1), x_pad_0=expr(s.x_pad_0),
                           x_pad_1=expr(s.x_pad_1))
        if isinstance(s, Gemm):
            return replace(s, dst=ref(s.dst), src=ref(s.src), wgt=ref(s.wgt))
        if isinstance(s, Alu):
            return replace(s, dst=ref(s.dst), src=ref(s.src))
        if isinstance(s, UopLoop):
            return replace(s, op=fn(s.op))
        if isinstance(s, (DepPush, DepPop)):
            return replace(s, cond=expr(s.cond))
        if isinstance(s, Store):
            return Store(buffers.get(s.buffer, s.buffer),
                         tuple(expr(i) for i in s.indices),  # type: ignore[misc]
                         _sub(s.value, mapping, buffers))
        if isinstance(s, Allocate):
            return Allocate(buffers.get(s.buffer, s.buffer), s.body)
        return None

    return map_stmts(node, fn)


def _sub(e: Expr, mapping: dict[Var, Expr], buffers: dict[Buffer, Buffer]) -> Expr:
    if isinstance(e, Var):
        return mapping.get(e, e)
    if isinstance(e, BinOp):
        return BinOp(e.op, _sub(e.a, mapping, buffers), _sub(e.b, mapping, buffers))
    if isinstance(e, Cmp):
        return Cmp(e.op, _sub(e.a, mapping, buffers), _sub(e.b, mapping, buffers))
    if isinstance(e, Select):
        return Select(_sub(e.cond, mapping, buffers), _sub(e.true_value, mapping, buffers),
                      _sub(e.false_value, mapping, buffers))
    if isinstance(e, Cast):
        return Cast(e.dtype, _sub(e.value, mapping, buffers))
    if isinstance(e, BufferLoad):
        return BufferLoad(buffers.get(e.buffer, e.buffer),
                          tuple(_sub(i, mapping, buffers) for i in e.indices))
    return e
