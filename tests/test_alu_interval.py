"""The ALU at interval 1 (``alu: {ii: 1, depth: 5}``): immediate operations issue every cycle,
those with an acc operand every other (two reads through the acc buffer's one read port), on
fsim, sim and the RTL alike; the results of micro-ops two to five ahead reach an operand
through the forwarding, and back-to-back writes of one tile, which it cannot forward, are a
run-time error."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hw_cosim import cosim

from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig, load_config
from accel.machine.costs import alu_cycles
from accel.machine.dram import Dram
from accel.machine.isa import AluInsn, AluOp, MemType
from accel.machine.program import Program, SimulationError
from accel.testing.randprog import random_program
from hw.params import check_rtl_config
from runtime.backends import run_program

II1 = {"alu.ii": 1, "alu.depth": 5}


@pytest.fixture(scope="module")
def ii1_tiny() -> HwConfig:
    return load_config("tiny").replace(**II1)


def _alu_program(cfg: HwConfig, dsts: list[int], ops: list[tuple[AluOp, bool, int]],
                 seed: int = 0) -> tuple[Program, Dram]:
    """LOAD ACC 8 random tiles; for each ``(op, use_imm, imm)`` an ALU instruction whose
    micro-ops write ``dsts`` in order (source: tile ``7 - dst``); STORE OUT the 8 tiles."""
    rng = np.random.default_rng(seed)
    acc = rng.integers(-2**12, 2**12, (8, cfg.batch, cfg.block_out), dtype=np.int32)
    b = ProgramBuilder(cfg)
    src = b.tensor("acc", acc)
    out = b.buffer("out", 8 * cfg.out_tile_bytes, cfg.out_tile_bytes)
    kbgn, kend = b.uops([(d, 7 - d, 0) for d in dsts])
    n = kend - kbgn
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base + kbgn, x_size=n, x_stride=n)
    b.load(MemType.ACC, sram_base=0, dram_base=src, x_size=8, x_stride=8)
    for k, (op, use_imm, imm) in enumerate(ops):
        b.alu(op, use_imm=use_imm, imm=imm, uop_bgn=0, uop_end=n, iter_out=1, iter_in=1,
              push_next=k == len(ops) - 1)
    b.store(MemType.OUT, sram_base=0, dram_base=out, x_size=8, x_stride=8, pop_prev=True,
            push_prev=True)
    b.finish(pop_next=True)
    return b.build()


# Each tile written again 2, 3, 4 and 5 micro-ops later: every forwarding distance at ii 1
# (the micro-op in s7, and the results in wdata, wdata2, wdata3).
DISTANCES = [0, 1, 0, 2, 1, 0, 3, 2, 1, 0, 4, 3, 5, 4, 6]
OPS = [(AluOp.ADD, True, 37), (AluOp.MUL, True, -3), (AluOp.SHR, True, 1),
       (AluOp.MAX, True, -900), (AluOp.MIN, True, 1500), (AluOp.ADD, False, 0),
       (AluOp.MUL, True, 5), (AluOp.SHR, True, -2)]


def test_forwarding_at_interval_1(ii1_tiny: HwConfig) -> None:
    """Every operation, immediates at interval 1 and an acc operand at 2, each micro-op
    reading a tile written 2-5 micro-ops before: RTL == fsim (DRAM) and == sim (every
    instruction's start and end), on tiny and default."""
    for cfg in (ii1_tiny, load_config().replace(**II1)):
        program, dram = _alu_program(cfg, DISTANCES, OPS)
        cosim(program, dram)


def test_cycles_per_operand_kind(ii1_tiny: HwConfig) -> None:
    """1 + n * 1 + 5 with an immediate, 1 + n * 2 + 5 with an acc operand; as before at
    ``alu.ii`` 2 (1 + n * 2 + 4 either way)."""
    imm = AluInsn(alu_op=AluOp.ADD, use_imm=True, imm=1, uop_end=6)
    acc = AluInsn(alu_op=AluOp.ADD, uop_end=6)
    assert alu_cycles(imm, ii1_tiny) == 1 + 6 + 5
    assert alu_cycles(acc, ii1_tiny) == 1 + 12 + 5
    tiny = load_config("tiny")
    assert alu_cycles(imm, tiny) == alu_cycles(acc, tiny) == 1 + 12 + 4
    program, dram = _alu_program(ii1_tiny, [0, 1, 2, 3, 4, 5],
                                 [(AluOp.ADD, True, 1), (AluOp.ADD, False, 0)])
    timeline = run_program(program, dram.copy(), backend="sim").stats.timeline
    alus = [s.end - s.start for s in timeline if s.name.startswith("ALU")]
    assert alus == [12, 18]


def test_back_to_back_writes_are_one_line(ii1_tiny: HwConfig) -> None:
    program, dram = _alu_program(ii1_tiny, [0, 1, 1, 2], [(AluOp.ADD, True, 1)])
    for backend in ("fsim", "sim"):
        with pytest.raises(SimulationError, match="^" + re.escape(
                "instruction 2 (ALU_ADD): micro-ops 1 and 2 both write acc[1], back to back, "
                "which an immediate ALU operation at alu.ii 1 cannot do (its result reaches "
                "the micro-op two behind at the earliest)") + "$"):
            run_program(program, dram.copy(), backend=backend)
    # With an acc operand (every other cycle), or at alu.ii 2, the same writes are fine.
    cosim(*_alu_program(ii1_tiny, [0, 1, 1, 2], [(AluOp.ADD, False, 0)]))
    cosim(*_alu_program(load_config("tiny"), [0, 1, 1, 2], [(AluOp.ADD, True, 1)]))


def test_rtl_accepts_interval_1_at_depth_5() -> None:
    check_rtl_config(load_config().replace(**II1))
    with pytest.raises(ValueError, match=re.escape(
            "alu.depth must be at least 5 cycles for ii=1")):
        check_rtl_config(load_config().replace(**{"alu.ii": 1}))


@pytest.mark.parametrize("name", ["tiny", "default"])
@settings(max_examples=3, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_at_interval_1_on_the_rtl(name: str, data: st.DataObject) -> None:
    cfg = load_config(name).replace(**II1)
    program, dram = random_program(cfg, lambda lo, hi: data.draw(st.integers(lo, hi)), 3)
    cosim(program, dram)
