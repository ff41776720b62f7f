"""Helpers shared by the passes: perfect loop nests and matching tile accesses."""

from __future__ import annotations

from compiler.errors import LoweringError
from compiler.te import Expr, Var
from compiler.tir import Buffer, For, Stmt, TileRef

__all__ = ["perfect_nest", "split_tile_access", "wrap_loops"]


def perfect_nest(loop: For) -> tuple[list[For], Stmt]:
    """The loops of a perfect nest starting at ``loop`` (each body is the next loop) and the
    innermost statement."""
    loops = [loop]
    body = loop.body
    while isinstance(body, For):
        loops.append(body)
        body = body.body
    return loops, body


def split_tile_access(buffer: Buffer, indices: tuple[Expr, ...], tile_vars: list[Var],
                      where: str) -> TileRef:
    """A tile reference from element ``indices`` whose last two are ``tile_vars``.

    Raises
    ------
    LoweringError
        The last two indices are not exactly the tile loop variables.
    """
    if list(indices[-2:]) != tile_vars:
        names = ", ".join(v.name for v in tile_vars)
        raise LoweringError(
            f"{where}: access {buffer.name}[...] must index its tile with the innermost loops "
            f"({names}), got {', '.join(repr(i) for i in indices[-2:])}"
        )
    return TileRef(buffer, buffer.tile_index(indices[:-2]))


def wrap_loops(loops: list[For], body: Stmt) -> Stmt:
    """``body`` inside copies of ``loops`` (outer first), keeping kinds and annotations."""
    for loop in reversed(loops):
        body = For(loop.var, loop.extent, body, loop.kind)
    return body
