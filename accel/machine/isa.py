"""The instruction set: instruction and micro-op types, their bit layouts, and encode/decode.

The bit layout of every instruction format is described once, by :class:`IsaLayout`, from the
field widths a :class:`~accel.machine.config.HwConfig` derives. The compiler encodes with it, the
simulators decode with it and the RTL builds its decoder from it, so a width can never drift
between them (VTA's Chisel and HLS designs did drift).

Layout of a 128-bit instruction word, least significant bit first::

    opcode:3 pop_prev:1 pop_next:1 push_prev:1 push_next:1 <format fields...> <zero padding>

Formats (widths for the default config in brackets):

- LOAD / STORE: mem_type:3 sram_base[12] dram_base[32] y_size[16] x_size[16] x_stride[16]
  y_pad_0[4] y_pad_1[4] x_pad_0[4] x_pad_1[4]
- GEMM: reset:1 uop_bgn[10] uop_end[11] iter_out[14] iter_in[14] dst_factor_out[11]
  dst_factor_in[11] src_factor_out[12] src_factor_in[12] wgt_factor_out[10] wgt_factor_in[10]
- ALU: alu_op:3 uop_bgn uop_end iter_out iter_in dst_factor_out dst_factor_in src_factor_out
  src_factor_in (acc-index wide) use_imm:1 imm:16 (signed)
- FINISH: no fields.

A micro-op packs dst (acc index), src (inp index for GEMM, acc index for ALU) and wgt indices,
dst in the least significant bits, into a 32- or 64-bit word (``HwConfig.uop_bytes``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from accel.machine.config import INSN_BITS, HwConfig
from accel.machine.layout import DEP_FLAGS, FieldSpec, InsnFormat, IsaLayout, Opcode

__all__ = [
    "DEP_FLAGS",
    "INSN_BYTES",
    "AluInsn",
    "AluOp",
    "EncodeError",
    "FieldSpec",
    "FinishInsn",
    "GemmInsn",
    "Insn",
    "InsnFormat",
    "IsaLayout",
    "MemInsn",
    "MemType",
    "Module",
    "Opcode",
    "TokenQueue",
    "decode_insn",
    "decode_uops",
    "encode_insn",
    "encode_insns",
    "encode_uops",
    "insn_decoder",
    "module_of",
]

INSN_BYTES = INSN_BITS // 8


class MemType(enum.IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4

    @property
    def buffer(self) -> str:
        """Name of the on-chip buffer (``HwConfig.depth`` key)."""
        return self.name.lower()


class AluOp(enum.IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


class Module(enum.IntEnum):
    """The three instruction-executing modules, in pipeline order."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2


class TokenQueue(enum.Enum):
    """The four dependency-token queues, named ``producer->consumer``."""

    L2C = "load->compute"
    C2L = "compute->load"
    C2S = "compute->store"
    S2C = "store->compute"



# (module, flag) -> token queue. A flag absent here is illegal on that module.
DEP_QUEUES: dict[tuple[Module, str], TokenQueue] = {
    (Module.LOAD, "pop_next"): TokenQueue.C2L,
    (Module.LOAD, "push_next"): TokenQueue.L2C,
    (Module.COMPUTE, "pop_prev"): TokenQueue.L2C,
    (Module.COMPUTE, "pop_next"): TokenQueue.S2C,
    (Module.COMPUTE, "push_prev"): TokenQueue.C2L,
    (Module.COMPUTE, "push_next"): TokenQueue.C2S,
    (Module.STORE, "pop_prev"): TokenQueue.C2S,
    (Module.STORE, "push_prev"): TokenQueue.S2C,
}


class EncodeError(ValueError):
    """A value does not fit its instruction or micro-op field."""


# ---------------------------------------------------------------------- instructions
@dataclass(frozen=True, kw_only=True)
class Insn:
    """Base of all instructions: the four dependency-token flags."""

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    opcode: ClassVar[Opcode]

    def deps(self) -> tuple[str, ...]:
        """Names of the dependency flags that are set."""
        return tuple(f for f in DEP_FLAGS if getattr(self, f))

    def with_deps(self, **flags: bool) -> Insn:
        """A copy with some dependency flags changed."""
        return dataclasses.replace(self, **flags)

    @property
    def mnemonic(self) -> str:
        return self.opcode.name


@dataclass(frozen=True, kw_only=True)
class MemInsn(Insn):
    """LOAD or STORE: a 2-D strided copy between DRAM and an on-chip buffer, in tiles.

    A LOAD writes ``(y_pad_0 + y_size + y_pad_1)`` rows of ``(x_pad_0 + x_size + x_pad_1)``
    elements contiguously from ``sram_base``, zeros in the pad; row ``y`` of the DRAM side
    starts at ``dram_base + y * x_stride``. A STORE copies ``y_size x x_size`` OUT tiles. With
    ``store.postproc`` a STORE ACC copies acc tiles, each element
    ``min(max(acc >> shift, clip_lo), clip_hi)`` (an arithmetic shift: floor) narrowed to
    ``store.out_bits``, as out tiles; ``shift``, ``clip_lo`` and ``clip_hi`` are 0 on every
    other instruction. Units: buffer elements (tiles, or micro-op words for UOP).
    """

    store: bool = False
    mem_type: MemType
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 1
    x_size: int = 1
    x_stride: int = 1
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0
    shift: int = 0
    clip_lo: int = 0
    clip_hi: int = 0

    @property  # type: ignore[override]
    def opcode(self) -> Opcode:  # type: ignore[override]
        return Opcode.STORE if self.store else Opcode.LOAD

    @property
    def rows(self) -> int:
        """Rows written to SRAM, padding included."""
        return self.y_pad_0 + self.y_size + self.y_pad_1

    @property
    def cols(self) -> int:
        """Elements per SRAM row, padding included."""
        return self.x_pad_0 + self.x_size + self.x_pad_1

    @property
    def sram_elems(self) -> int:
        """Elements of SRAM the instruction touches (none for a zero-size LOAD/STORE)."""
        if not (self.y_size and self.x_size):
            return 0
        if self.store:
            return self.y_size * self.x_size
        return self.rows * self.cols


@dataclass(frozen=True, kw_only=True)
class _LoopInsn(Insn):
    """GEMM and ALU share the micro-op loop: for i < iter_out, j < iter_in, u in uops."""

    uop_bgn: int = 0
    uop_end: int = 1
    iter_out: int = 1
    iter_in: int = 1
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0

    @property
    def n_uops(self) -> int:
        """Micro-ops the instruction executes: iterations times kernel length."""
        return self.iter_out * self.iter_in * max(0, self.uop_end - self.uop_bgn)


@dataclass(frozen=True, kw_only=True)
class GemmInsn(_LoopInsn):
    """``acc[dst] += inp[src] . wgt[wgt]^T`` (or ``acc[dst] = 0`` with ``reset``; with
    ``gemm.reset_from_acc`` a reset ``from_acc`` copies: ``acc[dst] = acc[src]``)."""

    opcode: ClassVar[Opcode] = Opcode.GEMM
    reset: bool = False
    from_acc: bool = False
    wgt_factor_out: int = 0
    wgt_factor_in: int = 0


@dataclass(frozen=True, kw_only=True)
class AluInsn(_LoopInsn):
    """``acc[dst] = op(acc[dst], imm if use_imm else acc[src])`` elementwise, int32."""

    opcode: ClassVar[Opcode] = Opcode.ALU
    alu_op: AluOp
    use_imm: bool = False
    imm: int = 0


@dataclass(frozen=True, kw_only=True)
class FinishInsn(Insn):
    """End of the program (executed by the compute module)."""

    opcode: ClassVar[Opcode] = Opcode.FINISH


def module_of(insn: Insn) -> Module:
    """Which module's command queue fetch routes ``insn`` to."""
    if isinstance(insn, MemInsn):
        if insn.store:
            return Module.STORE
        if insn.mem_type in (MemType.INP, MemType.WGT):
            return Module.LOAD
    return Module.COMPUTE


_CLASS_OF = {
    Opcode.LOAD: MemInsn,
    Opcode.STORE: MemInsn,
    Opcode.GEMM: GemmInsn,
    Opcode.FINISH: FinishInsn,
    Opcode.ALU: AluInsn,
}


def encode_insn(insn: Insn, cfg: HwConfig) -> int:
    """Encode one instruction as a 128-bit integer.

    Raises
    ------
    EncodeError
        A field's value does not fit its width; the message names the field, its width and the
        value.
    """
    fmt = IsaLayout.of(cfg).formats[insn.opcode]
    getter, specs = fmt.packing
    word = 0
    for (f, lo, hi, mask), raw in zip(specs, getter(insn), strict=True):
        value = int(raw)
        if not lo <= value <= hi:
            raise EncodeError(
                f"{fmt.name}.{f.name} = {value} does not fit its {f.width}-bit "
                f"{'signed ' if f.signed else ''}field ({lo}..{hi})"
            )
        word |= (value & mask) << f.lsb
    return word


def encode_insns(insns: Sequence[Insn], cfg: HwConfig) -> bytes:
    """All of ``insns`` as consecutive 16-byte little-endian words, each what
    :func:`encode_insn` gives, packed a format at a time with numpy (the 80,002 instructions
    of ``pipelined_gemm(tiny, 10000)`` in about 0.2 s, against 0.6-0.7 s one at a time).

    Raises
    ------
    EncodeError
        As :func:`encode_insn`, for the first instruction with a field that does not fit, its
        index first: ``instruction 12: GEMM.uop_end = ...``.
    """
    layout = IsaLayout.of(cfg)
    groups: dict[Opcode, list[int]] = {}
    for i, insn in enumerate(insns):
        groups.setdefault(insn.opcode, []).append(i)
    words = np.zeros((len(insns), 2), dtype="<u8")
    fits = True
    for opcode, index in groups.items():
        getter, specs = layout.formats[opcode].packing
        try:
            values = np.array([getter(insns[i]) for i in index], dtype=np.int64)
        except (OverflowError, TypeError, ValueError):  # not an int64: let encode_insn say
            fits = False
            break
        lo = np.array([spec[1] for spec in specs], dtype=np.int64)
        hi = np.array([spec[2] for spec in specs], dtype=np.int64)
        if ((values < lo) | (values > hi)).any():
            fits = False
            break
        bits = values.astype(np.uint64)        # two's complement for the signed fields
        packed = np.zeros((len(index), 2), dtype=np.uint64)
        for k, (f, _lo, _hi, mask) in enumerate(specs):
            v = bits[:, k] & np.uint64(mask)
            if f.lsb >= 64:
                packed[:, 1] |= v << np.uint64(f.lsb - 64)
                continue
            packed[:, 0] |= v << np.uint64(f.lsb)
            if f.lsb + f.width > 64:          # the field straddles the two 64-bit halves
                packed[:, 1] |= v >> np.uint64(64 - f.lsb)
        words[index] = packed
    if not fits:        # one at a time, so that the first that does not fit raises
        out = bytearray()
        for i, insn in enumerate(insns):
            try:
                out += encode_insn(insn, cfg).to_bytes(INSN_BYTES, "little")
            except EncodeError as exc:
                raise EncodeError(f"instruction {i}: {exc}") from None
        return bytes(out)
    return words.tobytes()


class DecodeError(ValueError):
    """An instruction word that no instruction encodes to."""


def decode_insn(word: int, cfg: HwConfig) -> Insn:
    """Decode a 128-bit instruction word.

    Raises
    ------
    DecodeError
        Unknown opcode or memory type or ALU opcode, or non-zero bits beyond the format.
    """
    return insn_decoder(cfg)(word)


_BOOL_FIELDS = (*DEP_FLAGS, "reset", "from_acc", "use_imm")


def insn_decoder(cfg: HwConfig) -> Callable[[int], Insn]:
    """:func:`decode_insn` for one config, with the layout's field table looked up once: the
    loader decodes a program's words with it (the config is hashed once, not per word)."""
    layout = IsaLayout.of(cfg)
    table = {}
    for opcode, fmt in layout.formats.items():
        fields = tuple((f.name, f.lsb, (1 << f.width) - 1, 1 << f.width if f.signed else 0,
                        f.name in _BOOL_FIELDS) for f in fmt.fields[1:])
        table[int(opcode)] = (fmt, fields, _CLASS_OF[opcode])

    def decode(word: int) -> Insn:
        raw_op = word & 0x7
        entry = table.get(raw_op)
        if entry is None:
            raise DecodeError(f"unknown opcode {raw_op}")
        fmt, fields, cls = entry
        if word >> fmt.total_bits:
            raise DecodeError(f"{fmt.name} has non-zero bits above bit {fmt.total_bits - 1}")
        kwargs: dict[str, Any] = {}
        for name, lsb, mask, sign, flag in fields:
            value = (word >> lsb) & mask
            if sign and value >= sign >> 1:
                value -= sign
            kwargs[name] = bool(value) if flag else value
        if cls is MemInsn:
            try:
                kwargs["mem_type"] = MemType(kwargs["mem_type"])
            except ValueError:
                raise DecodeError(f"unknown memory type {kwargs['mem_type']}") from None
            kwargs["store"] = raw_op == Opcode.STORE
        elif cls is AluInsn:
            try:
                kwargs["alu_op"] = AluOp(kwargs["alu_op"])
            except ValueError:
                raise DecodeError(f"unknown ALU opcode {kwargs['alu_op']}") from None
        return cls(**kwargs)

    return decode


def insn_fields(insn: Insn, cfg: HwConfig) -> Iterator[tuple[FieldSpec, int]]:
    """The (field, value) pairs of ``insn`` after the opcode, in layout order."""
    fmt = IsaLayout.of(cfg).formats[insn.opcode]
    getter, _ = fmt.packing
    for f, raw in zip(fmt.fields[1:], getter(insn)[1:], strict=True):
        yield f, int(raw)


def encode_uops(uops: np.ndarray, cfg: HwConfig) -> np.ndarray:
    """Pack an ``(n, 3)`` array of (dst, src, wgt) indices into uint32 or uint64 words.

    Raises
    ------
    EncodeError
        An index does not fit its field; names the micro-op and the field.
    """
    fmt = IsaLayout.of(cfg).uop
    arr = np.asarray(uops, dtype=np.int64).reshape(-1, 3)
    word_t = np.uint32 if cfg.uop_bytes == 4 else np.uint64
    words = np.zeros(len(arr), dtype=np.uint64)
    for col, f in enumerate(fmt.fields):
        values = arr[:, col]
        bad = np.flatnonzero((values < 0) | (values > f.hi))
        if bad.size:
            i = int(bad[0])
            raise EncodeError(
                f"uop {i}: {f.name} = {int(values[i])} does not fit its {f.width}-bit field "
                f"(0..{f.hi})"
            )
        words |= values.astype(np.uint64) << np.uint64(f.lsb)
    return words.astype(word_t)


def decode_uops(words: np.ndarray, cfg: HwConfig) -> np.ndarray:
    """Unpack micro-op words into an ``(n, 3)`` int64 array of (dst, src, wgt)."""
    fmt = IsaLayout.of(cfg).uop
    w = np.asarray(words).astype(np.uint64)
    out = np.empty((len(w), 3), dtype=np.int64)
    for col, f in enumerate(fmt.fields):
        out[:, col] = ((w >> np.uint64(f.lsb)) & np.uint64((1 << f.width) - 1)).astype(np.int64)
    return out
