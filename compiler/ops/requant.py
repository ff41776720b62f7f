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

from compiler.schedule import Pragma, Schedule, Stage
from compiler.te import IterVar, Tensor, compute, max_expr, min_expr

__all__ = ["requantize_stages", "schedule_requant"]

ALU_STAGES = ("bias_add", "shr", "clip_hi", "clip_lo")


def requantize_stages(acc: Tensor, bias: Tensor | None, shift: int, relu: bool,
                      channel_axis: int) -> dict[str, Tensor]:
    """The stages after ``acc`` (a ``(..., b, o)`` int32 tensor), ending in ``out`` (int8).

    ``bias`` is ``(O/o, b, o)``, indexed by ``acc``'s ``channel_axis`` and its tile axes.
    """
    shape = acc.shape
    names = [a.name.split(".")[-1] for a in acc.op.axis]  # type: ignore[union-attr]
    t = acc
    out: dict[str, Tensor] = {}
    if bias is not None:
        prev = t
        t = compute(shape, lambda *i: prev[i] + bias[i[channel_axis], i[-2], i[-1]],
                    "bias_add", axis_names=names)
        out["bias_add"] = t
    if shift:
        prev_s = t
        t = compute(shape, lambda *i: prev_s[i] >> shift, "shr", axis_names=names)
        out["shr"] = t
    prev_hi = t
    t = compute(shape, lambda *i: min_expr(prev_hi[i], 127), "clip_hi", axis_names=names)
    out["clip_hi"] = t
    prev_lo = t
    low = 0 if relu else -128
    t = compute(shape, lambda *i: max_expr(prev_lo[i], low), "clip_lo", axis_names=names)
    out["clip_lo"] = t
    final = t
    out["out"] = compute(shape, lambda *i: final[i].astype("int8"), "out", dtype="int8",
                         axis_names=names)
    return out


def schedule_requant(s: Schedule, out_stage: Stage, attach: IterVar,
                     bias_name: str | None) -> None:
    """Compute every requantisation stage in acc at ``attach`` of ``out_stage``, as ALU ops."""
    names = [t.name for t in (st.tensor for st in s.stages)]
    stages = [s[s.tensor(n)] for n in ALU_STAGES if n in names]
    if bias_name is not None:
        cbias = s.cache_read(s.tensor(bias_name), "acc", [s.tensor("bias_add")])
        st = s[cbias]
        st.compute_at(out_stage, attach)
        st.pragma(st.leaf_iter_vars[0], Pragma.DMA_COPY)
    for st in stages:
        st.set_scope("acc")
        st.compute_at(out_stage, attach)
        st.pragma(st.leaf_iter_vars[0], Pragma.ALU)
