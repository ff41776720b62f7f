"""Device backends and fallback kernel sets, found through small registries.

A device backend runs a :class:`~accel.machine.program.Program` on a DRAM image; it declares what it
can do as data (:class:`BackendCaps`), and callers read the fields instead of branching on names.
A fallback runs the operators the accelerator does not (``cpu``: numpy kernels, ``gpu``: CuPy
kernels when a CUDA GPU is present).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from accel.machine.config import HwConfig, load_config
from accel.machine.dram import Dram
from accel.machine.program import Program, ProgramError
from runtime.workers import PoolHandle, stop_pool, submit_forked

__all__ = [
    "BackendCaps",
    "RunResult",
    "activity",
    "available_backends",
    "blas_threads",
    "cancel_prefetch",
    "fallback_kernels",
    "find_backend",
    "prefetch_timing",
    "register_backend",
    "run_program",
    "timing_signature",
]


@dataclass(frozen=True)
class BackendCaps:
    """What a device backend offers."""

    name: str
    timed: bool
    """It reports cycles (and a :class:`sim.stats.SimStats`)."""
    traces: bool
    """It can record a Perfetto trace."""
    description: str
    module_stats: bool = False
    """Its stats are a :class:`sim.stats.SimStats` (per-module busy and stall cycles, DRAM
    bytes per buffer); otherwise they only have ``to_dict()``."""
    options: tuple[str, ...] = ()
    """The keyword options its ``run`` takes beyond the four common arguments (``sim``:
    ``engine``; ``rtl``: ``vcd``, ``engine``, ``max_cycles``, as :func:`hw.backend.run_rtl`
    takes them)."""

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError naming the first of ``options`` this backend does not take."""
        for name in options:
            if name not in self.options:
                takes = (f"; it takes {', '.join(self.options)}" if self.options
                         else "; it takes none")
                raise ValueError(f"backend {self.name!r} has no option {name!r}{takes}")


RunFn = Callable[..., tuple[Any, int | None]]


@dataclass(frozen=True)
class Backend:
    caps: BackendCaps
    run: RunFn
    """``run(program, dram, cfg, trace, **options) -> (stats, cycles or None)``, the options
    among ``caps.options``."""


_BACKENDS: dict[str, Backend] = {}


def register_backend(caps: BackendCaps, run: RunFn) -> None:
    """Add (or replace) a device backend."""
    _BACKENDS[caps.name] = Backend(caps, run)


def find_backend(name: str) -> Backend:
    """The backend called ``name``.

    Raises
    ------
    ValueError
        Unknown name (the message lists the known ones).
    """
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown backend {name!r}; expected one of {', '.join(_BACKENDS)}"
        ) from None


def available_backends() -> list[BackendCaps]:
    return [b.caps for b in _BACKENDS.values()]


def _run_fsim(program: Program, dram: Dram, cfg: HwConfig, trace: bool) -> tuple[Any, None]:
    from sim.functional import FunctionalSimulator

    return FunctionalSimulator(cfg).run(program, dram), None


_TIMING_CACHE: dict[tuple[HwConfig, bytes, bool], Any] = {}
_TIMING_CACHE_SIZE = 256


def timing_signature(program: Program) -> bytes:
    """What the timing model's result depends on: the instructions with their DRAM addresses
    and ALU immediates blanked (no cost in :mod:`accel.machine.costs` reads either), as one
    bytes object (its hash is computed once, where a tuple of instructions would be hashed
    anew at every lookup of the timing cache)."""
    import pickle

    from accel.machine.isa import AluInsn, MemInsn

    blank = {MemInsn: "dram_base", AluInsn: "imm"}
    out = []
    for insn in program.insns:
        fields = vars(insn)
        field = blank.get(type(insn))
        if field is not None:
            fields = {**fields, field: 0}
        # The type's name fixes its fields and their order: the values alone say the rest.
        out.append((type(insn).__name__, *fields.values()))
    return pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)


SIM_ENGINES = ("fast", "simpy")
"""The timing engines of the ``sim`` backend: ``fast`` (:mod:`sim.fast_timing`, the default) and
``simpy`` (:mod:`sim.timing`, the readable reference). Their cycles and statistics are equal on
every program (``tests/test_fast_timing.py``); the reference is there to read and to check."""


def _timing_engine(cfg: HwConfig, trace: bool, engine: str, functional: bool) -> Any:
    """A timing simulator of ``engine`` (:data:`SIM_ENGINES`)."""
    if engine == "fast":
        from sim.fast_timing import FastTimingSimulator

        return FastTimingSimulator(cfg, trace=trace, functional=functional)
    if engine == "simpy":
        from sim.timing import TimingSimulator

        return TimingSimulator(cfg, trace=trace)  # it always executes the program
    raise ValueError(f"backend 'sim': unknown engine {engine!r}; expected one of "
                     f"{', '.join(SIM_ENGINES)}")


def _run_sim(program: Program, dram: Dram, cfg: HwConfig, trace: bool,
             engine: str = "fast") -> tuple[Any, int]:
    """Functional + timing simulation.

    The timing model's cycles depend on neither data, DRAM addresses nor ALU immediates, so a
    program with the same :func:`timing_signature` as one already simulated on the same config
    (a network's repeated layers) reuses its timing, and only the functional simulator runs,
    for the DRAM results. ``engine`` picks the timing engine (:data:`SIM_ENGINES`).
    """
    from sim.functional import FunctionalSimulator

    simulator = _timing_engine(cfg, trace, engine, functional=True)
    signed = _SIGNED.pop(id(program), None)
    signature = signed[1] if signed is not None and signed[0] is program else \
        timing_signature(program)
    key = (cfg, signature, trace)
    cached = _TIMING_CACHE.get(key)
    pending = _PENDING.pop(key, None)
    if cached is None and pending is not None:
        try:
            cached = _TIMING_CACHE[key] = pending.result()
        except Exception:  # the worker failed: simulate here, which raises the real error
            cached = None
    if cached is not None:
        FunctionalSimulator(cfg).run(program, dram)
        return cached, cached.cycles
    stats = simulator.run(program, dram)
    if len(_TIMING_CACHE) >= _TIMING_CACHE_SIZE:
        _TIMING_CACHE.clear()
    _TIMING_CACHE[key] = stats
    return stats, stats.cycles


def _run_rtl(program: Program, dram: Dram, cfg: HwConfig, trace: bool,
             **options: Any) -> tuple[Any, int]:
    try:
        rtl = importlib.import_module("hw.backend")
    except ImportError as exc:
        raise ValueError(f"backend 'rtl' is not available: {exc}") from None
    cycles, stats = rtl.run_rtl(program, dram, cfg, **options)
    return stats, cycles


register_backend(BackendCaps("fsim", False, False, "functional simulator (numpy)"), _run_fsim)
register_backend(BackendCaps("sim", True, True, "functional + timing simulator",
                             module_stats=True, options=("engine",)), _run_sim)
register_backend(BackendCaps("rtl", True, False, "Amaranth RTL (Verilator or Amaranth sim)",
                             options=("vcd", "engine", "max_cycles")), _run_rtl)


_PENDING: dict[tuple[HwConfig, bytes, bool], Any] = {}
_SIGNED: dict[int, tuple[Program, bytes]] = {}
"""The signatures :func:`prefetch_timing` computed, by ``id`` of the program (kept with it, so
an id reused by another object does not match), taken by the run of that program."""
_PREFETCH_POOLS: list[PoolHandle] = []
"""The prefetch pool of the run going on, and its worker process."""


def _timing_only(program: Program, cfg: HwConfig, trace: bool) -> Any:
    """The prefetch worker's task: the fast engine's timing, without executing the program
    (the parent runs the functional simulator for the data)."""
    return _timing_engine(cfg, trace, "fast", functional=False).run(program, Dram())


def prefetch_timing(programs: list[Program], cfg: HwConfig, trace: bool = False) -> bool:
    """Start simulating the timing of ``programs`` in a worker process.

    Timing does not depend on data, so while the caller runs a network's layers one after
    another (each needs the previous one's output), a second core can simulate the timing of
    the later ones. ``run_program(..., backend="sim")`` then picks the result up and only runs
    the functional simulator. Does nothing where processes cannot be forked, or in a daemonic
    process (a worker of a process pool or of Dask), which may not have children.
    :func:`cancel_prefetch` stops the worker. True when a worker was started.
    """
    todo: dict[tuple[HwConfig, bytes, bool], Program] = {}
    _SIGNED.clear()  # a run's programs at a time
    for program in programs:
        signature = timing_signature(program)
        _SIGNED[id(program)] = (program, signature)
        key = (cfg, signature, trace)
        if key not in _TIMING_CACHE and key not in _PENDING:
            todo.setdefault(key, program)
    # The first program is simulated here, timing and data at once, while the worker starts
    # (a fork and its imports) on the later ones: waiting for its result would idle this core.
    todo.pop(next(iter(todo), None), None)
    if len(todo) < 2:
        return False
    forked = submit_forked([functools.partial(_timing_only, program, cfg, trace)
                            for program in todo.values()])
    if forked is None:
        return False
    handle, futures = forked
    _PENDING.update(zip(todo, futures, strict=True))
    # Pools of earlier runs have delivered every timing; this one's worker is stopped by
    # cancel_prefetch when its run ends early.
    _PREFETCH_POOLS[:] = [handle]
    return True


@contextlib.contextmanager
def blas_threads(limit: int | None) -> Iterator[None]:
    """At most ``limit`` BLAS threads in this process inside the block (None: no limit).

    While the prefetch worker simulates on one core, a BLAS product in this process threaded
    over every core would contend with it (and OpenBLAS's threads spin while they wait), so a
    sim run with a worker keeps its checks and fallback kernels to one thread."""
    if limit is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=limit, user_api="blas"):
        yield


def cancel_prefetch() -> None:
    """Drop the timings :func:`prefetch_timing` has not delivered and stop its worker now (a
    run that ended early, by an error or Ctrl-C: otherwise the interpreter's exit waits for
    the worker to simulate every layer left)."""
    _PENDING.clear()
    _SIGNED.clear()
    while _PREFETCH_POOLS:
        stop_pool(_PREFETCH_POOLS.pop())


# ---------------------------------------------------------------------- running a program
@dataclass
class RunResult:
    """What ``run_program`` returns: the DRAM image after the run and the backend's counters.

    ``cycles`` is None on the functional backend, which has no notion of time.
    """

    dram: Dram
    backend: str
    stats: Any
    cycles: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "cycles": self.cycles, "stats": self.stats.to_dict()}

    def energy(self, cfg: HwConfig) -> Any:
        """The run's :class:`accel.machine.energy.EnergyReport` on ``cfg`` (its energy table),
        or None without cycles (``fsim``: leakage and the modules' clocks need time) or
        without action counts."""
        from accel.machine.energy import estimate

        found = activity(self.stats)
        if self.cycles is None or found is None:
            return None
        actions, active = found
        return estimate(actions, cfg, self.cycles, active)


def activity(stats: Any) -> tuple[Any, dict[str, int]] | None:
    """A backend's action counts and each module's active cycles, from its stats: a
    :class:`sim.stats.SimStats`, or the RTL's counters (``actions`` and ``active``, as
    :func:`hw.backend.run_rtl` gives them); None when the stats have neither (``fsim``'s have
    counts but no active cycles)."""
    from accel.machine.actions import ActionCounts

    modules = getattr(stats, "modules", None)
    if modules is not None and hasattr(stats, "actions"):
        return stats.actions, {m: s.active for m, s in modules.items()}
    if isinstance(stats, dict) and "actions" in stats and "active" in stats:
        return ActionCounts.from_dict(stats["actions"]), dict(stats["active"])
    return None


def run_program(
    program: Program,
    dram: Dram,
    config: HwConfig | str | None = None,
    backend: str = "fsim",
    trace: bool = False,
    **options: Any,
) -> RunResult:
    """Run ``program`` on ``dram`` (modified in place) with the chosen backend.

    Parameters
    ----------
    program
        The program; its regions are added to ``dram`` and its micro-ops written there.
    dram
        The DRAM image holding the program's input tensors.
    config
        The hardware; defaults to the program's own config and must equal it when given.
    backend
        A registered backend (:mod:`runtime.backends`): ``"fsim"`` (functional only),
        ``"sim"`` (functional + timing: ``cycles`` and a :class:`sim.stats.SimStats`) or
        ``"rtl"`` (the Amaranth RTL).
    trace
        With ``"sim"``: also record queue and DRAM counters for ``stats.write_trace``.
    options
        Options of the backend (``BackendCaps.options``): with ``"sim"``, ``engine``
        (:data:`SIM_ENGINES`: ``"fast"``, the default, or ``"simpy"``, the reference); with
        ``"rtl"``, ``vcd`` (a path or an :class:`hw.waveform.VcdDump`), ``engine`` and
        ``max_cycles``, as :func:`hw.backend.run_rtl` takes them.

    Raises
    ------
    ValueError
        Unknown or unavailable backend, or an option it does not take.
    ProgramError
        An invalid program, a deadlock, or tokens left at FINISH.
    """
    cfg = program.config if config is None else (
        config if isinstance(config, HwConfig) else load_config(config))
    if cfg != program.config:
        raise ProgramError(f"program was built for config {program.config.name}, not {cfg.name}")
    device = find_backend(backend)
    device.caps.check_options(options)
    stats, cycles = device.run(program, dram, cfg, trace, **options)
    return RunResult(dram=dram, backend=backend, stats=stats, cycles=cycles)


# ---------------------------------------------------------------------- fallbacks
_FALLBACKS = {"cpu": "runtime.kernels", "gpu": "runtime.kernels_gpu"}


def fallback_kernels(name: str) -> ModuleType:
    """The kernel module of fallback ``name`` (``cpu`` or ``gpu``).

    Raises
    ------
    ValueError
        Unknown fallback, or ``gpu`` without a usable CUDA GPU and CuPy.
    """
    if name not in _FALLBACKS:
        raise ValueError(f"unknown fallback {name!r}; expected one of {', '.join(_FALLBACKS)}")
    try:
        module = importlib.import_module(_FALLBACKS[name])
    except ImportError as exc:
        raise ValueError(f"fallback {name!r} is not available: {exc}") from None
    available = getattr(module, "available", None)
    if available is not None and not available():
        raise ValueError(f"fallback {name!r} needs a CUDA GPU with CuPy, and none is usable "
                         "here; use --fallback cpu")
    return module
