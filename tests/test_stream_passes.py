"""The instruction-stream passes (``compiler.passes.stream``), the resident bias and the merged
STOREs: what they change in a program, that they change nothing in its results, and the cycles
they save on ResNet-18's 1x1 layers (against the same program with the passes undone)."""

from __future__ import annotations

import numpy as np
import pytest

import accel
from accel.machine.config import HwConfig, load_config
from accel.machine.isa import GemmInsn, MemInsn, MemType, Module, module_of
from accel.machine.program import Program
from compiler.ops.compiled import conv2d_program
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload
from compiler.passes.stream import Footprint, footprint, hoist_store_tokens, sink_store_waits
from runtime import kernels
from sim.functional import Dram
from sim.stats import Slice
from sim.timing import TimingSimulator

# ResNet-18's C3 (56x56, 64 -> 64, 1x1) with two virtual threads over output channels.
C3 = Conv2dWorkload(1, 64, 56, 56, 64, 1, 1, 1, 1, 0, 0, True, 8, True)
KNOBS = Conv2dKnobs(tile_b=1, tile_h=2, tile_w=56, tile_ci=2, tile_co=4, oc_nthread=2,
                    h_nthread=1, tile_order=0)


@pytest.fixture(scope="module")
def post() -> HwConfig:
    return load_config("default")


def _slices(cfg: HwConfig, program: Program) -> list[Slice]:
    return TimingSimulator(cfg).run(program, Dram()).timeline


def test_footprint_conflicts() -> None:
    """A write meets a read or a write of the same rows (acc or uop); reads never conflict."""
    gemm = footprint(GemmInsn(uop_bgn=0, uop_end=4), dst=(0, 7), src=(0, 3))
    reset = footprint(GemmInsn(reset=True, from_acc=True, uop_bgn=4, uop_end=8),
                      dst=(8, 15), src=(100, 101))
    assert gemm == Footprint(acc_w=((0, 7),), acc_r=((0, 7),), uop_r=((0, 3),))
    assert reset.acc_r == ((100, 101),)
    assert not gemm.conflicts(reset) and not reset.conflicts(gemm)
    bias = footprint(MemInsn(mem_type=MemType.ACC, sram_base=100, x_size=2, x_stride=2))
    assert bias.conflicts(reset) and reset.conflicts(bias)
    uop = footprint(MemInsn(mem_type=MemType.UOP, sram_base=3, x_size=1, x_stride=1))
    assert uop.conflicts(gemm) and not uop.conflicts(reset)
    store = footprint(MemInsn(store=True, mem_type=MemType.ACC, sram_base=20, x_size=4,
                              x_stride=4))
    assert store.acc_r == ((20, 23),) and not store.conflicts(reset)
    assert not store.conflicts(footprint(MemInsn(store=True, mem_type=MemType.ACC,
                                                 sram_base=20, x_size=4, x_stride=4)))
    assert store.conflicts(footprint(GemmInsn(uop_bgn=0, uop_end=1), dst=(23, 23), src=(0, 0)))


def _toy() -> tuple[list, list[Footprint]]:
    """Thread 0 and 1 accumulate rows 0-7 and 8-15; the tile ends with both GEMMs, then a push
    to the store (on thread 1's GEMM, as codegen places it) and the STORE of thread 0's rows;
    then thread 1's reset waits for the store, followed by thread 0's next GEMM."""
    g0 = GemmInsn(uop_bgn=0, uop_end=1, pop_prev=True)
    g1 = GemmInsn(uop_bgn=1, uop_end=2, pop_prev=True, push_next=True)
    st = MemInsn(store=True, mem_type=MemType.ACC, sram_base=0, x_size=8, x_stride=8,
                 pop_prev=True, push_prev=True)
    r1 = GemmInsn(reset=True, uop_bgn=2, uop_end=3, pop_next=True)
    g0b = GemmInsn(uop_bgn=0, uop_end=1, pop_prev=True)
    insns = [g0, g1, st, r1, g0b]
    spans = [((0, 7), None), ((8, 15), None), (None, None), ((8, 15), None), ((0, 7), None)]
    return insns, [footprint(i, *s) for i, s in zip(insns, spans, strict=True)]


def test_hoist_moves_the_push_to_the_last_writer() -> None:
    insns, prints = _toy()
    out = hoist_store_tokens(insns, prints)
    assert out[0].push_next and not out[1].push_next       # thread 1's GEMM writes rows 8-15
    assert [type(i) for i in out] == [type(i) for i in insns]


def test_hoist_stops_at_a_writer_of_the_stored_rows() -> None:
    insns, prints = _toy()
    stored = MemInsn(store=True, mem_type=MemType.ACC, sram_base=8, x_size=8, x_stride=8,
                     pop_prev=True, push_prev=True)      # thread 1's rows instead
    insns[2], prints[2] = stored, footprint(stored)
    assert hoist_store_tokens(insns, prints) == insns


def test_sink_moves_the_wait_past_independent_work() -> None:
    insns, prints = _toy()
    r1, g0b = insns[3], insns[4]
    out, moved = sink_store_waits(insns, prints)
    # r1 pops store->compute; g0b pops load->compute: other queue, other rows.
    assert out[3] == g0b and out[4] == r1 and moved[3] == prints[4] and moved[4] == prints[3]
    assert out[:3] == insns[:3]


@pytest.mark.parametrize("blocker", ["rows", "queue", "push"])
def test_sink_stops(blocker: str) -> None:
    insns, prints = _toy()
    if blocker == "rows":       # the next GEMM writes the reset's rows
        prints[4] = footprint(insns[4], (8, 15), None)
    elif blocker == "queue":    # the next instruction waits for the store too
        insns[4] = insns[4].with_deps(pop_next=True)
    else:                       # a moved instruction must push nothing
        insns[3] = insns[3].with_deps(push_prev=True)
    out, _ = sink_store_waits(insns, prints)
    assert out == insns


def test_compiled_stream_overlaps_the_threads(post: HwConfig) -> None:
    """On C3: thread 0's STOREs start before thread 1's last GEMM of the tile ends, and
    thread 1's reset follows thread 0's first GEMM of the next tile."""
    program = conv2d_program(C3, post, KNOBS)
    timeline = _slices(post, program)
    stores = [s for s in timeline if s.module == "store" and s.name.startswith("STORE")]
    gemms = [s for s in timeline if s.module == "compute" and s.name.startswith("GEMM")
             and "reset" not in s.name]
    first = stores[0]
    assert any(g.start <= first.start < g.end for g in gemms), "no GEMM overlaps the STORE"
    compute = [i for i in program.insns if module_of(i) is Module.COMPUTE]
    resets = [k for k, i in enumerate(compute) if isinstance(i, GemmInsn) and i.reset]
    # Each tile's second reset comes after a GEMM (the first thread's), not right after the
    # first reset.
    assert all(not (isinstance(compute[k + 1], GemmInsn) and compute[k + 1].reset)
               for k in resets[2::2])


def test_one_store_per_full_width_tile(post: HwConfig) -> None:
    """A full-width tile's output-channel blocks go out in one STORE (blocks x rows*cols)."""
    program = conv2d_program(C3, post, KNOBS)
    stores = [i for i in program.insns if isinstance(i, MemInsn) and i.store and i.y_size]
    tiles = (56 // KNOBS.tile_h) * KNOBS.oc_nthread
    assert len(stores) == tiles
    assert {(s.y_size, s.x_size, s.x_stride) for s in stores} == {(4, 112, 56 * 56)}


def test_bias_loaded_once_per_channel_chunk(post: HwConfig, cfg: HwConfig) -> None:
    """With the bias resident, one LOAD ACC per output-channel chunk, not one per tile."""
    for config in (post, cfg):
        program = conv2d_program(C3, config, KNOBS)
        loads = [i for i in program.insns if isinstance(i, MemInsn) and not i.store
                 and i.mem_type is MemType.ACC and i.y_size]
        assert len(loads) == 1 and loads[0].x_size == KNOBS.tile_co * KNOBS.oc_nthread


@pytest.mark.parametrize("config_name", ["default_alu", "default", "vta_1x16x16_alu"])
def test_bit_exact_and_faster_than_without(config_name: str, monkeypatch: pytest.MonkeyPatch,
                                           rng: np.random.Generator) -> None:
    """C3 with the stream passes: bit-exact with the numpy kernel on the timing simulator and
    fsim, and no slower than with the passes switched off (strictly faster with
    post-processing, where the epilogue is the STORE alone)."""
    cfg = load_config(config_name)
    wl = Conv2dWorkload(1, 64, 14, 56, 64, 1, 1, 1, 1, 0, 0, True, 8, True)
    knobs = Conv2dKnobs(tile_b=1, tile_h=2, tile_w=56, tile_ci=2,
                        tile_co=4 if cfg.block_out == 8 else 2, oc_nthread=2, h_nthread=1,
                        tile_order=0)
    x = rng.integers(-128, 128, (1, 64, 14, 56), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 64, 1, 1), dtype=np.int8)
    bias = rng.integers(-4096, 4096, 64, dtype=np.int32)
    args = {"bias": bias, "shift": 8, "relu": True}
    expected = kernels.conv2d(x, w, **args)
    for backend in ("sim", "fsim"):
        y, _ = accel.conv2d(x, w, **args, config=cfg, backend=backend, knobs=knobs)
        np.testing.assert_array_equal(y, expected)
    with_passes = TimingSimulator(cfg).run(conv2d_program(wl, cfg, knobs), Dram()).cycles
    monkeypatch.setattr("compiler.pipeline.codegen.sink_store_waits", lambda i, p: (i, p))
    monkeypatch.setattr("compiler.pipeline.codegen.hoist_store_tokens", lambda i, p: i)
    without = TimingSimulator(cfg).run(conv2d_program(wl, cfg, knobs), Dram()).cycles
    assert with_passes <= without
    if cfg.store.postproc:
        assert with_passes < 0.97 * without, (with_passes, without)
