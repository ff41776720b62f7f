"""Auto-tuning of accelerator schedules (the TVM paper's automated optimiser).

* :mod:`compiler.tune.space` — knob spaces with a static validity filter;
* :mod:`compiler.tune.task` — a workload on a config: space, schedule, features;
* :mod:`compiler.tune.features` — loop-context features of the lowered program;
* :mod:`compiler.tune.model` — the XGBoost pairwise-rank cost model;
* :mod:`compiler.tune.explorer` — simulated annealing over knob neighbourhoods;
* :mod:`compiler.tune.tuners` — the xgb, random and genetic-algorithm tuners;
* :mod:`compiler.tune.log` — the JSON-lines tuning log the compiler reads.

The tuners measure through a callable they are given (the compiler never imports the
simulators); :func:`runtime.tuning.SimMeasure` measures on the timing simulator.
"""

from __future__ import annotations

from compiler.tune.log import TuningLog, TuningLogError, TuningRecord
from compiler.tune.space import KnobSpace, conv2d_space, matmul_space
from compiler.tune.task import Task, make_task
from compiler.tune.tuners import (
    TUNERS,
    GATuner,
    MeasureResult,
    RandomTuner,
    Trial,
    Tuner,
    TuneResult,
    XGBTuner,
    make_tuner,
)

__all__ = [
    "TUNERS",
    "GATuner",
    "KnobSpace",
    "MeasureResult",
    "RandomTuner",
    "Task",
    "Trial",
    "TuneResult",
    "Tuner",
    "TuningLog",
    "TuningLogError",
    "TuningRecord",
    "XGBTuner",
    "conv2d_space",
    "make_task",
    "make_tuner",
    "matmul_space",
]
