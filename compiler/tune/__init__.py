"""Auto-tuning of accelerator schedules (the TVM paper's automated optimiser).

* :mod:`compiler.tune.task` — a workload on a config: space, schedule, features;
* :mod:`compiler.tune.features` — loop-context features of the lowered program;
* :mod:`compiler.tune.model` — the XGBoost pairwise-rank cost model;
* :mod:`compiler.tune.explorer` — simulated annealing over knob neighbourhoods;
* :mod:`compiler.tune.tuners` — the xgb, random and genetic-algorithm tuners.

The knob spaces they search (:mod:`compiler.ops.space`, with a static validity filter) and the
JSON-lines tuning log they append to and the compiler reads (:mod:`compiler.ops.tuning_log`)
belong to the operators, below this package.

The tuners measure through a callable they are given (the compiler never imports the
simulators); :func:`runtime.tuning.SimMeasure` measures on the timing simulator.
"""

from __future__ import annotations

from accel.machine.lazy import lazy_exports

# Loaded on first use: ``accel --help`` imports compiler.tune.names alone.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "compiler.tune.task": ("Task", "make_task"),
    "compiler.tune.tuners": ("TUNERS", "GATuner", "MeasureResult", "RandomTuner", "Trial",
                             "TuneResult", "Tuner", "XGBTuner", "make_tuner"),
})
