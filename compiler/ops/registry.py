"""The accelerator-operator registry: graph operator name -> its ``AccelOp`` entry.

The partitioner (:func:`compiler.graph.passes.partition.default_supports`), the layout pass,
the runtime (:class:`runtime.executable.Executable`) and the tuner
(:func:`compiler.tune.task.make_task`) look operators up here and read their entries; none of
them names an operator. The built-in entries are conv2d, dense (the matmul schedule), the
residual add, conv2d with the residual add in its epilogue (:mod:`compiler.ops.residual`)
and batch_matmul (:mod:`compiler.ops.batch_matmul`); an operator of its own
module joins with one line in :data:`_BUILTIN`, or at run time with
:func:`register_accel_op` (tests register one that way).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import numpy as np

from accel.machine.config import HwConfig
from accel.machine.dram import pack_weight
from compiler.errors import LoweringError
from compiler.graph.ir import Graph, Node
from compiler.ops.accel_op import AccelOp, Block, Operand, roofline_bound
from compiler.ops.batch_matmul import BATCH_MATMUL
from compiler.ops.compiled import bias_tiles
from compiler.ops.conv2d import (
    Conv2dKnobs,
    Conv2dWorkload,
    GroupedConv2dWorkload,
    conv2d_schedule,
    pack_conv2d_kernel,
    per_group,
)
from compiler.ops.eltwise import (
    AddKnobs,
    AddWorkload,
    add_schedule,
    add_space,
    check_add_config,
    default_add_knobs,
    fits_add,
    identity_tile,
)
from compiler.ops.heuristic import default_conv2d_knobs, estimate_conv2d_cycles, fits
from compiler.ops.matmul import (
    MatmulKnobs,
    MatmulWorkload,
    default_matmul_knobs,
    estimate_matmul_cycles,
    matmul_fits,
    matmul_schedule,
)
from compiler.ops.residual import (
    Conv2dAddWorkload,
    conv2d_add_schedule,
    conv2d_add_space,
    default_conv2d_add_knobs,
)
from compiler.ops.space import conv2d_space, matmul_space

__all__ = ["ADD", "BATCH_MATMUL", "CONV2D", "CONV2D_ADD", "DENSE", "accel_op", "accel_op_for",
           "accel_ops", "register_accel_op"]


# ---------------------------------------------------------------------- helpers
def _pair(v: Any) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, tuple | list) else (int(v), int(v))


def _input(node: Node, graph: Graph, index: int, ranks: tuple[int, ...]) -> Any:
    """Input ``index``'s type, which must have one of ``ranks``."""
    t = graph.values[node.inputs[index]]
    if len(t.shape) not in ranks:
        raise LoweringError(f"{node.name} ({node.op}): input {index} has rank {len(t.shape)}, "
                            f"the accelerator takes rank {' or '.join(map(str, ranks))}")
    return t


def _requant(node: Node) -> tuple[int, bool]:
    return int(node.attrs.get("shift", 0)), bool(node.attrs.get("relu", False))


def _with_bias(arrays: dict[str, np.ndarray], node: Node, graph: Graph, channels: int,
               cfg: HwConfig) -> dict[str, np.ndarray]:
    if node.attrs.get("bias") is not None:
        arrays["bias"] = bias_tiles(graph.params[node.attrs["bias"]], channels, cfg)
    return arrays


# ---------------------------------------------------------------------- conv2d
def _conv2d_workload(node: Node, graph: Graph) -> Conv2dWorkload | GroupedConv2dWorkload:
    """The node's convolution; a :class:`GroupedConv2dWorkload` where it has ``groups``."""
    x = _input(node, graph, 0, (4,))
    w = graph.params[node.attrs["weight"]]
    (sh, sw), (ph, pw) = _pair(node.attrs.get("stride", 1)), _pair(node.attrs.get("padding", 0))
    shift, relu = _requant(node)
    conv = Conv2dWorkload(x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0],
                          w.shape[2], w.shape[3], sh, sw, ph, pw,
                          node.attrs.get("bias") is not None, shift, relu)
    groups = int(node.attrs.get("groups", 1))
    return conv if groups == 1 else GroupedConv2dWorkload(conv, groups)


def _conv2d_constants(wl: Conv2dWorkload | GroupedConv2dWorkload, node: Node, graph: Graph,
                      cfg: HwConfig) -> dict[str, np.ndarray]:
    w = graph.params[node.attrs["weight"]]
    return _with_bias({"kernel": pack_conv2d_kernel(w, wl, cfg)}, node, graph, w.shape[0], cfg)


def _as_modelled(wl: Conv2dWorkload | GroupedConv2dWorkload, cfg: HwConfig) -> Conv2dWorkload:
    """The convolution whose program the heuristic's cycle model prices like ``wl``'s: for a
    grouped ``wl``, one block group's with the output channels of all of them. Its loops are
    the grouped program's (the group loop and the output-channel chunks inside it make as many
    chunks, each loading one block group's input and weights), with the fill and drain paid
    once, as the grouped program pays them, rather than once per block group."""
    conv, groups = per_group(wl, cfg)
    return replace(conv, out_channels=groups * conv.out_channels) if groups else conv


CONV2D = AccelOp(
    op="conv2d", kind="conv2d", workload_type=(Conv2dWorkload, GroupedConv2dWorkload),
    knobs_type=Conv2dKnobs, workload=_conv2d_workload,
    # The all-ones tiling fits whenever any tiling does (buffer use only grows with tiles).
    # A grouped convolution's knobs, fit and space are one block group's.
    supports=lambda wl, cfg: fits(per_group(wl, cfg)[0], Conv2dKnobs(), cfg),
    schedule=conv2d_schedule,
    default_knobs=lambda wl, cfg: default_conv2d_knobs(per_group(wl, cfg)[0], cfg),
    space=lambda wl, cfg: conv2d_space(per_group(wl, cfg)[0], cfg),
    inputs=(Operand("data", Block.IN),), constants=_conv2d_constants,
    macs=lambda wl: wl.macs, dram_bytes=lambda wl: wl.dram_bytes,
    estimate=lambda wl, k, cfg: estimate_conv2d_cycles(_as_modelled(wl, cfg), k, cfg),
)


# ---------------------------------------------------------------------- conv2d + residual add
def _conv2d_add_workload(node: Node, graph: Graph) -> Conv2dAddWorkload:
    conv = _conv2d_workload(node, graph)
    if isinstance(conv, GroupedConv2dWorkload):  # the fused epilogue is an ungrouped conv's
        raise LoweringError(f"{node.name} ({node.op}): a grouped convolution with a fused "
                            "residual add runs on the CPU fallback")
    return Conv2dAddWorkload(conv, int(node.attrs.get("add_shift", 0)),
                             bool(node.attrs.get("add_relu", False)))


def _conv2d_add_constants(wl: Conv2dAddWorkload, node: Node, graph: Graph,
                          cfg: HwConfig) -> dict[str, np.ndarray]:
    return {**_conv2d_constants(wl.conv, node, graph, cfg), "ident": identity_tile(cfg)}


def _conv2d_add_supports(wl: Conv2dAddWorkload, cfg: HwConfig) -> bool:
    try:
        default_conv2d_add_knobs(wl, cfg)
    except LoweringError:  # block_in != block_out, or the epilogue's buffers do not fit
        return False
    return True


CONV2D_ADD = AccelOp(
    op="conv2d_add", kind="conv2d_add", workload_type=Conv2dAddWorkload,
    knobs_type=Conv2dKnobs, workload=_conv2d_add_workload, supports=_conv2d_add_supports,
    schedule=conv2d_add_schedule, default_knobs=default_conv2d_add_knobs,
    space=conv2d_add_space,
    inputs=(Operand("data", Block.IN), Operand("skip", Block.OUT)),
    constants=_conv2d_add_constants, macs=lambda wl: wl.macs,
    dram_bytes=lambda wl: wl.dram_bytes, layers=lambda wl: wl.layers(),
    # The convolution's model; the epilogue's add at the add layer's roofline bound.
    estimate=lambda wl, k, cfg: estimate_conv2d_cycles(wl.conv, k, cfg)
    + roofline_bound(*wl.layers()[1], cfg),
)


# ---------------------------------------------------------------------- dense
def _dense_workload(node: Node, graph: Graph) -> MatmulWorkload:
    """Any rank: every axis of the input but the last are rows (tokens x features)."""
    x = graph.values[node.inputs[0]]
    if len(x.shape) < 2:
        raise LoweringError(f"{node.name} (dense): input of rank {len(x.shape)}, want >= 2")
    w = graph.params[node.attrs["weight"]]
    shift, relu = _requant(node)
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    return MatmulWorkload(rows, w.shape[1], w.shape[0], node.attrs.get("bias") is not None,
                          shift, relu)


@functools.lru_cache(maxsize=256)
def _dense_physical(wl: MatmulWorkload, cfg: HwConfig) -> MatmulWorkload:
    """``wl`` with its output columns zero-padded to a block count that tiles well, when the
    heuristic's estimate gains 5%: a block count with a large prime factor (GPT-2's vocabulary,
    50,257 columns: 6,283 = 61 x 103 blocks) leaves no even number of tiles, so no double
    buffering of the weights, which a matrix-vector layer's time is (candidates: the count as
    it is or rounded up to a multiple of 2, 4, 8 or 16)."""
    nb = -(-wl.n // cfg.block_out)
    best: tuple[float, MatmulWorkload] | None = None
    for n2 in sorted({nb, *(-(-nb // q) * q for q in (2, 4, 8, 16))}):
        cand = replace(wl, n=wl.n if n2 == nb else n2 * cfg.block_out)
        try:
            cost = estimate_matmul_cycles(cand, default_matmul_knobs(cand, cfg), cfg)
        except LoweringError:
            continue
        if best is None or cost < best[0] * 0.95:  # pad only for a clear gain
            best = (cost, cand)
    return wl if best is None else best[1]


def _dense_constants(wl: MatmulWorkload, node: Node, graph: Graph,
                     cfg: HwConfig) -> dict[str, np.ndarray]:
    w = np.ascontiguousarray(graph.params[node.attrs["weight"]])  # (N, K): a weight already
    n = _dense_physical(wl, cfg).n
    if n != w.shape[0]:  # zero columns, computed and cropped (_dense_unpack)
        w = np.concatenate([w, np.zeros((n - w.shape[0], w.shape[1]), w.dtype)])
    packed = pack_weight(w[:, :, None, None], cfg.block_out, cfg.block_in)[:, :, 0, 0]
    out = {"b": packed}
    if node.attrs.get("bias") is not None:
        b = graph.params[node.attrs["bias"]]
        out["bias"] = bias_tiles(np.concatenate([b, np.zeros(n - b.shape[0], b.dtype)]), n, cfg)
    return out


def _dense_unpack(out: np.ndarray, physical: MatmulWorkload, logical: MatmulWorkload,
                  cfg: HwConfig) -> np.ndarray:
    """The output region ``(M/b, N/o, b, o)`` of ``physical`` as the logical ``(M, N)``."""
    mb, _, nb = physical.blocks(cfg)
    full = out.reshape(mb, nb, cfg.batch, cfg.block_out).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(full.reshape(mb * cfg.batch, nb * cfg.block_out)
                                [:logical.m, :logical.n])


DENSE = AccelOp(
    op="dense", kind="matmul", workload_type=MatmulWorkload, knobs_type=MatmulKnobs,
    workload=_dense_workload,
    supports=lambda wl, cfg: matmul_fits(wl, MatmulKnobs(), cfg),
    schedule=matmul_schedule, default_knobs=default_matmul_knobs, space=matmul_space,
    inputs=(Operand("a", Block.IN, image=False),), constants=_dense_constants,
    macs=lambda wl: wl.macs, dram_bytes=lambda wl: wl.dram_bytes, output_image=False,
    physical=_dense_physical, unpack=_dense_unpack,
    estimate=estimate_matmul_cycles,
)


# ---------------------------------------------------------------------- residual add
def _add_workload(node: Node, graph: Graph) -> AddWorkload:
    """An NCHW image as it is; any other rank as ``(rows, C, 1, 1)``, rows the product of all
    axes but the last, whose blocked layout is the ``TC`` (``NC``) layout's."""
    x, y = (graph.values[v] for v in node.inputs)
    if x.shape != y.shape or len(x.shape) < 2:
        raise LoweringError(f"{node.name} (add): operands of shapes {x.shape} and {y.shape}")
    shift, relu = _requant(node)
    if len(x.shape) == 4:
        return AddWorkload(*x.shape, shift, relu)
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    return AddWorkload(rows, x.shape[-1], 1, 1, shift, relu)


def _add_physical(wl: AddWorkload, cfg: HwConfig) -> AddWorkload:
    """An add of one-pixel images (a transformer's ``(rows, C, 1, 1)`` residual, whose blocked
    layout is the tokens' ``TC`` one) as the add of one image of ``rows / batch`` rows by
    ``C / block`` columns of tiles: the same bytes in the same order, but copied a tile row at
    a time (one DMA per tile row, not one per tile)."""
    if wl.height != 1 or wl.width != 1 or wl.batch % cfg.batch:
        return wl
    return AddWorkload(cfg.batch, cfg.block_out, wl.batch // cfg.batch,
                       -(-wl.channels // cfg.block_out), wl.shift, wl.relu)


def _add_supports(wl: AddWorkload, cfg: HwConfig) -> bool:
    check_add_config(wl, cfg)  # an identity weight tile needs block_in == block_out
    return fits_add(_add_physical(wl, cfg), AddKnobs(), cfg)


ADD = AccelOp(
    op="add", kind="add", workload_type=AddWorkload, knobs_type=AddKnobs,
    workload=_add_workload, supports=_add_supports,
    schedule=add_schedule, default_knobs=default_add_knobs, space=add_space,
    inputs=(Operand("a", Block.OUT), Operand("b", Block.OUT)),
    constants=lambda wl, node, graph, cfg: {"ident": identity_tile(cfg)},
    macs=lambda wl: wl.macs, dram_bytes=lambda wl: wl.dram_bytes, physical=_add_physical,
)


# ---------------------------------------------------------------------- the table
_BUILTIN: tuple[AccelOp, ...] = (CONV2D, CONV2D_ADD, DENSE, ADD, BATCH_MATMUL)
_REGISTRY: dict[str, AccelOp] = {entry.op: entry for entry in _BUILTIN}


def register_accel_op(entry: AccelOp) -> None:
    """Add (or replace) the accelerator operator of graph operator ``entry.op``."""
    _REGISTRY[entry.op] = entry


def accel_op(op: str) -> AccelOp | None:
    """The entry of graph operator ``op``, or None when the accelerator cannot run it."""
    return _REGISTRY.get(op)


def accel_ops() -> list[AccelOp]:
    """Every registered entry, built-in ones first."""
    return list(_REGISTRY.values())


def accel_op_for(workload: Any) -> AccelOp | None:
    """The entry whose workload type ``workload`` is, or None."""
    for entry in _REGISTRY.values():
        if isinstance(workload, entry.workload_type):
            return entry
    return None
