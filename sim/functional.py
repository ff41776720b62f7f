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

How it is fast and still exact:

- GEMM products are computed in float32 (float64 where a reduction is too long) by BLAS. Every
  product of two int8 values is an integer of magnitude at most ``128 * 128 = 2**14``, so a sum
  of ``k`` of them, and every partial sum on the way, is an integer of magnitude at most
  ``k * 2**14``: exactly representable in float32 while ``k <= 1024`` (``2**24``), in float64
  while ``k <= 2**39``. A floating-point sum whose every partial sum is representable is exact
  in any order (and with FMA), so the result equals the integer sum. int32 accumulation wraps
  modulo ``2**32``, so ``wrap(acc + p1 + p2 ...)`` step by step equals ``wrap(acc + sum p)``:
  micro-ops of one destination may be summed in any order, then added once.
- A GEMM whose micro-ops give every destination the same number ``m`` of products, and whose
  destinations fall into a few sets that accumulate the same ``m`` weight tiles (a
  convolution's do), is one batched matrix product per instruction: ``(sets, rows, m *
  block_in) @ (sets, m * block_in, block_out)`` (:func:`_gemm_blocks`).
- Micro-op loop plans (indices, range checks, groupings) are cached by the loop's fields and
  the micro-op words of its range, so a kernel re-loaded into the uop buffer is not re-planned.
- Instruction counts and energy actions (:class:`~accel.machine.actions.ActionCounts`) are
  counted per distinct instruction: each retired instruction bumps a counter keyed by its field
  values, and :attr:`FunctionalSimulator.stats` adds ``n`` times each distinct instruction's
  :meth:`~accel.machine.actions.ActionCounts.add_insn` counts (they are sums over instructions
  of a function of the instruction's fields and the config), in first-retired order, when read.
"""

from __future__ import annotations

import dataclasses
import operator
import sys
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
    shifted = np.asarray(acc) >> insn.shift
    if not isinstance(shifted, np.ndarray):  # a scalar
        return np.clip(shifted, insn.clip_lo, insn.clip_hi).astype(np.int8)
    # clip(x, lo, hi) is min(max(x, lo), hi): the same, in place, without np.clip's wrappers.
    np.maximum(shifted, insn.clip_lo, out=shifted)
    np.minimum(shifted, insn.clip_hi, out=shifted)
    return shifted.astype(np.int8)


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


_GEMM_PLAN_FIELDS = operator.attrgetter(
    "uop_bgn", "uop_end", "iter_out", "iter_in", "dst_factor_out", "dst_factor_in",
    "src_factor_out", "src_factor_in", "wgt_factor_out", "wgt_factor_in", "reset", "from_acc")
_ALU_PLAN_FIELDS = operator.attrgetter(
    "uop_bgn", "uop_end", "iter_out", "iter_in", "dst_factor_out", "dst_factor_in",
    "src_factor_out", "src_factor_in", "use_imm")
"""The fields a micro-op loop's plan depends on (with the micro-op words of its range)."""

_PLAN_CACHE_SIZE = 4096

_PLANS: dict[HwConfig, dict[tuple[object, ...], _LoopPlan]] = {}
"""Micro-op loop plans by config and (micro-op words, loop kind, loop fields, tunables): a
pure function of those (its range checks passed), so shared by every simulator of the
process. Plans are never modified."""

_DELTAS: dict[HwConfig, dict[object, tuple[tuple[str, str | None, int], ...]]] = {}
"""``ActionCounts.add_insn``'s non-zero counts by config and :func:`_count_key`: a pure
function of the two, so shared by every simulator of the process."""
_DELTAS_SIZE = 1 << 16


_UNCOUNTED_FIELDS: dict[type, tuple[str, ...]] = {MemInsn: ("dram_base",), AluInsn: ("imm",)}
"""Fields no count depends on: no action count (``ActionCounts.add_insn``) reads a DRAM address
or an ALU immediate, the invariant ``runtime.backends.timing_signature`` relies on too (a
cached timing result, its action counts included, serves programs differing in those)."""

_COUNT_FIELDS: dict[type, Any] = {}


def _count_key(insn: Insn) -> tuple[object, ...]:
    """The key an instruction's counts are kept under: its type and its fields but those of
    :data:`_UNCOUNTED_FIELDS`; instructions of one key have the same ``count_key`` and the
    same ``ActionCounts.add_insn`` counts."""
    kind = type(insn)
    getter = _COUNT_FIELDS.get(kind)
    if getter is None:
        skip = _UNCOUNTED_FIELDS.get(kind, ())
        names = [f.name for f in dataclasses.fields(insn) if f.name not in skip]
        fields = operator.attrgetter(*names) if names else (lambda _: ())
        getter = _COUNT_FIELDS[kind] = (lambda x: (fields(x),)) if len(names) == 1 else fields
    return (kind, getter(insn))


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
        self._stats = FsimStats()
        self._exact_f32 = cfg.block_in <= 1024
        self._plans: dict[tuple[object, ...], _LoopPlan] = {}
        """Plans by (uop epoch, loop kind, loop fields): valid until the next LOAD UOP."""
        self._plans_by_kernel: dict[tuple[object, ...], _LoopPlan] = {}
        """Plans by (micro-op words of the range, loop kind, loop fields): valid always."""
        if len(_PLANS) >= 64:
            _PLANS.clear()
        self._shared_plans = _PLANS.setdefault(cfg, {})
        self._uop_epoch = 0
        self._pending: dict[object, list[Any]] = {}
        """Retired instructions not yet in ``stats``: key -> [instruction, times retired]."""
        if len(_DELTAS) >= 64:
            _DELTAS.clear()
        self._deltas = _DELTAS.setdefault(cfg, {})
        """Each distinct instruction's non-zero ``ActionCounts.add_insn`` counts on ``cfg``
        (shared by the simulators of equal configs: a network's layers)."""
        self._scratch = ActionCounts()
        self._macs_per_uop = cfg.batch * cfg.block_in * cfg.block_out
        self._tile_bytes = {t: cfg.tile_bytes(t.buffer) for t in MemType}
        self._buffer_name = {t: t.buffer for t in MemType}
        # DRAM holds elements little-endian: a LOAD reads them as such, into the native type;
        # on a little-endian host, as bytes into a byte view of the buffer.
        self._le_dtype = {t: self.sram.buffer(t).dtype.newbyteorder("<") for t in MemType}
        self._raw: dict[MemType, np.ndarray] = {}
        if sys.byteorder == "little":
            for t in (MemType.INP, MemType.WGT, MemType.ACC):
                buffer = self.sram.buffer(t)
                if buffer.dtype.itemsize * buffer[0].size == self._tile_bytes[t]:
                    self._raw[t] = buffer.reshape(-1).view(np.uint8)

    # ------------------------------------------------------------------ counters
    @property
    def stats(self) -> FsimStats:
        """The counters of everything retired so far."""
        if self._pending:
            self._flush()
        return self._stats

    @stats.setter
    def stats(self, value: FsimStats) -> None:
        if self._pending:
            self._flush()
        self._stats = value

    def _flush(self) -> None:
        """Add the pending instructions' counts: ``n`` retirements of one instruction count
        ``n`` times its ``add_insn`` counts (linear in the instructions retired)."""
        pending, self._pending = self._pending, {}
        stats, cfg, deltas = self._stats, self.cfg, self._deltas
        counts, actions = stats.insn_counts, stats.actions
        for key, (insn, n) in pending.items():
            name = count_key(insn)
            counts[name] = counts.get(name, 0) + n
            delta = deltas.get(key)
            if delta is None:
                if len(deltas) >= _DELTAS_SIZE:
                    deltas.clear()
                delta = deltas[key] = _action_delta(insn, cfg, self._scratch)
            for attr, sub, value in delta:
                if sub is None:
                    setattr(actions, attr, getattr(actions, attr) + n * value)
                else:
                    table = getattr(actions, attr)
                    table[sub] = table.get(sub, 0) + n * value

    def _count(self, insn: Insn) -> None:
        key = _count_key(insn)
        entry = self._pending.get(key)
        if entry is None:
            self._pending[key] = [insn, 1]
        else:
            entry[1] += 1

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
        self._stats.actions.add_fetch(len(program.insns), self.cfg)
        execute = self.execute
        for index, insn in retire_order(program):
            execute(insn, index, dram)
        return self.stats

    # ------------------------------------------------------------------ instruction level
    def execute(self, insn: Insn, index: int, dram: Dram) -> None:
        """Apply one instruction's functional effect (no token bookkeeping).

        The timing simulator calls this in the order its model retires instructions.
        """
        kind = type(insn)
        if kind is GemmInsn:
            self._gemm(insn, index)  # type: ignore[arg-type]
        elif kind is MemInsn:
            if insn.store:  # type: ignore[attr-defined]
                self._store(insn, index, dram)  # type: ignore[arg-type]
            else:
                self._load(insn, index, dram)  # type: ignore[arg-type]
        elif kind is AluInsn:
            self._alu(insn, index)  # type: ignore[arg-type]
        elif isinstance(insn, MemInsn):
            if insn.store:
                self._store(insn, index, dram)
            else:
                self._load(insn, index, dram)
        elif isinstance(insn, GemmInsn):
            self._gemm(insn, index)
        elif isinstance(insn, AluInsn):
            self._alu(insn, index)
        # Counted once its effect is applied (:meth:`_count`, inlined).
        key = _count_key(insn)
        entry = self._pending.get(key)
        if entry is None:
            self._pending[key] = [insn, 1]
        else:
            entry[1] += 1

    def _dram_rows(self, insn: MemInsn, index: int, dram: Dram, elem: int) -> np.ndarray:
        """``(y_size, x_size * elem)`` strided uint8 view of the DRAM side of a LOAD/STORE."""
        data = dram.data
        start = insn.dram_base * elem
        y_size, row = insn.y_size, insn.x_size * elem
        stride = insn.x_stride * elem
        last = start + (y_size - 1) * stride + row
        if last > data.size:
            raise SimulationError(
                f"instruction {index} ({count_key(insn)}): DRAM range "
                f"[{start}, {last}) is beyond the {dram.nbytes}-byte image"
            )
        if start >= 0:
            if y_size == 1 or stride == row:            # one contiguous run
                return data[start : start + y_size * row].reshape(y_size, row)
            if stride > row and start + y_size * stride <= data.size:
                return data[start : start + y_size * stride].reshape(y_size, stride)[:, :row]
        return np.lib.stride_tricks.as_strided(
            data[start:],
            shape=(y_size, row),
            strides=(stride, 1),
            writeable=True,
        )

    def _load(self, insn: MemInsn, index: int, dram: Dram) -> None:
        y_size, x_size = insn.y_size, insn.x_size
        if not (y_size and x_size):
            return  # a zero-size LOAD only carries tokens: no padding is written either
        mem_type = insn.mem_type
        raw = self._raw.get(mem_type)
        if raw is None:
            self._load_typed(insn, index, dram)
            return
        # The buffer as bytes: DRAM holds little-endian elements, as does this host.
        elem = self._tile_bytes[mem_type]
        rows = self._dram_rows(insn, index, dram, elem)
        y0, x0 = insn.y_pad_0, insn.x_pad_0
        n_cols = x0 + x_size + insn.x_pad_1
        n = (y0 + y_size + insn.y_pad_1) * n_cols
        lo = insn.sram_base * elem
        target = raw[lo : lo + n * elem]
        if n == y_size * x_size:
            target.reshape(y_size, x_size * elem)[...] = rows
        else:
            target.fill(0)                                      # zeros in the pad
            target.reshape(-1, n_cols * elem)[y0 : y0 + y_size,
                                              x0 * elem : (x0 + x_size) * elem] = rows
        self._stats.bytes_loaded[self._buffer_name[mem_type]] += y_size * x_size * elem

    def _load_typed(self, insn: MemInsn, index: int, dram: Dram) -> None:
        """A LOAD element by element (of the buffer's type): micro-ops, decoded, and every
        buffer on a big-endian host."""
        y_size, x_size = insn.y_size, insn.x_size
        mem_type = insn.mem_type
        elem = self._tile_bytes[mem_type]
        rows = self._dram_rows(insn, index, dram, elem)
        y0, x0 = insn.y_pad_0, insn.x_pad_0
        n_rows, n_cols = y0 + y_size + insn.y_pad_1, x0 + x_size + insn.x_pad_1
        base = insn.sram_base
        if mem_type is MemType.UOP:
            self._uop_epoch += 1  # plans cached by epoch are stale (those by kernel are not)
            words = rows.reshape(-1).view(f"<u{self.cfg.uop_bytes}")
            data = decode_uops(words, self.cfg)
        else:
            data = rows.view(self._le_dtype[mem_type])   # the last axis is contiguous
        buffer = self.sram.buffer(mem_type)
        tile = buffer.shape[1:]
        block = buffer[base : base + n_rows * n_cols].reshape(n_rows, n_cols, *tile)
        if n_rows != y_size or n_cols != x_size:  # zeros in the pad
            block[...] = 0
        block[y0 : y0 + y_size, x0 : x0 + x_size] = data.reshape(y_size, x_size, *tile)
        self._stats.bytes_loaded[self._buffer_name[mem_type]] += y_size * x_size * elem

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
        self._stats.bytes_stored += n * elem

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
        """The index plan of a micro-op loop, range-checked.

        A plan is a function of the loop's fields, the micro-op words of its range and the
        config, so it is cached by those: by the uop buffer's epoch (bumped by every LOAD
        UOP) first, which needs no look at the words, then by the words themselves, and
        then in the process-wide cache of plans (:data:`_PLANS`: a network's layers repeat
        kernels)."""
        is_gemm = type(insn) is GemmInsn or isinstance(insn, GemmInsn)
        fields = _GEMM_PLAN_FIELDS(insn) if is_gemm else _ALU_PLAN_FIELDS(insn)
        key = (self._uop_epoch, is_gemm, fields)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        words = self.sram.uop[insn.uop_bgn : insn.uop_end].tobytes()
        kernel_key = (words, is_gemm, fields)
        plan = self._plans_by_kernel.get(kernel_key)
        if plan is None:
            shared_key = (kernel_key, _MAX_BLOCKS, _WIDE_PRODUCT)  # the tunables too
            plan = self._shared_plans.get(shared_key)
            if plan is None:
                plan = self._build_plan(insn, index)
                if len(self._shared_plans) >= _PLAN_CACHE_SIZE:
                    self._shared_plans.clear()
                self._shared_plans[shared_key] = plan
            if len(self._plans_by_kernel) >= _PLAN_CACHE_SIZE:
                self._plans_by_kernel.clear()
            self._plans_by_kernel[kernel_key] = plan
        if len(self._plans) >= _PLAN_CACHE_SIZE:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def _build_plan(self, insn: GemmInsn | AluInsn, index: int) -> _LoopPlan:
        cfg = self.cfg
        indices = _loop_indices(insn, self.sram.uop)
        dst, src = indices[0], indices[1]
        if isinstance(insn, GemmInsn) and insn.from_acc:
            # A reset that copies acc[src]: the ALU's plan (the order of the copies matters
            # where a source is a destination written before).
            self._check_range(insn, index, "acc", dst, cfg.acc_depth)
            self._check_range(insn, index, "acc src", src, cfg.acc_depth)
            ordered = _alu_vectorisable(dst, src, False, cfg.acc_depth)
            if ordered:  # distinct destinations: in destination order, maybe one range
                by_dst = np.argsort(dst, kind="stable")
                span = _as_range(dst[by_dst])
                if span is not None:
                    return _LoopPlan(dst, np.ascontiguousarray(src[by_dst]), None, None, None,
                                     None, ordered, dst_range=span)
            return _LoopPlan(dst, src, None, None, None, None, ordered)
        if isinstance(insn, GemmInsn):
            self._check_range(insn, index, "acc", dst, cfg.acc_depth)
            if insn.reset:
                return _LoopPlan(dst, src, indices[2], None, None, None,
                                 dst_range=_as_range(np.unique(dst)))
            self._check_range(insn, index, "inp", src, cfg.inp_depth)
            self._check_range(insn, index, "wgt", indices[2], cfg.wgt_depth)
            blocks = _gemm_blocks(dst, src, indices[2], (cfg.batch, cfg.block_out, cfg.block_in))
            groups = _group_by_index(dst) if blocks is None else (None, None, None)
            return _LoopPlan(dst, src, indices[2], *groups, blocks=blocks)
        self._check_range(insn, index, "acc dst", dst, cfg.acc_depth)
        if not insn.use_imm:
            self._check_range(insn, index, "acc src", src, cfg.acc_depth)
        elif cfg.alu.ii == 1:
            self._check_back_to_back(insn, index, dst)
        ordered = _alu_vectorisable(dst, src, insn.use_imm, cfg.acc_depth)
        return _LoopPlan(dst, src, None, None, None, None, ordered)

    def _gemm(self, insn: GemmInsn, index: int) -> None:
        sram = self.sram
        plan = self._plan(insn, index)
        dst = plan.dst
        if not dst.size:
            return
        if insn.reset and insn.from_acc:
            if plan.vectorisable:
                # All at once equals one by one (no destination read or written twice).
                values = np.take(sram.acc, plan.src, axis=0)
                if plan.dst_range is not None:  # plan.src is in destination order
                    lo, hi = plan.dst_range
                    sram.acc[lo:hi] = values
                    sram.out[lo:hi] = values    # casting keeps the low 8 bits
                else:
                    sram.acc[dst] = values
                    sram.out[dst] = values
                return
            else:
                for d, s in zip(dst.tolist(), plan.src.tolist(), strict=True):
                    sram.acc[d] = sram.acc[s]
            sram.out[dst] = sram.acc[dst].astype(np.int8)
            return
        if insn.reset:
            if plan.dst_range is not None:  # the destinations are one range: slices
                lo, hi = plan.dst_range
                sram.acc[lo:hi] = 0
                sram.out[lo:hi] = 0
            else:
                sram.acc[dst] = 0
                sram.out[dst] = 0
            return
        self._stats.gemm_uops += dst.size  # as VTA's fsim: reset micro-ops are not counted
        self._stats.macs += dst.size * self._macs_per_uop
        if plan.blocks is not None:
            self._gemm_blocks(plan.blocks)
            return
        ftype = np.float32 if self._exact_f32 else np.float64
        a = np.take(sram.inp, plan.src, axis=0).astype(ftype)     # (n, batch, block_in)
        w = np.take(sram.wgt, plan.wgt, axis=0).astype(ftype).transpose(0, 2, 1)
        prod = np.matmul(a, w).astype(np.int64)                   # exact: |sum| < 2**24
        if plan.order is None:
            targets, sums = dst, prod
        else:
            targets = plan.targets
            sums = np.add.reduceat(prod[plan.order], plan.starts, axis=0)
        result = _wrap32(np.take(sram.acc, targets, axis=0).astype(np.int64) + sums)
        sram.acc[targets] = result
        sram.out[targets] = result.astype(np.int8)

    def _gemm_blocks(self, blocks: _Blocks) -> None:
        """The block form of a GEMM (:func:`_gemm_blocks`): one matrix product.

        Each output element sums ``m * block_in`` products of magnitude at most ``2**14``:
        exact in float32 up to ``m * block_in = 1024`` (every partial sum an integer below
        ``2**24``), else computed in float64 (exact below ``2**53``). A float32 result then
        fits int32, so int32 addition (wrapping) adds it to the accumulator; a float64 one
        goes through int64 and is wrapped."""
        cfg, sram = self.cfg, self.sram
        b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
        m, sets = blocks.m, blocks.sets
        k = m * bi
        ftype = np.float32 if k <= 1024 else np.float64
        # Gathers of whole tiles with take: much faster than fancy indexing.
        a = sram.inp.take(blocks.srcs, axis=0)                  # (rows * m, b, bi) int8
        rows = len(blocks.srcs) // m
        if b != 1:
            a = a.reshape(rows, m, b, bi).transpose(0, 2, 1, 3)
        a = a.reshape(rows * b, k).astype(ftype)                # row: destination, batch
        # The right-hand matrices, gathered element by element already transposed.
        w = sram.wgt.reshape(-1).take(blocks.wgt_elems).astype(ftype)
        if blocks.wide:             # all sets at once: (rows * b, sets * bo), set-major view
            part = (a @ w.reshape(k, sets * bo)).reshape(-1, b, sets, bo).transpose(2, 0, 1, 3)
        elif blocks.bounds is None:                             # sets of equal size
            # Shared sources: one left-hand matrix for every set (broadcast, not copied).
            # One BLAS call per set, each of the size the per-set products have (a single
            # product of all sets side by side would be large enough for BLAS to thread).
            left = a[None] if blocks.shared else a.reshape(sets, -1, k)
            part = np.matmul(left, w.reshape(sets, k, bo)).reshape(sets, -1, b, bo)
        else:
            w = w.reshape(sets, k, bo)
            part = np.empty((rows * b, bo), dtype=ftype)
            for g in range(sets):
                lo, hi = blocks.bounds[g] * b, blocks.bounds[g + 1] * b
                np.matmul(a[lo:hi], w[g], out=part[lo:hi])
            part = part.reshape(1, rows, b, bo)
        # part: (sets, destinations of a set, b, bo), destinations in the order of dests.
        if blocks.dest_range is not None:
            lo, hi = blocks.dest_range
            acc = sram.acc[lo:hi].reshape(part.shape)
        else:
            acc = sram.acc.take(blocks.dests, axis=0).reshape(part.shape)
        if ftype is np.float32:
            acc += part.astype(np.int32)                # |part| <= 2**24: exact; int32 wraps
        else:
            acc[...] = _wrap32(acc.astype(np.int64) + part.astype(np.int64))
        if blocks.dest_range is not None:
            sram.out[lo:hi] = sram.acc[lo:hi]               # casting keeps the low 8 bits
        else:
            result = acc.reshape(-1, b, bo)
            sram.acc[blocks.dests] = result
            sram.out[blocks.dests] = result

    def _alu(self, insn: AluInsn, index: int) -> None:
        sram = self.sram
        plan = self._plan(insn, index)
        dst, src = plan.dst, plan.src
        if not dst.size:
            return
        self._stats.alu_uops += dst.size
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


def _action_delta(insn: Insn, cfg: HwConfig,
                  scratch: ActionCounts) -> tuple[tuple[str, str | None, int], ...]:
    """The non-zero counts ``ActionCounts.add_insn(insn, cfg)`` adds, as ``(field, key or None,
    count)``, counted on ``scratch`` (all zeros before and after)."""
    scratch.add_insn(insn, cfg)
    out: list[tuple[str, str | None, int]] = []
    for name, value in vars(scratch).items():
        if isinstance(value, dict):
            for k, v in value.items():
                if v:
                    out.append((name, k, v))
                    value[k] = 0
        elif value:
            out.append((name, None, value))
            setattr(scratch, name, 0)
    return tuple(out)


def _as_range(idx: np.ndarray) -> tuple[int, int] | None:
    """``(lo, hi)`` when ``idx`` is exactly ``lo, lo + 1, ..., hi - 1`` (else None)."""
    if not idx.size:
        return None
    lo = int(idx[0])
    if int(idx[-1]) - lo + 1 != idx.size or not np.array_equal(idx, np.arange(lo, lo + idx.size)):
        return None
    return lo, lo + idx.size


@dataclass(frozen=True)
class _Blocks:
    """A GEMM as one matrix product (:func:`_gemm_blocks`).

    ``dests``: the ``n`` destinations, set by set, ``n / sets`` each unless ``bounds`` (the
    sets' starts in ``dests``, and ``n``) says otherwise; ``dest_range``: ``(lo, hi)`` when
    ``dests`` is ``lo .. hi - 1`` in order. ``srcs``: the source tiles, ``m`` per destination
    (in the order of its set's weight tiles), of every destination, or, when ``shared`` (every
    set reads the same tiles for its ``i``-th destination), of the first set's only.
    ``wgt_elems``: the flat wgt buffer elements of the right-hand matrices, a ``(m * block_in,
    block_out)`` one per set, element ``(k * block_in + i, o)`` being ``wgt[seq[k]][o, i]`` for
    the set's weight tiles ``seq``; when ``wide`` (``shared`` only), the sets' matrices side by
    side, one ``(m * block_in, sets * block_out)`` matrix."""

    dests: np.ndarray
    srcs: np.ndarray
    wgt_elems: np.ndarray
    m: int
    sets: int
    bounds: tuple[int, ...] | None
    shared: bool
    wide: bool
    dest_range: tuple[int, int] | None


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
    blocks: _Blocks | None = None
    """GEMM as one batched product, when the micro-ops have that regular structure (a
    convolution's do)."""
    dst_range: tuple[int, int] | None = None
    """Reset GEMM: ``(lo, hi)`` when the destinations are exactly ``lo .. hi - 1`` (with
    ``from_acc``, in some order: ``src`` is then permuted to destination order)."""


def _first_of_runs(values: np.ndarray) -> np.ndarray:
    """Whether each element (row, for 2-D ``values``) differs from the one before (the first
    does)."""
    new = np.empty(len(values), dtype=bool)
    new[:1] = True
    differ = values[1:] != values[:-1]
    new[1:] = differ.any(axis=1) if differ.ndim > 1 else differ
    return new


def _group_by_index(
    idx: np.ndarray,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Sort order, group starts and distinct values of ``idx`` (all None if no repeats)."""
    if idx.size < 2:
        return None, None, None
    order = np.argsort(idx, kind="stable")
    sorted_idx = idx[order]
    starts = np.flatnonzero(_first_of_runs(sorted_idx))
    if len(starts) == len(idx):
        return None, None, None
    return order, starts, sorted_idx[starts]


_MAX_BLOCKS = 64
"""More distinct weight sequences than this and the per-micro-op product is faster."""

_WIDE_PRODUCT = 1 << 18
"""The largest ``M * N * K`` of a GEMM's product of all sets side by side."""


def _gemm_blocks(dst: np.ndarray, src: np.ndarray, wgt: np.ndarray,
                 tile: tuple[int, int, int]) -> _Blocks | None:
    """Rewrite a GEMM's micro-ops as one batched matrix product.

    ``acc[d] += sum_k inp[src_k] . wgt[w_k]^T`` over the micro-ops of destination ``d`` is one
    row of ``concat_k(inp[src_k]) @ concat_k(wgt[w_k])^T``; destinations that accumulate the
    same weight tiles in the same order share the right-hand matrix, so each such set is one
    BLAS product with a reduction of ``m * block_in`` instead of ``block_in``, and the sets
    are one batched product. Each destination's micro-ops are taken in order of weight tile
    (the sum is exact, so its order does not matter: module docstring). None when the
    micro-ops are not of that form (destinations with different numbers of micro-ops), or
    too few or too irregular for it to pay. ``tile``: ``(batch, block_out, block_in)``.
    """
    if dst.size < 2 * _MAX_BLOCKS:
        return None
    order = np.lexsort((wgt, dst))
    d, s, w = dst[order], src[order], wgt[order]
    starts = np.flatnonzero(_first_of_runs(d))
    counts = np.diff(starts, append=d.size)
    if not np.all(counts == counts[0]):
        return None
    m = int(counts[0])
    dests = d[starts]
    srcs = s.reshape(-1, m)
    wseq = w.reshape(-1, m)
    # Sets of equal weight sequences: sort the rows lexicographically (stable, so each set's
    # destinations stay in order), a new set where a row differs from the one before.
    by_set = np.lexsort(wseq.T[::-1])
    ordered = wseq[by_set]
    first = np.flatnonzero(_first_of_runs(ordered))
    if len(first) > _MAX_BLOCKS:
        return None
    sizes = np.diff(first, append=len(ordered))
    bounds = None if np.all(sizes == sizes[0]) else (*first.tolist(), len(ordered))
    dests = np.ascontiguousarray(dests[by_set])
    srcs = srcs[by_set]
    seqs = ordered[first]                                    # (sets, m)
    sets = len(first)
    batch, bo, bi = tile
    i = np.arange(bi)[:, None]
    o = np.arange(bo)[None, :] * bi
    per_set = len(srcs) // sets
    shared = bounds is None and bool(np.all(srcs.reshape(sets, per_set, m) == srcs[:per_set]))
    if shared:
        srcs = srcs[:per_set]
    # One product with the sets side by side while it stays below the size at which BLAS
    # libraries start threads (OpenBLAS: M * N * K above 2**18), which on a shared machine
    # costs more than it gains; else one product per set.
    wide = shared and per_set * batch * m * bi * sets * bo <= _WIDE_PRODUCT
    if wide:
        elems = seqs.T[:, None, :, None] * (bo * bi) + i[None, :, :, None] + o[None, :, None]
    else:                                                    # (m, bi, sets, bo) above
        elems = seqs[:, :, None, None] * (bo * bi) + i + o   # (sets, m, bi, bo)
    return _Blocks(dests, np.ascontiguousarray(srcs.reshape(-1)),
                   np.ascontiguousarray(elems.reshape(-1)), m, sets, bounds, shared, wide,
                   _as_range(dests))


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
