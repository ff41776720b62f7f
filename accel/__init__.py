"""accel: a hardware/software co-design toolkit for VTA-style deep-learning accelerators.

The user's entry: the Python API (:mod:`accel.api`), the ``accel`` command line, sweeps
(:mod:`accel.dse`) and plots. The machine contract lives in :mod:`accel.machine`; its main
names are importable from here too. The API's names load on first use, so that importing the
contract (``accel.machine``), which runs this file first, loads nothing else.
"""

from __future__ import annotations

from typing import Any

from accel.machine import (
    ConfigError,
    HwConfig,
    Program,
    ProgramError,
    ProgramFormatError,
    Region,
    load_config,
    shipped_configs,
)

_API = ("Report", "add", "compile", "conv2d", "load_model", "matmul", "run_program",
        "sample_inputs")

__all__ = [
    "ConfigError",
    "HwConfig",
    "Program",
    "ProgramError",
    "ProgramFormatError",
    "Region",
    "Report",
    "add",
    "compile",
    "conv2d",
    "load_config",
    "load_model",
    "matmul",
    "run_program",
    "sample_inputs",
    "shipped_configs",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _API:
        from accel import api

        return getattr(api, name)
    raise AttributeError(f"module 'accel' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
