"""The hardware configuration: one frozen, validated object that every layer takes explicitly.

A config is loaded from YAML (``accel.load_config``), validated once, and then never changes;
variants come from a YAML file or ``HwConfig.replace``. Every derived quantity - buffer depths in
tiles, index widths, instruction field widths, bytes per tile, peak MACs - is a property here,
so the compiler, the simulators and the RTL can never disagree about them.

YAML layout (every section optional except ``core``; absent keys take the defaults below)::

    core:      {batch: 1, block_in: 8, block_out: 8}
    precision: {inp_bits: 8, wgt_bits: 8, acc_bits: 32}
    buffers:   {uop: 8192, inp: 32768, wgt: 65536, acc: 65536}     # bytes
    queues:    {cmd_depth: 512, token_depth: 256}                  # entries
    dram:      {bytes_per_cycle: 8, latency: 32, max_burst: 256}   # bytes, cycles, bytes
    clock_mhz: 100
    gemm:      {ii: 1, depth: 5}                                   # cycles
    alu:       {ii: 2, depth: 4}                                   # cycles
    isa:       {iter_bits: 14, dram_addr_bits: 32, size_bits: 16, pad_bits: 4}
    energy:    45nm        # an energy table: shipped name, YAML path, or an inline mapping

``energy`` is not a hardware parameter (:mod:`accel.machine.energy_table`): it changes no cycle
and no program, so it takes no part in the canonical name or in equality, and keys no cache.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from accel.machine import yamlfile
from accel.machine.energy_table import (
    EnergyError,
    EnergyTable,
    default_energy_table,
    load_energy_table,
    parse_energy_table,
)
from accel.machine.layout import IsaLayout

__all__ = [
    "DRAM_ARBITERS",
    "FEATURE_TAGS",
    "INSN_BITS",
    "MAX_OUTSTANDING",
    "Buffers",
    "ConfigError",
    "CoreShape",
    "DramConfig",
    "GemmConfig",
    "HwConfig",
    "IsaWidths",
    "Pipeline",
    "Precision",
    "Queues",
    "StoreConfig",
    "config_dir",
    "field_kind",
    "load_config",
    "parse_yaml",
    "shipped_configs",
]

INSN_BITS = 128
"""Width of one instruction word in bits (VTA-compatible)."""

MAX_UOP_BITS = 64


class ConfigError(ValueError):
    """A hardware config is malformed; the message is one line naming file, key, want and got."""


@dataclass(frozen=True)
class CoreShape:
    """GEMM core shape: ``batch x block_in`` inputs times ``block_out x block_in`` weights."""

    batch: int = 1
    block_in: int = 8
    block_out: int = 8


@dataclass(frozen=True)
class Precision:
    """Element widths in bits of inputs, weights and accumulators."""

    inp_bits: int = 8
    wgt_bits: int = 8
    acc_bits: int = 32


@dataclass(frozen=True)
class Buffers:
    """On-chip SRAM sizes in bytes. The out buffer has the acc buffer's depth, int8 elements."""

    uop: int = 8192
    inp: int = 32768
    wgt: int = 65536
    acc: int = 65536


@dataclass(frozen=True)
class Queues:
    """Depths (entries) of the three command queues and the four dependency-token queues."""

    cmd_depth: int = 512
    token_depth: int = 256


MAX_OUTSTANDING = 16
"""The most DRAM requests the RTL keeps in flight (``dram.max_outstanding``); the 2018 design's
HLS AXI masters kept up to 16 reads in flight."""

DRAM_ARBITERS = ("priority", "round_robin")
"""``dram.arbiter``: fixed priority (fetch, load, compute, store) or round robin."""


@dataclass(frozen=True)
class DramConfig:
    """The DRAM channel (see ``accel.machine.costs`` for its timing).

    ``bytes_per_cycle`` is the width of the one data bus, ``latency`` the cycles from a read's
    grant to its first beat (and from a write's last beat to its response), ``max_burst`` the
    largest transaction in bytes. ``max_outstanding`` transactions may be in flight at once
    (1: each waits for the one before to finish, the original channel); ``arbiter`` picks among
    the requesters asking in a cycle. ``axi_id_bits`` is the width of the AXI ID signals of
    the AXI-wrapped design (``accel verilog --axi``, ``hw.axi``); it uses ID 0 alone, so the
    width changes the ports and nothing of the machine.
    """

    bytes_per_cycle: int = 8
    latency: int = 32
    max_burst: int = 256
    max_outstanding: int = 1
    arbiter: str = "priority"
    merge_rows: bool = False
    axi_id_bits: int = 1


@dataclass(frozen=True)
class StoreConfig:
    """The store module.

    With ``postproc`` a STORE may read the acc buffer (``STORE ACC``) and, on the way to DRAM,
    shift each element right, clip it and narrow it to ``out_bits`` (the requantisation that
    otherwise takes ALU instructions); off, STORE reads the out buffer only (the original store
    module). The RTL keeps a copy of the acc buffer for the store to read (the acc RAM's two
    ports are the compute module's), so the option costs the acc buffer's size again in block
    RAM.
    """

    postproc: bool = False
    out_bits: int = 8


@dataclass(frozen=True)
class Pipeline:
    """A pipelined unit: one micro-op every ``ii`` cycles, results ``depth`` cycles later."""

    ii: int = 1
    depth: int = 4


@dataclass(frozen=True)
class GemmConfig(Pipeline):
    """The GEMM core: a :class:`Pipeline`, and with ``reset_from_acc`` a GEMM reset may copy an
    acc tile (a bias) into its accumulators instead of zeros (``GemmInsn.from_acc``), so that
    the accumulation starts from the bias with no ALU ADD; off: a reset writes zeros only (the
    original core). ``lut_macs`` of the array's MACs (the last ones, in ``(batch, out, in)``
    order) multiply in LUTs and carry chains instead of hard multiplier blocks, so that an
    FPGA part's blocks need not bound the array: the same products in the same cycles, so no
    engine but the RTL and the area model sees it; 0: every MAC on a block (the original)."""

    reset_from_acc: bool = False
    lut_macs: int = 0


@dataclass(frozen=True)
class IsaWidths:
    """Instruction field widths that do not follow from buffer sizes."""

    iter_bits: int = 14
    dram_addr_bits: int = 32
    size_bits: int = 16
    pad_bits: int = 4
    imm_bits: int = 16


_SECTIONS: dict[str, type] = {
    "core": CoreShape,
    "precision": Precision,
    "buffers": Buffers,
    "queues": Queues,
    "dram": DramConfig,
    "gemm": GemmConfig,
    "alu": Pipeline,
    "isa": IsaWidths,
    "store": StoreConfig,
}
_SECTION_DEFAULTS: dict[str, Any] = {
    "gemm": GemmConfig(ii=1, depth=5),
    "alu": Pipeline(ii=2, depth=4),
}
_STRUCTURAL = ("core", "precision", "buffers")

FEATURE_TAGS: dict[tuple[str, str], Any] = {
    ("dram", "max_outstanding"): lambda n: f"o{n}" if n != 1 else "",
    ("dram", "arbiter"): lambda a: "rr" if a == "round_robin" else "",
    ("dram", "merge_rows"): lambda on: "mr" if on else "",
    ("store", "postproc"): lambda on: "pp" if on else "",
    ("gemm", "reset_from_acc"): lambda on: "ra" if on else "",
    ("gemm", "lut_macs"): lambda n: f"lm{n}" if n else "",
}
"""Machine features spelled out in :attr:`HwConfig.name` when they are not the original
machine's: ``(section, field) -> tag of the value`` (empty for the original)."""

_UNHASHED = (("gemm", "lut_macs"), ("dram", "axi_id_bits"))
"""Features of :data:`FEATURE_TAGS` newer than the name's hash, left out of the data it hashes,
so that every config written before them keeps its name."""


def _log2(n: int) -> int:
    return max(1, (n - 1).bit_length())


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _size_tag(nbytes: int) -> str:
    if nbytes % (1 << 20) == 0:
        return f"{nbytes >> 20}m"
    if nbytes % 1024 == 0:
        return f"{nbytes >> 10}k"
    return str(nbytes)


@dataclass(frozen=True)
class HwConfig:
    """A complete, validated accelerator configuration.

    Build one with :func:`load_config` or :meth:`from_dict`; direct construction also validates.
    ``source`` names where it came from (a file path or ``<dict>``) and is used in error messages
    only; it does not take part in equality.
    """

    core: CoreShape = field(default_factory=CoreShape)
    precision: Precision = field(default_factory=Precision)
    buffers: Buffers = field(default_factory=Buffers)
    queues: Queues = field(default_factory=Queues)
    dram: DramConfig = field(default_factory=DramConfig)
    clock_mhz: float = 100.0
    gemm: GemmConfig = field(default_factory=lambda: GemmConfig(ii=1, depth=5))
    alu: Pipeline = field(default_factory=lambda: Pipeline(ii=2, depth=4))
    isa: IsaWidths = field(default_factory=IsaWidths)
    store: StoreConfig = field(default_factory=StoreConfig)
    description: str = ""
    energy: EnergyTable = field(default_factory=default_energy_table, compare=False, repr=False)
    """The energy table (not a hardware parameter: no part in equality or the name)."""
    source: str = field(default="<dict>", compare=False, repr=False)

    def __post_init__(self) -> None:
        _validate(self)

    def __hash__(self) -> int:
        """The fields' hash (those that take part in equality), computed once: configs key
        the contract's and the compiler's caches, asked hundreds of thousands of times in a
        knob search. Not pickled (:meth:`__getstate__`): string hashes differ by process."""
        known = self.__dict__.get("_hash")
        if known is None:
            known = hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
            object.__setattr__(self, "_hash", known)
        return known

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> HwConfig:
        """Build and validate a config from a parsed YAML mapping.

        Raises
        ------
        ConfigError
            Unknown key, wrong type or invalid value; the message names ``source`` and the key.
        """
        if not isinstance(data, dict):
            raise ConfigError(
                f"{source}: <top>: expected a mapping of config sections, "
                f"got {type(data).__name__}"
            )
        kwargs: dict[str, Any] = {"source": source}
        known = {f.name for f in fields(cls)} - {"source"}
        for key, value in data.items():
            if key not in known:
                raise ConfigError(
                    f"{source}: {key}: unknown key; expected one of {', '.join(sorted(known))}"
                )
            if key in _SECTIONS:
                kwargs[key] = _section(_SECTIONS[key], value, key, source)
            elif key == "clock_mhz":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ConfigError(
                        f"{source}: clock_mhz: expected a number of MHz, "
                        f"got {type(value).__name__} {value!r}"
                    )
                kwargs[key] = float(value)
            elif key == "description":
                if not isinstance(value, str):
                    raise ConfigError(
                        f"{source}: description: expected a string, got {type(value).__name__}"
                    )
                kwargs[key] = value
            elif key == "energy":
                kwargs[key] = _energy(value, source)
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain YAML-ready data (round-trips through :meth:`from_dict`).

        The energy table is included (as data) only when it is not the shipped default, so
        that the data of every config that does not name one is what it was before tables
        existed (sweep digests hash it); so are the fields of ``_UNHASHED`` at their original
        values.
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("source", "energy"):
                continue
            value = getattr(self, f.name)
            out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
        if not self.description:
            del out["description"]
        for section, leaf in _UNHASHED:  # at their original value: the data as before them
            if out[section][leaf] == getattr(_SECTIONS[section](), leaf):
                del out[section][leaf]
        if self.energy != default_energy_table():
            out["energy"] = self.energy.to_dict()
        return out

    def replace(self, **changes: Any) -> HwConfig:
        """A validated copy with some fields replaced; dotted keys reach into sections.

        ``cfg.replace(**{"buffers.wgt": 32768, "clock_mhz": 200})``; ``energy=`` takes a table,
        a shipped table name, a path or a mapping (the copy keeps this config's table otherwise).
        """
        data = self.to_dict()
        data["energy"] = self.energy
        for key, value in changes.items():
            section, _, leaf = key.partition(".")
            if leaf:
                if not isinstance(data.get(section), dict):
                    raise ConfigError(f"{self.source}: {key}: unknown section {section!r}")
                data[section][leaf] = value
            else:
                data[key] = value
        return HwConfig.from_dict(data, source=f"{self.source} (replaced)")

    # ------------------------------------------------------------------ shape shortcuts
    @property
    def batch(self) -> int:
        return self.core.batch

    @property
    def block_in(self) -> int:
        return self.core.block_in

    @property
    def block_out(self) -> int:
        return self.core.block_out

    # ------------------------------------------------------------------ tile sizes (bytes)
    @functools.cached_property
    def inp_tile_bytes(self) -> int:
        """Bytes of one input tile, ``batch x block_in`` elements."""
        return self.batch * self.block_in * self.precision.inp_bits // 8

    @functools.cached_property
    def wgt_tile_bytes(self) -> int:
        """Bytes of one weight tile, ``block_out x block_in`` elements."""
        return self.block_out * self.block_in * self.precision.wgt_bits // 8

    @functools.cached_property
    def acc_tile_bytes(self) -> int:
        """Bytes of one accumulator tile, ``batch x block_out`` elements."""
        return self.batch * self.block_out * self.precision.acc_bits // 8

    @functools.cached_property
    def out_tile_bytes(self) -> int:
        """Bytes of one output tile, ``batch x block_out`` int8 elements."""
        return self.batch * self.block_out * self.precision.inp_bits // 8

    @functools.cached_property
    def uop_bits(self) -> int:
        """Bits of one packed micro-op: dst (acc), src (inp or acc) and wgt indices."""
        return self.acc_index_bits + self.src_index_bits + self.wgt_index_bits

    @functools.cached_property
    def uop_bytes(self) -> int:
        """Bytes of one micro-op word in the uop buffer and in DRAM (4 or 8)."""
        return 4 if self.uop_bits <= 32 else 8

    @functools.cached_property
    def _tile_bytes(self) -> dict[str, int]:
        return {
            "uop": self.uop_bytes,
            "inp": self.inp_tile_bytes,
            "wgt": self.wgt_tile_bytes,
            "acc": self.acc_tile_bytes,
            "out": self.out_tile_bytes,
        }

    def tile_bytes(self, buffer: str) -> int:
        """Bytes of one element (tile or micro-op) of ``buffer`` (uop, inp, wgt, acc, out)."""
        return self._tile_bytes[buffer]

    # ------------------------------------------------------------------ depths (tiles)
    @functools.cached_property
    def uop_depth(self) -> int:
        """Micro-ops the uop buffer holds."""
        return self.buffers.uop // self.uop_bytes

    @functools.cached_property
    def inp_depth(self) -> int:
        return self.buffers.inp // self.inp_tile_bytes

    @functools.cached_property
    def wgt_depth(self) -> int:
        return self.buffers.wgt // self.wgt_tile_bytes

    @functools.cached_property
    def acc_depth(self) -> int:
        return self.buffers.acc // self.acc_tile_bytes

    @functools.cached_property
    def out_depth(self) -> int:
        """The out buffer mirrors the acc buffer tile for tile."""
        return self.acc_depth

    @functools.cached_property
    def _depths(self) -> dict[str, int]:
        return {
            "uop": self.uop_depth,
            "inp": self.inp_depth,
            "wgt": self.wgt_depth,
            "acc": self.acc_depth,
            "out": self.out_depth,
        }

    def depth(self, buffer: str) -> int:
        """Depth in elements of ``buffer`` (uop, inp, wgt, acc, out)."""
        return self._depths[buffer]

    # ------------------------------------------------------------------ index widths (bits)
    @functools.cached_property
    def inp_index_bits(self) -> int:
        return _log2(self.buffers.inp // self.inp_tile_bytes)

    @functools.cached_property
    def wgt_index_bits(self) -> int:
        return _log2(self.buffers.wgt // self.wgt_tile_bytes)

    @functools.cached_property
    def acc_index_bits(self) -> int:
        return _log2(self.buffers.acc // self.acc_tile_bytes)

    @functools.cached_property
    def src_index_bits(self) -> int:
        """A micro-op's src is an inp index (GEMM) or an acc index (ALU)."""
        return max(self.inp_index_bits, self.acc_index_bits)

    @functools.cached_property
    def uop_index_bits(self) -> int:
        return _log2(self.buffers.uop // self.uop_bytes)

    @functools.cached_property
    def sram_index_bits(self) -> int:
        """Width of a LOAD/STORE ``sram_base``: enough for the deepest buffer."""
        return max(
            self.uop_index_bits, self.inp_index_bits, self.wgt_index_bits, self.acc_index_bits
        )

    # ------------------------------------------------------------------ performance
    @functools.cached_property
    def peak_macs_per_cycle(self) -> int:
        """MACs the GEMM core retires per cycle at full occupancy."""
        return self.batch * self.block_in * self.block_out // self.gemm.ii

    @property
    def peak_gops(self) -> float:
        """Peak throughput in GOPS (one MAC = two ops) at ``clock_mhz``."""
        return 2 * self.peak_macs_per_cycle * self.clock_mhz / 1000.0

    @property
    def dram_gbytes_per_s(self) -> float:
        return self.dram.bytes_per_cycle * self.clock_mhz / 1000.0

    # ------------------------------------------------------------------ naming
    @functools.cached_property
    def name(self) -> str:
        """Canonical name, e.g. ``1x8x8_i8w8a32_u8k_i32k_w64k_a64k_o8_rr``.

        The core shape, precisions and buffer sizes are spelled out, then the machine
        features whose values differ from the original machine (:data:`FEATURE_TAGS`: ``o8``
        for eight DRAM requests in flight, ``rr`` round-robin arbitration, ``mr`` merged
        rows, ``pp`` the post-processing store, ``ra`` the GEMM reset from acc, ``lm<n>``
        ``n`` MACs in LUTs), each after
        an underscore; when any other parameter (queues, DRAM latency and widths, clock, pipelines,
        ISA widths) differs from the defaults, a six-digit hash of them follows a dash, so two
        different configs never share a name.
        """
        c, p, b = self.core, self.precision, self.buffers
        base = (
            f"{c.batch}x{c.block_in}x{c.block_out}_i{p.inp_bits}w{p.wgt_bits}a{p.acc_bits}_"
            f"u{_size_tag(b.uop)}_i{_size_tag(b.inp)}_w{_size_tag(b.wgt)}_a{_size_tag(b.acc)}"
        )
        tags = [tag(getattr(getattr(self, section), leaf))
                for (section, leaf), tag in FEATURE_TAGS.items()]
        base = "_".join([base, *(t for t in tags if t)])
        rest = {k: v for k, v in self.to_dict().items() if k not in _STRUCTURAL}
        rest.pop("description", None)
        rest.pop("energy", None)            # not a hardware parameter
        defaults = HwConfig().to_dict()
        for section, leaf in FEATURE_TAGS:          # spelled out above
            if (section, leaf) in _UNHASHED:
                rest[section] = {k: v for k, v in rest[section].items() if k != leaf}
            else:
                rest[section] = {**rest[section], leaf: defaults[section][leaf]}
        if all(rest[k] == defaults[k] for k in rest):
            return base
        digest = hashlib.sha1(repr(sorted(rest.items())).encode()).hexdigest()[:6]
        return f"{base}-{digest}"

    def derived(self) -> dict[str, Any]:
        """Derived quantities, for ``accel config show``."""
        return {
            "name": self.name,
            "tile_bytes": {b: self.tile_bytes(b) for b in ("uop", "inp", "wgt", "acc", "out")},
            "depth": {b: self.depth(b) for b in ("uop", "inp", "wgt", "acc", "out")},
            "index_bits": {
                "uop": self.uop_index_bits,
                "inp": self.inp_index_bits,
                "wgt": self.wgt_index_bits,
                "acc": self.acc_index_bits,
                "sram_base": self.sram_index_bits,
            },
            "uop_bits": self.uop_bits,
            "instruction_bits": _format_bits(self),
            "peak_macs_per_cycle": self.peak_macs_per_cycle,
            "peak_gops": round(self.peak_gops, 3),
            "dram_gbytes_per_s": round(self.dram_gbytes_per_s, 3),
        }


def _energy(value: Any, source: str) -> EnergyTable:
    """A config's ``energy`` value as a table: a shipped name or a path (relative to the
    config's folder), an inline mapping, or a table."""
    if isinstance(value, EnergyTable):
        return value
    try:
        if isinstance(value, str):
            folder = Path(source).parent if source not in ("<dict>", "") else None
            return load_energy_table(value, relative_to=folder)
        if isinstance(value, dict):
            return parse_energy_table(value, source, prefix="energy.")
    except EnergyError as exc:
        raise ConfigError(str(exc)) from None
    raise ConfigError(f"{source}: energy: expected a shipped energy table name, a YAML path or "
                      f"a mapping, got {type(value).__name__} {value!r}")


def _format_bits(cfg: HwConfig) -> dict[str, int]:
    layout = IsaLayout.of(cfg)
    return {fmt.name: fmt.total_bits for fmt in layout.formats.values()}


def _field_kind(cls: type, name: str) -> type:
    """``int``, ``bool`` or ``str``: the type of a section field, from its default."""
    return type(getattr(cls(), name))


def field_kind(key: str) -> type:
    """The type of the config field a dotted key names (``"dram.arbiter"`` -> ``str``):
    ``int``, ``bool``, ``str``, or ``float`` for ``clock_mhz``.

    Raises
    ------
    KeyError
        No such field.
    """
    section, _, leaf = key.partition(".")
    if not leaf:
        if key == "clock_mhz":
            return float
        raise KeyError(key)
    cls = _SECTIONS[section]
    if leaf not in {f.name for f in fields(cls)}:
        raise KeyError(key)
    return _field_kind(cls, leaf)


_KIND_TEXT = {int: "an integer", bool: "true or false", str: "a string"}


def _section(cls: type, value: Any, key: str, source: str) -> Any:
    if not isinstance(value, dict):
        raise ConfigError(
            f"{source}: {key}: expected a mapping with keys "
            f"{', '.join(f.name for f in fields(cls))}, got {type(value).__name__} {value!r}"
        )
    known = {f.name: f for f in fields(cls)}
    base = _SECTION_DEFAULTS.get(key, cls())
    kwargs = {name: getattr(base, name) for name in known}
    for leaf, item in value.items():
        if leaf not in known:
            raise ConfigError(
                f"{source}: {key}.{leaf}: unknown key; expected one of {', '.join(known)}"
            )
        kind = _field_kind(cls, leaf)
        if type(item) is not kind:
            raise ConfigError(
                f"{source}: {key}.{leaf}: expected {_KIND_TEXT[kind]}, "
                f"got {type(item).__name__} {item!r}"
            )
        kwargs[leaf] = item
    return cls(**kwargs)


def _check(cond: bool, cfg: HwConfig, key: str, expected: str, got: Any) -> None:
    if not cond:
        raise ConfigError(f"{cfg.source}: {key}: expected {expected}, got {got!r}")


def _validate(cfg: HwConfig) -> None:
    src = cfg.source
    if not isinstance(cfg.energy, EnergyTable):
        raise ConfigError(f"{src}: energy: expected an EnergyTable, got {cfg.energy!r}")
    for sec_name, cls in _SECTIONS.items():
        sec = getattr(cfg, sec_name)
        if not isinstance(sec, cls):
            raise ConfigError(f"{src}: {sec_name}: expected {cls.__name__}, got {sec!r}")
        for f in fields(sec):
            v = getattr(sec, f.name)
            kind = _field_kind(cls, f.name)
            _check(type(v) is kind, cfg, f"{sec_name}.{f.name}", _KIND_TEXT[kind], v)
    for leaf in ("batch", "block_in", "block_out"):
        v = getattr(cfg.core, leaf)
        _check(_is_pow2(v), cfg, f"core.{leaf}", "a power of two", v)
    for leaf, allowed in (("inp_bits", (8,)), ("wgt_bits", (8,)), ("acc_bits", (32,))):
        v = getattr(cfg.precision, leaf)
        _check(v in allowed, cfg, f"precision.{leaf}", f"one of {allowed}", v)
    for buf in ("uop", "inp", "wgt", "acc"):
        v = getattr(cfg.buffers, buf)
        _check(_is_pow2(v), cfg, f"buffers.{buf}", "a power-of-two number of bytes", v)
    for buf in ("uop", "inp", "wgt", "acc"):
        v = getattr(cfg.buffers, buf)
        tile = cfg.tile_bytes(buf) if buf != "uop" else 8
        _check(
            v >= tile, cfg, f"buffers.{buf}",
            f"at least one {'micro-op word' if buf == 'uop' else 'tile'} ({tile} bytes)", v,
        )
    for leaf in ("cmd_depth", "token_depth"):
        v = getattr(cfg.queues, leaf)
        _check(v >= 1, cfg, f"queues.{leaf}", "a positive number of entries", v)
    d = cfg.dram
    _check(_is_pow2(d.bytes_per_cycle), cfg, "dram.bytes_per_cycle", "a power of two",
           d.bytes_per_cycle)
    _check(d.latency >= 0, cfg, "dram.latency", "a non-negative number of cycles", d.latency)
    _check(1 <= d.max_outstanding <= MAX_OUTSTANDING, cfg, "dram.max_outstanding",
           f"1..{MAX_OUTSTANDING} requests in flight (the RTL keeps at most {MAX_OUTSTANDING})",
           d.max_outstanding)
    _check(isinstance(d.axi_id_bits, int) and 1 <= d.axi_id_bits <= 32, cfg, "dram.axi_id_bits",
           "1..32 bits", d.axi_id_bits)
    _check(d.arbiter in DRAM_ARBITERS, cfg, "dram.arbiter", f"one of {', '.join(DRAM_ARBITERS)}",
           d.arbiter)
    _check(
        _is_pow2(d.max_burst) and d.max_burst >= d.bytes_per_cycle,
        cfg, "dram.max_burst", f"a power of two >= bytes_per_cycle ({d.bytes_per_cycle})",
        d.max_burst,
    )
    _check(
        isinstance(cfg.clock_mhz, (int, float))
        and not isinstance(cfg.clock_mhz, bool)
        and math.isfinite(cfg.clock_mhz)
        and cfg.clock_mhz > 0,
        cfg, "clock_mhz", "a positive number of MHz", cfg.clock_mhz,
    )
    for unit in ("gemm", "alu"):
        p = getattr(cfg, unit)
        _check(p.ii >= 1, cfg, f"{unit}.ii", "an initiation interval >= 1 cycle", p.ii)
        _check(p.depth >= 1, cfg, f"{unit}.depth", "a pipeline depth >= 1 cycle", p.depth)
    macs = cfg.core.batch * cfg.core.block_in * cfg.core.block_out
    _check(0 <= cfg.gemm.lut_macs <= macs, cfg, "gemm.lut_macs",
           f"0..{macs} (the array's batch x block_in x block_out MACs)", cfg.gemm.lut_macs)
    st = cfg.store
    if st.postproc:
        _check(st.out_bits == cfg.precision.inp_bits, cfg, "store.out_bits",
               f"{cfg.precision.inp_bits} (precision.inp_bits, the width the next layer reads "
               "and the only one the RTL narrows to)", st.out_bits)
    isa = cfg.isa
    _check(1 <= isa.iter_bits <= 16, cfg, "isa.iter_bits", "1..16", isa.iter_bits)
    _check(8 <= isa.dram_addr_bits <= 32, cfg, "isa.dram_addr_bits", "8..32",
           isa.dram_addr_bits)
    _check(4 <= isa.size_bits <= 16, cfg, "isa.size_bits", "4..16", isa.size_bits)
    _check(1 <= isa.pad_bits <= 8, cfg, "isa.pad_bits", "1..8", isa.pad_bits)
    _check(isa.imm_bits == 16, cfg, "isa.imm_bits", "16", isa.imm_bits)
    _check(
        cfg.uop_bits <= MAX_UOP_BITS, cfg, "buffers",
        f"micro-op indices (acc {cfg.acc_index_bits} + src {cfg.src_index_bits} + "
        f"wgt {cfg.wgt_index_bits} bits) to fit {MAX_UOP_BITS} bits", cfg.uop_bits,
    )
    for fmt in IsaLayout.of(cfg).formats.values():
        _check(
            fmt.total_bits <= INSN_BITS, cfg, "buffers",
            f"{fmt.name} instruction fields ({fmt.widths_text()}) to fit {INSN_BITS} bits",
            fmt.total_bits,
        )


# ---------------------------------------------------------------------- loading
def config_dir() -> Path:
    """Folder of the shipped configs (``accel/configs``, also ``configs/`` in the repo)."""
    return Path(__file__).parent.parent / "configs"


# Shipped names that were retired, with the config that replaced each: the post-processing
# machines became the packaged ones (issue 35), the old ones are kept as ``<name>_alu``.
RENAMED_CONFIGS = {"default_postproc": "default", "vta_1x16x16_postproc": "vta_1x16x16"}


def shipped_configs() -> list[str]:
    """Names of the shipped configs, loadable with ``load_config(name)``."""
    return sorted(p.stem for p in config_dir().glob("*.yaml"))


def parse_yaml(text: str, source: str) -> Any:
    """``text`` parsed as YAML; a syntax error is a one-line :class:`ConfigError` naming
    ``source``, line and column."""
    return yamlfile.parse_yaml(text, source, ConfigError)


def load_config(spec: str | Path | None = None) -> HwConfig:
    """Load a hardware config.

    Parameters
    ----------
    spec
        ``None`` for the packaged default; a shipped name such as ``"vta_1x16x16"``; or the
        path of a YAML file.

    Raises
    ------
    ConfigError
        The file is missing or unreadable, the name is not shipped, or the contents are invalid.
    """
    if spec is None:
        spec = "default"
    if isinstance(spec, HwConfig):
        return spec
    text_spec = str(spec)
    path = Path(text_spec)
    is_path = isinstance(spec, Path) or path.suffix in (".yaml", ".yml") or path.exists()
    if not is_path:
        shipped = config_dir() / f"{text_spec}.yaml"
        if not shipped.exists():
            if text_spec in RENAMED_CONFIGS:
                new = RENAMED_CONFIGS[text_spec]
                raise ConfigError(
                    f"{text_spec}: no longer shipped; it is now {new} (the machine before it, "
                    f"with requantisation on the ALU: {new}_alu)"
                )
            raise ConfigError(
                f"{text_spec}: no such shipped config; expected one of "
                f"{', '.join(shipped_configs())} or a path to a .yaml file"
            )
        path = shipped
    data = yamlfile.read_yaml(path, "config file", ConfigError)
    if data is None:
        raise ConfigError(f"{path}: <top>: expected a mapping of config sections, got empty file")
    return HwConfig.from_dict(data, source=str(path))
