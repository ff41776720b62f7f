"""matmul / dense: the compute definition on blocked layouts and its accelerator schedule.

``a (M, K) @ b (K, N)``: rows of ``a`` are packed ``batch`` at a time and columns ``block_in`` at
a time, ``(M/b, K/i, b, i)``; ``b`` is packed transposed like a weight, ``(N/o, K/i, o, i)``; the
int8 output is ``(M/b, N/o, b, o)``. The same requantisation chain as conv2d follows.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.intrin import gemm_intrinsic
from compiler.ops.requant import requantize_stages, schedule_requant
from compiler.schedule import Pragma, Schedule, create_schedule
from compiler.te import Tensor, compute, placeholder, reduce_axis, sum

__all__ = ["MatmulKnobs", "MatmulWorkload", "check_matmul_knobs", "default_matmul_knobs",
           "estimate_matmul_cycles", "matmul_compute", "matmul_fits", "matmul_schedule"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class MatmulWorkload:
    """``(M, K) @ (K, N)`` with optional bias, shift and ReLU."""

    m: int
    k: int
    n: int
    bias: bool = False
    shift: int = 0
    relu: bool = False

    def __post_init__(self) -> None:
        for name in ("m", "k", "n"):
            if getattr(self, name) < 1:
                raise LoweringError(f"matmul: {name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.shift <= 31:
            raise LoweringError(f"matmul: shift must be in 0..31, got {self.shift}")

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n

    @property
    def dram_bytes(self) -> int:
        """Compulsory DRAM bytes (ROOFLINE.md): ``a``, ``b`` and the output at int8, and the
        int32 bias."""
        return self.m * self.k + self.k * self.n + self.m * self.n + (4 * self.n if self.bias
                                                                      else 0)

    def blocks(self, cfg: HwConfig) -> tuple[int, int, int]:
        """(row blocks, reduction blocks, column blocks) on ``cfg``."""
        return (_ceil_div(self.m, cfg.batch), _ceil_div(self.k, cfg.block_in),
                _ceil_div(self.n, cfg.block_out))

    def signature(self) -> str:
        return (f"matmul_m{self.m}_k{self.k}_n{self.n}_b{int(self.bias)}_sh{self.shift}_"
                f"r{int(self.relu)}")


@dataclass(frozen=True)
class MatmulKnobs:
    """Tiles in blocks: rows (tile_m), reduction (tile_k), columns (tile_n); threads over n."""

    tile_m: int = 1
    tile_k: int = 1
    tile_n: int = 1
    n_nthread: int = 1

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def matmul_compute(wl: MatmulWorkload, cfg: HwConfig) -> dict[str, Tensor]:
    """The tensor expressions of ``wl`` on ``cfg``'s blocked layouts, by name."""
    mb, kb, nb = wl.blocks(cfg)
    a = placeholder((mb, kb, cfg.batch, cfg.block_in), "int8", "a")
    w = placeholder((nb, kb, cfg.block_out, cfg.block_in), "int8", "b")
    kk = reduce_axis(kb, "kk")
    ki = reduce_axis(cfg.block_in, "ki")
    acc = compute(
        (mb, nb, cfg.batch, cfg.block_out),
        lambda m, n, bb, o: sum(a[m, kk, bb, ki].astype("int32") * w[n, kk, o, ki].astype("int32"),
                                axis=[kk, ki]),
        "acc",
    )
    tensors = {"a": a, "b": w, "acc": acc}
    bias = placeholder((nb, cfg.batch, cfg.block_out), "int32", "bias") if wl.bias else None
    if bias is not None:
        tensors["bias"] = bias
    tensors.update(requantize_stages(acc, bias, wl.shift, wl.relu, channel_axis=1))
    return tensors


def check_matmul_knobs(wl: MatmulWorkload, knobs: MatmulKnobs, cfg: HwConfig) -> None:
    """Check that each tile (and the column tile times the threads) divides its blocked
    dimension.

    Raises
    ------
    LoweringError
        Knobs that do not divide the blocked dimensions.
    """
    mb, kb, nb = wl.blocks(cfg)
    for name, value, total in (("tile_m", knobs.tile_m, mb), ("tile_k", knobs.tile_k, kb),
                               ("tile_n * n_nthread", knobs.tile_n * knobs.n_nthread, nb)):
        if value < 1 or total % value:
            raise LoweringError(f"knob {name} = {value} does not divide the {total} blocks")


def matmul_schedule(wl: MatmulWorkload, knobs: MatmulKnobs, cfg: HwConfig) -> Schedule:
    """Tile the output, cache ``a`` into inp and ``b`` into wgt per reduction chunk, accumulate
    in acc with the GEMM intrinsic, requantise with the ALU, virtual threads over columns.

    Raises
    ------
    LoweringError
        Knobs that do not divide the blocked dimensions.
    """
    check_matmul_knobs(wl, knobs, cfg)
    t = matmul_compute(wl, cfg)
    s = create_schedule(t["out"])
    out, acc = s.tensor("out"), s.tensor("acc")
    ca = s.cache_read(s.tensor("a"), "inp", [acc])
    cb = s.cache_read(s.tensor("b"), "wgt", [acc])
    s[acc].set_scope("acc")
    so = s[out]
    m, n, _, _ = so.op.axis
    m_o, m_i = so.split(m, knobs.tile_m)
    n_o, n_i = so.split(n, knobs.tile_n)
    n_oo, n_v = so.split(n_o, knobs.n_nthread)
    so.reorder(m_o, n_oo, n_v, m_i, n_i)
    if knobs.n_nthread > 1:
        so.vthread(n_v)
    so.pragma(m_i, Pragma.DMA_COPY)
    sa = s[acc]
    sa.compute_at(so, n_v)
    am, an, ab, ao = sa.op.axis
    kk, ki = sa.op.reduce_axis
    k_o, k_i = sa.split(kk, knobs.tile_k)
    sa.reorder(k_o, k_i, am, an, ab, ao, ki)
    sa.tensorize(ab, gemm_intrinsic(cfg))
    for cache in (ca, cb):
        st = s[cache]
        st.compute_at(sa, k_o)
        st.pragma(st.leaf_iter_vars[0], Pragma.DMA_COPY)
    schedule_requant(s, so, n_v, bias_name="bias" if wl.bias else None)
    return s


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _as_conv2d(wl: MatmulWorkload, k: MatmulKnobs) -> tuple[Any, Any]:
    """The matmul as the 1x1 convolution over ``M`` one-pixel images it is scheduled as."""
    from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload

    conv = Conv2dWorkload(wl.m, wl.k, 1, 1, wl.n, 1, 1, bias=wl.bias, shift=wl.shift,
                          relu=wl.relu)
    return conv, Conv2dKnobs(tile_b=k.tile_m, tile_ci=k.tile_k, tile_co=k.tile_n,
                             oc_nthread=k.n_nthread)


def matmul_fits(wl: MatmulWorkload, k: MatmulKnobs, cfg: HwConfig) -> bool:
    """Do the knobs divide the column blocks among the threads and fit ``cfg``'s buffers?"""
    from compiler.ops.heuristic import fits

    if wl.blocks(cfg)[2] % (k.tile_n * k.n_nthread):
        return False
    return fits(*_as_conv2d(wl, k), cfg)


def _transactions(nbytes: int, cfg: HwConfig) -> float:
    return -(-nbytes // cfg.dram.max_burst) * cfg.dram.latency + nbytes / cfg.dram.bytes_per_cycle


def estimate_matmul_cycles(wl: MatmulWorkload, k: MatmulKnobs, cfg: HwConfig) -> float:
    """Approximate cycles of ``wl`` under ``k`` (for ranking candidates only).

    The conv2d model of :mod:`compiler.ops.heuristic` with the copies a matmul makes: per
    reduction chunk, ``tile_m`` DMA rows of ``tile_k`` contiguous inp tiles (the blocks of a
    row of ``a`` lie side by side) and ``tile_n`` rows of ``tile_k`` weight tiles; per output
    tile, ``tile_m`` rows of ``tile_n`` out tiles. (Counted as a 1x1 convolution, every inp tile
    paid a transaction of its own, and the model could not tell a deep reduction chunk from a
    shallow one: it picked ``tile_k = 1``, 2.4-2.9x slower than the best on transformer
    layers.) With two threads compute and copies overlap (max), else they add up.
    """
    mb, kb, nb = wl.blocks(cfg)
    chunks = kb // k.tile_k
    tiles = (mb // k.tile_m) * (nb // k.tile_n)
    t_acc = k.tile_m * k.tile_n
    gemm = chunks * (k.tile_k * t_acc * cfg.gemm.ii + 1 + cfg.gemm.depth)
    n_alu = 2 + int(wl.bias) + int(wl.shift > 0)
    alu = n_alu * (t_acc * cfg.alu.ii + 1 + cfg.alu.depth)
    inp = k.tile_m * _transactions(k.tile_k * cfg.inp_tile_bytes, cfg)
    wgt = k.tile_n * _transactions(k.tile_k * cfg.wgt_tile_bytes, cfg)
    load = chunks * (inp + wgt)
    store = k.tile_m * _transactions(k.tile_n * cfg.out_tile_bytes, cfg)
    bias = _transactions(k.tile_n * cfg.acc_tile_bytes, cfg) if wl.bias else 0.0
    compute = gemm + alu + bias
    per_tile = max(compute, load + store + bias) if k.n_nthread > 1 else compute + load + store
    return tiles * per_tile


def default_matmul_knobs(wl: MatmulWorkload, cfg: HwConfig) -> MatmulKnobs:
    """The fitting candidate with the fewest estimated cycles (:func:`estimate_matmul_cycles`;
    ties: two threads, then the deeper reduction chunk).

    Raises
    ------
    LoweringError
        Nothing fits the buffers.
    """
    mb, kb, nb = wl.blocks(cfg)
    best: tuple[tuple[float, int, int], MatmulKnobs] | None = None
    for tm, tk, tn, nt in itertools.product(_divisors(mb), _divisors(kb), _divisors(nb),
                                            (1, 2)):
        knobs = MatmulKnobs(tm, tk, tn, nt)
        if not matmul_fits(wl, knobs, cfg):
            continue
        cost = (estimate_matmul_cycles(wl, knobs, cfg), -nt, -tk)
        if best is None or cost < best[0]:
            best = (cost, knobs)
    if best is None:
        raise LoweringError(f"matmul {wl.signature()}: no tiling fits the buffers of {cfg.name}")
    return best[1]
