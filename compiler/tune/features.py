"""Program features for the cost model: loop-context vectors of the lowered loop program.

As in the TVM paper, a knob setting is described by the loop program it lowers to, not by the
knob values: the schedule is lowered and run through the hardware passes that shape the
instruction stream (DMA injection, tensorization, ALU injection, micro-op loop folding), with
virtual threads left as annotated loops; codegen is skipped, so extraction costs the same for
a schedule of 500 instructions as for one of 300 000.

The vector has a fixed length, :data:`N_FEATURES`:

* per loop level, for :data:`MAX_LEVELS` levels (the loops around the main GEMM, outermost
  first: the output-tile loops, virtual-thread loops, the input-channel chunk loop, loops
  peeled off the micro-op kernel, then the GEMM instruction's two hardware loops and its
  micro-op kernel loops; missing levels are zeros), :data:`LEVEL_FEATURES`: the extent, the
  annotation (serial, vthread, hardware loop, micro-op kernel loop), the product of the extents
  down to it, what one iteration does (DMA bytes of the inp, wgt, acc and out buffers, GEMM and
  ALU micro-ops, instructions) and reuse ratios (for a DMA buffer, the extent when no DMA index
  of that buffer inside the loop moves with it, that is, the same DRAM data is read again every
  iteration, else 1; for the GEMM's src, wgt and dst tiles in its hardware and kernel loops, the
  extent when the tile index does not move with the loop);
* :data:`GLOBAL_FEATURES`: instruction counts by kind, micro-ops, DMA bytes and transactions
  per buffer, LOAD padding, micro-op kernel words, SRAM tiles per buffer, virtual threads and a
  few ratios.

Counts and bytes enter as ``log2(1 + x)``. DMA sizes vary at the borders of a padded layer;
they are evaluated with every enclosing loop at the middle of its range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from accel.machine.config import HwConfig
from compiler.arith import NotAffine, to_affine
from compiler.lower import lower
from compiler.passes.alu import inject_alu, inplace_acc
from compiler.passes.dma import inject_dma
from compiler.passes.tensorize import tensorize
from compiler.passes.uops import fold_uop_loops, uop_refs
from compiler.schedule import Schedule
from compiler.te import Var, walk
from compiler.tir import (
    Allocate,
    DmaCopy,
    For,
    ForKind,
    Gemm,
    PrimFunc,
    Seq,
    Stmt,
    UopLoop,
    evaluate_expr,
)


class Task(Protocol):
    """What features need of a tuning task (``compiler.tune.task.Task`` has it): the
    operator's name, the config and the schedule of a knob setting."""

    kind: str
    config: HwConfig

    def schedule(self, knobs: Any) -> Schedule: ...

__all__ = ["FEATURE_NAMES", "GLOBAL_FEATURES", "LEVEL_FEATURES", "MAX_LEVELS", "N_FEATURES",
           "knob_features", "lower_for_features", "program_features"]

MAX_LEVELS = 14
DMA_BUFFERS = ("inp", "wgt", "acc", "out")
GEMM_OPERANDS = ("src", "wgt", "dst")
INSN_KINDS = ("LOAD_INP", "LOAD_WGT", "LOAD_ACC", "STORE_OUT", "GEMM", "ALU")

LEVEL_FEATURES: tuple[str, ...] = (
    "extent", "serial", "vthread", "hw_loop", "uop_kernel", "topdown",
    *(f"dma_bytes_{b}" for b in DMA_BUFFERS), "gemm_uops", "alu_uops", "insns",
    *(f"reuse_{b}" for b in DMA_BUFFERS), *(f"reuse_gemm_{o}" for o in GEMM_OPERANDS),
)
GLOBAL_FEATURES: tuple[str, ...] = (
    *(f"insns_{k}" for k in INSN_KINDS), "insns",
    "gemm_uops", "alu_uops",
    *(f"dma_bytes_{b}" for b in DMA_BUFFERS),
    *(f"dma_transactions_{b}" for b in DMA_BUFFERS),
    "inp_pad_elems", "uop_kernel_words",
    "sram_tiles_inp", "sram_tiles_wgt", "sram_tiles_acc", "vthreads",
    "bytes_per_transaction_inp", "bytes_per_transaction_wgt", "bytes_per_transaction_out",
    "gemm_uops_per_dma_byte", "gemm_uops_per_gemm_insn",
)
FEATURE_NAMES: tuple[str, ...] = (
    *(f"L{i}_{name}" for i in range(MAX_LEVELS) for name in LEVEL_FEATURES),
    *GLOBAL_FEATURES,
)
N_FEATURES = len(FEATURE_NAMES)

_FEATURE_PASSES = (inject_dma, tensorize, inplace_acc, inject_alu, fold_uop_loops)

# Per-iteration work a statement adds to the loops around it.
_WORK = (*(f"dma_bytes_{b}" for b in DMA_BUFFERS), "gemm_uops", "alu_uops", "insns")
_W = {name: i for i, name in enumerate(_WORK)}


def lower_for_features(task: Task, knobs: Any) -> PrimFunc:
    """``task``'s schedule under ``knobs``, lowered through the passes that shape the
    instruction stream (virtual threads stay annotated loops; no codegen).

    Raises
    ------
    compiler.errors.LoweringError
        Knobs the schedule or a pass rejects.
    """
    func = lower(task.schedule(knobs), task.kind)
    for p in _FEATURE_PASSES:
        func = p(func, task.config)
    return func


def knob_features(task: Task, knobs: Any) -> np.ndarray:
    """The feature vector (length :data:`N_FEATURES`, float64) of ``task`` under ``knobs``."""
    return program_features(lower_for_features(task, knobs), task.config)


@dataclass(eq=False)
class _Level:
    var: Var
    extent: int
    kind: str
    work: np.ndarray = field(default_factory=lambda: np.zeros(len(_WORK)))
    dram_vars: dict[str, set[Var]] = field(default_factory=dict)


@dataclass
class _Walk:
    cfg: HwConfig
    levels: list[_Level] = field(default_factory=list)
    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GLOBAL_FEATURES, 0.0))
    main: tuple[int, list[_Level], UopLoop] | None = None
    """(micro-ops, enclosing loops, statement) of the GEMM doing the most work."""


def _vars(e: Any) -> set[Var]:
    return {n for n in walk(e) if isinstance(n, Var)}


def _product(levels: list[_Level]) -> int:
    return math.prod(lv.extent for lv in levels)


def _add_work(w: _Walk, stack: list[_Level], work: np.ndarray) -> None:
    inner = 1
    for lv in reversed(stack):
        lv.work += work * inner
        inner *= lv.extent


def _dma(w: _Walk, s: DmaCopy, stack: list[_Level]) -> None:
    cfg = w.cfg
    env = {lv.var: lv.extent // 2 for lv in stack}
    y, x = (max(0, evaluate_expr(e, env)) for e in (s.y_size, s.x_size))
    pads = [max(0, evaluate_expr(e, env)) for e in (s.y_pad_0, s.y_pad_1, s.x_pad_0, s.x_pad_1)]
    buf = "out" if s.store else s.mem_type.buffer
    elem = cfg.tile_bytes(s.mem_type.buffer)
    nbytes = y * x * elem
    transactions = y * -(-(x * elem) // cfg.dram.max_burst)
    mult = _product(stack)
    work = np.zeros(len(_WORK))
    work[_W[f"dma_bytes_{buf}"]] = nbytes
    work[_W["insns"]] = 1
    _add_work(w, stack, work)
    dram_vars = _vars(s.dram.index)
    for lv in stack:
        lv.dram_vars.setdefault(buf, set()).update(dram_vars)
    kind = f"{'STORE' if s.store else 'LOAD'}_{s.mem_type.name}"
    t = w.totals
    if f"insns_{kind}" in t:
        t[f"insns_{kind}"] += mult
    t["insns"] += mult
    t[f"dma_bytes_{buf}"] += nbytes * mult
    t[f"dma_transactions_{buf}"] += transactions * mult
    if buf == "inp":
        t["inp_pad_elems"] += ((y + pads[0] + pads[1]) * (x + pads[2] + pads[3]) - y * x) * mult


def _uop_loop(w: _Walk, s: UopLoop, stack: list[_Level]) -> None:
    uops = _product([_Level(v, n, "") for v, n in s.hw_loops + s.kernel_loops])
    is_gemm = isinstance(s.op, Gemm)
    work = np.zeros(len(_WORK))
    work[_W["gemm_uops" if is_gemm else "alu_uops"]] = uops
    work[_W["insns"]] = 1
    _add_work(w, stack, work)
    mult = _product(stack)
    t = w.totals
    t["insns_GEMM" if is_gemm else "insns_ALU"] += mult
    t["insns"] += mult
    t["gemm_uops" if is_gemm else "alu_uops"] += uops * mult
    t["uop_kernel_words"] += math.prod(n for _, n in s.kernel_loops)
    if is_gemm and not s.op.reset and (w.main is None or uops * mult > w.main[0]):
        w.main = (uops * mult, list(stack), s)


def _visit(w: _Walk, s: Stmt, stack: list[_Level]) -> None:
    if isinstance(s, Seq):
        for item in s.body:
            _visit(w, item, stack)
    elif isinstance(s, For):
        level = _Level(s.var, s.extent, "vthread" if s.kind is ForKind.VTHREAD else "serial")
        w.levels.append(level)
        _visit(w, s.body, [*stack, level])
    elif isinstance(s, Allocate):
        scope = s.buffer.scope
        if f"sram_tiles_{scope}" in w.totals:
            threads = _product([lv for lv in stack if lv.kind == "vthread"])
            w.totals[f"sram_tiles_{scope}"] += s.buffer.n_tiles * threads
        _visit(w, s.body, stack)
    elif isinstance(s, DmaCopy):
        _dma(w, s, stack)
    elif isinstance(s, UopLoop):
        _uop_loop(w, s, stack)


def _coeff(ref: Any, var: Var) -> int | None:
    if ref is None:
        return None
    try:
        return to_affine(ref.index).coeff(var)
    except NotAffine:
        return 1


def _level_row(lv: _Level, topdown: int) -> list[float]:
    def log(v: float) -> float:
        return math.log2(1.0 + v)

    reuse = []
    for b in DMA_BUFFERS:
        if b not in lv.dram_vars:
            reuse.append(0.0)
        else:
            reuse.append(float(lv.extent) if lv.var not in lv.dram_vars[b] else 1.0)
    return [log(lv.extent), float(lv.kind == "serial"), float(lv.kind == "vthread"),
            float(lv.kind == "hw"), float(lv.kind == "kernel"), log(topdown),
            *(log(v) for v in lv.work), *reuse]


def _gemm_levels(loop: UopLoop) -> list[tuple[_Level, list[float]]]:
    """The GEMM instruction's hardware and kernel loops as levels, with operand reuse."""
    out = []
    refs = uop_refs(loop.op)
    loops = [(v, n, "hw") for v, n in loop.hw_loops] + [(v, n, "kernel")
                                                          for v, n in loop.kernel_loops]
    for k, (var, n, kind) in enumerate(loops):
        lv = _Level(var, n, kind)
        lv.work[_W["gemm_uops"]] = math.prod(m for _, m, _ in loops[k + 1:])
        reuse = []
        for ref in (refs[1], refs[2], refs[0]):
            c = _coeff(ref, var)
            reuse.append(0.0 if c is None else (float(n) if c == 0 else 1.0))
        out.append((lv, reuse))
    return out


def program_features(func: PrimFunc, cfg: HwConfig) -> np.ndarray:
    """The fixed-length feature vector of a lowered operator (see the module docstring).

    ``func`` comes from :func:`lower_for_features`; deterministic: the same program gives the
    same vector.
    """
    w = _Walk(cfg)
    _visit(w, func.body, [])
    rows: list[list[float]] = []
    if w.main is not None:
        _, stack, gemm = w.main
        topdown = 1
        for lv in stack:
            topdown *= lv.extent
            rows.append(_level_row(lv, topdown))
        for lv, reuse in _gemm_levels(gemm):
            topdown *= lv.extent
            rows.append(_level_row(lv, topdown)[: -len(DMA_BUFFERS)]
                        + [0.0] * len(DMA_BUFFERS) + reuse)
    per_level = len(LEVEL_FEATURES)
    level_part = np.zeros(MAX_LEVELS * per_level)
    for i, row in enumerate(rows[:MAX_LEVELS]):
        padded = row + [0.0] * (per_level - len(row))
        level_part[i * per_level:(i + 1) * per_level] = padded
    t = dict(w.totals)
    t["vthreads"] = math.prod(lv.extent for lv in (w.main[1] if w.main else [])
                              if lv.kind == "vthread")
    for b in ("inp", "wgt", "out"):
        n = t[f"dma_transactions_{b}"]
        t[f"bytes_per_transaction_{b}"] = t[f"dma_bytes_{b}"] / n if n else 0.0
    dma = sum(t[f"dma_bytes_{b}"] for b in DMA_BUFFERS)
    t["gemm_uops_per_dma_byte"] = t["gemm_uops"] / dma if dma else 0.0
    t["gemm_uops_per_gemm_insn"] = t["gemm_uops"] / t["insns_GEMM"] if t["insns_GEMM"] else 0.0
    ratios = {"gemm_uops_per_dma_byte", "gemm_uops_per_gemm_insn", "vthreads"}
    global_part = np.array([t[name] if name in ratios else math.log2(1.0 + t[name])
                            for name in GLOBAL_FEATURES])
    return np.concatenate([level_part, global_part])
