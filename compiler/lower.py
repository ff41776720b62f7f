"""Lowering from a schedule to the loop-nest IR (the first pass of the pipeline).

Steps: inline the stages marked ``compute_inline``; infer the region of every attached stage
(the part of its tensor that its consumers read inside the attach loop, as an affine base plus a
constant extent); give each on-chip stage a buffer of that region's shape, allocated at its
attach loop; then build each stage's loop nest from its leaf loops, placing attached stages
inside the loop they are computed at, and reductions as an init store before the outermost
reduce loop plus an update store innermost.
"""

from __future__ import annotations

from compiler.arith import Affine, NotAffine, to_affine
from compiler.errors import LoweringError
from compiler.schedule import Schedule, Stage
from compiler.te import (
    BinOp,
    Cast,
    Cmp,
    Expr,
    IntImm,
    IterVar,
    Load,
    Reduce,
    Select,
    Tensor,
    Var,
    substitute,
)
from compiler.tir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    ForKind,
    PrimFunc,
    Stmt,
    Store,
    flatten_seq,
    simplify,
)

__all__ = ["lower"]

Region = list[tuple[Affine, int]]


def lower(sch: Schedule, name: str) -> PrimFunc:
    """Lower ``sch`` into a :class:`~compiler.tir.PrimFunc` named ``name``.

    Raises
    ------
    LoweringError
        A region that cannot be inferred (non-affine index, consumer computed elsewhere), a
        split of a stage axis that is computed at another stage's loop, or more than one root.
    """
    _expand_inline(sch)
    stages = [s for s in sch.stages if not s.inline]
    roots = [s for s in stages if s.attach is None]
    if len(roots) != 1 or roots[0].scope != "dram":
        raise LoweringError(
            f"lowering {name}: expected one output stage in DRAM, got "
            f"{', '.join(f'{s.name} [{s.scope}]' for s in roots)}"
        )
    ctx = _Lowering(sch, stages)
    body = ctx.nest(roots[0])
    params = [ctx.params[t] for t in sch.placeholders] + [ctx.params[roots[0].tensor]]
    return PrimFunc(name, params, body)


def _expand_inline(sch: Schedule) -> None:
    for stage in sch.stages:
        if not stage.inline:
            continue
        for reader in sch.readers(stage.tensor):
            reader.op.body = _inline_reads(reader.op.body, stage)


def _inline_reads(expr: Expr, stage: Stage) -> Expr:
    if isinstance(expr, Load):
        idx = tuple(_inline_reads(i, stage) for i in expr.indices)
        if expr.tensor is stage.tensor:
            mapping = {a.var: i for a, i in zip(stage.op.axis, idx, strict=True)}
            return substitute(stage.op.body, mapping)
        return Load(expr.tensor, idx)
    if isinstance(expr, BinOp):
        return BinOp(expr.op, _inline_reads(expr.a, stage), _inline_reads(expr.b, stage))
    if isinstance(expr, Cmp):
        return Cmp(expr.op, _inline_reads(expr.a, stage), _inline_reads(expr.b, stage))
    if isinstance(expr, Select):
        return Select(_inline_reads(expr.cond, stage), _inline_reads(expr.true_value, stage),
                      _inline_reads(expr.false_value, stage))
    if isinstance(expr, Cast):
        return Cast(expr.dtype, _inline_reads(expr.value, stage))
    if isinstance(expr, Reduce):
        return Reduce(_inline_reads(expr.source, stage), expr.axis)
    return expr


class _Lowering:
    def __init__(self, sch: Schedule, stages: list[Stage]) -> None:
        self.sch = sch
        self.stages = stages
        self.params: dict[Tensor, Buffer] = {
            t: Buffer(t.name, "dram", t.shape, t.dtype) for t in sch.placeholders
        }
        root = next(s for s in stages if s.attach is None)
        self.params[root.tensor] = Buffer(root.name, "dram", root.tensor.shape,
                                          root.tensor.dtype)
        self.by_tensor = {s.tensor: s for s in stages}
        self.regions: dict[Stage, Region] = {}
        self.buffers: dict[Stage, Buffer] = {}
        for stage in reversed(stages):
            self.regions[stage] = self._infer_region(stage)
            if stage.attach is not None:
                _parent, iv = stage.attach
                shape = tuple(ext for _, ext in self.regions[stage])
                self.buffers[stage] = Buffer(
                    stage.name, stage.scope, shape, stage.tensor.dtype,
                    origin=f"stage {stage.name}, loop {iv.name}",
                )

    # ------------------------------------------------------------------ bound inference
    def _restricted(self, stage: Stage) -> dict[Var, tuple[Affine, int]]:
        """Root axes whose region is smaller than the tensor: var -> (base, extent)."""
        if stage.attach is None:
            return {}
        out = {}
        for axis, (base, ext) in zip(stage.op.axis, self.regions[stage], strict=True):
            if ext != axis.extent or base.coeffs or base.const:
                out[axis.var] = (base, ext)
        return out

    def _root_values(self, stage: Stage) -> dict[Var, Expr]:
        """Root axis variables as global-coordinate expressions of the stage's loop vars."""
        values = stage.root_values()
        for var, (base, _) in self._restricted(stage).items():
            if values[var] is not var:
                raise LoweringError(
                    f"stage {stage.name}: axis {var.name} is split or fused but computed only "
                    f"over a region at {stage.attach[1].name if stage.attach else '?'}; "
                    "split the loops of the stage it is computed at instead"
                )
            values[var] = simplify(BinOp("+", base.to_expr(), var))
        return values

    def _loop_extent(self, stage: Stage, iv: IterVar) -> int:
        restricted = self._restricted(stage)
        return restricted[iv.var][1] if iv.var in restricted else iv.extent

    def _infer_region(self, stage: Stage) -> Region:
        if stage.attach is None:
            return [(Affine(), n) for n in stage.tensor.shape]
        parent, iv = stage.attach
        consumers = [c for c in self.stages if stage.tensor in c.op.inputs()]
        if not consumers:
            raise LoweringError(f"stage {stage.name}: computed at {parent.name}.{iv.name} but "
                                "nothing reads it")
        bounds: list[list[tuple[Affine, int]]] = [[] for _ in stage.tensor.shape]
        for consumer in consumers:
            if consumer is parent:
                pos = parent.leaf_iter_vars.index(iv)
                varying = {v.var: self._loop_extent(parent, v)
                           for v in parent.leaf_iter_vars[pos + 1 :]}
            elif consumer.attach is not None and consumer.attach[0] is parent and \
                    consumer in self.regions:
                varying = {v.var: self._loop_extent(consumer, v)
                           for v in consumer.leaf_iter_vars}
                # A consumer computed deeper in the parent's nest reads over the parent's
                # loops between the two attach points too.
                leaves = parent.leaf_iter_vars
                pos, deeper = leaves.index(iv), leaves.index(consumer.attach[1])
                varying.update({v.var: self._loop_extent(parent, v)
                                for v in leaves[pos + 1:deeper + 1]})
            else:
                raise LoweringError(
                    f"stage {stage.name}: computed at {parent.name}.{iv.name}, but its "
                    f"consumer {consumer.name} is computed elsewhere"
                )
            values = self._root_values(consumer)
            for load in _loads_of(consumer.op.body, stage.tensor):
                for d, index in enumerate(load.indices):
                    try:
                        form = to_affine(substitute(index, values))
                    except NotAffine:
                        raise LoweringError(
                            f"stage {stage.name}: index {index!r} of its read in "
                            f"{consumer.name} is not affine, so its region at "
                            f"{parent.name}.{iv.name} cannot be inferred"
                        ) from None
                    bounds[d].append(form.bounds(varying))
        region: Region = []
        for d, found in enumerate(bounds):
            base0 = found[0][0]
            lo = min(b.const for b, _ in found)
            hi = max(b.const + ext for b, ext in found)
            for b, _ in found:
                if b.coeffs != base0.coeffs:
                    raise LoweringError(
                        f"stage {stage.name}: consumers read dimension {d} at different "
                        f"offsets ({b.to_expr()!r} vs {base0.to_expr()!r})"
                    )
            region.append((Affine(dict(base0.coeffs), lo), hi - lo))
        return region

    # ------------------------------------------------------------------ loop nests
    def _buffer_of(self, stage: Stage) -> Buffer:
        return self.buffers.get(stage) or self.params[stage.tensor]

    def _convert(self, expr: Expr) -> Expr:
        """Tensor reads -> buffer reads in each buffer's own (region-relative) coordinates."""
        if isinstance(expr, Load):
            idx = tuple(simplify(self._convert(i)) for i in expr.indices)
            stage = self.by_tensor.get(expr.tensor)
            if stage is None or stage.attach is None:
                if expr.tensor not in self.params:
                    raise LoweringError(f"read of {expr.tensor.name}, which is neither an input "
                                        "nor computed on chip")
                return BufferLoad(self.params[expr.tensor], idx)
            rel = tuple(simplify(BinOp("-", i, base.to_expr()))
                        for i, (base, _) in zip(idx, self.regions[stage], strict=True))
            return BufferLoad(self.buffers[stage], rel)
        if isinstance(expr, BinOp):
            return BinOp(expr.op, self._convert(expr.a), self._convert(expr.b))
        if isinstance(expr, Cmp):
            return Cmp(expr.op, self._convert(expr.a), self._convert(expr.b))
        if isinstance(expr, Select):
            return Select(self._convert(expr.cond), self._convert(expr.true_value),
                          self._convert(expr.false_value))
        if isinstance(expr, Cast):
            return Cast(expr.dtype, self._convert(expr.value))
        return expr

    def nest(self, stage: Stage) -> Stmt:
        op = stage.op
        values = self._root_values(stage)
        buf = self._buffer_of(stage)
        restricted = self._restricted(stage)
        store_idx = tuple(
            a.var if a.var in restricted else simplify(values[a.var]) for a in op.axis
        ) if stage.attach is not None else tuple(simplify(values[a.var]) for a in op.axis)
        body = op.body
        reduce = isinstance(body, Reduce)
        source = body.source if isinstance(body, Reduce) else body
        value = self._convert(substitute(source, values))
        if reduce:
            update: Stmt = Store(buf, store_idx, BinOp("+", BufferLoad(buf, store_idx), value))
        else:
            update = Store(buf, store_idx, value)
        leaves = stage.leaf_iter_vars
        first_reduce = next((k for k, v in enumerate(leaves) if v.reduce), None)
        init: Stmt | None = None
        if first_reduce is not None:
            init = Store(buf, store_idx, IntImm(0))
            for v in reversed(leaves[first_reduce:]):
                if not v.reduce:
                    init = self._loop(stage, v, init, attached=False)

        content: Stmt = update
        for k in range(len(leaves) - 1, -1, -1):
            if first_reduce is not None and k + 1 == first_reduce and init is not None:
                content = flatten_seq([init, content])
            content = self._loop(stage, leaves[k], content, attached=True)
        if first_reduce == 0 and init is not None:
            content = flatten_seq([init, content])
        return content

    def _loop(self, stage: Stage, iv: IterVar, body: Stmt, attached: bool) -> Stmt:
        if attached:
            children = [s for s in self.stages if s.attach == (stage, iv)]
            if children:
                inner = flatten_seq([self.nest(c) for c in children] + [body])
                for child in reversed(children):
                    inner = Allocate(self.buffers[child], inner)
                body = inner
        kind = ForKind.VTHREAD if iv in stage.vthreads else ForKind.SERIAL
        pragma = stage.pragmas.get(iv)
        intrinsic = None
        if stage.tensorize_at is not None and stage.tensorize_at[0] is iv:
            intrinsic = stage.tensorize_at[1]
        return For(iv.var, self._loop_extent(stage, iv), body, kind, pragma, intrinsic)


def _loads_of(expr: Expr, tensor: Tensor) -> list[Load]:
    from compiler.te import walk

    return [n for n in walk(expr) if isinstance(n, Load) and n.tensor is tensor]

