"""Compiler errors."""

from __future__ import annotations

__all__ = ["LoweringError"]


class LoweringError(ValueError):
    """A schedule or program cannot be lowered; the message names the stage, the loop and the
    constraint, e.g. ``acc tiles of 73728 bytes exceed the acc buffer of 65536 bytes at stage
    conv, loop x.outer``."""
