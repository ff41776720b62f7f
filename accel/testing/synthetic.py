"""Synthetic, correctly synchronised programs for benchmarks and tests.

:func:`pipelined_gemm` builds the shape of a tiled convolution inner loop: per iteration, load an
input block and a weight block, reset and accumulate a GEMM, requantise with three ALU ops
(SHR, MAX, MIN), store the outputs. With ``threads=2`` the iterations alternate between two
halves of every buffer (VTA's two virtual threads), so a load overlaps the previous iteration's
compute; with ``threads=1`` every stage waits for the one before it, which serialises them.

:func:`contiguous_load` streams a contiguous block of DRAM into the inp buffer, for the DRAM
channel's bandwidth.
"""

from __future__ import annotations

import numpy as np

from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.isa import AluOp, MemType
from accel.machine.program import Program

__all__ = ["contiguous_load", "gemm_tile", "pipelined_gemm"]


def pipelined_gemm(
    cfg: HwConfig,
    iterations: int,
    threads: int = 2,
    pixels: int = 16,
    in_blocks: int = 4,
    seed: int = 0,
) -> tuple[Program, Dram]:
    """A load / GEMM / ALU / store pipeline of ``8 * iterations + 2`` instructions.

    Parameters
    ----------
    cfg
        The hardware; each thread uses ``pixels * in_blocks`` inp tiles, ``in_blocks`` wgt
        tiles and ``pixels`` acc tiles, which must fit ``threads`` times.
    iterations
        Pipeline iterations (each: LOAD INP, LOAD WGT, GEMM reset, GEMM, 3 ALU, STORE).
    threads
        1 (serialised) or 2 (double-buffered, overlapping).

    Raises
    ------
    ValueError
        ``threads`` is not 1 or 2, or the buffers are too small.
    """
    if threads not in (1, 2):
        raise ValueError(f"threads must be 1 or 2, got {threads}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    inp_tiles = pixels * in_blocks
    if threads * inp_tiles > cfg.inp_depth or threads * in_blocks > cfg.wgt_depth \
            or threads * pixels > cfg.acc_depth or 2 * pixels > cfg.uop_depth:
        raise ValueError(f"{pixels} pixels x {in_blocks} blocks x {threads} threads do not fit "
                         f"the buffers of {cfg.name}")
    rng = np.random.default_rng(seed)
    b = ProgramBuilder(cfg)
    chunks = 4
    inp = rng.integers(-128, 128, (chunks * inp_tiles, cfg.batch, cfg.block_in), dtype=np.int8)
    wgt = rng.integers(-128, 128, (chunks * in_blocks, cfg.block_out, cfg.block_in),
                       dtype=np.int8)
    inp_addr = b.tensor("inp", inp)
    wgt_addr = b.tensor("wgt", wgt)
    out_addr = b.buffer("out", iterations * pixels * cfg.out_tile_bytes, cfg.out_tile_bytes)
    kernels = [
        b.uops((t * pixels + p, t * inp_tiles + p, t * in_blocks) for p in range(pixels))
        for t in range(threads)
    ]
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=kernels[-1][1],
           x_stride=kernels[-1][1])
    distance = threads  # iterations between two uses of the same buffer half
    for i in range(iterations):
        t = i % threads
        bgn, end = kernels[t]
        chunk = i % chunks
        b.load(MemType.INP, sram_base=t * inp_tiles, dram_base=inp_addr + chunk * inp_tiles,
               x_size=inp_tiles, x_stride=inp_tiles, pop_next=i >= distance)
        b.load(MemType.WGT, sram_base=t * in_blocks, dram_base=wgt_addr + chunk * in_blocks,
               x_size=in_blocks, x_stride=in_blocks, push_next=True)
        b.gemm(reset=True, uop_bgn=bgn, uop_end=end, pop_prev=True,
               pop_next=i >= distance)
        b.gemm(uop_bgn=bgn, uop_end=end, iter_out=in_blocks, src_factor_out=pixels,
               wgt_factor_out=1)
        b.alu(AluOp.SHR, uop_bgn=bgn, uop_end=end, use_imm=True, imm=8)
        b.alu(AluOp.MAX, uop_bgn=bgn, uop_end=end, use_imm=True, imm=0)
        b.alu(AluOp.MIN, uop_bgn=bgn, uop_end=end, use_imm=True, imm=127,
              push_prev=i < iterations - distance, push_next=True)
        b.store(sram_base=t * pixels, dram_base=out_addr + i * pixels, x_size=pixels,
                x_stride=pixels, pop_prev=True,
                push_prev=i < iterations - distance or i == iterations - 1)
    b.finish(pop_next=True)
    return b.build()


def gemm_tile(
    cfg: HwConfig,
    repeats: int,
    inner: int = 64,
    pixels: int = 16,
    in_blocks: int = 4,
    seed: int = 0,
) -> tuple[Program, Dram]:
    """One output tile's GEMM: load once, then ``repeats`` GEMMs of ``pixels * in_blocks *
    inner`` micro-ops each, requantise (SHR, MAX, MIN) and store.

    Each GEMM accumulates the ``pixels`` outputs over the ``in_blocks`` input blocks (the outer
    loop) ``inner`` times over (the inner loop, all its factors 0), so the compute module runs
    one micro-op a cycle for ``repeats * pixels * in_blocks * inner`` cycles while load and
    store wait: an RTL simulator's speed "on a GEMM tile" (``benchmarks/rtl_speed.py``).

    Raises
    ------
    ValueError
        ``repeats`` or ``inner`` is out of range, or the tile does not fit the buffers.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    top = (1 << cfg.isa.iter_bits) - 1
    if not 1 <= inner <= top or in_blocks > top:
        raise ValueError(f"inner must be 1..{top} and in_blocks at most {top}, "
                         f"got {inner} and {in_blocks}")
    inp_tiles = pixels * in_blocks
    if inp_tiles > cfg.inp_depth or in_blocks > cfg.wgt_depth or pixels > cfg.acc_depth \
            or pixels > cfg.uop_depth:
        raise ValueError(f"{pixels} pixels x {in_blocks} blocks do not fit the buffers of "
                         f"{cfg.name}")
    rng = np.random.default_rng(seed)
    b = ProgramBuilder(cfg)
    inp = b.tensor("inp", rng.integers(-128, 128, (inp_tiles, cfg.batch, cfg.block_in),
                                       dtype=np.int8))
    wgt = b.tensor("wgt", rng.integers(-128, 128, (in_blocks, cfg.block_out, cfg.block_in),
                                       dtype=np.int8))
    out = b.buffer("out", pixels * cfg.out_tile_bytes, cfg.out_tile_bytes)
    bgn, end = b.uops((p, p, 0) for p in range(pixels))
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=end, x_stride=end)
    b.load(MemType.INP, sram_base=0, dram_base=inp, x_size=inp_tiles, x_stride=inp_tiles)
    b.load(MemType.WGT, sram_base=0, dram_base=wgt, x_size=in_blocks, x_stride=in_blocks,
           push_next=True)
    b.gemm(reset=True, uop_bgn=bgn, uop_end=end, pop_prev=True)
    for _ in range(repeats):
        b.gemm(uop_bgn=bgn, uop_end=end, iter_out=in_blocks, iter_in=inner,
               src_factor_out=pixels, wgt_factor_out=1)
    b.alu(AluOp.SHR, uop_bgn=bgn, uop_end=end, use_imm=True, imm=8)
    b.alu(AluOp.MAX, uop_bgn=bgn, uop_end=end, use_imm=True, imm=-128)
    b.alu(AluOp.MIN, uop_bgn=bgn, uop_end=end, use_imm=True, imm=127, push_next=True)
    b.store(sram_base=0, dram_base=out, x_size=pixels, x_stride=pixels, pop_prev=True,
            push_prev=True)
    b.finish(pop_next=True)
    return b.build()


def contiguous_load(cfg: HwConfig, nbytes: int, row_bytes: int = 512,
                    seed: int = 0) -> tuple[Program, Dram]:
    """LOAD INP instructions that read ``nbytes`` of contiguous DRAM in rows of ``row_bytes``.

    Each LOAD fills the inp buffer (or what is left of ``nbytes``) with rows that follow each
    other in DRAM (``x_stride == x_size``), so a config with ``dram.merge_rows`` moves each
    LOAD as one run of bursts. The loads carry no tokens; FINISH follows the last.

    Raises
    ------
    ValueError
        ``nbytes`` or ``row_bytes`` is not a positive multiple of an inp tile, or ``nbytes``
        not a multiple of ``row_bytes``.
    """
    tile = cfg.inp_tile_bytes
    if row_bytes <= 0 or row_bytes % tile:
        raise ValueError(f"row_bytes must be a positive multiple of {tile} (an inp tile), "
                         f"got {row_bytes}")
    if nbytes <= 0 or nbytes % row_bytes:
        raise ValueError(f"nbytes must be a positive multiple of row_bytes ({row_bytes}), "
                         f"got {nbytes}")
    x_size = row_bytes // tile
    if x_size > cfg.inp_depth:
        raise ValueError(f"a row of {x_size} tiles does not fit the inp buffer of "
                         f"{cfg.inp_depth}")
    rows_per_load = cfg.inp_depth // x_size
    rng = np.random.default_rng(seed)
    b = ProgramBuilder(cfg, max_uops=1)
    data = rng.integers(-128, 128, (nbytes // tile, cfg.batch, cfg.block_in), dtype=np.int8)
    base = b.tensor("data", data)
    rows = nbytes // row_bytes
    for first in range(0, rows, rows_per_load):
        n = min(rows_per_load, rows - first)
        b.load(MemType.INP, sram_base=0, dram_base=base + first * x_size, y_size=n,
               x_size=x_size, x_stride=x_size)
    b.finish()
    return b.build()
