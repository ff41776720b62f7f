"""VTA's instruction-level test list, as hand-written programs on the functional simulator.

Every test writes a program with :class:`accel.machine.builder.ProgramBuilder`, runs it with
``accel.run_program(..., backend="fsim")`` and compares what it stored (and, where the case is
about on-chip state, the simulator's SRAM) bit-exactly with a plain numpy / Python-int
computation written here, never with the simulator itself. Programs are synchronised with the
dependency tokens as VTA's were and end with a FINISH that leaves no tokens behind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

import accel
from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.isa import AluOp, MemType, TokenQueue
from accel.machine.program import (
    Program,
    ProgramError,
    SimulationDeadlock,
    SimulationError,
    token_trace,
)
from sim.functional import FunctionalSimulator

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
SPECIAL_INT32 = [0, 1, -1, 127, -128, 128, -129, 255, 256, -256, INT32_MAX, INT32_MIN,
                 2**30, -(2**30), 2**24 + 3]
CONFIG_FIXTURES = ["cfg", "tiny", "vta"]


@pytest.fixture(params=CONFIG_FIXTURES)
def hw(request: pytest.FixtureRequest) -> HwConfig:
    """Each shipped config in turn: default, tiny, vta_1x16x16."""
    return request.getfixturevalue(request.param)


# --------------------------------------------------------------------------- reference helpers
def wrap32(values: Any) -> NDArray[np.int32]:
    """Two's-complement wrap of int64 values to int32, by modular arithmetic."""
    arr = np.asarray(values, dtype=np.int64)
    return ((arr + 2**31) % 2**32 - 2**31).astype(np.int32)


def low8(values: NDArray[Any]) -> NDArray[np.int8]:
    """The low 8 bits of integer values, read as int8 (what STORE of OUT keeps)."""
    byte = np.asarray(values, dtype=np.int64) & 0xFF
    return (byte - ((byte & 0x80) << 1)).astype(np.int8)


def alu_ref(op: AluOp, a: int, b: int) -> int:
    """One ALU operation on Python ints, wrapped to int32 (DESIGN.md §3, sim docstring)."""
    if op is AluOp.MIN:
        r = min(a, b)
    elif op is AluOp.MAX:
        r = max(a, b)
    elif op is AluOp.ADD:
        r = a + b
    elif op is AluOp.MUL:
        r = a * b
    elif b >= 0:  # SHR: arithmetic right shift, amount saturating at 31
        r = a >> min(b, 31)
    else:  # negative amount: left shift, all bits gone from 32 on
        r = 0 if -b >= 32 else a << -b
    return (r + 2**31) % 2**32 - 2**31


def alu_ref_array(op: AluOp, a: NDArray[Any], b: NDArray[Any] | int) -> NDArray[np.int32]:
    """:func:`alu_ref` elementwise over arrays (or an array and an immediate)."""
    fn = np.frompyfunc(lambda x, y: alu_ref(op, int(x), int(y)), 2, 1)
    return np.asarray(fn(a, b), dtype=np.int64).astype(np.int32)


def loop_indices(
    kernel: Sequence[tuple[int, int, int]], params: dict[str, int]
) -> tuple[list[int], list[int], list[int]]:
    """(dst, src, wgt) of every micro-op a GEMM/ALU loop executes, in order, by plain loops."""
    dst, src, wgt = [], [], []
    for i in range(params.get("iter_out", 1)):
        for j in range(params.get("iter_in", 1)):
            for d, s, w in kernel:
                dst.append(d + i * params.get("dst_factor_out", 0)
                           + j * params.get("dst_factor_in", 0))
                src.append(s + i * params.get("src_factor_out", 0)
                           + j * params.get("src_factor_in", 0))
                wgt.append(w + i * params.get("wgt_factor_out", 0)
                           + j * params.get("wgt_factor_in", 0))
    return dst, src, wgt


def gemm_model(
    acc: NDArray[np.int32],
    inp: NDArray[np.int8],
    wgt: NDArray[np.int8],
    kernel: Sequence[tuple[int, int, int]],
    params: dict[str, int],
) -> NDArray[np.int32]:
    """acc after ``acc[dst] += inp[src] . wgt[wgt]^T`` over the loop, int32 wrap-around."""
    dst, src, wsel = loop_indices(kernel, params)
    prods = np.einsum(
        "nbk,nok->nbo", inp[src].astype(np.int64), wgt[wsel].astype(np.int64)
    )
    total = acc.astype(np.int64)
    np.add.at(total, np.asarray(dst, dtype=np.int64), prods)
    return wrap32(total)


# --------------------------------------------------------------------------- data helpers
def inp_tiles(rng: np.random.Generator, cfg: HwConfig, n: int) -> NDArray[np.int8]:
    return rng.integers(-128, 128, size=(n, cfg.batch, cfg.block_in), dtype=np.int8)


def wgt_tiles(rng: np.random.Generator, cfg: HwConfig, n: int) -> NDArray[np.int8]:
    return rng.integers(-128, 128, size=(n, cfg.block_out, cfg.block_in), dtype=np.int8)


def acc_tiles(
    rng: np.random.Generator, cfg: HwConfig, n: int, lo: int = INT32_MIN, hi: int = INT32_MAX,
    specials: Sequence[int] = (),
) -> NDArray[np.int32]:
    """Random int32 acc tiles in [lo, hi]; the first elements are ``specials``."""
    out = rng.integers(lo, hi, size=(n, cfg.batch, cfg.block_out), endpoint=True)
    flat = out.reshape(-1)
    assert len(specials) <= flat.size
    flat[: len(specials)] = specials
    return out.astype(np.int32)


def out_buffer(b: ProgramBuilder, name: str, n: int) -> int:
    """A zeroed DRAM region for ``n`` out tiles; its address in out tiles."""
    return b.buffer(name, n * b.cfg.out_tile_bytes, b.cfg.out_tile_bytes)


def read_out(dram: Dram, cfg: HwConfig, name: str, n: int) -> NDArray[np.int8]:
    return dram.read(name, "int8", (n, cfg.batch, cfg.block_out))


def run(program: Program, dram: Dram) -> tuple[accel.api.RunResult, FunctionalSimulator]:
    """Run through ``accel.run_program``; also on a DRAM copy with a simulator whose SRAM we read.

    Both runs must leave identical DRAM images and counters. Every field of every instruction
    must also fit its encoding (the programs here are real programs, not just Python objects).
    The timing simulator runs every program too and must leave the same DRAM image.
    """
    program.encode_insns()
    twin = dram.copy()
    timed = dram.copy()
    result = accel.run_program(program, dram, backend="fsim")
    sim = FunctionalSimulator(program.config)
    stats = sim.run(program, twin)
    np.testing.assert_array_equal(twin.data, dram.data)
    assert stats.to_dict() == result.stats.to_dict()
    timing = accel.run_program(program, timed, backend="sim")
    np.testing.assert_array_equal(timed.data, dram.data)
    assert timing.stats.insn_counts == stats.insn_counts
    return result, sim


def finish_with_store(
    b: ProgramBuilder, sram_base: int, dram_base: int, n: int
) -> None:
    """STORE ``n`` out tiles (after the compute->store token) and a FINISH that drains it."""
    b.store(sram_base=sram_base, dram_base=dram_base, x_size=n, x_stride=n,
            pop_prev=True, push_prev=True)
    b.finish(pop_next=True)


# --------------------------------------------------------------------------- 1. acc round trip
def test_acc_load_copy_store_round_trip_truncates_to_low_8_bits(
    hw: HwConfig, rng: np.random.Generator
) -> None:
    n, base = 6, 3
    values = acc_tiles(rng, hw, n, specials=SPECIAL_INT32)
    values[-1] = rng.integers(-128, 128, size=values.shape[1:])  # one tile inside int8 range
    b = ProgramBuilder(hw)
    src = b.tensor("acc_in", values)
    out = out_buffer(b, "out", n)
    k = b.uops([(base, base, 0)])
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=1)
    b.load(MemType.ACC, sram_base=base, dram_base=src, x_size=n, x_stride=n)
    # SHR 0 is VTA's copy: it writes acc and the low 8 bits to out.
    b.alu(AluOp.SHR, uop_bgn=k[0], uop_end=k[1], iter_out=2, iter_in=n // 2,
          dst_factor_out=n // 2, dst_factor_in=1, src_factor_out=n // 2, src_factor_in=1,
          use_imm=True, imm=0, push_next=True)
    finish_with_store(b, base, out, n)
    program, dram = b.build()
    result, sim = run(program, dram)

    expected = low8(values)
    np.testing.assert_array_equal(read_out(dram, hw, "out", n), expected)
    np.testing.assert_array_equal(read_out(dram, hw, "out", n)[-1], values[-1])
    # 0, 1, -1, 127, -128, 128, -129, 255, 256, -256, INT32_MAX, INT32_MIN: wrapped by hand
    hand = [0, 1, -1, 127, -128, -128, 127, -1, 0, 0, -1, 0]
    np.testing.assert_array_equal(expected.ravel()[:12], np.array(hand, dtype=np.int8))
    np.testing.assert_array_equal(sim.sram.acc[base : base + n], values)
    np.testing.assert_array_equal(sim.sram.out[base : base + n], expected)
    assert result.stats.bytes_loaded["acc"] == n * hw.acc_tile_bytes
    assert result.stats.bytes_stored == n * hw.out_tile_bytes
    assert result.stats.alu_uops == n


# --------------------------------------------------------------------------- 2. padded loads
H, W = 5, 7  # DRAM source: H rows of W tiles
PAD_CASES: dict[str, dict[str, int]] = {
    "y_pad_0": {"y_pad_0": 2},
    "y_pad_1": {"y_pad_1": 1},
    "x_pad_0": {"x_pad_0": 1},
    "x_pad_1": {"x_pad_1": 2},
    "all_pads": {"y_pad_0": 1, "y_pad_1": 2, "x_pad_0": 3, "x_pad_1": 1},
}


def _tiles_for(mem_type: MemType, rng: np.random.Generator, cfg: HwConfig, n: int,
               nonzero: bool = False) -> NDArray[Any]:
    shape = {
        MemType.INP: (cfg.batch, cfg.block_in),
        MemType.WGT: (cfg.block_out, cfg.block_in),
        MemType.ACC: (cfg.batch, cfg.block_out),
    }[mem_type]
    if mem_type is MemType.ACC:
        lo, hi = (1, 2**31 - 1) if nonzero else (INT32_MIN, INT32_MAX)
        return rng.integers(lo, hi, size=(n, *shape), endpoint=True).astype(np.int32)
    lo = 1 if nonzero else -128
    return rng.integers(lo, 128, size=(n, *shape), dtype=np.int8)


def _padded_load_case(
    cfg: HwConfig, rng: np.random.Generator, mem_type: MemType, pads: dict[str, int],
    y0: int, y_size: int, x0: int, x_size: int,
) -> None:
    """Fill SRAM with non-zero junk, then a (padded, strided) LOAD over part of it; check all."""
    sram_base = 2
    rows = pads.get("y_pad_0", 0) + y_size + pads.get("y_pad_1", 0)
    cols = pads.get("x_pad_0", 0) + x_size + pads.get("x_pad_1", 0)
    n_junk = sram_base + rows * cols + 3
    source = _tiles_for(mem_type, rng, cfg, H * W)
    junk = _tiles_for(mem_type, rng, cfg, n_junk, nonzero=True)

    b = ProgramBuilder(cfg)
    src_addr = b.tensor("source", source)
    junk_addr = b.tensor("junk", junk)
    on_load_module = mem_type is not MemType.ACC
    b.load(mem_type, sram_base=0, dram_base=junk_addr, x_size=n_junk, x_stride=n_junk)
    b.load(mem_type, sram_base=sram_base, dram_base=src_addr + y0 * W + x0, y_size=y_size,
           x_size=x_size, x_stride=W, push_next=on_load_module, **pads)
    b.finish(pop_prev=on_load_module)
    program, dram = b.build()
    result, sim = run(program, dram)

    block = np.zeros((rows, cols, *source.shape[1:]), dtype=source.dtype)
    py0, px0 = pads.get("y_pad_0", 0), pads.get("x_pad_0", 0)
    block[py0 : py0 + y_size, px0 : px0 + x_size] = (
        source.reshape(H, W, *source.shape[1:])[y0 : y0 + y_size, x0 : x0 + x_size]
    )
    expected = junk.copy()
    expected[sram_base : sram_base + rows * cols] = block.reshape(rows * cols, *block.shape[2:])
    buffer = sim.sram.buffer(mem_type)
    np.testing.assert_array_equal(buffer[:n_junk], expected)
    # The pad really is zero where junk was (junk is never zero); beyond, junk survives.
    padded = buffer[sram_base : sram_base + rows * cols].reshape(block.shape)
    mask = np.ones((rows, cols), dtype=bool)
    mask[py0 : py0 + y_size, px0 : px0 + x_size] = False
    assert not padded[mask].any()
    tile_bytes = cfg.tile_bytes(mem_type.buffer)
    assert result.stats.bytes_loaded[mem_type.buffer] == (n_junk + y_size * x_size) * tile_bytes


@pytest.mark.parametrize("pads", PAD_CASES.values(), ids=PAD_CASES.keys())
def test_inp_load_with_padding(hw: HwConfig, rng: np.random.Generator,
                               pads: dict[str, int]) -> None:
    _padded_load_case(hw, rng, MemType.INP, pads, y0=1, y_size=3, x0=0, x_size=W)


@pytest.mark.parametrize("pads", [{}, PAD_CASES["all_pads"]], ids=["no_pad", "all_pads"])
def test_inp_load_strided(hw: HwConfig, rng: np.random.Generator, pads: dict[str, int]) -> None:
    _padded_load_case(hw, rng, MemType.INP, pads, y0=1, y_size=3, x0=2, x_size=3)


@pytest.mark.parametrize("mem_type", [MemType.ACC, MemType.WGT], ids=["acc", "wgt"])
def test_acc_and_wgt_loads_with_padding(hw: HwConfig, rng: np.random.Generator,
                                        mem_type: MemType) -> None:
    _padded_load_case(hw, rng, mem_type, PAD_CASES["all_pads"], y0=2, y_size=2, x0=1, x_size=3)


@pytest.mark.parametrize("at_end", [False, True], ids=["inside", "at_buffer_end"])
def test_zero_size_load_with_pads_is_a_no_op(tiny: HwConfig, rng: np.random.Generator,
                                             at_end: bool) -> None:
    depth = tiny.inp_depth
    junk = _tiles_for(MemType.INP, rng, tiny, depth, nonzero=True)
    b = ProgramBuilder(tiny)
    junk_addr = b.tensor("junk", junk)
    b.load(MemType.INP, dram_base=junk_addr, x_size=depth, x_stride=depth)
    b.load(MemType.INP, sram_base=depth - 1 if at_end else 4, y_size=0, x_size=0, x_stride=0,
           y_pad_0=2, x_pad_0=1, push_next=True)
    b.finish(pop_prev=True)
    program, dram = b.build()
    result, sim = run(program, dram)
    np.testing.assert_array_equal(sim.sram.inp, junk)  # DESIGN.md §3: zero-size is a no-op
    assert result.stats.bytes_loaded["inp"] == depth * tiny.inp_tile_bytes


# --------------------------------------------------------------------------- 3. GEMM loops
# Accumulation through colliding indices of the two hardware loops; every factor non-zero, and
# dst = 3 (i + j) + u keeps any three consecutive micro-ops on distinct acc entries (VTA's RAW
# rule), while (i, j) pairs with equal i + j accumulate into the same tile.
GEMM_KERNEL = [(0, 0, 0), (1, 2, 1), (2, 1, 3)]
GEMM_LOOP = {
    "iter_out": 3, "iter_in": 4,
    "dst_factor_out": 3, "dst_factor_in": 3,
    "src_factor_out": 5, "src_factor_in": 2,
    "wgt_factor_out": 4, "wgt_factor_in": 1,
}


def test_gemm_reset_then_accumulate_over_two_loops(hw: HwConfig,
                                                   rng: np.random.Generator) -> None:
    acc_base, n_inp, n_wgt = 4, 20, 16
    dst, src, wsel = loop_indices(GEMM_KERNEL, GEMM_LOOP)
    n_acc = max(dst) + 1
    assert (max(src), max(wsel)) == (n_inp - 2, n_wgt - 2)
    assert len(set(dst)) < len(dst)  # some micro-ops really accumulate onto others
    inp = inp_tiles(rng, hw, n_inp)
    wgt = wgt_tiles(rng, hw, n_wgt)
    garbage = acc_tiles(rng, hw, n_acc)

    b = ProgramBuilder(hw)
    inp_addr, wgt_addr = b.tensor("inp", inp), b.tensor("wgt", wgt)
    garbage_addr = b.tensor("garbage", garbage)
    out = out_buffer(b, "out", n_acc)
    kernel = b.uops([(acc_base + d, s, w) for d, s, w in GEMM_KERNEL])
    reset_k = b.uops([(acc_base, 0, 0)])
    b.load(MemType.UOP, dram_base=b.uop_base, x_size=4, x_stride=4)
    b.load(MemType.ACC, sram_base=acc_base, dram_base=garbage_addr, x_size=n_acc,
           x_stride=n_acc)
    b.gemm(reset=True, uop_bgn=reset_k[0], uop_end=reset_k[1], iter_in=n_acc, dst_factor_in=1)
    b.load(MemType.INP, dram_base=inp_addr, x_size=n_inp, x_stride=n_inp)
    b.load(MemType.WGT, dram_base=wgt_addr, x_size=n_wgt, x_stride=n_wgt, push_next=True)
    b.gemm(uop_bgn=kernel[0], uop_end=kernel[1], pop_prev=True, push_next=True, **GEMM_LOOP)
    finish_with_store(b, acc_base, out, n_acc)
    program, dram = b.build()
    result, sim = run(program, dram)

    zeros = np.zeros((n_acc, hw.batch, hw.block_out), dtype=np.int32)
    expected = gemm_model(zeros, inp, wgt, GEMM_KERNEL, GEMM_LOOP)
    assert np.abs(expected).max() > 127  # the store really truncates
    np.testing.assert_array_equal(read_out(dram, hw, "out", n_acc), low8(expected))
    np.testing.assert_array_equal(sim.sram.acc[acc_base : acc_base + n_acc], expected)
    n_uops = len(GEMM_KERNEL) * GEMM_LOOP["iter_out"] * GEMM_LOOP["iter_in"]
    assert result.stats.macs == n_uops * hw.batch * hw.block_in * hw.block_out


def test_gemm_uops_counter_excludes_reset_like_vta_fsim(tiny: HwConfig) -> None:
    """VTA fsim's gemm_counter (DESIGN.md §5) counts only non-reset GEMM micro-ops."""
    b = ProgramBuilder(tiny)
    k = b.uops([(0, 0, 0)])
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=1)
    b.gemm(reset=True, uop_bgn=k[0], uop_end=k[1], iter_in=8, dst_factor_in=1)
    b.finish()
    program, dram = b.build()
    result, _ = run(program, dram)
    assert result.stats.gemm_uops == 0
    assert result.stats.macs == 0
    assert result.stats.insn_counts == {"LOAD_UOP": 1, "GEMM": 1, "FINISH": 1}


@pytest.mark.parametrize("op", ["gemm", "alu"])
def test_reloaded_micro_ops_replace_the_kernel(hw: HwConfig, rng: np.random.Generator,
                                               op: str) -> None:
    """Two identical GEMM/ALU instructions around a LOAD UOP that overwrites their kernel.

    VTA's runtime evicts and reloads micro-op kernels in the uop buffer; an instruction must
    always use the micro-ops the buffer holds when it runs.
    """
    first, second = [(0, 1, 2), (3, 0, 1)], [(1, 2, 0), (2, 3, 3)]
    loop = {"iter_in": 2, "dst_factor_in": 4, "src_factor_in": 4, "wgt_factor_in": 4}
    n = 8
    inp, wgt = inp_tiles(rng, hw, n), wgt_tiles(rng, hw, n)
    acc0 = acc_tiles(rng, hw, n, lo=-1000, hi=1000)
    b = ProgramBuilder(hw)
    addrs = {name: b.tensor(name, arr) for name, arr in
             (("inp", inp), ("wgt", wgt), ("acc", acc0))}
    out = out_buffer(b, "out", n)
    kernels = [b.uops(first), b.uops(second)]
    b.load(MemType.ACC, dram_base=addrs["acc"], x_size=n, x_stride=n)
    b.load(MemType.INP, dram_base=addrs["inp"], x_size=n, x_stride=n)
    b.load(MemType.WGT, dram_base=addrs["wgt"], x_size=n, x_stride=n, push_next=True)
    for k, (bgn, _) in enumerate(kernels):
        b.load(MemType.UOP, dram_base=b.uop_base + bgn, x_size=2, x_stride=2)
        if op == "gemm":
            b.gemm(uop_bgn=0, uop_end=2, pop_prev=k == 0, push_next=k == 1, **loop)
        else:
            alu_loop = {key: v for key, v in loop.items() if not key.startswith("wgt")}
            b.alu(AluOp.ADD, uop_bgn=0, uop_end=2, pop_prev=k == 0, push_next=k == 1,
                  **alu_loop)
    finish_with_store(b, 0, out, n)
    program, dram = b.build()
    _, sim = run(program, dram)

    expected = acc0
    for kernel in (first, second):
        if op == "gemm":
            expected = gemm_model(expected, inp, wgt, kernel, loop)
        else:
            dst, src, _ = loop_indices(kernel, loop)
            step = expected.astype(np.int64)
            for d, s in zip(dst, src, strict=True):
                step[d] += step[s]
            expected = wrap32(step)
    np.testing.assert_array_equal(sim.sram.acc[:n], expected)
    np.testing.assert_array_equal(sim.sram.uop[:2], np.array(second))


# --------------------------------------------------------------------------- 4. ALU opcodes
IMMEDIATES: dict[AluOp, list[int]] = {
    AluOp.MIN: [-32768, -300, -1, 0, 5, 32767],
    AluOp.MAX: [-32768, -300, -1, 0, 5, 32767],
    AluOp.ADD: [-32768, -7, -1, 1, 32767],
    AluOp.MUL: [-32768, -3, -1, 0, 7, 32767],
    AluOp.SHR: [-31, -12, -1, 0, 1, 9, 31],
}
TILES_PER_IMM = 2


def _alu_program_tail(b: ProgramBuilder, n: int) -> int:
    out = out_buffer(b, "out", n)
    finish_with_store(b, 0, out, n)
    return out


@pytest.mark.parametrize("op", list(AluOp), ids=[op.name for op in AluOp])
def test_alu_immediate(hw: HwConfig, rng: np.random.Generator, op: AluOp) -> None:
    imms = IMMEDIATES[op]
    n = TILES_PER_IMM * len(imms)
    values = acc_tiles(rng, hw, n)
    per_imm = values.reshape(len(imms), -1)  # a view: one row per immediate's tiles
    per_imm[:, :6] = [INT32_MAX, INT32_MIN, -1, 0, 1, -(2**30)]
    b = ProgramBuilder(hw)
    addr = b.tensor("a", values)
    k = b.uops([(TILES_PER_IMM * r, 0, 0) for r in range(len(imms))])
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=len(imms), x_stride=len(imms))
    b.load(MemType.ACC, dram_base=addr, x_size=n, x_stride=n)
    for r, imm in enumerate(imms):
        b.alu(op, uop_bgn=r, uop_end=r + 1, iter_in=TILES_PER_IMM, dst_factor_in=1,
              use_imm=True, imm=imm, push_next=r == len(imms) - 1)
    _alu_program_tail(b, n)
    program, dram = b.build()
    result, sim = run(program, dram)

    expected = np.concatenate([
        alu_ref_array(op, values[TILES_PER_IMM * r : TILES_PER_IMM * (r + 1)], imm)
        for r, imm in enumerate(imms)
    ])
    np.testing.assert_array_equal(sim.sram.acc[:n], expected)
    np.testing.assert_array_equal(read_out(dram, hw, "out", n), low8(expected))
    assert result.stats.alu_uops == n
    first = expected.reshape(len(imms), -1)[:, :2]  # results for INT32_MAX and INT32_MIN
    hand = {
        AluOp.MIN: [[-32768, INT32_MIN], [-300, INT32_MIN], [-1, INT32_MIN], [0, INT32_MIN],
                    [5, INT32_MIN], [32767, INT32_MIN]],
        AluOp.MAX: [[INT32_MAX, -32768], [INT32_MAX, -300], [INT32_MAX, -1], [INT32_MAX, 0],
                    [INT32_MAX, 5], [INT32_MAX, 32767]],
        AluOp.ADD: [[INT32_MAX - 32768, INT32_MAX - 32767],
                    [INT32_MAX - 7, INT32_MAX - 6], [INT32_MAX - 1, INT32_MAX],
                    [INT32_MIN, INT32_MIN + 1], [INT32_MIN + 32766, INT32_MIN + 32767]],
        AluOp.MUL: [[32768, 0], [INT32_MIN + 3, INT32_MIN],
                    [-INT32_MAX, INT32_MIN], [0, 0], [2**31 - 7, INT32_MIN],
                    [2**31 - 32767, INT32_MIN]],
        AluOp.SHR: [[INT32_MIN, 0], [-4096, 0], [-2, 0], [INT32_MAX, INT32_MIN],
                    [2**30 - 1, -(2**30)], [2**22 - 1, -(2**22)], [0, -1]],
    }[op]
    np.testing.assert_array_equal(first, np.array(hand, dtype=np.int64).astype(np.int32))


@pytest.mark.parametrize("op", list(AluOp), ids=[op.name for op in AluOp])
def test_alu_vector_operand(hw: HwConfig, rng: np.random.Generator, op: AluOp) -> None:
    n = 4
    a = acc_tiles(rng, hw, n, specials=SPECIAL_INT32)
    if op is AluOp.SHR:  # shift amounts in and beyond -31..31, both directions
        amounts = [0, 1, -1, 31, -31, 32, -32, 40, -40, 5, -1, 31]
        bvals = acc_tiles(rng, hw, n, lo=-40, hi=40, specials=amounts)
    else:
        bvals = acc_tiles(rng, hw, n, specials=[INT32_MAX, INT32_MIN, -1, INT32_MAX, 1, 0, 7,
                                                 -7, 2**24, -3, INT32_MAX, -1])
    b = ProgramBuilder(hw)
    a_addr, b_addr = b.tensor("a", a), b.tensor("b", bvals)
    k = b.uops([(0, n, 0)])
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=1)
    b.load(MemType.ACC, dram_base=a_addr, x_size=n, x_stride=n)
    b.load(MemType.ACC, sram_base=n, dram_base=b_addr, x_size=n, x_stride=n)
    b.alu(op, uop_bgn=k[0], uop_end=k[1], iter_out=2, iter_in=n // 2,
          dst_factor_out=n // 2, dst_factor_in=1, src_factor_out=n // 2, src_factor_in=1,
          push_next=True)
    _alu_program_tail(b, n)
    program, dram = b.build()
    _, sim = run(program, dram)

    expected = alu_ref_array(op, a, bvals)
    np.testing.assert_array_equal(sim.sram.acc[:n], expected)
    np.testing.assert_array_equal(sim.sram.acc[n : 2 * n], bvals)  # the operand is unchanged
    np.testing.assert_array_equal(read_out(dram, hw, "out", n), low8(expected))
    # a = 0, 1, -1, 127, -128, 128, -129, 255, 256, -256, INT32_MAX, INT32_MIN, worked by hand:
    hand = {
        AluOp.MIN: [0, INT32_MIN, -1, 127, -128, 0, -129, -7, 256, -256, INT32_MAX, INT32_MIN],
        AluOp.MAX: [INT32_MAX, 1, -1, INT32_MAX, 1, 128, 7, 255, 2**24, -3, INT32_MAX, -1],
        AluOp.ADD: [INT32_MAX, INT32_MIN + 1, -2, INT32_MIN + 126, -127, 128, -122, 248,
                    2**24 + 256, -259, -2, INT32_MAX],
        AluOp.MUL: [0, INT32_MIN, 1, INT32_MAX - 126, -128, 0, -903, -1785, 0, 768, 1,
                    INT32_MIN],
        AluOp.SHR: [0, 0, -2, 0, 0, 0, 0, 0, 0, -8, -2, -1],
    }[op]
    np.testing.assert_array_equal(expected.ravel()[:12], np.array(hand, dtype=np.int32))


def test_alu_wrap_examples_are_what_int32_hardware_gives() -> None:
    """The Python-int reference itself, on hand-checked values (so the oracle is trusted)."""
    assert alu_ref(AluOp.ADD, INT32_MAX, 1) == INT32_MIN
    assert alu_ref(AluOp.MUL, 65536, 65536) == 0
    assert alu_ref(AluOp.MUL, -(2**31), -1) == INT32_MIN
    assert alu_ref(AluOp.SHR, -5, 1) == -3
    assert alu_ref(AluOp.SHR, 3, -30) == -(2**31) + 2**30
    assert alu_ref(AluOp.SHR, -1, 31) == -1
    assert alu_ref(AluOp.SHR, 1, -32) == 0
    np.testing.assert_array_equal(low8(np.array([255, 256, -129, 128, INT32_MIN])),
                                  np.array([-1, 0, 127, -128, 0], dtype=np.int8))


# --------------------------------------------------------------------------- 5. relu
def test_relu_max_0_then_min_127(hw: HwConfig, rng: np.random.Generator) -> None:
    n = 4
    values = acc_tiles(rng, hw, n, lo=-1000, hi=1000,
                       specials=[INT32_MIN, INT32_MAX, -1, 0, 127, 128, 255, 256])
    b = ProgramBuilder(hw)
    addr = b.tensor("a", values)
    k = b.uops([(0, 0, 0)])
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=1)
    b.load(MemType.ACC, dram_base=addr, x_size=n, x_stride=n)
    loop = {"uop_bgn": k[0], "uop_end": k[1], "iter_in": n, "dst_factor_in": 1}
    b.alu(AluOp.MAX, use_imm=True, imm=0, **loop)
    b.alu(AluOp.MIN, use_imm=True, imm=127, push_next=True, **loop)
    _alu_program_tail(b, n)
    program, dram = b.build()
    _, sim = run(program, dram)

    expected = np.clip(values.astype(np.int64), 0, 127)
    np.testing.assert_array_equal(read_out(dram, hw, "out", n), expected.astype(np.int8))
    np.testing.assert_array_equal(sim.sram.acc[:n], expected.astype(np.int32))


# --------------------------------------------------------------------------- 6. requantise
def test_mul_then_shr_rounds_toward_minus_infinity(hw: HwConfig,
                                                   rng: np.random.Generator) -> None:
    """Requantisation: MUL imm then SHR imm on all tiles; the second half is also clipped."""
    n, scale, shift = 4, 93, 9
    specials = [-1, -5, -6, -11, -(2**20), -(2**20) + 1, 11, 6, 0, 2**20]
    values = acc_tiles(rng, hw, 2 * n, lo=-(2**20), hi=2**20, specials=specials)
    b = ProgramBuilder(hw)
    addr = b.tensor("a", values)
    k_all = b.uops([(0, 0, 0)])
    k_half = b.uops([(n, 0, 0)])
    b.load(MemType.UOP, dram_base=b.uop_base, x_size=2, x_stride=2)
    b.load(MemType.ACC, dram_base=addr, x_size=2 * n, x_stride=2 * n)
    every = {"uop_bgn": k_all[0], "uop_end": k_all[1], "iter_in": 2 * n, "dst_factor_in": 1}
    half = {"uop_bgn": k_half[0], "uop_end": k_half[1], "iter_in": n, "dst_factor_in": 1}
    b.alu(AluOp.MUL, use_imm=True, imm=scale, **every)
    b.alu(AluOp.SHR, use_imm=True, imm=shift, **every)
    b.alu(AluOp.MIN, use_imm=True, imm=127, **half)
    b.alu(AluOp.MAX, use_imm=True, imm=-128, push_next=True, **half)
    _alu_program_tail(b, 2 * n)
    program, dram = b.build()
    _, sim = run(program, dram)

    product = values.astype(np.int64) * scale
    floor = np.floor_divide(product, 2**shift)
    trunc = np.trunc(product / 2**shift).astype(np.int64)
    assert np.count_nonzero(floor[:n] != trunc[:n]) >= 3  # negatives that round differently
    assert floor.ravel()[0] == -1 and floor.ravel()[2] == -2  # -93 >> 9, -558 >> 9
    np.testing.assert_array_equal(sim.sram.acc[:n], floor[:n].astype(np.int32))
    clipped = np.clip(floor[n:], -128, 127)
    np.testing.assert_array_equal(sim.sram.acc[n : 2 * n], clipped.astype(np.int32))
    stored = read_out(dram, hw, "out", 2 * n)
    np.testing.assert_array_equal(stored[:n], low8(floor[:n]))
    np.testing.assert_array_equal(stored[n:], clipped.astype(np.int8))


# --------------------------------------------------------------------------- 7. virtual threads
def test_two_virtual_threads_interleave_and_count(hw: HwConfig,
                                                  rng: np.random.Generator) -> None:
    """VTA-style double buffering: thread v = t % 2 uses inp [v*n, (v+1)*n) and acc likewise.

    Iteration t loads its input (waiting for the "buffer free" token of iteration t - 2),
    loads a bias into acc (waiting for the store of iteration t - 2), runs a GEMM (waiting for
    its load) and is stored. Loads of iteration t + 1 are issued before compute of t.
    """
    T, MT, KT, NT = 4, 2, 2, 3  # iterations; row tiles, reduction tiles, column tiles each
    n_inp, n_acc = MT * KT, MT * NT
    a = inp_tiles(rng, hw, T * n_inp)
    w = wgt_tiles(rng, hw, NT * KT)
    bias = acc_tiles(rng, hw, T * n_acc, specials=SPECIAL_INT32)

    b = ProgramBuilder(hw)
    a_addr, w_addr, bias_addr = b.tensor("a", a), b.tensor("w", w), b.tensor("bias", bias)
    out = out_buffer(b, "out", T * n_acc)
    kernels = [b.uops([(v * n_acc + nn, v * n_inp, nn * KT) for nn in range(NT)])
               for v in (0, 1)]
    loop = {"iter_out": MT, "iter_in": KT, "dst_factor_out": NT, "src_factor_out": KT,
            "src_factor_in": 1, "wgt_factor_in": 1}

    def load(t: int) -> None:
        b.load(MemType.INP, sram_base=(t % 2) * n_inp, dram_base=a_addr + t * n_inp,
               x_size=n_inp, x_stride=n_inp, pop_next=t >= 2, push_next=True)

    def compute(t: int) -> None:
        v = t % 2
        b.load(MemType.ACC, sram_base=v * n_acc, dram_base=bias_addr + t * n_acc,
               x_size=n_acc, x_stride=n_acc, pop_next=t >= 2)
        b.gemm(uop_bgn=kernels[v][0], uop_end=kernels[v][1], pop_prev=True, push_prev=True,
               push_next=True, **loop)

    def store(t: int) -> None:
        b.store(sram_base=(t % 2) * n_acc, dram_base=out + t * n_acc, x_size=n_acc,
                x_stride=n_acc, pop_prev=True, push_prev=True)

    b.load(MemType.UOP, dram_base=b.uop_base, x_size=2 * NT, x_stride=2 * NT)
    b.load(MemType.WGT, dram_base=w_addr, x_size=NT * KT, x_stride=NT * KT)
    load(0)
    for t in range(T):
        if t + 1 < T:
            load(t + 1)
        compute(t)
        store(t)
    # Drain the loop-carried tokens of the last two iterations, then FINISH on both.
    b.load(MemType.INP, y_size=0, x_size=0, x_stride=0, pop_next=True)
    b.load(MemType.INP, y_size=0, x_size=0, x_stride=0, pop_next=True, push_next=True)
    b.load(MemType.ACC, y_size=0, x_size=0, x_stride=0, pop_next=True)
    b.finish(pop_prev=True, pop_next=True)
    program, dram = b.build()

    trace = token_trace(program.insns)
    for queue in TokenQueue:
        counts = [step[queue] for step in trace]
        assert min(counts) >= 0, queue
        assert max(counts) <= hw.queues.token_depth, queue
        assert counts[-1] == 0, queue
    assert max(step[TokenQueue.L2C] for step in trace) == 2  # thread 1 loads during thread 0
    assert max(step[TokenQueue.C2L] for step in trace) == 2

    result, _ = run(program, dram)

    a_t = a.reshape(T, MT, KT, hw.batch, hw.block_in).astype(np.int64)
    w_t = w.reshape(NT, KT, hw.block_out, hw.block_in).astype(np.int64)
    exact = np.einsum("tmkbi,nkoi->tmnbo", a_t, w_t)
    exact += bias.reshape(T, MT, NT, hw.batch, hw.block_out)
    expected = low8(wrap32(exact)).reshape(T * n_acc, hw.batch, hw.block_out)
    np.testing.assert_array_equal(read_out(dram, hw, "out", T * n_acc), expected)

    gemm_uops = T * MT * KT * NT
    stats = result.stats.to_dict()
    actions = stats.pop("actions")         # tests/test_energy.py checks them
    assert actions["macs"] == gemm_uops * hw.batch * hw.block_in * hw.block_out
    assert stats == {
        "bytes_loaded": {
            "uop": 2 * NT * hw.uop_bytes,
            "inp": T * n_inp * hw.inp_tile_bytes,
            "wgt": NT * KT * hw.wgt_tile_bytes,
            "acc": T * n_acc * hw.acc_tile_bytes,
        },
        "bytes_stored": T * n_acc * hw.out_tile_bytes,
        "gemm_uops": gemm_uops,
        "alu_uops": 0,
        "macs": gemm_uops * hw.batch * hw.block_in * hw.block_out,
        "insn_counts": {"LOAD_UOP": 1, "LOAD_WGT": 1, "LOAD_INP": T + 2, "LOAD_ACC": T + 1,
                        "GEMM": T, "STORE_OUT": T, "FINISH": 1},
    }


# --------------------------------------------------------------------------- 8. errors
def _expect(exc: type[Exception], text: str, program: Program, dram: Dram) -> None:
    with pytest.raises(exc, match=re.escape(text)) as info:
        accel.run_program(program, dram, backend="fsim")
    assert info.type is exc


def test_deadlock_names_instruction_and_queue(tiny: HwConfig) -> None:
    b = ProgramBuilder(tiny)
    k = b.uops([(0, 0, 0)])
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=1)
    b.gemm(reset=True, uop_bgn=k[0], uop_end=k[1])
    b.gemm(uop_bgn=k[0], uop_end=k[1], pop_prev=True)  # nobody ever pushes load->compute
    b.finish()
    program, dram = b.build()
    _expect(SimulationDeadlock,
            "compute waits at instruction 2 (GEMM) to pop load->compute (0 tokens)",
            program, dram)


def test_tokens_left_at_finish_name_the_queue(tiny: HwConfig) -> None:
    b = ProgramBuilder(tiny)
    k = b.uops([(0, 0, 0)])
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=1)
    b.alu(AluOp.ADD, uop_bgn=k[0], uop_end=k[1], use_imm=True, imm=1, push_next=True)
    out = out_buffer(b, "out", 1)
    b.store(dram_base=out, pop_prev=True, push_prev=True)
    b.finish()  # forgets pop_next
    program, dram = b.build()
    _expect(ProgramError,
            "FINISH at instruction 3 left tokens in store->compute=1 "
            "(last pushed by instruction 2)",
            program, dram)


def test_push_into_a_full_token_queue_blocks_and_finish_reports_it(tiny: HwConfig) -> None:
    depth = tiny.queues.token_depth
    b = ProgramBuilder(tiny)
    for _ in range(depth + 1):  # one push more than load->compute holds; nobody pops
        b.load(MemType.INP, y_size=0, x_size=0, x_stride=0, push_next=True)
    b.finish()
    program, dram = b.build()
    _expect(ProgramError,
            f"FINISH at instruction {depth + 1} retired with 1 load instruction(s) never run, "
            f"from instruction {depth}",
            program, dram)


def test_static_sram_range_error_names_the_instruction(tiny: HwConfig) -> None:
    depth = tiny.inp_depth
    b = ProgramBuilder(tiny)
    w = b.tensor("w", np.ones((1, tiny.block_out, tiny.block_in), dtype=np.int8))
    x = b.tensor("x", np.ones((4, tiny.batch, tiny.block_in), dtype=np.int8))
    b.load(MemType.WGT, dram_base=w, x_size=1)
    b.load(MemType.INP, sram_base=depth - 2, dram_base=x, x_size=4, x_stride=4,
           push_next=True)
    b.finish(pop_prev=True)
    program, dram = b.build()
    text = f"instruction 1 (LOAD_INP): SRAM range [{depth - 2}, {depth + 2}) exceeds the inp " \
           f"buffer depth {depth}"
    with pytest.raises(ProgramError, match=re.escape(text)):
        program.validate()
    _expect(ProgramError, text, program, dram)
    sim = FunctionalSimulator(tiny)
    with pytest.raises(ProgramError, match=re.escape(text)):
        sim.run(program, dram)
    assert not sim.sram.wgt.any()  # static: rejected before instruction 0 ran


def test_gemm_acc_index_out_of_range_names_the_instruction(tiny: HwConfig) -> None:
    depth = tiny.acc_depth
    b = ProgramBuilder(tiny)
    k = b.uops([(depth - 1, 0, 0)])
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=1)
    b.gemm(uop_bgn=k[0], uop_end=k[1], iter_in=2, dst_factor_in=1)
    b.finish()
    program, dram = b.build()
    _expect(SimulationError,
            f"instruction 1 (GEMM): acc index {depth} is outside the buffer of depth {depth}",
            program, dram)


def test_dram_range_beyond_the_image(tiny: HwConfig) -> None:
    b = ProgramBuilder(tiny)
    tile = tiny.inp_tile_bytes
    b.tensor("x", np.zeros((2, tiny.batch, tiny.block_in), dtype=np.int8))
    nbytes = b.dram.nbytes
    base = nbytes // tile + 3
    b.load(MemType.INP, dram_base=base, x_size=2, x_stride=2, push_next=True)
    b.finish(pop_prev=True)
    program, dram = b.build()
    _expect(SimulationError,
            f"instruction 0 (LOAD_INP): DRAM range [{base * tile}, {(base + 2) * tile}) is "
            f"beyond the {nbytes}-byte image",
            program, dram)


def test_pop_prev_on_the_load_module_is_rejected(tiny: HwConfig) -> None:
    b = ProgramBuilder(tiny)
    b.load(MemType.INP, pop_prev=True, push_next=True)
    b.finish(pop_prev=True)
    program, dram = b.build()
    _expect(ProgramError,
            "instruction 0 (LOAD_INP): pop_prev is not allowed on the load module",
            program, dram)


# --------------------------------------------------------------------------- 9. ALU order
def test_alu_repeated_destination_is_sequential(hw: HwConfig, rng: np.random.Generator) -> None:
    n = 3
    values = acc_tiles(rng, hw, n, lo=-1000, hi=1000)
    b = ProgramBuilder(hw)
    addr = b.tensor("a", values)
    twice = b.uops([(1, 1, 0), (1, 1, 0)])  # the same destination, twice in one kernel
    thrice = b.uops([(2, 0, 0)])            # and three times through a zero factor
    b.load(MemType.UOP, dram_base=b.uop_base, x_size=3, x_stride=3)
    b.load(MemType.ACC, dram_base=addr, x_size=n, x_stride=n)
    b.alu(AluOp.ADD, uop_bgn=twice[0], uop_end=twice[1], use_imm=True, imm=1)
    b.alu(AluOp.ADD, uop_bgn=thrice[0], uop_end=thrice[1], iter_in=3, use_imm=True, imm=1)
    b.alu(AluOp.SHR, uop_bgn=thrice[0], uop_end=thrice[1], iter_in=2, use_imm=True, imm=1,
          push_next=True)
    _alu_program_tail(b, n)
    program, dram = b.build()
    result, sim = run(program, dram)

    expected = values.astype(np.int64)
    expected[1] += 2
    expected[2] = (expected[2] + 3) // 4  # floor((v + 3) / 2 / 2): two sequential SHR 1
    np.testing.assert_array_equal(sim.sram.acc[:n], expected.astype(np.int32))
    stored = read_out(dram, hw, "out", n)
    np.testing.assert_array_equal(stored[1:], low8(expected[1:]))
    assert not stored[0].any()  # LOAD ACC alone does not write the out buffer
    assert result.stats.alu_uops == 2 + 3 + 2


def test_alu_reads_what_an_earlier_micro_op_of_the_same_insn_wrote(
    hw: HwConfig, rng: np.random.Generator
) -> None:
    n = 6
    values = acc_tiles(rng, hw, n, lo=-10**6, hi=10**6)
    b = ProgramBuilder(hw)
    addr = b.tensor("a", values)
    chain = b.uops([(1, 0, 0)])                # acc[i + 1] += acc[i], i = 0..n-2: a prefix sum
    pair = b.uops([(n - 1, 0, 0), (0, 1, 0)])  # acc[n-1] += acc[0]; then acc[0] += acc[1]
    b.load(MemType.UOP, dram_base=b.uop_base, x_size=3, x_stride=3)
    b.load(MemType.ACC, dram_base=addr, x_size=n, x_stride=n)
    b.alu(AluOp.ADD, uop_bgn=chain[0], uop_end=chain[1], iter_in=n - 1, dst_factor_in=1,
          src_factor_in=1)
    b.alu(AluOp.ADD, uop_bgn=pair[0], uop_end=pair[1], push_next=True)
    _alu_program_tail(b, n)
    program, dram = b.build()
    _, sim = run(program, dram)

    ref = [[int(x) for x in tile.ravel()] for tile in values]
    for i in range(n - 1):  # sequential, micro-op by micro-op
        ref[i + 1] = [x + y for x, y in zip(ref[i + 1], ref[i], strict=True)]
    for d, s in ((n - 1, 0), (0, 1)):
        ref[d] = [x + y for x, y in zip(ref[d], ref[s], strict=True)]
    expected = wrap32(np.array(ref, dtype=np.int64)).reshape(values.shape)
    np.testing.assert_array_equal(expected[1 : n - 1],
                                  np.cumsum(values.astype(np.int64), axis=0)[1 : n - 1])
    np.testing.assert_array_equal(sim.sram.acc[:n], expected)
    np.testing.assert_array_equal(read_out(dram, hw, "out", n), low8(expected))


# --------------------------------------------------------------------------- property
_uop = st.tuples(st.integers(0, 7), st.integers(0, 7), st.integers(0, 7))
_factor = st.integers(0, 3)
N_PROP = 20  # tiles of acc, inp and wgt the property test loads (max index 7 + 2*3 + 2*3)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    kernel=st.lists(_uop, min_size=1, max_size=4),
    iters=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    factors=st.tuples(_factor, _factor, _factor, _factor, _factor, _factor),
    seed=st.integers(0, 2**32 - 1),
)
def test_gemm_loops_match_einsum_model(
    tiny: HwConfig,
    kernel: list[tuple[int, int, int]],
    iters: tuple[int, int],
    factors: tuple[int, ...],
    seed: int,
) -> None:
    names = ("dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in",
             "wgt_factor_out", "wgt_factor_in")
    params = {"iter_out": iters[0], "iter_in": iters[1], **dict(zip(names, factors, strict=True))}
    rng = np.random.default_rng(seed)
    acc0 = acc_tiles(rng, tiny, N_PROP)
    inp, wgt = inp_tiles(rng, tiny, N_PROP), wgt_tiles(rng, tiny, N_PROP)

    b = ProgramBuilder(tiny)
    acc_addr, inp_addr, wgt_addr = (b.tensor(name, arr) for name, arr in
                                    (("acc", acc0), ("inp", inp), ("wgt", wgt)))
    out = out_buffer(b, "out", N_PROP)
    k = b.uops(kernel)
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=len(kernel), x_stride=len(kernel))
    b.load(MemType.ACC, dram_base=acc_addr, x_size=N_PROP, x_stride=N_PROP)
    b.load(MemType.INP, dram_base=inp_addr, x_size=N_PROP, x_stride=N_PROP)
    b.load(MemType.WGT, dram_base=wgt_addr, x_size=N_PROP, x_stride=N_PROP, push_next=True)
    b.gemm(uop_bgn=k[0], uop_end=k[1], pop_prev=True, push_next=True, **params)
    finish_with_store(b, 0, out, N_PROP)
    program, dram = b.build()
    result, sim = run(program, dram)

    expected = gemm_model(acc0, inp, wgt, kernel, params)
    np.testing.assert_array_equal(sim.sram.acc[:N_PROP], expected)
    # Entries no micro-op wrote keep the loaded value and were never copied to out.
    written = sorted(set(loop_indices(kernel, params)[0]))
    stored = read_out(dram, tiny, "out", N_PROP)
    np.testing.assert_array_equal(stored[written], low8(expected[written]))
    untouched = np.setdiff1d(np.arange(N_PROP), written)
    assert not stored[untouched].any()
    assert result.stats.gemm_uops == len(kernel) * iters[0] * iters[1]




# --------------------------------------------------------------------------- block GEMM path
def test_block_gemm_path_equals_per_micro_op_path(tiny: HwConfig, rng: np.random.Generator,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Large regular GEMMs run as a few big products; they must equal the per-uop path."""
    import sim.functional as functional

    b = ProgramBuilder(tiny)
    inp = _tiles_for(MemType.INP, rng, tiny, 200, nonzero=False)
    wgt = _tiles_for(MemType.WGT, rng, tiny, 12, nonzero=False)
    ia, wa = b.tensor("inp", inp), b.tensor("wgt", wgt)
    oa = out_buffer(b, "out", 64)
    # A 3-tap "convolution": 64 outputs x 3 taps x 4 weight sets, with repeats of the same
    # destination across hardware iterations (accumulation).
    k = b.uops([(o, o + t, t) for t in range(3) for o in range(8)])
    b.load(MemType.UOP, dram_base=b.uop_base + k[0], x_size=k[1] - k[0], x_stride=k[1] - k[0])
    b.load(MemType.INP, dram_base=ia, x_size=200, x_stride=200)
    b.load(MemType.WGT, dram_base=wa, x_size=12, x_stride=12, push_next=True)
    b.gemm(reset=True, uop_bgn=k[0], uop_end=k[1], iter_out=8, dst_factor_out=8, pop_prev=True)
    b.gemm(uop_bgn=k[0], uop_end=k[1], iter_out=8, iter_in=4, dst_factor_out=8,
           src_factor_out=8, src_factor_in=50, wgt_factor_in=3, push_next=True)
    finish_with_store(b, 0, oa, 64)
    program, dram = b.build()
    results = []
    for limit in (64, 0):  # 0 disables the block path
        monkeypatch.setattr(functional, "_MAX_BLOCKS", limit)
        image = dram.copy()
        sim = functional.FunctionalSimulator(tiny)
        sim.run(program, image)
        results.append((image.data.copy(), sim.sram.acc.copy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    assert np.count_nonzero(results[0][1]) > 0
