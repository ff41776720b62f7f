"""The requantisation chain shared by conv2d and matmul: bias, shift, clip (ReLU), int8.

Each step is its own elementwise stage so that the acc-scope schedule can run each as one ALU
operation in place on the accumulators:

    bias_add = acc + bias      (ALU ADD with the bias tile, loaded into acc by LOAD ACC)
    shr      = bias_add >> s   (ALU SHR, omitted when s == 0)
    clip_hi  = min(shr, 127)   (ALU MIN)
    clip_lo  = max(clip_hi, 0 if relu else -128)   (ALU MAX)
    out      = int8(clip_lo)   (the low 8 bits that a STORE of the out buffer writes)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compiler.schedule import Pragma, Schedule, Stage
from compiler.te import IterVar, Tensor, compute, max_expr, min_expr

__all__ = ["requantize_stages", "schedule_requant"]

ALU_STAGES = ("bias_add", "shr", "clip_hi", "clip_lo")


def requantize_stages(acc: Tensor, bias: Tensor | None, shift: int, relu: bool,
                      channel_axis: int | tuple[int, ...], prefix: str = ""
                      ) -> dict[str, Tensor]:
    """The stages after ``acc`` (a ``(..., b, o)`` int32 tensor), ending in ``out`` (int8).

    ``bias`` is ``(O/o, b, o)``, indexed by ``acc``'s ``channel_axis`` and its tile axes; with
    a tuple of axes (a grouped convolution's group and channel block), ``(G, O/o, b, o)``.
    ``prefix`` goes before every stage's name (and key), for an operator that runs two chains
    (:mod:`compiler.ops.residual`).
    """
    shape = acc.shape
    names = [a.name.split(".")[-1] for a in acc.op.axis]  # type: ignore[union-attr]
    t = acc
    out: dict[str, Tensor] = {}

    def stage(name: str, fn: Callable[..., Any], dtype: str | None = None) -> Tensor:
        out[prefix + name] = compute(shape, fn, prefix + name, dtype=dtype, axis_names=names)
        return out[prefix + name]

    if bias is not None:
        prev = t
        axes = channel_axis if isinstance(channel_axis, tuple) else (channel_axis,)
        t = stage("bias_add",
                  lambda *i: prev[i] + bias[(*(i[a] for a in axes), i[-2], i[-1])])
    if shift:
        prev_s = t
        t = stage("shr", lambda *i: prev_s[i] >> shift)
    prev_hi = t
    t = stage("clip_hi", lambda *i: min_expr(prev_hi[i], 127))
    prev_lo = t
    low = 0 if relu else -128
    final = stage("clip_lo", lambda *i: max_expr(prev_lo[i], low))
    stage("out", lambda *i: final[i].astype("int8"), dtype="int8")
    return out


def schedule_requant(s: Schedule, out_stage: Stage, attach: IterVar,
                     bias_name: str | None, prefix: str = "",
                     bias_attach: IterVar | None = None) -> None:
    """Compute every requantisation stage (named with ``prefix``, as
    :func:`requantize_stages` made them) in acc at ``attach`` of ``out_stage``, as ALU ops.

    The bias is loaded into acc at ``bias_attach`` (default ``attach``): a loop outside the
    output tile along which the bias does not change keeps it resident over the tiles below it
    (one LOAD ACC per channel chunk instead of one per tile)."""
    names = [t.name for t in (st.tensor for st in s.stages)]
    stages = [s[s.tensor(prefix + n)] for n in ALU_STAGES if prefix + n in names]
    if bias_name is not None:
        cbias = s.cache_read(s.tensor(bias_name), "acc", [s.tensor(prefix + "bias_add")])
        st = s[cbias]
        st.compute_at(out_stage, attach if bias_attach is None else bias_attach)
        st.pragma(st.leaf_iter_vars[0], Pragma.DMA_COPY)
    for st in stages:
        st.set_scope("acc")
        st.compute_at(out_stage, attach)
        st.pragma(st.leaf_iter_vars[0], Pragma.ALU)
