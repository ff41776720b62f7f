"""accel: a hardware/software co-design toolkit for VTA-style deep-learning accelerators.

The user's entry: the Python API (:mod:`accel.api`), the ``accel`` command line, sweeps
(:mod:`accel.dse`) and plots. The machine contract lives in :mod:`accel.machine`; its main
names are importable from here too. Every name here loads on first use
(:mod:`accel.machine.lazy`): importing the contract (``accel.machine``), which runs this file
first, loads nothing else, and ``accel --help`` loads neither numpy nor the API.
"""

from __future__ import annotations

from accel.machine.lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "accel.machine.config": ("ConfigError", "HwConfig", "load_config", "shipped_configs"),
    "accel.machine.program": ("Program", "ProgramError", "ProgramFormatError", "Region"),
    "accel.api": ("Report", "add", "compile", "conv2d", "load_model", "matmul", "run_program",
                  "sample_inputs"),
})
