"""The bit layout of every instruction format and of the micro-op, from the config's widths.

This is the one description of the encoding: :mod:`accel.machine.isa` encodes and decodes with
it, :mod:`accel.machine.config` checks with it that every format fits the 128-bit word, and the
RTL builds its decoder from it (``hw.params``). It takes the widths from any object that has
them (a :class:`~accel.machine.config.HwConfig`), so that the config can use it without the two
modules importing each other.
"""

from __future__ import annotations

import enum
import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["DEP_FLAGS", "FieldSpec", "InsnFormat", "IsaLayout", "LayoutWidths", "Opcode"]


class Opcode(enum.IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


DEP_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


class _IsaWidths(Protocol):
    iter_bits: int
    dram_addr_bits: int
    size_bits: int
    pad_bits: int
    imm_bits: int


class _Gemm(Protocol):
    reset_from_acc: bool


class _Store(Protocol):
    postproc: bool
    out_bits: int


class LayoutWidths(Protocol):
    """What :class:`IsaLayout` reads of a config (``HwConfig`` has all of it)."""

    @property
    def isa(self) -> _IsaWidths: ...
    @property
    def store(self) -> _Store: ...
    @property
    def gemm(self) -> _Gemm: ...
    @property
    def uop_index_bits(self) -> int: ...
    @property
    def acc_index_bits(self) -> int: ...
    @property
    def inp_index_bits(self) -> int: ...
    @property
    def wgt_index_bits(self) -> int: ...
    @property
    def src_index_bits(self) -> int: ...
    @property
    def sram_index_bits(self) -> int: ...
    @property
    def uop_bytes(self) -> int: ...


@dataclass(frozen=True)
class FieldSpec:
    """One bit field: ``width`` bits from ``lsb`` of the instruction word."""

    name: str
    width: int
    lsb: int
    signed: bool = False

    @property
    def lo(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


@dataclass(frozen=True)
class InsnFormat:
    """The ordered fields of one instruction format."""

    name: str
    fields: tuple[FieldSpec, ...]

    @property
    def total_bits(self) -> int:
        return self.fields[-1].lsb + self.fields[-1].width

    def widths_text(self) -> str:
        return " ".join(f"{f.name}:{f.width}" for f in self.fields)

    @functools.cached_property
    def packing(self) -> tuple[Any, tuple[tuple[FieldSpec, int, int, int], ...]]:
        """What :func:`encode_insn` uses for every instruction, computed once per format: a
        getter of all the fields' values at once, and per field ``(field, lo, hi, mask)``."""
        getter = operator.attrgetter(*(f.name for f in self.fields))
        return getter, tuple((f, f.lo, f.hi, (1 << f.width) - 1) for f in self.fields)

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")


def _fields(spec: Sequence[tuple[str, int] | tuple[str, int, bool]]) -> tuple[FieldSpec, ...]:
    out, lsb = [], 0
    for item in spec:
        name, width = item[0], item[1]
        signed = bool(item[2]) if len(item) > 2 else False
        out.append(FieldSpec(name, width, lsb, signed))
        lsb += width
    return tuple(out)


class IsaLayout:
    """Bit layouts of every instruction format and of the micro-op, for one config.

    Use :meth:`of` (cached per config). ``formats`` maps each :class:`Opcode` to its
    :class:`InsnFormat`; ``uop`` is the micro-op's format.
    """

    def __init__(self, cfg: LayoutWidths) -> None:
        isa = cfg.isa
        header = [("opcode", 3)] + [(f, 1) for f in DEP_FLAGS]
        loop = [
            ("uop_bgn", cfg.uop_index_bits),
            ("uop_end", cfg.uop_index_bits + 1),
            ("iter_out", isa.iter_bits),
            ("iter_in", isa.iter_bits),
            ("dst_factor_out", cfg.acc_index_bits),
            ("dst_factor_in", cfg.acc_index_bits),
        ]
        copy = [
            *header,
            ("mem_type", 3),
            ("sram_base", cfg.sram_index_bits),
            ("dram_base", isa.dram_addr_bits),
            ("y_size", isa.size_bits),
            ("x_size", isa.size_bits),
            ("x_stride", isa.size_bits),
        ]
        mem = _fields([
            *copy,
            ("y_pad_0", isa.pad_bits),
            ("y_pad_1", isa.pad_bits),
            ("x_pad_0", isa.pad_bits),
            ("x_pad_1", isa.pad_bits),
        ])
        # With the post-processing store, STORE (which never pads) has its own format: the
        # pads' bits hold the shift and the clip bounds (signed, of the output's width).
        store = mem if not cfg.store.postproc else _fields([
            *copy,
            ("shift", 5),
            ("clip_lo", cfg.store.out_bits, True),
            ("clip_hi", cfg.store.out_bits, True),
        ])
        gemm = _fields([
            *header,
            ("reset", 1),
            *([("from_acc", 1)] if cfg.gemm.reset_from_acc else []),
            *loop,
            ("src_factor_out", cfg.inp_index_bits),
            ("src_factor_in", cfg.inp_index_bits),
            ("wgt_factor_out", cfg.wgt_index_bits),
            ("wgt_factor_in", cfg.wgt_index_bits),
        ])
        alu = _fields([
            *header,
            ("alu_op", 3),
            *loop,
            ("src_factor_out", cfg.acc_index_bits),
            ("src_factor_in", cfg.acc_index_bits),
            ("use_imm", 1),
            ("imm", isa.imm_bits, True),
        ])
        self.formats: dict[Opcode, InsnFormat] = {
            Opcode.LOAD: InsnFormat("LOAD", mem),
            Opcode.STORE: InsnFormat("STORE", store),
            Opcode.GEMM: InsnFormat("GEMM", gemm),
            Opcode.FINISH: InsnFormat("FINISH", _fields(header)),
            Opcode.ALU: InsnFormat("ALU", alu),
        }
        self.uop = InsnFormat(
            "UOP",
            _fields([
                ("dst", cfg.acc_index_bits),
                ("src", cfg.src_index_bits),
                ("wgt", cfg.wgt_index_bits),
            ]),
        )
        self.uop_bytes = cfg.uop_bytes

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def of(cfg: LayoutWidths) -> IsaLayout:
        """The (cached) layout for ``cfg``."""
        return IsaLayout(cfg)
