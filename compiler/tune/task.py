"""A tuning task: one operator workload on one config, its knob space and its schedule.

The task is what the tuners search and what a measurement callable receives: it knows how to
build the operator's schedule for a knob setting, how to lower it for feature extraction, and
which heuristic knobs the compiler would pick without a tuning log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accel.machine.config import HwConfig
from compiler.ops.registry import accel_op_for
from compiler.ops.space import KnobSpace, Point
from compiler.schedule import Schedule

__all__ = ["Task", "make_task"]


@dataclass(eq=False)
class Task:
    """One operator to tune.

    Attributes
    ----------
    kind
        The operator's program name (``"conv2d"``, ``"matmul"``, ``"add"``, ...), as its
        registry entry (:mod:`compiler.ops.registry`) declares it.
    workload
        The operator's workload (a conv2d, matmul, ... workload dataclass).
    config
        The hardware.
    space
        The valid knob settings.
    entry
        The operator's registry entry (:class:`compiler.ops.accel_op.AccelOp`): its schedule,
        heuristic knobs and knob dataclass.
    """

    kind: str
    workload: Any
    config: HwConfig
    space: KnobSpace
    entry: Any = field(default=None, repr=False)
    _features: dict[Point, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def signature(self) -> str:
        """The operator signature the tuning log keys records by."""
        return str(self.workload.signature())

    def schedule(self, knobs: Any) -> Schedule:
        """The operator's schedule under ``knobs``.

        Raises
        ------
        compiler.errors.LoweringError
            Knobs the schedule rejects.
        """
        return self.entry.schedule(self.workload, knobs, self.config)  # type: ignore[no-any-return]

    def default_knobs(self) -> Any:
        """The knobs the compiler picks without a tuning log (the analytic heuristic)."""
        return self.entry.default_knobs(self.workload, self.config)

    def knobs_from_dict(self, values: dict[str, int]) -> Any:
        """The knob dataclass of a logged ``{name: value}`` dict (unknown names: TypeError)."""
        return self.entry.knobs_type(**values)

    def features(self, point: Point) -> np.ndarray:
        """The program features of ``point`` (memoised per task; see
        :func:`compiler.tune.features.knob_features`)."""
        cached = self._features.get(point)
        if cached is None:
            from compiler.tune.features import knob_features

            cached = knob_features(self, self.space.knobs(point))
            self._features[point] = cached
        return cached

    def features_of(self, points: list[Point]) -> np.ndarray:
        """Features of several points as an ``(n, N_FEATURES)`` float array."""
        from compiler.tune.features import N_FEATURES

        if not points:
            return np.zeros((0, N_FEATURES))
        return np.stack([self.features(p) for p in points])


def make_task(workload: Any, cfg: HwConfig) -> Task:
    """The task of ``workload`` on ``cfg``, from the registry entry of its workload type.

    Raises
    ------
    compiler.errors.LoweringError
        No knob setting is valid for it on ``cfg``.
    TypeError
        No registered accelerator operator takes that workload.
    """
    entry = accel_op_for(workload)
    if entry is None:
        raise TypeError(f"cannot tune a {type(workload).__name__}; expected the workload of a "
                        "registered accelerator operator (compiler.ops.registry)")
    return Task(entry.kind, workload, cfg, entry.space(workload, cfg), entry)
