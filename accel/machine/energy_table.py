"""The energy table: picojoules per action, from a YAML file of published figures.

A table says what each action the machine counts (:mod:`accel.machine.actions`) costs: a MAC
at the configured precisions, an ALU operation by kind, an access of an on-chip buffer as a
function of its size and width, a DRAM byte and transaction, the control's actions, and
leakage per KB of SRAM and per module. :func:`accel.machine.energy.estimate` multiplies them
with a run's counts. A table is not a hardware parameter: it changes no cycle and no program,
so a config's energy table takes no part in its canonical name or its equality
(``HwConfig.energy``), and no cache depends on it.

The shipped table (``accel/configs/energy/45nm.yaml``, :func:`default_energy_table`) holds
published 45 nm figures with their sources in comments; a table file or a config's inline
``energy:`` section gives only the keys it changes, the others are the shipped table's::

    description: my 28 nm estimate
    technology:   {node_nm: 28, vdd: 0.9, reference_nm: 45, reference_vdd: 0.9}
    mac:          {mult_pj: {8: 0.2, 32: 3.1}, add_pj: {8: 0.03, 32: 0.1}}
    alu_pj:       {MIN: 0.1, MAX: 0.1, ADD: 0.1, SHR: 0.1, MUL: 3.1}     # per 32-bit lane
    sram:         {fit: [{kb: 8, bits: 64, pj: 10}, ...], write_factor: 1.0,
                   leakage_uw_per_kb: 5.0}
    dram:         {pj_per_byte: 243.75, pj_per_transaction: 0}
    control:      {decode_pj: 2.0, uop_pj: 0.25, token_pj: 0.03}
    modules:      {fetch: {active_pj_per_cycle: 1.0, leakage_uw: 5.0}, load: ..., compute: ...,
                   store: ...}

**The SRAM fit.** Published figures give the energy of one access of a given width to an SRAM
of a given size. Per bit read, that energy grows with the array's number of rows (the length
of its bit lines): an array of ``S`` bytes accessed ``w`` bits at a time has ``8 S / w`` rows.
The fit is ``pJ per bit = a * rows ** b``, least squares in log-log space over the table's
points (:meth:`SramModel.fit`); an access of ``w`` bits to a buffer of ``S`` bytes then costs
``w * a * (8 S / w) ** b`` (:meth:`SramModel.access_pj`), a write ``write_factor`` times that.
A wide buffer is so costed as the banks of one row's width a designer builds it from: the
1x8x8 weight buffer (64 KB of 512-bit tiles, 1024 rows) costs per bit what an 8 KB array of
64-bit words does (1024 rows), not what a 64 KB one would.

**Technology scaling.** The figures are published at ``reference_nm`` and ``reference_vdd``;
the table is used at ``node_nm`` and ``vdd``. First-order (classical) scaling: a dynamic
energy is ``C V**2`` with the capacitance ``C`` proportional to the feature size, so every
on-chip dynamic energy is multiplied by ``(node_nm / reference_nm) * (vdd / reference_vdd)**2``
(:attr:`Technology.dynamic_scale`); leakage power is a current through transistors whose width
scales with the feature size, times the supply, so it is multiplied by
``(node_nm / reference_nm) * (vdd / reference_vdd)`` (:attr:`Technology.leakage_scale`).
DRAM energies are the memory device's and are not scaled. Below about 45 nm classical scaling
overestimates the gains (Stillmaker and Baas, "Scaling equations for the accurate prediction of
CMOS device performance from 180 nm to 7 nm", Integration 58, 2017, measure up to 83x
differences) and leakage per transistor grows as thresholds drop: a table for a real node
should carry that node's own figures with ``reference_nm == node_nm``.

Every error is one line, ``FILE: KEY.PATH: expected X, got Y`` (:class:`EnergyError`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.machine.yamlfile import read_yaml, require_mapping

__all__ = [
    "ALU_OPS",
    "MODULES",
    "ArithModel",
    "ControlEnergy",
    "DramEnergy",
    "EnergyError",
    "EnergyTable",
    "ModuleEnergy",
    "SramModel",
    "Technology",
    "default_energy_table",
    "energy_dir",
    "load_energy_table",
    "parse_energy_table",
    "shipped_energy_tables",
]

ALU_OPS = ("MIN", "MAX", "ADD", "SHR", "MUL")
"""The ALU operations (``accel.machine.isa.AluOp`` names), each with an energy per lane."""

MODULES = ("fetch", "load", "compute", "store")
"""The modules, each with an energy per active cycle and a leakage power."""

DEFAULT_TABLE = "45nm"
"""The shipped table every config uses unless it names another."""

_KEYS = ("description", "technology", "mac", "alu_pj", "sram", "dram", "control", "modules")


class EnergyError(ValueError):
    """An energy table is malformed; the message is one line naming file, key, want and got."""


def _fail(source: str, key: str, expected: str, got: Any) -> EnergyError:
    return EnergyError(f"{source}: {key}: expected {expected}, got {type(got).__name__} {got!r}")


def _number(value: Any, source: str, key: str, positive: bool = False) -> float:
    """``value`` as a float: a finite number, non-negative (or positive)."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and (value > 0 if positive else value >= 0))
    if not ok:
        raise _fail(source, key, "a positive number" if positive else "a non-negative number",
                    value)
    return float(value)


def _mapping(value: Any, source: str, key: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """``value`` as a mapping whose keys are all among ``keys``, all of them present."""
    return require_mapping(value, source, key, keys, EnergyError)


@dataclass(frozen=True)
class Technology:
    """The node and supply the table is used at, and those its figures were published at."""

    node_nm: float
    vdd: float
    reference_nm: float
    reference_vdd: float

    @property
    def dynamic_scale(self) -> float:
        """Factor on every on-chip dynamic energy: ``(node / ref) * (vdd / ref_vdd)**2``."""
        return (self.node_nm / self.reference_nm) * (self.vdd / self.reference_vdd) ** 2

    @property
    def leakage_scale(self) -> float:
        """Factor on every leakage power: ``(node / ref) * (vdd / ref_vdd)``."""
        return (self.node_nm / self.reference_nm) * (self.vdd / self.reference_vdd)


@dataclass(frozen=True)
class ArithModel:
    """Energy of an integer operator as a power law of its width, through published points.

    ``points`` are ``(bits, pJ)``; between and beyond them the energy is ``c * bits ** k``,
    fitted through the first and last point (Horowitz gives two per operator). A multiplier of
    ``m x n`` bits is taken at ``bits = sqrt(m * n)``: its energy grows with its partial
    products.
    """

    points: tuple[tuple[int, float], ...]

    def pj(self, bits: float) -> float:
        """Energy of one operation on ``bits``-bit operands (at the reference node)."""
        (b0, e0), (b1, e1) = self.points[0], self.points[-1]
        if b0 == b1:
            return e0
        k = math.log(e1 / e0) / math.log(b1 / b0)
        return e0 * (bits / b0) ** k


@dataclass(frozen=True)
class SramModel:
    """SRAM access energy from published points, and SRAM leakage (module docstring)."""

    points: tuple[tuple[float, int, float], ...]
    """``(KB, bits per access, pJ per access)`` of published SRAMs."""
    write_factor: float
    """A write's energy over a read's of the same width."""
    leakage_uw_per_kb: float
    """Leakage power per KB of SRAM (at the reference node)."""

    @functools.cached_property
    def fit(self) -> tuple[float, float]:
        """``(a, b)`` of ``pJ per bit = a * rows ** b``: least squares in log-log space."""
        xs = [math.log(kb * 1024 * 8 / bits) for kb, bits, _ in self.points]
        ys = [math.log(pj / bits) for _, bits, pj in self.points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        b = (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
             / sum((x - mx) ** 2 for x in xs))
        return math.exp(my - b * mx), b

    def access_pj(self, size_bytes: int, width_bits: int, write: bool = False) -> float:
        """One access of ``width_bits`` to an SRAM of ``size_bytes`` (at the reference node)."""
        a, b = self.fit
        rows = max(1.0, size_bytes * 8 / width_bits)
        pj = width_bits * a * rows ** b
        return pj * self.write_factor if write else pj


@dataclass(frozen=True)
class DramEnergy:
    """Off-chip DRAM: energy per byte moved and per transaction (not scaled with the node)."""

    pj_per_byte: float
    pj_per_transaction: float


@dataclass(frozen=True)
class ControlEnergy:
    """Energy of the control's actions: decoding an instruction, issuing a micro-op (the
    sequencer's loop counters and index adders), a token push or pop."""

    decode_pj: float
    uop_pj: float
    token_pj: float


@dataclass(frozen=True)
class ModuleEnergy:
    """One module's clock and control registers per cycle it executes an instruction, and its
    logic's leakage power (the buffers' leakage is the SRAM's)."""

    active_pj_per_cycle: float
    leakage_uw: float


@dataclass(frozen=True)
class EnergyTable:
    """A complete, validated energy table (module docstring). Build one with
    :func:`load_energy_table` or :func:`parse_energy_table`; ``source`` names where it came
    from, for messages only (no part in equality)."""

    description: str
    technology: Technology
    mult: ArithModel
    add: ArithModel
    alu_pj: dict[str, float]
    sram: SramModel
    dram: DramEnergy
    control: ControlEnergy
    modules: dict[str, ModuleEnergy]
    source: str = field(default="<dict>", compare=False, repr=False)

    def mac_pj(self, inp_bits: int, wgt_bits: int, acc_bits: int) -> float:
        """One MAC at the reference node: an ``inp_bits x wgt_bits`` multiply and an
        ``acc_bits`` add (the accumulation)."""
        return self.mult.pj(math.sqrt(inp_bits * wgt_bits)) + self.add.pj(acc_bits)

    def to_dict(self) -> dict[str, Any]:
        """The table as YAML-ready data; :func:`parse_energy_table` reads it back."""
        return {
            "description": self.description,
            "technology": {"node_nm": self.technology.node_nm, "vdd": self.technology.vdd,
                           "reference_nm": self.technology.reference_nm,
                           "reference_vdd": self.technology.reference_vdd},
            "mac": {"mult_pj": dict(self.mult.points), "add_pj": dict(self.add.points)},
            "alu_pj": dict(self.alu_pj),
            "sram": {"fit": [{"kb": kb, "bits": bits, "pj": pj}
                             for kb, bits, pj in self.sram.points],
                     "write_factor": self.sram.write_factor,
                     "leakage_uw_per_kb": self.sram.leakage_uw_per_kb},
            "dram": {"pj_per_byte": self.dram.pj_per_byte,
                     "pj_per_transaction": self.dram.pj_per_transaction},
            "control": {"decode_pj": self.control.decode_pj, "uop_pj": self.control.uop_pj,
                        "token_pj": self.control.token_pj},
            "modules": {m: {"active_pj_per_cycle": e.active_pj_per_cycle,
                            "leakage_uw": e.leakage_uw} for m, e in self.modules.items()},
        }


# ---------------------------------------------------------------------- parsing
def _arith(value: Any, source: str, key: str) -> ArithModel:
    if not isinstance(value, dict) or not value:
        raise _fail(source, key, "a mapping of operand bits to pJ, such as {8: 0.2, 32: 3.1}",
                    value)
    points = []
    for bits, pj in value.items():
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < 1:
            raise _fail(source, f"{key}.{bits}", "a positive whole number of bits as the key",
                        bits)
        points.append((bits, _number(pj, source, f"{key}.{bits}", positive=True)))
    return ArithModel(tuple(sorted(points)))


def _sram(value: Any, source: str, key: str) -> SramModel:
    v = _mapping(value, source, key, ("fit", "write_factor", "leakage_uw_per_kb"))
    fit = v["fit"]
    if not isinstance(fit, list) or len(fit) < 2:
        raise _fail(source, f"{key}.fit", "a list of at least two points {kb, bits, pj}", fit)
    points = []
    for i, point in enumerate(fit):
        where = f"{key}.fit[{i}]"
        p = _mapping(point, source, where, ("kb", "bits", "pj"))
        bits = p["bits"]
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < 1:
            raise _fail(source, f"{where}.bits", "a positive whole number of bits", bits)
        points.append((_number(p["kb"], source, f"{where}.kb", positive=True), bits,
                       _number(p["pj"], source, f"{where}.pj", positive=True)))
    if len({kb * 8192 / bits for kb, bits, _ in points}) < 2:
        raise _fail(source, f"{key}.fit", "points of at least two different depths (KB * 8192 "
                    "/ bits rows) to fit", fit)
    return SramModel(tuple(points),
                     _number(v["write_factor"], source, f"{key}.write_factor", positive=True),
                     _number(v["leakage_uw_per_kb"], source, f"{key}.leakage_uw_per_kb"))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) \
            else v
    return out


def _build(data: dict[str, Any], source: str, prefix: str) -> EnergyTable:
    """A table from complete data; keys in messages are prefixed with ``prefix``."""
    def k(name: str) -> str:
        return f"{prefix}{name}"

    for name in data:
        if name not in _KEYS:
            raise EnergyError(f"{source}: {k(str(name))}: unknown key; expected one of "
                              f"{', '.join(_KEYS)}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise _fail(source, k("description"), "a string", description)
    t = _mapping(data["technology"], source, k("technology"),
                 ("node_nm", "vdd", "reference_nm", "reference_vdd"))
    technology = Technology(*(_number(t[n], source, k(f"technology.{n}"), positive=True)
                              for n in ("node_nm", "vdd", "reference_nm", "reference_vdd")))
    mac = _mapping(data["mac"], source, k("mac"), ("mult_pj", "add_pj"))
    alu = _mapping(data["alu_pj"], source, k("alu_pj"), ALU_OPS)
    dram = _mapping(data["dram"], source, k("dram"), ("pj_per_byte", "pj_per_transaction"))
    control = _mapping(data["control"], source, k("control"),
                       ("decode_pj", "uop_pj", "token_pj"))
    modules = _mapping(data["modules"], source, k("modules"), MODULES)
    module_energy = {}
    for m in MODULES:
        e = _mapping(modules[m], source, k(f"modules.{m}"), ("active_pj_per_cycle",
                                                              "leakage_uw"))
        module_energy[m] = ModuleEnergy(
            _number(e["active_pj_per_cycle"], source, k(f"modules.{m}.active_pj_per_cycle")),
            _number(e["leakage_uw"], source, k(f"modules.{m}.leakage_uw")))
    return EnergyTable(
        description=description,
        technology=technology,
        mult=_arith(mac["mult_pj"], source, k("mac.mult_pj")),
        add=_arith(mac["add_pj"], source, k("mac.add_pj")),
        alu_pj={op: _number(alu[op], source, k(f"alu_pj.{op}")) for op in ALU_OPS},
        sram=_sram(data["sram"], source, k("sram")),
        dram=DramEnergy(_number(dram["pj_per_byte"], source, k("dram.pj_per_byte")),
                        _number(dram["pj_per_transaction"], source,
                                k("dram.pj_per_transaction"))),
        control=ControlEnergy(*(_number(control[n], source, k(f"control.{n}"))
                                for n in ("decode_pj", "uop_pj", "token_pj"))),
        modules=module_energy,
        source=source,
    )


def parse_energy_table(data: Any, source: str = "<dict>", prefix: str = "") -> EnergyTable:
    """Validate parsed YAML as a table: the keys it gives over the shipped default's.

    Parameters
    ----------
    data
        A mapping in the table's layout (module docstring); absent keys keep the default's.
    source
        Where it came from (a file), for messages.
    prefix
        Put before every key in messages (``"energy."`` for a config's inline section).

    Raises
    ------
    EnergyError
        Unknown key, wrong type or invalid value; one line naming ``source`` and the key.
    """
    if not isinstance(data, dict):
        raise _fail(source, prefix.rstrip(".") or "<top>", "a mapping of energy table sections",
                    data)
    for name in data:
        if name not in _KEYS:
            raise EnergyError(f"{source}: {prefix}{name}: unknown key; expected one of "
                              f"{', '.join(_KEYS)}")
    return _build(_merge(_default_data(), data), source, prefix)


def energy_dir() -> Path:
    """Folder of the shipped energy tables (``accel/configs/energy``)."""
    return Path(__file__).parent.parent / "configs" / "energy"


def shipped_energy_tables() -> list[str]:
    """Names of the shipped tables, loadable with ``load_energy_table(name)``."""
    return sorted(p.stem for p in energy_dir().glob("*.yaml"))


def _read(path: Path) -> Any:
    data = read_yaml(path, "energy table", EnergyError, missing="no such energy table file")
    if data is None:
        raise EnergyError(f"{path}: <top>: expected a mapping of energy table sections, got "
                          "empty file")
    return data


@functools.cache
def _default_data() -> dict[str, Any]:
    """The shipped default table as data, complete (every key present)."""
    path = energy_dir() / f"{DEFAULT_TABLE}.yaml"
    data = _read(path)
    _build(data, str(path), "")          # the default must be complete on its own
    return data


@functools.cache
def default_energy_table() -> EnergyTable:
    """The shipped default table (``accel/configs/energy/45nm.yaml``)."""
    return parse_energy_table(_default_data(), str(energy_dir() / f"{DEFAULT_TABLE}.yaml"))


def load_energy_table(spec: str | Path, relative_to: Path | None = None) -> EnergyTable:
    """Load a table: a shipped name (``"45nm"``) or a YAML path (relative paths against
    ``relative_to`` when given, such as the folder of the config that names the table).

    Raises
    ------
    EnergyError
        No such shipped table or file, unreadable, or invalid contents.
    """
    text = str(spec)
    path = Path(text)
    is_path = isinstance(spec, Path) or path.suffix in (".yaml", ".yml") or "/" in text
    if not is_path:
        shipped = energy_dir() / f"{text}.yaml"
        if not shipped.exists():
            raise EnergyError(f"{text}: no such shipped energy table; expected one of "
                              f"{', '.join(shipped_energy_tables())} or a path to a .yaml file")
        path = shipped
    elif relative_to is not None and not path.is_absolute():
        path = relative_to / path
    return parse_energy_table(_read(path), str(path))
