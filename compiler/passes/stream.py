"""Instruction-stream passes: codegen's last step, on the instructions themselves.

Virtual threads share their loops (:mod:`compiler.passes.vthread`), so every thread reaches the
end of its output tile in the same loop iteration: a thread's STOREs wait for the other
threads' last GEMMs, and a thread's next reset waits for its own STOREs while the compute module
could already run another thread's first GEMM. Two rewrites fix that without touching the IR:

- :func:`sink_store_waits`: a compute instruction that waits for the store (pops
  store->compute) and pushes nothing moves after the compute instructions that follow it and
  do not depend on it (other rows, other micro-ops, other token queues);
- :func:`hoist_store_tokens`: each compute->store push moves to the earliest compute
  instruction after which nothing compute runs writes a row the consuming STOREs read.

Both reason with :class:`Footprint`: the acc rows and micro-op words an instruction reads and
writes (acc and out share one index space: every acc write also writes out). Neither changes
which token a pop takes on any queue, and neither moves an instruction of another module.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel.machine.isa import (
    DEP_FLAGS,
    DEP_QUEUES,
    AluInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    MemInsn,
    MemType,
    Module,
    module_of,
)

__all__ = ["Footprint", "footprint", "hoist_store_tokens", "sink_store_waits"]

Span = tuple[int, int]
"""Inclusive range of buffer indices."""


@dataclass(frozen=True)
class Footprint:
    """What an instruction reads and writes of the acc (and out) buffer and the uop buffer."""

    acc_w: tuple[Span, ...] = ()
    acc_r: tuple[Span, ...] = ()
    uop_w: tuple[Span, ...] = ()
    uop_r: tuple[Span, ...] = ()

    def conflicts(self, other: Footprint) -> bool:
        """Whether running the two in either order can differ (a write meets a read or
        write)."""
        return (_meet(self.acc_w, other.acc_w + other.acc_r) or _meet(other.acc_w, self.acc_r)
                or _meet(self.uop_w, other.uop_w + other.uop_r)
                or _meet(other.uop_w, self.uop_r))


def _meet(a: tuple[Span, ...], b: tuple[Span, ...]) -> bool:
    return any(lo <= h and l2 <= hi for lo, hi in a for l2, h in b)


def footprint(insn: Insn, dst: Span | None = None, src: Span | None = None) -> Footprint:
    """``insn``'s :class:`Footprint`; ``dst`` and ``src`` are the acc ranges a GEMM's or ALU's
    micro-op loop reaches (codegen knows its kernel), unused for the other instructions."""
    if isinstance(insn, MemInsn):
        n = insn.sram_elems
        if n == 0:
            return Footprint()
        span = ((insn.sram_base, insn.sram_base + n - 1),)
        if insn.store:
            return Footprint(acc_r=span)
        if insn.mem_type is MemType.UOP:
            return Footprint(uop_w=span)
        if module_of(insn) is Module.COMPUTE:
            return Footprint(acc_w=span)
        return Footprint()
    if isinstance(insn, (GemmInsn, AluInsn)):
        if insn.n_uops == 0 or dst is None:
            return Footprint()
        uops = ((insn.uop_bgn, insn.uop_end - 1),)
        reads: tuple[Span, ...] = (dst,)           # accumulate, or ALU on its destination
        if isinstance(insn, GemmInsn) and insn.reset:
            reads = (src,) if insn.from_acc and src is not None else ()
        elif isinstance(insn, AluInsn) and not insn.use_imm and src is not None:
            reads = (dst, src)
        return Footprint(acc_w=(dst,), acc_r=reads, uop_r=uops)
    return Footprint()


def _queues(insn: Insn) -> set[object]:
    """The token queues a compute instruction pops or pushes."""
    return {DEP_QUEUES[(Module.COMPUTE, f)] for f in DEP_FLAGS if getattr(insn, f)}


def sink_store_waits(insns: list[Insn], prints: list[Footprint]) -> tuple[list[Insn],
                                                                            list[Footprint]]:
    """Move each compute instruction that pops store->compute and pushes nothing past the
    compute instructions after it that it does not conflict with (:meth:`Footprint.conflicts`)
    and that use none of its token queues, stopping at FINISH and at another such pop.

    Its token is then taken later and the instructions it passed run while the store finishes.
    A moved instruction pushes nothing, so nothing another module waits for is delayed; the
    instructions it passes pop on other queues only, so each pop still takes the same token.
    Instructions trade places in the stream, so every module's command queue fills as before.
    """
    out, fp = list(insns), list(prints)
    compute = [k for k, insn in enumerate(out) if module_of(insn) is Module.COMPUTE]
    pos = len(compute) - 2
    while pos >= 0:
        k = compute[pos]
        a = out[k]
        if a.pop_next and not (a.push_prev or a.push_next) and not isinstance(a, FinishInsn):
            queues = _queues(a)
            at = pos
            while at + 1 < len(compute):
                j, i = compute[at + 1], compute[at]
                b = out[j]
                if (isinstance(b, FinishInsn) or _queues(b) & queues
                        or fp[i].conflicts(fp[j])):
                    break
                out[i], out[j] = b, out[i]
                fp[i], fp[j] = fp[j], fp[i]
                at += 1
        pos -= 1
    return out, fp


def hoist_store_tokens(insns: list[Insn], prints: list[Footprint]) -> list[Insn]:
    """Move each compute->store push to the earliest compute instruction after which nothing
    that compute runs writes a row the consuming STOREs read.

    The k-th push is consumed by the k-th STORE that pops compute->store and the STOREs after
    it up to the next such pop. The push moves back over compute instructions that write none
    of their rows, never onto an instruction that pushes already and never to or before the
    previous push's original place, so at every point of compute's stream at most one token more
    is outstanding than before and the token order is kept. With virtual threads a thread's
    STOREs then start when its own last GEMM retires instead of after the other threads'."""
    compute = [k for k, insn in enumerate(insns) if module_of(insn) is Module.COMPUTE]
    groups: list[tuple[Span, ...]] = []
    for k, insn in enumerate(insns):
        if module_of(insn) is not Module.STORE:
            continue
        if insn.pop_prev:
            groups.append(())
        if groups:
            groups[-1] += prints[k].acc_r
    out = list(insns)
    floor = -1                      # position (in ``compute``) of the previous push, as emitted
    n = 0
    for pos, k in enumerate(compute):
        if not insns[k].push_next:
            continue
        reads = groups[n] if n < len(groups) else None
        n += 1
        target = pos
        while reads is not None and target - 1 > floor and not out[compute[target - 1]].push_next:
            if _meet(prints[compute[target]].acc_w, reads):
                break
            target -= 1
        if target != pos:
            out[k] = out[k].with_deps(push_next=False)
            out[compute[target]] = out[compute[target]].with_deps(push_next=True)
        floor = pos
    return out
