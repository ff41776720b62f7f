"""The bit-exact functional simulator: the definition of what every instruction does.

``FunctionalSimulator.run`` executes a :class:`~accel.machine.program.Program` on a
:class:`~accel.machine.dram.Dram` image. Each instruction is one vectorised numpy step (one
gather and one batched product per GEMM micro-op loop, never a Python loop per tile or MAC).
Instructions retire in the order of :func:`accel.machine.tokens.retire_order`, the token
protocol of the machine's processes and bounded queues run without time, so a program that
cannot finish is reported as :class:`SimulationDeadlock`, and tokens or instructions left over
at FINISH as :class:`~accel.machine.program.ProgramError`, both naming instruction indices and
queues.

Semantics (DESIGN.md §3):

- LOAD: ``(y_pad_0 + y_size + y_pad_1) x (x_pad_0 + x_size + x_pad_1)`` elements written
  contiguously from ``sram_base``, zeros in the pad; DRAM row ``y`` starts at element
  ``dram_base + y * x_stride``.
- STORE OUT: ``y_size x x_size`` out tiles from ``sram_base`` to DRAM rows. STORE ACC (with
  ``store.postproc``): the acc tiles there, each element ``clip(acc >> shift, clip_lo,
  clip_hi)`` as int8 (:func:`post_process`).
- GEMM: for i < iter_out, j < iter_in, u in [uop_bgn, uop_end): ``idx = uop + i * factor_out +
  j * factor_in``; ``acc[dst] += inp[src] . wgt[wgt]^T`` in int32 with wrap-around, or
  ``acc[dst] = 0`` with ``reset`` (``acc[dst] = acc[src]``, in micro-op order, with
  ``from_acc``). Every write also writes the low 8 bits to ``out[dst]``.
- ALU: the same loop; ``acc[dst] = op(acc[dst], imm or acc[src])`` elementwise, in micro-op
  order. MIN, MAX, ADD (wrap), MUL (wrap, low 32 bits), SHR by ``s``: arithmetic right shift by
  ``min(s, 31)`` when ``s >= 0``, else left shift by ``-s`` (wrap; zero once ``-s >= 32``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accel.machine.actions import ActionCounts
from accel.machine.config import HwConfig
from accel.machine.dram import Dram, place_program
from accel.machine.isa import (
    AluInsn,
    AluOp,
    GemmInsn,
    Insn,
    MemInsn,
    MemType,
    decode_uops,
)
from accel.machine.program import (
    Program,
    ProgramError,
    SimulationError,
    count_key,
)
from accel.machine.tokens import retire_order

__all__ = ["FsimStats", "FunctionalSimulator", "SramState", "alu_apply", "post_process",
           "run_functional"]


@dataclass
class FsimStats:
    """Counters of one functional run (VTA fsim's counters, plus instruction counts).

    ``bytes_loaded`` counts DRAM bytes read per buffer (uop, inp, wgt, acc), padding excluded;
    ``bytes_stored`` DRAM bytes written from the out buffer; ``actions`` every action that
    costs energy (:mod:`accel.machine.actions`), instruction fetch included.
    """

    bytes_loaded: dict[str, int] = field(
        default_factory=lambda: {"uop": 0, "inp": 0, "wgt": 0, "acc": 0}
    )
    bytes_stored: int = 0
    gemm_uops: int = 0
    alu_uops: int = 0
    macs: int = 0
    insn_counts: dict[str, int] = field(default_factory=dict)
    actions: ActionCounts = field(default_factory=ActionCounts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes_loaded": dict(self.bytes_loaded),
            "bytes_stored": self.bytes_stored,
            "gemm_uops": self.gemm_uops,
            "alu_uops": self.alu_uops,
            "macs": self.macs,
            "insn_counts": dict(self.insn_counts),
            "actions": self.actions.to_dict(),
        }


class SramState:
    """The on-chip buffers of one accelerator, typed by what they hold.

    ``uop``: ``(depth, 3)`` int64 (dst, src, wgt); ``inp``: ``(depth, batch, block_in)`` int8;
    ``wgt``: ``(depth, block_out, block_in)`` int8; ``acc``: ``(depth, batch, block_out)``
    int32; ``out``: ``(depth, batch, block_out)`` int8.
    """

    def __init__(self, cfg: HwConfig) -> None:
        b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
        self.uop = np.zeros((cfg.uop_depth, 3), dtype=np.int64)
        self.inp = np.zeros((cfg.inp_depth, b, bi), dtype=np.int8)
        self.wgt = np.zeros((cfg.wgt_depth, bo, bi), dtype=np.int8)
        self.acc = np.zeros((cfg.acc_depth, b, bo), dtype=np.int32)
        self.out = np.zeros((cfg.out_depth, b, bo), dtype=np.int8)

    def buffer(self, mem_type: MemType) -> np.ndarray:
        return getattr(self, mem_type.buffer)


def _wrap32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int32)


def alu_apply(op: AluOp, a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """One ALU operation on int32 operands, int32 result (see the module docstring)."""
    a64 = a.astype(np.int64)
    b64 = np.asarray(b, dtype=np.int64)
    if op is AluOp.MIN:
        r = np.minimum(a64, b64)
    elif op is AluOp.MAX:
        r = np.maximum(a64, b64)
    elif op is AluOp.ADD:
        r = a64 + b64
    elif op is AluOp.MUL:
        r = a64 * b64
    else:
        right = a64 >> np.minimum(np.maximum(b64, 0), 31)
        left_amount = np.minimum(np.maximum(-b64, 0), 32)
        left = np.where(left_amount >= 32, 0, a64 << np.minimum(left_amount, 31))
        r = np.where(b64 >= 0, right, left)
    return _wrap32(np.broadcast_to(r, np.broadcast_shapes(a.shape, np.shape(r))))


def post_process(acc: np.ndarray, insn: MemInsn) -> np.ndarray:
    """A STORE ACC's elements: ``acc`` (int32) shifted right arithmetically by ``insn.shift``,
    clipped to ``[insn.clip_lo, insn.clip_hi]``, as int8."""
    return np.clip(acc >> insn.shift, insn.clip_lo, insn.clip_hi).astype(np.int8)


def _loop_indices(insn: GemmInsn | AluInsn, uops: np.ndarray) -> tuple[np.ndarray, ...]:
    """Flattened (dst, src[, wgt]) indices of the micro-op loop, in execution order."""
    kernel = uops[insn.uop_bgn : insn.uop_end]
    i = np.arange(insn.iter_out, dtype=np.int64)[:, None, None]
    j = np.arange(insn.iter_in, dtype=np.int64)[None, :, None]
    dst = (kernel[None, None, :, 0] + i * insn.dst_factor_out + j * insn.dst_factor_in).ravel()
    src = (kernel[None, None, :, 1] + i * insn.src_factor_out + j * insn.src_factor_in).ravel()
    if isinstance(insn, GemmInsn):
        wgt = (
            kernel[None, None, :, 2] + i * insn.wgt_factor_out + j * insn.wgt_factor_in
        ).ravel()
        return dst, src, wgt
    return dst, src


class FunctionalSimulator:
    """Executes programs instruction by instruction on its own SRAM state.

    Parameters
    ----------
    cfg
        The hardware; buffers are sized from it.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self.cfg = cfg
        self.sram = SramState(cfg)
        self.stats = FsimStats()
        self._exact_f32 = cfg.block_in <= 1024
        self._plans: dict[tuple[object, ...], _LoopPlan] = {}
        self._uop_epoch = 0

    # ------------------------------------------------------------------ program level
    def run(self, program: Program, dram: Dram) -> FsimStats:
        """Run ``program`` to FINISH on ``dram`` (modified in place); return the counters.

        Raises
        ------
        ProgramError
            Static errors (see ``Program.validate``), tokens or instructions left at FINISH.
        SimulationDeadlock
            No module can make progress before FINISH.
        SimulationError
            An index out of range at run time (naming the instruction).
        """
        if program.config != self.cfg:
            raise ProgramError(
                f"program was built for config {program.config.name}, not {self.cfg.name}"
            )
        program.validate()
        place_program(program, dram)
        self.stats.actions.add_fetch(len(program.insns), self.cfg)
        for index, insn in retire_order(program):
            self.execute(insn, index, dram)
        return self.stats

    # ------------------------------------------------------------------ instruction level
    def execute(self, insn: Insn, index: int, dram: Dram) -> None:
        """Apply one instruction's functional effect (no token bookkeeping).

        The timing simulator calls this in the order its model retires instructions.
        """
        if isinstance(insn, MemInsn):
            if insn.store:
                self._store(insn, index, dram)
            else:
                self._load(insn, index, dram)
        elif isinstance(insn, GemmInsn):
            self._gemm(insn, index)
        elif isinstance(insn, AluInsn):
            self._alu(insn, index)
        self._count(insn)

    def _count(self, insn: Insn) -> None:
        key = count_key(insn)
        self.stats.insn_counts[key] = self.stats.insn_counts.get(key, 0) + 1
        self.stats.actions.add_insn(insn, self.cfg)

    def _dram_rows(self, insn: MemInsn, index: int, dram: Dram, elem: int) -> np.ndarray:
        """``(y_size, x_size * elem)`` strided uint8 view of the DRAM side of a LOAD/STORE."""
        start = insn.dram_base * elem
        last = start + ((insn.y_size - 1) * insn.x_stride + insn.x_size) * elem
        if last > dram.nbytes:
            raise SimulationError(
                f"instruction {index} ({count_key(insn)}): DRAM range "
                f"[{start}, {last}) is beyond the {dram.nbytes}-byte image"
            )
        return np.lib.stride_tricks.as_strided(
            dram.data[start:],
            shape=(insn.y_size, insn.x_size * elem),
            strides=(insn.x_stride * elem, 1),
            writeable=True,
        )

    def _load(self, insn: MemInsn, index: int, dram: Dram) -> None:
        cfg = self.cfg
        buffer = self.sram.buffer(insn.mem_type)
        elem = cfg.tile_bytes(insn.mem_type.buffer)
        if not (insn.y_size and insn.x_size):
            return  # a zero-size LOAD only carries tokens: no padding is written either
        if insn.mem_type is MemType.UOP:
            self._uop_epoch += 1  # cached micro-op loop plans are stale
        block = np.zeros((insn.rows, insn.cols, *buffer.shape[1:]), dtype=buffer.dtype)
        rows = self._dram_rows(insn, index, dram, elem)
        if insn.mem_type is MemType.UOP:
            words = rows.reshape(-1).view(f"<u{cfg.uop_bytes}")
            data = decode_uops(words, cfg)
        else:
            data = rows.reshape(-1).view(buffer.dtype.newbyteorder("<"))
        block[insn.y_pad_0 : insn.y_pad_0 + insn.y_size,
              insn.x_pad_0 : insn.x_pad_0 + insn.x_size] = data.reshape(
            (insn.y_size, insn.x_size, *buffer.shape[1:])
        )
        self.stats.bytes_loaded[insn.mem_type.buffer] += insn.y_size * insn.x_size * elem
        n = insn.rows * insn.cols
        buffer[insn.sram_base : insn.sram_base + n] = block.reshape((n, *buffer.shape[1:]))

    def _store(self, insn: MemInsn, index: int, dram: Dram) -> None:
        if not (insn.y_size and insn.x_size):
            return
        elem = self.cfg.out_tile_bytes
        rows = self._dram_rows(insn, index, dram, elem)
        n = insn.y_size * insn.x_size
        if insn.mem_type is MemType.ACC:
            src = post_process(self.sram.acc[insn.sram_base : insn.sram_base + n], insn)
        else:
            src = self.sram.out[insn.sram_base : insn.sram_base + n]
        rows[...] = src.reshape(insn.y_size, insn.x_size * elem).view(np.uint8)
        self.stats.bytes_stored += n * elem

    def _check_range(self, insn: Insn, index: int, name: str, idx: np.ndarray,
                     depth: int) -> None:
        if idx.size and (idx.max() >= depth or idx.min() < 0):
            bad = int(idx.max()) if idx.max() >= depth else int(idx.min())
            raise SimulationError(
                f"instruction {index} ({count_key(insn)}): {name} index {bad} is outside "
                f"the buffer of depth {depth}"
            )

    @staticmethod
    def _check_back_to_back(insn: Insn, index: int, dst: np.ndarray) -> None:
        """At ``alu.ii`` 1 an immediate ALU operation's consecutive micro-ops write different
        tiles: the ALU forwards a result to the micro-op two behind at the earliest."""
        same = np.flatnonzero(dst[1:] == dst[:-1])
        if same.size:
            k = int(same[0])
            raise SimulationError(
                f"instruction {index} ({count_key(insn)}): micro-ops {k} and {k + 1} both "
                f"write acc[{int(dst[k])}], back to back, which an immediate ALU operation "
                f"at alu.ii 1 cannot do (its result reaches the micro-op two behind at the "
                f"earliest)")

    def _plan(self, insn: GemmInsn | AluInsn, index: int) -> _LoopPlan:
        """The index plan of a micro-op loop, range-checked; cached until the next LOAD UOP."""
        is_gemm = isinstance(insn, GemmInsn)
        key = (
            self._uop_epoch, is_gemm, insn.uop_bgn, insn.uop_end, insn.iter_out, insn.iter_in,
            insn.dst_factor_out, insn.dst_factor_in, insn.src_factor_out, insn.src_factor_in,
            insn.wgt_factor_out if is_gemm else 0,  # type: ignore[union-attr]
            insn.wgt_factor_in if is_gemm else 0,  # type: ignore[union-attr]
            (insn.reset if is_gemm else insn.use_imm),  # type: ignore[union-attr]
            is_gemm and insn.from_acc,  # type: ignore[union-attr]
        )
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        cfg = self.cfg
        indices = _loop_indices(insn, self.sram.uop)
        dst, src = indices[0], indices[1]
        if isinstance(insn, GemmInsn) and insn.from_acc:
            # A reset that copies acc[src]: the ALU's plan (the order of the copies matters
            # where a source is a destination written before).
            self._check_range(insn, index, "acc", dst, cfg.acc_depth)
            self._check_range(insn, index, "acc src", src, cfg.acc_depth)
            ordered = _alu_vectorisable(dst, src, False, cfg.acc_depth)
            plan = _LoopPlan(dst, src, None, None, None, None, ordered)
        elif isinstance(insn, GemmInsn):
            self._check_range(insn, index, "acc", dst, cfg.acc_depth)
            if not insn.reset:
                self._check_range(insn, index, "inp", src, cfg.inp_depth)
                self._check_range(insn, index, "wgt", indices[2], cfg.wgt_depth)
            plan = _LoopPlan(dst, src, indices[2], *_group_by_index(dst),
                             blocks=_gemm_blocks(dst, src, indices[2]))
        else:
            self._check_range(insn, index, "acc dst", dst, cfg.acc_depth)
            if not insn.use_imm:
                self._check_range(insn, index, "acc src", src, cfg.acc_depth)
            elif cfg.alu.ii == 1:
                self._check_back_to_back(insn, index, dst)
            ordered = _alu_vectorisable(dst, src, insn.use_imm, cfg.acc_depth)
            plan = _LoopPlan(dst, src, None, None, None, None, ordered)
        if len(self._plans) >= 4096:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def _gemm(self, insn: GemmInsn, index: int) -> None:
        sram = self.sram
        plan = self._plan(insn, index)
        dst = plan.dst
        if not dst.size:
            return
        if insn.reset and insn.from_acc:
            if plan.vectorisable:
                sram.acc[dst] = sram.acc[plan.src]
            else:
                for d, s in zip(dst.tolist(), plan.src.tolist(), strict=True):
                    sram.acc[d] = sram.acc[s]
            sram.out[dst] = sram.acc[dst].astype(np.int8)
            return
        if insn.reset:
            sram.acc[dst] = 0
            sram.out[dst] = 0
            return
        self.stats.gemm_uops += dst.size  # as VTA's fsim: reset micro-ops are not counted
        ftype = np.float32 if self._exact_f32 else np.float64
        if plan.blocks is not None:
            self._gemm_blocks(plan)
            return
        a = sram.inp[plan.src].astype(ftype)                      # (n, batch, block_in)
        w = sram.wgt[plan.wgt].astype(ftype).transpose(0, 2, 1)   # (n, block_in, block_out)
        prod = np.matmul(a, w).astype(np.int64)                   # exact: |sum| < 2**24
        self.stats.macs += dst.size * self.cfg.batch * self.cfg.block_in * self.cfg.block_out
        if plan.order is None:
            targets, sums = dst, prod
        else:
            targets = plan.targets
            sums = np.add.reduceat(prod[plan.order], plan.starts, axis=0)
        result = _wrap32(sram.acc[targets].astype(np.int64) + sums)
        sram.acc[targets] = result
        sram.out[targets] = result.astype(np.int8)

    def _gemm_blocks(self, plan: _LoopPlan) -> None:
        """The block form of :func:`_gemm_blocks`: one product per weight sequence. A row sums
        ``m * block_in`` products of at most 2**14: exact in float32 up to 1024 of them, else
        computed in float64 (exact below 2**53)."""
        cfg, sram = self.cfg, self.sram
        assert plan.blocks is not None
        b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
        for dests, srcs, wseq in plan.blocks:
            m = len(wseq)
            ftype = np.float32 if m * bi <= 1024 else np.float64
            a = sram.inp[srcs].astype(ftype)                  # (r, m, b, bi)
            a = a.transpose(0, 2, 1, 3).reshape(-1, m * bi)   # (r * b, m * bi)
            w = sram.wgt[wseq].astype(ftype)                  # (m, bo, bi)
            w = w.transpose(0, 2, 1).reshape(m * bi, bo)      # (m * bi, bo)
            part = (a @ w).reshape(len(dests), b, bo).astype(np.int64)
            result = _wrap32(sram.acc[dests].astype(np.int64) + part)
            sram.acc[dests] = result
            sram.out[dests] = result.astype(np.int8)
        self.stats.macs += plan.dst.size * b * bi * bo

    def _alu(self, insn: AluInsn, index: int) -> None:
        sram = self.sram
        plan = self._plan(insn, index)
        dst, src = plan.dst, plan.src
        if not dst.size:
            return
        self.stats.alu_uops += dst.size
        if plan.vectorisable:
            operand = insn.imm if insn.use_imm else sram.acc[src]
            result = alu_apply(insn.alu_op, sram.acc[dst], operand)
            sram.acc[dst] = result
            sram.out[dst] = result.astype(np.int8)
            return
        # Repeated destinations or reads of earlier writes: micro-op order matters.
        for d, s in zip(dst.tolist(), src.tolist(), strict=True):
            operand = insn.imm if insn.use_imm else sram.acc[s]
            result = alu_apply(insn.alu_op, sram.acc[d], operand)
            sram.acc[d] = result
            sram.out[d] = result.astype(np.int8)


@dataclass(frozen=True)
class _LoopPlan:
    """Flattened indices of a micro-op loop and how to group repeated destinations."""

    dst: np.ndarray
    src: np.ndarray
    wgt: np.ndarray | None
    order: np.ndarray | None      # GEMM: sort order grouping equal dst (None: all distinct)
    starts: np.ndarray | None     # GEMM: group starts within the sorted order
    targets: np.ndarray | None    # GEMM: the distinct dst of each group
    vectorisable: bool = True     # ALU: all micro-ops at once equals one at a time
    blocks: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...] | None = None
    """GEMM as a few large products: (destinations, their sources (rows x m), the m weight tiles
    every one of those destinations accumulates, in order), when the micro-ops have that
    regular structure (a convolution's do)."""


def _group_by_index(
    idx: np.ndarray,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Sort order, group starts and distinct values of ``idx`` (all None if no repeats)."""
    if idx.size < 2:
        return None, None, None
    order = np.argsort(idx, kind="stable")
    sorted_idx = idx[order]
    starts = np.flatnonzero(np.r_[True, sorted_idx[1:] != sorted_idx[:-1]])
    if len(starts) == len(idx):
        return None, None, None
    return order, starts, sorted_idx[starts]


_MAX_BLOCKS = 64
"""More distinct weight sequences than this and the per-micro-op product is faster."""


def _gemm_blocks(
    dst: np.ndarray, src: np.ndarray, wgt: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...] | None:
    """Rewrite a GEMM's micro-ops as a few large matrix products.

    ``acc[d] += sum_k inp[src_k] . wgt[w_k]^T`` over the micro-ops of destination ``d`` is one
    row of ``concat_k(inp[src_k]) @ concat_k(wgt[w_k])^T``; destinations that accumulate the
    same weight tiles in the same order share the right-hand matrix, so each such set is one
    BLAS product with a reduction of ``m * block_in`` instead of ``block_in``.
    """
    if dst.size < 2 * _MAX_BLOCKS:
        return None
    order = np.lexsort((wgt, dst))
    d, s, w = dst[order], src[order], wgt[order]
    starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    counts = np.diff(np.r_[starts, d.size])
    if not np.all(counts == counts[0]):
        return None
    m = int(counts[0])
    dests = d[starts]
    srcs = s.reshape(-1, m)
    wseq = w.reshape(-1, m)
    seqs, which = np.unique(wseq, axis=0, return_inverse=True)
    if len(seqs) > _MAX_BLOCKS:
        return None
    which = which.reshape(-1)
    return tuple((dests[which == g], srcs[which == g], seqs[g]) for g in range(len(seqs)))


def _alu_vectorisable(dst: np.ndarray, src: np.ndarray, use_imm: bool, depth: int) -> bool:
    """True when executing all micro-ops at once equals executing them in order."""
    writer = np.full(depth, -1, dtype=np.int64)
    writer[dst] = np.arange(dst.size)
    if np.count_nonzero(writer >= 0) != dst.size:
        return False  # a destination repeats
    if use_imm:
        return True
    w = writer[src]
    return not np.any((w >= 0) & (w < np.arange(src.size)))


def run_functional(program: Program, dram: Dram) -> FsimStats:
    """Run ``program`` on ``dram`` with a fresh functional simulator."""
    return FunctionalSimulator(program.config).run(program, dram)
