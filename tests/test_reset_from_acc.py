"""The GEMM reset from the acc buffer (``gemm.reset_from_acc``): a reset that copies acc tiles
(``GemmInsn.from_acc``), its encoding, validation, cycles, and its agreement between fsim, sim
and the RTL, including copies whose source a micro-op just ahead wrote (the forwarding)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import original
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hw_cosim import cosim

from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig, load_config
from accel.machine.costs import gemm_cycles
from accel.machine.dram import Dram
from accel.machine.isa import GemmInsn, MemType, decode_insn, encode_insn
from accel.machine.program import Program, ProgramError, assemble, disassemble
from accel.testing.randprog import random_program
from runtime.backends import run_program

RA = {"gemm.reset_from_acc": True}


@pytest.fixture(scope="module")
def ra_tiny() -> HwConfig:
    return load_config("tiny").replace(**RA)


def _copy_program(cfg: HwConfig, acc: np.ndarray, uops: list[tuple[int, int]],
                  iter_out: int = 1, dst_factor: int = 0, src_factor: int = 0,
                  then_gemm: bool = False) -> tuple[Program, Dram]:
    """LOAD ACC ``acc`` (tiles 0..n-1), a GEMM reset from acc with micro-ops ``(dst, src)``
    (``iter_out`` times, the factors per iteration), optionally a GEMM accumulating inp . wgt
    onto every destination, then STORE OUT of all acc tiles (their low 8 bits)."""
    b = ProgramBuilder(cfg)
    n = len(acc)
    rng = np.random.default_rng(len(uops))
    src = b.tensor("acc", acc)
    inp = b.tensor("inp", rng.integers(-128, 128, (1, cfg.batch, cfg.block_in), dtype=np.int8))
    wgt = b.tensor("wgt", rng.integers(-128, 128, (1, cfg.block_out, cfg.block_in),
                                       dtype=np.int8))
    out = b.buffer("out", n * cfg.out_tile_bytes, cfg.out_tile_bytes)
    if then_gemm:
        b.load(MemType.INP, sram_base=0, dram_base=inp, x_size=1, x_stride=1)
        b.load(MemType.WGT, sram_base=0, dram_base=wgt, x_size=1, x_stride=1, push_next=True)
    kbgn, kend = b.uops([(d, s, 0) for d, s in uops])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base + kbgn, x_size=kend - kbgn,
           x_stride=kend - kbgn, pop_prev=then_gemm)
    b.load(MemType.ACC, sram_base=0, dram_base=src, x_size=n, x_stride=n)
    b.gemm(reset=True, from_acc=True, uop_bgn=0, uop_end=kend - kbgn, iter_out=iter_out,
           iter_in=1, dst_factor_out=dst_factor, src_factor_out=src_factor,
           push_next=not then_gemm)
    if then_gemm:
        dsts = sorted({d + i * dst_factor for d, _ in uops for i in range(iter_out)})
        kb2, ke2 = b.uops([(d, 0, 0) for d in dsts])
        b.load(MemType.UOP, sram_base=kend - kbgn, dram_base=b.uop_base + kb2, x_size=ke2 - kb2,
               x_stride=ke2 - kb2)
        b.gemm(uop_bgn=kend - kbgn, uop_end=kend - kbgn + ke2 - kb2, iter_out=1, iter_in=1,
               push_next=True)
    b.store(MemType.OUT, sram_base=0, dram_base=out, x_size=n, x_stride=n, pop_prev=True,
            push_prev=True)
    b.finish(pop_next=True)
    return b.build()


def _expected(acc: np.ndarray, uops: list[tuple[int, int]], iter_out: int, dst_factor: int,
              src_factor: int) -> np.ndarray:
    """The out tiles after the copies, one at a time in micro-op order: the low 8 bits of the
    copied tiles, zero where nothing was written (LOAD ACC does not write out)."""
    a = acc.copy()
    out = np.zeros(acc.shape, np.int8)
    for i in range(iter_out):
        for d, s in uops:
            a[d + i * dst_factor] = a[s + i * src_factor]
            out[d + i * dst_factor] = a[d + i * dst_factor].astype(np.int8)
    return out


def _acc_tiles(cfg: HwConfig, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-2**31, 2**31, (n, cfg.batch, cfg.block_out), dtype=np.int64) \
        .astype(np.int32)


# Copies whose source the micro-op 1, 2, 3 and 4 ahead wrote (the GEMM's forwarding from the
# write port's registers, the read at the write's edge, a plain read), a copy onto itself, and
# a loop whose iterations read what the one before wrote.
CHAINS = {
    "one_ahead": ([(1, 0), (2, 1), (3, 2), (4, 3)], 1, 0, 0),
    "two_ahead": ([(1, 0), (5, 6), (2, 1), (6, 7)], 1, 0, 0),
    "three_ahead": ([(1, 0), (5, 6), (6, 7), (2, 1)], 1, 0, 0),
    "four_ahead": ([(1, 0), (5, 6), (6, 7), (7, 4), (2, 1)], 1, 0, 0),
    "onto_itself": ([(3, 3), (4, 3)], 1, 0, 0),
    "loop_carried": ([(1, 0)], 6, 1, 1),
}


@pytest.mark.parametrize("chain", list(CHAINS))
def test_copies_in_micro_op_order(chain: str, ra_tiny: HwConfig) -> None:
    """fsim and sim copy in micro-op order, each copy seeing the ones before; the RTL agrees
    (DRAM and every instruction's cycles) on tiny and on default, whose GEMM is deeper."""
    uops, iter_out, df, sf = CHAINS[chain]
    for cfg in (ra_tiny, load_config().replace(**RA)):
        acc = _acc_tiles(cfg, 8, len(chain))
        program, dram = _copy_program(cfg, acc, uops, iter_out, df, sf)
        expected = _expected(acc, uops, iter_out, df, sf)
        image = dram.copy()
        run_program(program, image, backend="fsim")
        got = image.read("out", "int8", acc.shape)
        np.testing.assert_array_equal(got, expected)
        cosim(program, dram)


def test_copy_then_accumulate(ra_tiny: HwConfig) -> None:
    """A GEMM after the copies accumulates onto the copied values (the bias path)."""
    cfg = ra_tiny
    acc = _acc_tiles(cfg, 8, 7)
    program, dram = _copy_program(cfg, acc, [(4, 0), (5, 0), (6, 1)], then_gemm=True)
    cosim(program, dram)


def test_encoding_and_text_round_trip(ra_tiny: HwConfig) -> None:
    insn = GemmInsn(reset=True, from_acc=True, uop_bgn=1, uop_end=3, iter_out=2, iter_in=1,
                    dst_factor_out=2, src_factor_out=5)
    assert decode_insn(encode_insn(insn, ra_tiny), ra_tiny) == insn
    b = ProgramBuilder(ra_tiny)
    b.emit(insn)
    b.finish()
    program, _ = b.build()
    text = disassemble(program)
    assert "GEMM reset from_acc uop_bgn=1" in text
    assert assemble(text, ra_tiny).insns == program.insns


def test_without_the_option_the_format_is_as_before(tiny: HwConfig, ra_tiny: HwConfig) -> None:
    """The field exists only with the option: off, GEMM's layout is the original one."""
    from accel.machine.layout import IsaLayout

    plain = [f.name for f in IsaLayout.of(tiny).formats[GemmInsn.opcode].fields]
    with_ra = [f.name for f in IsaLayout.of(ra_tiny).formats[GemmInsn.opcode].fields]
    assert "from_acc" not in plain
    assert [f for f in with_ra if f != "from_acc"] == plain


@pytest.mark.parametrize(("config_extra", "insn", "message"), [
    ({}, GemmInsn(reset=True, from_acc=True, uop_end=1),
     "from_acc needs a GEMM that resets from the acc buffer (gemm.reset_from_acc)"),
    (RA, GemmInsn(from_acc=True, uop_end=1), "from_acc belongs to a reset"),
])
def test_invalid_from_acc_is_one_line(config_extra: dict, insn: GemmInsn, message: str,
                                      tiny: HwConfig) -> None:
    b = ProgramBuilder(tiny.replace(**config_extra))
    b.emit(insn)
    b.finish()
    with pytest.raises(ProgramError, match="^" + re.escape(f"instruction 0 (GEMM): {message}")
                       + "$"):
        b.build()[0].validate()


def test_copy_cycles_are_a_resets() -> None:
    """A reset from acc costs what any GEMM does: decode, one micro-op per ``gemm.ii``, the
    drain (default: 1 + 4 * 1 + 5)."""
    cfg = original(load_config()).replace(**RA)
    copy = GemmInsn(reset=True, from_acc=True, uop_end=4)
    zero = GemmInsn(reset=True, uop_end=4)
    assert gemm_cycles(copy, cfg) == gemm_cycles(zero, cfg) == 1 + 4 + 5
    acc = _acc_tiles(cfg, 8, 1)
    program, dram = _copy_program(cfg, acc, [(4, 0), (5, 1), (6, 2), (7, 3)])
    stats = run_program(program, dram.copy(), backend="sim").stats
    gemm = [s for s in stats.timeline if s.name.startswith("GEMM")]
    assert [s.name for s in gemm] == ["GEMM reset from acc 1x1x4"]
    assert gemm[0].end - gemm[0].start == 10


settings_rtl = settings(max_examples=3, deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", ["tiny", "default"])
@settings_rtl
@given(data=st.data())
def test_random_programs_with_copying_resets_on_the_rtl(name: str, data: st.DataObject) -> None:
    """Random programs whose resets copy acc tiles of the slot ALU and GEMM also write."""
    cfg = load_config(name).replace(**RA)
    program, dram = random_program(cfg, lambda lo, hi: data.draw(st.integers(lo, hi)), 3)
    cosim(program, dram)
