"""Hardware intrinsics for ``Stage.tensorize``: behaviour as a tensor expression, plus how to
emit the IR statement once the loop nest has been matched against it."""

from __future__ import annotations

from accel.machine.config import HwConfig
from compiler.schedule import Intrinsic
from compiler.te import compute, placeholder, reduce_axis, sum
from compiler.tir import Gemm, TileRef

__all__ = ["gemm_intrinsic"]


def _emit_gemm(dst: TileRef, src: TileRef, wgt: TileRef) -> Gemm:
    return Gemm(dst=dst, src=src, wgt=wgt)


def gemm_intrinsic(cfg: HwConfig) -> Intrinsic:
    """One GEMM micro-op: ``out[b, o] += sum_k inp[b, k] * wgt[o, k]`` on one tile."""
    inp = placeholder((cfg.batch, cfg.block_in), "int8", "inp")
    wgt = placeholder((cfg.block_out, cfg.block_in), "int8", "wgt")
    k = reduce_axis(cfg.block_in, "k")
    out = compute(
        (cfg.batch, cfg.block_out),
        lambda b, o: sum(inp[b, k].astype("int32") * wgt[o, k].astype("int32"), axis=k),
        "gemm",
    )
    return Intrinsic("gemm", out, _emit_gemm)
