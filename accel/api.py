"""Python entry points. Heavy subsystems are imported inside the functions that need them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accel.config import HwConfig, load_config
from accel.dram import Dram
from accel.program import Program, ProgramError

__all__ = ["BACKENDS", "RunResult", "run_program"]

BACKENDS = ("fsim", "sim", "rtl")


@dataclass
class RunResult:
    """What ``run_program`` returns: the DRAM image after the run and the backend's counters.

    ``cycles`` is None on the functional backend, which has no notion of time.
    """

    dram: Dram
    backend: str
    stats: Any
    cycles: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "cycles": self.cycles, "stats": self.stats.to_dict()}


def run_program(
    program: Program,
    dram: Dram,
    config: HwConfig | str | None = None,
    backend: str = "fsim",
    trace: bool = False,
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
        ``"fsim"`` (functional only) or ``"sim"`` (functional + timing: ``cycles`` and a
        :class:`sim.stats.SimStats`). ``"rtl"`` arrives with the RTL work.
    trace
        With ``"sim"``: also record queue and DRAM counters for ``stats.write_trace``.

    Raises
    ------
    ValueError
        Unknown or unavailable backend.
    ProgramError
        An invalid program, a deadlock, or tokens left at FINISH.
    """
    cfg = program.config if config is None else load_config(config) \
        if not isinstance(config, HwConfig) else config
    if cfg != program.config:
        raise ProgramError(f"program was built for config {program.config.name}, not {cfg.name}")
    if backend == "fsim":
        from sim.functional import FunctionalSimulator

        stats = FunctionalSimulator(cfg).run(program, dram)
        return RunResult(dram=dram, backend=backend, stats=stats)
    if backend == "sim":
        from sim.timing import TimingSimulator

        timing = TimingSimulator(cfg, trace=trace).run(program, dram)
        return RunResult(dram=dram, backend=backend, stats=timing, cycles=timing.cycles)
    if backend in BACKENDS:
        raise ValueError(f"backend {backend!r} is not available in this version; use 'fsim'")
    raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
