"""Micro-op loop folding and micro-op kernel caching.

``fold_uop_loops``: the perfect loop nest around a GEMM or ALU statement becomes one instruction.
The innermost loops are enumerated into a micro-op kernel (one micro-op per point), the next two
outward become the instruction's hardware loops (``iter_out``, ``iter_in``: every index must move
by a constant factor with them), and any loops further out stay loops of instructions. The
kernel is the smallest that keeps at most two hardware loops and fits a quarter of the uop
buffer::

    for kh in 0..3:                          uop_loop hw[kh<3, kw<3] kernel[y<4, x<8]:
      for kw in 0..3:                  ->      gemm acc@(y * 8 + x) += inp@(...) . wgt@(...)
        for y in 0..4:
          for x in 0..8:
            gemm acc@(y * 8 + x) += ...

``cache_uop_kernels``: every instruction's kernel is computed; identical kernels share one copy.
When all distinct kernels fit the uop buffer together they are loaded once, at the start of the
program; otherwise codegen keeps the buffer as a ring and reloads a kernel when it was evicted.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from accel.config import HwConfig
from compiler.arith import NotAffine, to_affine
from compiler.te import Var, walk
from compiler.tir import (
    Alu,
    For,
    ForKind,
    Gemm,
    PrimFunc,
    Stmt,
    TileRef,
    UopLoop,
    evaluate_expr,
    map_stmts,
    stmts,
)

__all__ = ["UopKernel", "cache_uop_kernels", "fold_uop_loops", "kernel_uops", "uop_refs"]


def uop_refs(op: Gemm | Alu) -> tuple[TileRef, TileRef | None, TileRef | None]:
    """The (dst, src, wgt) tile references of a micro-op (an immediate ALU op reads dst)."""
    if isinstance(op, Gemm):
        return op.dst, op.src, op.wgt
    return op.dst, op.src if op.src is not None else op.dst, None


def _factor(ref: TileRef | None, var: Var) -> int | None:
    if ref is None:
        return 0
    try:
        return to_affine(ref.index).coeff(var)
    except NotAffine:
        return None


def fold_uop_loops(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Turn every GEMM/ALU statement and its loop nest into a :class:`UopLoop`."""
    budget = max(1, cfg.uop_depth // 4)

    def rewrite(s: Stmt) -> Stmt | None:
        if isinstance(s, (Gemm, Alu)):
            return UopLoop(s, [], [])
        if not isinstance(s, For) or s.kind is not ForKind.SERIAL:
            return None
        if not isinstance(s.body, UopLoop) or s.body.hw_loops:
            return None
        inner = s.body
        kernel = [(s.var, s.extent), *inner.kernel_loops]
        size = 1
        for _, n in kernel:
            size *= n
        if size <= budget:
            return UopLoop(inner.op, [], kernel)
        return None

    body = map_stmts(func.body, rewrite)

    def hoist(s: Stmt) -> Stmt | None:
        # Kernel loops that did not fit: the outermost ones become hardware loops.
        if not isinstance(s, For) or s.kind is not ForKind.SERIAL:
            return None
        inner = s.body
        if not isinstance(inner, UopLoop) or len(inner.hw_loops) >= 2:
            return None
        refs = uop_refs(inner.op)
        if any(_factor(r, s.var) is None for r in refs):
            return None
        return UopLoop(inner.op, [(s.var, s.extent), *inner.hw_loops], inner.kernel_loops)

    body = map_stmts(body, hoist)
    return func.with_body(_promote_kernels(body, budget))


def _promote_kernels(body: Stmt, budget: int) -> Stmt:
    """Move outer kernel loops into free hardware-loop slots (fewer micro-ops per kernel)."""

    def fn(s: Stmt) -> Stmt | None:
        if not isinstance(s, UopLoop):
            return None
        hw, kernel = list(s.hw_loops), list(s.kernel_loops)
        refs = uop_refs(s.op)
        while len(hw) < 2 and len(kernel) > 1:
            var, n = kernel[0]
            if any(_factor(r, var) is None for r in refs):
                break
            hw.append((var, n))
            kernel.pop(0)
        return UopLoop(s.op, hw, kernel)

    del budget
    return map_stmts(body, fn)


@dataclass(frozen=True)
class UopKernel:
    """A concrete micro-op kernel: (dst, src, wgt) absolute SRAM indices."""

    uops: tuple[tuple[int, int, int], ...]


def kernel_uops(loop: UopLoop, env: dict[Var, int] | None = None) -> UopKernel:
    """The kernel of ``loop`` with its hardware loops at 0 and outer variables from ``env``."""
    env = dict(env or {})
    for v, _ in loop.hw_loops:
        env[v] = 0
    dst, src, wgt = uop_refs(loop.op)
    ranges = [range(n) for _, n in loop.kernel_loops]
    names = [v for v, _ in loop.kernel_loops]
    out = []
    for point in itertools.product(*ranges):
        env.update(zip(names, point, strict=True))
        row = []
        for ref in (dst, src, wgt):
            if ref is None:
                row.append(0)
            else:
                base = ref.buffer.base or 0
                row.append(base + evaluate_expr(ref.index, env))
        out.append((row[0], row[1], row[2]))
    return UopKernel(tuple(out))


def _static(loop: UopLoop) -> bool:
    own = {v for v, _ in loop.hw_loops + loop.kernel_loops}
    for ref in uop_refs(loop.op):
        if ref is None:
            continue
        for node in walk(ref.index):
            if isinstance(node, Var) and node not in own:
                return False
    return True


def cache_uop_kernels(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Plan the uop buffer: ``func.attrs["uop_kernels"]`` maps each distinct static kernel to
    its offset when all of them fit together, else the plan is left to codegen's ring."""
    kernels: dict[UopKernel, int] = {}
    dynamic = False
    for s in stmts(func.body):
        if isinstance(s, UopLoop):
            if not _static(s):
                dynamic = True
                continue
            k = kernel_uops(s)
            if k not in kernels:
                kernels[k] = sum(len(x.uops) for x in kernels)
    total = sum(len(k.uops) for k in kernels)
    fits = total <= cfg.uop_depth and not dynamic
    func.attrs["uop_kernels"] = kernels if fits else None
    func.attrs["uop_total"] = total
    return func
