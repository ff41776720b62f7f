"""Each pass on hand-built IR: the expected IR is built as code and compared structurally
(through the canonical printer), plus one failure test per precondition."""

from __future__ import annotations

import re

import pytest

from accel.machine.config import HwConfig, load_config
from accel.machine.isa import AluOp, MemType, Module, TokenQueue
from compiler.errors import LoweringError
from compiler.intrin import gemm_intrinsic
from compiler.passes.alu import inject_alu, inplace_acc
from compiler.passes.deps import insert_dependencies
from compiler.passes.dma import inject_dma
from compiler.passes.storage import plan_sram
from compiler.passes.tensorize import tensorize
from compiler.passes.uops import cache_uop_kernels, fold_uop_loops, kernel_uops
from compiler.passes.vthread import inject_virtual_threads
from compiler.schedule import Pragma
from compiler.te import BinOp, Cast, Cmp, IntImm, Select, Var
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
    IRVerifyError,
    PrimFunc,
    Seq,
    Store,
    TileRef,
    UopLoop,
    evaluate_expr,
    stmts,
    to_text,
    verify,
)


@pytest.fixture
def tiny() -> HwConfig:
    return load_config("tiny")


def same(actual: PrimFunc, expected: PrimFunc) -> None:
    assert to_text(actual) == to_text(expected)


def func(body, *params: Buffer) -> PrimFunc:  # type: ignore[no-untyped-def]
    return PrimFunc("f", list(params), body)


def nest(loops: list[tuple[Var, int]], body, pragma=None, intrinsic=None):  # type: ignore[no-untyped-def]
    for k, (v, n) in enumerate(reversed(loops)):
        outer = k == len(loops) - 1
        body = For(v, n, body, pragma=pragma if outer else None,
                   intrinsic=intrinsic if outer else None)
    return body


# ---------------------------------------------------------------------- inject_dma
def test_inject_dma_merges_whole_inner_dimensions(tiny: HwConfig) -> None:
    kernel = Buffer("kernel", "dram", (8, 3, 4, 4), "int8")
    wgt = Buffer("wgt", "wgt", (2, 3, 4, 4), "int8")
    o0, o, k, bo, bi = Var("o0"), Var("o"), Var("k"), Var("bo"), Var("bi")
    copy = nest([(o, 2), (k, 3), (bo, 4), (bi, 4)],
                Store(wgt, (o, k, bo, bi),
                      BufferLoad(kernel, (BinOp("+", o0, o), k, bo, bi))), Pragma.DMA_COPY)
    before = func(For(o0, 4, Allocate(wgt, copy)), kernel)
    after = inject_dma(before, tiny)
    # The block is 2 rows of 3 whole tiles, contiguous in DRAM: one row of 6 tiles.
    expected = func(For(o0, 4, Allocate(wgt, DmaCopy(
        MemType.WGT, False, TileRef(wgt, IntImm(0)), TileRef(kernel, BinOp("*", o0, IntImm(3))),
        IntImm(1), IntImm(6), 6))), kernel)
    same(after, expected)


def test_inject_dma_pads_border_tiles(tiny: HwConfig) -> None:
    data = Buffer("data", "dram", (1, 6, 6, 1, 4), "int8")
    inp = Buffer("inp", "inp", (1, 4, 8, 1, 4), "int8")
    ty, c, y, x, b, i = (Var(n) for n in ("ty", "c", "y", "x", "b", "i"))
    row = BinOp("+", BinOp("*", ty, IntImm(2)), y)   # padded-input row
    cond = Cmp("and", Cmp(">=", row, IntImm(1)), Cmp("<", row, IntImm(7)))
    value = Select(cond, BufferLoad(data, (c, BinOp("-", row, IntImm(1)), BinOp("-", x, IntImm(1)),
                                           b, i)), IntImm(0))
    copy = nest([(c, 1), (y, 4), (x, 8), (b, 1), (i, 4)], Store(inp, (c, y, x, b, i), value),
                Pragma.DMA_COPY)
    after = inject_dma(func(For(ty, 3, Allocate(inp, copy)), data), tiny)
    dma = next(s for s in stmts(after.body) if isinstance(s, DmaCopy))
    assert dma.x_stride == 6 and dma.mem_type is MemType.INP and not dma.store

    def at(ty_value: int) -> tuple[int, ...]:
        env = {ty: ty_value, c: 0}
        return tuple(evaluate_expr(e, env) for e in (
            dma.y_pad_0, dma.y_size, dma.y_pad_1, dma.x_pad_0, dma.x_size, dma.x_pad_1,
            dma.dram.index))

    # Rows 2*ty - 1 .. 2*ty + 2 of a 6-row input, columns -1 .. 6 of a 6-column one.
    assert at(0) == (1, 3, 0, 1, 6, 1, 0)            # top tile: one pad row
    assert at(1) == (0, 4, 0, 1, 6, 1, 6)            # middle: rows 1..4 start at tile 6
    assert at(2) == (0, 3, 1, 1, 6, 1, 18)           # bottom tile: one pad row below


def test_inject_dma_rejects_partial_tiles(tiny: HwConfig) -> None:
    kernel = Buffer("kernel", "dram", (8, 4, 4), "int8")
    wgt = Buffer("wgt", "wgt", (2, 4, 4), "int8")
    o, bo, bi = Var("o"), Var("bo"), Var("bi")
    copy = nest([(o, 2), (bi, 4), (bo, 4)],  # tile loops in the wrong order
                Store(wgt, (o, bo, bi), BufferLoad(kernel, (o, bo, bi))), Pragma.DMA_COPY)
    with pytest.raises(LoweringError,
                       match=r"^dma copy at loop o: the two innermost loops must copy whole "
                             r"tiles$"):
        inject_dma(func(Allocate(wgt, copy), kernel), tiny)


def test_inject_dma_rejects_on_chip_sources(tiny: HwConfig) -> None:
    a = Buffer("a", "acc", (2, 1, 4), "int32")
    b = Buffer("b", "acc", (2, 1, 4), "int32")
    o, bb, co = Var("o"), Var("bb"), Var("co")
    copy = nest([(o, 2), (bb, 1), (co, 4)], Store(b, (o, bb, co), BufferLoad(a, (o, bb, co))),
                Pragma.DMA_COPY)
    with pytest.raises(LoweringError, match=r"^dma copy at loop o: loads copy from DRAM, not acc$"):
        inject_dma(func(Allocate(a, Allocate(b, copy))), tiny)


# ---------------------------------------------------------------------- tensorize
def gemm_nest(tiny: HwConfig, op: str = "+", extent_k: int = 4):  # type: ignore[no-untyped-def]
    acc = Buffer("acc", "acc", (2, 1, 4), "int32")
    inp = Buffer("inp", "inp", (2, 1, 4), "int8")
    wgt = Buffer("wgt", "wgt", (1, 4, 4), "int8")
    p, b, o, k = Var("p"), Var("b"), Var("o"), Var("k")
    product = BinOp("*", Cast("int32", BufferLoad(inp, (p, b, k))),
                    Cast("int32", BufferLoad(wgt, (IntImm(0), o, k))))
    body = Store(acc, (p, b, o), BinOp(op, BufferLoad(acc, (p, b, o)), product))
    intrin = gemm_intrinsic(tiny)
    loop = For(p, 2, nest([(b, 1), (o, 4), (k, extent_k)], body, intrinsic=intrin))
    return acc, inp, wgt, p, loop


def test_tensorize_replaces_the_tile_nest_with_gemm(tiny: HwConfig) -> None:
    acc, inp, wgt, p, loop = gemm_nest(tiny)
    after = tensorize(func(Allocate(acc, Allocate(inp, Allocate(wgt, loop)))), tiny)
    expected = func(Allocate(acc, Allocate(inp, Allocate(wgt, For(p, 2, Gemm(
        TileRef(acc, p), TileRef(inp, p), TileRef(wgt, IntImm(0))))))))
    same(after, expected)


def test_tensorize_turns_a_zeroing_nest_into_reset(tiny: HwConfig) -> None:
    acc = Buffer("acc", "acc", (3, 1, 4), "int32")
    p, b, o = Var("p"), Var("b"), Var("o")
    loop = For(p, 3, nest([(b, 1), (o, 4)], Store(acc, (p, b, o), IntImm(0)),
                          intrinsic=gemm_intrinsic(tiny)))
    after = tensorize(func(Allocate(acc, loop)), tiny)
    same(after, func(Allocate(acc, For(p, 3, Gemm(TileRef(acc, p), reset=True)))))


def test_tensorize_checks_extents_and_expression(tiny: HwConfig) -> None:
    acc, inp, wgt, _, loop = gemm_nest(tiny, extent_k=2)
    with pytest.raises(LoweringError, match=re.escape(
            "tensorize gemm at loop b: loop extents [1, 4, 2] do not match the intrinsic's "
            "[1, 4, 4]")):
        tensorize(func(Allocate(acc, Allocate(inp, Allocate(wgt, loop)))), tiny)
    acc, inp, wgt, _, loop = gemm_nest(tiny, op="-")
    with pytest.raises(LoweringError, match=r"^tensorize gemm at loop b: the store must "
                                            r"accumulate into its own element$"):
        tensorize(func(Allocate(acc, Allocate(inp, Allocate(wgt, loop)))), tiny)


# ---------------------------------------------------------------------- inplace_acc, inject_alu
def alu_chain() -> tuple[Buffer, Buffer, list[Var], PrimFunc]:
    conv = Buffer("conv", "acc", (2, 1, 4), "int32")
    shr = Buffer("shr", "acc", (2, 1, 4), "int32")
    p, b, o = Var("p"), Var("b"), Var("o")
    idx = (p, b, o)
    shift = nest([(p, 2), (b, 1), (o, 4)], Store(shr, idx, BinOp(">>", BufferLoad(conv, idx),
                                                                  IntImm(3))), Pragma.ALU)
    body = Allocate(conv, Allocate(shr, Seq([
        For(p, 2, Gemm(TileRef(conv, p), reset=True)), shift])))
    return conv, shr, [p, b, o], func(body)


def test_inplace_acc_merges_elementwise_stages() -> None:
    conv, _, (p, b, o), before = alu_chain()
    after = inplace_acc(before, load_config("tiny"))
    idx = (p, b, o)
    expected = func(Allocate(conv, Seq([
        For(p, 2, Gemm(TileRef(conv, p), reset=True)),
        nest([(p, 2), (b, 1), (o, 4)], Store(conv, idx, BinOp(">>", BufferLoad(conv, idx),
                                                                IntImm(3))), Pragma.ALU)])))
    same(after, expected)


def test_inject_alu_emits_tile_operations(tiny: HwConfig) -> None:
    _, _, _, before = alu_chain()
    after = inject_alu(inplace_acc(before, tiny), tiny)
    conv = next(s.buffer for s in stmts(after.body) if isinstance(s, Allocate))
    p = next(s.var for s in stmts(after.body) if isinstance(s, For))
    same(after, func(Allocate(conv, Seq([
        For(p, 2, Gemm(TileRef(conv, p), reset=True)),
        For(p, 2, Alu(AluOp.SHR, TileRef(conv, p), imm=3))]))))


def test_inject_alu_vector_operand_and_rejections(tiny: HwConfig) -> None:
    acc = Buffer("acc", "acc", (2, 1, 4), "int32")
    bias = Buffer("bias", "acc", (1, 1, 4), "int32")
    p, b, o = Var("p"), Var("b"), Var("o")
    idx = (p, b, o)
    add = nest([(p, 2), (b, 1), (o, 4)],
               Store(acc, idx, BinOp("+", BufferLoad(bias, (IntImm(0), b, o)),
                                     BufferLoad(acc, idx))), Pragma.ALU)
    after = inject_alu(func(Allocate(acc, Allocate(bias, add))), tiny)
    alu = next(s for s in stmts(after.body) if isinstance(s, Alu))
    assert alu.op is AluOp.ADD and alu.src is not None and alu.src.buffer is bias
    div = nest([(p, 2), (b, 1), (o, 4)],
               Store(acc, idx, BinOp("//", BufferLoad(acc, idx), IntImm(2))), Pragma.ALU)
    with pytest.raises(LoweringError, match="^" + re.escape(
            "alu at loop p: (acc[p, b, o] // 2) is not an ALU operation (+, >>, min, max, *)")
            + "$"):
        inject_alu(func(Allocate(acc, div)), tiny)
    big = nest([(p, 2), (b, 1), (o, 4)],
               Store(acc, idx, BinOp("+", BufferLoad(acc, idx), IntImm(1 << 20))), Pragma.ALU)
    with pytest.raises(LoweringError, match=r"^alu at loop p: immediate 1048576 does not fit "
                                            r"16 bits$"):
        inject_alu(func(Allocate(acc, big)), tiny)


# ---------------------------------------------------------------------- insert_dependencies
def pipeline(tiny: HwConfig) -> tuple[PrimFunc, dict[str, object]]:
    data = Buffer("data", "dram", (4, 1, 4), "int8")
    out = Buffer("out", "dram", (4, 1, 4), "int8")
    inp = Buffer("inp", "inp", (1, 1, 4), "int8")
    acc = Buffer("acc", "acc", (1, 1, 4), "int32")
    t = Var("t")
    load = DmaCopy(MemType.INP, False, TileRef(inp, IntImm(0)), TileRef(data, t), IntImm(1),
                   IntImm(1), 1)
    gemm = Gemm(TileRef(acc, IntImm(0)), TileRef(inp, IntImm(0)), TileRef(inp, IntImm(0)))
    store = DmaCopy(MemType.OUT, True, TileRef(acc, IntImm(0)), TileRef(out, t), IntImm(1),
                    IntImm(1), 1)
    body = Allocate(inp, Allocate(acc, For(t, 4, Seq([load, gemm, store]))))
    return func(body, data, out), {"t": t, "load": load, "gemm": gemm, "store": store,
                                   "inp": inp, "acc": acc}


def test_insert_dependencies_forward_and_loop_carried(tiny: HwConfig) -> None:
    before, n = pipeline(tiny)
    after = insert_dependencies(before, tiny)
    t = n["t"]
    first = Cmp(">=", BinOp("+", IntImm(0), t), IntImm(1))
    not_last = Cmp(">=", BinOp("+", IntImm(0), BinOp("-", IntImm(3), t)), IntImm(1))
    L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE
    expected_loop = For(t, 4, Seq([
        DepPop(L, TokenQueue.C2L, first), n["load"], DepPush(L, TokenQueue.L2C),
        DepPop(C, TokenQueue.L2C), DepPop(C, TokenQueue.S2C, first), n["gemm"],
        DepPush(C, TokenQueue.C2L, not_last), DepPush(C, TokenQueue.C2S),
        DepPop(S, TokenQueue.C2S), n["store"], DepPush(S, TokenQueue.S2C, not_last),
    ]))
    expected = func(Seq([Allocate(n["inp"], Allocate(n["acc"], expected_loop)),
                         DepPush(S, TokenQueue.S2C), DepPop(C, TokenQueue.S2C)]),
                    *before.params)
    same(after, expected)


def test_insert_dependencies_rejects_load_to_store(tiny: HwConfig) -> None:
    data = Buffer("data", "dram", (4, 1, 4), "int8")
    acc = Buffer("acc", "acc", (1, 1, 4), "int32")
    bias = DmaCopy(MemType.ACC, False, TileRef(acc, IntImm(0)), TileRef(data, IntImm(0)),
                   IntImm(1), IntImm(1), 1)
    inp = Buffer("inp", "inp", (1, 1, 4), "int8")
    load = DmaCopy(MemType.INP, False, TileRef(inp, IntImm(0)), TileRef(data, IntImm(0)),
                   IntImm(1), IntImm(1), 1)
    store = DmaCopy(MemType.OUT, True, TileRef(inp, IntImm(0)), TileRef(data, IntImm(0)),
                    IntImm(1), IntImm(1), 1)
    with pytest.raises(LoweringError, match=r"^dependency insertion at f: load and store are "
                                            r"not adjacent pipeline stages"):
        insert_dependencies(func(Allocate(acc, Allocate(inp, Seq([bias, load, store]))), data),
                            tiny)


# ---------------------------------------------------------------------- virtual threads
def test_virtual_threads_duplicate_buffers_and_interleave_groups(tiny: HwConfig) -> None:
    data = Buffer("data", "dram", (4, 1, 4), "int8")
    inp = Buffer("inp", "inp", (1, 1, 4), "int8")
    acc = Buffer("acc", "acc", (1, 1, 4), "int32")
    v = Var("v")
    load = DmaCopy(MemType.INP, False, TileRef(inp, IntImm(0)), TileRef(data, v), IntImm(1),
                   IntImm(1), 1)
    gemm = Gemm(TileRef(acc, IntImm(0)), TileRef(inp, IntImm(0)), TileRef(inp, IntImm(0)))
    body = For(v, 2, Allocate(inp, Allocate(acc, Seq([
        load, DepPush(Module.LOAD, TokenQueue.L2C), DepPop(Module.COMPUTE, TokenQueue.L2C),
        gemm]))), ForKind.VTHREAD)
    after = inject_virtual_threads(func(body, data), tiny)
    text = to_text(after)
    assert text.splitlines()[1:5] == [
        "  alloc inp.v0: inp int8[1, 1, 4]",
        "  alloc acc.v0: acc int32[1, 1, 4]",
        "  alloc inp.v1: inp int8[1, 1, 4]",
        "  alloc acc.v1: acc int32[1, 1, 4]",
    ]
    # Both threads' load groups, then both compute groups.
    assert [ln.strip() for ln in text.splitlines()[5:]] == [
        "dma_load INP inp.v0@0 <-> data@0 y=1 x=1 stride=1 pad=(0, 0, 0, 0)",
        "push load->compute",
        "dma_load INP inp.v1@0 <-> data@1 y=1 x=1 stride=1 pad=(0, 0, 0, 0)",
        "push load->compute",
        "pop load->compute",
        "gemm acc.v0@0 += inp.v0@0 . inp.v0@0",
        "pop load->compute",
        "gemm acc.v1@0 += inp.v1@0 . inp.v1@0",
    ]


# ---------------------------------------------------------------------- storage, uops
def test_plan_sram_assigns_bases_and_reports_overflow(tiny: HwConfig) -> None:
    a = Buffer("a", "acc", (3, 1, 4), "int32")
    b = Buffer("b", "acc", (5, 1, 4), "int32")
    w = Buffer("w", "wgt", (2, 4, 4), "int8")
    out = plan_sram(func(Allocate(a, Allocate(w, Allocate(b, Seq([]))))), tiny)
    assert (a.base, b.base, w.base) == (0, 3, 0)
    assert out.attrs["sram_tiles"] == {"inp": 0, "wgt": 2, "acc": 8}
    huge = Buffer("conv", "acc", (200, 1, 4), "int32", origin="stage conv, loop x.outer")
    with pytest.raises(LoweringError, match=r"^acc tiles of 3200 bytes exceed the acc buffer of "
                                            r"2048 bytes at stage conv, loop x.outer$"):
        plan_sram(func(Allocate(huge, Seq([]))), tiny)


def test_fold_uop_loops_takes_the_two_largest_loops_as_hardware_loops(tiny: HwConfig) -> None:
    acc = Buffer("acc", "acc", (8, 1, 4), "int32", base=0)
    inp = Buffer("inp", "inp", (40, 1, 4), "int8", base=0)
    wgt = Buffer("wgt", "wgt", (3, 4, 4), "int8", base=0)
    k, y, x = Var("k"), Var("y"), Var("x")
    gemm = Gemm(TileRef(acc, BinOp("+", BinOp("*", y, IntImm(4)), x)),
                TileRef(inp, BinOp("+", BinOp("+", BinOp("*", y, IntImm(4)), x), k)),
                TileRef(wgt, k))
    body = Allocate(acc, Allocate(inp, Allocate(wgt, nest([(k, 3), (y, 2), (x, 4)], gemm))))
    after = fold_uop_loops(func(body), tiny)
    loop = next(s for s in stmts(after.body) if isinstance(s, UopLoop))
    # x (4) and k (3) are the largest; in execution order (k, x, then the kernel y) the
    # destinations run 0 4 1 5 2 6 3 7 and repeat only 8 micro-ops later: no accumulator is
    # written twice within the 4-deep GEMM pipeline.
    assert [(v.name, n) for v, n in loop.hw_loops] == [("k", 3), ("x", 4)]
    assert [(v.name, n) for v, n in loop.kernel_loops] == [("y", 2)]
    assert kernel_uops(loop).uops == ((0, 0, 0), (4, 4, 0))
    planned = cache_uop_kernels(after, tiny)
    assert planned.attrs["uop_total"] == 2


def test_fold_uop_loops_avoids_pipeline_hazards(tiny: HwConfig) -> None:
    """Taking both big loops as hardware loops would leave a 1-uop kernel whose inner
    hardware loop (a reduction) rewrites the same accumulator every cycle."""
    acc = Buffer("acc", "acc", (8, 1, 4), "int32", base=0)
    inp = Buffer("inp", "inp", (80, 1, 4), "int8", base=0)
    wgt = Buffer("wgt", "wgt", (9, 4, 4), "int8", base=0)
    y, k = Var("y"), Var("k")
    gemm = Gemm(TileRef(acc, y), TileRef(inp, BinOp("+", y, k)), TileRef(wgt, k))
    after = fold_uop_loops(func(Allocate(acc, Allocate(inp, Allocate(wgt, nest(
        [(y, 8), (k, 9)], gemm))))), tiny)
    loop = next(s for s in stmts(after.body) if isinstance(s, UopLoop))
    assert [(v.name, n) for v, n in loop.hw_loops] == [("k", 9)]
    assert [(v.name, n) for v, n in loop.kernel_loops] == [("y", 8)]


def test_cache_uop_kernels_shares_identical_kernels(tiny: HwConfig) -> None:
    acc = Buffer("acc", "acc", (4, 1, 4), "int32", base=0)
    x = Var("x")
    ops = [UopLoop(Alu(op, TileRef(acc, x), imm=1), [], [(x, 4)])
           for op in (AluOp.ADD, AluOp.MIN, AluOp.MAX)]
    planned = cache_uop_kernels(func(Allocate(acc, Seq(ops))), tiny)
    assert planned.attrs["uop_total"] == 4
    assert list(planned.attrs["uop_kernels"].values()) == [0]


# ---------------------------------------------------------------------- verifier
def test_verifier_rejects_unbound_variables_and_leftover_stores() -> None:
    acc = Buffer("acc", "acc", (2, 1, 4), "int32")
    p = Var("p")
    with pytest.raises(IRVerifyError, match=r"^after tensorize: gemm uses p, which no enclosing "
                                            r"loop defines$"):
        verify(func(Allocate(acc, Gemm(TileRef(acc, p), reset=True))), "tensorize")
    with pytest.raises(IRVerifyError, match=r"uses buffer acc outside its allocation$"):
        verify(func(Gemm(TileRef(acc, IntImm(0)), reset=True)))
    store = Allocate(acc, For(p, 2, Store(acc, (p, IntImm(0), IntImm(0)), IntImm(0))))
    verify(func(store))
    with pytest.raises(IRVerifyError, match=r"^after passes: element-level store to acc was "
                                            r"not lowered to hardware$"):
        verify(func(store), "passes", hardware_only=True)
