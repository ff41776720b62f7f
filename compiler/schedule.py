"""Schedules: how a tensor expression maps onto the accelerator (TVM's schedule primitives).

A :class:`Schedule` holds one :class:`Stage` per compute operation. Primitives change a stage's
loop nest (``split``, ``tile``, ``reorder``, ``fuse``), where it is computed (``compute_at``,
``compute_inline``), where its tensor lives (``set_scope``, ``cache_read``, ``cache_write`` into
the ``inp``, ``wgt`` and ``acc`` on-chip buffers) and how it is executed (``pragma`` with a
:class:`Pragma`, ``tensorize`` with an :class:`Intrinsic`, ``vthread``). Nothing is lowered
until :func:`compiler.lower.lower` reads the schedule; ``Schedule.loop_nest()`` prints the nest
as it stands.

Example, a 64 x 64 matrix product's output stage::

    before                          s[c].split(i, 8)           s[c].reorder(i.outer, j, i.inner)
    for i in 0..64:                 for i.outer in 0..8:       for i.outer in 0..8:
      for j in 0..64:                 for i.inner in 0..8:       for j in 0..64:
        c[i, j] = ...                   for j in 0..64:            for i.inner in 0..8:
                                          c[i, j] = ...              c[i, j] = ...
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compiler.te import (
    ComputeOp,
    Expr,
    IterVar,
    Load,
    PlaceholderOp,
    Tensor,
    Var,
    compute,
    substitute,
)

__all__ = [
    "SCOPES",
    "Fuse",
    "Intrinsic",
    "Pragma",
    "Schedule",
    "ScheduleError",
    "Split",
    "Stage",
    "create_schedule",
]

SCOPES = ("dram", "inp", "wgt", "acc")
"""Where a stage's tensor lives: DRAM or one of the on-chip buffers."""


class ScheduleError(ValueError):
    """A schedule primitive was given something it cannot do; the message names the stage."""


class Pragma(enum.Enum):
    """Execution annotations on a loop."""

    DMA_COPY = "dma_copy"
    """The loop nest is a copy between DRAM and an on-chip buffer: lower it to LOAD/STORE."""
    ALU = "alu"
    """The loop nest is elementwise arithmetic on the acc buffer: lower it to ALU ops."""


@dataclass(frozen=True)
class Intrinsic:
    """A hardware intrinsic for :meth:`Stage.tensorize`: its behaviour and its lowering rule.

    ``behaviour`` is the tensor expression of what one call computes (for GEMM, one tile:
    ``out[b, o] += sum_k inp[b, k] * wgt[o, k]``); ``emit`` builds the IR statement from the
    buffer accesses matched against it.
    """

    name: str
    behaviour: Tensor
    emit: Callable[..., Any]

    @property
    def axis_extents(self) -> tuple[int, ...]:
        op = self.behaviour.op
        assert isinstance(op, ComputeOp)
        return tuple(a.extent for a in op.axis) + tuple(a.extent for a in op.reduce_axis)


@dataclass(eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int


@dataclass(eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(eq=False)
class Stage:
    """The schedule of one operation: its loop nest, placement, scope and annotations."""

    tensor: Tensor
    leaf_iter_vars: list[IterVar]
    relations: list[Split | Fuse] = field(default_factory=list)
    scope: str = "dram"
    attach: tuple[Stage, IterVar] | None = None
    inline: bool = False
    pragmas: dict[IterVar, Pragma] = field(default_factory=dict)
    tensorize_at: tuple[IterVar, Intrinsic] | None = None
    vthreads: list[IterVar] = field(default_factory=list)

    @property
    def op(self) -> ComputeOp:
        assert isinstance(self.tensor.op, ComputeOp)
        return self.tensor.op

    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def root_iter_vars(self) -> tuple[IterVar, ...]:
        return self.op.axis + self.op.reduce_axis

    def _fail(self, why: str) -> ScheduleError:
        return ScheduleError(f"stage {self.name}: {why}")

    def _check_leaf(self, iv: IterVar) -> None:
        if iv not in self.leaf_iter_vars:
            names = ", ".join(v.name for v in self.leaf_iter_vars)
            raise self._fail(f"{iv.name} is not a loop of this stage (loops: {names})")

    # ------------------------------------------------------------------ loop primitives
    def split(self, iv: IterVar, factor: int) -> tuple[IterVar, IterVar]:
        """Split loop ``iv`` into ``outer`` (``extent / factor``) and ``inner`` (``factor``).

        ``for i in 0..16`` becomes ``for i.outer in 0..4: for i.inner in 0..4``, with
        ``i = i.outer * 4 + i.inner``. The factor must divide the extent.
        """
        self._check_leaf(iv)
        if factor < 1 or iv.extent % factor:
            raise self._fail(f"split of {iv.name} (extent {iv.extent}) by {factor}: the factor "
                             "must be a positive divisor of the extent")
        outer = IterVar(Var(f"{iv.name}.outer"), iv.extent // factor, iv.reduce)
        inner = IterVar(Var(f"{iv.name}.inner"), factor, iv.reduce)
        pos = self.leaf_iter_vars.index(iv)
        self.leaf_iter_vars[pos : pos + 1] = [outer, inner]
        self.relations.append(Split(iv, outer, inner, factor))
        return outer, inner

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int
             ) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        """Split ``x`` and ``y`` and order the nest ``x.outer, y.outer, x.inner, y.inner``."""
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def reorder(self, *ivs: IterVar) -> None:
        """Put the given loops in this order, in the positions they occupy together.

        ``for a: for b: for c`` with ``reorder(c, a)`` becomes ``for c: for b: for a``.
        """
        for iv in ivs:
            self._check_leaf(iv)
        if len(set(ivs)) != len(ivs):
            raise self._fail("reorder names a loop twice")
        positions = sorted(self.leaf_iter_vars.index(iv) for iv in ivs)
        for pos, iv in zip(positions, ivs, strict=True):
            self.leaf_iter_vars[pos] = iv

    def fuse(self, outer: IterVar, inner: IterVar) -> IterVar:
        """Fuse two adjacent loops into one of extent ``outer.extent * inner.extent``.

        ``for a in 0..4: for b in 0..8`` becomes ``for a.b in 0..32`` with ``a = a.b // 8``,
        ``b = a.b % 8``.
        """
        self._check_leaf(outer)
        self._check_leaf(inner)
        pos = self.leaf_iter_vars.index(outer)
        if self.leaf_iter_vars.index(inner) != pos + 1:
            raise self._fail(f"fuse: {inner.name} must directly follow {outer.name}")
        if outer.reduce != inner.reduce:
            raise self._fail("fuse: cannot fuse a reduce loop with a spatial loop")
        fused = IterVar(Var(f"{outer.name}.{inner.name}"), outer.extent * inner.extent,
                        outer.reduce)
        self.leaf_iter_vars[pos : pos + 2] = [fused]
        self.relations.append(Fuse(outer, inner, fused))
        return fused

    # ------------------------------------------------------------------ placement
    def compute_at(self, parent: Stage, iv: IterVar) -> None:
        """Compute this stage inside ``parent``'s loop ``iv``, just the region it needs there.

        ``for i.outer: for i.inner: c[i] = b[i]`` with ``b`` computed at ``i.outer`` becomes
        ``for i.outer: {for r in 0..4: b.local[r] = ...; for i.inner: c[i] = b.local[...]}``.
        """
        parent._check_leaf(iv)
        if parent is self:
            raise self._fail("cannot be computed at its own loop")
        self.attach = (parent, iv)

    def compute_inline(self) -> None:
        """Substitute this stage's expression into its readers instead of computing it."""
        if self.op.reduce_axis:
            raise self._fail("a reduction cannot be inlined")
        self.inline = True

    def set_scope(self, scope: str) -> None:
        """Keep this stage's tensor in an on-chip buffer (``inp``, ``wgt`` or ``acc``)."""
        if scope not in SCOPES:
            raise self._fail(f"unknown scope {scope!r}; expected one of {', '.join(SCOPES)}")
        self.scope = scope

    # ------------------------------------------------------------------ execution
    def pragma(self, iv: IterVar, pragma: Pragma) -> None:
        """Annotate the loop nest from ``iv`` inward with ``pragma``."""
        self._check_leaf(iv)
        if not isinstance(pragma, Pragma):
            raise self._fail(f"pragma must be a Pragma, got {pragma!r}")
        self.pragmas[iv] = pragma

    def tensorize(self, iv: IterVar, intrinsic: Intrinsic) -> None:
        """Replace the loop nest from ``iv`` inward with one call of ``intrinsic``."""
        self._check_leaf(iv)
        pos = self.leaf_iter_vars.index(iv)
        extents = tuple(v.extent for v in self.leaf_iter_vars[pos:])
        if sorted(extents) != sorted(intrinsic.axis_extents):
            raise self._fail(
                f"tensorize at {iv.name}: the loops from it inward have extents {extents}, "
                f"the {intrinsic.name} intrinsic needs {intrinsic.axis_extents}"
            )
        self.tensorize_at = (iv, intrinsic)

    def vthread(self, iv: IterVar) -> None:
        """Run iterations of loop ``iv`` as interleaved virtual threads (duplicated buffers)."""
        self._check_leaf(iv)
        if iv.reduce:
            raise self._fail(f"vthread: {iv.name} is a reduce loop")
        self.vthreads.append(iv)

    # ------------------------------------------------------------------ index maps
    def root_values(self) -> dict[Var, Expr]:
        """Each root axis variable as an expression of the leaf loop variables."""
        values: dict[Var, Expr] = {iv.var: iv.var for iv in self.leaf_iter_vars}
        for rel in reversed(self.relations):
            if isinstance(rel, Split):
                values[rel.parent.var] = (
                    values[rel.outer.var] * rel.factor + values[rel.inner.var]
                )
            else:
                fused = values[rel.fused.var]
                values[rel.outer.var] = fused // rel.inner.extent
                values[rel.inner.var] = fused % rel.inner.extent
        return {iv.var: values[iv.var] for iv in self.root_iter_vars}


class Schedule:
    """Stages for every compute operation reachable from ``outputs``.

    The schedule owns a copy of the operation graph: primitives such as ``cache_read`` rewrite
    readers' expressions without touching the tensors the caller built.
    """

    def __init__(self, outputs: Sequence[Tensor]) -> None:
        mapping: dict[Tensor, Tensor] = {}
        self.outputs = [_clone(t, mapping) for t in outputs]
        self.stages: list[Stage] = []
        self._by_tensor: dict[Tensor, Stage] = {}
        for tensor in _topological(self.outputs):
            if isinstance(tensor.op, ComputeOp):
                self._add(tensor)
        self.placeholders = [t for t in _topological(self.outputs)
                             if isinstance(t.op, PlaceholderOp)]

    def _add(self, tensor: Tensor, before: Stage | None = None) -> Stage:
        stage = Stage(tensor, list(tensor.op.axis + tensor.op.reduce_axis))  # type: ignore[union-attr]
        if before is None:
            self.stages.append(stage)
        else:
            self.stages.insert(self.stages.index(before), stage)
        self._by_tensor[tensor] = stage
        return stage

    def __getitem__(self, tensor: Tensor) -> Stage:
        try:
            return self._by_tensor[tensor]
        except KeyError:
            raise ScheduleError(f"{tensor.name} has no stage in this schedule") from None

    def tensor(self, name: str) -> Tensor:
        """The schedule's own tensor of that name (outputs, stages and placeholders)."""
        for t in [s.tensor for s in self.stages] + self.placeholders:
            if t.name == name:
                return t
        raise ScheduleError(f"no tensor named {name!r} in this schedule")

    def readers(self, tensor: Tensor) -> list[Stage]:
        return [s for s in self.stages if tensor in s.op.inputs()]

    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Tensor]) -> Tensor:
        """A copy of ``tensor`` in ``scope`` that the given readers read instead.

        ``c[i] = a[i] * 2`` with ``cache_read(a, "inp", [c])`` becomes
        ``a.inp[i] = a[i]; c[i] = a.inp[i] * 2``.
        """
        if scope not in SCOPES:
            raise ScheduleError(f"cache_read: unknown scope {scope!r}")
        cache = compute(tensor.shape, lambda *i: tensor[i], f"{tensor.name}.{scope}",
                        dtype=tensor.dtype)
        for reader in readers:
            stage = self[reader]
            _replace_reads(stage.op, tensor, cache)
        first = min((self.stages.index(self[r]) for r in readers), default=len(self.stages))
        stage = self._add(cache, before=self.stages[first] if first < len(self.stages) else None)
        stage.scope = scope
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into ``scope`` first, then copy it to where it lived.

        ``c[i] = sum(...)`` becomes ``c.acc[i] = sum(...); c[i] = c.acc[i]``.
        """
        stage = self[tensor]
        op = stage.op
        local = compute(tensor.shape, lambda *i: substitute(
            op.body, {a.var: v for a, v in zip(op.axis, i, strict=True)}),
            f"{tensor.name}.{scope}", dtype=tensor.dtype)
        op.body = local[tuple(a.var for a in op.axis)]
        stage.leaf_iter_vars = list(op.axis)
        stage.relations.clear()
        new = self._add(local, before=stage)
        new.scope = scope
        return local

    def loop_nest(self) -> str:
        """The loop nests of every non-inlined stage, as they stand (for docs and debugging)."""
        lines = []
        for s in self.stages:
            if s.inline:
                continue
            where = f" (at {s.attach[0].name}.{s.attach[1].name})" if s.attach else ""
            lines.append(f"stage {s.name} [{s.scope}]{where}")
            for depth, iv in enumerate(s.leaf_iter_vars):
                notes = []
                if iv in s.pragmas:
                    notes.append(s.pragmas[iv].value)
                if iv in s.vthreads:
                    notes.append("vthread")
                if s.tensorize_at and s.tensorize_at[0] is iv:
                    notes.append(f"tensorize {s.tensorize_at[1].name}")
                note = f"  # {', '.join(notes)}" if notes else ""
                lines.append(f"{'  ' * (depth + 1)}for {iv.name} in 0..{iv.extent}:{note}")
        return "\n".join(lines)


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    """A default schedule (every stage computed at root, in DRAM) for ``outputs``."""
    return Schedule([outputs] if isinstance(outputs, Tensor) else list(outputs))


def _topological(outputs: Sequence[Tensor]) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        if id(t) in seen:
            return
        seen.add(id(t))
        if isinstance(t.op, ComputeOp):
            for dep in t.op.inputs():
                visit(dep)
        order.append(t)

    for t in outputs:
        visit(t)
    return order


def _clone(tensor: Tensor, mapping: dict[Tensor, Tensor]) -> Tensor:
    if tensor in mapping:
        return mapping[tensor]
    if isinstance(tensor.op, PlaceholderOp):
        mapping[tensor] = tensor
        return tensor
    op = tensor.op
    for dep in op.inputs():
        _clone(dep, mapping)
    new_op = ComputeOp(op.name, op.axis, _retarget(op.body, mapping), dict(op.attrs))
    new = Tensor(tensor.name, tensor.shape, tensor.dtype, new_op)
    mapping[tensor] = new
    return new


def _retarget(expr: Expr, mapping: dict[Tensor, Tensor]) -> Expr:
    """``expr`` with tensor reads redirected through ``mapping``."""
    from compiler.te import BinOp, Cast, Cmp, IntImm, Reduce, Select

    if isinstance(expr, (Var, IntImm)):
        return expr
    if isinstance(expr, Load):
        return Load(mapping.get(expr.tensor, expr.tensor),
                    tuple(_retarget(i, mapping) for i in expr.indices))
    if isinstance(expr, BinOp):
        return BinOp(expr.op, _retarget(expr.a, mapping), _retarget(expr.b, mapping))
    if isinstance(expr, Cmp):
        return Cmp(expr.op, _retarget(expr.a, mapping), _retarget(expr.b, mapping))
    if isinstance(expr, Select):
        return Select(_retarget(expr.cond, mapping), _retarget(expr.true_value, mapping),
                      _retarget(expr.false_value, mapping))
    if isinstance(expr, Cast):
        return Cast(expr.dtype, _retarget(expr.value, mapping))
    if isinstance(expr, Reduce):
        return Reduce(_retarget(expr.source, mapping), expr.axis)
    raise TypeError(f"unexpected expression {type(expr).__name__}")


def _replace_reads(op: ComputeOp, old: Tensor, new: Tensor) -> None:
    op.body = _retarget(op.body, {old: new})
