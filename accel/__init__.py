"""accel: a hardware/software co-design toolkit for VTA-style deep-learning accelerators.

The shared contract (``HwConfig``, the ISA, ``Program``) and the user's entry points.
Heavy subsystems are imported lazily by the entry points that need them.
"""

from accel.api import (
    Report,
    add,
    compile,
    conv2d,
    load_model,
    matmul,
    run_program,
    sample_inputs,
)
from accel.config import ConfigError, HwConfig, load_config, shipped_configs
from accel.program import Program, ProgramError, ProgramFormatError, Region

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
