"""The compiler's use of the epilogue features: ``store_requant`` (the post-processing store,
``store.postproc``) and ``reset_bias`` (the GEMM reset from acc, ``gemm.reset_from_acc``).

With either on, compiled operators must stay identical to the numpy kernels on every backend,
the passes must fire where the pattern holds (the instructions say so) and leave the IR alone
without the option."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from test_compiler_ops import (
    _SETTINGS,
    MATMUL_SHAPES,
    _bias,
    _int8,
    conv_cases,
    resnet_layer,
    run_conv_case,
)
from test_hw_cosim import cosim
from test_runtime import reference, small_net

import accel
from accel.machine.config import HwConfig, load_config
from accel.machine.isa import AluInsn, AluOp, GemmInsn, MemInsn, MemType
from compiler.ops.compiled import compile_conv2d, pack_conv2d_args
from compiler.ops.conv2d import Conv2dWorkload, conv2d_schedule
from compiler.ops.heuristic import default_conv2d_knobs
from compiler.ops.workloads import RESNET18_LAYERS, resnet18_layer
from compiler.passes.alu import reset_bias, store_requant
from compiler.pipeline.build import build
from runtime import kernels
from runtime.executable import Executable

PP = {"store.postproc": True}
RA = {"gemm.reset_from_acc": True}
BOTH = {**PP, **RA}
VARIANTS = {"pp": PP, "ra": RA, "pp_ra": BOTH}


@pytest.fixture(scope="module")
def cfg() -> HwConfig:
    """default_alu: the 1x8x8 machine with both options off, for the variants to switch on
    (the packaged default has both on)."""
    return load_config("default_alu")


def _with(name: str, variant: str) -> HwConfig:
    return load_config(name).replace(**VARIANTS[variant])


def _kinds(program: Any) -> dict[str, int]:
    """How many of each instruction the passes touch a program has."""
    insns = program.insns
    return {
        "copy": sum(isinstance(i, GemmInsn) and i.from_acc for i in insns),
        "add": sum(isinstance(i, AluInsn) and i.alu_op is AluOp.ADD for i in insns),
        "requant_alu": sum(isinstance(i, AluInsn) and i.use_imm
                           and i.alu_op in (AluOp.SHR, AluOp.MIN, AluOp.MAX) for i in insns),
        "store_acc": sum(isinstance(i, MemInsn) and i.store and i.mem_type is MemType.ACC
                         for i in insns),
        "store_out": sum(isinstance(i, MemInsn) and i.store and i.mem_type is MemType.OUT
                         for i in insns),
    }


# --------------------------------------------------------------------------- the passes fire


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_passes_replace_the_alu_work(variant: str, cfg: HwConfig) -> None:
    """C5 (1x1, bias, shift, ReLU): with the reset from acc no ALU ADD is left and every reset
    copies; with the post-processing store no requantising ALU op is left, every store is a
    STORE ACC; each leaves the other's instructions as they were."""
    wl = resnet18_layer("C5")
    plain = _kinds(compile_conv2d(wl, cfg).program)
    on = cfg.replace(**VARIANTS[variant])
    got = _kinds(compile_conv2d(wl, on, default_conv2d_knobs(wl, cfg)).program)
    assert plain["copy"] == 0 and plain["add"] > 0 and plain["requant_alu"] > 0
    if "ra" in variant:
        assert got["add"] == 0 and got["copy"] > 0
    else:
        assert got["add"] == plain["add"] and got["copy"] == 0
    if "pp" in variant:
        assert got["requant_alu"] == 0 and got["store_out"] == 0
        assert got["store_acc"] == plain["store_out"]
    else:
        assert got["requant_alu"] == plain["requant_alu"]
        assert got["store_acc"] == 0 and got["store_out"] == plain["store_out"]


def test_the_alu_is_idle_with_both(tiny: HwConfig) -> None:
    """The compute module's ALU cycles (``Report.alu_busy``, the timing simulator's
    ``costs.alu_cycles`` of each ALU instruction) go from the requantisation and bias chain's
    to none with both options, for the same output; fsim has no cycles to report."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 8, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 8, 1, 1), dtype=np.int8)
    bias = rng.integers(-(2**12), 2**12, 8, dtype=np.int32)
    args = {"bias": bias, "shift": 6, "relu": True}
    y0, plain = accel.conv2d(x, w, **args, config=tiny, backend="sim")
    y1, both = accel.conv2d(x, w, **args, config=tiny.replace(**BOTH), backend="sim")
    np.testing.assert_array_equal(y0, y1)
    np.testing.assert_array_equal(y0, kernels.conv2d(x, w, **args))
    # SHR, MIN, MAX on every acc tile (36 pixels x 2 channel blocks), each a micro-op per
    # alu.ii cycles; tiny's bias is loaded into the accumulators (load_bias), not added
    counts = [plain.insn_counts.get(f"ALU_{op}", 0) for op in ("ADD", "SHR", "MIN", "MAX")]
    assert counts[0] == 0 and counts[1] == counts[2] == counts[3] >= 1   # one each per tile
    assert plain.alu_busy is not None and plain.alu_busy >= 3 * 72 * tiny.alu.ii
    assert not any(name.startswith("ALU_") for name in both.insn_counts)
    assert both.alu_busy == 0 and both.to_dict()["alu_busy"] == 0
    assert accel.conv2d(x, w, **args, config=tiny, backend="fsim")[1].alu_busy is None


def test_without_the_options_the_ir_is_unchanged(cfg: HwConfig) -> None:
    wl = resnet18_layer("C3")
    result = build(conv2d_schedule(wl, default_conv2d_knobs(wl, cfg), cfg), cfg, "c3",
                   keep_ir=True)
    after_alu = result.stages["inject_alu"]
    assert reset_bias(after_alu, cfg) is after_alu
    assert store_requant(after_alu, cfg) is after_alu


def test_no_bias_no_copy(cfg: HwConfig) -> None:
    """Without a bias the resets stay resets to zero."""
    wl = Conv2dWorkload(1, 32, 8, 8, 32, 3, 3, 1, 1, 1, 1, False, 6, True)
    on = cfg.replace(**BOTH)
    assert _kinds(compile_conv2d(wl, on).program)["copy"] == 0


def test_reset_bias_ir_moves_the_load_ahead(tiny: HwConfig) -> None:
    """The bias's LOAD ACC comes before the copying reset nest, the ADD is gone; the bias is
    loaded once, outside the tile loops, and each thread's resets copy its share."""
    on = tiny.replace(**RA)
    wl = Conv2dWorkload(1, 16, 4, 4, 16, 3, 3, 1, 1, 1, 1, True, 3, True)
    text = str(build(conv2d_schedule(wl, default_conv2d_knobs(wl, on), on), on, "c",
                     keep_ir=True).stages["reset_bias"])
    assert "alu_add" not in text
    load = text.index("dma_load ACC bias.acc")
    assert load < text.index("gemm_reset conv@") < text.index("gemm conv@")
    assert "= bias.acc@((out.o.outer.inner * 2) + conv.o)" in text
    assert text.count("dma_load ACC bias.acc") == 1 and load < text.index("for out.y")


# --------------------------------------------------------------------------- bit-exact


@pytest.mark.parametrize("variant", [*VARIANTS, "off"])
@pytest.mark.parametrize("layer", list(RESNET18_LAYERS))
def test_resnet18_layers_bit_exact(layer: str, variant: str, cfg: HwConfig,
                                   rng: np.random.Generator) -> None:
    """C1-C12 on default_alu with each feature and with neither: identical to the kernel on
    fsim (tests/test_compiler_ops.py runs them on default, both on, on fsim and sim)."""
    args = resnet_layer(layer, rng)
    y, _ = accel.conv2d(**args, config=cfg.replace(**VARIANTS.get(variant, {})),
                        backend="fsim")
    np.testing.assert_array_equal(y, kernels.conv2d(**args))


@pytest.mark.parametrize("layer", ["C1", "C3", "C5", "C11"])
def test_resnet18_layers_bit_exact_timed(layer: str, vta: HwConfig,
                                         rng: np.random.Generator) -> None:
    """Some layers on the timing simulator, on vta_1x16x16 with both features."""
    args = resnet_layer(layer, rng)
    y, report = accel.conv2d(**args, config=vta.replace(**BOTH), backend="sim")
    np.testing.assert_array_equal(y, kernels.conv2d(**args))
    assert report.cycles


@pytest.mark.parametrize("config_name", ["tiny", "default"])
@settings(max_examples=40, **_SETTINGS)
@given(case=conv_cases())
def test_conv2d_random_shapes_with_both(config_name: str, case: dict[str, Any]) -> None:
    run_conv_case(case, _with(config_name, "pp_ra"), "fsim")


@pytest.mark.parametrize("backend", ["fsim", "sim"])
@pytest.mark.parametrize("config_name", ["tiny", "default", "vta_1x16x16"])
def test_matmul_bit_exact_with_both(config_name: str, backend: str,
                                    rng: np.random.Generator) -> None:
    config = _with(config_name, "pp_ra")
    for m, k, n in MATMUL_SHAPES:
        a, b = _int8(rng, (m, k)), _int8(rng, (k, n))
        for bias, shift, relu in ((_bias(rng, n), 6, True), (None, 0, False)):
            y, _ = accel.matmul(a, b, bias, shift, relu, config=config, backend=backend)
            np.testing.assert_array_equal(y, kernels.matmul(a, b, bias, shift, relu))


def test_int32_wraparound_with_both(cfg: HwConfig, tiny: HwConfig,
                                    rng: np.random.Generator) -> None:
    """Bias at the int32 limits: bias + sum wraps as sum + bias does; shifts up to 31."""
    x, w = _int8(rng, (2, 20, 6, 6)), _int8(rng, (12, 20, 3, 3))
    biases = [np.full(12, 2**31 - 1, np.int32), np.full(12, -(2**31), np.int32),
              rng.integers(-(2**31), 2**31 - 1, size=12, dtype=np.int32)]
    for config in (cfg.replace(**BOTH), tiny.replace(**BOTH)):
        for bias in biases:
            for shift, relu in ((0, False), (12, True), (31, False)):
                y, _ = accel.conv2d(x, w, bias, 1, 1, shift, relu, config=config,
                                    backend="fsim")
                np.testing.assert_array_equal(y, kernels.conv2d(x, w, bias, 1, 1, shift, relu))


@pytest.mark.parametrize("backend_name", ["fsim", "sim"])
def test_network_with_both(backend_name: str) -> None:
    """Convolutions, the residual add and dense through the graph runtime with both."""
    cfg = load_config("tiny").replace(**BOTH)
    g = small_net(cfg)
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, (2, 5, 9, 9), dtype=np.int8)
    x2 = rng.integers(-128, 128, (2, 12, 9, 9), dtype=np.int8)
    outputs, report = Executable(g, cfg).run({"x": x, "x2": x2}, backend=backend_name,
                                             check=True)
    np.testing.assert_array_equal(outputs["y"], reference(g, x, x2))
    assert report.check is True


def test_compiled_conv_on_the_rtl(tiny: HwConfig) -> None:
    """A compiled convolution with bias on tiny with both features: RTL == fsim (DRAM) and
    RTL == sim (every instruction's start and end)."""
    on = tiny.replace(**BOTH)
    wl = Conv2dWorkload(1, 8, 4, 4, 8, 3, 3, 1, 1, 1, 1, True, 5, True)
    op = compile_conv2d(wl, on)
    assert _kinds(op.program)["copy"] and _kinds(op.program)["store_acc"]
    rng = np.random.default_rng(9)
    x, w = _int8(rng, (1, 8, 4, 4)), _int8(rng, (8, 8, 3, 3))
    dram = op.dram(**pack_conv2d_args(op, x, w, _bias(rng, 8)))
    cosim(op.program, dram)
