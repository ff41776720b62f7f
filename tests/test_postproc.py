"""The post-processing store (``store.postproc``): STORE ACC's semantics, encoding, cycles and
its agreement between fsim, sim and the RTL."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import original
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hw_cosim import cosim

from accel.machine.builder import ProgramBuilder
from accel.machine.config import ConfigError, HwConfig, load_config
from accel.machine.costs import POSTPROC_SETUP_CYCLES, mem_cycles
from accel.machine.dram import Dram
from accel.machine.isa import MemInsn, MemType, decode_insn, encode_insn
from accel.machine.program import Program, SimulationDeadlock, assemble, disassemble
from accel.testing.randprog import random_program
from runtime.backends import run_program
from sim.functional import post_process

POST = {"store.postproc": True}


@pytest.fixture(scope="module")
def post_tiny() -> HwConfig:
    return load_config("tiny").replace(**POST)


def _acc_program(cfg: HwConfig, acc: np.ndarray, shift: int, lo: int, hi: int,
                 token: bool = True) -> tuple[Program, Dram]:
    """LOAD ACC ``acc`` (tiles), then a STORE ACC of them with the given post-processing; the
    store waits for the load through compute's push (``token``)."""
    b = ProgramBuilder(cfg)
    n = len(acc)
    src = b.tensor("acc", acc)
    out = b.buffer("out", n * cfg.out_tile_bytes, cfg.out_tile_bytes)
    b.load(MemType.ACC, sram_base=0, dram_base=src, x_size=n, x_stride=n, push_next=token)
    b.store(MemType.ACC, sram_base=0, dram_base=out, x_size=n, x_stride=n, shift=shift,
            clip_lo=lo, clip_hi=hi, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    return b.build()


@pytest.mark.parametrize(("shift", "lo", "hi"), [(0, -128, 127), (8, 0, 127), (31, -3, 5),
                                                  (4, -128, -128)])
def test_store_acc_shifts_clips_and_narrows(post_tiny: HwConfig, shift: int, lo: int,
                                            hi: int) -> None:
    cfg = post_tiny
    rng = np.random.default_rng(shift)
    acc = rng.integers(-2**31, 2**31, (6, cfg.batch, cfg.block_out), dtype=np.int64)
    acc[0, 0, :2] = [2**31 - 1, -2**31]                  # the extremes
    acc = acc.astype(np.int32)
    program, dram = _acc_program(cfg, acc, shift, lo, hi)
    for backend in ("fsim", "sim"):
        image = dram.copy()
        run_program(program, image, backend=backend)
        got = image.read("out", "int8", acc.shape)
        want = np.clip(acc.astype(np.int64) >> shift, lo, hi).astype(np.int8)  # floor shift
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(post_process(acc, program.insns[1]), want)


def test_store_acc_waits_for_its_token(post_tiny: HwConfig) -> None:
    """A STORE ACC of an accumulator that the compute module has not handed over is ordered by
    tokens as any other store: without compute's push it never runs."""
    acc = np.zeros((2, 1, 4), dtype=np.int32)
    program, dram = _acc_program(post_tiny, acc, 0, -128, 127, token=False)
    with pytest.raises(SimulationDeadlock, match=re.escape(
            "store waits at instruction 1 (STORE_ACC) to pop compute->store (0 tokens)")):
        run_program(program, dram.copy(), backend="fsim")
    with pytest.raises(SimulationDeadlock, match=r"^deadlock at cycle"):
        run_program(program, dram.copy(), backend="sim")


def test_store_acc_encoding_and_text_round_trip(post_tiny: HwConfig) -> None:
    insn = MemInsn(store=True, mem_type=MemType.ACC, sram_base=3, dram_base=70, y_size=2,
                   x_size=3, x_stride=5, shift=9, clip_lo=-128, clip_hi=127, pop_prev=True)
    assert decode_insn(encode_insn(insn, post_tiny), post_tiny) == insn
    program, _ = _acc_program(post_tiny, np.zeros((2, 1, 4), dtype=np.int32), 9, -7, 100)
    text = disassemble(program)
    assert re.search(r"STORE ACC .*shift=9 clip_lo=-7 clip_hi=100", text)
    assert assemble(text, config=post_tiny).to_bytes() == program.to_bytes()


def test_without_postproc_a_store_is_as_before(tiny: HwConfig) -> None:
    """Off, the STORE format is the LOAD format (pads included): old program files decode."""
    from accel.machine.layout import IsaLayout

    layout = IsaLayout.of(tiny).formats
    assert layout[0].fields == layout[1].fields[:len(layout[0].fields)] == layout[1].fields


def test_out_bits_the_rtl_cannot_narrow_to_is_one_line() -> None:
    with pytest.raises(ConfigError, match=re.escape(
            "(replaced): store.out_bits: expected 8 (precision.inp_bits, the width the next "
            "layer reads and the only one the RTL narrows to), got 16") + "$"):
        load_config().replace(**POST, **{"store.out_bits": 16})


def test_store_acc_cycles(post_tiny: HwConfig) -> None:
    """A STORE ACC requests POSTPROC_SETUP_CYCLES after a STORE OUT would: decode, setup,
    then the write of one burst (latency 8 + beats)."""
    cfg = original(load_config()).replace(**POST)
    acc = MemInsn(store=True, mem_type=MemType.ACC, x_size=4, x_stride=4, clip_hi=127)
    out = MemInsn(store=True, mem_type=MemType.OUT, x_size=4, x_stride=4)
    assert mem_cycles(out, cfg) == 1 + 32 + 4
    assert mem_cycles(acc, cfg) == 1 + POSTPROC_SETUP_CYCLES + 32 + 4 == 42


settings_rtl = settings(max_examples=3, deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", ["tiny", "default"])
@settings_rtl
@given(data=st.data())
def test_random_programs_with_store_acc_on_the_rtl(name: str, data: st.DataObject) -> None:
    """Random programs with post-processing stores: every instruction's start and end on the
    RTL equal to the timing simulator's, the DRAM to fsim's."""
    cfg = load_config(name).replace(**POST)
    program, dram = random_program(cfg, lambda lo, hi: data.draw(st.integers(lo, hi)), 3)
    cosim(program, dram)


@pytest.mark.slow
@pytest.mark.parametrize("variant", range(4))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_with_store_acc_variants(variant: int, data: st.DataObject) -> None:
    """Bus widths that pack several out tiles in a beat or spread one over several, the
    original channel, and vta_1x16x16 (an out tile of two beats)."""
    tiny = load_config("tiny")
    cfg = [tiny.replace(**{"dram.bytes_per_cycle": 16}),
           tiny.replace(**{"dram.bytes_per_cycle": 4}),
           original(tiny),
           load_config("vta_1x16x16")][variant].replace(**POST)
    cosim(*random_program(cfg, lambda lo, hi: data.draw(st.integers(lo, hi)), 3))


def test_post_lane_matches_the_reference_at_every_edge() -> None:
    """One lane of the RTL's shift and clip (``hw.postproc.post_lane``, simulated) against
    ``sim.functional.post_process`` on the words where its "fits" test changes its answer: at
    and beside +-2**k for every k, with every shift (each stage of the shifter taken and not)
    against two clip bounds, and six shifts (0, 1, 7, 8, 30, 31) against bounds at, inside and
    at the ends of the int8 range."""
    from amaranth.hdl import Module, Signal, signed
    from amaranth.sim import Simulator

    from hw.postproc import post_lane

    m = Module()
    word, shift = Signal(32), Signal(5)
    lo, hi = Signal(signed(8)), Signal(signed(8))
    out = post_lane(m, word, shift, lo, hi, 8, "t")
    edges = sorted({s * ((1 << k) + d) for k in range(31) for d in (-1, 0, 1) for s in (1, -1)}
                   | {-(1 << 31), (1 << 31) - 1})
    bounds = [(-128, 127), (0, 127), (-3, 5), (-128, -128), (127, 127), (-1, 0)]
    every_shift = {(-128, 127), (-3, 5)}
    cases = [(w, s, lo_, hi_) for (lo_, hi_) in bounds
             for s in (range(32) if (lo_, hi_) in every_shift else (0, 1, 7, 8, 30, 31))
             for w in edges]
    got: list[int] = []

    async def bench(ctx: object) -> None:
        for w, s, lo_, hi_ in cases:    # held through both stages: the shift, then the clip
            ctx.set(word, w & 0xFFFFFFFF)
            ctx.set(shift, s)
            ctx.set(lo, lo_)
            ctx.set(hi, hi_)
            await ctx.tick().repeat(2)
            got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for (w, s, lo_, hi_), value in zip(cases, got, strict=True):
        insn = MemInsn(store=True, mem_type=MemType.ACC, shift=s, clip_lo=lo_, clip_hi=hi_)
        want = int(post_process(np.array([w], dtype=np.int32), insn)[0]) & 0xFF
        assert value == want, (w, s, lo_, hi_)
