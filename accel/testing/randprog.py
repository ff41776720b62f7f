"""Random valid programs for co-simulating the RTL against the simulators.

A program is a few *iterations* of a double-buffered pipeline, the shape compiled code has:

- load fills inp/wgt slot ``t % 2`` with random 2-D strided, zero-padded loads, then pushes
  load->compute; from iteration 2 on it first pops compute->load (slot free again);
- compute pops load->compute (and, from iteration 2 on, store->compute: out slot free), loads
  random micro-ops (and sometimes acc tiles), runs random GEMM (with and without reset; with
  ``gemm.reset_from_acc`` some resets copy acc tiles) and ALU
  instructions (all five operations, immediate or acc operand) with both loops and random
  factors on acc slot ``t % 2``, then pushes compute->store and (when a later load will pop it)
  compute->load;
- store pops compute->store, stores out tiles to a fresh DRAM area (with ``store.postproc``,
  some as post-processing STORE ACCs of random shifts and clip bounds), pushes
  store->compute;
- compute pops the store->compute tokens left over with zero-size instructions and FINISH.

Every cross-module dependence goes through a token, so the DRAM result does not depend on
timing, while loads, micro-op loads and stores of different iterations overlap and contend for
DRAM. ``pick(lo, hi)`` chooses an integer in ``[lo, hi]``: a numpy generator or hypothesis.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from accel.machine.builder import ProgramBuilder
from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.isa import AluOp, MemType
from accel.machine.program import Program

__all__ = ["Pick", "numpy_pick", "random_program"]

Pick = Callable[[int, int], int]


def numpy_pick(rng: np.random.Generator) -> Pick:
    """A ``pick`` drawing from ``rng``."""
    return lambda lo, hi: int(rng.integers(lo, hi + 1))


def _loop(pick: Pick, span: int, io: int, ii: int) -> tuple[int, int]:
    """Factors (out, in) keeping ``(io - 1) * out + (ii - 1) * in < span``."""
    fo = pick(0, (span - 1) // (2 * (io - 1))) if io > 1 else pick(0, 3)
    fi = pick(0, (span - 1 - (io - 1) * fo) // (ii - 1)) if ii > 1 else pick(0, 3)
    return fo, fi


def _index(pick: Pick, span: int, io: int, ii: int, fo: int, fi: int) -> int:
    """A micro-op index whose loop offsets stay below ``span``."""
    return pick(0, span - 1 - (io - 1) * fo - (ii - 1) * fi)


def _back_to_back(kernel: list[tuple[int, int, int]], io: int, ii: int,
                  factors: tuple[int, int]) -> bool:
    """Whether two consecutive micro-ops of the loop write the same acc tile."""
    dst = [d + i * factors[0] + j * factors[1]
           for i in range(io) for j in range(ii) for d, _, _ in kernel]
    return any(a == b for a, b in itertools.pairwise(dst))


def random_program(cfg: HwConfig, pick: Pick, iterations: int = 3,
                   max_insns_per_step: int = 3) -> tuple[Program, Dram]:
    """A random, valid, race-free program and its input DRAM image (module docstring)."""
    rng = np.random.default_rng(pick(0, 2**31))
    # At most 4 micro-ops per GEMM/ALU instruction, max_insns_per_step of them per iteration.
    b = ProgramBuilder(cfg, max_uops=4 * max_insns_per_step * iterations)
    slot = {name: cfg.depth(name) // 2 for name in ("inp", "wgt", "acc")}
    shapes = {
        "inp": (64, cfg.batch, cfg.block_in),
        "wgt": (32, cfg.block_out, cfg.block_in),
        "acc": (32, cfg.batch, cfg.block_out),
    }
    src = {
        "inp": b.tensor("inp_src", rng.integers(-128, 128, shapes["inp"], dtype=np.int8)),
        "wgt": b.tensor("wgt_src", rng.integers(-128, 128, shapes["wgt"], dtype=np.int8)),
        "acc": b.tensor("acc_src", rng.integers(-2**20, 2**20, shapes["acc"], dtype=np.int32)),
    }
    out_tiles = slot["acc"]
    out_base = [b.buffer(f"out{t}", out_tiles * cfg.out_tile_bytes, cfg.out_tile_bytes)
                for t in range(iterations)]

    def mem_load(mem: MemType, base: int, span: int, **deps: bool) -> None:
        name = mem.buffer
        pad = {k: pick(0, 2) if mem is not MemType.WGT and pick(0, 1) else 0
               for k in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")}
        x_size, y_size = pick(1, 6), pick(1, 3)
        while (pad["y_pad_0"] + y_size + pad["y_pad_1"]) \
                * (pad["x_pad_0"] + x_size + pad["x_pad_1"]) > span:
            if y_size > 1:
                y_size -= 1
            elif x_size > 1:
                x_size -= 1
            else:
                pad = dict.fromkeys(pad, 0)
        rows = pad["y_pad_0"] + y_size + pad["y_pad_1"]
        cols = pad["x_pad_0"] + x_size + pad["x_pad_1"]
        stride = x_size + pick(0, 3)
        length = shapes[name][0]
        if (y_size - 1) * stride + x_size > length:
            stride = x_size
        off = pick(0, length - ((y_size - 1) * stride + x_size))
        sram = base + pick(0, span - rows * cols)
        b.load(mem, sram_base=sram, dram_base=src[name] + off, y_size=y_size, x_size=x_size,
               x_stride=stride, **pad, **deps)

    def loop_insn(s: int, pops: dict[str, bool], pushes: dict[str, bool]) -> None:
        kind = pick(0, 2)                   # 0: GEMM reset, 1: GEMM, 2: ALU
        # With ``gemm.reset_from_acc`` half the resets copy acc tiles of the same slot.
        from_acc = kind == 0 and cfg.gemm.reset_from_acc and bool(pick(0, 1))
        io, ii = pick(1, 3), pick(1, 3)
        n_uops = pick(1, 4)
        lo = {"acc": s * slot["acc"], "inp": s * slot["inp"], "wgt": s * slot["wgt"]}
        src_buf = "acc" if kind == 2 or from_acc else "inp"
        f = {name: _loop(pick, slot[name], io, ii) for name in ("acc", "inp", "wgt")}
        f["src"] = f[src_buf]
        kernel = [(
            lo["acc"] + _index(pick, slot["acc"], io, ii, *f["acc"]),
            lo[src_buf] + _index(pick, slot[src_buf], io, ii, *f["src"]),
            (lo["wgt"] + _index(pick, slot["wgt"], io, ii, *f["wgt"])) if kind < 2 else 0,
        ) for _ in range(n_uops)]
        kbgn, _ = b.uops(kernel)
        ubase = pick(0, cfg.uop_depth - n_uops)
        b.load(MemType.UOP, sram_base=ubase, dram_base=b.uop_base + kbgn, x_size=n_uops,
               x_stride=n_uops, **pops)
        fields = {
            "uop_bgn": ubase, "uop_end": ubase + n_uops, "iter_out": io, "iter_in": ii,
            "dst_factor_out": f["acc"][0], "dst_factor_in": f["acc"][1],
            "src_factor_out": f["src"][0], "src_factor_in": f["src"][1], **pushes,
        }
        if kind == 2:
            op = AluOp(pick(0, 4))
            use_imm = bool(pick(0, 1))
            if use_imm and cfg.alu.ii == 1 and _back_to_back(kernel, io, ii, f["acc"]):
                use_imm = False     # not at interval 1 (accel.machine.costs)
            imm = (pick(-31, 31) if op is AluOp.SHR else pick(-300, 300)) if use_imm else 0
            b.alu(op, use_imm=use_imm, imm=imm, **fields)
        else:
            b.gemm(reset=kind == 0, from_acc=from_acc, wgt_factor_out=f["wgt"][0],
                   wgt_factor_in=f["wgt"][1], **fields)

    s2c_owed = 0
    for t in range(iterations):
        s = t % 2
        # load: fill slot s, hand it to compute
        n = pick(1, max_insns_per_step)
        for k in range(n):
            mem = MemType.INP if pick(0, 1) else MemType.WGT
            mem_load(mem, s * slot[mem.buffer], slot[mem.buffer],
                     pop_next=t >= 2 and k == 0, push_next=k == n - 1)
        # compute: wait for the slot (and for the store of iteration t - 2), compute, hand over
        pops = {"pop_prev": True, "pop_next": t >= 2}
        s2c_owed -= int(t >= 2)
        if pick(0, 2) == 0:
            mem_load(MemType.ACC, s * slot["acc"], slot["acc"], **pops)
            pops = {}
        pushes = {"push_next": True, "push_prev": t + 2 < iterations}
        carrier = bool(pick(0, 1))
        n = pick(1, max_insns_per_step)
        for k in range(n):
            loop_insn(s, pops, pushes if k == n - 1 and not carrier else {})
            pops = {}
        if carrier:
            b.gemm(uop_bgn=0, uop_end=0, **pushes)
        # store: out slot s to a fresh DRAM area, then free it
        n = pick(1, max_insns_per_step)
        for k in range(n):
            x_size, y_size = pick(1, 4), pick(1, 2)
            stride = x_size + pick(0, 2)
            if (y_size - 1) * stride + x_size > out_tiles:
                y_size, stride = 1, x_size
            sram = s * slot["acc"] + pick(0, slot["acc"] - x_size * y_size)
            dst = out_base[t] + pick(0, out_tiles - (y_size - 1) * stride - x_size)
            post: dict[str, int] = {}
            if cfg.store.postproc and pick(0, 1):       # a post-processing STORE ACC
                top = (1 << (cfg.store.out_bits - 1)) - 1
                lo = pick(-top - 1, top)
                post = {"mem_type": MemType.ACC, "shift": pick(0, 31), "clip_lo": lo,
                        "clip_hi": pick(lo, top)}
            b.store(sram_base=sram, dram_base=dst, y_size=y_size, x_size=x_size,
                    x_stride=stride, pop_prev=k == 0, push_prev=k == n - 1, **post)
        s2c_owed += 1
    while s2c_owed > 1:
        b.load(MemType.UOP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0,
               pop_next=True)
        s2c_owed -= 1
    b.finish(pop_next=s2c_owed == 1)
    return b.build()
