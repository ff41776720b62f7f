"""Errors raised while simulating a program (shared by the functional and timing models)."""

from __future__ import annotations

from accel.program import ProgramError

__all__ = ["SimulationDeadlock", "SimulationError"]


class SimulationError(ProgramError):
    """A program did something illegal at run time (index out of range, DRAM overrun)."""


class SimulationDeadlock(SimulationError):
    """No module can make progress before FINISH; the message says who waits on what."""
