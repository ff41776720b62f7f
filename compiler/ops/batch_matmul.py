"""batch_matmul: ``a (G, M, K) @ b (G, K, N)`` with both operands activations (attention).

Attention multiplies two activations per head: ``Q . K^T`` and ``A . V``. On the accelerator
the first operand goes to the inp buffer as any activation does, blocked ``(G, M/b, K/i, b,
i)``; the second must be in the weight buffer's blocked layout, ``(G, N/o, K/i, o, i)`` (``b``
transposed, one weight tile per ``o x i`` block), which its operand's ``pack`` lays out from the
logical array on the host (see docs/notes/transformers.md for the measured alternative). The
int32 accumulators go through the requantisation chain of :mod:`compiler.ops.requant` (shift,
clip, ReLU; no bias) into ``(G, M/b, N/o, b, o)`` int8, the layout a following accelerator
operator reads. The schedule is the matmul schedule inside a loop over the ``G`` groups
(batch x heads).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.graph.ir import Graph, Node
from compiler.intrin import gemm_intrinsic
from compiler.ops.accel_op import AccelOp, Block, Operand
from compiler.ops.matmul import (
    MatmulKnobs,
    MatmulWorkload,
    check_matmul_knobs,
    default_matmul_knobs,
    estimate_matmul_cycles,
    matmul_fits,
)
from compiler.ops.requant import requantize_stages, schedule_requant
from compiler.ops.space import KnobSpace
from compiler.schedule import Pragma, Schedule, create_schedule
from compiler.te import Tensor, compute, placeholder, reduce_axis, sum

__all__ = ["BATCH_MATMUL", "BatchMatmulKnobs", "BatchMatmulWorkload", "batch_matmul_compute",
           "batch_matmul_schedule", "batch_matmul_space", "pack_input_operand",
           "pack_weight_operand", "physical_workload", "unpack_output"]


def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


@dataclass(frozen=True)
class BatchMatmulWorkload:
    """``G`` independent ``(M, K) @ (K, N)`` products with shift and ReLU."""

    g: int
    m: int
    k: int
    n: int
    shift: int = 0
    relu: bool = False

    def __post_init__(self) -> None:
        for name in ("g", "m", "k", "n"):
            if getattr(self, name) < 1:
                raise LoweringError(f"batch_matmul: {name} must be >= 1, got "
                                    f"{getattr(self, name)}")
        if not 0 <= self.shift <= 31:
            raise LoweringError(f"batch_matmul: shift must be in 0..31, got {self.shift}")

    @property
    def macs(self) -> int:
        return self.g * self.m * self.k * self.n

    @property
    def dram_bytes(self) -> int:
        """Compulsory DRAM bytes (ROOFLINE.md): both int8 operands and the int8 output."""
        return self.g * (self.m * self.k + self.k * self.n + self.m * self.n)

    def blocks(self, cfg: HwConfig) -> tuple[int, int, int]:
        """(row blocks, reduction blocks, column blocks) of one group on ``cfg``."""
        return self.matmul().blocks(cfg)

    def matmul(self) -> MatmulWorkload:
        """One group as a matmul workload (same buffers per tile)."""
        return MatmulWorkload(self.m, self.k, self.n, False, self.shift, self.relu)

    def signature(self) -> str:
        return (f"batch_matmul_g{self.g}_m{self.m}_k{self.k}_n{self.n}_sh{self.shift}_"
                f"r{int(self.relu)}")


@dataclass(frozen=True)
class BatchMatmulKnobs(MatmulKnobs):
    """The matmul knobs of one group (tiles in blocks: rows, reduction, columns; threads over
    columns), as a type of their own: knobs compare equal only to knobs of their operator."""

    def matmul(self) -> MatmulKnobs:
        """The same knobs as a matmul's."""
        return MatmulKnobs(self.tile_m, self.tile_k, self.tile_n, self.n_nthread)


def batch_matmul_compute(wl: BatchMatmulWorkload, cfg: HwConfig) -> dict[str, Tensor]:
    """The tensor expressions of ``wl`` on ``cfg``'s blocked layouts, by name."""
    mb, kb, nb = wl.blocks(cfg)
    a = placeholder((wl.g, mb, kb, cfg.batch, cfg.block_in), "int8", "a")
    w = placeholder((wl.g, nb, kb, cfg.block_out, cfg.block_in), "int8", "b")
    kk = reduce_axis(kb, "kk")
    ki = reduce_axis(cfg.block_in, "ki")
    acc = compute(
        (wl.g, mb, nb, cfg.batch, cfg.block_out),
        lambda g, m, n, bb, o: sum(a[g, m, kk, bb, ki].astype("int32")
                                   * w[g, n, kk, o, ki].astype("int32"), axis=[kk, ki]),
        "acc",
    )
    tensors = {"a": a, "b": w, "acc": acc}
    tensors.update(requantize_stages(acc, None, wl.shift, wl.relu, channel_axis=2))
    return tensors


def batch_matmul_schedule(wl: BatchMatmulWorkload, knobs: BatchMatmulKnobs,
                          cfg: HwConfig) -> Schedule:
    """The matmul schedule inside a loop over the groups: per group, tile the output, cache
    ``a`` into inp and ``b`` into wgt per reduction chunk, accumulate with the GEMM intrinsic,
    requantise with the ALU, virtual threads over columns::

        for g:                          # batch x heads
          for m.outer, n.outer.outer:
            for n.outer.inner:          # vthread
              acc = 0; for k.outer: load a, b tiles; GEMM
              shift, clip (ALU); store

    Raises
    ------
    LoweringError
        Knobs that do not divide the blocked dimensions.
    """
    check_matmul_knobs(wl.matmul(), knobs.matmul(), cfg)  # one group's blocks
    t = batch_matmul_compute(wl, cfg)
    s = create_schedule(t["out"])
    out, acc = s.tensor("out"), s.tensor("acc")
    ca = s.cache_read(s.tensor("a"), "inp", [acc])
    cb = s.cache_read(s.tensor("b"), "wgt", [acc])
    s[acc].set_scope("acc")
    so = s[out]
    g, m, n, _, _ = so.op.axis
    g_o, g_i = so.split(g, 1)
    m_o, m_i = so.split(m, knobs.tile_m)
    n_o, n_i = so.split(n, knobs.tile_n)
    n_oo, n_v = so.split(n_o, knobs.n_nthread)
    so.reorder(g_o, m_o, n_oo, n_v, g_i, m_i, n_i)
    if knobs.n_nthread > 1:
        so.vthread(n_v)
    so.pragma(g_i, Pragma.DMA_COPY)
    sa = s[acc]
    sa.compute_at(so, n_v)
    ag, am, an, ab, ao = sa.op.axis
    kk, ki = sa.op.reduce_axis
    k_o, k_i = sa.split(kk, knobs.tile_k)
    sa.reorder(k_o, k_i, ag, am, an, ab, ao, ki)
    sa.tensorize(ab, gemm_intrinsic(cfg))
    for cache in (ca, cb):
        st = s[cache]
        st.compute_at(sa, k_o)
        st.pragma(st.leaf_iter_vars[0], Pragma.DMA_COPY)
    schedule_requant(s, so, n_v, bias_name=None)
    return s


def batch_matmul_fits(wl: BatchMatmulWorkload, k: BatchMatmulKnobs, cfg: HwConfig) -> bool:
    """Do the knobs fit ``cfg``'s buffers (one group's tile, as a matmul's)?"""
    return matmul_fits(wl.matmul(), k.matmul(), cfg)


def default_batch_matmul_knobs(wl: BatchMatmulWorkload, cfg: HwConfig) -> BatchMatmulKnobs:
    """The matmul heuristic's knobs for one group (the groups run one after another)."""
    k = default_matmul_knobs(wl.matmul(), cfg)
    return BatchMatmulKnobs(k.tile_m, k.tile_k, k.tile_n, k.n_nthread)


def batch_matmul_space(wl: BatchMatmulWorkload, cfg: HwConfig) -> KnobSpace:
    """tile_m, tile_k, tile_n (divisors of the blocked dimensions) and n_nthread (1, 2, 4),
    filtered by the buffers as for matmul.

    Raises
    ------
    LoweringError
        Nothing fits the buffers.
    """
    mb, kb, nb = wl.blocks(cfg)
    space = KnobSpace(
        names=("tile_m", "tile_k", "tile_n", "n_nthread"),
        values=(_divisors(mb), _divisors(kb), _divisors(nb), (1, 2, 4)),
        make=BatchMatmulKnobs, valid=lambda k: batch_matmul_fits(wl, k, cfg),
    )
    if not len(space):
        raise LoweringError(f"batch_matmul {wl.signature()}: no knob setting fits the buffers "
                            f"of {cfg.name}")
    return space


def _padded(x: np.ndarray, g: int, rows: int, cols: int) -> np.ndarray:
    """``x`` as ``(g, r, c)``, zero-padded to ``(g, rows, cols)`` (a view when no padding)."""
    x = x.reshape(g, x.shape[-2], x.shape[-1])
    if x.shape[1:] == (rows, cols):
        return x
    out = np.zeros((g, rows, cols), dtype=np.int8)
    out[:, :x.shape[1], :x.shape[2]] = x
    return out


def pack_input_operand(a: np.ndarray, wl: BatchMatmulWorkload, cfg: HwConfig) -> np.ndarray:
    """The first operand ``(..., M, K)`` (logical, int8) in the inp layout ``(G, M/b, K/i, b,
    i)`` of the (possibly padded, :func:`physical_workload`) workload ``wl``."""
    mb, kb, _ = wl.blocks(cfg)
    b, i = cfg.batch, cfg.block_in
    rows = _padded(a, wl.g, mb * b, kb * i)
    return np.ascontiguousarray(rows.reshape(wl.g, mb, b, kb, i).transpose(0, 1, 3, 2, 4))


def pack_weight_operand(b: np.ndarray, wl: BatchMatmulWorkload, cfg: HwConfig) -> np.ndarray:
    """The second operand ``(..., K, N)`` (logical, int8) in the weight buffer's blocked layout
    ``(G, N/o, K/i, o, i)`` of the (possibly padded) workload ``wl``: each group's ``b``
    transposed and zero-padded to whole blocks, as a dense layer's weight is. One strided copy
    from ``b`` as the graph holds it (often a transposed view)."""
    _, kb, nb = wl.blocks(cfg)
    o, i = cfg.block_out, cfg.block_in
    rows = _padded(np.swapaxes(b.reshape(wl.g, b.shape[-2], b.shape[-1]), 1, 2), wl.g,
                   nb * o, kb * i)  # (G, N, K)
    return np.ascontiguousarray(rows.reshape(wl.g, nb, o, kb, i).transpose(0, 1, 3, 2, 4))


def unpack_output(out: np.ndarray, physical: BatchMatmulWorkload,
                  logical: BatchMatmulWorkload, cfg: HwConfig) -> np.ndarray:
    """The output region ``(G, M/b, N/o, b, o)`` of ``physical`` as the logical ``(G, M, N)``
    of ``logical`` (padding cropped)."""
    mb, _, nb = physical.blocks(cfg)
    full = out.reshape(physical.g, mb, nb, cfg.batch, cfg.block_out).transpose(0, 1, 3, 2, 4)
    full = full.reshape(physical.g, mb * cfg.batch, nb * cfg.block_out)
    return np.ascontiguousarray(full[:, :logical.m, :logical.n])


@functools.lru_cache(maxsize=256)
def physical_workload(wl: BatchMatmulWorkload, cfg: HwConfig) -> BatchMatmulWorkload:
    """``wl`` with its rows, reduction and columns zero-padded to block counts that tile well,
    when the heuristic's estimate says the padding pays: a prime number of blocks (ViT's 197
    tokens) leaves a tile of one block or of the whole dimension. Candidates: each dimension's
    block count as it is or rounded up to a multiple of 2, 4 or 8; the padded products are
    computed (zeros) and cropped."""
    mb, kb, nb = wl.blocks(cfg)

    def options(n: int) -> list[int]:
        return sorted({n, *(-(-n // q) * q for q in (2, 4, 8))})

    best: tuple[float, BatchMatmulWorkload] | None = None
    for m2, k2, n2 in itertools.product(options(mb), options(kb), options(nb)):
        cand = BatchMatmulWorkload(wl.g, m2 * cfg.batch, k2 * cfg.block_in, n2 * cfg.block_out,
                                   wl.shift, wl.relu)
        try:
            knobs = default_matmul_knobs(cand.matmul(), cfg)
        except LoweringError:
            continue
        cost = wl.g * estimate_matmul_cycles(cand.matmul(), knobs, cfg)
        if best is None or cost < best[0] * 0.95:  # pad only for a clear gain
            best = (cost, cand)
    if best is None or best[1].blocks(cfg) == (mb, kb, nb):
        return wl
    return best[1]


def _workload(node: Node, graph: Graph) -> BatchMatmulWorkload:
    a, b = (graph.values[v] for v in node.inputs)
    if len(a.shape) < 2 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise LoweringError(f"{node.name} (batch_matmul): operands {a.shape} and {b.shape} do "
                            "not multiply")
    g = int(np.prod(a.shape[:-2], dtype=np.int64))
    return BatchMatmulWorkload(g, a.shape[-2], a.shape[-1], b.shape[-1],
                               int(node.attrs.get("shift", 0)),
                               bool(node.attrs.get("relu", False)))


def _supports(wl: BatchMatmulWorkload, cfg: HwConfig) -> bool:
    # Rows of every group must start a row block, so that the groups' blocked layouts join
    # into the layout of the whole tensor (always so with batch 1).
    return wl.m % cfg.batch == 0 and batch_matmul_fits(wl, BatchMatmulKnobs(), cfg)


BATCH_MATMUL = AccelOp(
    op="batch_matmul", kind="batch_matmul", workload_type=BatchMatmulWorkload,
    knobs_type=BatchMatmulKnobs, workload=_workload, supports=_supports,
    schedule=batch_matmul_schedule, default_knobs=default_batch_matmul_knobs,
    space=batch_matmul_space,
    inputs=(Operand("a", Block.CUSTOM, image=False, pack=pack_input_operand),
            Operand("b", Block.CUSTOM, image=False, pack=pack_weight_operand)),
    constants=lambda wl, node, graph, cfg: {},
    macs=lambda wl: wl.macs, dram_bytes=lambda wl: wl.dram_bytes,
    output_image=False, physical=physical_workload, unpack=unpack_output,
    # The groups run one after another, each the matmul the knobs tile.
    estimate=lambda wl, k, cfg: wl.g * estimate_matmul_cycles(wl.matmul(), k.matmul(), cfg),
)

