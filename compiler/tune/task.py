"""A tuning task: one operator workload on one config, its knob space and its schedule.

The task is what the tuners search and what a measurement callable receives: it knows how to
build the operator's schedule for a knob setting, how to lower it for feature extraction, and
which heuristic knobs the compiler would pick without a tuning log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from accel.machine.config import HwConfig
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload, conv2d_schedule
from compiler.ops.heuristic import default_conv2d_knobs
from compiler.ops.matmul import (
    MatmulKnobs,
    MatmulWorkload,
    default_matmul_knobs,
    matmul_schedule,
)
from compiler.schedule import Schedule
from compiler.tune.space import KnobSpace, Point, conv2d_space, matmul_space

__all__ = ["Task", "make_task"]


@dataclass(eq=False)
class Task:
    """One operator to tune.

    Attributes
    ----------
    kind
        ``"conv2d"`` or ``"matmul"`` (the operator's name in programs and logs).
    workload
        A :class:`~compiler.ops.conv2d.Conv2dWorkload` or
        :class:`~compiler.ops.matmul.MatmulWorkload`.
    config
        The hardware.
    space
        The valid knob settings.
    """

    kind: str
    workload: Conv2dWorkload | MatmulWorkload
    config: HwConfig
    space: KnobSpace
    _features: dict[Point, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def signature(self) -> str:
        """The operator signature the tuning log keys records by."""
        return self.workload.signature()

    def schedule(self, knobs: Conv2dKnobs | MatmulKnobs) -> Schedule:
        """The operator's schedule under ``knobs``.

        Raises
        ------
        compiler.errors.LoweringError
            Knobs the schedule rejects.
        """
        make: Callable[..., Schedule] = (conv2d_schedule if self.kind == "conv2d"
                                         else matmul_schedule)
        return make(self.workload, knobs, self.config)

    def default_knobs(self) -> Conv2dKnobs | MatmulKnobs:
        """The knobs the compiler picks without a tuning log (the analytic heuristic)."""
        if isinstance(self.workload, Conv2dWorkload):
            return default_conv2d_knobs(self.workload, self.config)
        return default_matmul_knobs(self.workload, self.config)

    def knobs_from_dict(self, values: dict[str, int]) -> Conv2dKnobs | MatmulKnobs:
        """The knob dataclass of a logged ``{name: value}`` dict (unknown names: TypeError)."""
        cls = Conv2dKnobs if self.kind == "conv2d" else MatmulKnobs
        return cls(**values)

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


def make_task(workload: Conv2dWorkload | MatmulWorkload, cfg: HwConfig) -> Task:
    """The task of ``workload`` on ``cfg``.

    Raises
    ------
    compiler.errors.LoweringError
        No knob setting is valid for it on ``cfg``.
    TypeError
        Not a conv2d or matmul workload.
    """
    if isinstance(workload, Conv2dWorkload):
        return Task("conv2d", workload, cfg, conv2d_space(workload, cfg))
    if isinstance(workload, MatmulWorkload):
        return Task("matmul", workload, cfg, matmul_space(workload, cfg))
    raise TypeError(f"cannot tune a {type(workload).__name__}; expected a conv2d or matmul "
                    "workload")
