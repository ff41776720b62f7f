"""Timing simulator: exact timelines, overlap, back-pressure, bandwidth, deadlocks, statistics.

Hand-computed numbers use the default config: DRAM latency 32 cycles, 8 bytes/cycle, 256-byte
bursts; GEMM ii 1 depth 5; ALU ii 2 depth 4; one decode cycle per instruction. Fetch reads up to
16 instructions (256 bytes) per transaction and dispatches one per cycle.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import original
from hypothesis import given, settings
from hypothesis import strategies as st

from accel import load_config as load_shipped
from accel import run_program
from accel.machine import costs
from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.isa import AluOp, MemType
from accel.machine.program import Program, ProgramError, SimulationDeadlock
from sim.stats import SimStats
from sim.timing import BANDWIDTH_TRACK, Queue, TimingSimulator, bandwidth_track


def load_config(name: str | None = None) -> HwConfig:
    """A shipped config with the original DRAM channel (``conftest.ORIGINAL_CHANNEL``): the
    timelines here are hand-computed from its rules; tests/test_memory.py has the others."""
    return original(load_shipped(name))


def timeline(stats: SimStats) -> list[tuple[str, str, int, int]]:
    return [(s.module, s.name.split()[0], s.start, s.end) for s in stats.timeline]


def run_sim(program: Program, dram: Dram) -> SimStats:
    """Run on both backends; assert identical DRAM; return the timing stats."""
    reference = dram.copy()
    run_program(program, reference, backend="fsim")
    result = run_program(program, dram, backend="sim")
    np.testing.assert_array_equal(dram.data, reference.data)
    for name, m in result.stats.modules.items():
        assert m.busy + m.stall_total == result.cycles, name
    return result.stats


def test_lone_load() -> None:
    cfg = load_config()
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.arange(32, dtype=np.int8).reshape(4, 1, 8))
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=4, x_stride=4, push_next=True)
    b.finish(pop_prev=True)
    stats = run_sim(*b.build())
    # fetch: 2 instructions = 32 bytes -> 32 + 4 = 36 cycles, dispatch at 37 and 38.
    # load: decode 37..38, DRAM 32 + 32/8 = 36 -> 74. FINISH pops at 74, runs 1 cycle.
    assert timeline(stats) == [("load", "LOAD", 37, 74), ("compute", "FINISH", 74, 75)]
    assert stats.cycles == 75
    assert stats.modules["load"].busy == 1 + 4
    assert stats.modules["load"].stalls == {"cmd_empty": 37 + 1, "dram_latency": 32}
    assert stats.modules["compute"].stalls["token load->compute"] == 74 - 38
    assert stats.dram_bytes == 32 + 32
    assert stats.insn_counts == {"LOAD_INP": 1, "FINISH": 1}


def chain_program(cfg: HwConfig) -> tuple[Program, Dram]:
    rng = np.random.default_rng(1)
    b = ProgramBuilder(cfg)
    ia = b.tensor("inp", rng.integers(-128, 128, (4, 1, 8), dtype=np.int8))
    wa = b.tensor("wgt", rng.integers(-128, 128, (1, 8, 8), dtype=np.int8))
    oa = b.buffer("out", 32, 8)
    b.uops([(i, i, 0) for i in range(4)])
    b.load(MemType.INP, sram_base=0, dram_base=ia, x_size=4, x_stride=4)
    b.load(MemType.WGT, sram_base=0, dram_base=wa, x_size=1, x_stride=1, push_next=True)
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=4, x_stride=4)
    b.gemm(uop_bgn=0, uop_end=4, pop_prev=True, push_next=True)
    b.store(sram_base=0, dram_base=oa, x_size=4, x_stride=4, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    return b.build()


def test_load_gemm_store_chain() -> None:
    cfg = load_config()
    program, dram = chain_program(cfg)
    stats = run_sim(program, dram)
    # fetch 6 instructions (96 B): 32 + 12 = 44, dispatch at 45..50.
    # LOAD INP: decode 45..46, DRAM 46..82. LOAD UOP (compute) asks at 48, granted 82: four
    # 4-byte micro-ops (default's 32 KB acc: 10-bit acc indices), 32 + 16/8 = 34 -> 116.
    # LOAD WGT: decode 82..83, waits for the channel, 116 + 32 + 8 = 156, pushes.
    # GEMM: 1 + 4 + 5 = 10 -> 166. STORE: decode 166..167, DRAM 167 + 36 = 203. FINISH 204.
    assert cfg.uop_bytes == 4
    assert timeline(stats) == [
        ("load", "LOAD", 45, 82),
        ("compute", "LOAD", 47, 116),
        ("load", "LOAD", 82, 156),
        ("compute", "GEMM", 156, 166),
        ("store", "STORE", 166, 203),
        ("compute", "FINISH", 203, 204),
    ]
    assert stats.cycles == 204
    # Latency: each load's 32 cycles; contention: the second waits for compute's transaction.
    assert stats.modules["load"].stalls["dram_latency"] == 32 + 32
    assert stats.modules["load"].stalls["dram_contention"] == 116 - 83
    assert stats.macs == 4 * 64
    assert stats.gemm_utilization == pytest.approx(256 / (204 * 64))
    assert stats.bytes_written == {"inp": 32, "wgt": 64, "uop": 16, "acc": 128, "out": 32}
    assert stats.bytes_read == {"uop": 16, "inp": 32, "wgt": 256, "acc": 128, "out": 32}


def double_buffer_program(cfg: HwConfig, overlap: bool) -> tuple[Program, Dram]:
    """Two virtual threads, each: load 16 inp tiles into its half, GEMM 8 x 16 micro-ops.

    With ``overlap`` the second thread's load goes ahead while the first GEMM runs; without it,
    a compute->load token serialises the second load behind the first GEMM.
    """
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
    return b.build()


def test_double_buffering_overlaps_load_with_gemm() -> None:
    cfg = load_config()
    fast = run_sim(*double_buffer_program(cfg, overlap=True))
    slow = run_sim(*double_buffer_program(cfg, overlap=False))
    gemm = 1 + 8 * 16 + 5                              # 134 cycles per thread
    load = 1 + costs.dram_cycles(16 * 8, cfg)          # 1 + 32 + 16 = 49
    assert costs.gemm_cycles(double_buffer_program(cfg, True)[0].insns[4], cfg) == gemm

    def starts(stats: SimStats, kind: str) -> list[tuple[int, int]]:
        return [(s.start, s.end) for s in stats.timeline if s.name.startswith(kind)]

    (g0, g0_end), (g1, g1_end) = starts(fast, "GEMM")
    (_, l0_end), (l1, l1_end) = starts(fast, "LOAD INP")
    # The second load runs entirely inside the first GEMM.
    assert g0 == l0_end == l1 and l1_end <= g0_end
    assert g1 == g0_end and g1_end - g1 == gemm
    # Serialised: the second load starts when the first GEMM pushes compute->load.
    (s_g0, s_g0_end), (s_g1, _) = starts(slow, "GEMM")
    (_, _), (s_l1, s_l1_end) = starts(slow, "LOAD INP")
    assert s_l1 == s_g0_end and s_l1_end - s_l1 == load and s_g1 == s_l1_end
    # Everything up to the first GEMM is identical; overlap hides exactly one load.
    assert s_g0 == g0
    assert slow.cycles - fast.cycles == load


def test_command_queue_back_pressure() -> None:
    cfg = load_config().replace(**{"queues.cmd_depth": 2})
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.zeros((8, 1, 8), dtype=np.int8))
    for i in range(6):
        b.load(MemType.INP, sram_base=i, dram_base=addr + i, x_size=1, x_stride=1,
               push_next=(i == 5))
    b.finish(pop_prev=True)
    stats = run_sim(*b.build())
    loads = [(s.start, s.end) for s in stats.timeline if s.module == "load"]
    # fetch: 7 instructions (112 B) = 32 + 14 = 46; dispatch 47, 48, then the queue is full.
    # Each load: decode 1 + DRAM 32 + 1 = 34 cycles, back to back from 47.
    assert loads == [(47 + 34 * i, 47 + 34 * (i + 1)) for i in range(6)]
    full = stats.modules["fetch"].stalls["queue_full"]
    # Load 0 is taken at once and 1, 2 fill the queue; load 3 (ready at 50) waits until the
    # load module takes load 1 at 81 and fetch goes on one cycle later (a put into a full
    # queue resumes the cycle after the take), at 82; load 4 (ready at 83) waits until the
    # take at 115, going on at 116; load 5 (117) until 149, going on at 150.
    assert full == (82 - 50) + (116 - 83) + (150 - 117)
    assert stats.modules["fetch"].busy == 7 + 14


def same_cycle_requests_program(cfg: HwConfig) -> tuple[Program, Dram]:
    """17 instructions: the load's DRAM request and fetch's second batch come in one cycle."""
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.zeros((1, 1, 8), dtype=np.int8))
    for _ in range(14):
        b.gemm(uop_bgn=0, uop_end=0)
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=1, x_stride=1, push_next=True)
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    b.finish()
    return b.build()


def test_same_cycle_dram_requests_go_by_priority() -> None:
    cfg = load_config()
    stats = run_sim(*same_cycle_requests_program(cfg))
    # fetch: 16 instructions = 256 B -> 32 + 32 = 64 cycles; instruction k is dispatched at
    # 65 + k, so the LOAD (k = 14) at 79 and the 16th at 80, when fetch asks for the rest.
    # The load decodes 79..80 and asks at 80 too. The channel is granted at the end of the
    # cycle by priority, whatever SimPy's event order: fetch first, 1 instruction = 32 + 2 ->
    # 80..114, then the load 114 + 32 + 1 = 147. The GEMM pops its token at 147; FINISH
    # (dispatched at 115) runs 148..149.
    assert timeline(stats)[-3:] == [("load", "LOAD", 79, 147), ("compute", "GEMM", 147, 148),
                                    ("compute", "FINISH", 148, 149)]
    assert stats.cycles == 149
    assert stats.modules["load"].stalls["dram_contention"] == 114 - 80
    assert stats.modules["load"].stalls["dram_latency"] == 32


def test_bandwidth_bound_load_matches_formula() -> None:
    cfg = load_config()
    b = ProgramBuilder(cfg)
    addr = b.tensor("wgt", np.ones((32, 8, 8), dtype=np.int8))
    # 4 rows of 8 weight tiles (512 B): two 256-byte bursts per row.
    b.load(MemType.WGT, sram_base=0, dram_base=addr, y_size=4, x_size=8, x_stride=8,
           push_next=True)
    b.finish(pop_prev=True)
    stats = run_sim(*b.build())
    (load,) = [s for s in stats.timeline if s.module == "load"]
    per_row = 2 * (32 + 256 // 8)
    assert load.end - load.start == 1 + 4 * per_row
    assert stats.modules["load"].busy == 1 + 4 * 2 * 32
    assert stats.dram_bytes == 2048 + 32
    assert stats.cycles == 37 + 1 + 4 * per_row + 1


def test_padding_costs_one_cycle_per_element() -> None:
    cfg = load_config()
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.ones((4, 1, 8), dtype=np.int8))
    b.load(MemType.INP, sram_base=0, dram_base=addr, y_size=2, x_size=2, x_stride=2,
           y_pad_0=1, y_pad_1=1, x_pad_0=1, x_pad_1=1, push_next=True)
    b.finish(pop_prev=True)
    stats = run_sim(*b.build())
    (load,) = [s for s in stats.timeline if s.module == "load"]
    pad = 4 * 4 - 2 * 2
    assert load.end - load.start == 1 + 2 * (32 + 2) + pad
    assert costs.mem_cycles(b.insns[0], cfg) == 1 + 2 * 34 + pad


def test_alu_costs() -> None:
    cfg = load_config()
    b = ProgramBuilder(cfg)
    b.uops([(i, i, 0) for i in range(8)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=8, x_stride=8)
    b.alu(AluOp.ADD, uop_bgn=0, uop_end=8, iter_out=3, use_imm=True, imm=1)
    b.finish()
    stats = run_sim(*b.build())
    alu = next(s for s in stats.timeline if s.name.startswith("ALU"))
    assert alu.end - alu.start == 1 + 24 * 2 + 4
    assert stats.alu_busy == 53


def test_deadlock_on_missing_push_is_reported() -> None:
    cfg = load_config()
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.zeros((4, 1, 8), dtype=np.int8))
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=4, x_stride=4)  # forgot push_next
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    b.finish()
    program, dram = b.build()
    message = (
        "deadlock at cycle 76: load waits for an instruction (command queue empty); "
        "compute waits at instruction 1 (GEMM) to pop load->compute; "
        "store waits for an instruction (command queue empty); "
        "fetch has dispatched all 3 instructions; "
        "tokens: load->compute=0 compute->load=0 compute->store=0 store->compute=0"
    )
    with pytest.raises(SimulationDeadlock, match="^" + re.escape(message) + "$"):
        run_program(program, dram, backend="sim")


def test_tokens_left_at_finish_are_reported() -> None:
    cfg = load_config()
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.zeros((4, 1, 8), dtype=np.int8))
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=4, x_stride=4, push_next=True)
    b.finish()
    with pytest.raises(ProgramError, match=re.escape(
            "FINISH at instruction 1 left tokens in load->compute=1 "
            "(last pushed by instruction 0)")):
        run_program(*b.build(), backend="sim")


def test_token_queue_back_pressure_stalls_the_pusher() -> None:
    cfg = load_config().replace(**{"queues.token_depth": 1})
    b = ProgramBuilder(cfg)
    addr = b.tensor("inp", np.zeros((4, 1, 8), dtype=np.int8))
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=1, x_stride=1, push_next=True)
    b.load(MemType.INP, sram_base=1, dram_base=addr + 1, x_size=1, x_stride=1, push_next=True)
    b.uops([(0, 0, 0)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=1, x_stride=1)
    b.alu(AluOp.ADD, uop_bgn=0, uop_end=1, iter_out=200, use_imm=True, imm=0)
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    b.finish()
    stats = run_sim(*b.build())
    alu = next(s for s in stats.timeline if s.name.startswith("ALU"))
    first_pop = next(s for s in stats.timeline if s.name.startswith("GEMM")).start
    second_load = [s for s in stats.timeline if s.module == "load"][1]
    # The second load finished long before compute popped the first token: it waited to push,
    # and goes on one cycle after that pop (costs.QUEUE_FULL_RESUME_CYCLES).
    assert first_pop == alu.end
    assert stats.modules["load"].stalls["full load->compute"] == \
        first_pop + costs.QUEUE_FULL_RESUME_CYCLES - second_load.end


@pytest.mark.parametrize("take_first", [True, False])
def test_put_into_a_full_queue_resumes_after_the_take(take_first: bool) -> None:
    """A put into a queue that was full at the start of the cycle resumes one cycle after the
    take that makes room, also when that take is in the put's own cycle, whichever of the two
    SimPy processes first."""
    import simpy

    sim = TimingSimulator(load_config())
    sim.env = env = simpy.Environment()
    store = Queue(env, capacity=1)
    store.items.append("old")
    log: list[tuple[str, int]] = []

    def producer() -> object:
        if take_first:
            yield env.timeout(0)                   # the consumer's get comes first
        yield env.timeout(5)
        yield from sim.put(store, "new")
        log.append(("put done", int(env.now)))

    def consumer() -> object:
        yield env.timeout(5)
        yield store.get()
        log.append(("took", int(env.now)))

    env.process(producer())
    env.process(consumer())
    env.run()
    assert sorted(log) == [("put done", 6), ("took", 5)]
    assert store.items == ["new"]


def test_stats_to_dict_and_trace(tmp_path: Path) -> None:
    cfg = load_config()
    program, dram = chain_program(cfg)
    result = run_program(program, dram, backend="sim", trace=True)
    summary = json.loads(json.dumps(result.stats.to_dict()))
    assert summary["cycles"] == 204
    assert set(summary["modules"]) == {"fetch", "load", "compute", "store"}
    path = tmp_path / "trace.json"
    result.stats.write_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"fetch", "load", "compute", "store"}
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(program.insns)
    assert {e["name"] for e in slices} >= {"GEMM 1x1x4", "STORE OUT 1x4", "FINISH"}
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert "dram bytes/cycle" in counters and "tokens load->compute" in counters
    gemm = next(e for e in slices if e["name"].startswith("GEMM"))
    assert gemm["ts"] == pytest.approx(156 / cfg.clock_mhz) and gemm["args"]["cycles"] == 10


def test_pickled_stats_keep_their_trace(tmp_path: Path) -> None:
    """A run's stats pickled (as the timing worker sends them) come back equal, timeline and
    counters included, and write the same trace bytes whether read packed or as lists; a
    counter of other types (an int value) is pickled as it is and written the same."""
    import pickle

    from sim.stats import TraceWriter

    program, dram = chain_program(load_config())
    stats = run_program(program, dram, backend="sim", trace=True).stats
    back = pickle.loads(pickle.dumps(stats))
    assert "_packed" in vars(back) and "timeline" not in vars(back)

    def written(*blocks: SimStats) -> bytes:
        path = tmp_path / "t.json"
        with TraceWriter(path, {}) as out:
            for k, block in enumerate(blocks):
                out.stats(block, 10.0 * k)
        return path.read_bytes()

    both = written(back, pickle.loads(pickle.dumps(stats)))
    assert both == written(stats, stats)
    assert written(back) == written(stats)
    assert "_packed" in vars(back)  # the writer read the arrays
    assert back.timeline == stats.timeline and back.counters == stats.counters
    assert back == stats and "_packed" not in vars(back)
    odd = pickle.loads(pickle.dumps(stats))
    odd.counters = [*odd.counters, ("odd", 3, 7)]
    again = pickle.loads(pickle.dumps(odd))
    assert "_packed" not in vars(again) and again.counters[-1] == ("odd", 3, 7)
    assert written(again, stats) == written(odd, stats)
    events = json.loads(written(again, stats))["traceEvents"]
    assert {"ph": "C", "pid": 1, "name": "odd", "ts": 3 / stats.clock_mhz,
            "args": {"value": 7}} in events
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        back.nothing  # noqa: B018


def test_timing_simulator_rejects_foreign_program() -> None:
    program, dram = chain_program(load_config())
    with pytest.raises(ProgramError, match=r"^program was built for config 1x8x8"):
        TimingSimulator(load_config("vta_1x16x16")).run(program, dram)


def _bandwidth_track_by_loop(txns: list[tuple[int, int, int]]) -> list[tuple[str, int, float]]:
    """The bus's rate track as first written, one transaction at a time: each one's rate
    from its first beat, 0 after its last unless the next one's beats follow at once."""
    out: list[tuple[str, int, float]] = []
    ordered = sorted(txns, key=lambda t: t[0])
    for i, (first, end, nbytes) in enumerate(ordered):
        out.append((BANDWIDTH_TRACK, first, nbytes / (end - first)))
        if i + 1 == len(ordered) or ordered[i + 1][0] > end:
            out.append((BANDWIDTH_TRACK, end, 0.0))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 40), st.integers(1, 512)),
                max_size=30))
def test_bandwidth_track_equals_its_loop_definition(spans: list[tuple[int, int, int]]) -> None:
    txns = [(first, first + beats, nbytes) for first, beats, nbytes in spans]
    got = bandwidth_track(txns)
    assert got == _bandwidth_track_by_loop(txns)
    assert all(type(c) is int and type(v) is float for _, c, v in got)
