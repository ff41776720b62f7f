"""The machine contract's token protocol without time (``accel.machine.tokens``) and the serial
cycle bound (``accel.machine.costs.serial_cycles``), against the SimPy timing model."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig
from accel.machine.costs import serial_cycles
from accel.machine.isa import DEP_QUEUES, MemType, Module
from accel.machine.program import Program, ProgramError, SimulationDeadlock
from accel.machine.tokens import check_tokens, retire_order
from accel.testing.randprog import numpy_pick, random_program
from runtime.backends import run_program
from sim.timing import TimingSimulator


def test_retire_order_follows_the_tokens(tiny: HwConfig) -> None:
    b = ProgramBuilder(tiny)
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True, push_next=True)          # 0: waits for 1
    b.load(MemType.INP, x_size=0, x_stride=0, push_next=True)             # 1
    b.store(x_size=0, x_stride=0, pop_prev=True, push_prev=True)          # 2: waits for 0
    b.finish(pop_next=True)                                                # 3: waits for 2
    program, _ = b.build()
    assert [i for i, _ in retire_order(program)] == [1, 0, 2, 3]


def test_a_full_command_queue_is_a_deadlock_the_timing_model_sees_too(tiny: HwConfig) -> None:
    """Fetch puts instructions into their queues in program order: compute's queue, full of
    instructions that wait for a load behind them, stops everything. Without the command
    queues' depth in the protocol the functional simulator would run this program."""
    cfg = tiny.replace(**{"queues.cmd_depth": 2})
    b = ProgramBuilder(cfg)
    for _ in range(4):
        b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    for _ in range(4):
        b.load(MemType.INP, x_size=0, x_stride=0, push_next=True)
    b.finish()
    program, dram = b.build()
    message = (
        "deadlock: load waits for an instruction (command queue empty); compute waits at "
        "instruction 0 (GEMM) to pop load->compute (0 tokens); store has no instructions left; "
        "fetch waits at instruction 3 for room in the compute command queue (2 entries); "
        "tokens: load->compute=0 compute->load=0 compute->store=0 store->compute=0")
    with pytest.raises(SimulationDeadlock, match="^" + re.escape(message) + "$"):
        check_tokens(program)
    with pytest.raises(SimulationDeadlock, match=re.escape("fetch waits at instruction 3")):
        run_program(program, dram.copy(), backend="fsim")
    with pytest.raises(SimulationDeadlock, match=r"^deadlock at cycle"):
        TimingSimulator(cfg).run(program, dram.copy())


def test_a_push_into_a_full_token_queue_is_named(tiny: HwConfig) -> None:
    cfg = tiny.replace(**{"queues.token_depth": 1})
    b = ProgramBuilder(cfg)
    b.load(MemType.INP, x_size=0, x_stride=0, push_next=True)
    b.load(MemType.INP, x_size=0, x_stride=0, push_next=True)
    b.gemm(uop_bgn=0, uop_end=0, pop_next=True)        # store never pushes
    b.finish()
    program, _ = b.build()
    with pytest.raises(SimulationDeadlock, match=re.escape(
            "deadlock: load waits at instruction 1 (LOAD_INP) to push load->compute (full, 1 "
            "tokens); compute waits at instruction 2 (GEMM) to pop store->compute (0 tokens)")):
        check_tokens(program)


def test_leftovers_at_finish_are_the_timing_models(tiny: HwConfig) -> None:
    b = ProgramBuilder(tiny)
    b.finish()
    b.store(x_size=0, x_stride=0, pop_prev=True)        # fetched, never run
    program, dram = b.build()
    text = ("FINISH at instruction 0 retired with 1 store instruction(s) never run, from "
            "instruction 1")
    with pytest.raises(ProgramError, match="^" + re.escape(text) + "$"):
        check_tokens(program)
    with pytest.raises(ProgramError, match="^" + re.escape(text) + "$"):
        TimingSimulator(tiny).run(program, dram)


def _token_program(cfg: HwConfig, draw: st.DrawFn) -> Program:
    """Zero-size instructions on all three modules with random (legal) token flags."""
    b = ProgramBuilder(cfg)
    flags_of = {m: [f for (mm, f) in DEP_QUEUES if mm is m] for m in Module}
    for _ in range(draw(st.integers(0, 12))):
        module = draw(st.sampled_from(list(Module)))
        flags = {f: True for f in flags_of[module] if draw(st.booleans())}
        if module is Module.LOAD:
            b.load(MemType.INP, x_size=0, x_stride=0, **flags)
        elif module is Module.STORE:
            b.store(x_size=0, x_stride=0, **flags)
        else:
            b.gemm(uop_bgn=0, uop_end=0, **flags)
    b.finish(**{f: True for f in ("pop_prev", "pop_next") if draw(st.booleans())})
    return b.build()[0]


def _outcome(run: object) -> tuple[str, str]:
    try:
        run()  # type: ignore[operator]
    except SimulationDeadlock:
        return ("deadlock", "")
    except ProgramError as exc:
        return ("leftovers", str(exc))
    return ("finished", "")


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 3))
def test_the_protocol_without_time_ends_as_the_timing_model(
        data: st.DataObject, cmd_depth: int, token_depth: int) -> None:
    """Whatever the program, running the token protocol without time ends the way the SimPy
    model does: finished, deadlocked, or with the same leftovers named (the processes and
    bounded queues form a determinate network, so timing cannot change the outcome)."""
    from accel.machine.config import load_config

    cfg = load_config("tiny").replace(**{"queues.cmd_depth": cmd_depth,
                                         "queues.token_depth": token_depth})
    program = _token_program(cfg, data.draw)
    untimed = _outcome(lambda: check_tokens(program))
    timed = _outcome(lambda: TimingSimulator(cfg).run(program, ProgramBuilder(cfg).dram))
    assert untimed == timed


@pytest.mark.parametrize("seed", range(6))
def test_serial_cycles_bound_the_timing_model(tiny: HwConfig, seed: int) -> None:
    program, dram = random_program(tiny, numpy_pick(np.random.default_rng(seed)))
    check_tokens(program)
    cycles = TimingSimulator(tiny).run(program, dram).cycles
    assert cycles <= serial_cycles(program)
