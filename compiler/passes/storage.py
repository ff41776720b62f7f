"""SRAM storage planning: give every on-chip buffer its base address, in tiles.

Buffers are laid out one after another in their scope's SRAM in allocation order (virtual-thread
copies side by side). A scope that overflows is reported with the buffer that did not fit and
where it came from::

    acc tiles of 73728 bytes exceed the acc buffer of 65536 bytes at stage conv, loop y.outer
"""

from __future__ import annotations

from accel.machine.config import HwConfig
from compiler.errors import LoweringError
from compiler.tir import Allocate, Buffer, PrimFunc, stmts

__all__ = ["plan_sram"]


def plan_sram(func: PrimFunc, cfg: HwConfig) -> PrimFunc:
    """Assign ``Buffer.base`` for every on-chip allocation (the buffers are updated in place).

    Raises
    ------
    LoweringError
        A scope's buffers need more tiles than its SRAM holds.
    """
    top = {"inp": 0, "wgt": 0, "acc": 0}
    placed: set[int] = set()
    seen: list[Buffer] = []
    for s in stmts(func.body):
        if not isinstance(s, Allocate) or id(s.buffer) in placed:
            continue
        buf = s.buffer
        placed.add(id(buf))
        seen.append(buf)
        if buf.scope not in top:
            raise LoweringError(f"buffer {buf.name} has unknown scope {buf.scope}")
        buf.base = top[buf.scope]
        top[buf.scope] += buf.n_tiles
        depth = cfg.depth(buf.scope)
        if top[buf.scope] > depth:
            tile = cfg.tile_bytes(buf.scope)
            raise LoweringError(
                f"{buf.scope} tiles of {top[buf.scope] * tile} bytes exceed the {buf.scope} "
                f"buffer of {depth * tile} bytes at {buf.origin or buf.name}"
            )
    func.attrs["sram_tiles"] = dict(top)
    return func
