"""Running a sweep: every point through its backend, locally or on a Dask cluster, each result
appended to ``DIR/results.csv`` by the parent as it finishes.

:func:`run_point` is a pure function of a :class:`~accel.dse.spec.Point` (random layer inputs
are seeded from the point id), so the same point gives the same row wherever it runs:
in this process (``workers=1``), in a local process pool, or on a ``dask.distributed``
worker. It never raises for a point's own failure: an invalid config, a layer that cannot be
compiled, a failed simulation or synthesis each become a row with ``status == "error"``.

:func:`run_sweep` resumes: points whose id already has a row in the results file are skipped,
so re-running the same command after a crash finishes the sweep without duplicating a row.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from accel.dse.results import (
    METRIC_COLUMNS,
    RESULTS_CSV,
    ResultsFile,
    columns,
    stall_columns,
    write_parquet,
)
from accel.dse.spec import Point, SweepSpec, WorkloadItem, expand
from accel.machine.config import ConfigError, HwConfig

__all__ = ["PointResult", "SweepError", "SweepSummary", "run_point", "run_sweep"]

SPEC_COPY = "spec.yaml"
SCHEDULER_TIMEOUT = "20s"
"""How long ``--scheduler`` tries to reach the Dask scheduler before giving up."""
TRACES = "traces"
_DIGEST_RE = re.compile(r"^# accel sweep spec digest ([0-9a-f]+)")


class SweepError(ValueError):
    """The sweep cannot go on (unusable results folder, lost scheduler, a dead worker); one
    line. Rows already written stay."""


@dataclass
class PointResult:
    """What a worker sends back: the point's rows and, when asked, its Chrome trace JSON."""

    point_id: str
    index: int
    rows: list[dict[str, Any]]
    trace: str | None = None

    @property
    def ok(self) -> bool:
        return all(r["status"] == "ok" for r in self.rows)


@dataclass
class SweepSummary:
    """What :func:`run_sweep` did."""

    out: Path
    points: int
    skipped: int
    ran: int = 0
    ok: int = 0
    errors: int = 0
    rows: int = 0
    seconds: float = 0.0
    repaired_bytes: int = 0
    parquet: Path | None = None
    error_messages: list[str] = field(default_factory=list)

    @property
    def results(self) -> Path:
        return self.out / RESULTS_CSV


# ---------------------------------------------------------------------- one point
def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text}"


def _merged(point: Point) -> dict[str, Any]:
    data = copy.deepcopy(point.base_config)
    for key, value in point.overrides:
        section, _, leaf = key.partition(".")
        if leaf:
            data.setdefault(section, {})[leaf] = value
        else:
            data[key] = value
    return data


def _facts(point: Point, cfg: HwConfig | None) -> dict[str, Any]:
    """Identity and config-fact columns (from the raw values when the config is invalid)."""
    m = _merged(point)
    core, buffers, dram = m.get("core", {}), m.get("buffers", {}), m.get("dram", {})
    row: dict[str, Any] = {
        "point_id": point.point_id, "point_index": point.index, "sweep": point.sweep,
        "config_name": cfg.name if cfg is not None else "",
        **{f"axis.{k}": v for k, v in point.overrides},
        "core": f"{core.get('batch')}x{core.get('block_in')}x{core.get('block_out')}",
        "workload": point.workload.workload, "layer": point.workload.layer,
        "backend": point.backend, "status": "ok", "error": "",
        "clock_mhz": float(m.get("clock_mhz", 0)) or None,
        "dram_bytes_per_cycle": dram.get("bytes_per_cycle"), "dram_latency": dram.get("latency"),
        "dram_max_outstanding": (cfg.dram.max_outstanding if cfg is not None
                                 else dram.get("max_outstanding", 1)),
        **{f"buffers.{b}": buffers.get(b) for b in ("inp", "wgt", "acc", "uop")},
    }
    if cfg is not None:
        row["peak_macs_per_cycle"] = cfg.peak_macs_per_cycle
    else:
        try:
            row["peak_macs_per_cycle"] = (core["batch"] * core["block_in"] * core["block_out"]
                                          // m["gemm"]["ii"])
        except (KeyError, TypeError, ZeroDivisionError):
            row["peak_macs_per_cycle"] = None
    return row


def _error(row: dict[str, Any], message: str) -> dict[str, Any]:
    row = {k: v for k, v in row.items() if not _is_metric(k)}
    row["status"] = "error"
    row["error"] = " ".join(message.split())
    return row


_METRIC_SET = frozenset(c for cols in METRIC_COLUMNS.values() for c in cols)


def _is_metric(col: str) -> bool:
    return col in _METRIC_SET


def _conv_workload(item: WorkloadItem) -> Any:
    from compiler.ops.conv2d import Conv2dWorkload
    from compiler.ops.workloads import resnet18_layer

    if item.kind == "resnet18":
        return resnet18_layer(item.layer)
    p = dict(item.params)
    return Conv2dWorkload(p["batch"], p["in_channels"], p["height"], p["width"],
                          p["out_channels"], p["kernel"], p["kernel"], p["stride"], p["stride"],
                          p["padding"], p["padding"], p["bias"], p["shift"], p["relu"])


def _seed(point: Point) -> list[int]:
    return [point.seed, int(point.point_id, 16) % (1 << 63)]


def _energy_columns(components_uj: dict[str, float], macs: int, cycles: int,
                    cfg: HwConfig) -> dict[str, Any]:
    """The ``energy`` metric's columns from a run's energy by component (microjoules)."""
    uj = sum(components_uj.values())
    seconds = cycles / (cfg.clock_mhz * 1e6)
    return {
        "energy_uj": uj,
        "pj_per_mac": uj * 1e6 / macs if macs else None,
        "tops_per_w": 2 * macs / (uj * 1e-6) / 1e12 if uj and macs else None,
        "power_mw": uj * 1e-6 / seconds * 1e3 if seconds else None,
        **{f"energy.{c}": v for c, v in components_uj.items()},
    }


def _stats_metrics(stats: Any, backend: str, cfg: HwConfig, cycles: int | None, macs: int,
                   compile_seconds: float | None) -> dict[str, Any]:
    """Metric columns from a backend's stats (a SimStats on sim, fsim's or the RTL's counters)."""
    out: dict[str, Any] = {"macs": macs, "compile_seconds": compile_seconds}
    if cycles:
        out["cycles"] = cycles
        out["milliseconds"] = cycles / (cfg.clock_mhz * 1000.0)
        if macs:  # an ALU-only layer (a residual add) has no GEMM to utilise
            out["gemm_utilization"] = macs / (cycles * cfg.peak_macs_per_cycle)
    if stats is None:
        return out
    from accel.machine.energy import estimate
    from runtime.backends import activity

    found = activity(stats)
    if cycles and found is not None:
        energy = estimate(found[0], cfg, cycles, found[1])
        out.update(_energy_columns({c: v * 1e-6 for c, v in energy.components.items()}, macs,
                                   cycles, cfg))
    if hasattr(stats, "modules") and hasattr(stats, "dram_loaded"):  # sim.stats.SimStats
        loaded = {b: stats.dram_loaded.get(b, 0) for b in ("inp", "wgt", "acc", "uop")}
        out.update({f"bytes.{b}": n for b, n in loaded.items()})
        out["bytes.out"] = stats.dram_stored
        out["dram_bytes"] = sum(loaded.values()) + stats.dram_stored
        out["dram_achieved_bytes_per_cycle"] = stats.dram_bytes_per_cycle
        out["dram_bandwidth_share"] = stats.dram_bandwidth_share
        out.update(stall_columns({m: s.busy for m, s in stats.modules.items()},
                                 {m: s.stalls for m, s in stats.modules.items()}))
    elif hasattr(stats, "bytes_loaded"):  # sim.functional's counters
        loaded = {b: stats.bytes_loaded.get(b, 0) for b in ("inp", "wgt", "acc", "uop")}
        out.update({f"bytes.{b}": n for b, n in loaded.items()})
        out["bytes.out"] = stats.bytes_stored
        out["dram_bytes"] = sum(loaded.values()) + stats.bytes_stored
    else:  # the RTL's counters: totals only (instruction fetch included)
        d = stats.to_dict()
        if "dram_bytes_read" in d:
            out["dram_bytes"] = int(d.get("dram_bytes_read", 0)) + int(
                d.get("dram_bytes_written", 0))
    return out


def _trace_text(write: Callable[[Path], None]) -> str:
    with tempfile.TemporaryDirectory(prefix="accel-sweep-") as tmp:
        path = Path(tmp) / "trace.json"
        write(path)
        return path.read_text()


def _run_layer(point: Point, cfg: HwConfig, row: dict[str, Any]
               ) -> tuple[list[dict[str, Any]], str | None]:
    import numpy as np

    from compiler.ops.compiled import compile_conv2d, pack_conv2d_args
    from runtime.backends import run_program

    wl = _conv_workload(point.workload)
    op = compile_conv2d(wl, cfg)
    rng = np.random.default_rng(_seed(point))
    x = rng.integers(-128, 128, (wl.batch, wl.in_channels, wl.height, wl.width), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.out_channels, wl.in_channels, wl.kernel_h, wl.kernel_w),
                     dtype=np.int8)
    bias = rng.integers(-(2**12), 2**12, wl.out_channels, dtype=np.int32) if wl.bias else None
    image = op.dram(**pack_conv2d_args(op, x, w, bias))
    result = run_program(op.program, image, config=cfg, backend=point.backend,
                         trace=point.traces)
    row.update(_stats_metrics(result.stats, point.backend, cfg, result.cycles, wl.macs,
                              op.compile_seconds))
    if point.check:
        from runtime import kernels

        y = op.read_output(image, (wl.batch, wl.out_channels, wl.out_height, wl.out_width))
        want = kernels.conv2d(x, w, bias, stride=(wl.stride_h, wl.stride_w),
                              padding=(wl.pad_h, wl.pad_w), shift=wl.shift, relu=wl.relu)
        if not np.array_equal(y, want):
            return [_error(row, "check: the output differs from runtime.kernels.conv2d")], None
    trace = None
    if point.traces and hasattr(result.stats, "write_trace"):
        trace = _trace_text(result.stats.write_trace)
    return [row], trace


def _run_model(point: Point, cfg: HwConfig, row: dict[str, Any]
               ) -> tuple[list[dict[str, Any]], str | None]:

    from runtime.network import compile_network, load_model, sample_inputs

    item = point.workload
    model = item.param("path") if item.kind == "onnx" else item.workload
    graph = load_model(model, batch=item.param("batch", 1),
                             image_size=item.param("image_size"), seq_len=item.param("seq_len"))
    x, calibration = sample_inputs(graph, _seed(point))
    exe = compile_network(graph, cfg, calibration=calibration)
    _, report = exe.run(x, backend=point.backend, fallback="cpu", check=point.check,
                        trace=point.traces)
    stats = {name: s for name, _, s in report.traces}
    rows = []
    for layer in report.layers:
        if layer.target != "accel":
            continue
        r = dict(row, layer=layer.name)
        op = exe.compiled.get(layer.name)
        r.update(_stats_metrics(stats.get(layer.name), point.backend, cfg, layer.cycles,
                                layer.macs, op.compile_seconds if op is not None else None))
        if layer.energy_uj is not None and layer.cycles:
            r.update(_energy_columns(layer.energy, layer.macs, layer.cycles, cfg))
        if layer.check is False:
            r = _error(r, f"check: {layer.name} differs from the numpy reference")
        rows.append(r)
    if not rows:
        rows = [_error(row, f"{item.workload}: no layer of the model runs on the accelerator")]
    trace = _trace_text(report.write_trace) if point.traces else None
    return rows, trace


def run_point(point: Point, worker: str | None = None) -> PointResult:
    """Run one point and return its rows (never raises for the point's own failures).

    Parameters
    ----------
    point
        The point (from :func:`accel.dse.spec.expand`).
    worker
        Value of the ``worker`` column (default ``pid:<this process id>``).
    """
    start = time.perf_counter()
    cfg: HwConfig | None = None
    trace = None
    try:
        cfg = HwConfig.from_dict(_merged(point), source=f"{point.sweep}[{point.index}]")
    except ConfigError as exc:
        rows = [_error(_facts(point, None), _one_line(exc))]
    else:
        row = _facts(point, cfg)
        try:
            if "area" in point.metrics and point.area is not None:
                from accel.dse.area import area_columns

                try:
                    row.update(area_columns(cfg, point.area.target, point.area.estimator))
                except Exception as exc:
                    raise _AreaFailed(_one_line(exc)) from None
            if point.workload.kind in ("resnet18", "conv2d"):
                rows, trace = _run_layer(point, cfg, row)
            else:
                rows, trace = _run_model(point, cfg, row)
        except _AreaFailed as exc:
            rows = [_error(row, f"area: {exc}")]
        except Exception as exc:  # a layer that cannot compile, a failed run: an error row
            rows = [_error(row, _one_line(exc))]
    wall = time.perf_counter() - start
    finished = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    where = worker or f"pid:{os.getpid()}"
    for r in rows:
        r.update({"wall_seconds": round(wall, 4), "finished_at": finished, "worker": where})
    return PointResult(point.point_id, point.index, rows, trace)


class _AreaFailed(Exception):
    pass


def run_point_dask(point: Point) -> PointResult:
    """:func:`run_point` on a Dask worker: the ``worker`` column is the worker's address."""
    address = None
    with contextlib.suppress(ImportError, ValueError):
        from distributed import get_worker

        address = get_worker().address
    return run_point(point, worker=address)


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ---------------------------------------------------------------------- progress
class Progress:
    """Progress on ``stream``: an updating bar on a terminal, else one line per point."""

    def __init__(self, total: int, done: int, stream: TextIO | None = None,
                 quiet: bool = False) -> None:
        self.total = total
        self.done = done
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()

    def update(self, point: Point, result: PointResult) -> None:
        self.done += 1
        if self.quiet:
            return
        status = "ok" if result.ok else "error"
        if self.tty:
            width = 24
            filled = int(width * self.done / max(self.total, 1))
            line = (f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                    f"{status:<5} {point.label:<48.48} {time.perf_counter() - self.start:6.1f}s")
            self.stream.write(line)
            if self.done >= self.total:
                self.stream.write("\n")
        else:
            wall = result.rows[0].get("wall_seconds") if result.rows else None
            took = f" ({wall:.2f} s)" if wall is not None else ""
            msg = "" if result.ok else f"  {result.rows[0]['error'][:160]}"
            self.stream.write(f"[{self.done}/{self.total}] {status:<5} {point.label}{took}"
                              f"{msg}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and not self.quiet and self.done < self.total:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------------- the sweep
def _prepare_folder(spec: SweepSpec, out: Path) -> None:
    """Create ``out``, record the spec (with its digest), or check the recorded one matches."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SweepError(f"{out}: cannot create the results folder: {exc.strerror}") from None
    copy_path = out / SPEC_COPY
    digest = spec.digest
    if copy_path.exists():
        first = copy_path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
        m = _DIGEST_RE.match(first)
        if not m:
            raise SweepError(f"{copy_path}: not written by accel sweep (no digest line); "
                             "use a new --out folder")
        if m.group(1) != digest:
            raise SweepError(f"{out}: holds results of a different sweep spec (digest "
                             f"{m.group(1)}, this spec {digest}); use a new --out folder")
        return
    if (out / RESULTS_CSV).exists():
        raise SweepError(f"{out}: has {RESULTS_CSV} but no {SPEC_COPY}, so it cannot be "
                         "resumed safely; use a new --out folder")
    text = spec.text
    if not text:
        import yaml

        text = yaml.safe_dump({"name": spec.name}, sort_keys=False)
    source_dir = Path(spec.source).resolve().parent if spec.source != "<dict>" else None
    head = (f"# accel sweep spec digest {digest}\n"
            f"# copied from {spec.source}"
            + (f" (relative paths resolve against {source_dir})" if source_dir else "") + "\n")
    tmp = copy_path.with_name(SPEC_COPY + ".tmp")
    tmp.write_text(head + text, encoding="utf-8")
    os.replace(tmp, copy_path)


def _write_trace(out: Path, result: PointResult) -> None:
    if result.trace is None:
        return
    folder = out / TRACES
    folder.mkdir(exist_ok=True)
    path = folder / f"{result.point_id}.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(result.trace)
    os.replace(tmp, path)


def run_sweep(spec: SweepSpec, out: str | Path, workers: int | None = None,
              scheduler: str | None = None, progress: Progress | None = None,
              quiet: bool = False, stream: TextIO | None = None) -> SweepSummary:
    """Run every point of ``spec`` not yet in ``out/results.csv``; append rows as they finish.

    Parameters
    ----------
    spec
        The validated spec.
    out
        Results folder (created; an existing one is resumed if it holds this spec's results).
    workers
        Local worker processes (default: CPU count); 1 runs the points in this process.
    scheduler
        Address of a Dask scheduler (``tcp://host:8786``): submit the points there instead.
    progress, quiet, stream
        Progress reporting (default: on ``stderr`` unless ``quiet``).

    Returns
    -------
    SweepSummary

    Raises
    ------
    SweepError, ResultsError
        The folder holds another spec's results, the scheduler cannot be reached, or a local
        worker process died (completed rows are kept; run again to resume).
    """
    out = Path(out)
    start = time.perf_counter()
    _prepare_folder(spec, out)
    points = expand(spec)
    header = columns(spec.axis_keys, spec.metrics)
    results = ResultsFile(out / RESULTS_CSV, header)
    try:
        results.open()
    except OSError as exc:
        raise SweepError(f"{results.path}: cannot open: {exc.strerror}") from None
    todo = [p for p in points if p.point_id not in results.done]
    summary = SweepSummary(out=out, points=len(points), skipped=len(points) - len(todo),
                           repaired_bytes=results.repaired)
    bar = progress or Progress(len(points), summary.skipped, stream=stream, quiet=quiet)
    by_index = {p.index: p for p in todo}

    def record(result: PointResult) -> None:
        _write_trace(out, result)
        results.append(result.rows)
        summary.ran += 1
        summary.rows += len(result.rows)
        if result.ok:
            summary.ok += 1
        else:
            summary.errors += 1
            summary.error_messages.append(result.rows[0]["error"])
        bar.update(by_index[result.index], result)

    try:
        if not todo:
            pass
        elif scheduler is not None:
            _run_dask(todo, scheduler, record)
        else:
            n = workers if workers is not None else (os.cpu_count() or 1)
            if n < 1:
                raise SweepError(f"--workers: expected at least 1, got {n}")
            if n == 1 or len(todo) == 1:
                for point in todo:
                    record(run_point(point))
            else:
                _run_pool(todo, min(n, len(todo)), record, results)
    finally:
        bar.close()
        results.close()
        with contextlib.suppress(Exception):
            summary.parquet = write_parquet(out)
        summary.seconds = time.perf_counter() - start
    return summary


def _run_pool(todo: list[Point], n: int, record: Callable[[PointResult], None],
              results: ResultsFile) -> None:
    import concurrent.futures
    from concurrent.futures.process import BrokenProcessPool

    pool = concurrent.futures.ProcessPoolExecutor(max_workers=n, initializer=_ignore_sigint)
    try:
        futures = [pool.submit(run_point, p) for p in todo]
        for fut in concurrent.futures.as_completed(futures):
            try:
                result = fut.result()
            except BrokenProcessPool:
                raise SweepError(
                    f"a worker process died; the {len(results.done)} completed points are kept "
                    f"in {results.path}; run the same command again to resume") from None
            record(result)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _run_dask(todo: list[Point], scheduler: str, record: Callable[[PointResult], None]) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise SweepError("--scheduler needs dask.distributed (pip install 'accel[dask]')"
                         ) from None
    try:
        client = Client(scheduler, timeout=SCHEDULER_TIMEOUT)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SweepError(f"--scheduler {scheduler}: cannot connect: {_one_line(exc)}") from None
    by_key: dict[Any, Point] = {}
    futures: list[Any] = []
    try:
        for point in todo:
            fut = client.submit(run_point_dask, point, pure=False)
            by_key[fut.key] = point
            futures.append(fut)
        for fut in as_completed(futures):
            point = by_key[fut.key]
            try:
                result = fut.result()
            except Exception as exc:  # e.g. KilledWorker: this point keeps killing workers
                row = _error(_facts(point, None), _one_line(exc))
                row.update({"wall_seconds": None, "worker": "",
                            "finished_at": datetime.datetime.now(datetime.timezone.utc)
                            .isoformat(timespec="seconds")})
                with contextlib.suppress(ConfigError):
                    cfg = HwConfig.from_dict(_merged(point))
                    row["config_name"] = cfg.name
                result = PointResult(point.point_id, point.index, [row])
            record(result)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel(futures)
        raise
    finally:
        with contextlib.suppress(Exception):
            client.close()

