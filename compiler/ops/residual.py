"""conv2d with the residual add in its epilogue: ``add(conv2d(x), skip)`` as one operator.

The convolution's requantised int8 result ``t = clip((acc + bias) >> s1)`` never leaves the
accumulators; the skip operand (int8 in DRAM) joins it the way :mod:`compiler.ops.eltwise`
brings an int8 tensor into acc, and the add's own chain follows::

    conv  = sum(data . kernel)             (GEMMs, as conv2d_schedule)
    conv += bias; conv >>= s1; min 127; max (0 | -128)   (conv's chain: t, exactly as unfused)
    gskip = skip . I^T                     (LOAD INP of the skip tile, GEMM against the identity)
    conv += gskip                          (ALU ADD)
    conv >>= s2; min 127; max (0 | -128)   (the add's chain)
    out = int8(conv)                       (STORE OUT)

as the compute definition says it; :func:`compiler.passes.alu.accumulate_add` then lets the
skip's GEMM accumulate onto ``t`` in the conv's accumulators (``conv += skip . I^T``), and
``gskip``'s reset, its buffer and the ALU ADD go. With ``store.postproc`` the add's chain rides
in the STORE (:func:`compiler.passes.alu.store_requant`), with ``gemm.reset_from_acc`` the bias
starts the accumulation (:func:`compiler.passes.alu.reset_bias`), as for conv2d.

This is bit-exact with the two operators run apart: ``t`` is computed and clipped into the
int8 range exactly as the conv's STORE would have narrowed it, and the add's int32 sum of two
int8 values is the same. It saves the conv's STORE of ``t``, the add's LOADs of both operands,
its GEMM of ``t`` and its ALU pass (``docs/notes/residual-fusion.md``). Like the add it needs
an identity weight tile, so ``block_in == block_out``.

Knobs are conv2d's (:class:`~compiler.ops.conv2d.Conv2dKnobs`); per thread an output tile now
also needs the skip's inp tiles and, once, the identity in wgt (:func:`fits_conv2d_add`). The
skip's inp copy and the input-channel chunks free their buffers on one token queue; the
dependency pass chains their tokens (``compiler.passes.deps._chain``) so that each pairs with
its own buffer's use.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, replace
from typing import Any

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.ops.conv2d import (
    Conv2dKnobs,
    Conv2dWorkload,
    check_conv2d_knobs,
    conv2d_accumulate,
    schedule_conv2d_tiles,
)
from compiler.ops.eltwise import add_second, identity_gemm, schedule_alu, schedule_identity_gemm
from compiler.ops.heuristic import estimate_conv2d_cycles, fits, knob_candidates
from compiler.ops.requant import requantize_stages, schedule_requant
from compiler.ops.space import KnobSpace, conv2d_space
from compiler.schedule import Pragma, Schedule, create_schedule
from compiler.te import Tensor, placeholder

__all__ = ["Conv2dAddWorkload", "conv2d_add_compute", "conv2d_add_schedule",
           "conv2d_add_space", "default_conv2d_add_knobs", "fits_conv2d_add"]

_CONV = "conv_"
"""Prefix of the convolution's requantisation stages (the add's are unprefixed, ending in
``out``)."""


@dataclass(frozen=True)
class Conv2dAddWorkload:
    """``clip(relu?((conv2d(x) + skip) >> add_shift))``, ``conv2d(x)`` as ``conv`` defines it
    (int8 after its own requantisation); ``skip`` int8 of the conv's output shape."""

    conv: Conv2dWorkload
    add_shift: int = 0
    add_relu: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.add_shift <= 31:
            raise LoweringError(f"conv2d_add: add_shift must be in 0..31, got {self.add_shift}")

    @property
    def output_elements(self) -> int:
        c = self.conv
        return c.batch * c.out_channels * c.out_height * c.out_width

    @property
    def macs(self) -> int:
        """The convolution's (the add has none, ROOFLINE.md)."""
        return self.conv.macs

    @property
    def dram_bytes(self) -> int:
        """Compulsory DRAM bytes of the network's two layers (ROOFLINE.md): the convolution's
        (input, weights, bias, output) and the add's (both inputs, the output), although the
        fused operator never moves the conv's output."""
        return sum(b for _, b in self.layers())

    def layers(self) -> list[tuple[int, int]]:
        """(MACs, compulsory DRAM bytes) of the network's conv2d and residual add: the
        roofline bound is the sum of their bounds."""
        return [(self.conv.macs, self.conv.dram_bytes), (0, 3 * self.output_elements)]

    def timing_class(self) -> tuple[Any, ...]:
        """What the program's timing depends on (``accel tune``): the workload with the shift
        amounts reduced to whether there is one and ReLU left out (ALU immediates only)."""
        conv = replace(self.conv, shift=int(self.conv.shift > 0), relu=False)
        return (*astuple(conv), int(self.add_shift > 0))

    def blocks(self, cfg: HwConfig) -> tuple[int, int, int]:
        return self.conv.blocks(cfg)

    def signature(self) -> str:
        return f"{self.conv.signature()}_add_sh{self.add_shift}_r{int(self.add_relu)}"


def _check_config(wl: Conv2dAddWorkload, cfg: HwConfig) -> None:
    if cfg.block_in != cfg.block_out:
        raise LoweringError(
            f"conv2d_add {wl.signature()}: the skip operand goes through a GEMM against an "
            f"identity tile, which needs block_in == block_out, but {cfg.name} has block_in "
            f"{cfg.block_in} and block_out {cfg.block_out}")


def conv2d_add_compute(wl: Conv2dAddWorkload, cfg: HwConfig) -> dict[str, Tensor]:
    """The tensor expressions of ``wl`` on ``cfg``'s blocked layouts, by name: conv2d's
    (``data``, ``kernel``, ``bias``, ``conv``), its chain prefixed ``conv_``, ``skip``,
    ``ident``, ``gskip``, ``sum`` and the add's chain ending in ``out``.

    Raises
    ------
    LoweringError
        ``cfg`` has ``block_in != block_out``.
    """
    _check_config(wl, cfg)
    c = wl.conv
    tensors = conv2d_accumulate(c, cfg)
    chain = requantize_stages(tensors["conv"], tensors.get("bias"), c.shift, c.relu,
                              channel_axis=1, prefix=_CONV)
    del chain[_CONV + "out"]  # t stays in acc: its int8 narrowing is the clip's identity
    tensors.update(chain)
    t = chain[_CONV + "clip_lo"]
    skip = placeholder(t.shape, "int8", "skip")
    ident = placeholder((1, 1, cfg.block_out, cfg.block_in), "int8", "ident")
    gskip = identity_gemm(skip, ident, "gskip", lead=True)
    total = add_second(t, gskip, "sum")
    tensors.update({"skip": skip, "ident": ident, "gskip": gskip, "sum": total})
    tensors.update(requantize_stages(total, None, wl.add_shift, wl.add_relu, channel_axis=1))
    return tensors


def conv2d_add_schedule(wl: Conv2dAddWorkload, knobs: Conv2dKnobs, cfg: HwConfig) -> Schedule:
    """conv2d's schedule (:func:`compiler.ops.conv2d.schedule_conv2d_tiles`) with the residual
    epilogue at each output tile: the conv's chain, the skip's copy and identity GEMM, the ALU
    ADD and the add's chain, all in acc; the identity tile is loaded once per batch tile.

    Raises
    ------
    LoweringError
        ``block_in != block_out``, or knobs that do not divide the layer's dimensions.
    """
    _check_config(wl, cfg)
    check_conv2d_knobs(wl.conv, knobs, cfg)
    t = conv2d_add_compute(wl, cfg)
    s = create_schedule(t["out"])
    so, attach = schedule_conv2d_tiles(s, wl.conv, knobs, cfg)
    schedule_requant(s, so, attach, bias_name="bias" if wl.conv.bias else None, prefix=_CONV)
    cskip = s.cache_read(s.tensor("skip"), "inp", [s.tensor("gskip")])
    cident = s.cache_read(s.tensor("ident"), "wgt", [s.tensor("gskip")])
    si = s[cident]
    si.compute_at(so, so.leaf_iter_vars[0])  # the batch-tile loop
    si.pragma(si.leaf_iter_vars[0], Pragma.DMA_COPY)
    schedule_identity_gemm(s, s.tensor("gskip"), cskip, so, attach, cfg)
    schedule_alu(s[s.tensor("sum")], so, attach)
    schedule_requant(s, so, attach, bias_name=None)
    return s


def fits_conv2d_add(wl: Conv2dAddWorkload, k: Conv2dKnobs, cfg: HwConfig) -> bool:
    """Do the knobs' buffers fit: conv2d's (:func:`compiler.ops.heuristic.fits`) and, per
    thread, the skip's inp tiles (one per output tile) and, once, the identity tile in wgt.

    The skip needs no acc tiles of its own: the compute definition gives its GEMM a buffer
    (``gskip``), but :func:`compiler.passes.alu.accumulate_add` always folds it into the
    conv's accumulators (were it not to, storage planning would refuse the overflow).
    """
    c = wl.conv
    t = k.nthreads
    out_tiles = k.tile_b * k.tile_co * k.tile_h * k.tile_w
    ih = (k.tile_h - 1) * c.stride_h + c.kernel_h
    iw = (k.tile_w - 1) * c.stride_w + c.kernel_w
    inp = t * (k.tile_b * k.tile_ci * ih * iw + out_tiles)
    wgt = t * k.tile_co * k.tile_ci * c.kernel_h * c.kernel_w + 1
    return fits(c, k, cfg) and inp <= cfg.inp_depth and wgt <= cfg.wgt_depth


def default_conv2d_add_knobs(wl: Conv2dAddWorkload, cfg: HwConfig) -> Conv2dKnobs:
    """conv2d's heuristic choice among the knobs that also fit the epilogue's buffers (the
    epilogue costs about the same per output pixel whatever the tiling).

    Raises
    ------
    LoweringError
        ``block_in != block_out``, or no tiling fits.
    """
    _check_config(wl, cfg)
    cands = [k for k in knob_candidates(wl.conv, cfg) if fits_conv2d_add(wl, k, cfg)]
    if not cands:
        raise LoweringError(f"conv2d_add {wl.signature()}: no tiling fits the buffers of "
                            f"{cfg.name}")
    return min(cands, key=lambda k: (estimate_conv2d_cycles(wl.conv, k, cfg), -k.nthreads,
                                     k.tile_ci))


def conv2d_add_space(wl: Conv2dAddWorkload, cfg: HwConfig) -> KnobSpace:
    """conv2d's knob space (:func:`compiler.ops.space.conv2d_space`) less the settings whose
    buffers the epilogue overfills.

    Raises
    ------
    LoweringError
        ``block_in != block_out``, or no setting is valid.
    """
    _check_config(wl, cfg)
    base = conv2d_space(wl.conv, cfg)
    space = KnobSpace(names=base.names, values=base.values, make=base.make,
                      valid=lambda k: base.valid(k) and fits_conv2d_add(wl, k, cfg))
    if not len(space):
        raise LoweringError(f"conv2d_add {wl.signature()}: no knob setting is valid on "
                            f"{cfg.name}")
    return space
