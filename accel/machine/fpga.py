"""FPGA parts as data: what a device offers a design (its budget), from a YAML file per part.

A co-design search (issue 56) asks whether a machine fits a part and how fast the part runs
it; the answer needs the part's resources in the units Yosys counts (:mod:`hw.synth`), so a
device file gives them per primitive::

    description: Lattice ECP5 LFE5U-45F (ULX3S 45F)
    family: ecp5               # the synthesis target: accel synth --target
    part: LFE5U-45F-6BG381C
    clock_mhz: 100             # the clock a design of accel's kind closes at on this part
    luts: {count: 43848, inputs: 4, primitive: LUT4}
    ffs: 43848
    dsp: {count: 72, a_bits: 18, b_bits: 18, primitive: MULT18X18D}
    bram:                      # block RAMs: count, and the shapes one block takes
      count: 108
      kbits: 18
      primitive: DP16KD
      shapes: [[16384, 1], [8192, 2], [4096, 4], [2048, 9], [1024, 18], [512, 36]]
    memory: {bytes_per_cycle: 8}   # the widest DRAM port a machine may have here
    nextpnr: {device: 45k, package: CABGA381}   # ECP5 only: where --pnr places

``shapes`` lists a block's ``[depth, width]`` configurations (the widest in simple dual-port
mode); :meth:`Bram.blocks_for` uses them to count the blocks a memory of a given depth
and width takes. ``memory.bytes_per_cycle`` bounds ``dram.bytes_per_cycle`` of a machine on the
part (a hard memory port's width, or for a part without one the bus the shipped configs
assume). ``clock_mhz`` is an estimate unless a comment in the file says it was measured.

The shipped parts (``accel/configs/devices``): ``ecp5-25f``, ``ecp5-45f``, ``ecp5-85f``,
``zynq-7020``, ``zu3eg``; each file cites its datasheet. :func:`load_device` takes a shipped
name or a path. Every error is one line, ``FILE: KEY: expected X, got Y``
(:class:`DeviceError`, a ``ValueError``), like a config's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.machine import yamlfile

__all__ = ["FAMILIES", "Bram", "DeviceError", "Dsp", "FpgaDevice", "blocks_for", "device_dir",
           "load_device", "parse_device", "shipped_devices"]

FAMILIES = ("ecp5", "ice40", "xilinx")
"""Synthesis targets a part may belong to (``hw.names.SYNTH_TARGETS``)."""

_KEYS = ("description", "family", "part", "clock_mhz", "luts", "ffs", "dsp", "bram", "memory",
         "nextpnr")
_REQUIRED = ("family", "part", "clock_mhz", "luts", "ffs", "dsp", "bram", "memory")


class DeviceError(ValueError):
    """A device file is malformed or names no shipped part; the message is one line."""


@dataclass(frozen=True)
class Dsp:
    """The part's hard multipliers: how many, of what operand widths, which Yosys cell."""

    count: int
    a_bits: int
    b_bits: int
    primitive: str


@dataclass(frozen=True)
class Bram:
    """The part's block RAMs: how many blocks of ``kbits`` each, which Yosys cell, and the
    ``(depth, width)`` shapes one block takes."""

    count: int
    kbits: int
    primitive: str
    shapes: tuple[tuple[int, int], ...]

    def blocks_for(self, depth: int, width: int) -> int:
        """Blocks a ``depth x width`` memory takes (:func:`blocks_for` over this part's
        shapes)."""
        return blocks_for(self.shapes, depth, width)


def blocks_for(shapes: tuple[tuple[int, int], ...], depth: int, width: int) -> int:
    """Blocks of the fewest a ``depth x width`` memory takes when built from one of the
    ``(d, w)`` ``shapes``: ``ceil(depth / d) * ceil(width / w)``, least over the shapes."""
    return min(math.ceil(depth / d) * math.ceil(width / w) for d, w in shapes)


@dataclass(frozen=True)
class FpgaDevice:
    """One FPGA part's budget (module docstring). Build it with :func:`load_device` or
    :func:`parse_device`."""

    name: str
    description: str
    family: str
    part: str
    clock_mhz: float
    luts: int
    lut_inputs: int
    lut_primitive: str
    ffs: int
    dsp: Dsp
    bram: Bram
    memory_bytes_per_cycle: int
    nextpnr: dict[str, str] | None = None
    source: str = field(default="<dict>", compare=False, repr=False)

    def budget(self) -> dict[str, int]:
        """``luts``, ``ffs``, ``dsps``, ``brams``: the counts a synthesis report is held to."""
        return {"luts": self.luts, "ffs": self.ffs, "dsps": self.dsp.count,
                "brams": self.bram.count}

    def to_dict(self) -> dict[str, Any]:
        """The part as YAML-ready data; :func:`parse_device` reads it back."""
        out: dict[str, Any] = {
            "description": self.description, "family": self.family, "part": self.part,
            "clock_mhz": self.clock_mhz,
            "luts": {"count": self.luts, "inputs": self.lut_inputs,
                     "primitive": self.lut_primitive},
            "ffs": self.ffs,
            "dsp": {"count": self.dsp.count, "a_bits": self.dsp.a_bits,
                    "b_bits": self.dsp.b_bits, "primitive": self.dsp.primitive},
            "bram": {"count": self.bram.count, "kbits": self.bram.kbits,
                     "primitive": self.bram.primitive,
                     "shapes": [list(s) for s in self.bram.shapes]},
            "memory": {"bytes_per_cycle": self.memory_bytes_per_cycle},
        }
        if self.nextpnr is not None:
            out["nextpnr"] = dict(self.nextpnr)
        return out


# ---------------------------------------------------------------------- parsing
def _fail(source: str, key: str, expected: str, got: Any) -> DeviceError:
    return DeviceError(f"{source}: {key}: expected {expected}, got {type(got).__name__} {got!r}")


def _count(value: Any, source: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(source, key, "a positive whole number", value)
    return value


def _text(value: Any, source: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(source, key, "a non-empty string", value)
    return value


def _mapping(value: Any, source: str, key: str, keys: tuple[str, ...],
             optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``value`` as a mapping with every key of ``keys`` and any of ``optional``."""
    return yamlfile.require_mapping(value, source, key, keys, DeviceError, optional)


def _shapes(value: Any, source: str, key: str, kbits: int) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or not value:
        raise _fail(source, key, "a list of [depth, width] pairs", value)
    shapes = []
    for i, pair in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise _fail(source, where, "a [depth, width] pair", pair)
        depth, width = (_count(v, source, where) for v in pair)
        if depth * width > kbits * 1024:
            raise _fail(source, where, f"a shape of at most kbits ({kbits}) x 1024 bits",
                        pair)
        shapes.append((depth, width))
    return tuple(shapes)


def parse_device(data: Any, source: str = "<dict>", name: str | None = None) -> FpgaDevice:
    """Validate parsed YAML as a device (module docstring).

    Raises
    ------
    DeviceError
        Unknown or missing key, wrong type or invalid value; one line naming ``source`` and
        the key.
    """
    if not isinstance(data, dict):
        raise _fail(source, "<top>", "a mapping of device fields", data)
    for k in data:
        if k not in _KEYS:
            raise DeviceError(f"{source}: {k}: unknown key; expected one of {', '.join(_KEYS)}")
    for k in _REQUIRED:
        if k not in data:
            raise DeviceError(f"{source}: {k}: missing")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise _fail(source, "description", "a string", description)
    family = data["family"]
    if family not in FAMILIES:
        raise _fail(source, "family", f"one of {', '.join(FAMILIES)}", family)
    clock = data["clock_mhz"]
    if (isinstance(clock, bool) or not isinstance(clock, (int, float))
            or not math.isfinite(clock) or clock <= 0):
        raise _fail(source, "clock_mhz", "a positive number of MHz", clock)
    luts = _mapping(data["luts"], source, "luts", ("count", "inputs", "primitive"))
    dsp = _mapping(data["dsp"], source, "dsp", ("count", "a_bits", "b_bits", "primitive"))
    bram = _mapping(data["bram"], source, "bram", ("count", "kbits", "primitive", "shapes"))
    memory = _mapping(data["memory"], source, "memory", ("bytes_per_cycle",))
    port = _count(memory["bytes_per_cycle"], source, "memory.bytes_per_cycle")
    if port & (port - 1):
        raise _fail(source, "memory.bytes_per_cycle", "a power of two", port)
    nextpnr = data.get("nextpnr")
    if nextpnr is not None:
        if family != "ecp5":
            raise DeviceError(f"{source}: nextpnr: only for family ecp5 (this part's is "
                              f"{family})")
        nextpnr = _mapping(nextpnr, source, "nextpnr", ("device", "package"))
        nextpnr = {k: _text(nextpnr[k], source, f"nextpnr.{k}") for k in ("device", "package")}
    kbits = _count(bram["kbits"], source, "bram.kbits")
    return FpgaDevice(
        name=name or Path(source).stem,
        description=description,
        family=family,
        part=_text(data["part"], source, "part"),
        clock_mhz=float(clock),
        luts=_count(luts["count"], source, "luts.count"),
        lut_inputs=_count(luts["inputs"], source, "luts.inputs"),
        lut_primitive=_text(luts["primitive"], source, "luts.primitive"),
        ffs=_count(data["ffs"], source, "ffs"),
        dsp=Dsp(_count(dsp["count"], source, "dsp.count"),
                _count(dsp["a_bits"], source, "dsp.a_bits"),
                _count(dsp["b_bits"], source, "dsp.b_bits"),
                _text(dsp["primitive"], source, "dsp.primitive")),
        bram=Bram(_count(bram["count"], source, "bram.count"), kbits,
                  _text(bram["primitive"], source, "bram.primitive"),
                  _shapes(bram["shapes"], source, "bram.shapes", kbits)),
        memory_bytes_per_cycle=port,
        nextpnr=nextpnr,
        source=source,
    )


def device_dir() -> Path:
    """Folder of the shipped device files (``accel/configs/devices``)."""
    return Path(__file__).parent.parent / "configs" / "devices"


def shipped_devices() -> list[str]:
    """Names of the shipped parts, loadable with ``load_device(name)``."""
    return sorted(p.stem for p in device_dir().glob("*.yaml"))


def load_device(spec: str | Path) -> FpgaDevice:
    """A shipped part by name (``ecp5-45f``) or a device YAML file by path.

    Raises
    ------
    DeviceError
        No such shipped part or file, unreadable or malformed YAML, or invalid contents.
    """
    text = str(spec)
    path = Path(text)
    if not (isinstance(spec, Path) or path.suffix in (".yaml", ".yml") or path.exists()):
        shipped = device_dir() / f"{text}.yaml"
        if not shipped.exists():
            raise DeviceError(f"{text}: no such shipped device; expected one of "
                              f"{', '.join(shipped_devices())} or a path to a .yaml file")
        path = shipped
    data = yamlfile.read_yaml(path, "device file", DeviceError)
    if data is None:
        raise DeviceError(f"{path}: <top>: expected a mapping of device fields, got empty file")
    return parse_device(data, str(path), name=path.stem)
