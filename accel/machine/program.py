"""Programs: instructions, micro-ops and DRAM layout; binary files and assembly text.

A :class:`Program` is what the compiler emits and what every backend runs. It carries the
config it was built for, its instruction list, its micro-op table (placed in DRAM at the
``uop_region``), and the named DRAM regions of its tensors, so that a program file is
self-contained.

Binary file format (little-endian)::

    magic   8 bytes  b"ACCELPRG"
    version u16      1
    reserved u16     0
    hlen    u32      length of the JSON header
    header  hlen     UTF-8 JSON: config, n_insns, n_uops, uop_bytes, regions, uop_region, meta
    insns   16 * n_insns
    uops    uop_bytes * n_uops
    crc32   u32      of everything before it

The assembly text form (``accel disasm`` / ``accel asm``) round-trips to identical bytes.
"""

from __future__ import annotations

import functools
import json
import operator
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from accel.machine.cache import write_atomic
from accel.machine.config import ConfigError, HwConfig, load_config, shipped_configs
from accel.machine.isa import (
    DEP_FLAGS,
    DEP_QUEUES,
    INSN_BYTES,
    AluInsn,
    AluOp,
    DecodeError,
    EncodeError,
    FinishInsn,
    GemmInsn,
    Insn,
    IsaLayout,
    MemInsn,
    MemType,
    Module,
    Opcode,
    TokenQueue,
    decode_uops,
    encode_insn,
    encode_insns,
    encode_uops,
    insn_decoder,
    insn_fields,
    module_of,
)

__all__ = [
    "AsmError",
    "Program",
    "ProgramError",
    "ProgramFormatError",
    "Region",
    "SimulationDeadlock",
    "SimulationError",
    "assemble",
    "assemble_file",
    "count_key",
    "disassemble",
]

MAGIC = b"ACCELPRG"
VERSION = 1
_HEAD = struct.Struct("<8sHHI")


class ProgramError(ValueError):
    """An invalid program: the message names the instruction index and what is wrong."""


class SimulationError(ProgramError):
    """A program did something illegal at run time (index out of range, DRAM overrun)."""


class SimulationDeadlock(SimulationError):
    """No module can make progress before FINISH; the message says who waits on what."""


class ProgramFormatError(ValueError):
    """A corrupt, truncated or mismatched program file."""


class AsmError(ValueError):
    """A syntax or value error in assembly text; the message names the line."""


@dataclass(frozen=True)
class Region:
    """A named DRAM region: ``nbytes`` bytes from byte ``offset``.

    ``shape``, ``dtype`` and ``layout`` describe the tensor stored there when there is one
    (layout strings such as ``"NCHW1n8c"`` name the blocked layouts of :mod:`sim.dram`).
    """

    name: str
    offset: int
    nbytes: int
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    layout: str | None = None

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "offset": self.offset, "nbytes": self.nbytes}
        if self.shape is not None:
            d["shape"] = list(self.shape)
        if self.dtype is not None:
            d["dtype"] = self.dtype
        if self.layout is not None:
            d["layout"] = self.layout
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Region:
        shape = d.get("shape")
        return cls(
            name=str(d["name"]),
            offset=int(d["offset"]),
            nbytes=int(d["nbytes"]),
            shape=tuple(int(s) for s in shape) if shape is not None else None,
            dtype=d.get("dtype"),
            layout=d.get("layout"),
        )


@dataclass
class Program:
    """A program for one config.

    Attributes
    ----------
    config
        The hardware it was built for.
    insns
        Instructions in program order.
    uops
        ``(n, 3)`` int64 micro-op table of (dst, src, wgt) indices. LOAD UOP instructions copy
        from it: its first entry sits at byte ``regions[uop_region].offset`` of DRAM.
    regions
        Named DRAM regions, by name.
    uop_region
        Name of the region that holds the micro-op table (required when there are micro-ops).
    meta
        Free-form JSON-able metadata (operator, knobs, ...).
    """

    config: HwConfig
    insns: list[Insn]
    uops: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))
    regions: dict[str, Region] = field(default_factory=dict)
    uop_region: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.insns = list(self.insns)
        self.uops = np.asarray(self.uops, dtype=np.int64).reshape(-1, 3)

    # ------------------------------------------------------------------ static checks
    def validate(self) -> None:
        """Check every instruction against the config.

        Raises
        ------
        ProgramError
            Naming the instruction index: an SRAM range outside its buffer, a memory type the
            opcode cannot use, a dependency flag the module does not have, a micro-op range
            outside the uop buffer, or a missing FINISH.
        """
        cfg = self.config
        if not _all_valid(self.insns, cfg):    # find the first that is not, and say why
            for i, insn in enumerate(self.insns):
                _check_insn(i, insn, cfg)
        if not any(isinstance(insn, FinishInsn) for insn in self.insns):
            raise ProgramError("program has no FINISH instruction")
        if len(self.uops):
            if self.uop_region is None or self.uop_region not in self.regions:
                raise ProgramError(
                    f"program has {len(self.uops)} micro-ops but no uop region "
                    f"(uop_region={self.uop_region!r})"
                )
            region = self.regions[self.uop_region]
            need = len(self.uops) * cfg.uop_bytes
            if region.nbytes < need or region.offset % cfg.uop_bytes:
                raise ProgramError(
                    f"uop region {region.name!r} ({region.nbytes} bytes at {region.offset}) "
                    f"cannot hold {len(self.uops)} micro-ops of {cfg.uop_bytes} bytes aligned"
                )

    @property
    def uop_dram_base(self) -> int:
        """DRAM address of micro-op 0, in micro-op words (a LOAD UOP's ``dram_base`` unit)."""
        if self.uop_region is None:
            return 0
        return self.regions[self.uop_region].offset // self.config.uop_bytes

    # ------------------------------------------------------------------ binary form
    def encode_insns(self) -> bytes:
        """All instructions as consecutive 16-byte little-endian words.

        Raises
        ------
        EncodeError
            Naming the instruction index and the field that overflows.
        """
        return encode_insns(self.insns, self.config)

    def to_bytes(self) -> bytes:
        """The binary program file contents."""
        # The hardware only: the energy table (not a hardware parameter) changes no program.
        hardware = {k: v for k, v in self.config.to_dict().items() if k != "energy"}
        header = {
            "config": hardware,
            "config_name": self.config.name,
            "n_insns": len(self.insns),
            "n_uops": len(self.uops),
            "uop_bytes": self.config.uop_bytes,
            "regions": [r.to_dict() for r in self.regions.values()],
            "uop_region": self.uop_region,
            "meta": self.meta,
        }
        hbytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
        body = bytearray(_HEAD.pack(MAGIC, VERSION, 0, len(hbytes)))
        body += hbytes
        body += self.encode_insns()
        body += encode_uops(self.uops, self.config).astype(f"<u{self.config.uop_bytes}").tobytes()
        body += struct.pack("<I", zlib.crc32(bytes(body)))
        return bytes(body)

    def save(self, path: str | Path) -> None:
        """Write the binary program file (atomically: a failure leaves no partial file, and
        processes saving the same path at once each rename a whole file of their own)."""
        write_atomic(Path(path), self.to_bytes())

    @classmethod
    def from_bytes(
        cls, data: bytes, config: HwConfig | None = None, source: str = "<bytes>"
    ) -> Program:
        """Parse a binary program.

        Raises
        ------
        ProgramFormatError
            Wrong magic or version, truncation, checksum mismatch, malformed header, a config
            other than ``config``, or an instruction that does not decode (naming its index).
        """

        def fail(why: str) -> ProgramFormatError:
            return ProgramFormatError(f"{source}: {why}")

        if len(data) < _HEAD.size + 4:
            raise fail(f"truncated: {len(data)} bytes is shorter than the file header")
        magic, version, _, hlen = _HEAD.unpack_from(data)
        if magic != MAGIC:
            raise fail(f"not an accel program (magic {magic!r}, expected {MAGIC!r})")
        if version != VERSION:
            raise fail(f"unsupported program format version {version} (expected {VERSION})")
        if _HEAD.size + hlen + 4 > len(data):
            raise fail(f"truncated: header of {hlen} bytes runs past the end of the file")
        (crc,) = struct.unpack_from("<I", data, len(data) - 4)
        if zlib.crc32(data[:-4]) != crc:
            raise fail("checksum mismatch: the file is corrupt or truncated")
        try:
            header = json.loads(data[_HEAD.size : _HEAD.size + hlen])
            file_cfg = HwConfig.from_dict(header["config"], source=f"{source} header")
            n_insns, n_uops = int(header["n_insns"]), int(header["n_uops"])
            regions = [Region.from_dict(r) for r in header["regions"]]
            uop_region, meta = header["uop_region"], header["meta"]
        except (ValueError, KeyError, TypeError) as exc:
            raise fail(f"malformed header: {exc}") from None
        if config is not None and config != file_cfg:
            raise fail(f"built for config {file_cfg.name}, not {config.name}")
        cfg = config or file_cfg
        pos = _HEAD.size + hlen
        need = n_insns * INSN_BYTES + n_uops * cfg.uop_bytes
        if pos + need + 4 != len(data):
            raise fail(
                f"size mismatch: header promises {n_insns} instructions and {n_uops} micro-ops "
                f"({need} bytes) but {len(data) - pos - 4} bytes follow"
            )
        insns = []
        decode_insn = insn_decoder(cfg)
        # Instructions are frozen values, and a program repeats most of its words (a layer's
        # GEMMs and loads differ in few fields): each distinct word is decoded once.
        decoded: dict[bytes, Insn] = {}
        for i in range(n_insns):
            raw = data[pos : pos + INSN_BYTES]
            insn = decoded.get(raw)
            if insn is None:
                try:
                    insn = decoded[raw] = decode_insn(int.from_bytes(raw, "little"))
                except DecodeError as exc:
                    raise fail(f"instruction {i}: {exc}") from None
            insns.append(insn)
            pos += INSN_BYTES
        words = np.frombuffer(data, dtype=f"<u{cfg.uop_bytes}", count=n_uops, offset=pos)
        prog = cls(
            config=cfg,
            insns=insns,
            uops=decode_uops(words, cfg),
            regions={r.name: r for r in regions},
            uop_region=uop_region,
            meta=meta,
        )
        return prog

    @classmethod
    def load(cls, path: str | Path, config: HwConfig | None = None) -> Program:
        """Read a binary program file (see :meth:`from_bytes` for the errors)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ProgramFormatError(f"{path}: cannot read: {exc.strerror}") from None
        return cls.from_bytes(data, config=config, source=str(path))

    # ------------------------------------------------------------------ counts
    def counts(self) -> dict[str, int]:
        """Instruction counts by mnemonic (LOAD_INP, GEMM, ALU_ADD, ...)."""
        out: dict[str, int] = {}
        for insn in self.insns:
            key = count_key(insn)
            out[key] = out.get(key, 0) + 1
        return out


def count_key(insn: Insn) -> str:
    """The name an instruction is counted under: ``GEMM``, ``LOAD_INP``, ``ALU_SHR``, ..."""
    if isinstance(insn, MemInsn):
        return f"{insn.opcode.name}_{insn.mem_type.name}"
    if isinstance(insn, AluInsn):
        return f"ALU_{insn.alu_op.name}"
    return insn.opcode.name


_MEM_FIELDS = operator.attrgetter("store", "mem_type", "sram_base", "y_size", "x_size", "y_pad_0",
                                  "y_pad_1", "x_pad_0", "x_pad_1", "shift", "clip_lo", "clip_hi",
                                  *DEP_FLAGS)
_LOOP_FIELDS = operator.attrgetter("uop_bgn", "uop_end")
_ALU_FIELDS = operator.attrgetter("alu_op", "use_imm", "imm")


@functools.cache
def _flag_tables() -> tuple[np.ndarray, np.ndarray, bool]:
    """For the numpy check, from :func:`module_of` and ``DEP_QUEUES``: a LOAD/STORE's module by
    ``[store, mem_type]``; whether each module may set each of ``DEP_FLAGS``; and whether the
    compute module (GEMM, ALU, FINISH) may set them all."""
    module = np.array([[module_of(MemInsn(store=bool(s), mem_type=t)) for t in MemType]
                       for s in (0, 1)], dtype=np.int64)
    allowed = np.array([[(m, f) in DEP_QUEUES for f in DEP_FLAGS] for m in Module])
    return module, allowed, bool(allowed[Module.COMPUTE].all())


def _all_valid(insns: Sequence[Insn], cfg: HwConfig) -> bool:
    """Whether every instruction passes :func:`_check_insn`, decided a kind at a time with
    numpy (``pipelined_gemm(tiny, 10000)``'s 80,002 in 0.16 s against the loop's 0.26 s: most
    of it is gathering the fields into arrays). False also where that cannot be decided so (a
    subclass, a field that is not an int64 or is 2**29 or more across, a memory type or ALU op
    that is not the enum member): then the loop finds the first that fails."""
    module_of_mem, allowed, compute_any_flag = _flag_tables()
    mems: list[MemInsn] = []
    loops: list[Insn] = []
    alus: list[AluInsn] = []
    for insn in insns:
        kind = type(insn)
        if kind is MemInsn:
            mems.append(insn)  # type: ignore[arg-type]
        elif kind is GemmInsn:
            loops.append(insn)
        elif kind is AluInsn:
            loops.append(insn)
            alus.append(insn)  # type: ignore[arg-type]
        elif kind is not FinishInsn:
            return False
    if not compute_any_flag and len(mems) < len(insns):  # then their flags need the loop
        return False
    if mems:
        if any(type(m.mem_type) is not MemType for m in mems):
            return False
        a = np.array([_MEM_FIELDS(m) for m in mems])
        if a.dtype != np.int64 or (a >= 1 << 29).any() or (a <= -1 << 29).any():
            return False    # (so that nothing below overflows an int64)
        store, mem, base, ys, xs, yp0, yp1, xp0, xp1, shift, lo, hi = a[:, :12].T
        st = store != 0
        post = st & (mem == MemType.ACC)
        if (st & ~((mem == MemType.OUT) | post)).any() or (~st & (mem == MemType.OUT)).any():
            return False                            # STORE from OUT (or ACC), LOAD never OUT
        if post.any() and not cfg.store.postproc:
            return False
        if (st & ((yp0 | yp1 | xp0 | xp1) != 0)).any():
            return False
        lo_min, hi_max = -(1 << (cfg.store.out_bits - 1)), (1 << (cfg.store.out_bits - 1)) - 1
        if (~post & ((shift | lo | hi) != 0)).any() or (post & (
                (shift < 0) | (shift > 31) | (lo < lo_min) | (hi > hi_max) | (lo > hi))).any():
            return False
        if ((a[:, 12:] != 0) & ~allowed[module_of_mem[st.astype(np.int64), mem]]).any():
            return False
        depth = np.array([cfg.depth(t.buffer) for t in MemType], dtype=np.int64)[mem]
        elems = np.where(st, ys * xs, (yp0 + ys + yp1) * (xp0 + xs + xp1))
        if ((ys != 0) & (xs != 0) & (base + elems > depth)).any():
            return False
    if loops:
        a = np.array([_LOOP_FIELDS(g) for g in loops])
        if a.dtype != np.int64 or ((a[:, 1] < a[:, 0]) | (a[:, 1] > cfg.uop_depth)).any():
            return False
        from_acc = [g for g in loops if getattr(g, "from_acc", False)]
        if from_acc and (not cfg.gemm.reset_from_acc or not all(g.reset for g in from_acc)):
            return False                            # (GEMMs only: an ALU has no from_acc)
    if alus:
        if any(type(x.alu_op) is not AluOp for x in alus):
            return False
        a = np.array([_ALU_FIELDS(x) for x in alus])
        if a.dtype != np.int64 or ((a[:, 0] == AluOp.SHR) & (a[:, 1] != 0)
                                   & ((a[:, 2] < -31) | (a[:, 2] > 31))).any():
            return False
    return True


def _check_insn(i: int, insn: Insn, cfg: HwConfig) -> None:
    def fail(why: str) -> ProgramError:
        return ProgramError(f"instruction {i} ({count_key(insn)}): {why}")

    module = module_of(insn)
    for flag in insn.deps():
        if (module, flag) not in DEP_QUEUES:
            raise fail(f"{flag} is not allowed on the {module.name.lower()} module")
    if isinstance(insn, MemInsn):
        post = insn.store and insn.mem_type is MemType.ACC
        if post and not cfg.store.postproc:
            raise fail("STORE ACC needs the post-processing store (store.postproc)")
        if insn.store and insn.mem_type not in (MemType.OUT, MemType.ACC):
            raise fail(f"STORE supports memory types OUT and ACC only, got {insn.mem_type.name}")
        if post:
            lo_min = -(1 << (cfg.store.out_bits - 1))
            hi_max = (1 << (cfg.store.out_bits - 1)) - 1
            if not 0 <= insn.shift <= 31:
                raise fail(f"shift {insn.shift} is outside 0..31")
            if not lo_min <= insn.clip_lo <= insn.clip_hi <= hi_max:
                raise fail(f"clip bounds [{insn.clip_lo}, {insn.clip_hi}] are not an interval "
                           f"within {lo_min}..{hi_max}")
        elif insn.shift or insn.clip_lo or insn.clip_hi:
            raise fail("shift and clip bounds belong to a STORE ACC only")
        if not insn.store and insn.mem_type is MemType.OUT:
            raise fail("LOAD cannot target the OUT buffer")
        if insn.store and (insn.y_pad_0 or insn.y_pad_1 or insn.x_pad_0 or insn.x_pad_1):
            raise fail("STORE cannot pad")
        if insn.y_size and insn.x_size:
            depth = cfg.depth(insn.mem_type.buffer)
            end = insn.sram_base + insn.sram_elems
            if end > depth:
                raise fail(
                    f"SRAM range [{insn.sram_base}, {end}) exceeds the "
                    f"{insn.mem_type.buffer} buffer depth {depth}"
                )
    elif isinstance(insn, (GemmInsn, AluInsn)):
        if insn.uop_end < insn.uop_bgn or insn.uop_end > cfg.uop_depth:
            raise fail(
                f"micro-op range [{insn.uop_bgn}, {insn.uop_end}) is outside the uop buffer "
                f"of depth {cfg.uop_depth}"
            )
        if isinstance(insn, AluInsn) and insn.alu_op is AluOp.SHR and insn.use_imm \
                and not -31 <= insn.imm <= 31:
            raise fail(f"SHR amount {insn.imm} is outside -31..31")
        if isinstance(insn, GemmInsn) and insn.from_acc:
            if not cfg.gemm.reset_from_acc:
                raise fail("from_acc needs a GEMM that resets from the acc buffer "
                           "(gemm.reset_from_acc)")
            if not insn.reset:
                raise fail("from_acc belongs to a reset")


# ---------------------------------------------------------------------- assembly text
_BOOL_FIELDS = {*DEP_FLAGS, "reset", "from_acc", "use_imm"}


def _token_effects(insn: Insn) -> list[tuple[TokenQueue, int]]:
    module = module_of(insn)
    effects = []
    for flag in insn.deps():
        queue = DEP_QUEUES.get((module, flag))
        if queue is not None:
            effects.append((queue, -1 if flag.startswith("pop") else 1))
    return effects


def _insn_text(insn: Insn, cfg: HwConfig) -> str:
    parts = [insn.opcode.name]
    if isinstance(insn, MemInsn):
        parts.append(insn.mem_type.name)
    if isinstance(insn, AluInsn):
        parts.append(insn.alu_op.name)
    for f, value in insn_fields(insn, cfg):
        if f.name in ("mem_type", "alu_op"):
            continue
        if f.name in _BOOL_FIELDS:
            if value:
                parts.append(f.name)
        elif value:
            parts.append(f"{f.name}={value}")
    return " ".join(parts)


def disassemble(program: Program) -> str:
    """Readable assembly of ``program``; :func:`assemble` turns it back into identical bytes.

    Each instruction line ends with a comment giving the module it runs on and the running
    token count of every queue after it, in program order (as VTA's instruction dump did).
    """
    cfg = program.config
    lines = [
        "; accel program",
        f".config {cfg.name}",
    ]
    for r in program.regions.values():
        extra = ""
        if r.shape is not None:
            extra += f" shape={'x'.join(str(s) for s in r.shape) or '-'}"
        if r.dtype is not None:
            extra += f" dtype={r.dtype}"
        if r.layout is not None:
            extra += f" layout={r.layout}"
        lines.append(f".region {r.name} offset={r.offset} nbytes={r.nbytes}{extra}")
    if program.uop_region is not None:
        lines.append(f".uop_region {program.uop_region}")
    if program.meta:
        lines.append(f".meta {json.dumps(program.meta, sort_keys=True)}")
    lines.append(".uops")
    for k, (dst, src, wgt) in enumerate(program.uops.tolist()):
        lines.append(f"  {k}: {dst} {src} {wgt}")
    lines.append(".text")
    tokens = {q: 0 for q in TokenQueue}
    width = max(len(_insn_text(insn, cfg)) for insn in program.insns) if program.insns else 0
    for k, insn in enumerate(program.insns):
        for queue, delta in _token_effects(insn):
            tokens[queue] += delta
        counts = " ".join(f"{q.name.lower()}={tokens[q]}" for q in TokenQueue)
        text = _insn_text(insn, cfg)
        lines.append(
            f"  {k}: {text:<{width}}  ; {module_of(insn).name.lower():<7} {counts}"
        )
    return "\n".join(lines) + "\n"


def _resolve_config(name: str, config: HwConfig | None, where: str) -> HwConfig:
    if config is not None:
        if config.name != name:
            raise AsmError(f"{where}: .config {name} does not match the given config {config.name}")
        return config
    for shipped in shipped_configs():
        cfg = load_config(shipped)
        if cfg.name == name:
            return cfg
    try:
        return load_config(name)
    except ConfigError:
        raise AsmError(
            f"{where}: .config {name} is not a shipped config; pass the config explicitly"
        ) from None


def _parse_int(text: str, where: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise AsmError(f"{where}: expected an integer, got {text!r}") from None


def _parse_insn(tokens: Sequence[str], cfg: HwConfig, where: str) -> Insn:
    try:
        opcode = Opcode[tokens[0]]
    except KeyError:
        raise AsmError(f"{where}: unknown opcode {tokens[0]!r}") from None
    kwargs: dict[str, Any] = {}
    rest = list(tokens[1:])
    if opcode in (Opcode.LOAD, Opcode.STORE):
        if not rest or rest[0] not in MemType.__members__:
            names = ", ".join(MemType.__members__)
            raise AsmError(f"{where}: {opcode.name} needs a memory type ({names})")
        kwargs["mem_type"] = MemType[rest.pop(0)]
        kwargs["store"] = opcode is Opcode.STORE
        # Unlisted size fields are zero in the text form.
        kwargs.update(y_size=0, x_size=0, x_stride=0)
    if opcode is Opcode.ALU:
        if not rest or rest[0] not in AluOp.__members__:
            raise AsmError(f"{where}: ALU needs an operation ({', '.join(AluOp.__members__)})")
        kwargs["alu_op"] = AluOp[rest.pop(0)]
    if opcode in (Opcode.GEMM, Opcode.ALU):
        kwargs.update(uop_end=0, iter_out=0, iter_in=0)
    fmt = IsaLayout.of(cfg).formats[opcode]
    names = {f.name for f in fmt.fields[1:]} - {"mem_type", "alu_op"}
    for tok in rest:
        key, eq, value = tok.partition("=")
        if key not in names:
            raise AsmError(f"{where}: {opcode.name} has no field {key!r}")
        if key in _BOOL_FIELDS:
            if eq:
                raise AsmError(f"{where}: flag {key} takes no value")
            kwargs[key] = True
        else:
            if not eq:
                raise AsmError(f"{where}: field {key} needs a value ({key}=N)")
            kwargs[key] = _parse_int(value, where)
    cls = {Opcode.LOAD: MemInsn, Opcode.STORE: MemInsn, Opcode.GEMM: GemmInsn,
           Opcode.ALU: AluInsn, Opcode.FINISH: FinishInsn}[opcode]
    insn = cls(**kwargs)
    try:
        encode_insn(insn, cfg)
    except EncodeError as exc:
        raise AsmError(f"{where}: {exc}") from None
    return insn


_NO_CONFIG = ("{where}: no .config directive before the first instruction; add one (.config "
              "NAME) or pass the config (accel asm --config NAME)")


def assemble(text: str, config: HwConfig | None = None, source: str = "<asm>") -> Program:
    """Parse assembly text (the :func:`disassemble` form) into a :class:`Program`.

    Comments start with ``;``. A leading ``N:`` on a line is an index and is ignored. The
    config is the ``.config`` directive's (which must come before the first instruction), or
    ``config``; one of them is required, since encodings depend on it.

    Raises
    ------
    AsmError
        Naming ``source`` and the line number.
    """
    cfg = config
    regions: dict[str, Region] = {}
    uops: list[tuple[int, int, int]] = []
    insns: list[Insn] = []
    uop_region: str | None = None
    meta: dict[str, Any] = {}
    section = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        where = f"{source}:{lineno}"
        line = raw.split(";", 1)[0].strip()
        if not line:
            continue
        head, _, body = line.partition(" ")
        if head == ".config":
            cfg = _resolve_config(body.strip(), config, where)
        elif head == ".region":
            regions.update(_parse_region(body, where))
        elif head == ".uop_region":
            uop_region = body.strip()
        elif head == ".meta":
            try:
                meta = json.loads(body)
            except json.JSONDecodeError as exc:
                raise AsmError(f"{where}: .meta is not valid JSON: {exc.msg}") from None
        elif head in (".uops", ".text"):
            section = head
        elif head.startswith("."):
            raise AsmError(f"{where}: unknown directive {head}")
        else:
            tokens = line.split()
            if tokens[0].endswith(":"):
                tokens = tokens[1:]
            if not tokens:
                continue
            if section == ".uops":
                if len(tokens) != 3:
                    raise AsmError(f"{where}: a micro-op is three integers: dst src wgt")
                dst, src, wgt = (_parse_int(t, where) for t in tokens)
                uops.append((dst, src, wgt))
            elif section == ".text":
                if cfg is None:
                    # Guessing (the packaged default) silently built a different program.
                    raise AsmError(_NO_CONFIG.format(where=where))
                insns.append(_parse_insn(tokens, cfg, where))
            else:
                raise AsmError(f"{where}: instruction outside .text or .uops")
    if cfg is None:
        raise AsmError(_NO_CONFIG.format(where=source).replace(" before the first instruction",
                                                               ""))
    uop_arr = np.array(uops, dtype=np.int64).reshape(-1, 3)
    try:
        encode_uops(uop_arr, cfg)
    except EncodeError as exc:
        raise AsmError(f"{source}: {exc}") from None
    return Program(cfg, insns, uop_arr, regions, uop_region, meta)


def assemble_file(path: str | Path, config: HwConfig | None = None) -> Program:
    """:func:`assemble` the UTF-8 text of ``path`` (errors name the file and line).

    Raises
    ------
    AsmError
        The file cannot be read, or its text does not assemble.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AsmError(f"{path}: cannot read: {exc}") from None
    return assemble(text, config=config, source=str(path))


def _parse_region(body: str, where: str) -> dict[str, Region]:
    tokens = body.split()
    if not tokens:
        raise AsmError(f"{where}: .region needs a name")
    name = tokens[0]
    fields_: dict[str, str] = {}
    for tok in tokens[1:]:
        key, eq, value = tok.partition("=")
        if not eq or key not in ("offset", "nbytes", "shape", "dtype", "layout"):
            raise AsmError(f"{where}: bad .region field {tok!r}")
        fields_[key] = value
    if "offset" not in fields_ or "nbytes" not in fields_:
        raise AsmError(f"{where}: .region {name} needs offset= and nbytes=")
    shape = None
    if "shape" in fields_:
        shape = () if fields_["shape"] == "-" else tuple(
            _parse_int(s, where) for s in fields_["shape"].split("x")
        )
    region = Region(
        name,
        _parse_int(fields_["offset"], where),
        _parse_int(fields_["nbytes"], where),
        shape,
        fields_.get("dtype"),
        fields_.get("layout"),
    )
    return {name: region}


def token_trace(insns: Iterable[Insn]) -> list[dict[TokenQueue, int]]:
    """Running token counts per queue after each instruction, in program order."""
    tokens = {q: 0 for q in TokenQueue}
    out = []
    for insn in insns:
        for queue, delta in _token_effects(insn):
            tokens[queue] += delta
        out.append(dict(tokens))
    return out


__all__ += ["Module", "token_trace"]
