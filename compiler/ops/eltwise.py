"""Residual add (+ ReLU) on the accelerator, lowered as GEMMs against an identity weight tile.

The ISA cannot read int8 tensors into the ALU (a LOAD of int8 data goes to the inp buffer,
which only GEMM reads), so ``out = clip(relu((a + b) >> shift))`` is computed as::

    ga  = a . I^T               (GEMM: reset, then one micro-op per tile; I = identity o x i)
    gb  = b . I^T               (GEMM, a second acc buffer)
    ga += gb                    (ALU ADD of the two acc tiles)
    ga >>= shift; min 127; max (0 | -128)   (the requantisation chain of compiler.ops.requant)
    out = int8(ga)              (STORE OUT)

The identity tile needs ``block_in == block_out``: that is when the config can run an add.
Layouts are the accelerator's blocked ones (``accel.machine.dram``): ``a``, ``b`` and ``out`` are
``(N/b, C/c, H, W, b, c)`` int8, ``ident`` is one weight tile ``(1, 1, o, i)`` int8.

Why two GEMM stages and an ALU ADD rather than one accumulation ``acc += a.I; acc += b.I``:
the tensorize pass wants one inp buffer per GEMM nest and the DMA pass copies plain reads only,
so a stacked ``(a, b)`` input cannot be built on chip, and every reduction stage starts with its
own reset. ``gb`` carries a leading axis of extent 1 so that the in-place pass
(:func:`compiler.passes.alu.inplace_acc`) sees exactly one same-shaped producer (``ga``) of the
ADD and lets the ADD and the rest of the chain run in ``ga``'s accumulators.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from accel.machine.config import HwConfig
from accel.machine.dram import pack_activation
from compiler.errors import LoweringError
from compiler.intrin import gemm_intrinsic
from compiler.ops.compiled import CompiledOp, compile_cached
from compiler.ops.requant import requantize_stages, schedule_requant
from compiler.ops.space import KnobSpace
from compiler.pipeline.build import build
from compiler.schedule import Pragma, Schedule, Stage, create_schedule
from compiler.te import IterVar, Tensor, compute, placeholder, reduce_axis, sum

__all__ = ["AddKnobs", "AddWorkload", "add_compute", "add_schedule", "add_second",
           "add_space", "check_add_config", "compile_add", "default_add_knobs", "fits_add",
           "identity_gemm", "identity_tile", "pack_add_args", "schedule_alu",
           "schedule_identity_gemm"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class AddWorkload:
    """``clip(relu?((a + b) >> shift))`` on two int8 NCHW tensors of one shape."""

    batch: int
    channels: int
    height: int
    width: int
    shift: int = 0
    relu: bool = False

    def __post_init__(self) -> None:
        for name in ("batch", "channels", "height", "width"):
            if getattr(self, name) < 1:
                raise LoweringError(f"add: {name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.shift <= 31:
            raise LoweringError(f"add: shift must be in 0..31, got {self.shift}")

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.channels, self.height, self.width)

    @property
    def macs(self) -> int:
        """0: an elementwise layer (ROOFLINE.md)."""
        return 0

    @property
    def dram_bytes(self) -> int:
        """Compulsory DRAM bytes: both int8 inputs and the int8 output."""
        return 3 * self.batch * self.channels * self.height * self.width

    def blocks(self, cfg: HwConfig) -> tuple[int, int]:
        """(batch blocks, channel blocks) on ``cfg``."""
        return _ceil_div(self.batch, cfg.batch), _ceil_div(self.channels, cfg.block_out)

    def signature(self) -> str:
        return (f"add_n{self.batch}_c{self.channels}_h{self.height}_w{self.width}_"
                f"sh{self.shift}_r{int(self.relu)}")


@dataclass(frozen=True)
class AddKnobs:
    """Output tile in channel blocks (``tile_c``) and pixels (``tile_h`` x ``tile_w``).

    ``nthread`` virtual threads split the channel-block tiles when ``tile_c * nthread`` divides
    the channel blocks, else the row tiles (then ``tile_h * nthread`` must divide the rows).
    """

    tile_c: int = 1
    tile_h: int = 1
    tile_w: int = 1
    nthread: int = 1

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def tile_pixels(self) -> int:
        return self.tile_c * self.tile_h * self.tile_w


def check_add_config(wl: AddWorkload, cfg: HwConfig) -> None:
    """Raise LoweringError unless ``cfg`` can run an add (an identity weight tile exists)."""
    if cfg.block_in != cfg.block_out:
        raise LoweringError(
            f"add {wl.signature()}: lowering an add as GEMMs against an identity tile needs "
            f"block_in == block_out, but {cfg.name} has block_in {cfg.block_in} and "
            f"block_out {cfg.block_out}"
        )


def _thread_axis(wl: AddWorkload, k: AddKnobs, cfg: HwConfig) -> str:
    """``"c"`` or ``"h"``: the loop the virtual threads split (see :class:`AddKnobs`)."""
    _, cb = wl.blocks(cfg)
    return "c" if cb % (k.tile_c * k.nthread) == 0 else "h"


def fits_add(wl: AddWorkload, k: AddKnobs, cfg: HwConfig) -> bool:
    """Do the knobs' buffers fit: per thread ``a`` and ``b`` tiles in inp, ``ga`` and ``gb``
    in acc, and the identity tile in wgt."""
    t = k.nthread
    return (2 * t * k.tile_pixels <= cfg.inp_depth
            and cfg.wgt_depth >= 1 and 2 * t * k.tile_pixels <= cfg.acc_depth)


def _check_knobs(wl: AddWorkload, k: AddKnobs, cfg: HwConfig) -> None:
    _, cb = wl.blocks(cfg)
    ct, ht = (k.nthread, 1) if _thread_axis(wl, k, cfg) == "c" else (1, k.nthread)
    for name, value, total, what in (
            ("tile_c * nthread" if ct > 1 else "tile_c", k.tile_c * ct, cb, "channel blocks"),
            ("tile_h * nthread" if ht > 1 else "tile_h", k.tile_h * ht, wl.height, "rows"),
            ("tile_w", k.tile_w, wl.width, "columns")):
        if value < 1 or total % value:
            raise LoweringError(f"knob {name} = {value} does not divide the {total} {what}")
    if k.nthread < 1:
        raise LoweringError(f"knob nthread = {k.nthread} must be >= 1")


def add_compute(wl: AddWorkload, cfg: HwConfig) -> dict[str, Tensor]:
    """The tensor expressions of ``wl`` on ``cfg``'s blocked layouts, by name.

    Raises
    ------
    LoweringError
        ``cfg`` has ``block_in != block_out``.
    """
    check_add_config(wl, cfg)
    nb, cb = wl.blocks(cfg)
    b, blk = cfg.batch, cfg.block_out
    shape = (nb, cb, wl.height, wl.width, b, blk)
    a = placeholder(shape, "int8", "a")
    bt = placeholder(shape, "int8", "b")
    ident = placeholder((1, 1, blk, blk), "int8", "ident")
    ga = identity_gemm(a, ident, "ga", lead=False)
    gb = identity_gemm(bt, ident, "gb", lead=True)
    total = add_second(ga, gb, "sum")
    tensors = {"a": a, "b": bt, "ident": ident, "ga": ga, "gb": gb, "sum": total}
    tensors.update(requantize_stages(total, None, wl.shift, wl.relu, channel_axis=1))
    return tensors


def add_schedule(wl: AddWorkload, knobs: AddKnobs, cfg: HwConfig) -> Schedule:
    """Tile the output, copy the ``a`` and ``b`` tiles into inp and the identity into wgt, run
    the two GEMMs into acc, the ALU ADD and the requantisation, with virtual threads.

    Raises
    ------
    LoweringError
        ``block_in != block_out``, or knobs that do not divide the tensor's dimensions.
    """
    check_add_config(wl, cfg)
    _check_knobs(wl, knobs, cfg)
    t = add_compute(wl, cfg)
    s = create_schedule(t["out"])
    out, ga, gb, total = (s.tensor(n) for n in ("out", "ga", "gb", "sum"))
    ca = s.cache_read(s.tensor("a"), "inp", [ga])
    cb = s.cache_read(s.tensor("b"), "inp", [gb])
    cw = s.cache_read(s.tensor("ident"), "wgt", [ga, gb])

    so = s[out]
    n, c, y, x, _, _ = so.op.axis
    n_o, n_i = so.split(n, 1)
    c_o, c_i = so.split(c, knobs.tile_c)
    y_o, y_i = so.split(y, knobs.tile_h)
    x_o, x_i = so.split(x, knobs.tile_w)
    ct, ht = (knobs.nthread, 1) if _thread_axis(wl, knobs, cfg) == "c" else (1, knobs.nthread)
    c_oo, c_v = so.split(c_o, ct)
    y_oo, y_v = so.split(y_o, ht)
    so.reorder(n_o, c_oo, y_oo, x_o, c_v, y_v, n_i, c_i, y_i, x_i)
    if ct > 1:
        so.vthread(c_v)
    if ht > 1:
        so.vthread(y_v)
    so.pragma(n_i, Pragma.DMA_COPY)
    attach = y_v

    st = s[cw]
    st.compute_at(so, n_o)  # the identity tile is loaded once per batch block
    st.pragma(st.leaf_iter_vars[0], Pragma.DMA_COPY)
    for gemm, cache in ((ga, ca), (gb, cb)):
        schedule_identity_gemm(s, gemm, cache, so, attach, cfg)
    schedule_alu(s[total], so, attach)
    schedule_requant(s, so, attach, bias_name=None)
    return s


def identity_gemm(x: Tensor, ident: Tensor, name: str, lead: bool) -> Tensor:
    """``x . ident^T`` into int32: the int8 tensor ``x`` (``(..., b, c)``) copied into acc by
    a GEMM against the identity weight tile ``ident`` (``(1, 1, c, c)``).

    The stage reduces over an outer axis of extent 1 (the reset goes before it and the inp copy
    is computed at it, as conv2d's are at its input-channel chunk) and the channels inside the
    block (the intrinsic's own reduction). With ``lead`` it carries a leading axis of extent 1
    (see the module docstring: the in-place pass then keeps the other operand's accumulators).
    """
    blk = ident.shape[-1]
    r, k = reduce_axis(1, f"r{name}"), reduce_axis(blk, f"k{name}")
    names = ["n", "c", "y", "x", "bb", "o"][-len(x.shape):]

    def body(*i: Any) -> Any:
        return sum(x[(*i[:-1], k)].astype("int32") * ident[0, 0, i[-1], k].astype("int32"),
                   axis=[r, k])

    if lead:
        return compute((1, *x.shape), lambda s, *i: body(*i), name, axis_names=["s", *names])
    return compute(x.shape, body, name, axis_names=names)


def add_second(acc: Tensor, lead: Tensor, name: str) -> Tensor:
    """``acc + lead[0]``: the ALU ADD of a leading-axis operand (:func:`identity_gemm`) into
    ``acc``'s shape, with ``acc``'s axis names."""
    names = [ax.name.split(".")[-1] for ax in acc.op.axis]  # type: ignore[union-attr]
    return compute(acc.shape, lambda *i: acc[i] + lead[(0, *i)], name, axis_names=names)


def schedule_identity_gemm(s: Schedule, gemm: Tensor, cache: Tensor, out_stage: Stage,
                           attach: IterVar, cfg: HwConfig) -> None:
    """Run ``gemm`` (:func:`identity_gemm`) in acc at ``attach`` of ``out_stage``, tensorized,
    with its inp copy ``cache`` computed at the extent-1 reduction."""
    sg = s[gemm]
    sg.set_scope("acc")
    sg.compute_at(out_stage, attach)
    r, k = sg.op.reduce_axis
    sg.reorder(r, *sg.op.axis, k)
    sg.tensorize(sg.op.axis[-2], gemm_intrinsic(cfg))
    sc = s[cache]
    sc.compute_at(sg, r)
    sc.pragma(sc.leaf_iter_vars[0], Pragma.DMA_COPY)


def schedule_alu(stage: Stage, out_stage: Stage, attach: IterVar) -> None:
    """Run the elementwise ``stage`` in acc at ``attach`` of ``out_stage``, as ALU ops."""
    stage.set_scope("acc")
    stage.compute_at(out_stage, attach)
    stage.pragma(stage.leaf_iter_vars[0], Pragma.ALU)


def add_candidates(wl: AddWorkload, cfg: HwConfig) -> list[AddKnobs]:
    """Every knob setting that divides the tensor and fits the buffers."""
    _, cb = wl.blocks(cfg)
    out = []
    for tc, th, tw, nt in itertools.product(_divisors(cb), _divisors(wl.height),
                                            _divisors(wl.width), (1, 2)):
        k = AddKnobs(tc, th, tw, nt)
        ct, ht = (nt, 1) if _thread_axis(wl, k, cfg) == "c" else (1, nt)
        if cb % (tc * ct) or wl.height % (th * ht) or not fits_add(wl, k, cfg):
            continue
        out.append(k)
    return out


def default_add_knobs(wl: AddWorkload, cfg: HwConfig) -> AddKnobs:
    """The largest fitting tile of whole image rows, with 2 virtual threads when the tensor
    splits in two; where no whole rows fit, the largest tile.

    Whole rows come first because every row of a tile is a DMA transaction of each operand and
    of the result: on default (32 KB acc) the largest tile of ResNet-18's 56 x 56 add is
    4 x 8 x 8 (64-byte rows), 93,360 cycles against 81,788 for 1 x 4 x 56 (0.81 and 0.92 of
    its roofline bound); on tiny the 14 x 14 and 7 x 7 adds gain 5% and 3.6x, the 28 x 28 one
    loses 1.5%. Ties prefer more rows.

    Raises
    ------
    LoweringError
        ``block_in != block_out``, or not even one-pixel tiles fit.
    """
    check_add_config(wl, cfg)
    cands = add_candidates(wl, cfg)
    if not cands:
        raise LoweringError(f"add {wl.signature()}: no tiling fits the buffers of {cfg.name}")
    return max(cands, key=lambda k: (k.nthread, k.tile_w == wl.width, k.tile_pixels, k.tile_w,
                                     k.tile_h))


def compile_add(wl: AddWorkload, cfg: HwConfig, knobs: AddKnobs | None = None) -> CompiledOp:
    """Compile ``wl`` for ``cfg`` with ``knobs`` (default: :func:`default_add_knobs`), cached.

    Raises
    ------
    LoweringError
        ``block_in != block_out``, or knobs that do not divide or fit.
    """
    check_add_config(wl, cfg)
    chosen = knobs or default_add_knobs(wl, cfg)
    return compile_cached(wl, chosen, cfg, lambda: build(  # type: ignore[arg-type]
        add_schedule(wl, chosen, cfg), cfg, "add",
        meta={"signature": wl.signature(), "knobs": chosen.to_dict()}).program)


def add_space(wl: AddWorkload, cfg: HwConfig) -> KnobSpace:
    """The knob space of :func:`add_schedule` for ``wl`` on ``cfg``: tile_c, tile_h, tile_w
    (divisors of the channel blocks, rows and columns) and nthread (1, 2), the settings of
    :func:`add_candidates`.

    Raises
    ------
    LoweringError
        ``block_in != block_out``, or nothing fits the buffers.
    """
    check_add_config(wl, cfg)
    _, cb = wl.blocks(cfg)
    valid = set(add_candidates(wl, cfg))
    space = KnobSpace(
        names=("tile_c", "tile_h", "tile_w", "nthread"),
        values=(tuple(_divisors(cb)), tuple(_divisors(wl.height)), tuple(_divisors(wl.width)),
                (1, 2)),
        make=AddKnobs, valid=lambda k: k in valid,
    )
    if not len(space):
        raise LoweringError(f"add {wl.signature()}: no tiling fits the buffers of {cfg.name}")
    return space


def identity_tile(cfg: HwConfig) -> np.ndarray:
    """The ``(1, 1, block_out, block_in)`` int8 identity weight tile."""
    return np.eye(cfg.block_out, cfg.block_in, dtype=np.int8)[None, None]


def pack_add_args(op: CompiledOp, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """The DRAM arguments of a compiled add: ``a`` and ``b`` (NCHW int8, or already in the
    blocked layout) packed, and the identity tile ``ident``."""
    cfg = op.config

    def packed(x: np.ndarray) -> np.ndarray:
        if x.ndim == 6:  # already (N/b, C/c, H, W, b, c)
            return np.ascontiguousarray(x, dtype=np.int8)
        return pack_activation(x, cfg.batch, cfg.block_in)

    return {"a": packed(a), "b": packed(b), "ident": identity_tile(cfg)}
