"""Auto-tuning: knob spaces, loop orders, features, the rank model, tuners, the log, the CLI."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accel
from accel.cli import main
from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.ops.compiled import compile_conv2d, conv2d_program
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload, conv2d_schedule
from compiler.ops.heuristic import default_conv2d_knobs, fits, knob_candidates
from compiler.ops.space import THREAD_PAIRS
from compiler.ops.tuning_log import TuningLog, TuningLogError, TuningRecord
from compiler.ops.workloads import resnet18_layer
from compiler.tune import (
    GATuner,
    MeasureResult,
    RandomTuner,
    Task,
    XGBTuner,
    make_task,
    make_tuner,
)
from compiler.tune.features import FEATURE_NAMES, N_FEATURES
from compiler.tune.model import RankModel, kendall_tau, pairwise_accuracy
from runtime import kernels
from runtime.tuning import SimMeasure

#: Small layers on the tiny config (1x4x4 core): spaces of 100-200 settings that build and
#: simulate in about 0.1 s each.
LAYER_A = Conv2dWorkload(1, 8, 4, 4, 8, 3, 3, 1, 1, 1, 1, bias=True, shift=6, relu=True)
LAYER_B = Conv2dWorkload(1, 16, 8, 8, 8, 1, 1, 2, 2, 0, 0, bias=True, shift=6, relu=False)
LAYER_C = Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, bias=False, shift=4, relu=True)


@pytest.fixture(scope="module")
def measure() -> Iterator[SimMeasure]:
    """One measurement pool (and cache) for the module's tuning tests."""
    with SimMeasure(workers=2) as m:
        yield m


def _task(wl: Conv2dWorkload, cfg: HwConfig) -> Task:
    return make_task(wl, cfg)


# --------------------------------------------------------------------------- knob space
def test_space_holds_exactly_the_valid_settings(tiny: HwConfig) -> None:
    task = _task(LAYER_A, tiny)
    space = task.space
    nb, cib, cob = LAYER_A.blocks(tiny)
    expected = set()
    for values in itertools.product(*space.values):
        k = Conv2dKnobs(**dict(zip(space.names, values, strict=True)))
        rows = LAYER_A.out_height // (k.tile_h * k.h_nthread) if \
            LAYER_A.out_height % (k.tile_h * k.h_nthread) == 0 else 0
        ok = (nb % k.tile_b == 0 and cib % k.tile_ci == 0 and LAYER_A.out_width % k.tile_w == 0
              and cob % (k.tile_co * k.oc_nthread) == 0 and rows > 0
              and (k.oc_nthread, k.h_nthread) in THREAD_PAIRS and fits(LAYER_A, k, tiny)
              and (k.tile_order == 0 or (rows > 1 and LAYER_A.out_width // k.tile_w > 1)))
        if ok:
            expected.add(k)
    got = {space.knobs(p) for p in space}
    assert got == expected and len(got) == len(space) > 50
    # The row-order half is exactly the heuristic's candidate list; the heuristic's pick is in.
    assert {k for k in got if k.tile_order == 0} == set(knob_candidates(LAYER_A, tiny))
    assert space.point(default_conv2d_knobs(LAYER_A, tiny)) in space
    # Neighbours move one knob to the next valid value; a valid point is its own nearest.
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = space.random_point(rng)
        assert space.nearest(p) == p
        near = space.neighbours(p)
        assert near and all(q in space for q in near)
        assert all(sum(a != b for a, b in zip(p, q, strict=True)) == 1 for q in near)


def test_space_errors_name_the_problem(tiny: HwConfig) -> None:
    task = _task(LAYER_A, tiny)
    with pytest.raises(LoweringError, match=r"knob tile_h = 3 is not one of \[1, 2, 4\]"):
        task.space.point(Conv2dKnobs(tile_h=3))
    with pytest.raises(LoweringError, match="are not valid for this layer and config"):
        task.space.point(Conv2dKnobs(tile_h=4, h_nthread=2))
    wide_pad = Conv2dWorkload(1, 4, 8, 8, 4, 3, 3, pad_h=40, pad_w=40)
    with pytest.raises(LoweringError, match="no knob setting is valid on 1x4x4"):
        make_task(wide_pad, tiny)
    with pytest.raises(TypeError, match="cannot tune a str"):
        make_task("conv", tiny)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- loop order
def test_tile_order_moves_the_column_loop_outward(tiny: HwConfig) -> None:
    rows = conv2d_schedule(LAYER_C, Conv2dKnobs(tile_h=2, tile_w=2), tiny).loop_nest()
    cols = conv2d_schedule(LAYER_C, Conv2dKnobs(tile_h=2, tile_w=2, tile_order=1),
                           tiny).loop_nest()
    def order(text: str) -> list[str]:
        return [line.split()[1] for line in text.splitlines()
                if line.strip().startswith("for out.") and ".outer" in line]
    assert order(rows)[2:4] == ["out.y.outer.outer", "out.x.outer"]
    assert order(cols)[2:4] == ["out.x.outer", "out.y.outer.outer"]
    with pytest.raises(LoweringError,
                       match=r"knob tile_order = 2 is not one of 0 \(rows\), 1 \(columns\)"):
        conv2d_schedule(LAYER_C, Conv2dKnobs(tile_order=2), tiny)


@pytest.mark.parametrize("knobs", [
    Conv2dKnobs(tile_h=2, tile_w=2, tile_ci=1, tile_co=1, tile_order=1),
    Conv2dKnobs(tile_h=1, tile_w=3, tile_ci=2, tile_co=1, oc_nthread=2, tile_order=1),
    Conv2dKnobs(tile_h=1, tile_w=2, tile_co=2, h_nthread=2, tile_order=1),
    Conv2dKnobs(tile_h=3, tile_w=2, tile_ci=2, tile_co=2, tile_order=0),
], ids=["cols", "cols-oc2", "cols-h2", "rows"])
def test_every_tile_order_is_bit_exact(knobs: Conv2dKnobs, tiny: HwConfig,
                                       rng: np.random.Generator) -> None:
    x = rng.integers(-128, 128, (1, 8, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8)
    bias = rng.integers(-3000, 3000, 8, dtype=np.int32)
    expected = kernels.conv2d(x, w, bias, 1, 1, 9, True)
    y, report = accel.conv2d(x, w, bias, 1, 1, 9, True, config=tiny, backend="fsim",
                             knobs=knobs)
    np.testing.assert_array_equal(y, expected)
    assert report.knobs == knobs.to_dict()
    if knobs.tile_order == 1:  # a different instruction order than the row-major walk
        wl = Conv2dWorkload(1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, True, 9, True)
        rows = Conv2dKnobs(**{**knobs.to_dict(), "tile_order": 0})
        assert conv2d_program(wl, tiny, knobs).insns != conv2d_program(wl, tiny, rows).insns


# --------------------------------------------------------------------------- validity
class _CheckingMeasure:
    """Measures like SimMeasure, but first asserts each setting is statically valid and
    records what reached the simulator."""

    def __init__(self, inner: SimMeasure) -> None:
        self.inner = inner
        self.asked: list[Conv2dKnobs] = []

    def __call__(self, task: Task, knobs_list: Sequence[Any]) -> list[MeasureResult]:
        wl, cfg = task.workload, task.config
        for k in knobs_list:
            assert isinstance(wl, Conv2dWorkload)
            assert fits(wl, k, cfg)
            conv2d_schedule(wl, k, cfg)  # divides the layer: raises otherwise
            self.asked.append(k)
        return self.inner(task, knobs_list)


@pytest.mark.parametrize("name", ["xgb", "random", "ga"])
def test_no_invalid_setting_is_measured(name: str, tiny: HwConfig, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.tuning
    import sim.fast_timing

    # Settings with one-pixel-wide tiles fail to build here, as a setting the static filter
    # cannot foresee would: they must be reported, never simulated, counted or logged.
    real_build = runtime.tuning.build_program

    def build(wl: Conv2dWorkload, cfg: HwConfig, knobs: Conv2dKnobs) -> Any:
        if knobs.tile_w == 1:
            raise LoweringError("codegen: injected failure")
        return real_build(wl, cfg, knobs)

    simulated: list[int] = []
    real_run = sim.fast_timing.FastTimingSimulator.run

    def run(self: Any, program: Any, dram: Any = None) -> Any:
        assert program.meta["knobs"]["tile_w"] != 1
        simulated.append(program.meta["knobs"]["tile_w"])
        return real_run(self, program, dram)

    monkeypatch.setattr(runtime.tuning, "build_program", build)
    monkeypatch.setattr(sim.fast_timing.FastTimingSimulator, "run", run)
    task = _task(LAYER_A, tiny)
    log = TuningLog(tmp_path / "log.jsonl")
    with SimMeasure(workers=1, cache=False) as inner:  # in-process, so the patches apply
        checking = _CheckingMeasure(inner)
        result = make_tuner(name, task, seed=3, batch_size=6).tune(12, checking, log=log)
    assert len(result.trials) == 12 == len(simulated) == len(log.records())
    assert [t.index for t in result.trials] == list(range(1, 13))
    assert all(t.knobs.tile_w != 1 for t in result.trials)
    assert result.failed and all(k.tile_w == 1 and "injected" in e for k, e in result.failed)
    assert len(checking.asked) == 12 + len(result.failed)
    assert all(r.knobs["tile_w"] != 1 for r in log.records())


# --------------------------------------------------------------------------- features
def test_features_are_deterministic_and_of_fixed_length(tiny: HwConfig, cfg: HwConfig) -> None:
    assert len(FEATURE_NAMES) == N_FEATURES == len(set(FEATURE_NAMES))
    for task in (_task(LAYER_A, tiny), _task(LAYER_C, tiny), _task(resnet18_layer("C12"), cfg)):
        rng = np.random.default_rng(1)
        points = [task.space.random_point(rng) for _ in range(3)]
        first = task.features_of(points)
        again = make_task(task.workload, task.config).features_of(points)  # fresh memo
        assert first.shape == (3, N_FEATURES) and np.all(np.isfinite(first))
        np.testing.assert_array_equal(first, again)
        assert len({row.tobytes() for row in first}) == len(set(points))


def test_features_see_the_work_of_the_program(cfg: HwConfig) -> None:
    task = _task(resnet18_layer("C12"), cfg)
    names = list(FEATURE_NAMES)

    def feature(knobs: Conv2dKnobs, name: str) -> float:
        return float(task.features(task.space.point(knobs))[names.index(name)])

    big = Conv2dKnobs(tile_h=7, tile_w=7, tile_ci=1, tile_co=8, oc_nthread=2)
    small = Conv2dKnobs(tile_h=1, tile_w=7, tile_ci=1, tile_co=8, oc_nthread=2)
    program_big = conv2d_program(task.workload, cfg, big)  # type: ignore[arg-type]
    # The instruction count read off the loop program is the built program's, up to the
    # micro-op loads codegen adds and the final FINISH.
    counts = program_big.counts()
    assert feature(big, "insns_GEMM") == pytest.approx(np.log2(1 + counts["GEMM"]))
    assert feature(big, "insns_LOAD_WGT") == pytest.approx(np.log2(1 + counts["LOAD_WGT"]))
    # One-row tiles reload the same weights for every row: more weight bytes, same MACs.
    assert feature(small, "dma_bytes_wgt") > feature(big, "dma_bytes_wgt")
    assert feature(small, "gemm_uops") == feature(big, "gemm_uops")
    assert feature(big, "vthreads") == 2.0


# --------------------------------------------------------------------------- cost model
def test_rank_model_orders_held_out_settings_better_than_chance(
        tiny: HwConfig, measure: SimMeasure) -> None:
    task = _task(LAYER_B, tiny)
    rng = np.random.default_rng(7)
    picks = rng.choice(len(task.space), 48, replace=False)
    points = [task.space.points[i] for i in picks]
    cycles = np.array([r.cycles for r in measure(task, [task.space.knobs(p)
                                                        for p in points])], dtype=float)
    x = task.features_of(points)
    model = RankModel(seed=0).fit(x[:32], cycles[:32])
    held_out = model.predict(x[32:])
    accuracy = pairwise_accuracy(held_out, cycles[32:])
    assert accuracy > 0.75
    assert kendall_tau(held_out, cycles[32:]) == pytest.approx(2 * accuracy - 1)
    assert pairwise_accuracy(-cycles, cycles) == 1.0 and pairwise_accuracy(cycles, cycles) == 0.0
    # Same data and seed: the same model.
    np.testing.assert_array_equal(RankModel(seed=0).fit(x[:32], cycles[:32]).predict(x[32:]),
                                  held_out)
    with pytest.raises(ValueError, match="at least two measured settings"):
        RankModel().fit(x[:1], cycles[:1])
    with pytest.raises(RuntimeError, match="has not been fitted"):
        RankModel().predict(x)


# --------------------------------------------------------------------------- tuners
@pytest.mark.parametrize("wl", [LAYER_A, LAYER_C], ids=["A", "C"])
def test_tuned_knobs_beat_or_equal_the_heuristic(wl: Conv2dWorkload, tiny: HwConfig,
                                                 measure: SimMeasure) -> None:
    task = _task(wl, tiny)
    (heuristic,) = measure(task, [task.default_knobs()])
    assert heuristic.cycles is not None
    result = XGBTuner(task, seed=0).tune(32, measure)
    assert len(result.trials) == 32
    assert result.best is not None and result.best.cycles <= heuristic.cycles
    curve = result.best_curve()
    assert curve == sorted(curve, reverse=True) and curve[-1] == result.best.cycles


@pytest.mark.parametrize("cls", [XGBTuner, RandomTuner, GATuner], ids=["xgb", "random", "ga"])
def test_tuners_are_deterministic(cls: type, tiny: HwConfig, measure: SimMeasure) -> None:
    task = _task(LAYER_C, tiny)

    def sequence(seed: int) -> list[Conv2dKnobs]:
        return [t.knobs for t in cls(task, seed=seed).tune(20, measure).trials]

    first = sequence(5)
    assert len(first) == len(set(first)) == 20  # never the same setting twice
    assert sequence(5) == first
    assert sequence(6) != first


def test_tuning_stops_when_the_space_is_exhausted(tiny: HwConfig, measure: SimMeasure) -> None:
    wl = Conv2dWorkload(1, 4, 2, 2, 4, 1, 1)
    task = _task(wl, tiny)
    result = RandomTuner(task, seed=0).tune(len(task.space) + 10, measure)
    assert len(result.trials) == len(task.space)
    assert {t.knobs for t in result.trials} == {task.space.knobs(p) for p in task.space}
    with pytest.raises(ValueError, match="the number of trials must be >= 1, got 0"):
        RandomTuner(task).tune(0, measure)
    with pytest.raises(ValueError, match="unknown tuner 'sa'; expected one of xgb, random, ga"):
        make_tuner("sa", task)


# --------------------------------------------------------------------------- tuning log
def _record(cfg: HwConfig, wl: Conv2dWorkload, knobs: Conv2dKnobs, cycles: int,
            tuner: str = "xgb") -> TuningRecord:
    return TuningRecord(cfg.name, wl.signature(), knobs.to_dict(), cycles,
                        "2025-01-01T00:00:00+00:00", tuner)


def test_log_round_trips_and_skips_a_torn_line(tiny: HwConfig, cfg: HwConfig,
                                               tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = TuningLog(path)
    assert log.records() == [] and log.best(tiny.name, LAYER_A.signature()) is None
    records = [_record(tiny, LAYER_A, Conv2dKnobs(tile_h=2), 900),
               _record(tiny, LAYER_A, Conv2dKnobs(tile_h=4), 700),
               _record(tiny, LAYER_A, Conv2dKnobs(tile_w=4), 700, "ga"),
               _record(cfg, LAYER_A, Conv2dKnobs(), 100)]
    for r in records:
        log.append(r)
    assert TuningLog(path).records() == records
    assert json.loads(path.read_text().splitlines()[0]) == {
        "config": tiny.name, "op": LAYER_A.signature(), "knobs": Conv2dKnobs(tile_h=2).to_dict(),
        "cycles": 900, "timestamp": "2025-01-01T00:00:00+00:00", "tuner": "xgb"}
    assert log.best(tiny.name, LAYER_A.signature()) == records[1]  # the first of equals
    assert log.best(cfg.name, LAYER_A.signature()) == records[3]
    assert log.best(cfg.name, LAYER_B.signature()) is None
    # A crash in the middle of a write leaves a torn last line: skipped, no error.
    with open(path, "a") as f:
        f.write(records[0].to_json()[:25])
    assert TuningLog(path).records() == records and TuningLog(path).skipped == 1
    # The next append starts on a fresh line, so the torn part swallows nothing.
    added = log.add(tiny.name, LAYER_A.signature(), Conv2dKnobs(tile_h=1).to_dict(), 650, "xgb")
    assert added.timestamp and TuningLog(path).records() == [*records, added]
    assert TuningLog(path).best(tiny.name, LAYER_A.signature()) == added
    assert TuningLog(path).skipped == 1


def test_compiler_uses_the_best_logged_knobs(tiny: HwConfig, cfg: HwConfig, tmp_path: Path,
                                             rng: np.random.Generator) -> None:
    path = tmp_path / "log.jsonl"
    log = TuningLog(path)
    best = Conv2dKnobs(tile_h=2, tile_w=2, tile_ci=2, oc_nthread=2, tile_order=1)
    log.append(_record(tiny, LAYER_A, Conv2dKnobs(tile_h=4), 2000))
    log.append(_record(tiny, LAYER_A, best, 1500))
    log.append(_record(cfg, LAYER_A, Conv2dKnobs(), 10))  # another config: never used
    heuristic = default_conv2d_knobs(LAYER_A, tiny)
    assert heuristic != best
    assert compile_conv2d(LAYER_A, tiny).knobs == heuristic
    assert compile_conv2d(LAYER_A, tiny, tuning_log=path).knobs == best
    assert compile_conv2d(LAYER_A, tiny, tuning_log=log).knobs == best
    assert compile_conv2d(LAYER_B, tiny, tuning_log=log).knobs == \
        default_conv2d_knobs(LAYER_B, tiny)  # no record: the heuristic
    explicit = Conv2dKnobs(tile_h=4)
    assert compile_conv2d(LAYER_A, tiny, explicit, tuning_log=log).knobs == explicit
    x = rng.integers(-128, 128, (1, 8, 4, 4), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8)
    bias = rng.integers(-3000, 3000, 8, dtype=np.int32)
    y, report = accel.conv2d(x, w, bias, 1, 1, 6, True, config=tiny, backend="fsim",
                             tuning_log=str(path))
    np.testing.assert_array_equal(y, kernels.conv2d(x, w, bias, 1, 1, 6, True))
    assert report.knobs == best.to_dict()
    with pytest.raises(TuningLogError, match=r"nope\.jsonl: no such tuning log"):
        accel.conv2d(x, w, bias, 1, 1, 6, True, config=tiny, tuning_log=tmp_path / "nope.jsonl")
    log.append(TuningRecord(tiny.name, LAYER_C.signature(), {"tile_q": 2}, 5))
    with pytest.raises(LoweringError, match="are not Conv2dKnobs fields"):
        compile_conv2d(LAYER_C, tiny, tuning_log=log)


# --------------------------------------------------------------------------- command line
def test_cli_tune_then_run_with_the_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    pytest.importorskip("onnx")
    import onnx
    from test_graph_frontends import small_cnn

    model = tmp_path / "small.onnx"
    onnx.save(small_cnn(size=8), str(model))
    log = tmp_path / "tune.jsonl"
    assert main(["tune", str(model), "--config", "tiny", "--trials", "4", "--workers", "2",
                 "--log", str(log), "--seed", "1"]) == 0
    captured = capsys.readouterr()
    records = TuningLog(log).records()
    # Every accelerator layer (two conv2d, the second with the residual add in its epilogue,
    # conv2d_add, and the dense classifier): the heuristic's knobs, then four trials each.
    assert [r.tuner for r in records].count("heuristic") == 3
    assert [r.tuner for r in records].count("xgb") == 12
    assert {r.op.split("_")[0] for r in records} == {"conv2d", "matmul"}
    assert sum("_add_sh" in r.op for r in records) == 5  # conv2d_add's signature
    lines = captured.out.splitlines()
    assert lines[0].split()[:4] == ["layer", "workload", "space", "trials"]
    assert len([line for line in lines if line.startswith("conv")]) == 2
    assert f"log: {log} (15 records" in captured.out
    assert "[1/3] conv1" in captured.err and "xgb 4/4 trials" in captured.err
    assert main(["run", str(model), "--config", "tiny", "--tuning-log", str(log),
                 "--backend", "fsim", "--check"]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 accelerator layers use logged knobs" in out
    assert "bit-exact with the numpy reference network" in out


@pytest.mark.parametrize("argv, message", [
    (["tune", "C13"], "unknown layer C13 in 'C13'; expected C1..C12"),
    (["tune", "C2,conv"], "bad layer 'conv' in 'C2,conv'; expected names like C2"),
    (["tune", "C9-C3"], "layer range 'C9-C3' runs backwards"),
    (["tune", "C2", "--trials", "0"], "--trials must be >= 1, got 0"),
    (["tune", "C2", "--workers", "0"], "--workers must be >= 1, got 0"),
    (["tune", "alexnet"], "unknown model 'alexnet'; expected one of"),
    (["run", "resnet18", "--tuning-log", "missing.jsonl"], "missing.jsonl: no such tuning log"),
])
def test_cli_bad_input_gives_one_line(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("accel: error: ") and message in err
    assert err.count("\n") == 1


def test_layers_that_differ_in_shift_or_relu_share_one_timing(tiny: HwConfig) -> None:
    from dataclasses import replace

    from accel.cli_tune import timing_class
    from runtime.backends import timing_signature

    other = replace(LAYER_A, shift=3, relu=False)
    assert timing_class(other) == timing_class(LAYER_A)
    assert timing_class(replace(LAYER_A, shift=0)) != timing_class(LAYER_A)
    assert timing_class(replace(LAYER_A, bias=False)) != timing_class(LAYER_A)
    for knobs in (Conv2dKnobs(tile_h=2, tile_w=4, oc_nthread=2),
                  Conv2dKnobs(tile_h=1, tile_w=2, tile_ci=2, h_nthread=2, tile_order=1)):
        mine = conv2d_program(LAYER_A, tiny, knobs)
        theirs = conv2d_program(other, tiny, knobs)
        assert mine.insns != theirs.insns  # the ALU immediates differ ...
        assert timing_signature(mine) == timing_signature(theirs)  # ... and nothing else


def test_xgb_skips_settings_whose_features_fail(tiny: HwConfig, measure: SimMeasure,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import compiler.tune.features as features

    real = features.lower_for_features

    def lower(task: Task, knobs: Conv2dKnobs) -> Any:
        if knobs.tile_h == 1:
            raise LoweringError("lower: injected failure")
        return real(task, knobs)

    monkeypatch.setattr(features, "lower_for_features", lower)
    task = _task(LAYER_C, tiny)
    tuner = XGBTuner(task, seed=1)
    result = tuner.tune(24, measure)
    assert len(result.trials) == 24 and tuner.model.fitted
    broken = task.space.point(Conv2dKnobs(tile_h=1, tile_w=2))
    fine = task.space.point(Conv2dKnobs(tile_h=2, tile_w=2))
    scores = tuner._score([broken, fine])
    assert scores[0] == -np.inf and np.isfinite(scores[1]) and broken in tuner.visited


def _slow_measure(workload: Any, cfg: HwConfig, knobs: Any) -> Any:
    import time

    from compiler.tune.tuners import MeasureResult

    time.sleep(1.6 if knobs == "slow" else 0.0)
    return MeasureResult(100, seconds=0.0)


def test_workers_report_progress_while_a_slow_setting_runs(
        tiny: HwConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """accel tune printed nothing for a minute while its workers measured a batch of slow
    settings: the progress callback now hears from the pool at least every HEARTBEAT_SECONDS,
    with the same counts while nothing finishes."""
    import runtime.tuning as tuning

    monkeypatch.setattr(tuning, "measure_knobs", _slow_measure)  # the forked workers inherit it
    monkeypatch.setattr(tuning, "HEARTBEAT_SECONDS", 0.2)
    calls: list[tuple[int, int]] = []
    with tuning.SimMeasure(workers=2, cache=False) as measure:
        measure.progress = lambda done, total: calls.append((done, total))
        out = measure._measure([(None, tiny, "fast"), (None, tiny, "slow")])
    assert [r.cycles for r in out] == [100, 100]
    assert calls[0] == (0, 2) and calls[-1] == (2, 2)
    assert calls.count((1, 2)) >= 3     # the fast one's, then heartbeats while the slow one runs
