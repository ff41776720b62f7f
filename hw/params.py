"""RTL parameters derived from a :class:`~accel.machine.config.HwConfig`, and the instruction
layouts.

Everything the RTL needs that is not a plain config field is computed here once: data-path
widths, the gearbox between DRAM beats and buffer elements, the instruction and micro-op
layouts as :mod:`amaranth.lib.data` views generated from :class:`accel.machine.isa.IsaLayout` (never
hand-written widths), and the checks that reject configs the RTL cannot implement with the cycle
costs of :mod:`accel.machine.costs`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from amaranth.hdl import Shape, signed, unsigned
from amaranth.lib import data

from accel.machine.config import INSN_BITS, HwConfig
from accel.machine.isa import InsnFormat, IsaLayout, MemType, Opcode

__all__ = [
    "WRITEBACK_STAGE",
    "WRITE_AFTER_LAST",
    "BufferGeometry",
    "RtlParams",
    "check_rtl_config",
    "format_layout",
    "gemm_deep",
    "writeback_stage",
]

WRITEBACK_STAGE = {"gemm": 7, "alu": 8}
"""Pipeline stage (cycles after the micro-op issues) at whose end GEMM / ALU results are written
into the acc and out buffers, in the shortest pipelines; the GEMM's is a stage later where its
depth leaves room for a product register (:func:`gemm_deep`, :func:`writeback_stage`)."""

WRITE_AFTER_LAST = {"gemm": 2, "alu": 2}
"""Cycles after an instruction's last cycle in which its last result may still be written:
nothing reads acc or out earlier (the next compute instruction reads acc two cycles after its
decode at the earliest, STORE's first out read is latched two cycles after the compute
instruction's push, through a transparent port)."""


def gemm_deep(cfg: HwConfig) -> bool:
    """Whether the GEMM registers its products once more, in the fabric, before the adder tree.

    The products come out of multiplier blocks that sit apart from the logic (on ECP5 the route
    alone is 4-6 ns), so the adder tree gets a stage of its own where ``gemm.depth`` pays for
    it: where the results, written a stage later, still land at most
    :data:`WRITE_AFTER_LAST` cycles after the instruction's last (``depth >= 8 - ii - 2``: 5
    at ``gemm.ii`` 1, 4 at ii 2). A shallower GEMM keeps the shortest pipeline; the cycle
    counts are those of ``accel.machine.costs`` either way.
    """
    g = cfg.gemm
    return g.depth >= WRITEBACK_STAGE["gemm"] + 1 - g.ii - WRITE_AFTER_LAST["gemm"]


def writeback_stage(cfg: HwConfig, unit: str) -> int:
    """The stage at whose end ``unit``'s (``"gemm"`` or ``"alu"``) results are written in the
    RTL of ``cfg``: :data:`WRITEBACK_STAGE`, a stage later for a :func:`gemm_deep` GEMM."""
    return WRITEBACK_STAGE[unit] + int(unit == "gemm" and gemm_deep(cfg))


def _log2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def format_layout(fmt: InsnFormat, width: int) -> data.StructLayout:
    """A struct layout of one instruction format, padded to ``width`` bits.

    Fields come from :class:`accel.machine.isa.IsaLayout` in order; their offsets are checked
    against the format's own ``lsb`` so the RTL decoder and ``accel.machine.isa.encode_insn``
    cannot disagree.
    """
    fields: dict[str, Shape] = {}
    offset = 0
    for f in fmt.fields:
        if f.lsb != offset:  # pragma: no cover - IsaLayout packs fields contiguously
            raise ValueError(f"{fmt.name}.{f.name} starts at bit {f.lsb}, not {offset}")
        fields[f.name] = signed(f.width) if f.signed else unsigned(f.width)
        offset += f.width
    if offset < width:
        fields["_pad"] = unsigned(width - offset)
    layout = data.StructLayout(fields)
    for f in fmt.fields:
        assert layout[f.name].offset == f.lsb
    return layout


@dataclass(frozen=True)
class BufferGeometry:
    """How one on-chip buffer is built and how DRAM beats map onto its elements.

    ``elem_bits`` is the element's DRAM footprint (a tile, or a micro-op word); ``store_bits``
    the bits kept per element (micro-ops keep only their packed indices). ``lanes`` elements
    arrive per DRAM beat when an element is narrower than a beat (the buffer is then split into
    that many interleaved banks so a beat is written in one cycle); ``beats_per_elem`` beats
    make one element when it is wider.
    """

    name: str
    elem_bits: int
    store_bits: int
    depth: int
    lanes: int
    beats_per_elem: int

    @property
    def addr_bits(self) -> int:
        """Bits of an element index."""
        return max(1, _log2(self.depth))

    @property
    def elem_bytes(self) -> int:
        return self.elem_bits // 8

    @property
    def elem_shift(self) -> int:
        """log2 of the element size in bytes (element index -> byte offset)."""
        return _log2(self.elem_bytes)


class RtlParams:
    """Derived RTL parameters for one config; use :meth:`of` (cached).

    Raises
    ------
    ValueError
        From :func:`check_rtl_config`, when the config cannot be built with the cycle costs of
        :mod:`accel.machine.costs`.
    """

    def __init__(self, cfg: HwConfig) -> None:
        check_rtl_config(cfg)
        self.cfg = cfg
        self.gemm_deep = gemm_deep(cfg)
        self.isa = IsaLayout.of(cfg)
        self.beat_bits = cfg.dram.bytes_per_cycle * 8
        self.insn_bits = max(fmt.total_bits for fmt in self.isa.formats.values())
        self.formats = {
            op: format_layout(fmt, self.insn_bits) for op, fmt in self.isa.formats.items()
        }
        self.insn_layout = data.UnionLayout({
            "raw": unsigned(self.insn_bits),
            "mem": self.formats[Opcode.LOAD],
            "store": self.formats[Opcode.STORE],
            "gemm": self.formats[Opcode.GEMM],
            "alu": self.formats[Opcode.ALU],
        })
        self.uop_layout = format_layout(self.isa.uop, self.isa.uop.total_bits)
        self.fetch_batch = max(1, cfg.dram.max_burst // (INSN_BITS // 8))
        max_elem = max(cfg.tile_bytes(b) for b in ("uop", "inp", "wgt", "acc", "out"))
        self.dram_addr_bits = cfg.isa.dram_addr_bits + _log2(max(max_elem, INSN_BITS // 8))
        self.burst_bytes_bits = _log2(cfg.dram.max_burst) + 1
        self.cmd_depth = cfg.queues.cmd_depth
        self.token_depth = cfg.queues.token_depth
        self.buffers = {
            "uop": self._geometry("uop", cfg.uop_bytes * 8, cfg.uop_bits, cfg.uop_depth),
            "inp": self._geometry("inp", cfg.inp_tile_bytes * 8, None, cfg.inp_depth),
            "wgt": self._geometry("wgt", cfg.wgt_tile_bytes * 8, None, cfg.wgt_depth),
            "acc": self._geometry("acc", cfg.acc_tile_bytes * 8, None, cfg.acc_depth),
            "out": self._geometry("out", cfg.out_tile_bytes * 8, None, cfg.out_depth),
        }
        self.insn_buffer = self._geometry("insn", INSN_BITS, self.insn_bits, self.fetch_batch)

    def _geometry(self, name: str, elem_bits: int, store_bits: int | None,
                  depth: int) -> BufferGeometry:
        lanes = max(1, self.beat_bits // elem_bits)
        return BufferGeometry(
            name=name,
            elem_bits=elem_bits,
            store_bits=store_bits if store_bits is not None else elem_bits,
            depth=max(depth, lanes),
            lanes=lanes,
            beats_per_elem=max(1, elem_bits // self.beat_bits),
        )

    @staticmethod
    @functools.lru_cache(maxsize=16)
    def of(cfg: HwConfig) -> RtlParams:
        """The (cached) parameters of ``cfg``."""
        return RtlParams(cfg)

    def buffer_of(self, mem_type: MemType) -> BufferGeometry:
        return self.buffers[mem_type.buffer]


def check_rtl_config(cfg: HwConfig) -> None:
    """Reject configs the RTL cannot build with exactly the cycle costs of ``accel.machine.costs``.

    Raises
    ------
    ValueError
        ``gemm.depth`` or ``alu.depth`` shorter than the pipeline (micro-op issue, index add,
        buffer read, multiply, adder tree, accumulate: results are written
        :data:`WRITEBACK_STAGE` cycles after the micro-op issues, the last at most
        :data:`WRITE_AFTER_LAST` cycles after the instruction's last, so
        ``depth >= stage - ii - late``: 7 - 1 - 2 = 4 for GEMM at ii 1, 8 - 2 - 2 = 4 for the
        ALU at ii 2, 8 - 1 - 2 = 5 at ii 1, where immediate operations issue every cycle and
        those with an acc operand every other, ``accel.machine.costs.alu_ii``);
        ``dram.latency`` of 0 (the DRAM port is registered: data comes at least one cycle after
        the request).
    """
    for unit in ("gemm", "alu"):
        p = getattr(cfg, unit)
        stage, late = WRITEBACK_STAGE[unit], WRITE_AFTER_LAST[unit]
        need = stage - p.ii - late
        if p.depth < need:
            raise ValueError(
                f"{unit}.depth must be at least {need} cycles for ii={p.ii} (results are "
                f"written {stage} cycles after the micro-op issues, at most {late} after the "
                f"instruction's last cycle), not {p.depth}"
            )
    if cfg.dram.latency < 1:
        raise ValueError(
            f"dram.latency must be at least 1 cycle for the registered DRAM port, "
            f"not {cfg.dram.latency}"
        )
