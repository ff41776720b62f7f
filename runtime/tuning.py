"""Measurements for the tuners: build a knob setting and time it on the timing simulator.

:class:`SimMeasure` is the ``measure`` callable of :meth:`compiler.tune.tuners.Tuner.tune`: it
builds each setting of a batch (uncached, :func:`build_program`, through the operator's registry
entry) and runs only the timing model on it (the fast engine without functional effects,
``FastTimingSimulator(cfg, functional=False)``, whose cycles equal the SimPy reference's:
cycles depend on neither data nor DRAM addresses), in forked worker processes, one
setting per worker at a time. A setting that fails to build is reported with its error and
never simulated.

Measurements are deterministic, so they are cached by (config name, operator signature,
knobs): a setting measured once, by any tuner or seed, is answered from the cache (and still
counts as a trial of the tuner that asked). The cache can persist in a tuning log file.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from compiler.errors import LoweringError
from compiler.ops.registry import accel_op_for
from compiler.ops.tuning_log import TuningLog, as_log
from compiler.tune.task import Task
from compiler.tune.tuners import MeasureResult
from runtime.workers import PoolHandle, sigint_deferred, stop_pool, worker_init
from sim.fast_timing import FastTimingSimulator

__all__ = ["SimMeasure", "build_program", "default_workers", "measure_knobs"]

CacheKey = tuple[str, str, tuple[tuple[str, int], ...]]


def default_workers() -> int:
    """Worker processes used when none are asked for: ``min(2, cpu count)``."""
    return max(1, min(2, os.cpu_count() or 1))


def build_program(workload: Any, cfg: HwConfig, knobs: Any) -> Any:
    """``workload`` built with ``knobs``, uncached, by its operator's registry entry.

    Raises
    ------
    compiler.errors.LoweringError
        Knobs the schedule or a pass rejects.
    TypeError
        No registered accelerator operator takes that workload.
    """
    entry = accel_op_for(workload)
    if entry is None:
        raise TypeError(f"no accelerator operator takes a {type(workload).__name__}")
    return entry.program(workload, cfg, knobs)


def measure_knobs(workload: Any, cfg: HwConfig, knobs: Any) -> MeasureResult:
    """Build ``workload`` with ``knobs`` and return its cycles on the timing simulator, or the
    build error (then nothing is simulated)."""
    start = time.perf_counter()
    try:
        program = build_program(workload, cfg, knobs)
    except LoweringError as exc:
        return MeasureResult(None, f"build: {exc}", time.perf_counter() - start)
    stats = FastTimingSimulator(cfg, functional=False).run(program, Dram())
    return MeasureResult(int(stats.cycles), None, time.perf_counter() - start)


def _init_worker() -> None:
    # One spinning OpenMP thread per process is plenty on a shared 2-core machine, and a
    # Ctrl-C is the parent's to handle (it stops the pool: runtime.workers).
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    worker_init()


def _key(task: Task, knobs: Any) -> CacheKey:
    return (task.config.name, task.signature, tuple(sorted(knobs.to_dict().items())))


HEARTBEAT_SECONDS = 1.0
"""While worker processes measure, the progress callback is called at least this often (with
the same counts when nothing finished): a batch of slow layers printed nothing for a minute."""


class SimMeasure:
    """Measure batches of knob settings on the timing simulator, in parallel.

    Parameters
    ----------
    workers
        Worker processes (default :func:`default_workers`); 1 measures in this process.
    cache
        Answer settings measured before from memory.
    cache_log
        A tuning log (or its path) whose records seed the cache and to which every new
        measurement is appended (tuner ``"measure"``), so a later run reuses them.

    Raises
    ------
    ValueError
        ``workers < 1``.
    """

    def __init__(self, workers: int | None = None, cache: bool = True,
                 cache_log: TuningLog | str | os.PathLike[str] | None = None) -> None:
        workers = default_workers() if workers is None else workers
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.cache_enabled = cache or cache_log is not None
        self.cache: dict[CacheKey, int] = {}
        self.cache_log = as_log(cache_log) if cache_log is not None else None
        if self.cache_log is not None:
            for rec in self.cache_log.records():
                key = (rec.config, rec.op, tuple(sorted(rec.knobs.items())))
                self.cache.setdefault(key, rec.cycles)
        self.simulated = 0
        """Settings built and simulated (cache hits and build failures not counted)."""
        self.hits = 0
        """Settings answered from the cache."""
        self.failures = 0
        """Settings that failed to build."""
        self.busy_seconds = 0.0
        """Wall time the builds and simulations took, summed over workers."""
        self.progress: Callable[[int, int], None] | None = None
        """Called as ``progress(done, n)`` when a batch of ``n`` settings to build and
        simulate starts (``done == 0``) and as each one finishes (a progress display: one
        measurement can take seconds)."""
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._handle: PoolHandle | None = None

    # ------------------------------------------------------------------ pool
    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            try:
                context = multiprocessing.get_context("fork")
            except ValueError:
                context = multiprocessing.get_context()
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.workers, mp_context=context, initializer=_init_worker)
            self._handle = None
        return self._pool

    def close(self) -> None:
        """Stop the worker processes (a later call starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = self._handle = None

    def terminate(self) -> None:
        """Stop the worker processes now, without waiting for the settings they measure."""
        if self._pool is not None:
            stop_pool(self._handle or self._pool)
            self._pool = self._handle = None

    def __enter__(self) -> SimMeasure:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.terminate()

    # ------------------------------------------------------------------ measuring
    def _measure(self, jobs: list[tuple[Any, HwConfig, Any]]) -> list[MeasureResult]:
        """:func:`measure_knobs` of every job, in order, reporting each as it finishes."""
        if self.progress is not None and jobs:
            self.progress(0, len(jobs))
        if self.workers == 1 or len(jobs) <= 1:
            out = []
            for job in jobs:
                out.append(measure_knobs(*job))
                if self.progress is not None:
                    self.progress(len(out), len(jobs))
            return out
        results: list[MeasureResult | None] = [None] * len(jobs)
        try:
            with sigint_deferred():  # the first submit forks the workers: record them first
                pool = self._executor()
                futures = {pool.submit(measure_knobs, *job): i for i, job in enumerate(jobs)}
                if self._handle is None:
                    self._handle = PoolHandle.of(pool)
            pending, done = set(futures), 0
            while pending:
                finished, pending = concurrent.futures.wait(
                    pending, timeout=HEARTBEAT_SECONDS,
                    return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in finished:
                    results[futures[fut]] = fut.result()
                    done += 1
                    if self.progress is not None:
                        self.progress(done, len(jobs))
                if not finished and self.progress is not None:
                    # Nothing finished for a while: report again, so that a slow batch shows
                    # its elapsed time (the caller's progress display limits the lines).
                    self.progress(done, len(jobs))
        except BaseException:
            self.terminate()  # Ctrl-C or a failure: the measurements under way are lost anyway
            raise
        return [r for r in results if r is not None]

    def __call__(self, task: Task, knobs_list: Sequence[Any]) -> list[MeasureResult]:
        """One :class:`~compiler.tune.tuners.MeasureResult` per setting, in order."""
        results: list[MeasureResult | None] = [None] * len(knobs_list)
        todo: dict[CacheKey, list[int]] = {}
        for i, knobs in enumerate(knobs_list):
            key = _key(task, knobs)
            if self.cache_enabled and key in self.cache:
                results[i] = MeasureResult(self.cache[key], cached=True)
                self.hits += 1
            else:
                todo.setdefault(key, []).append(i)
        firsts = [idxs[0] for idxs in todo.values()]
        jobs = [(task.workload, task.config, knobs_list[i]) for i in firsts]
        measured = self._measure(jobs)
        for (key, idxs), r in zip(todo.items(), measured, strict=True):
            self.busy_seconds += r.seconds
            if r.cycles is None:
                self.failures += 1
            else:
                self.simulated += 1
                if self.cache_enabled:
                    self.cache[key] = r.cycles
                if self.cache_log is not None:
                    self.cache_log.add(key[0], key[1], dict(key[2]), r.cycles, "measure")
            results[idxs[0]] = r
            for i in idxs[1:]:
                results[i] = MeasureResult(r.cycles, r.error, 0.0, cached=r.cycles is not None)
        return [r for r in results if r is not None]
