"""The fast timing engine (``sim.fast_timing``) against the SimPy reference (``sim.timing``).

Every check runs a program on the reference (with ``trace``) and on the fast engine, with and
without functional effects, and asserts identical results: the whole ``SimStats.to_dict()`` (as
JSON text, so the order of every dict's keys too), the timeline's slices and the trace's
counters in the same order, the DRAM image (with functional effects), or the same exception
type and message. Programs: the random generator's (``accel.testing.randprog``) on the shipped
configs and on queue, DRAM-channel and pipeline variants; the synthetic ones; every program the
timing tests (``tests/test_timing.py``, ``tests/test_memory.py``) simulate, by running those
tests with the reference cross-checked; error cases; compiled layers.
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import test_memory
import test_timing
from conftest import original

from accel import load_config
from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.isa import AluOp, MemType
from accel.machine.program import Program, ProgramError, SimulationDeadlock, SimulationError
from accel.testing.randprog import numpy_pick, random_program
from accel.testing.synthetic import contiguous_load, gemm_tile, pipelined_gemm
from sim.fast_timing import FastTimingSimulator, RetireCounter, run_fast_timing
from sim.functional import FunctionalSimulator
from sim.stats import SimStats
from sim.timing import TimingSimulator

SHIPPED = ("default", "tiny", "vta_1x16x16", "default_alu", "vta_1x16x16_alu")


# ---------------------------------------------------------------------- the comparison
def _result(stats: SimStats) -> tuple[str, list[Any], list[Any]]:
    return json.dumps(stats.to_dict()), list(stats.timeline), list(stats.counters)


def _run(sim: Any, program: Program, dram: Dram) -> tuple[Any, ...]:
    """What a simulator gives: (stats as JSON, timeline, counters, DRAM) or the error."""
    image = dram.copy()
    try:
        stats = sim.run(program, image)
    except Exception as exc:      # compared: type and message
        return ("error", type(exc), str(exc))
    return (*_result(stats), image.data.tobytes(), dict(image.regions))


def _fsim_error(error: tuple[Any, ...]) -> bool:
    """An error of the functional simulator at run time, which timing alone does not make."""
    return (error[0] == "error" and issubclass(error[1], SimulationError)
            and not issubclass(error[1], SimulationDeadlock))


def assert_same(program: Program, dram: Dram, label: object = "") -> tuple[Any, ...]:
    """Run ``program`` on the reference (traced) and on the fast engine four ways (traced or
    not, functional or not); assert they agree. Returns the reference's result."""
    cfg = program.config
    ref = _run(TimingSimulator(cfg, trace=True), program, dram)
    for trace, functional in itertools.product((True, False), (True, False)):
        got = _run(FastTimingSimulator(cfg, trace=trace, functional=functional), program, dram)
        where = (label, f"trace={trace}", f"functional={functional}")
        if ref[0] == "error":
            if functional or not _fsim_error(ref):
                assert got == ref, where
            continue
        assert got[0] == ref[0], (where, "stats", _diff(ref[0], got[0]))
        assert got[1] == ref[1], (where, "timeline", _first_difference(ref[1], got[1]))
        if trace:
            assert got[2] == ref[2], (where, "counters", _first_difference(ref[2], got[2]))
        else:
            assert got[2] == [], where
        if functional:
            assert got[3] == ref[3], (where, "DRAM image")
        assert got[4] == ref[4], (where, "DRAM regions")
    return ref


def _diff(a: str, b: str) -> list[tuple[str, Any, Any]]:
    da, db = json.loads(a), json.loads(b)
    return [(k, da.get(k), db.get(k)) for k in {*da, *db} if da.get(k) != db.get(k)] or \
        ["same content, another key order"]


def _first_difference(a: list[Any], b: list[Any]) -> Any:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i, x, y
    return f"lengths {len(a)} and {len(b)}"


# ---------------------------------------------------------------------- random programs
def _tiny(**changes: Any) -> HwConfig:
    return load_config("tiny").replace(**changes)


VARIANTS: dict[str, Callable[[], HwConfig]] = {
    "shallow-queues": lambda: _tiny(**{"queues.token_depth": 1, "queues.cmd_depth": 2}),
    "token-depth-2": lambda: _tiny(**{"queues.token_depth": 2, "queues.cmd_depth": 3}),
    "original-channel": lambda: original(load_config("tiny")),
    "default-original-channel": lambda: original(load_config("default")),
    "default-shallow": lambda: load_config("default").replace(
        **{"queues.token_depth": 1, "queues.cmd_depth": 2}),
    "bus-4": lambda: _tiny(**{"dram.bytes_per_cycle": 4}),
    "bus-16": lambda: _tiny(**{"dram.bytes_per_cycle": 16}),
    "bus-32": lambda: _tiny(**{"dram.bytes_per_cycle": 32, "dram.max_burst": 128,
                               "queues.token_depth": 2}),
    "latency-1": lambda: _tiny(**{"dram.latency": 1, "dram.max_burst": 16}),
    "pipelines": lambda: _tiny(**{"gemm.ii": 2, "gemm.depth": 3, "alu.ii": 3, "alu.depth": 5}),
    "alu-ii-1": lambda: _tiny(**{"alu.ii": 1, "alu.depth": 3, "gemm.depth": 4}),
    "postproc": lambda: _tiny(**{"store.postproc": True}),
}
MEMORY = [(n, latency, arbiter, merge) for n in (1, 2, 8) for latency in (1, 7, 32)
          for arbiter in ("priority", "round_robin") for merge in (False, True)]
MEMORY_FEW = [(2, 1, "round_robin", True), (8, 7, "priority", True),
              (8, 32, "round_robin", False), (1, 7, "round_robin", True),
              (2, 32, "priority", False), (1, 1, "priority", False)]


def _memory(n: int, latency: int, arbiter: str, merge: bool) -> HwConfig:
    return _tiny(**{"dram.max_outstanding": n, "dram.latency": latency, "dram.arbiter": arbiter,
                    "dram.merge_rows": merge})


def _random(cfg: HwConfig, seeds: range, max_insns: int = 3) -> None:
    for seed in seeds:
        rng = np.random.default_rng(seed)
        program, dram = random_program(cfg, numpy_pick(rng), iterations=1 + seed % 4,
                                       max_insns_per_step=max_insns)
        assert_same(program, dram, (cfg.name, seed))


@pytest.mark.parametrize("name", SHIPPED)
def test_random_programs_shipped_configs(name: str) -> None:
    _random(load_config(name), range(12))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_random_programs_variants(variant: str) -> None:
    _random(VARIANTS[variant](), range(8))


@pytest.mark.parametrize("memory", MEMORY_FEW, ids=lambda m: "n{}-l{}-{}-{}".format(*m))
def test_random_programs_memory_system(memory: tuple[int, int, str, bool]) -> None:
    _random(_memory(*memory), range(6))


def test_longer_random_programs() -> None:
    """More iterations and more instructions a step: longer queues of work, more contention."""
    cfg = load_config("tiny")
    for seed in range(3):
        program, dram = random_program(cfg, numpy_pick(np.random.default_rng(100 + seed)),
                                       iterations=8, max_insns_per_step=6)
        assert_same(program, dram, seed)


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_random_programs_shipped_configs_many(name: str) -> None:
    _random(load_config(name), range(12, 112))


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_random_programs_variants_many(variant: str) -> None:
    _random(VARIANTS[variant](), range(8, 68))


@pytest.mark.slow
@pytest.mark.parametrize("memory", MEMORY, ids=lambda m: "n{}-l{}-{}-{}".format(*m))
def test_random_programs_memory_grid(memory: tuple[int, int, str, bool]) -> None:
    _random(_memory(*memory), range(30))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny", "default"])
def test_long_random_programs_many(name: str) -> None:
    cfg = load_config(name)
    for seed in range(20):
        program, dram = random_program(cfg, numpy_pick(np.random.default_rng(1000 + seed)),
                                       iterations=4 + seed % 12, max_insns_per_step=8)
        assert_same(program, dram, seed)


# ---------------------------------------------------------------------- synthetic programs
@pytest.mark.parametrize("name", ["default", "tiny", "vta_1x16x16"])
def test_synthetic_programs(name: str) -> None:
    cfg = load_config(name)
    pixels, blocks = (4, 2) if name == "tiny" else (16, 4)
    for threads in (1, 2):
        assert_same(*pipelined_gemm(cfg, 12, threads=threads, pixels=pixels, in_blocks=blocks),
                    threads)
    assert_same(*gemm_tile(cfg, 2, inner=3, pixels=pixels, in_blocks=blocks))
    for changes in ({}, {"dram.merge_rows": True}, {"dram.max_outstanding": 1},
                    {"dram.max_outstanding": 2, "dram.merge_rows": True}):
        assert_same(*contiguous_load(cfg.replace(**changes), 8 * cfg.inp_tile_bytes * 16,
                                     row_bytes=16 * cfg.inp_tile_bytes), changes)


def test_synthetic_programs_shallow_queues() -> None:
    """Command and token queues shallower than the pipeline: back-pressure everywhere."""
    for depths in ((2, 1), (3, 2), (1, 1)):
        cfg = load_config("default").replace(**{"queues.cmd_depth": depths[0],
                                               "queues.token_depth": depths[1]})
        for threads in (1, 2):
            assert_same(*pipelined_gemm(cfg, 10, threads=threads), (depths, threads))


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_synthetic_programs_long(name: str) -> None:
    cfg = load_config(name)
    pixels, blocks = (4, 2) if name == "tiny" else (16, 4)
    for threads in (1, 2):
        assert_same(*pipelined_gemm(cfg, 300, threads=threads, pixels=pixels,
                                    in_blocks=blocks), threads)
    assert_same(*gemm_tile(cfg, 3, inner=20, pixels=pixels, in_blocks=blocks))
    assert_same(*contiguous_load(cfg.replace(**{"dram.merge_rows": True}), 64 * 1024))


# ---------------------------------------------------------------------- the timing tests' programs
_REFERENCE_RUN = TimingSimulator.run
_FAST_RUN = FastTimingSimulator.run


def _outcome(run: Callable[..., SimStats], sim: Any, program: Program,
             dram: Dram) -> tuple[bool, Any]:
    """(True, stats) or (False, the exception) of ``run(sim, program, dram)``."""
    try:
        return True, run(sim, program, dram)
    except Exception as exc:
        return False, exc


def _assert_same(ref: tuple[bool, Any], ref_image: Dram, fast: tuple[bool, Any],
                 fast_image: Dram, functional: bool) -> None:
    """The fast engine's outcome equals the reference's: stats, timeline, counters and (with
    functional effects) the DRAM image, or the same exception type and message. Without
    functional effects, an error of the program's execution is not the fast engine's to make."""
    if not ref[0]:
        exc = ref[1]
        if not functional and isinstance(exc, SimulationError) \
                and not isinstance(exc, SimulationDeadlock):
            return
        assert not fast[0], f"the reference raised {exc!r}, the fast engine did not"
        assert type(fast[1]) is type(exc) and str(fast[1]) == str(exc)
        return
    assert fast[0], f"the fast engine raised {fast[1]!r}, the reference did not"
    assert _result(fast[1]) == _result(ref[1]), functional
    if functional:
        assert fast_image.data.tobytes() == ref_image.data.tobytes()


class _CrossCheck:
    """``TimingSimulator.run`` and ``FastTimingSimulator.run`` (which the runtime's ``sim``
    backend, its timing prefetch and the tuner's measurements call) that also run each program
    on the other engine and assert the same outcome (results or error)."""

    def __init__(self) -> None:
        self.runs = 0

    def reference(self, sim: TimingSimulator, program: Program, dram: Dram) -> SimStats:
        self.runs += 1
        before = dram.copy()
        ref = _outcome(_REFERENCE_RUN, sim, program, dram)
        for functional in (True, False):
            image = before.copy()
            fast = FastTimingSimulator(sim.cfg, trace=sim.trace, functional=functional)
            _assert_same(ref, dram, _outcome(_FAST_RUN, fast, program, image), image,
                         functional)
        if not ref[0]:
            raise ref[1]
        return ref[1]

    def fast(self, sim: FastTimingSimulator, program: Program,
             dram: Dram | None = None) -> SimStats:
        self.runs += 1
        dram = Dram() if dram is None else dram
        image = dram.copy()
        got = _outcome(_FAST_RUN, sim, program, dram)
        ref = _outcome(_REFERENCE_RUN, TimingSimulator(sim.cfg, trace=sim.trace), program,
                       image)
        _assert_same(ref, image, got, dram, sim.functional)
        if not got[0]:
            raise got[1]
        return got[1]


def _test_cases(*modules: Any) -> Iterator[Any]:
    """Every test function of ``modules`` with each of its parametrisations."""
    for module in modules:
        for name, fn in vars(module).items():
            if not (name.startswith("test_") and inspect.isfunction(fn)):
                continue
            source = inspect.getsource(fn)
            if not any(call in source for call in ('backend="sim"', "run_sim(", ".run(")):
                continue        # simulates nothing
            combos: list[dict[str, Any]] = [{}]
            for mark in getattr(fn, "pytestmark", []):
                if mark.name != "parametrize":
                    continue
                names = mark.args[0]
                names = [n.strip() for n in names.split(",")] if isinstance(names, str) \
                    else list(names)
                values = [v.values if type(v).__name__ == "ParameterSet" else v
                          for v in mark.args[1]]
                combos = [{**c, **dict(zip(names, v if len(names) > 1 else (v,), strict=True))}
                          for c in combos for v in values]
            for i, combo in enumerate(combos):
                label = f"{module.__name__}.{name}" + (f"[{i}]" if len(combos) > 1 else "")
                yield pytest.param(fn, combo, id=label)


@pytest.mark.parametrize(("fn", "args"), list(_test_cases(test_timing, test_memory)))
def test_programs_of_the_timing_tests(fn: Callable[..., None], args: dict[str, Any],
                                      request: pytest.FixtureRequest,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The test, with every timing simulation it makes checked against the fast engine."""
    import runtime.backends

    check = _CrossCheck()
    monkeypatch.setattr(TimingSimulator, "run",
                        lambda sim, program, dram: check.reference(sim, program, dram))
    monkeypatch.setattr(FastTimingSimulator, "run",
                        lambda sim, program, dram=None: check.fast(sim, program, dram))
    monkeypatch.setattr(runtime.backends, "_TIMING_CACHE", {})   # simulate every time
    for name in inspect.signature(fn).parameters:
        if name not in args:
            args = {**args, name: request.getfixturevalue(name)}
    fn(**args)
    if not check.runs:
        pytest.skip("simulates no program")


# ---------------------------------------------------------------------- errors and corner cases
def _inp_program(cfg: HwConfig, n: int = 4) -> tuple[ProgramBuilder, int]:
    b = ProgramBuilder(cfg)
    return b, b.tensor("inp", np.arange(n * cfg.inp_tile_bytes, dtype=np.int64).astype(
        np.int8).reshape(n, cfg.batch, cfg.block_in))


def _deadlock_fetch_blocked() -> tuple[Program, Dram]:
    """Compute waits for a token that a load behind a full command queue would push."""
    cfg = original(load_config("default")).replace(**{"queues.cmd_depth": 2})
    b, addr = _inp_program(cfg)
    b.gemm(uop_bgn=0, uop_end=0, pop_prev=True)
    for _ in range(3):
        b.gemm(uop_bgn=0, uop_end=0)
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=1, x_stride=1, push_next=True)
    b.finish()
    return b.build()


def _deadlock_push_full() -> tuple[Program, Dram]:
    """Load pushes more tokens than the queue holds; compute waits on store, which waits on
    nothing it will get."""
    cfg = load_config("tiny").replace(**{"queues.token_depth": 1})
    b, addr = _inp_program(cfg)
    for i in range(3):
        b.load(MemType.INP, sram_base=i, dram_base=addr + i, x_size=1, x_stride=1,
               push_next=True)
    b.gemm(uop_bgn=0, uop_end=0, pop_next=True)
    b.store(x_size=0, y_size=0, x_stride=0, pop_prev=True)
    b.finish(pop_prev=True)
    return b.build()


def _never_run() -> tuple[Program, Dram]:
    """FINISH retires while a load waits for a token nobody pushes, another behind it."""
    cfg = original(load_config("default"))
    b, addr = _inp_program(cfg)
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=4, x_stride=4)
    b.load(MemType.INP, sram_base=0, dram_base=addr, x_size=4, x_stride=4, pop_next=True)
    b.load(MemType.INP, sram_base=4, dram_base=addr, x_size=4, x_stride=4)
    b.finish()
    return b.build()


def _finish_early() -> tuple[Program, Dram]:
    """FINISH early in a long program: fetch fills compute's queue behind it and stops."""
    cfg = load_config("tiny")
    b, _ = _inp_program(cfg)
    b.finish()
    for _ in range(40):
        b.gemm(uop_bgn=0, uop_end=0)
    b.finish()
    return b.build()


def _after_finish() -> tuple[Program, Dram]:
    """A store and a load still running when FINISH retires, and retiring after it."""
    cfg = load_config("tiny")
    b, addr = _inp_program(cfg, 8)
    out = b.buffer("out", 8 * cfg.out_tile_bytes, cfg.out_tile_bytes)
    b.store(sram_base=0, dram_base=out, x_size=8, x_stride=8)
    b.load(MemType.INP, sram_base=0, dram_base=addr, y_size=2, x_size=4, x_stride=4)
    b.finish()
    return b.build()


def _dram_overrun() -> tuple[Program, Dram]:
    """A load past the end of DRAM: the functional simulator's error at the load's retire."""
    cfg = load_config("tiny")
    b, addr = _inp_program(cfg)
    b.load(MemType.INP, sram_base=0, dram_base=addr + 2, x_size=4, x_stride=4,
           push_next=True)
    b.finish(pop_prev=True)
    return b.build()


def _tokens_left() -> tuple[Program, Dram]:
    cfg = load_config("tiny")
    b, _ = _inp_program(cfg)
    b.uops([(0, 0, 0)])
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base, x_size=1, x_stride=1,
           push_next=True)
    b.alu(AluOp.ADD, uop_bgn=0, uop_end=1, iter_out=3, use_imm=True, imm=1, push_next=True)
    b.store(sram_base=0, dram_base=0, x_size=0, y_size=0, x_stride=0, pop_prev=True)
    b.finish()
    return b.build()


CORNER_CASES = {
    "deadlock-fetch-blocked": (_deadlock_fetch_blocked, SimulationDeadlock),
    "deadlock-push-full": (_deadlock_push_full, SimulationDeadlock),
    "never-run": (_never_run, ProgramError),
    "finish-early": (_finish_early, ProgramError),
    "after-finish": (_after_finish, None),
    "dram-overrun": (_dram_overrun, SimulationError),
    "tokens-left": (_tokens_left, ProgramError),
}


@pytest.mark.parametrize("case", sorted(CORNER_CASES))
def test_errors_and_corner_cases(case: str) -> None:
    build, error = CORNER_CASES[case]
    ref = assert_same(*build(), case)
    if error is None:
        assert ref[0] != "error", ref
    else:
        assert ref[0] == "error" and ref[1] is error, ref


def test_timing_only_skips_the_functional_checks() -> None:
    """Without functional effects a DRAM overrun goes unnoticed; the timing is the same as a
    program reading DRAM that is there."""
    program, dram = _dram_overrun()
    stats = FastTimingSimulator(program.config, functional=False).run(program, dram)
    assert stats.cycles > 0 and stats.insn_counts == {"LOAD_INP": 1, "FINISH": 1}


def test_foreign_program_is_rejected() -> None:
    program, dram = test_timing.chain_program(test_timing.load_config())
    ref = _run(TimingSimulator(load_config("vta_1x16x16")), program, dram)
    for functional in (True, False):
        got = _run(FastTimingSimulator(load_config("vta_1x16x16"), functional=functional),
                   program, dram)
        assert got == ref and ref[0] == "error"


# ---------------------------------------------------------------------- compiled layers
def _conv_case(cfg: HwConfig, wl: Any, seed: int = 0) -> tuple[Program, Dram]:
    from compiler.ops.compiled import compile_conv2d, pack_conv2d_args

    rng = np.random.default_rng(seed)
    op = compile_conv2d(wl, cfg)
    x = rng.integers(-128, 128, (wl.batch, wl.in_channels, wl.height, wl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.out_channels, wl.in_channels, wl.kernel_h, wl.kernel_w),
                     dtype=np.int8)
    bias = rng.integers(-2**12, 2**12, wl.out_channels, dtype=np.int32) if wl.bias else None
    return op.program, op.dram(**pack_conv2d_args(op, x, w, bias))


def _matmul_case(cfg: HwConfig, wl: Any, seed: int = 0) -> tuple[Program, Dram]:
    from compiler.ops.compiled import compile_matmul, pack_matmul_args

    rng = np.random.default_rng(seed)
    op = compile_matmul(wl, cfg)
    a = rng.integers(-128, 128, (wl.m, wl.k), dtype=np.int8)
    b = rng.integers(-128, 128, (wl.k, wl.n), dtype=np.int8)
    bias = rng.integers(-2**12, 2**12, wl.n, dtype=np.int32) if wl.bias else None
    return op.program, op.dram(**pack_matmul_args(op, a, b, bias))


def _small_convs() -> list[Any]:
    from compiler.ops.conv2d import Conv2dWorkload

    return [Conv2dWorkload(1, 16, 6, 6, 16, 3, 3, 1, 1, 1, 1, True, 6, True),
            Conv2dWorkload(1, 8, 9, 7, 24, 3, 3, 2, 2, 1, 1, False, 4, False),
            Conv2dWorkload(2, 19, 5, 5, 11, 1, 1, 1, 1, 0, 0, True, 5, True)]


def _matmuls() -> list[Any]:
    from compiler.ops.matmul import MatmulWorkload

    return [MatmulWorkload(16, 100, 33, True, 6, True), MatmulWorkload(3, 17, 5),
            MatmulWorkload(7, 512, 70, True, 3, False)]


@pytest.mark.parametrize("name", ["tiny", "default", "vta_1x16x16", "default_alu"])
def test_compiled_layers(name: str) -> None:
    cfg = load_config(name)
    for i, wl in enumerate(_small_convs()):
        assert_same(*_conv_case(cfg, wl, i), wl)
    for i, wl in enumerate(_matmuls()):
        assert_same(*_matmul_case(cfg, wl, i), wl)


@pytest.mark.parametrize(("name", "layer"), [("default", "C11"), ("vta_1x16x16", "C12")])
def test_resnet_layers(name: str, layer: str) -> None:
    from compiler.ops.workloads import resnet18_layer

    assert_same(*_conv_case(load_config(name), resnet18_layer(layer)), layer)


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["C1", "C2", "C3", "C5", "C6", "C8", "C9", "C12"])
@pytest.mark.parametrize("name", ["default", "vta_1x16x16", "default_alu"])
def test_resnet_layers_many(name: str, layer: str) -> None:
    from compiler.ops.workloads import resnet18_layer

    assert_same(*_conv_case(load_config(name), resnet18_layer(layer)), layer)


# ---------------------------------------------------------------------- the API
def test_retire_counter_counts_what_fsim_counts() -> None:
    for name in ("tiny", "default"):
        cfg = load_config(name)
        for seed in range(4):
            program, dram = random_program(cfg, numpy_pick(np.random.default_rng(seed)))
            fsim = FunctionalSimulator(cfg).run(program, dram.copy())
            counter = RetireCounter(cfg)
            for insn in program.insns:      # the counts do not depend on the order
                counter.add(insn)
            counted = counter.stats(len(program.insns))
            assert counted.insn_counts == fsim.insn_counts
            assert counted.actions.to_dict() == fsim.actions.to_dict()
            assert counted.bytes_loaded == fsim.bytes_loaded
            assert counted.bytes_stored == fsim.bytes_stored


def test_run_fast_timing_and_an_empty_image() -> None:
    program, dram = pipelined_gemm(load_config("tiny"), 5, pixels=4, in_blocks=2)
    reference = TimingSimulator(program.config).run(program, dram.copy())
    for stats in (run_fast_timing(program, dram.copy()),
                  run_fast_timing(program, functional=False),
                  FastTimingSimulator(program.config, functional=False).run(program, Dram())):
        assert _result(stats) == _result(reference)


def test_the_sim_backend_takes_either_engine() -> None:
    """``run_program(..., backend="sim")`` times with the fast engine unless ``engine="simpy"``
    asks for the reference: the same cycles, stats and DRAM; an unknown engine is one error."""
    import runtime.backends
    from accel import run_program

    cfg = load_config("default")
    program, dram = gemm_tile(cfg, 2, inner=8, pixels=4)
    results = {}
    for engine in ("fast", "simpy"):
        runtime.backends._TIMING_CACHE.clear()
        image = dram.copy()
        got = run_program(program, image, backend="sim", trace=True, engine=engine)
        results[engine] = (*_result(got.stats), got.cycles, image.data.tobytes())
    assert results["fast"] == results["simpy"]
    with pytest.raises(ValueError, match=r"^backend 'sim': unknown engine 'verilator'; "
                                         r"expected one of fast, simpy$"):
        run_program(program, dram.copy(), backend="sim", engine="verilator")
