"""Bias-initialised accumulators (``compiler.passes.alu.load_bias``): without the GEMM reset from
acc, the bias's LOAD ACC writes the bias into every accumulator of an output tile (its DRAM rows
all starting at the bias tile, ``x_stride`` 0) and the GEMMs accumulate onto it, so neither
the reset nor the ALU ADD is issued.

Where loading costs the compute module no more than resetting and adding (``tiny``: an acc tile
in 2 beats; ``default`` with a fast channel, in 1), the pass fires and compiled operators stay
identical to the numpy kernels on fsim, sim and the RTL; where it costs more (``default``'s
convolutions: 4 beats a tile against the reset's and the ADD's 3 cycles) the IR is unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import original
from hypothesis import given, settings
from test_compiler_ops import _SETTINGS, MATMUL_SHAPES, _bias, _int8, conv_cases, run_conv_case
from test_hw_cosim import cosim

import accel
from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig, load_config
from accel.machine.dram import Dram
from accel.machine.isa import AluInsn, AluOp, GemmInsn, MemInsn, MemType
from accel.machine.program import Program
from compiler.ops.compiled import (
    compile_conv2d,
    compile_matmul,
    pack_conv2d_args,
    pack_matmul_args,
)
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload, conv2d_schedule
from compiler.ops.heuristic import default_conv2d_knobs
from compiler.ops.matmul import MatmulWorkload, default_matmul_knobs, matmul_schedule
from compiler.ops.workloads import resnet18_layer
from compiler.passes.alu import bias_init_cycles, load_bias
from compiler.pipeline.build import build
from runtime import kernels

FAST = {"dram.bytes_per_cycle": 32, "dram.latency": 8}
"""default_alu with a fast channel: an acc tile (8 int32) is one beat, and the 8 transactions in
flight (one a row) cover the latency, so the pass fires for convolutions too."""

CONFIGS = ["tiny", "default_fast"]


@pytest.fixture(scope="module")
def cfg() -> HwConfig:
    """default_alu: the pass is for machines without ``gemm.reset_from_acc`` (on in default)."""
    return load_config("default_alu")


def _config(name: str) -> HwConfig:
    if name == "default_fast":
        return load_config("default_alu").replace(**FAST)
    return load_config(name)


def _kinds(program: Program) -> dict[str, int]:
    """How many of the instructions the pass touches a program has."""
    insns = program.insns
    return {
        "reset": sum(isinstance(i, GemmInsn) and i.reset for i in insns),
        "add": sum(isinstance(i, AluInsn) and i.alu_op is AluOp.ADD for i in insns),
        "repeated_acc": sum(isinstance(i, MemInsn) and not i.store and i.mem_type is MemType.ACC
                            and i.y_size > 1 and i.x_stride == 0 for i in insns),
    }


CONV = Conv2dWorkload(1, 16, 6, 6, 16, 3, 3, 1, 1, 1, 1, True, 6, True)
MATMUL = MatmulWorkload(16, 32, 24, True, 6, True)


# --------------------------------------------------------------------------- the pass fires


@pytest.mark.parametrize("config_name", CONFIGS)
def test_no_reset_and_no_add_where_it_fires(config_name: str) -> None:
    """Conv2d and matmul with bias: no GEMM reset, no ALU ADD, the bias in repeated LOAD ACC
    rows; without a bias the resets stay."""
    cfg = _config(config_name)
    for program in (compile_conv2d(CONV, cfg).program, compile_matmul(MATMUL, cfg).program):
        kinds = _kinds(program)
        assert kinds["reset"] == kinds["add"] == 0 and kinds["repeated_acc"] > 0
    plain = _kinds(compile_conv2d(Conv2dWorkload(1, 16, 6, 6, 16, 3, 3, 1, 1, 1, 1, False, 6,
                                                 True), cfg).program)
    assert plain["reset"] > 0 and plain["add"] == plain["repeated_acc"] == 0


def test_ir_loads_the_bias_into_the_accumulators(tiny: HwConfig) -> None:
    """Conv2d: a LOAD per channel block of the tile, its 16 pixels each reading the bias tile;
    matmul: one LOAD, a row of the tile's column blocks for each of its 16 rows. The reset, the
    ADD and the bias's acc buffer are gone; the LOAD comes before the first GEMM."""
    wl = Conv2dWorkload(1, 16, 4, 4, 16, 3, 3, 1, 1, 1, 1, True, 3, True)
    knobs = Conv2dKnobs(tile_h=4, tile_w=4, tile_co=2, oc_nthread=2)
    text = str(build(conv2d_schedule(wl, knobs, tiny), tiny, "c", keep_ir=True)
               .stages["load_bias"])
    assert "gemm_reset" not in text and "alu_add" not in text and "bias.acc" not in text
    assert "dma_load ACC conv@((conv.n * 32) + (conv.o * 16)) <-> bias@" in text
    assert text.index("y=16 x=1 stride=0") < text.index("gemm conv@")
    mm = str(build(matmul_schedule(MATMUL, default_matmul_knobs(MATMUL, tiny), tiny), tiny, "m",
                   keep_ir=True).stages["load_bias"])
    assert "gemm_reset" not in mm and "alu_add" not in mm
    assert "dma_load ACC acc@0 <-> bias@" in mm and "y=16 x=3 stride=0" in mm


def test_unchanged_with_the_reset_from_acc(tiny: HwConfig) -> None:
    """With ``gemm.reset_from_acc`` ``reset_bias`` has folded the bias; this pass leaves it."""
    ra = tiny.replace(**{"gemm.reset_from_acc": True})
    after = build(conv2d_schedule(CONV, default_conv2d_knobs(CONV, ra), ra), ra, "c",
                  keep_ir=True).stages
    assert after["load_bias"] is after["reset_bias"]
    before_reset = after["inject_alu"]
    assert load_bias(before_reset, ra) is before_reset


def test_unchanged_where_loading_costs_more(cfg: HwConfig) -> None:
    """default_alu, C5 (tiles of 4 x 28 pixels by 8 channel blocks): an output tile's bias would
    take 8 LOADs of 112 repeated rows, 4 beats each, against a reset and an ADD of 896 micro-ops
    (1 and 2 cycles each) and a LOAD of 8 tiles; the pass leaves the IR and the ADDs stay."""
    wl = resnet18_layer("C5")
    stages = build(conv2d_schedule(wl, default_conv2d_knobs(wl, cfg), cfg), cfg, "c5",
                   keep_ir=True).stages
    assert stages["load_bias"] is stages["reset_bias"]
    assert _kinds(compile_conv2d(wl, cfg).program)["add"] > 0
    cost = bias_init_cycles(896, 8, MemInsn(mem_type=MemType.ACC, y_size=112, x_stride=0),
                            MemInsn(mem_type=MemType.ACC, x_size=8, x_stride=8), cfg)
    assert (cost.loaded, cost.added, cost.pays) == (4264, 2764, False)
    assert cost.loaded > 4 * 896 > cost.added > 3 * 896


def test_bias_init_cycles_by_hand(tiny: HwConfig) -> None:
    """On tiny's original channel (one transaction at a time, latency 8, 8 bytes a cycle; acc
    tiles of 16 bytes, 2 beats): 2 LOADs of 16 rows cost 2 * (1 + 16 * (8 + 2)) = 322 cycles;
    the reset (1 + 32 + 5), the ADD (1 + 32 * 2 + 4) and the bias's LOAD of 2 tiles
    (1 + 8 + 4) 120. A tile of 2 pixels: 2 * (1 + 2 * 10) = 42 against 1 + 4 + 5, 1 + 8 + 4
    and 13: 36."""
    cfg = original(tiny)
    bias_load = MemInsn(mem_type=MemType.ACC, x_size=2, x_stride=2)
    big = bias_init_cycles(32, 2, MemInsn(mem_type=MemType.ACC, y_size=16, x_stride=0),
                           bias_load, cfg)
    assert (big.loaded, big.added, big.pays) == (322, 120, False)
    small = bias_init_cycles(4, 2, MemInsn(mem_type=MemType.ACC, y_size=2, x_stride=0),
                             bias_load, cfg)
    assert (small.loaded, small.added, small.pays) == (42, 36, False)
    assert bias_init_cycles(32, 2, MemInsn(mem_type=MemType.ACC, y_size=16, x_stride=0),
                            bias_load, tiny).pays       # 8 transactions in flight


# --------------------------------------------------------------------------- bit-exact


CONV_SHAPES = [  # (n, c, h, w, o, k, stride, padding)
    (1, 16, 6, 6, 16, 3, 1, 1),
    (2, 20, 7, 5, 12, 3, 2, 1),
    (1, 8, 9, 9, 24, 1, 1, 0),
    (1, 3, 10, 10, 8, 5, 2, 2),
]


@pytest.mark.parametrize("backend", ["fsim", "sim"])
@pytest.mark.parametrize("config_name", ["tiny", "default_alu", "default_fast"])
def test_conv2d_bit_exact(config_name: str, backend: str, rng: np.random.Generator) -> None:
    config = _config(config_name)
    for n, c, h, w, o, k, stride, padding in CONV_SHAPES:
        args: dict[str, Any] = {"x": _int8(rng, (n, c, h, w)), "w": _int8(rng, (o, c, k, k)),
                                "bias": _bias(rng, o), "stride": stride, "padding": padding,
                                "shift": 7, "relu": bool(o % 16)}
        y, _ = accel.conv2d(**args, config=config, backend=backend)
        np.testing.assert_array_equal(y, kernels.conv2d(**args))


@pytest.mark.parametrize("config_name", CONFIGS)
@settings(max_examples=40, **_SETTINGS)
@given(case=conv_cases())
def test_conv2d_random_shapes(config_name: str, case: dict[str, Any]) -> None:
    run_conv_case(case, _config(config_name), "fsim")


@pytest.mark.parametrize("backend", ["fsim", "sim"])
@pytest.mark.parametrize("config_name", ["tiny", "default_alu", "default_fast"])
def test_matmul_and_dense_bit_exact(config_name: str, backend: str,
                                    rng: np.random.Generator) -> None:
    """matmul over the shared shapes; dense (OI weights) as ``matmul(x, w.T)``."""
    config = _config(config_name)
    for m, k, n in MATMUL_SHAPES:
        a, b, bias = _int8(rng, (m, k)), _int8(rng, (k, n)), _bias(rng, n)
        y, _ = accel.matmul(a, b, bias, 6, True, config=config, backend=backend)
        np.testing.assert_array_equal(y, kernels.matmul(a, b, bias, 6, True))
    x, w, bias = _int8(rng, (1, 300)), _int8(rng, (21, 300)), _bias(rng, 21)
    y, _ = accel.matmul(x, np.ascontiguousarray(w.T), bias, 8, False, config=config,
                        backend=backend)
    np.testing.assert_array_equal(y, kernels.dense(x, w, bias, 8, False))


def test_dense_fires_on_default_alu(cfg: HwConfig) -> None:
    """One row block: the LOAD moves the bias tiles once, as the bias's own LOAD did, so the
    reset and the ADD go on default_alu too."""
    program = compile_matmul(MatmulWorkload(1, 512, 1000, True, 6, True), cfg).program
    kinds = _kinds(program)
    assert kinds["reset"] == kinds["add"] == 0


def test_int32_wraparound(tiny: HwConfig, rng: np.random.Generator) -> None:
    """Bias at the int32 limits: sum accumulated onto the bias wraps as bias added to the sum."""
    x, w = _int8(rng, (2, 20, 6, 6)), _int8(rng, (12, 20, 3, 3))
    for bias in (np.full(12, 2**31 - 1, np.int32), np.full(12, -(2**31), np.int32)):
        for shift, relu in ((0, False), (31, False), (12, True)):
            y, _ = accel.conv2d(x, w, bias, 1, 1, shift, relu, config=tiny, backend="fsim")
            np.testing.assert_array_equal(y, kernels.conv2d(x, w, bias, 1, 1, shift, relu))


# --------------------------------------------------------------------------- the RTL


def _repeated_rows_program(cfg: HwConfig, bias: np.ndarray, rows: int,
                           skip: int) -> tuple[Program, Dram]:
    """LOAD ACC of ``rows`` rows that all read the tiles of ``bias`` after the first ``skip``
    (``x_stride`` 0), a GEMM adding ``inp . wgt^T`` onto every loaded tile, STORE OUT."""
    b = ProgramBuilder(cfg)
    tiles = len(bias) - skip
    n = rows * tiles
    rng = np.random.default_rng(rows)
    src = b.tensor("bias", bias) + skip
    inp = b.tensor("inp", rng.integers(-128, 128, (1, cfg.batch, cfg.block_in), dtype=np.int8))
    wgt = b.tensor("wgt", rng.integers(-128, 128, (1, cfg.block_out, cfg.block_in),
                                       dtype=np.int8))
    out = b.buffer("out", n * cfg.out_tile_bytes, cfg.out_tile_bytes)
    b.load(MemType.INP, sram_base=0, dram_base=inp, x_size=1, x_stride=1)
    b.load(MemType.WGT, sram_base=0, dram_base=wgt, x_size=1, x_stride=1, push_next=True)
    kbgn, kend = b.uops([(d, 0, 0) for d in range(n)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base + kbgn, x_size=kend - kbgn,
           x_stride=kend - kbgn, pop_prev=True)
    b.load(MemType.ACC, sram_base=0, dram_base=src, y_size=rows, x_size=tiles, x_stride=0)
    b.gemm(uop_bgn=0, uop_end=kend - kbgn, push_next=True)
    b.store(MemType.OUT, sram_base=0, dram_base=out, x_size=n, x_stride=n, pop_prev=True,
            push_prev=True)
    b.finish(pop_next=True)
    return b.build()


RTL_CONFIGS = {
    "tiny": {},
    "default": None,
    "tiny_bus16": {"dram.bytes_per_cycle": 16},     # an acc tile a beat
    "tiny_bus32": {"dram.bytes_per_cycle": 32},     # two acc tiles a beat: rows inside a beat
}


@pytest.mark.parametrize("config_name", list(RTL_CONFIGS))
@pytest.mark.parametrize(("rows", "tiles", "skip"), [(5, 1, 0), (3, 2, 1), (4, 3, 3)])
def test_repeated_rows_on_the_rtl(config_name: str, rows: int, tiles: int, skip: int) -> None:
    """Every row holds the bias tiles, and the GEMM adds onto them: fsim as numpy computes it,
    the RTL == fsim (DRAM) and == sim (every instruction's start and end); the bias starting
    on a beat or inside one."""
    extra = RTL_CONFIGS[config_name]
    cfg = load_config("default") if extra is None else load_config("tiny").replace(**extra)
    rng = np.random.default_rng(tiles)
    bias = rng.integers(-2**31, 2**31, (skip + tiles, cfg.batch, cfg.block_out),
                        dtype=np.int64).astype(np.int32)
    program, dram = _repeated_rows_program(cfg, bias, rows, skip)
    image = dram.copy()
    accel.run_program(program, image, backend="fsim")
    inp = image.read("inp", "int8", (cfg.batch, cfg.block_in)).astype(np.int64)
    wgt = image.read("wgt", "int8", (cfg.block_out, cfg.block_in)).astype(np.int64)
    want = np.tile(bias[skip:].astype(np.int64) + inp @ wgt.T, (rows, 1, 1)).astype(np.int8)
    got = image.read("out", "int8", want.shape)
    np.testing.assert_array_equal(got, want)
    cosim(program, dram)


@pytest.mark.parametrize("op_name", ["conv2d", "matmul"])
def test_compiled_ops_on_the_rtl(op_name: str, tiny: HwConfig) -> None:
    """Compiled operators with the bias loaded: RTL == fsim (DRAM), RTL == sim (every
    instruction's start and end)."""
    rng = np.random.default_rng(9)
    if op_name == "conv2d":
        op = compile_conv2d(Conv2dWorkload(1, 8, 4, 4, 8, 3, 3, 1, 1, 1, 1, True, 5, True), tiny)
        args = pack_conv2d_args(op, _int8(rng, (1, 8, 4, 4)), _int8(rng, (8, 8, 3, 3)),
                                _bias(rng, 8))
    else:
        op = compile_matmul(MatmulWorkload(3, 20, 9, True, 4, True), tiny)
        args = pack_matmul_args(op, _int8(rng, (3, 20)), _int8(rng, (20, 9)), _bias(rng, 9))
    assert _kinds(op.program)["repeated_acc"] and not _kinds(op.program)["add"]
    cosim(op.program, op.dram(**args))
