"""The machine contract: what every part of accel agrees on, and imports nothing else of it.

- :mod:`~accel.machine.config`: ``HwConfig``, loaded from YAML and validated once;
- :mod:`~accel.machine.layout` and :mod:`~accel.machine.isa`: the instruction set, its bit
  layouts and encode/decode;
- :mod:`~accel.machine.program`: ``Program`` (instructions, micro-ops, DRAM regions), its
  validation, binary file and assembly text, and the errors of running one;
- :mod:`~accel.machine.dram`: the DRAM byte image and the blocked tensor layouts;
- :mod:`~accel.machine.builder`: ``ProgramBuilder`` for hand-written programs;
- :mod:`~accel.machine.costs`: the cycle cost of every instruction;
- :mod:`~accel.machine.actions`: the actions that cost energy, counted per instruction as the
  RTL counts them; :mod:`~accel.machine.energy_table`: the energy table (picojoules per
  action, YAML); :mod:`~accel.machine.energy`: counts times the table, by component;
- :mod:`~accel.machine.tokens`: the token protocol run without time (the order instructions may
  retire in, deadlocks and leftovers named), and a program's placement in DRAM;
- :mod:`~accel.machine.cache`: the on-disk cache folders every engine keys by what produced
  an entry.

The compiler, the simulators and the RTL import from here and nowhere above. The names
re-exported here load on first use (:mod:`~accel.machine.lazy`).
"""

from accel.machine.lazy import lazy_exports

# Loaded on first use: ``import accel.machine.config`` loads the config alone (no numpy).
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "accel.machine.config": ("ConfigError", "HwConfig", "load_config", "shipped_configs"),
    "accel.machine.program": ("Program", "ProgramError", "ProgramFormatError", "Region",
                              "SimulationDeadlock", "SimulationError"),
})
