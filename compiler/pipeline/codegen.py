"""Code generation: the hardware-level IR becomes an :class:`accel.machine.isa.Program`.

The IR is walked with concrete loop values (the ISA has no branches, so every loop is unrolled
into the instruction stream):

- each :class:`DmaCopy` becomes a LOAD or STORE; a block lying wholly in the padding becomes a
  load of zero tiles from a zero region;
- each :class:`UopLoop` becomes a GEMM or ALU with its hardware loops and factors; its kernel is
  placed in the uop buffer (preloaded when the whole plan fits, else kept in a ring and
  reloaded with LOAD UOP when evicted);
- a :class:`DepPop` sets a pop flag on the module's next instruction and a :class:`DepPush` a
  push flag on its previous one (VTA's runtime rule), a zero-size LOAD/STORE carrying the token
  when the flag is taken or there is no such instruction;
- FINISH ends the program, carrying compute's last pops;
- the stream passes of :mod:`compiler.passes.stream` then let the virtual threads' epilogues
  overlap: compute->store tokens pushed as early as the data allows, waits for the store moved
  after independent work.

DRAM holds the program's arguments (blocked layouts), the micro-op table and, if needed, zeros.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.isa import (
    DEP_QUEUES,
    AluInsn,
    FinishInsn,
    GemmInsn,
    Insn,
    MemInsn,
    MemType,
    Module,
    TokenQueue,
    module_of,
)
from accel.machine.program import Program, Region
from compiler.errors import LoweringError
from compiler.passes.stream import footprint, hoist_store_tokens, sink_store_waits
from compiler.passes.uops import UopKernel, hw_factors, kernel_uops, uop_refs
from compiler.te import Expr, Var, walk
from compiler.tir import (
    Allocate,
    Alu,
    Buffer,
    DepPop,
    DepPush,
    DmaCopy,
    For,
    PrimFunc,
    Seq,
    Stmt,
    UopLoop,
    evaluate_expr,
)

__all__ = ["codegen"]

_FLAG = {(m, q): flag for (m, flag), q in DEP_QUEUES.items()}


def _dtype_bytes(dtype: str) -> int:
    return int(np.dtype(dtype).itemsize)


class _Emitter:
    def __init__(self, func: PrimFunc, cfg: HwConfig) -> None:
        self.cfg = cfg
        self.func = func
        self.insns: list[Insn] = []
        self.last: dict[Module, int] = {}
        self.pending: dict[Module, list[TokenQueue]] = {m: [] for m in Module}
        self.dram = Dram()
        self.uops: list[tuple[int, int, int]] = []
        plan: dict[UopKernel, int] | None = func.attrs.get("uop_kernels")
        self.static_plan = plan
        self.resident: dict[UopKernel, int] = {}
        self.ring_top = 0
        self.kernel_table: dict[UopKernel, int] = {}
        self.zero_tiles: dict[MemType, int] = {}
        self.zero_base: dict[MemType, int] = {}
        self._outer_vars: dict[int, list[Var]] = {}
        self._kernels: dict[tuple[int, tuple[int, ...]], tuple[UopKernel, list[list[int]]]] = {}
        self.spans: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {}
        for buf in func.params:
            tile = _dtype_bytes(buf.dtype) * buf.tile_shape[0] * buf.tile_shape[1]
            self.dram.alloc(buf.name, int(np.prod(buf.shape)) * _dtype_bytes(buf.dtype),
                            align=max(64, tile), shape=buf.shape, dtype=buf.dtype)

    # ------------------------------------------------------------------ instructions
    def emit(self, insn: Insn) -> None:
        module = module_of(insn)
        flags: dict[str, bool] = {}
        for queue in self.pending[module]:
            flags[_FLAG[(module, queue)]] = True
        self.pending[module] = []
        if flags:
            insn = dataclasses.replace(insn, **flags)
        self.last[module] = len(self.insns)
        self.insns.append(insn)

    def _noop(self, module: Module) -> Insn:
        if module is Module.LOAD:
            return MemInsn(mem_type=MemType.INP, y_size=0, x_size=0, x_stride=0)
        if module is Module.STORE:
            return MemInsn(store=True, mem_type=MemType.OUT, y_size=0, x_size=0, x_stride=0)
        return MemInsn(mem_type=MemType.UOP, y_size=0, x_size=0, x_stride=0)

    def pop(self, module: Module, queue: TokenQueue) -> None:
        if queue in self.pending[module]:
            # The next instruction can carry one pop per queue: carry this one alone.
            self.emit(self._noop(module))
        self.pending[module].append(queue)

    def push(self, module: Module, queue: TokenQueue) -> None:
        flag = _FLAG[(module, queue)]
        index = self.last.get(module)
        if index is None or getattr(self.insns[index], flag):
            self.emit(self._noop(module))
            index = self.last[module]
        self.insns[index] = dataclasses.replace(self.insns[index], **{flag: True})

    # ------------------------------------------------------------------ walking
    def run(self, node: Stmt, env: dict[Var, int]) -> None:
        if isinstance(node, Seq):
            for s in node.body:
                self.run(s, env)
        elif isinstance(node, For):
            for i in range(node.extent):
                env[node.var] = i
                self.run(node.body, env)
            del env[node.var]
        elif isinstance(node, Allocate):
            self.run(node.body, env)
        elif isinstance(node, DmaCopy):
            self.dma(node, env)
        elif isinstance(node, UopLoop):
            self.uop_loop(node, env)
        elif isinstance(node, DepPush):
            if node.cond is None or evaluate_expr(node.cond, env):
                self.push(node.module, node.queue)
        elif isinstance(node, DepPop):
            if node.cond is None or evaluate_expr(node.cond, env):
                self.pop(node.module, node.queue)
        else:
            raise LoweringError(f"codegen: {type(node).__name__} was not lowered to hardware")

    def _dram_base(self, buf: Buffer, tile_index: int) -> int:
        region = self.dram.regions[buf.name]
        tile = _dtype_bytes(buf.dtype) * buf.tile_shape[0] * buf.tile_shape[1]
        return region.offset // tile + tile_index

    def dma(self, s: DmaCopy, env: dict[Var, int]) -> None:
        def ev(e: Expr) -> int:
            return evaluate_expr(e, env)

        sram = (s.sram.buffer.base or 0) + ev(s.sram.index)
        y, x = ev(s.y_size), ev(s.x_size)
        pads = [ev(p) for p in (s.y_pad_0, s.y_pad_1, s.x_pad_0, s.x_pad_1)]
        limit = (1 << self.cfg.isa.pad_bits) - 1
        if (y <= 0 or x <= 0) and not s.store:
            # The whole block is padding: load zeros instead.
            rows, cols = pads[0] + max(y, 0) + pads[1], pads[2] + max(x, 0) + pads[3]
            self.emit(MemInsn(mem_type=s.mem_type, sram_base=sram,
                              dram_base=self._zeros(s.mem_type, cols), y_size=rows,
                              x_size=cols, x_stride=0))
            return
        if max(pads) > limit:
            raise LoweringError(f"codegen: padding {max(pads)} of {s.sram.buffer.name} exceeds "
                                f"the {self.cfg.isa.pad_bits}-bit pad field")
        self.emit(MemInsn(
            store=s.store, mem_type=s.mem_type, sram_base=sram,
            dram_base=self._dram_base(s.dram.buffer, ev(s.dram.index)),
            y_size=y, x_size=x, x_stride=s.x_stride,
            y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3],
            shift=s.shift, clip_lo=s.clip_lo, clip_hi=s.clip_hi,
        ))

    def _zeros(self, mem: MemType, cols: int) -> int:
        tile = self.cfg.tile_bytes(mem.buffer)
        name = f"zeros.{mem.buffer}"
        have = self.zero_tiles.get(mem, 0)
        if cols > have:
            if name in self.dram.regions:
                name = f"{name}.{cols}"
            region = self.dram.alloc(name, cols * tile, align=max(64, tile))
            self.zero_tiles[mem] = cols
            self.zero_base[mem] = region.offset // tile
        return self.zero_base[mem]

    def uop_loop(self, s: UopLoop, env: dict[Var, int]) -> None:
        outer = self._outer_vars.get(id(s))
        if outer is None:
            outer = self._outer_vars[id(s)] = _outer_vars(s)
        key = (id(s), tuple(env[v] for v in outer))
        cached = self._kernels.get(key)
        if cached is None:
            cached = self._kernels[key] = (kernel_uops(s, env), hw_factors(s))
        kernel, factors = cached
        bgn = self.place_kernel(kernel)
        iters = [n for _, n in s.hw_loops] + [1] * (2 - len(s.hw_loops))
        fo = factors[0] if len(factors) > 0 else [0, 0, 0]
        fi = factors[1] if len(factors) > 1 else [0, 0, 0]
        common: dict[str, Any] = dict(
            uop_bgn=bgn, uop_end=bgn + len(kernel.uops), iter_out=iters[0], iter_in=iters[1],
            dst_factor_out=fo[0], dst_factor_in=fi[0],
            src_factor_out=fo[1], src_factor_in=fi[1],
        )
        op = s.op
        if isinstance(op, Alu):
            self.emit(AluInsn(alu_op=op.op, use_imm=op.imm is not None, imm=op.imm or 0,
                              **common))
        else:
            self.emit(GemmInsn(reset=op.reset, from_acc=op.from_acc, wgt_factor_out=fo[2],
                               wgt_factor_in=fi[2], **common))
        if kernel.uops:
            self.spans[len(self.insns) - 1] = (_span(kernel.uops, 0, fo, fi, iters),
                                               _span(kernel.uops, 1, fo, fi, iters))

    def place_kernel(self, kernel: UopKernel) -> int:
        """The kernel's offset in the uop buffer, loading it first if it is not resident."""
        if kernel in self.resident:
            return self.resident[kernel]
        n = len(kernel.uops)
        depth = self.cfg.uop_depth
        if n > depth:
            raise LoweringError(f"codegen: a micro-op kernel of {n} micro-ops exceeds the uop "
                                f"buffer of {depth}")
        if self.static_plan is not None and kernel in self.static_plan:
            offset = self.static_plan[kernel]
        else:
            if self.ring_top + n > depth:
                self.ring_top = 0
            offset = self.ring_top
            self.ring_top += n
            # Evict every kernel that overlaps the new one.
            self.resident = {k: o for k, o in self.resident.items()
                             if o + len(k.uops) <= offset or o >= offset + n}
        table = self.kernel_table.get(kernel)
        if table is None:
            table = len(self.uops)
            self.uops.extend(kernel.uops)
            self.kernel_table[kernel] = table
        self.emit(MemInsn(mem_type=MemType.UOP, sram_base=offset, dram_base=-1 - table,
                          y_size=1, x_size=n, x_stride=n))
        self.resident[kernel] = offset
        return offset

    def preload(self) -> None:
        if self.static_plan:
            for kernel in self.static_plan:
                self.place_kernel(kernel)
            self.ring_top = sum(len(k.uops) for k in self.static_plan)

    def finish(self) -> Program:
        # Every pending pop on compute rides on FINISH; others on no-ops.
        for module in (Module.LOAD, Module.STORE):
            while self.pending[module]:
                self.emit(self._noop(module))
        finish_pops = self.pending[Module.COMPUTE]
        while len(finish_pops) > 1 or (finish_pops and finish_pops.count(finish_pops[0]) > 1):
            self.emit(self._noop(Module.COMPUTE))
            finish_pops = self.pending[Module.COMPUTE]
        self.emit(FinishInsn())
        prints = [footprint(insn, *self.spans.get(k, (None, None)))
                  for k, insn in enumerate(self.insns)]
        self.insns, prints = sink_store_waits(self.insns, prints)
        self.insns = hoist_store_tokens(self.insns, prints)
        uop_region = None
        if self.uops:
            region = self.dram.alloc("uop", len(self.uops) * self.cfg.uop_bytes,
                                     align=self.cfg.uop_bytes)
            uop_region = region.name
            base = region.offset // self.cfg.uop_bytes
            self.insns = [self._fix_uop_address(i, base) for i in self.insns]
        regions: dict[str, Region] = dict(self.dram.regions)
        return Program(self.cfg, self.insns, np.array(self.uops, dtype=np.int64).reshape(-1, 3),
                       regions, uop_region, {"op": self.func.name, **self.func.attrs.get(
                           "meta", {})})

    @staticmethod
    def _fix_uop_address(insn: Insn, base: int) -> Insn:
        if isinstance(insn, MemInsn) and insn.mem_type is MemType.UOP and insn.dram_base < 0:
            return dataclasses.replace(insn, dram_base=base + (-1 - insn.dram_base))
        return insn


def _span(uops: list[tuple[int, int, int]], field: int, fo: list[int], fi: list[int],
          iters: list[int]) -> tuple[int, int]:
    """Inclusive range of micro-op field ``field`` (0 acc, 1 inp/src) over the hardware loops."""
    values = [u[field] for u in uops]
    corners = [i * fo[field] + j * fi[field] for i in (0, iters[0] - 1) for j in (0, iters[1] - 1)]
    return min(values) + min(corners), max(values) + max(corners)


def _outer_vars(s: UopLoop) -> list[Var]:
    """Variables of enclosing loops that the micro-op indices use (they key the kernel)."""
    own = {v for v, _ in s.hw_loops + s.kernel_loops}
    found: list[Var] = []
    for ref in uop_refs(s.op):
        if ref is None:
            continue
        for node in walk(ref.index):
            if isinstance(node, Var) and node not in own and node not in found:
                found.append(node)
    return found


def codegen(func: PrimFunc, cfg: HwConfig) -> Program:
    """The program of a fully lowered function (see the module docstring).

    Raises
    ------
    LoweringError
        A statement that is not hardware-level, a kernel larger than the uop buffer, or padding
        wider than the pad field.
    """
    em = _Emitter(func, cfg)
    em.preload()
    em.run(func.body, {})
    return em.finish()

