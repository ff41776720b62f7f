"""Design-space exploration: sweep specs, the sweep runner, results files and area per point.

    spec = load_spec("configs/sweeps/small.yaml")       # validated, one-line SpecError
    summary = run_sweep(spec, "out/small", workers=2)   # or scheduler="tcp://host:8786"
    rows = read_results("out/small")                    # typed dicts, one per row

``accel sweep SPEC --out DIR`` is the command-line form. The results' columns are listed in
:mod:`accel.dse.results`.
"""

from __future__ import annotations

from accel.dse.results import ResultsError, columns, read_results
from accel.dse.runner import PointResult, SweepError, SweepSummary, run_point, run_sweep
from accel.dse.spec import (
    BACKENDS,
    METRICS,
    Point,
    SpecError,
    SweepSpec,
    expand,
    load_spec,
    parse_spec,
)

__all__ = [
    "BACKENDS",
    "METRICS",
    "Point",
    "PointResult",
    "ResultsError",
    "SpecError",
    "SweepError",
    "SweepSpec",
    "SweepSummary",
    "columns",
    "expand",
    "load_spec",
    "parse_spec",
    "read_results",
    "run_point",
    "run_sweep",
]
