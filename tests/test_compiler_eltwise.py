"""The residual add on the accelerator (``compiler.ops.eltwise``) against ``runtime.kernels.add``.

The add is lowered as two GEMMs against an identity weight tile, an ALU ADD and the
requantisation chain; results must equal the numpy kernel exactly, on the functional and the
timed simulator.
"""

from __future__ import annotations

import numpy as np
import pytest

import accel
from accel.api import run_program
from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.ops.compiled import CompiledOp
from compiler.ops.eltwise import (
    AddKnobs,
    AddWorkload,
    compile_add,
    default_add_knobs,
    fits_add,
    pack_add_args,
)
from runtime import kernels

BACKENDS = ("fsim", "sim")

#: (batch, channels, height, width, shift, relu): channels off the block, batch > 1, odd sizes.
CASES = [
    (1, 16, 4, 6, 0, False),
    (1, 12, 5, 3, 3, True),
    (3, 20, 2, 4, 8, False),
    (2, 7, 3, 3, 5, True),
]


def _int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def _run(op: CompiledOp, a: np.ndarray, b: np.ndarray, backend: str) -> tuple[np.ndarray, int]:
    image = op.dram(**pack_add_args(op, a, b))
    result = run_program(op.program, image, config=op.config, backend=backend)
    wl = op.workload
    assert isinstance(wl, AddWorkload)
    if backend == "sim":
        assert result.cycles is not None and result.cycles > 0
    return op.read_output(image, wl.shape), result.cycles or 0


def _config(name: str) -> HwConfig:
    return accel.load_config(name)


@pytest.mark.parametrize("config", ["default", "tiny", "vta_1x16x16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}c{}h{}w{}_sh{}_r{:d}".format(*c))
def test_add_bit_exact(config: str, case: tuple[int, int, int, int, int, bool],
                       rng: np.random.Generator) -> None:
    n, c, h, w, shift, relu = case
    cfg = _config(config)
    wl = AddWorkload(n, c, h, w, shift, relu)
    op = compile_add(wl, cfg)
    a, b = _int8(rng, wl.shape), _int8(rng, wl.shape)
    want = kernels.add(a, b, shift, relu)
    for backend in BACKENDS:
        got, _ = _run(op, a, b, backend)
        np.testing.assert_array_equal(got, want)


def test_every_shift_and_relu(cfg: HwConfig, rng: np.random.Generator) -> None:
    """Shifts 0..8 with and without ReLU, including the saturating extremes."""
    shape = (1, 10, 2, 3)
    a, b = _int8(rng, shape), _int8(rng, shape)
    a[0, 0], b[0, 0] = 127, 127
    a[0, 1], b[0, 1] = -128, -128
    for shift in range(9):
        for relu in (False, True):
            op = compile_add(AddWorkload(*shape, shift=shift, relu=relu), cfg)
            got, _ = _run(op, a, b, "fsim")
            np.testing.assert_array_equal(got, kernels.add(a, b, shift, relu))


def test_batch2_core(cfg: HwConfig, rng: np.random.Generator) -> None:
    """Two images per tile: the identity GEMM works row by row, odd batches are padded."""
    core2 = cfg.replace(core={"batch": 2, "block_in": 8, "block_out": 8})
    wl = AddWorkload(3, 9, 2, 3, 2, True)
    a, b = _int8(rng, wl.shape), _int8(rng, wl.shape)
    got, _ = _run(compile_add(wl, core2), a, b, "sim")
    np.testing.assert_array_equal(got, kernels.add(a, b, 2, True))


def test_blocked_inputs_pass_through(cfg: HwConfig, rng: np.random.Generator) -> None:
    """Inputs already in the blocked layout (between accelerator nodes) are used as they are."""
    from accel.machine.dram import pack_activation

    wl = AddWorkload(1, 12, 3, 2, 1, False)
    op = compile_add(wl, cfg)
    a, b = _int8(rng, wl.shape), _int8(rng, wl.shape)
    args = pack_add_args(op, pack_activation(a, cfg.batch, cfg.block_in), b)
    np.testing.assert_array_equal(args["a"], pack_activation(a, cfg.batch, cfg.block_in))
    np.testing.assert_array_equal(args["ident"][0, 0], np.eye(cfg.block_out, dtype=np.int8))
    image = op.dram(**args)
    run_program(op.program, image, config=cfg, backend="fsim")
    np.testing.assert_array_equal(op.read_output(image, wl.shape), kernels.add(a, b, 1, False))


def test_rectangular_core_raises(cfg: HwConfig) -> None:
    rect = cfg.replace(core={"batch": 1, "block_in": 16, "block_out": 8})
    wl = AddWorkload(1, 16, 2, 2)
    with pytest.raises(LoweringError) as info:
        compile_add(wl, rect)
    assert str(info.value) == (
        f"add {wl.signature()}: lowering an add as GEMMs against an identity tile needs "
        f"block_in == block_out, but {rect.name} has block_in 16 and block_out 8"
    )
    with pytest.raises(LoweringError, match="needs block_in == block_out"):
        default_add_knobs(wl, rect)


@pytest.mark.parametrize("knobs", [AddKnobs(1, 1, 3, 2), AddKnobs(2, 1, 1, 2),
                                   AddKnobs(1, 2, 3, 1), AddKnobs(4, 4, 3, 1)],
                         ids=["rows_2t", "channels_2t", "1t", "whole_1t"])
def test_explicit_knobs_equal_default(cfg: HwConfig, rng: np.random.Generator,
                                      knobs: AddKnobs) -> None:
    """Threads over channel blocks or rows, and one thread, all give the default's result."""
    wl = AddWorkload(1, 32, 4, 3, 4, True)
    default = default_add_knobs(wl, cfg)
    assert default.nthread == 2 and fits_add(wl, default, cfg)
    a, b = _int8(rng, wl.shape), _int8(rng, wl.shape)
    want, _ = _run(compile_add(wl, cfg), a, b, "sim")
    got, _ = _run(compile_add(wl, cfg, knobs), a, b, "sim")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, kernels.add(a, b, 4, True))


def test_knobs_that_do_not_divide(cfg: HwConfig) -> None:
    wl = AddWorkload(1, 8, 5, 4)  # one channel block: threads would split the rows
    with pytest.raises(LoweringError) as info:
        compile_add(wl, cfg, AddKnobs(tile_w=3))
    assert str(info.value) == "knob tile_w = 3 does not divide the 4 columns"
    with pytest.raises(LoweringError) as info:
        compile_add(wl, cfg, AddKnobs(tile_h=1, nthread=2))
    assert str(info.value) == "knob tile_h * nthread = 2 does not divide the 5 rows"


def test_default_knobs_resnet_shape(cfg: HwConfig, tiny: HwConfig) -> None:
    """ResNet-18 layer1's add: large tiles, two threads, within the buffers."""
    wl = AddWorkload(1, 64, 56, 56, 1, True)
    for config in (cfg, tiny):
        k = default_add_knobs(wl, config)
        assert k.nthread == 2 and fits_add(wl, k, config)
    assert default_add_knobs(wl, cfg) == AddKnobs(1, 4, 56, 2)       # acc 32 KB: whole rows
    assert default_add_knobs(wl, accel.load_config("default_alu")) == AddKnobs(1, 8, 56, 2)
