"""A small assembler-in-Python for writing programs by hand (tests, examples, experiments).

    b = ProgramBuilder(cfg)
    x = b.tensor("x", packed_x)               # a DRAM region holding a tensor
    k = b.uops([(0, 0, 0), (1, 1, 0)])          # micro-op kernel -> (bgn, end) in the table
    b.load(MemType.UOP, sram_base=0, dram_base=b.uop_base + k[0], x_size=2)
    ...
    b.finish()
    program, dram = b.build()
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.isa import AluInsn, AluOp, FinishInsn, GemmInsn, Insn, MemInsn, MemType
from accel.machine.program import Program

__all__ = ["ProgramBuilder"]


class ProgramBuilder:
    """Collects DRAM regions, micro-ops and instructions; :meth:`build` returns both halves.

    Parameters
    ----------
    cfg
        The hardware.
    max_uops
        Capacity of the micro-op table reserved at the start of DRAM.
    """

    def __init__(self, cfg: HwConfig, max_uops: int | None = None) -> None:
        self.cfg = cfg
        self.dram = Dram()
        self.insns: list[Insn] = []
        self._uops: list[tuple[int, int, int]] = []
        self._max_uops = max_uops if max_uops is not None else 4 * cfg.uop_depth
        self.dram.alloc("uop", self._max_uops * cfg.uop_bytes, align=cfg.uop_bytes)

    @property
    def uop_base(self) -> int:
        """DRAM address of micro-op 0, in micro-op words."""
        return self.dram.regions["uop"].offset // self.cfg.uop_bytes

    def tensor(self, name: str, array: np.ndarray, layout: str | None = None) -> int:
        """Place ``array`` in a new region; return its address in units of its first axis' tiles.

        The return value is the region's byte offset divided by the size of one element of the
        array's trailing two axes (one tile), which is what ``dram_base`` wants.
        """
        tile = int(np.prod(array.shape[-2:])) * array.dtype.itemsize if array.ndim >= 2 else 1
        region = self.dram.alloc_tensor(name, array, layout, align=max(64, tile))
        return region.offset // tile

    def buffer(self, name: str, nbytes: int, tile_bytes: int) -> int:
        """A zeroed output region; return its address in tiles of ``tile_bytes``."""
        region = self.dram.alloc(name, nbytes, align=max(64, tile_bytes))
        return region.offset // tile_bytes

    def uops(self, kernel: Iterable[tuple[int, int, int]]) -> tuple[int, int]:
        """Append micro-ops (dst, src, wgt) to the table; return their (bgn, end) indices."""
        bgn = len(self._uops)
        self._uops.extend((int(d), int(s), int(w)) for d, s, w in kernel)
        if len(self._uops) > self._max_uops:
            raise ValueError(f"more than {self._max_uops} micro-ops; raise max_uops")
        return bgn, len(self._uops)

    def emit(self, insn: Insn) -> Insn:
        self.insns.append(insn)
        return insn

    def load(self, mem_type: MemType, **fields: int | bool) -> Insn:
        return self.emit(MemInsn(mem_type=mem_type, **fields))  # type: ignore[arg-type]

    def store(self, mem_type: MemType = MemType.OUT, **fields: int | bool) -> Insn:
        """A STORE of the out buffer, or with ``mem_type=MemType.ACC`` (``store.postproc``) a
        post-processing STORE ACC (``shift``, ``clip_lo``, ``clip_hi``)."""
        return self.emit(MemInsn(store=True, mem_type=mem_type, **fields))  # type: ignore[arg-type]

    def gemm(self, **fields: int | bool) -> Insn:
        return self.emit(GemmInsn(**fields))  # type: ignore[arg-type]

    def alu(self, op: AluOp, **fields: int | bool) -> Insn:
        return self.emit(AluInsn(alu_op=op, **fields))  # type: ignore[arg-type]

    def finish(self, **deps: bool) -> Insn:
        return self.emit(FinishInsn(**deps))

    def build(self) -> tuple[Program, Dram]:
        """The program (with this builder's regions) and the DRAM image holding its inputs."""
        uops = np.array(self._uops, dtype=np.int64).reshape(-1, 3)
        program = Program(
            self.cfg, self.insns, uops, dict(self.dram.regions),
            uop_region="uop" if len(uops) else None,
        )
        return program, self.dram
