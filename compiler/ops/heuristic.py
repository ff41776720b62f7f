"""Default schedule knobs: the fastest candidate under an analytic cycle model that fits.

The model follows ``accel.machine.costs`` without importing it (the compiler never imports ``sim``):
per output tile, compute (GEMM micro-ops, ALU ops, reset) runs on one module while the DRAM
channel carries the input, weight, bias and output copies, each transaction paying the access
latency. With two virtual threads the two overlap (time = max); with one they add up. Every
candidate must fit the inp, wgt and acc buffers of the config it is given.
"""

from __future__ import annotations

import itertools

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.ops.conv2d import Conv2dKnobs, Conv2dWorkload

__all__ = ["default_conv2d_knobs", "estimate_conv2d_cycles", "fits", "knob_candidates"]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _transactions(nbytes: int, cfg: HwConfig) -> float:
    return -(-nbytes // cfg.dram.max_burst) * cfg.dram.latency + nbytes / cfg.dram.bytes_per_cycle


def fits(wl: Conv2dWorkload, k: Conv2dKnobs, cfg: HwConfig) -> bool:
    """Do the knobs' buffers (times the virtual threads) fit the config's SRAM?"""
    ih = (k.tile_h - 1) * wl.stride_h + wl.kernel_h
    iw = (k.tile_w - 1) * wl.stride_w + wl.kernel_w
    t = k.nthreads
    inp = t * k.tile_b * k.tile_ci * ih * iw
    wgt = t * k.tile_co * k.tile_ci * wl.kernel_h * wl.kernel_w
    acc = t * (k.tile_b * k.tile_co * k.tile_h * k.tile_w + (k.tile_co if wl.bias else 0))
    pad_limit = (1 << cfg.isa.pad_bits) - 1
    return (inp <= cfg.inp_depth and wgt <= cfg.wgt_depth and acc <= cfg.acc_depth
            and wl.pad_h <= pad_limit and wl.pad_w <= pad_limit)


def estimate_conv2d_cycles(wl: Conv2dWorkload, k: Conv2dKnobs, cfg: HwConfig) -> float:
    """Approximate cycles of the layer under knobs ``k`` (for ranking candidates only)."""
    nb, cib, cob = wl.blocks(cfg)
    kk = wl.kernel_h * wl.kernel_w
    ih = (k.tile_h - 1) * wl.stride_h + wl.kernel_h
    iw = (k.tile_w - 1) * wl.stride_w + wl.kernel_w
    t_acc = k.tile_b * k.tile_co * k.tile_h * k.tile_w
    chunks = cib // k.tile_ci
    tiles = (nb // k.tile_b) * (cob // k.tile_co) * (wl.out_height // k.tile_h) \
        * (wl.out_width // k.tile_w)
    gemm = chunks * (k.tile_ci * kk * t_acc * cfg.gemm.ii + k.tile_ci * (1 + cfg.gemm.depth))
    n_alu = 2 + int(wl.bias) + int(wl.shift > 0)
    alu = t_acc + n_alu * (t_acc * cfg.alu.ii + 1 + cfg.alu.depth)
    inp = k.tile_b * k.tile_ci * ih * _transactions(iw * cfg.inp_tile_bytes, cfg)
    whole_ci = k.tile_ci == cib
    wgt_rows = k.tile_co * (1 if whole_ci else k.tile_ci)
    wgt = wgt_rows * _transactions(
        (k.tile_ci if whole_ci else 1) * kk * cfg.wgt_tile_bytes, cfg)
    load = chunks * (inp + wgt)
    store = k.tile_b * k.tile_co * k.tile_h * _transactions(k.tile_w * cfg.out_tile_bytes, cfg)
    bias = _transactions(k.tile_co * cfg.acc_tile_bytes, cfg) if wl.bias else 0.0
    compute = gemm + alu + bias
    per_tile = max(compute, load + store + bias) if k.nthreads > 1 else compute + load + store
    return tiles * per_tile


def knob_candidates(wl: Conv2dWorkload, cfg: HwConfig) -> list[Conv2dKnobs]:
    """Every knob setting that divides the layer and fits the buffers."""
    nb, cib, cob = wl.blocks(cfg)
    out = []
    for tb, th, tw, tci in itertools.product(_divisors(nb), _divisors(wl.out_height),
                                             _divisors(wl.out_width), _divisors(cib)):
        for oc_n, h_n in ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4)):
            if wl.out_height % (th * h_n):
                continue
            for tco in _divisors(cob):
                if cob % (tco * oc_n):
                    continue
                k = Conv2dKnobs(tb, th, tw, tci, tco, oc_n, h_n)
                if fits(wl, k, cfg):
                    out.append(k)
    return out


def default_conv2d_knobs(wl: Conv2dWorkload, cfg: HwConfig) -> Conv2dKnobs:
    """The candidate with the lowest estimated cycles.

    Raises
    ------
    LoweringError
        No knob setting fits the config's buffers (for example a kernel window wider than the
        inp buffer).
    """
    pad_limit = (1 << cfg.isa.pad_bits) - 1
    if max(wl.pad_h, wl.pad_w) > pad_limit:
        raise LoweringError(
            f"conv2d {wl.signature()}: padding ({wl.pad_h}, {wl.pad_w}) exceeds the "
            f"{pad_limit} that the {cfg.isa.pad_bits}-bit pad fields of {cfg.name} hold"
        )
    cands = knob_candidates(wl, cfg)
    if not cands:
        raise LoweringError(
            f"conv2d {wl.signature()}: no tiling fits the buffers of {cfg.name} (even one "
            f"output pixel needs {wl.kernel_h * wl.kernel_w} wgt tiles and "
            f"{wl.kernel_h * wl.kernel_w} inp tiles)"
        )
    return min(cands, key=lambda k: (estimate_conv2d_cycles(wl, k, cfg), -k.nthreads,
                                      k.tile_ci))
