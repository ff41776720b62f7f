"""Tensorize: loop nests annotated with an intrinsic become one tile-level statement.

Before (the GEMM intrinsic at loop ``b``)::

    for b in 0..1:  # tensorize gemm
      for co in 0..8:
        for ici in 0..8:
          conv[n, o, y, x, b, co] = conv[n, o, y, x, b, co]
                                    + int32(inp[n, c, y + kh, x + kw, b, ici])
                                    * int32(wgt[o, c, kh, kw, co, ici])
After::

    gemm conv@(<tile of n, o, y, x>) += inp@(<tile>) . wgt@(<tile>)

The reduction's init nest (``conv[...] = 0`` over a tile) becomes ``gemm_reset``. The nest is
checked against the intrinsic's declared behaviour: the loop extents, which loop indexes which
tile axis, and the shape of the expression.
"""

from __future__ import annotations

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.passes.common import perfect_nest, split_tile_access
from compiler.schedule import Intrinsic
from compiler.te import BinOp, Cast, ComputeOp, Expr, IntImm, Load, Reduce, Var
from compiler.tir import BufferLoad, For, Gemm, PrimFunc, Stmt, Store, TileRef, map_stmts

__all__ = ["tensorize"]


def tensorize(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Replace every nest annotated with an intrinsic by the intrinsic's statement."""

    def rewrite(s: Stmt) -> Stmt | None:
        if isinstance(s, For) and s.intrinsic is not None:
            return _tensorize_nest(s, s.intrinsic)
        return None

    return func.with_body(map_stmts(func.body, rewrite))


def _tensorize_nest(loop: For, intrin: Intrinsic) -> Stmt:
    loops, body = perfect_nest(loop)
    where = f"tensorize {intrin.name} at loop {loop.var.name}"
    if not isinstance(body, Store):
        raise LoweringError(f"{where}: the nest must end in one store")
    op = intrin.behaviour.op
    assert isinstance(op, ComputeOp)
    spatial = [a.extent for a in op.axis]
    if isinstance(body.value, IntImm):
        # The reduction's init over one tile.
        if body.value.value != 0 or [lp.extent for lp in loops] != spatial:
            raise LoweringError(f"{where}: an init nest must zero exactly one tile")
        dst = split_tile_access(body.buffer, body.indices, [lp.var for lp in loops], where)
        return Gemm(dst=dst, reset=True)
    if [lp.extent for lp in loops] != spatial + [a.extent for a in op.reduce_axis]:
        raise LoweringError(
            f"{where}: loop extents {[lp.extent for lp in loops]} do not match the intrinsic's "
            f"{spatial + [a.extent for a in op.reduce_axis]}"
        )
    value = body.value
    if not (isinstance(value, BinOp) and value.op == "+" and isinstance(value.a, BufferLoad)
            and value.a.buffer is body.buffer and list(value.a.indices) == list(body.indices)):
        raise LoweringError(f"{where}: the store must accumulate into its own element")
    assert isinstance(op.body, Reduce)
    axis_vars = [a.var for a in op.axis] + [a.var for a in op.reduce_axis]
    var_map = {pv: lp.var for pv, lp in zip(axis_vars, loops, strict=True)}
    matched: dict[str, BufferLoad] = {}
    if not _unify(op.body.source, value.b, var_map, matched):
        raise LoweringError(f"{where}: the expression does not match the intrinsic's behaviour")
    b, o, k = (lp.var for lp in loops)
    dst = split_tile_access(body.buffer, body.indices, [b, o], where)
    inp, wgt = matched["inp"], matched["wgt"]
    if inp.buffer.scope != "inp" or wgt.buffer.scope != "wgt":
        raise LoweringError(f"{where}: operands must be in the inp and wgt buffers, got "
                            f"{inp.buffer.scope} and {wgt.buffer.scope}")
    src = split_tile_access(inp.buffer, inp.indices, [b, k], where)
    w = split_tile_access(wgt.buffer, wgt.indices, [o, k], where)
    _check_outer(loops, [src, w, dst], where)
    return intrin.emit(dst, src, w)


def _check_outer(loops: list[For], refs: list[TileRef], where: str) -> None:
    from compiler.te import walk

    inner = {lp.var for lp in loops}
    for ref in refs:
        for node in walk(ref.index):
            if isinstance(node, Var) and node in inner:
                raise LoweringError(f"{where}: tile index of {ref.buffer.name} uses the "
                                    f"intrinsic's own loop {node.name}")


def _unify(pattern: Expr, expr: Expr, var_map: dict[Var, Var],
           matched: dict[str, BufferLoad]) -> bool:
    """Does ``expr`` have ``pattern``'s shape, with pattern tensors bound to buffer reads?"""
    if isinstance(pattern, BinOp):
        return (isinstance(expr, BinOp) and expr.op == pattern.op
                and _unify(pattern.a, expr.a, var_map, matched)
                and _unify(pattern.b, expr.b, var_map, matched))
    if isinstance(pattern, Cast):
        return (isinstance(expr, Cast) and expr.dtype == pattern.dtype
                and _unify(pattern.value, expr.value, var_map, matched))
    if isinstance(pattern, Load):
        if not isinstance(expr, BufferLoad):
            return False
        tail = list(expr.indices[-len(pattern.indices):])
        want = [var_map.get(i, i) if isinstance(i, Var) else i for i in pattern.indices]
        if tail != want:
            return False
        prior = matched.get(pattern.tensor.name)
        if prior is not None and prior.buffer is not expr.buffer:
            return False
        matched[pattern.tensor.name] = expr
        return True
    return False
