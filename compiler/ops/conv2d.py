"""conv2d: the compute definition on blocked layouts and its accelerator schedule.

The operator is defined on the layouts the accelerator moves (``accel.machine.dram``): data
``NCHW{b}n{i}c`` as ``(N/b, C/i, H, W, b, i)``, kernel ``OIHW{o}o{i}i``, bias per output channel
block as ``(O/o, b, o)`` int32 (one acc tile per block), output ``(N/b, O/o, OH, OW, b, o)`` int8.
The body is the int32 sum over input-channel blocks, kernel rows and columns and the channels
inside a block, followed by the requantisation chain (bias, shift, clip, ReLU) in the acc
scope, then the cast to int8 that a STORE of the out buffer performs.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from accel.machine.config import HwConfig
from accel.machine.dram import pack_weight
from accel.machine.isa import MemInsn, MemType
from compiler.errors import LoweringError
from compiler.intrin import gemm_intrinsic
from compiler.ops.requant import requantize_stages, schedule_requant
from compiler.passes.alu import BiasInit, bias_init_cycles
from compiler.schedule import Pragma, Schedule, Stage, create_schedule
from compiler.te import IterVar, Tensor, compute, if_then_else, placeholder, reduce_axis, sum

__all__ = ["TILE_ORDERS", "Conv2dKnobs", "Conv2dWorkload", "GroupedConv2dWorkload",
           "check_conv2d_knobs", "conv2d_accumulate", "conv2d_compute", "conv2d_schedule",
           "pack_conv2d_kernel", "pack_grouped_kernel", "per_group", "schedule_conv2d_tiles"]

TILE_ORDERS: tuple[str, ...] = ("rows", "columns")
"""Values of the ``tile_order`` knob, by index: which of the output-tile loops over rows
(``y``) and columns (``x``) is the outer one. Output-channel tiles are outside both."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _covered(size: int, kernel: int, stride: int, pad: int, out: int) -> int:
    """How many of ``size`` input rows (or columns) some output's window reads."""
    if stride <= kernel:  # windows overlap or touch: one contiguous run
        first, last = -pad, (out - 1) * stride + kernel - 1 - pad
        return max(0, min(last, size - 1) - max(first, 0) + 1)
    starts = np.arange(out) * stride - pad
    taps = (starts[:, None] + np.arange(kernel)[None, :]).ravel()
    return int(np.count_nonzero((taps >= 0) & (taps < size)))


@dataclass(frozen=True)
class Conv2dWorkload:
    """A conv2d layer: shapes in elements (NCHW / OIHW), stride, padding, requantisation."""

    batch: int
    in_channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    bias: bool = False
    shift: int = 0
    relu: bool = False

    def __post_init__(self) -> None:
        for name in ("batch", "in_channels", "height", "width", "out_channels", "kernel_h",
                     "kernel_w", "stride_h", "stride_w"):
            if getattr(self, name) < 1:
                raise LoweringError(f"conv2d: {name} must be >= 1, got {getattr(self, name)}")
        if self.pad_h < 0 or self.pad_w < 0:
            raise LoweringError(f"conv2d: padding must be >= 0, got ({self.pad_h}, {self.pad_w})")
        if self.out_height < 1 or self.out_width < 1:
            raise LoweringError(
                f"conv2d: a {self.kernel_h}x{self.kernel_w} kernel does not fit the "
                f"{self.height + 2 * self.pad_h}x{self.width + 2 * self.pad_w} padded input"
            )
        if not 0 <= self.shift <= 31:
            raise LoweringError(f"conv2d: shift must be in 0..31, got {self.shift}")

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.pad_h - self.kernel_h) // self.stride_h + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.pad_w - self.kernel_w) // self.stride_w + 1

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the layer (unpadded channels)."""
        return (self.batch * self.out_channels * self.out_height * self.out_width
                * self.in_channels * self.kernel_h * self.kernel_w)

    @property
    def dram_bytes(self) -> int:
        """Compulsory DRAM bytes (ROOFLINE.md): the input pixels some window reads, the
        weights, the int32 bias and the output, at int8 (a 1x1 stride-2 convolution reads a
        quarter of its input)."""
        rows = _covered(self.height, self.kernel_h, self.stride_h, self.pad_h, self.out_height)
        cols = _covered(self.width, self.kernel_w, self.stride_w, self.pad_w, self.out_width)
        inputs = self.batch * self.in_channels * rows * cols
        weights = self.out_channels * self.in_channels * self.kernel_h * self.kernel_w
        bias = 4 * self.out_channels if self.bias else 0
        outputs = self.batch * self.out_channels * self.out_height * self.out_width
        return inputs + weights + bias + outputs

    def blocks(self, cfg: HwConfig) -> tuple[int, int, int]:
        """(batch blocks, input channel blocks, output channel blocks) on ``cfg``."""
        return (_ceil_div(self.batch, cfg.batch), _ceil_div(self.in_channels, cfg.block_in),
                _ceil_div(self.out_channels, cfg.block_out))

    def signature(self) -> str:
        return (f"conv2d_n{self.batch}_c{self.in_channels}_h{self.height}_w{self.width}_"
                f"o{self.out_channels}_k{self.kernel_h}x{self.kernel_w}_"
                f"s{self.stride_h}x{self.stride_w}_p{self.pad_h}x{self.pad_w}_"
                f"b{int(self.bias)}_sh{self.shift}_r{int(self.relu)}")


@dataclass(frozen=True)
class GroupedConv2dWorkload:
    """A grouped (or depthwise) conv2d: ``conv`` over all channels, each of ``groups`` groups
    of output channels summing over its own ``in_channels / groups`` input channels.

    On the accelerator the groups are gathered into *block groups* (:meth:`layout`): ``k``
    consecutive groups whose input and output channels fill whole blocks, so that each block
    group is an ordinary convolution of ``cibg`` input and ``cobg`` output channel blocks
    whose weight is block-diagonal (zero between the ``k`` groups). A depthwise convolution
    on a 1x8x8 core has ``k = 8``: one input and one output block per block group, a weight
    tile that is an 8x8 diagonal, and so 1 of the GEMM's 8 products per output useful (the
    measured choice, docs/notes/depthwise.md). Where no ``k`` dividing ``groups`` fills whole
    blocks, one block group holds them all (the whole block-diagonal weight).
    """

    conv: Conv2dWorkload
    groups: int

    def __post_init__(self) -> None:
        c = self.conv
        if self.groups < 2 or c.in_channels % self.groups or c.out_channels % self.groups:
            raise LoweringError(f"conv2d: {self.groups} groups must be >= 2 and divide the "
                                f"{c.in_channels} input and {c.out_channels} output channels")

    @property
    def macs(self) -> int:
        """Multiply-accumulates: each output sums its group's ``C / groups`` channels."""
        return self.conv.macs // self.groups

    @property
    def dram_bytes(self) -> int:
        """Compulsory DRAM bytes: the convolution's, with the weights of ``C / groups``
        channels per output channel."""
        c = self.conv
        weights = c.out_channels * c.in_channels * c.kernel_h * c.kernel_w
        return c.dram_bytes - weights + weights // self.groups

    def layout(self, cfg: HwConfig) -> tuple[int, int, int, int]:
        """``(k, block groups, cibg, cobg)`` on ``cfg``: groups per block group, their count,
        and the input and output channel blocks of one."""
        c = self.conv
        cin, cout = c.in_channels // self.groups, c.out_channels // self.groups
        k = next((k for k in range(1, self.groups + 1) if self.groups % k == 0
                  and k * cin % cfg.block_in == 0 and k * cout % cfg.block_out == 0),
                 self.groups)
        return (k, self.groups // k, _ceil_div(k * cin, cfg.block_in),
                _ceil_div(k * cout, cfg.block_out))

    def block_group(self, cfg: HwConfig) -> Conv2dWorkload:
        """One block group as a convolution (its channels padded to whole blocks)."""
        _, _, cibg, cobg = self.layout(cfg)
        return replace(self.conv, in_channels=cibg * cfg.block_in,
                       out_channels=cobg * cfg.block_out)

    def signature(self) -> str:
        return f"{self.conv.signature()}_g{self.groups}"


def per_group(wl: Conv2dWorkload | GroupedConv2dWorkload,
              cfg: HwConfig) -> tuple[Conv2dWorkload, int]:
    """``(the convolution one block group runs, the number of block groups)``; ``(wl, 0)``
    for an ungrouped ``wl`` (no group axis)."""
    if isinstance(wl, GroupedConv2dWorkload):
        return wl.block_group(cfg), wl.layout(cfg)[1]
    return wl, 0


def pack_grouped_kernel(w: np.ndarray, wl: GroupedConv2dWorkload, cfg: HwConfig) -> np.ndarray:
    """A grouped weight ``(O, C / groups, KH, KW)`` as the block groups' block-diagonal
    weights, blocked: ``(G, cobg, cibg, KH, KW, block_out, block_in)`` flattened over ``G``
    and ``cobg`` (the same bytes)."""
    k, blocks, _, _ = wl.layout(cfg)
    o, cin, kh, kw = w.shape
    cout = o // wl.groups
    diag = np.eye(k, dtype=w.dtype)[None, :, None, :, None, None, None]
    dense = (w.reshape(blocks, k, cout, 1, cin, kh, kw) * diag)  # (G, k, cout, k, cin, ...)
    return pack_weight(dense.reshape(blocks * k * cout, k * cin, kh, kw), cfg.block_out,
                       cfg.block_in)


def pack_conv2d_kernel(w: np.ndarray, wl: Conv2dWorkload | GroupedConv2dWorkload,
                       cfg: HwConfig) -> np.ndarray:
    """The ``kernel`` region of ``wl``'s program from its ``(O, C / groups, KH, KW)`` weight."""
    if isinstance(wl, GroupedConv2dWorkload):
        return pack_grouped_kernel(w, wl, cfg)
    return pack_weight(w, cfg.block_out, cfg.block_in)


@dataclass(frozen=True)
class Conv2dKnobs:
    """Schedule knobs, VTA's names. Tiles count blocks (b, co, ci) or output pixels (h, w).

    ``tile_order`` indexes :data:`TILE_ORDERS`: 0 walks the output tiles row by row (VTA's
    order), 1 column by column.
    """

    tile_b: int = 1
    tile_h: int = 1
    tile_w: int = 1
    tile_ci: int = 1
    tile_co: int = 1
    oc_nthread: int = 1
    h_nthread: int = 1
    tile_order: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def nthreads(self) -> int:
        return self.oc_nthread * self.h_nthread


def conv2d_compute(wl: Conv2dWorkload, cfg: HwConfig, groups: int = 0) -> dict[str, Tensor]:
    """The tensor expressions of ``wl`` on ``cfg``'s blocked layouts, by name; with
    ``groups``, of that many block groups of ``wl`` each (see :func:`conv2d_accumulate`)."""
    tensors = conv2d_accumulate(wl, cfg, groups)
    tensors.update(requantize_stages(tensors["conv"], tensors.get("bias"), wl.shift, wl.relu,
                                     channel_axis=(1, 2) if groups else 1))
    return tensors


def conv2d_accumulate(wl: Conv2dWorkload, cfg: HwConfig, groups: int = 0
                      ) -> dict[str, Tensor]:
    """The inputs (``data``, ``kernel``, ``bias`` where there is one) and the int32 sum
    ``conv`` of ``wl``, before requantisation, by name.

    With ``groups`` (a :class:`GroupedConv2dWorkload`'s block groups, ``wl`` one of them), a
    group axis follows the batch blocks: data ``(N/b, G, C/i, H, W, b, i)``, kernel
    ``(G, O/o, C/i, KH, KW, o, i)``, bias ``(G, O/o, b, o)``, conv ``(N/b, G, O/o, OH, OW, b,
    o)``, the same bytes as the ungrouped layouts of ``G`` times the channels; each group's
    outputs sum over its own input blocks only.
    """
    nb, cib, cob = wl.blocks(cfg)
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    h, w, ph, pw = wl.height, wl.width, wl.pad_h, wl.pad_w
    g = (groups,) if groups else ()
    names = ["n", *(("g",) if groups else ()), "c", "y", "x", "bb", "i"]
    data = placeholder((nb, *g, cib, h, w, b, bi), "int8", "data")
    kernel = placeholder((*g, cob, cib, wl.kernel_h, wl.kernel_w, bo, bi), "int8", "kernel")
    pad = compute(
        (nb, *g, cib, h + 2 * ph, w + 2 * pw, b, bi),
        lambda *i: if_then_else(
            (i[-4] >= ph) & (i[-4] < h + ph) & (i[-3] >= pw) & (i[-3] < w + pw),
            data[(*i[:-4], i[-4] - ph, i[-3] - pw, i[-2], i[-1])], 0),
        "pad", dtype="int8", axis_names=names,
    )
    ic = reduce_axis(cib, "ic")
    kh = reduce_axis(wl.kernel_h, "kh")
    kw = reduce_axis(wl.kernel_w, "kw")
    ici = reduce_axis(bi, "ici")
    sh, sw = wl.stride_h, wl.stride_w

    def body(*i: Any) -> Any:
        n, grp, (o, y, x, bb, co) = i[0], i[1:-5], i[-5:]
        return sum(pad[(n, *grp, ic, y * sh + kh, x * sw + kw, bb, ici)].astype("int32")
                   * kernel[(*grp, o, ic, kh, kw, co, ici)].astype("int32"),
                   axis=[ic, kh, kw, ici])

    conv = compute((nb, *g, cob, wl.out_height, wl.out_width, b, bo), body, "conv",
                   axis_names=["n", *(("g",) if groups else ()), "o", "y", "x", "bb", "co"])
    tensors = {"data": data, "kernel": kernel, "pad": pad, "conv": conv}
    if wl.bias:
        tensors["bias"] = placeholder((*g, cob, b, bo), "int32", "bias")
    return tensors


def conv2d_schedule(wl: Conv2dWorkload | GroupedConv2dWorkload, knobs: Conv2dKnobs,
                    cfg: HwConfig) -> Schedule:
    """VTA's conv2d schedule: tile the output, cache inputs into inp/wgt, accumulate in acc,
    tensorize with GEMM, requantise with the ALU, virtual threads over output channel blocks
    and rows. A grouped ``wl`` runs its block groups one after another (a loop after the
    batch tiles), the knobs tiling one block group's convolution.

    The output-tile loops run batch, output-channel, then rows and columns in the order
    ``knobs.tile_order`` names (:data:`TILE_ORDERS`)::

        tile_order 0 (rows)             tile_order 1 (columns)
        for n.outer:                    for n.outer:
          for o.outer.outer:              for o.outer.outer:
            for y.outer.outer:              for x.outer:
              for x.outer:                    for y.outer.outer:
                for o.outer.inner:  # vthread   for o.outer.inner:  # vthread
                  ...                             ...

    Raises
    ------
    LoweringError
        Knobs that do not divide the layer's dimensions, or an unknown tile order.
    """
    wl, groups = per_group(wl, cfg)
    check_conv2d_knobs(wl, knobs, cfg)
    s = create_schedule(conv2d_compute(wl, cfg, groups)["out"])
    so, attach = schedule_conv2d_tiles(s, wl, knobs, cfg)
    # The bias depends on the output channels only: kept resident over the row and column
    # tiles of an output-channel chunk (loaded at ``o.outer.outer``, both virtual threads'
    # share), unless ``load_bias`` will LOAD it into every tile's accumulators instead.
    resident = wl.bias and not bias_loaded_per_tile(wl, knobs, cfg)
    schedule_requant(s, so, attach, bias_name="bias" if wl.bias else None,
                     bias_attach=so.leaf_iter_vars[2 if groups else 1] if resident else None)
    return s


_bias_init_cycles = functools.lru_cache(maxsize=65536)(bias_init_cycles)
"""``bias_init_cycles``, remembered: the knob candidates of a layer repeat the same tiles."""


def bias_init(wl: Conv2dWorkload, knobs: Conv2dKnobs, cfg: HwConfig) -> BiasInit:
    """:func:`compiler.passes.alu.bias_init_cycles` of one thread's output tile."""
    k = knobs
    tiles = k.tile_b * k.tile_co * k.tile_h * k.tile_w
    bias = MemInsn(mem_type=MemType.ACC, x_size=k.tile_b * k.tile_co,
                   x_stride=k.tile_b * k.tile_co)
    loaded = MemInsn(mem_type=MemType.ACC, y_size=k.tile_h * k.tile_w, x_stride=0)
    return _bias_init_cycles(tiles, k.tile_b * k.tile_co, loaded, bias, cfg)


def bias_loaded_per_tile(wl: Conv2dWorkload, knobs: Conv2dKnobs, cfg: HwConfig) -> bool:
    """Whether ``compiler.passes.alu.load_bias`` LOADs the bias into every output tile's
    accumulators (no ``gemm.reset_from_acc``, and it pays); else the bias stays resident in acc
    over the tiles of an output-channel chunk, copied by the resets or ADDed."""
    return wl.bias and not cfg.gemm.reset_from_acc and bias_init(wl, knobs, cfg).pays


def check_conv2d_knobs(wl: Conv2dWorkload, knobs: Conv2dKnobs, cfg: HwConfig) -> None:
    """Raise LoweringError unless ``knobs`` divide ``wl``'s dimensions on ``cfg`` and name a
    tile order of :data:`TILE_ORDERS`."""
    nb, cib, cob = wl.blocks(cfg)
    _check_divides("tile_b", knobs.tile_b, nb, "batch blocks")
    _check_divides("tile_ci", knobs.tile_ci, cib, "input channel blocks")
    _check_divides("tile_co * oc_nthread", knobs.tile_co * knobs.oc_nthread, cob,
                   "output channel blocks")
    _check_divides("tile_h * h_nthread", knobs.tile_h * knobs.h_nthread, wl.out_height,
                   "output rows")
    _check_divides("tile_w", knobs.tile_w, wl.out_width, "output columns")
    if knobs.tile_order not in range(len(TILE_ORDERS)):
        raise LoweringError(
            f"knob tile_order = {knobs.tile_order} is not one of "
            + ", ".join(f"{i} ({name})" for i, name in enumerate(TILE_ORDERS)))


def schedule_conv2d_tiles(s: Schedule, wl: Conv2dWorkload, knobs: Conv2dKnobs,
                          cfg: HwConfig) -> tuple[Stage, IterVar]:
    """:func:`conv2d_schedule` up to the requantisation: tile ``s``'s ``out`` stage, cache the
    padded data and the kernel into inp and wgt, accumulate ``conv`` in acc with GEMM.

    Returns the output stage and the loop (the virtual-thread one) at which every acc stage
    of an output tile is computed. The tensors of a grouped convolution (a group axis after
    the batch, :func:`conv2d_accumulate`) get a loop over the groups after the batch tiles.
    """
    out, conv = s.tensor("out"), s.tensor("conv")
    s[s.tensor("pad")].compute_inline()
    cdata = s.cache_read(s.tensor("pad"), "inp", [conv])
    ckernel = s.cache_read(s.tensor("kernel"), "wgt", [conv])
    s[conv].set_scope("acc")

    so = s[out]
    n, *group, o, y, x, _, _ = so.op.axis
    n_o, n_i = so.split(n, knobs.tile_b)
    g_o, g_i = zip(*(so.split(a, 1) for a in group), strict=True) if group else ((), ())
    o_o, o_i = so.split(o, knobs.tile_co)
    y_o, y_i = so.split(y, knobs.tile_h)
    x_o, x_i = so.split(x, knobs.tile_w)
    o_oo, o_v = so.split(o_o, knobs.oc_nthread)
    y_oo, y_v = so.split(y_o, knobs.h_nthread)
    rows_cols = (y_oo, x_o) if knobs.tile_order == 0 else (x_o, y_oo)
    so.reorder(n_o, *g_o, o_oo, *rows_cols, o_v, y_v, n_i, *g_i, o_i, y_i, x_i)
    if knobs.oc_nthread > 1:
        so.vthread(o_v)
    if knobs.h_nthread > 1:
        so.vthread(y_v)
    so.pragma(n_i, Pragma.DMA_COPY)
    attach = y_v

    sc = s[conv]
    sc.compute_at(so, attach)
    cn, *cg, co_, cy, cx, cb, cco = sc.op.axis
    ic, kh, kw, ici = sc.op.reduce_axis
    ic_o, ic_i = sc.split(ic, knobs.tile_ci)
    sc.reorder(ic_o, ic_i, kh, kw, cn, *cg, co_, cy, cx, cb, cco, ici)
    sc.tensorize(cb, gemm_intrinsic(cfg))
    for cache in (cdata, ckernel):
        st = s[cache]
        st.compute_at(sc, ic_o)
        st.pragma(st.leaf_iter_vars[0], Pragma.DMA_COPY)
    return so, attach


def _check_divides(knob: str, value: int, total: int, what: str) -> None:
    if value < 1 or total % value:
        raise LoweringError(f"knob {knob} = {value} does not divide the {total} {what}")


def describe(wl: Conv2dWorkload) -> dict[str, Any]:
    return asdict(wl)
