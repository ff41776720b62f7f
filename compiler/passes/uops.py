"""Micro-op loop folding and micro-op kernel caching.

``fold_uop_loops``: the perfect loop nest around a GEMM or ALU statement becomes one instruction.
Two loops become the instruction's hardware loops (``iter_out``, ``iter_in``; every index must
move by a constant factor with them): the two largest, wherever they sit in the nest. The other
loops are enumerated into the micro-op kernel (one micro-op per point), those moving the
destination innermost; kernel loops beyond an eighth of the uop buffer stay instruction loops::

    for kh in 0..3:                          uop_loop hw[y<4, x<56] kernel[kh<3, kw<3]:
      for kw in 0..3:                  ->      gemm acc@(y * 56 + x) += inp@(...) . wgt@(...)
        for y in 0..4:
          for x in 0..56:
            gemm acc@(y * 56 + x) += ...

``cache_uop_kernels``: every instruction's kernel is computed; identical kernels share one copy.
When all distinct kernels fit the uop buffer together they are loaded once, at the start of the
program; otherwise codegen keeps the buffer as a ring and reloads a kernel when it was evicted.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel.machine.config import HwConfig
from compiler.arith import Affine, NotAffine, to_affine
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

__all__ = ["UopKernel", "cache_uop_kernels", "choose_loops", "fold_uop_loops", "kernel_uops",
           "uop_refs"]


def uop_refs(op: Gemm | Alu) -> tuple[TileRef, TileRef | None, TileRef | None]:
    """The (dst, src, wgt) tile references of a micro-op (an immediate ALU op reads dst)."""
    if isinstance(op, Gemm):
        return op.dst, op.src, op.wgt
    return op.dst, op.src if op.src is not None else op.dst, None


def _form(ref: TileRef | None) -> Affine | bool | None:
    """``ref``'s index as an affine form; None for no reference, False where not affine."""
    if ref is None:
        return None
    try:
        return to_affine(ref.index)
    except NotAffine:
        return False


def _factor(ref: TileRef | None, var: Var) -> int | None:
    if ref is None:
        return 0
    try:
        return to_affine(ref.index).coeff(var)
    except NotAffine:
        return None


def fold_uop_loops(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Turn every GEMM/ALU statement and its perfect loop nest into a :class:`UopLoop`.

    The two loops with the largest extents among those every index moves along by a constant
    become the hardware loops, unless that would leave the kernel fewer distinct destinations in
    a row than the GEMM pipeline is deep (``gemm.depth``: a micro-op must not write an
    accumulator that one still in the pipeline writes); the others form the kernel, ordered so
    that the loops moving the destination are innermost. Kernel loops
    beyond the budget (an eighth of the uop buffer) are peeled into instruction loops,
    outermost first. GEMM accumulation and elementwise ALU ops do not depend on the order of
    their micro-ops, so choosing the hardware loops anywhere in the nest is legal.
    """
    budget = max(1, cfg.uop_depth // 8)
    window = cfg.gemm.depth

    def collect(s: Stmt) -> Stmt | None:
        if isinstance(s, (Gemm, Alu)):
            return UopLoop(s, [], [])
        if isinstance(s, For) and s.kind is ForKind.SERIAL and isinstance(s.body, UopLoop) \
                and not s.body.hw_loops:
            return UopLoop(s.body.op, [], [(s.var, s.extent), *s.body.kernel_loops])
        return None

    def finalize(s: Stmt) -> Stmt | None:
        if isinstance(s, UopLoop):
            return choose_loops(s, budget, window)
        return None

    return func.with_body(map_stmts(map_stmts(func.body, collect), finalize))


def choose_loops(loop: UopLoop, budget: int, window: int) -> Stmt:
    """``loop`` (its nest in ``kernel_loops``) folded as :func:`fold_uop_loops` folds it:
    peeled instruction loops around a :class:`UopLoop` with its hardware and kernel loops."""
    chain = list(loop.kernel_loops)
    forms = [_form(r) for r in uop_refs(loop.op)]          # each index parsed once
    # Hardware loops need every index affine (then each moves by a constant along any loop).
    affine = all(f is not False for f in forms)
    dst = forms[0] if isinstance(forms[0], Affine) else None
    moving = {v: dst.coeff(v) if dst is not None else 0 for v, _ in chain}
    hw, kernel, peeled = arrange_loops(chain, moving, affine, budget, window)
    node: Stmt = UopLoop(loop.op, hw, kernel)
    for v, n in reversed(peeled):
        node = For(v, n, node)
    return node


def arrange_loops(chain: list[tuple[Any, int]], moving: dict[Any, int], affine: bool,
                  budget: int, window: int,
                  hazard: Callable[[list, list], bool] | None = None) -> tuple[list, list, list]:
    """The choice of :func:`choose_loops` on a nest given by its loops alone: ``chain`` the
    (variable, extent) loops outer first, ``moving`` the destination index's factor per
    variable, ``affine`` whether every index is affine (else no hardware loops). Returns the
    hardware loops (in nest order), the kernel loops and the peeled instruction loops. The
    variables can be any hashable names (the cost model passes strings). ``hazard(hw,
    kernel)`` stands for :func:`_hazard` where a caller knows its nest's answer in closed form
    (the cost model's dense convolution nest)."""
    if hazard is None:
        hazard = functools.partial(_hazard, moving, window=window)

    def arrange(hw: tuple[tuple[Any, int], ...]) -> tuple[list, list, list]:
        kernel = [item for item in chain if item not in hw]
        peeled: list[tuple[Any, int]] = []
        while kernel and _size(kernel) > budget:
            peeled.append(kernel.pop(0))
        moves = [item for item in kernel if moving[item[0]] != 0]
        kernel = [item for item in kernel if item not in moves] + moves
        return list(hw), kernel, peeled  # combinations keep the nest's order

    # The first choice (two hardware loops, then one, then none) that is free of hazards,
    # leaves no instruction loop and has the most iterations in hardware; of the unsafe ones
    # alike where none is safe. The choices are ranked without the hazard, whose check is the
    # costly part, and checked in that order until one passes.
    candidates = chain if affine else []
    choices = [c for r in (2, 1, 0) for c in itertools.combinations(candidates, r)]
    # (arrange peels instruction loops exactly when the loops left outside the hardware ones
    # hold more than ``budget`` micro-ops.)
    whole = _size(chain)
    sizes = [hw[0][1] * hw[1][1] if len(hw) == 2 else hw[0][1] if hw else 1 for hw in choices]
    ranked = [choices[i] for i in sorted(range(len(choices)), reverse=True,
                                         key=lambda i: (whole // sizes[i] <= budget, sizes[i]))]
    for hw in ranked:
        order, kernel, peeled = arrange(hw)
        if not hazard(order, kernel):
            return order, kernel, peeled
    return arrange(ranked[0])


def _hazard(moving: dict[Var, int], hw: list[tuple[Var, int]], kernel: list[tuple[Var, int]],
            window: int) -> bool:
    """Would two micro-ops less than ``window`` apart in execution order (hardware loops
    outside the kernel) write the same accumulator? ``moving``: the destination's factor per
    loop variable."""
    loops = hw + kernel
    extents = [n for _, n in loops]
    if hw:
        # The sequence repeats its pattern: two outer iterations show every distance.
        extents[0] = min(extents[0], 2)
    return _repeats(tuple(moving[v] for v, _ in loops), tuple(extents), window)


@functools.lru_cache(maxsize=65536)
def _repeats(coeffs: tuple[int, ...], extents: tuple[int, ...], window: int) -> bool:
    """Does the destination sequence of the loops (outer first; each loop's factor and
    extent) write one accumulator twice within ``window`` micro-ops?"""
    size = _size([(None, n) for n in extents])  # type: ignore[misc]
    if size > 1 << 18:
        return False
    seq = np.zeros(1, dtype=np.int64)
    for c, n in zip(coeffs, extents, strict=True):  # outer first: each loop nests inside
        seq = np.add.outer(seq, c * np.arange(n, dtype=np.int64)).ravel()
    return any(np.any(seq[d:] == seq[:-d]) for d in range(1, min(window, size)))


def _size(loops: list[tuple[Var, int]]) -> int:
    size = 1
    for _, n in loops:
        size *= n
    return size


@dataclass(frozen=True)
class UopKernel:
    """A concrete micro-op kernel: (dst, src, wgt) absolute SRAM indices."""

    uops: tuple[tuple[int, int, int], ...]


def kernel_uops(loop: UopLoop, env: dict[Var, int] | None = None) -> UopKernel:
    """The kernel of ``loop`` with its hardware loops at 0 and outer variables from ``env``."""
    env = dict(env or {})
    for v, _ in loop.hw_loops:
        env[v] = 0
    names = [v for v, _ in loop.kernel_loops]
    shape = tuple(n for _, n in loop.kernel_loops)
    grids = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), np.int64)
    columns = []
    for ref in uop_refs(loop.op):
        if ref is None:
            columns.append(np.zeros(grids.shape[1], dtype=np.int64))
            continue
        base = ref.buffer.base or 0
        try:
            form = to_affine(ref.index)
        except NotAffine:
            points = [dict(env, **dict(zip(names, p, strict=True))) for p in grids.T.tolist()]
            columns.append(np.array([base + evaluate_expr(ref.index, e) for e in points]))
            continue
        outer = form.const + sum(c * env[v] for v, c in form.coeffs.items() if v not in names)
        col = np.full(grids.shape[1], base + outer, dtype=np.int64)
        for k, v in enumerate(names):
            col += form.coeff(v) * grids[k]
        columns.append(col)
    return UopKernel(tuple(map(tuple, np.stack(columns, axis=1).tolist())))


def hw_factors(loop: UopLoop) -> list[list[int]]:
    """Per hardware loop (outer first), how far (dst, src, wgt) move per iteration."""
    out = []
    for var, _ in loop.hw_loops:
        row = []
        for ref in uop_refs(loop.op):
            f = _factor(ref, var)
            if f is None:
                raise ValueError(f"hardware loop {var.name} moves {ref!r} non-affinely")
            row.append(f)
        out.append(row)
    return out


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
