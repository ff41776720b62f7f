"""The control and status register map of the AXI-wrapped accelerator, described once.

The RTL's AXI4-Lite decoder (``hw.axi.AxiLiteRegs``), the Python driver (``accel.driver``), the
C header (:func:`c_header`, ``accel regmap --c``) and the Markdown table in
``docs/register-map.md`` (:func:`markdown`) are all made from :data:`REGISTERS`;
``tests/test_regmap.py`` checks that they agree.

Every register is 32 bits at a 4-byte-aligned byte offset of a :data:`WINDOW_BYTES` window. A
64-bit counter is two registers, ``<NAME>_LO`` then ``<NAME>_HI``: reading ``_LO`` latches the
high half, which a read of ``_HI`` then returns, so a ``_LO``-then-``_HI`` pair reads one
instant's value while the counter runs.

Access kinds (:data:`ACCESS`):

- ``rw``: read and write (byte strobes honoured);
- ``ro``: read only; a write answers ``SLVERR`` and changes nothing;
- ``wo``: write only (a command); reads return 0;
- ``w1c``: read, and a written 1 clears the bit.

An address no register has answers ``SLVERR`` to reads and writes and changes nothing; so does
a write of ``CTRL.START`` while the accelerator runs.

The counters count the run since the last start (a start clears them): ``CYCLES`` is the
timing simulator's ``SimStats.cycles`` once ``STATUS.DONE`` is set; ``<MODULE>_ACTIVE`` the
cycles the module runs an instruction, decode cycle through last (``ModuleStats.active``);
``<MODULE>_STALL`` the cycles it has an instruction, in its command queue or held, that it
does not run (waiting on a dependency token or on room to push one); ``DRAM_RD_BYTES`` and
``DRAM_WR_BYTES`` the bytes of the DRAM transactions granted (instruction fetch included).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ACCESS", "BY_NAME", "COUNTERS", "DATA_BYTES", "ID_MAGIC", "REGISTERS", "WINDOW_BYTES",
           "Field", "Register", "c_header", "counter_registers", "markdown", "register"]

DATA_BYTES = 4
"""Bytes per register (the AXI4-Lite data width, 32 bits)."""

WINDOW_BYTES = 4096
"""Size of the register window (the AXI4-Lite address width is 12 bits)."""

ID_MAGIC = 0xACCE_0001
"""What ``ID`` reads: ``0xACCE`` and the register map's version (1)."""

ACCESS = ("rw", "ro", "wo", "w1c")


@dataclass(frozen=True)
class Field:
    """Bits ``lsb .. lsb + width - 1`` of a register."""

    name: str
    lsb: int
    width: int
    doc: str

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    """One 32-bit register: byte offset, access kind, description, fields (none: the whole
    word is one value)."""

    name: str
    offset: int
    access: str
    doc: str
    fields: tuple[Field, ...] = ()

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}")


COUNTERS = (
    ("CYCLES", "cycles since the start; the run's length once DONE is set"),
    ("LOAD_ACTIVE", "cycles the load module runs an instruction"),
    ("LOAD_STALL", "cycles the load module has an instruction it does not run"),
    ("COMPUTE_ACTIVE", "cycles the compute module runs an instruction"),
    ("COMPUTE_STALL", "cycles the compute module has an instruction it does not run"),
    ("STORE_ACTIVE", "cycles the store module runs an instruction"),
    ("STORE_STALL", "cycles the store module has an instruction it does not run"),
    ("DRAM_RD_BYTES", "bytes of the DRAM reads granted (instruction fetch included)"),
    ("DRAM_WR_BYTES", "bytes of the DRAM writes granted"),
)
"""The 64-bit counters, in register order: ``(name, what it counts)``."""

_COUNTER_BASE = 0x040


def _registers() -> tuple[Register, ...]:
    regs = [
        Register("CTRL", 0x000, "wo", "control: write START to run the program",
                 (Field("START", 0, 1, "start a run (SLVERR while BUSY)"),)),
        Register("STATUS", 0x004, "ro", "status",
                 (Field("DONE", 0, 1, "FINISH has retired (cleared by START)"),
                  Field("BUSY", 1, 1, "a run is in progress"),
                  Field("DRAM_ERROR", 2, 1, "a DRAM response was not OKAY since START"))),
        Register("IRQ_ENABLE", 0x008, "rw", "interrupt enable",
                 (Field("DONE", 0, 1, "raise the interrupt line when the run is done"),)),
        Register("IRQ_STATUS", 0x00C, "w1c", "interrupt status (write 1 to clear)",
                 (Field("DONE", 0, 1, "the run finished since this bit was last cleared"),)),
        Register("INSN_ADDR_LO", 0x010, "rw", "byte address of the first instruction, bits 31:0"),
        Register("INSN_ADDR_HI", 0x014, "rw", "byte address of the first instruction, bits 63:32"),
        Register("INSN_COUNT", 0x018, "rw", "number of instructions"),
        Register("ID", 0x01C, "ro", f"reads {ID_MAGIC:#010x}: the register map's version"),
        Register("DRAM_BASE_LO", 0x020, "rw", "bus address of the DRAM image, bits 31:0 (the "
                 "program's addresses are offsets from it; bits 11:0 are not used: 4 KB aligned)"),
        Register("DRAM_BASE_HI", 0x024, "rw", "bus address of the DRAM image, bits 63:32"),
    ]
    for i, (name, doc) in enumerate(COUNTERS):
        off = _COUNTER_BASE + 8 * i
        regs += [Register(f"{name}_LO", off, "ro", f"{doc}, bits 31:0 (latches _HI)"),
                 Register(f"{name}_HI", off + 4, "ro", f"{doc}, bits 63:32 (as of the _LO read)")]
    return tuple(regs)


REGISTERS: tuple[Register, ...] = _registers()
"""Every register, by offset."""

BY_NAME: dict[str, Register] = {r.name: r for r in REGISTERS}


def register(name: str) -> Register:
    """The register called ``name``.

    Raises
    ------
    KeyError
        No register has that name.
    """
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no register {name!r} in the register map") from None


def counter_registers(name: str) -> tuple[Register, Register]:
    """The ``_LO`` and ``_HI`` registers of the counter ``name`` (one of :data:`COUNTERS`)."""
    return register(f"{name}_LO"), register(f"{name}_HI")


def _check() -> None:
    offsets = [r.offset for r in REGISTERS]
    assert len(set(offsets)) == len(offsets), "two registers share an offset"
    for r in REGISTERS:
        assert r.access in ACCESS and r.offset % DATA_BYTES == 0 and r.offset < WINDOW_BYTES
        bits = 0
        for f in r.fields:
            assert f.lsb + f.width <= 8 * DATA_BYTES and not bits & f.mask, (r.name, f.name)
            bits |= f.mask


_check()


def c_header(guard: str = "ACCEL_REGMAP_H") -> str:
    """A C header of the map: ``ACCEL_<REG>`` offsets, ``ACCEL_<REG>_<FIELD>`` masks and
    ``_SHIFT`` positions, ``ACCEL_ID_MAGIC``."""
    lines = [
        "/* The accel register map (AXI4-Lite, 32-bit registers). Generated by",
        " * accel.machine.regmap.c_header() (`accel regmap --c`); do not edit. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        f"#define ACCEL_REG_BYTES {DATA_BYTES}u",
        f"#define ACCEL_WINDOW_BYTES {WINDOW_BYTES:#x}u",
        f"#define ACCEL_ID_MAGIC {ID_MAGIC:#010x}u",
        "",
    ]
    for r in REGISTERS:
        lines.append(f"#define ACCEL_{r.name} {r.offset:#05x}u  /* {r.access}: {r.doc} */")
        for f in r.fields:
            lines.append(f"#define ACCEL_{r.name}_{f.name} {f.mask:#x}u")
            lines.append(f"#define ACCEL_{r.name}_{f.name}_SHIFT {f.lsb}u")
    lines += ["", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def markdown() -> str:
    """The Markdown table of the map (``docs/register-map.md``'s, checked by a test)."""
    lines = ["| offset | register | access | bits | description |",
             "|---|---|---|---|---|"]
    for r in REGISTERS:
        lines.append(f"| `{r.offset:#05x}` | `{r.name}` | {r.access} | 31:0 | {r.doc} |")
        for f in r.fields:
            hi = f.lsb + f.width - 1
            bits = f"{f.lsb}" if f.width == 1 else f"{hi}:{f.lsb}"
            lines.append(f"| | `.{f.name}` | | {bits} | {f.doc} |")
    return "\n".join(lines) + "\n"
