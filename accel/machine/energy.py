"""Energy of a run: action counts times the config's energy table, by component.

:func:`action_energies` turns the config's table (``HwConfig.energy``,
:mod:`accel.machine.energy_table`) into picojoules per action of this machine, at the table's
technology node; :func:`estimate` multiplies them with a run's counts
(:class:`accel.machine.actions.ActionCounts`), its cycles and each module's active cycles.

Components (:data:`COMPONENTS`), in picojoules:

- ``mac``: ``macs * mac_pj(inp_bits, wgt_bits, acc_bits)``;
- ``alu``: per ALU micro-op, ``batch * block_out`` lanes times the operation's energy;
- ``uop``, ``inp``, ``wgt``, ``acc``, ``out``: each buffer's reads and writes, each access
  costed by the SRAM fit at the buffer's size and element width (``uop``: the stored micro-op
  bits; the others: a tile); ``acc`` includes the store's copy of the acc buffer
  (``store.postproc``: an SRAM of the acc buffer's shape, written with every acc write);
- ``dram``: bytes read and written times ``dram.pj_per_byte``, plus transactions times
  ``dram.pj_per_transaction``;
- ``control``: a decode per instruction, the instruction buffer's writes and reads (SRAM of
  ``fetch batch x 16`` bytes, 128 bits wide), command-queue pushes and pops (a 128-bit write or
  read of an SRAM of ``cmd_depth x 16`` bytes), token pushes and pops, the sequencer per
  micro-op issued, and each module's energy per active cycle (a module is taken as
  clock-gated while it has no instruction);
- ``leakage``: per cycle, the leakage of every SRAM (the five buffers, the acc copy with
  ``store.postproc``, the instruction buffer and the three command queues: :func:`sram_kb`)
  and of every module's logic, converted at the config's clock (``uW / MHz`` = pJ per cycle).

Derived figures (:class:`EnergyReport`): microjoules, picojoules per MAC, TOPS/W (two ops per
MAC) and the average power at the config's clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from accel.machine.actions import ALU_OPS, BUFFERS, ActionCounts
from accel.machine.config import HwConfig
from accel.machine.costs import fetch_batch_size
from accel.machine.energy_table import MODULES
from accel.machine.isa import INSN_BYTES

__all__ = ["COMPONENTS", "ActionEnergies", "EnergyReport", "action_energies", "estimate",
           "sram_kb", "sram_shapes"]

COMPONENTS = ("mac", "alu", "uop", "inp", "wgt", "acc", "out", "dram", "control", "leakage")
"""Where the energy goes, in reports' order."""

_DATA_BUFFERS = ("uop", "inp", "wgt", "acc", "out")


def sram_shapes(cfg: HwConfig) -> dict[str, tuple[int, int]]:
    """``(bytes, bits per access)`` of every SRAM of the machine: the five buffers, the acc
    buffer's copy (``acc_copy``, with ``store.postproc``), fetch's instruction buffer
    (``insn``) and the three command queues (``cmd_<module>``)."""
    shapes = {
        "uop": (cfg.uop_depth * cfg.uop_bits // 8, cfg.uop_bits),
        **{b: (cfg.depth(b) * cfg.tile_bytes(b), cfg.tile_bytes(b) * 8)
           for b in ("inp", "wgt", "acc", "out")},
        "insn": (fetch_batch_size(cfg) * INSN_BYTES, INSN_BYTES * 8),
    }
    if cfg.store.postproc:
        shapes["acc_copy"] = shapes["acc"]
    for m in ("load", "compute", "store"):
        shapes[f"cmd_{m}"] = (cfg.queues.cmd_depth * INSN_BYTES, INSN_BYTES * 8)
    return shapes


def sram_kb(cfg: HwConfig) -> float:
    """KB of SRAM that leaks: every array of :func:`sram_shapes`."""
    return sum(size for size, _ in sram_shapes(cfg).values()) / 1024.0


@dataclass(frozen=True)
class ActionEnergies:
    """Picojoules per action of one config at its table's technology node."""

    mac: float
    alu: dict[str, float]           # per ALU micro-op (all its lanes), by operation
    read: dict[str, float]          # per access, by buffer (BUFFERS)
    write: dict[str, float]
    cmd_push: float
    cmd_pop: float
    token: float
    decode: float
    uop: float
    dram_byte: float
    dram_txn: float
    active: dict[str, float]        # per active cycle, by module
    leakage: float                  # per cycle, SRAM and modules

    def to_dict(self) -> dict[str, Any]:
        return {k: dict(v) if isinstance(v, dict) else v for k, v in self.__dict__.items()}


def action_energies(cfg: HwConfig) -> ActionEnergies:
    """The energy of each action of ``cfg``'s machine, from its table (module docstring)."""
    t = cfg.energy
    dyn, leak = t.technology.dynamic_scale, t.technology.leakage_scale
    shapes = sram_shapes(cfg)
    lanes = cfg.batch * cfg.block_out
    p = cfg.precision

    def access(name: str, write: bool) -> float:
        size, bits = shapes.get(name, shapes["acc"])    # acc_copy: absent without postproc
        return dyn * t.sram.access_pj(size, bits, write)

    leak_uw = (t.sram.leakage_uw_per_kb * sram_kb(cfg)
               + sum(t.modules[m].leakage_uw for m in MODULES))
    return ActionEnergies(
        mac=dyn * t.mac_pj(p.inp_bits, p.wgt_bits, p.acc_bits),
        alu={op: dyn * lanes * t.alu_pj[op] for op in ALU_OPS},
        read={b: access(b, False) for b in BUFFERS},
        write={b: access(b, True) for b in BUFFERS},
        cmd_push=access("cmd_compute", True),
        cmd_pop=access("cmd_compute", False),
        token=dyn * t.control.token_pj,
        decode=dyn * t.control.decode_pj,
        uop=dyn * t.control.uop_pj,
        dram_byte=t.dram.pj_per_byte,
        dram_txn=t.dram.pj_per_transaction,
        active={m: dyn * t.modules[m].active_pj_per_cycle for m in MODULES},
        leakage=leak * leak_uw / cfg.clock_mhz,
    )


@dataclass(frozen=True)
class EnergyReport:
    """A run's energy by component (picojoules), with what the derived figures need.

    ``cycles`` and ``macs`` are the run's; ``clock_mhz`` the config's.
    """

    components: dict[str, float]
    cycles: int
    macs: int
    clock_mhz: float

    @property
    def total_pj(self) -> float:
        return sum(self.components.values())

    @property
    def total_uj(self) -> float:
        """Total energy in microjoules."""
        return self.total_pj * 1e-6

    @property
    def pj_per_mac(self) -> float | None:
        """Total energy per MAC (None without MACs)."""
        return self.total_pj / self.macs if self.macs else None

    @property
    def tops_per_w(self) -> float | None:
        """Operations (two per MAC) per joule, in tera: TOPS/W (None without energy)."""
        return 2 * self.macs / (self.total_pj * 1e-12) / 1e12 if self.total_pj else None

    @property
    def power_mw(self) -> float | None:
        """Average power at the config's clock, milliwatts (None without cycles)."""
        if not self.cycles:
            return None
        seconds = self.cycles / (self.clock_mhz * 1e6)
        return self.total_pj * 1e-12 / seconds * 1e3

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: totals and components in microjoules, and the derived figures."""
        return {
            "total_uj": self.total_uj,
            "components_uj": {c: v * 1e-6 for c, v in self.components.items()},
            "pj_per_mac": self.pj_per_mac,
            "tops_per_w": self.tops_per_w,
            "power_mw": self.power_mw,
            "cycles": self.cycles,
            "macs": self.macs,
        }

    @staticmethod
    def total(reports: Iterable[EnergyReport]) -> EnergyReport | None:
        """The sum of several runs (a network's layers), or None when there are none."""
        reports = list(reports)
        if not reports:
            return None
        return EnergyReport(
            {c: sum(r.components[c] for r in reports) for c in COMPONENTS},
            sum(r.cycles for r in reports), sum(r.macs for r in reports),
            reports[0].clock_mhz)


def estimate(actions: ActionCounts, cfg: HwConfig, cycles: int,
             active: Mapping[str, int]) -> EnergyReport:
    """The energy of a run: ``actions`` counted over ``cycles`` cycles, with each module's
    active cycles (``active``: fetch, load, compute, store), on ``cfg``'s machine and table.
    """
    e = action_energies(cfg)
    a = actions
    buffers = {b: a.reads[b] * e.read[b] + a.writes[b] * e.write[b] for b in BUFFERS}
    buffers["acc"] += buffers.pop("acc_copy")
    cmd = sum(a.cmd_pushes.values()) * e.cmd_push + sum(a.cmd_pops.values()) * e.cmd_pop
    tokens = (sum(a.token_pushes.values()) + sum(a.token_pops.values())) * e.token
    control = (a.insns * e.decode + buffers["insn"] + cmd + tokens + a.uops * e.uop
               + sum(active.get(m, 0) * e.active[m] for m in MODULES))
    components = {
        "mac": a.macs * e.mac,
        "alu": sum(a.alu_uops[op] * e.alu[op] for op in ALU_OPS),
        **{b: buffers[b] for b in _DATA_BUFFERS},
        "dram": ((a.dram_read_bytes + a.dram_write_bytes) * e.dram_byte
                 + (a.dram_read_txns + a.dram_write_txns) * e.dram_txn),
        "control": control,
        "leakage": cycles * e.leakage,
    }
    return EnergyReport(components, cycles, a.macs, cfg.clock_mhz)
