"""In-place accumulators and ALU intrinsic injection.

``inplace_acc``: an acc-scope stage that reads its producer element for element (``shr[i] =
bias_add[i] >> 4``) can overwrite the producer's buffer, because nothing reads the producer
after it. The chain bias_add -> shr -> clip_hi -> clip_lo then lives in the accumulators::

    alloc bias_add: acc ...                 (gone)
    bias_add[i] = conv[i] + bias.acc[j]  ->  conv[i] = conv[i] + bias.acc[j]

``inject_alu``: nests annotated ``ALU`` whose innermost two loops walk one acc tile become ALU
statements on tiles::

    for o in 0..2:  # alu                      for o in 0..2:
      for b in 0..1:                      ->     alu_shr conv@o, 4
        for co in 0..8:
          conv[o, b, co] = conv[o, b, co] >> 4
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from accel.machine.config import HwConfig
from accel.machine.costs import alu_cycles, gemm_cycles, mem_cycles
from accel.machine.isa import AluInsn, AluOp, GemmInsn, MemInsn, MemType
from compiler.arith import Affine, NotAffine, to_affine
from compiler.errors import LoweringError
from compiler.passes.common import perfect_nest, split_tile_access, wrap_loops
from compiler.schedule import Pragma
from compiler.te import BinOp, Expr, IntImm, Var, substitute, walk
from compiler.tir import (
    Allocate,
    Alu,
    Buffer,
    BufferLoad,
    DmaCopy,
    For,
    Gemm,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    TileRef,
    map_stmts,
    simplify,
    stmts,
)

__all__ = ["BiasInit", "accumulate_add", "bias_init_cycles", "inject_alu", "inplace_acc",
           "load_bias", "reset_bias", "store_requant"]

_ALU_OPS = {"+": AluOp.ADD, ">>": AluOp.SHR, "min": AluOp.MIN, "max": AluOp.MAX,
            "*": AluOp.MUL}


def _rename(node: Stmt, old: Buffer, new: Buffer) -> Stmt:
    def expr(e: Expr) -> Expr:
        if isinstance(e, BufferLoad):
            return BufferLoad(new if e.buffer is old else e.buffer,
                              tuple(expr(i) for i in e.indices))
        if isinstance(e, BinOp):
            return BinOp(e.op, expr(e.a), expr(e.b))
        from compiler.te import Cast, Cmp, Select

        if isinstance(e, Cast):
            return Cast(e.dtype, expr(e.value))
        if isinstance(e, Cmp):
            return Cmp(e.op, expr(e.a), expr(e.b))
        if isinstance(e, Select):
            return Select(expr(e.cond), expr(e.true_value), expr(e.false_value))
        return e

    def ref(r: TileRef | None) -> TileRef | None:
        if r is None or r.buffer is not old:
            return r
        return TileRef(new, r.index)

    def fn(s: Stmt) -> Stmt | None:
        if isinstance(s, Store):
            return Store(new if s.buffer is old else s.buffer, s.indices, expr(s.value))
        if isinstance(s, DmaCopy):
            return replace(s, sram=ref(s.sram), dram=ref(s.dram))
        if isinstance(s, Gemm):
            return replace(s, dst=ref(s.dst), src=ref(s.src), wgt=ref(s.wgt))
        if isinstance(s, Alu):
            return replace(s, dst=ref(s.dst), src=ref(s.src))
        return None

    return map_stmts(node, fn)


def _reads(node: Stmt, buf: Buffer) -> list[Store]:
    """Stores (other than into ``buf`` itself) whose value reads ``buf``."""
    found = []
    for s in stmts(node):
        if isinstance(s, Store) and s.buffer is not buf and any(
                isinstance(n, BufferLoad) and n.buffer is buf for n in walk(s.value)):
            found.append(s)
    return found


def inplace_acc(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Let elementwise acc stages overwrite the acc buffer they read (see module docstring)."""

    def fn(s: Stmt) -> Stmt | None:
        if not (isinstance(s, Allocate) and s.buffer.scope == "acc"):
            return None
        target = s.buffer
        writers = [w for w in stmts(s.body) if isinstance(w, Store) and w.buffer is target
                   and not _updates_in_place(w)]
        if len(writers) != 1:
            return None
        writer = writers[0]
        sources = [n for n in walk(writer.value) if isinstance(n, BufferLoad)
                   and n.buffer.scope == "acc" and list(n.indices) == list(writer.indices)
                   and n.buffer.shape == target.shape]
        if len(sources) != 1:
            return None
        producer = sources[0].buffer
        if [r for r in _reads(s.body, producer) if r.buffer is not target]:
            return None  # something else still reads the producer
        return _rename(s.body, target, producer)

    body = func.body
    while True:
        new = map_stmts(body, fn)
        if _count_allocs(new) == _count_allocs(body):
            return func.with_body(new)
        body = new


def _updates_in_place(store: Store) -> bool:
    return any(isinstance(n, BufferLoad) and n.buffer is store.buffer
               and list(n.indices) == list(store.indices) for n in walk(store.value))


def _count_allocs(node: Stmt) -> int:
    return sum(isinstance(s, Allocate) for s in stmts(node))


def inject_alu(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Replace every ``ALU`` nest with tile-level :class:`~compiler.tir.Alu` statements."""

    def rewrite(s: Stmt) -> Stmt | None:
        if isinstance(s, For) and s.pragma is Pragma.ALU:
            return _lower_alu(s, cfg)
        return None

    return func.with_body(map_stmts(func.body, rewrite))


def _lower_alu(loop: For, cfg: HwConfig) -> Stmt:
    loops, body = perfect_nest(loop)
    where = f"alu at loop {loop.var.name}"
    if not isinstance(body, Store) or body.buffer.scope != "acc":
        raise LoweringError(f"{where}: the nest must end in one store to the acc buffer")
    if len(loops) < 2 or [lp.extent for lp in loops[-2:]] != [cfg.batch, cfg.block_out]:
        raise LoweringError(f"{where}: the two innermost loops must walk one acc tile "
                            f"({cfg.batch}x{cfg.block_out})")
    tile_vars = [lp.var for lp in loops[-2:]]
    dst = split_tile_access(body.buffer, body.indices, tile_vars, where)
    value = body.value
    if not (isinstance(value, BinOp) and value.op in _ALU_OPS):
        raise LoweringError(f"{where}: {value!r} is not an ALU operation "
                            f"({', '.join(_ALU_OPS)})")
    a, b = value.a, value.b

    def own(e: Expr) -> bool:
        return (isinstance(e, BufferLoad) and e.buffer is body.buffer
                and list(e.indices) == list(body.indices))

    if not own(a) and value.op in ("+", "*", "min", "max") and own(b):
        a, b = b, a
    if not own(a):
        raise LoweringError(f"{where}: ALU operations update the acc element in place")
    op = _ALU_OPS[value.op]
    if isinstance(b, IntImm):
        if not -(1 << 15) <= b.value < 1 << 15:
            raise LoweringError(f"{where}: immediate {b.value} does not fit 16 bits")
        if op is AluOp.SHR and not 0 <= b.value <= 31:
            raise LoweringError(f"{where}: shift {b.value} is outside 0..31")
        alu: Stmt = Alu(op, dst, imm=b.value)
    elif isinstance(b, BufferLoad) and b.buffer.scope == "acc":
        alu = Alu(op, dst, src=split_tile_access(b.buffer, b.indices, tile_vars, where))
    else:
        raise LoweringError(f"{where}: the operand {b!r} must be an immediate or an acc tile")
    return wrap_loops(loops[:-2], alu)


def accumulate_add(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """An ALU ADD ``a += b`` of an acc buffer ``b`` that only GEMMs fill (from a reset) becomes
    those GEMMs accumulating into ``a``: the reset, the ADD and ``b`` go::

        for t:  gemm_reset b@t                        (gemms into conv, ...)
        for t:  gemm b@t += skip.inp@t . ident.wgt@0   ->   for t:  gemm conv@t += skip.inp@t
        for t:  alu_add conv@t, b@t                                        . ident.wgt@0

    This is how the residual add (:mod:`compiler.ops.eltwise`) and the fused conv2d_add
    (:mod:`compiler.ops.residual`) bring an int8 operand into the sum: a GEMM against the
    identity tile. Bit-exact: int32 additions wrap, in any order. Matched on the IR: in one
    statement list, a reset nest over every tile of ``b``, then statements that touch ``b``
    only by GEMMs accumulating into it and do not touch ``a``, then an ADD nest over every tile
    of ``a`` adding ``b`` at the same tile index, with nothing after it touching ``b``, and
    ``a`` and ``b`` of as many tiles. Elsewhere the IR is unchanged."""
    folded: set[Buffer] = set()
    return _rewrite_lists(func, lambda body: _accumulate_adds(body, folded), folded)


def _rewrite_lists(func: PrimFunc, fn: Callable[[list[Stmt]], list[Stmt]],
                   dropped: set[Buffer]) -> PrimFunc:
    """``func`` with ``fn`` applied to every statement list, and the allocations of the
    buffers ``fn`` put in ``dropped`` removed where nothing touches them any more; ``func``
    itself when ``fn`` dropped none."""
    def rewrite(s: Stmt) -> Stmt | None:
        if isinstance(s, Seq):
            return Seq(fn(s.body))
        if isinstance(s, Allocate) and s.buffer in dropped and not _touches(s.body, s.buffer):
            return s.body
        return None

    body = map_stmts(func.body, rewrite)
    return func.with_body(body) if dropped else func


def _accumulate_adds(body: list[Stmt], folded: set[Buffer]) -> list[Stmt]:
    out = list(body)
    i = 0
    while i < len(out):
        add = _alu_nest(out[i])
        if add is None or add.op is not AluOp.ADD or add.src is None \
                or add.src.buffer is add.dst.buffer or not _covers(out[i], add.dst.buffer):
            i += 1
            continue
        a, b = add.dst.buffer, add.src.buffer
        r = _reset_before(out, i, b)
        if r is None or not _covers(out[r], b) or a.n_tiles != b.n_tiles \
                or any(_touches(s, a) for s in out[r + 1:i]) \
                or any(_touches(s, b) for s in out[i + 1:]) \
                or not _same_index(add.dst.index, add.src.index):
            i += 1
            continue
        out = [*out[:r], *(_rename(s, b, a) for s in out[r + 1:i]), *out[i + 1:]]
        folded.add(b)
        i = r
    return out


def _same_index(x: Expr, y: Expr) -> bool:
    try:
        return to_affine(x) == to_affine(y)
    except NotAffine:
        return False


def reset_bias(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """With a GEMM that resets from the acc buffer (``gemm.reset_from_acc``): the bias, added by
    an ALU ADD after the accumulation, instead starts it. The bias's LOAD ACC moves ahead of
    the reset, which copies it into the accumulators, and the ADD goes::

        for y, x:  gemm_reset conv@(y*4 + x)            dma_load ACC bias.acc@0 <-> bias@..
        (gemms into conv, loads of inp and wgt)   ->    for y, x:  gemm_reset conv@(y*4 + x)
        dma_load ACC bias.acc@0 <-> bias@..                             = bias.acc@(y*0 + 0)
        for y, x:  alu_add conv@(y*4 + x), bias.acc@0   (gemms into conv, loads of inp and wgt)

    Bit-exact: int32 addition wraps, so ``bias + sum`` is ``sum + bias`` in any order. Matched
    on the IR whatever operator produced it: a reset nest over every tile of an acc buffer, an
    ADD nest of another acc buffer over the same tiles in the same statement list, between them
    only GEMM accumulations into the buffer and the one LOAD ACC of the bias (with nothing else
    touching the bias), and the two nests' loops alike (extents in order, the same destination
    index). Without the option, or where the pattern does not hold, the IR is unchanged."""
    if not cfg.gemm.reset_from_acc:
        return func

    def rewrite(s: Stmt) -> Stmt | None:
        if isinstance(s, Seq):
            return Seq(_fold_bias_adds(s.body, _copy_bias))
        return None

    return func.with_body(map_stmts(func.body, rewrite))


def _copy_bias(body: list[Stmt], m: _BiasAdd) -> list[Stmt]:
    """``reset_bias``'s form of ``m``: the bias's LOAD (where it is in the list), then the
    reset copying it."""
    reset_loops, reset = _loops_and_body(body[m.reset])
    copy = wrap_loops(reset_loops, replace(reset, src=TileRef(m.bias, m.src)))
    return m.rewritten(body, [body[m.load], copy] if m.load >= 0 else [copy])


def _loops_and_body(s: Stmt) -> tuple[list[For], Stmt]:
    """The loops of a perfect nest and its innermost statement; no loops for a bare one."""
    return perfect_nest(s) if isinstance(s, For) else ([], s)


def _gemm_nest(s: Stmt) -> Gemm | None:
    inner = _loops_and_body(s)[1]
    return inner if isinstance(inner, Gemm) else None


@dataclass(frozen=True)
class _BiasAdd:
    """A bias ADD that may start the accumulation instead, in one statement list: the indices
    of the acc buffer's reset nest, of the bias's LOAD ACC (-1: loaded outside the list, before
    it) and of the ADD nest, the bias's acc buffer, and the ADD's source index in the reset
    nest's loop variables."""

    reset: int
    load: int
    add: int
    bias: Buffer
    src: Expr

    def rewritten(self, body: list[Stmt], start: list[Stmt]) -> list[Stmt]:
        """``body`` with ``start`` in place of the reset nest, and the bias's LOAD and the ADD
        gone."""
        accumulation = [s for k, s in enumerate(body[self.reset + 1:self.add], self.reset + 1)
                        if k != self.load]
        return [*body[:self.reset], *start, *accumulation, *body[self.add + 1:]]


_BiasFold = Callable[[list[Stmt], _BiasAdd], list[Stmt] | None]


def _fold_bias_adds(body: list[Stmt], fold: _BiasFold) -> list[Stmt]:
    """``body`` with ``fold`` applied to each bias ADD it matches (:func:`_match_bias_add`);
    ``fold`` returns the new statement list, or None to leave that ADD as it is."""
    out = list(body)
    i = 0
    while i < len(out):
        m = _match_bias_add(out, i)
        new = None if m is None else fold(out, m)
        if m is None or new is None:
            i += 1
        else:
            out, i = new, m.reset      # nothing before the reset changed
    return out


def _match_bias_add(body: list[Stmt], i: int) -> _BiasAdd | None:
    """``body[i]`` as a bias ADD (see :func:`reset_bias` for the pattern), or None."""
    add = _alu_nest(body[i])
    if add is None or add.op is not AluOp.ADD or add.src is None \
            or add.src.buffer is add.dst.buffer or not _covers(body[i], add.dst.buffer):
        return None
    acc, bias = add.dst.buffer, add.src.buffer
    r = _reset_before(body, i, acc)
    if r is None or not _covers(body[r], acc):
        return None
    loads = [k for k in range(r + 1, i) if _touches(body[k], bias)]
    if loads and (len(loads) != 1 or not _loads_acc(body[loads[0]], bias)):
        return None
    src = _moved_index(body[i], body[r], add)
    # No LOAD here: the bias was loaded outside this list (resident over its tiles).
    return None if src is None else _BiasAdd(r, loads[0] if loads else -1, i, bias, src)


def load_bias(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Without the GEMM reset from acc (``gemm.reset_from_acc``, where :func:`reset_bias` does
    it): the bias, added by an ALU ADD after the accumulation, is instead loaded into the
    accumulators, and the GEMMs accumulate onto it. The bias's LOAD ACC writes every acc tile,
    its DRAM rows all starting at the bias (``x_stride`` 0, the bias repeated for every pixel),
    in place of the reset; the reset, the ADD and the bias's acc buffer go::

        for o, y, x:  gemm_reset conv@(o*16 + y*4 + x)     for o:  dma_load ACC conv@(o*16)
        (gemms into conv, loads of inp and wgt)     ->              <-> bias@(b + o) y=16 x=1
        dma_load ACC bias.acc@0 <-> bias@b x=2                      stride=0
        for o, y, x:                                       (gemms into conv, loads of inp and
          alu_add conv@(o*16 + y*4 + x), bias.acc@o         wgt)

    The LOAD's x walks the innermost loops along which the bias changes with the acc tile
    (matmul's output columns), its y the loops next out along which it stays (a convolution's
    pixels, matmul's rows); the loops outside those repeat the LOAD. Bit-exact as
    :func:`reset_bias` is, and matched as it is, where the bias's LOAD is besides one bare,
    unpadded copy of contiguous tiles.

    It fires where it costs the compute module no more cycles than it saves
    (:func:`bias_init_cycles`): LOAD ACC runs on the compute module, which waits for its DRAM
    transfer, so each acc tile costs its beats (``acc_tile_bytes / dram.bytes_per_cycle``)
    where the reset and the ADD cost ``gemm.ii + max(alu.ii, 2)`` cycles. With the option, or
    where the pattern does not hold or the LOADs cost more, the IR is unchanged."""
    if cfg.gemm.reset_from_acc:
        return func
    loaded: set[Buffer] = set()

    def fold(body: list[Stmt], m: _BiasAdd) -> list[Stmt] | None:
        start = _bias_loads(body, m, cfg)
        if start is None:
            return None
        loaded.add(m.bias)
        return m.rewritten(body, [start])

    return _rewrite_lists(func, lambda body: _fold_bias_adds(body, fold), loaded)


@dataclass(frozen=True)
class BiasInit:
    """Compute-module cycles of one output tile's bias both ways (``accel.machine.costs``),
    each part with the DRAM channel to itself."""

    loaded: int
    """The LOADs of the bias into every acc tile (:func:`load_bias`)."""
    added: int
    """The reset of the acc tiles, the bias's LOAD and the ALU ADD (a micro-op per tile)."""

    @property
    def pays(self) -> bool:
        """Loading the bias costs no more than resetting and adding it."""
        return self.loaded <= self.added


def bias_init_cycles(tiles: int, loads: int, load: MemInsn, bias_load: MemInsn,
                     cfg: HwConfig) -> BiasInit:
    """:class:`BiasInit` of an output tile of ``tiles`` acc tiles whose bias ``loads`` LOADs
    like ``load`` would write, against a reset and an ADD of one micro-op per tile and the
    bias's own LOAD ``bias_load``. The reset and the ADD are counted as one instruction each
    (codegen may split them where the micro-op loops cannot hold a nest)."""
    reset = GemmInsn(reset=True, uop_end=tiles)
    add = AluInsn(alu_op=AluOp.ADD, uop_end=tiles)
    return BiasInit(loads * mem_cycles(load, cfg),
                    gemm_cycles(reset, cfg) + alu_cycles(add, cfg) + mem_cycles(bias_load, cfg))


def _bias_loads(body: list[Stmt], m: _BiasAdd, cfg: HwConfig) -> Stmt | None:
    """The LOADs of the bias into every acc tile that take the place of ``m``'s reset, or None
    where the bias's LOAD is not one bare, unpadded copy of contiguous tiles, an index is not
    affine, or they do not pay."""
    if m.load < 0:
        return None
    old = body[m.load]
    sizes = _const_sizes(old) if isinstance(old, DmaCopy) else None
    if sizes is None or (sizes[0] > 1 and old.x_stride != sizes[1]):
        return None
    loops, reset = _loops_and_body(body[m.reset])
    try:
        dst, src = to_affine(reset.dst.index), to_affine(m.src)
    except NotAffine:
        return None
    outer, y, x = _broadcast_rows(loops, dst, src)
    limit = 1 << cfg.isa.size_bits
    if y >= limit or x >= limit:
        return None
    inner = [lp.var for lp in loops[len(outer):]]
    stride = 0 if y > 1 else x
    cost = bias_init_cycles(
        _iterations(loops), _iterations(outer),
        MemInsn(mem_type=MemType.ACC, y_size=y, x_size=x, x_stride=stride),
        MemInsn(mem_type=MemType.ACC, y_size=sizes[0], x_size=sizes[1], x_stride=old.x_stride),
        cfg)
    if not cost.pays:
        return None
    dram = simplify(BinOp("+", old.dram.index,
                          BinOp("-", src.without(inner).to_expr(), old.sram.index)))
    copy = DmaCopy(MemType.ACC, False, TileRef(reset.dst.buffer, dst.without(inner).to_expr()),
                   TileRef(old.dram.buffer, dram), IntImm(y), IntImm(x), stride)
    return wrap_loops(outer, copy)


def _const_sizes(copy: DmaCopy) -> tuple[int, int] | None:
    """``(y_size, x_size)`` of an unpadded copy of constant size, else None."""
    pads = (copy.y_pad_0, copy.y_pad_1, copy.x_pad_0, copy.x_pad_1)
    if not all(isinstance(p, IntImm) and p.value == 0 for p in pads) \
            or not isinstance(copy.y_size, IntImm) or not isinstance(copy.x_size, IntImm):
        return None
    return copy.y_size.value, copy.x_size.value


def _broadcast_rows(loops: list[For], dst: Affine, src: Affine) -> tuple[list[For], int, int]:
    """Split a nest writing acc tile ``dst`` from bias tile ``src`` into a LOAD's rows: from the
    innermost, ``x`` elements over loops along which both step through consecutive tiles, then
    ``y`` rows over loops along which ``dst`` goes on and ``src`` stays (a loop of one
    iteration joins either); returns the loops outside them, ``y`` and ``x``."""
    k, x, y = len(loops), 1, 1
    while k and _steps(loops[k - 1], dst, x) and _steps(loops[k - 1], src, x):
        x *= loops[k - 1].extent
        k -= 1
    while k and _steps(loops[k - 1], dst, x * y) and _steps(loops[k - 1], src, 0):
        y *= loops[k - 1].extent
        k -= 1
    return loops[:k], y, x


def _steps(loop: For, index: Affine, stride: int) -> bool:
    return loop.extent == 1 or index.coeff(loop.var) == stride


def _iterations(loops: list[For]) -> int:
    count = 1
    for loop in loops:
        count *= loop.extent
    return count


def _is_reset_of(s: Stmt, buffer: Buffer) -> bool:
    g = _gemm_nest(s)
    return g is not None and g.reset and g.src is None and g.dst.buffer is buffer


def _reset_before(body: list[Stmt], i: int, buffer: Buffer) -> int | None:
    """The index of the reset nest of ``buffer`` before ``body[i]``, with nothing but GEMM
    accumulations into it in between."""
    for k in range(i - 1, -1, -1):
        if _is_reset_of(body[k], buffer):
            return k
        if not _only_accumulates(body[k], buffer):
            return None
    return None


def _only_accumulates(s: Stmt, buffer: Buffer) -> bool:
    """``buffer`` is touched in ``s`` by GEMMs accumulating into it, if at all."""
    for node in stmts(s):
        if isinstance(node, Gemm) and node.dst.buffer is buffer:
            if node.reset or (node.src is not None and node.src.buffer is buffer):
                return False
        elif isinstance(node, (Gemm, Alu, DmaCopy, Store)) and _touches(node, buffer):
            return False
    return True


def _loads_acc(s: Stmt, buffer: Buffer) -> bool:
    """``s`` is a (nest of) LOAD ACC into ``buffer`` and nothing else."""
    inner = _loops_and_body(s)[1]
    return isinstance(inner, DmaCopy) and not inner.store and inner.mem_type is MemType.ACC \
        and inner.sram.buffer is buffer


def _moved_index(add_nest: Stmt, reset_nest: Stmt, add: Alu) -> Expr | None:
    """The ADD's source index in the reset nest's loop variables, when the two nests have
    loops of the same extents and the same destination index under that renaming."""
    add_loops = _loops_and_body(add_nest)[0]
    reset_loops, reset = _loops_and_body(reset_nest)
    if [lp.extent for lp in add_loops] != [lp.extent for lp in reset_loops]:
        return None
    mapping: dict[Var, Expr] = {a.var: b.var for a, b in zip(add_loops, reset_loops,
                                                            strict=True)}
    try:
        same = to_affine(substitute(add.dst.index, mapping)) == to_affine(reset.dst.index)
    except NotAffine:
        return None
    assert add.src is not None
    return substitute(add.src.index, mapping) if same else None


def store_requant(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """With the post-processing store (``store.postproc``): requantisation's last ALU nests on
    an acc buffer, an arithmetic shift right and the clip to the output's range (immediate
    operands), move into the STOREs of that buffer, which read it as STORE ACC::

        for y, x:  alu_shr conv@(y*4 + x), 8
        for y, x:  alu_min conv@(y*4 + x), 127        ->    dma_store ACC conv@0 <-> out@..
        for y, x:  alu_max conv@(y*4 + x), 0                   post=(>>8, 0..127)
        dma_store OUT conv@0 <-> out@..

    Matched on the IR whatever operator produced it (conv2d, matmul/dense, the residual add):
    a run of at most one SHR, then at most one MIN and one MAX (either order) by immediates,
    each over every tile of the buffer, directly followed by stores of it, after which nothing
    of the same statement list reads it. Without the option, or where the pattern does not
    hold, the IR is unchanged (the ALU does it)."""
    if not cfg.store.postproc:
        return func
    bits = cfg.store.out_bits
    bounds = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)

    def rewrite(s: Stmt) -> Stmt | None:
        if isinstance(s, Seq):
            return Seq(_fuse_requant(s.body, bounds))
        return None

    return func.with_body(map_stmts(func.body, rewrite))


def _alu_nest(s: Stmt) -> Alu | None:
    """The ALU micro-op of a perfect nest of loops around it, or a bare one."""
    inner = _loops_and_body(s)[1]
    return inner if isinstance(inner, Alu) else None


def _store_nest(s: Stmt, buffer: Buffer) -> DmaCopy | None:
    """The STORE of ``buffer``'s out tiles at the bottom of a perfect nest, or a bare one."""
    inner = _loops_and_body(s)[1]
    if isinstance(inner, DmaCopy) and inner.store and inner.mem_type is MemType.OUT \
            and inner.sram.buffer is buffer:
        return inner
    return None


def _covers(s: Stmt, buffer: Buffer) -> bool:
    """A nest whose iterations number the buffer's tiles (the requantisation's stage over all
    of them: its index is one-to-one by construction)."""
    return _iterations(_loops_and_body(s)[0]) == buffer.n_tiles


def _fuse_requant(body: list[Stmt], bounds: tuple[int, int]) -> list[Stmt]:
    out = list(body)
    i = 0
    while i < len(out):
        alu = _alu_nest(out[i])
        if alu is None or alu.imm is None or (alu.op is not AluOp.SHR and alu.op not in _CLIPS):
            i += 1
            continue
        buffer = alu.dst.buffer
        chain, j = [], i
        while j < len(out):
            a = _alu_nest(out[j])
            if a is None or a.dst.buffer is not buffer or a.src is not None or a.imm is None \
                    or not _covers(out[j], buffer):
                break
            chain.append(a)
            j += 1
        post = _post_fields(chain, bounds)
        k = j
        while k < len(out) and _store_nest(out[k], buffer) is not None:
            k += 1
        later_reads = any(_touches(s, buffer) for s in out[k:])
        if post is None or k == j or later_reads:
            i += 1
            continue
        stores = [_as_post_store(s, buffer, post) for s in out[j:k]]
        out[i:k] = stores
        i += len(stores)
    return out


_CLIPS = (AluOp.MIN, AluOp.MAX)


def _post_fields(chain: list[Alu], bounds: tuple[int, int]) -> dict[str, int] | None:
    """``shift``, ``clip_lo``, ``clip_hi`` of a chain SHR? {MIN, MAX}* (each at most once), or
    None when the chain is something else or leaves the output's range."""
    ops = [a.op for a in chain]
    if not ops or ops.count(AluOp.SHR) > 1 or ops.count(AluOp.MIN) > 1 \
            or ops.count(AluOp.MAX) > 1 or (AluOp.SHR in ops and ops[0] is not AluOp.SHR):
        return None
    imm = {a.op: a.imm for a in chain}
    shift = imm.get(AluOp.SHR, 0)
    lo, hi = imm.get(AluOp.MAX, bounds[0]), imm.get(AluOp.MIN, bounds[1])
    if not 0 <= shift <= 31 or not bounds[0] <= lo <= hi <= bounds[1]:
        return None
    return {"shift": shift, "clip_lo": lo, "clip_hi": hi}


def _touches(s: Stmt, buffer: Buffer) -> bool:
    """Whether any statement of ``s`` reads or writes ``buffer``."""
    for node in stmts(s):
        if isinstance(node, DmaCopy) and node.sram.buffer is buffer:
            return True
        if isinstance(node, (Gemm, Alu)) and any(
                r is not None and r.buffer is buffer
                for r in (node.dst, node.src, getattr(node, "wgt", None))):
            return True
    return False


def _as_post_store(s: Stmt, buffer: Buffer, post: dict[str, int]) -> Stmt:
    def fn(node: Stmt) -> Stmt | None:
        if isinstance(node, DmaCopy) and node.sram.buffer is buffer:
            return replace(node, mem_type=MemType.ACC, **post)
        return None

    return map_stmts(s, fn)
