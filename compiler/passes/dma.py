"""DMA injection: copy loop nests annotated ``DMA_COPY`` become 2-D strided tile copies.

Before (a 1x1x5x8 inp block of a padded input, tile loops innermost)::

    for c in 0..1:  # dma_copy
      for y in 0..5:
        for x in 0..8:
          for b in 0..1:
            for i in 0..4:
              inp[0, c, y, x, b, i] = select(<in bounds>, data[n, c, y0 + y - 1, x - 1, b, i], 0)

After::

    for c in 0..1:
      dma_load INP inp@(c * 40) <-> data@<first in-bounds tile> y=<5 - pads> x=<8 - pads>
          stride=6 pad=(<rows above>, <rows below>, <cols left>, <cols right>)

Dimensions that DRAM stores contiguously (the inner ones copied whole) merge into the x axis,
so a full weight block is one long row; the next outer dimension is y; the rest stay loops.
Padding is computed per copy from the tensor's bounds (``select`` in the source marks where it
is allowed), so border tiles get pads and inner tiles none. A loop of extent 1 around a copy
contributes 0 to its DRAM indices, so a tile as wide as the tensor counts as copied whole (a
full-width output tile of every output-channel block of a tile is one STORE, rows x channel
blocks, not one per block).
"""

from __future__ import annotations

from accel.machine.config import HwConfig
from accel.machine.isa import MemType
from compiler.arith import Affine, NotAffine, to_affine
from compiler.errors import LoweringError
from compiler.passes.common import perfect_nest
from compiler.schedule import Pragma
from compiler.te import BinOp, Cast, Expr, IntImm, Select, Var, substitute
from compiler.tir import (
    BufferLoad,
    DmaCopy,
    For,
    PrimFunc,
    Stmt,
    Store,
    TileRef,
    map_stmts,
    simplify,
    stmts,
)

__all__ = ["inject_dma"]

_SCOPE_MEM = {"inp": MemType.INP, "wgt": MemType.WGT, "acc": MemType.ACC}


def inject_dma(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Replace every ``DMA_COPY`` nest with :class:`~compiler.tir.DmaCopy` statements."""

    unit: dict[Var, Expr] = {s.var: IntImm(0) for s in stmts(func.body)
                             if isinstance(s, For) and s.extent == 1}

    def rewrite(s: Stmt) -> Stmt | None:
        if isinstance(s, For) and s.pragma is Pragma.DMA_COPY:
            return _lower_copy(s, unit)
        return None

    return func.with_body(map_stmts(func.body, rewrite))


def _source(value: Expr) -> tuple[BufferLoad, bool]:
    padded = False
    while True:
        if isinstance(value, Select):
            if not (isinstance(value.false_value, IntImm) and value.false_value.value == 0):
                raise LoweringError("dma copy: only zero padding is supported")
            padded, value = True, value.true_value
        elif isinstance(value, Cast):
            value = value.value
        else:
            break
    if not isinstance(value, BufferLoad):
        raise LoweringError(f"dma copy: the value must be a plain read, got {value!r}")
    return value, padded


def _max0(e: Expr) -> Expr:
    return BinOp("max", IntImm(0), e)


def _lower_copy(loop: For, unit: dict[Var, Expr]) -> Stmt:
    loops, body = perfect_nest(loop)
    where = f"dma copy at loop {loop.var.name}"
    if not isinstance(body, Store):
        raise LoweringError(f"{where}: the nest must end in one store")
    src, padded = _source(body.value)
    store = body.buffer.scope == "dram"
    if store:
        dram_buf, dram_idx = body.buffer, body.indices
        sram_buf, sram_idx = src.buffer, src.indices
        if sram_buf.scope != "acc":
            raise LoweringError(f"{where}: stores copy from the acc (out) buffer, not "
                                f"{sram_buf.scope}")
        mem = MemType.OUT
    else:
        if src.buffer.scope != "dram":
            raise LoweringError(f"{where}: loads copy from DRAM, not {src.buffer.scope}")
        dram_buf, dram_idx = src.buffer, src.indices
        sram_buf, sram_idx = body.buffer, body.indices
        mem = _SCOPE_MEM[sram_buf.scope]
    outer = {v: e for v, e in unit.items() if v not in {lp.var for lp in loops}}
    dram_idx = tuple(simplify(substitute(i, outer)) for i in dram_idx)
    tile_vars = [lp.var for lp in loops[-2:]]
    if len(loops) < 2 or list(sram_idx[-2:]) != tile_vars or list(dram_idx[-2:]) != tile_vars:
        raise LoweringError(f"{where}: the two innermost loops must copy whole tiles")
    grid_loops = loops[:-2]
    loop_vars: set[Var] = {lp.var for lp in grid_loops}
    ndim = len(sram_buf.tile_grid)
    # Per grid dimension: the loop that walks it (or None), the DRAM base, the extent.
    dims: list[tuple[Var | None, Affine, int]] = []
    for d in range(ndim):
        ext = sram_buf.tile_grid[d]
        s_idx = sram_idx[d]
        var = s_idx if isinstance(s_idx, Var) and s_idx in loop_vars else None
        if var is None and not (isinstance(s_idx, IntImm) and s_idx.value == 0 and ext == 1):
            raise LoweringError(f"{where}: SRAM index {s_idx!r} must be a copy loop")
        try:
            form = to_affine(dram_idx[d])
        except NotAffine:
            raise LoweringError(f"{where}: DRAM index {dram_idx[d]!r} is not affine") from None
        if var is not None and form.coeff(var) != 1:
            raise LoweringError(f"{where}: DRAM index {dram_idx[d]!r} must step with {var.name}")
        others = [v for v in form.coeffs if v in loop_vars and v is not var]
        if others:
            raise LoweringError(f"{where}: DRAM index {dram_idx[d]!r} mixes copy loops")
        dims.append((var, form.without([var] if var is not None else []), ext))

    dram_grid = dram_buf.tile_grid
    strides = [1] * ndim
    for d in range(ndim - 2, -1, -1):
        strides[d] = strides[d + 1] * dram_grid[d + 1]

    def whole(d: int) -> bool:
        _, base, ext = dims[d]
        return ext == dram_grid[d] and not base.coeffs and base.const == 0

    # x: the innermost dimension plus every outer one while the inner ones are copied whole.
    x_lo = ndim - 1
    while x_lo > 0 and whole(x_lo):
        x_lo -= 1  # dims after x_lo are copied whole, so x_lo..ndim-1 is one DRAM run
    if x_lo < ndim - 1 and padded:
        _, base, ext = dims[x_lo]
        if base.coeffs or base.const < 0 or base.const + ext > dram_grid[x_lo]:
            x_lo = ndim - 1  # pads are computed for a one-dimension x only
    y_dim = x_lo - 1
    x_ext = 1
    for d in range(x_lo, ndim):
        x_ext *= dims[d][2]
    x_stride = strides[y_dim] if y_dim >= 0 else x_ext

    def pads(d: int) -> tuple[Expr, Expr, Expr]:
        """(pad before, pad after, in-bounds size) of grid dim ``d`` as expressions."""
        _, base, ext = dims[d]
        if not padded:
            return IntImm(0), IntImm(0), IntImm(ext)
        b = base.to_expr()
        before = simplify(BinOp("min", IntImm(ext), _max0(BinOp("-", IntImm(0), b))))
        after = simplify(BinOp("min", BinOp("-", IntImm(ext), before),
                               _max0(BinOp("-", BinOp("+", b, IntImm(ext)),
                                           IntImm(dram_grid[d])))))
        size = BinOp("-", BinOp("-", IntImm(ext), before), after)
        return before, after, size

    single_x = x_lo == ndim - 1
    x_pad0, x_pad1, x_size = pads(ndim - 1) if single_x else (IntImm(0), IntImm(0),
                                                             IntImm(x_ext))
    if y_dim >= 0:
        y_pad0, y_pad1, y_size = pads(y_dim)
    else:
        y_pad0, y_pad1, y_size = IntImm(0), IntImm(0), IntImm(1)
    # First in-bounds DRAM tile and first SRAM tile of the block.
    first: list[Expr] = []
    sram_first: list[Expr] = []
    for d in range(ndim):
        var, base, _ = dims[d]
        if d >= x_lo or d == y_dim:
            offset = {ndim - 1: x_pad0 if single_x else IntImm(0), y_dim: y_pad0}.get(
                d, IntImm(0))
            first.append(simplify(BinOp("+", base.to_expr(), offset)))
            sram_first.append(IntImm(0))
        else:
            first.append(simplify(BinOp("+", base.to_expr(), var if var is not None
                                        else IntImm(0))))
            sram_first.append(var if var is not None else IntImm(0))
    copy: Stmt = DmaCopy(
        mem_type=mem,
        store=store,
        sram=TileRef(sram_buf, simplify(sram_buf.tile_index(tuple(sram_first)))),
        dram=TileRef(dram_buf, simplify(dram_buf.tile_index(tuple(first)))),
        y_size=simplify(y_size),
        x_size=simplify(x_size),
        x_stride=x_stride,
        y_pad_0=y_pad0,
        y_pad_1=y_pad1,
        x_pad_0=x_pad0,
        x_pad_1=x_pad1,
    )
    keep = {dims[d][0] for d in range(ndim) if d < y_dim and dims[d][0] is not None}
    for lp in reversed(grid_loops):
        if lp.var in keep:
            copy = For(lp.var, lp.extent, copy)
    return copy
