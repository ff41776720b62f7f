"""The synthetic benchmark programs: what they compute, how long they take, bad arguments."""

from __future__ import annotations

import numpy as np
import pytest

from accel import load_config, run_program
from accel.testing.synthetic import gemm_tile
from hw.backend import run_rtl


def tile_reference(inp: np.ndarray, wgt: np.ndarray, repeats: int, inner: int,
                   pixels: int, in_blocks: int) -> np.ndarray:
    """gemm_tile's output: every pixel's dot product over all input blocks, ``repeats *
    inner`` times over (int32, wrapping), then SHR 8 and clip to int8."""
    batch, block_in = inp.shape[1:]
    x = inp.reshape(in_blocks, pixels, batch, block_in).astype(np.int64)
    w = wgt.astype(np.int64)
    acc = np.einsum("kpbi,koi->pbo", x, w) * (repeats * inner)
    acc = ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)
    return np.clip(acc >> 8, -128, 127).astype(np.int8)


@pytest.mark.parametrize("name", ["tiny", "default"])
def test_gemm_tile_computes_the_tile(name):
    cfg = load_config(name)
    repeats, inner, pixels, in_blocks = 3, 5, 16, 4
    program, dram = gemm_tile(cfg, repeats, inner=inner, pixels=pixels, in_blocks=in_blocks)
    expected = tile_reference(dram.read("inp", "int8").reshape(-1, cfg.batch, cfg.block_in),
                              dram.read("wgt", "int8").reshape(-1, cfg.block_out, cfg.block_in),
                              repeats, inner, pixels, in_blocks)
    out = dram.copy()
    run_program(program, out, backend="fsim")
    got = out.read("out", "int8").reshape(pixels, cfg.batch, cfg.block_out)
    np.testing.assert_array_equal(got, expected)
    assert ((got > -128) & (got < 127)).any()     # not every output saturated
    # Compute-bound: the GEMMs' micro-ops, one a cycle, are nearly all of the run.
    uops = repeats * pixels * in_blocks * inner
    cycles = run_program(program, dram.copy(), backend="sim").cycles
    assert uops < cycles < uops + 1000


def test_gemm_tile_on_the_rtl():
    cfg = load_config("tiny")
    program, dram = gemm_tile(cfg, 1, inner=2, pixels=4, in_blocks=2)
    reference = dram.copy()
    run_program(program, reference, backend="fsim")
    cycles = run_program(program, dram.copy(), backend="sim").cycles
    image = dram.copy()
    rtl_cycles, _ = run_rtl(program, image, cfg, engine="amaranth")
    assert rtl_cycles == cycles
    np.testing.assert_array_equal(image.data, reference.data)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"repeats": 0}, "repeats must be >= 1, got 0"),
    ({"repeats": 1, "inner": 0}, "inner must be 1..16383 and in_blocks at most 16383, got 0 and 4"),
    ({"repeats": 1, "inner": 16384},
     "inner must be 1..16383 and in_blocks at most 16383, got 16384 and 4"),
    ({"repeats": 1, "pixels": 4096}, "4096 pixels x 4 blocks do not fit the buffers of "),
])
def test_gemm_tile_bad_arguments(kwargs, message):
    with pytest.raises(ValueError) as err:
        gemm_tile(load_config("tiny"), **kwargs)
    assert str(err.value).startswith(message)
