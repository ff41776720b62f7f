"""Reading value-change dump (VCD) files from the RTL simulators, for waveform excerpts.

``run_rtl(..., vcd=PATH)`` writes a VCD from Amaranth's simulator or Verilator. This module
reads the signals whose hierarchical names match glob patterns (``*.load.issue``,
``*token_queue.level``) into per-signal lists of value changes, and converts times to clock
cycles from the clock's own edges.

pyvcd (which Amaranth installs) has a reader, but it rejects the ``$signal`` identifiers that
Amaranth's VCD writer emits for anonymous signals, so this is a small line reader of the subset
both simulators write: ``$scope`` / ``$upscope`` / ``$var`` declarations, ``#time`` stamps,
scalar (``0!``) and vector (``b1010 !``) changes.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Signal", "VcdError", "clock_edges", "read_vcd"]


class VcdError(ValueError):
    """A VCD file that cannot be read, or a pattern no signal matches (one-line message)."""


@dataclass
class Signal:
    """One signal: hierarchical name, width in bits, and ``(time, value)`` changes in order.

    ``value`` is an int, or None where the simulator wrote an unknown (``x``/``z``) bit.
    """

    name: str
    width: int
    changes: list[tuple[int, int | None]] = field(default_factory=list)

    def value_at(self, time: int) -> int | None:
        """The value in effect at ``time`` (None before the first change)."""
        value: int | None = None
        for t, v in self.changes:
            if t > time:
                break
            value = v
        return value


def _parse_value(text: str) -> int | None:
    try:
        return int(text, 2)
    except ValueError:
        return None  # x / z bits


def read_vcd(path: str | Path, patterns: list[str],
             until: int | None = None) -> dict[str, Signal]:
    """The signals of ``path`` whose dotted names match any of ``patterns`` (fnmatch).

    Parameters
    ----------
    path
        A VCD file.
    patterns
        Glob patterns on names such as ``bench.top.load.issue``; every pattern must match
        at least one signal.
    until
        Stop reading after this time stamp (in the file's time unit).

    Raises
    ------
    VcdError
        The file cannot be read, is not a VCD, or a pattern matches nothing.
    """
    path = Path(path)
    try:
        handle = path.open("r", encoding="ascii", errors="replace")
    except OSError as exc:
        raise VcdError(f"{path}: cannot read: {exc.strerror}") from None
    wanted: dict[str, list[Signal]] = {}
    signals: dict[str, Signal] = {}
    scope: list[str] = []
    time = 0
    defined = False
    with handle:
        for lineno, line in enumerate(handle, 1):
            tokens = line.split()
            if not tokens:
                continue
            head = tokens[0]
            if not defined:
                if head == "$scope" and len(tokens) >= 3:
                    scope.append(tokens[2])
                elif head == "$upscope":
                    if scope:
                        scope.pop()
                elif head == "$var":
                    if len(tokens) < 5:
                        raise VcdError(f"{path}:{lineno}: malformed $var declaration")
                    name = ".".join([*scope, tokens[4].lstrip("\\")])
                    if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                        sig = Signal(name, int(tokens[2]))
                        signals.setdefault(name, sig)
                        wanted.setdefault(tokens[3], []).append(signals[name])
                elif head == "$enddefinitions":
                    defined = True
                    missing = [p for p in patterns
                               if not any(fnmatch.fnmatchcase(n, p) for n in signals)]
                    if missing:
                        raise VcdError(f"{path}: no signal matches {', '.join(missing)}")
                continue
            if head.startswith("#"):
                try:
                    time = int(head[1:])
                except ValueError:
                    raise VcdError(f"{path}:{lineno}: bad time stamp {head!r}") from None
                if until is not None and time > until:
                    break
            elif head[0] in "bBrR":
                if len(tokens) >= 2 and tokens[1] in wanted:
                    value = _parse_value(head[1:]) if head[0] in "bB" else None
                    for sig in wanted[tokens[1]]:
                        sig.changes.append((time, value))
            elif head[0] in "01xXzZ":
                ident = head[1:]
                if ident in wanted:
                    value = int(head[0]) if head[0] in "01" else None
                    for sig in wanted[ident]:
                        sig.changes.append((time, value))
    if not defined:
        raise VcdError(f"{path}: not a VCD file (no $enddefinitions)")
    return signals


def clock_edges(clock: Signal) -> list[int]:
    """Times of the rising edges of a 1-bit clock signal."""
    edges = []
    previous: int | None = None
    for t, v in clock.changes:
        if v == 1 and previous == 0:
            edges.append(t)
        previous = v
    return edges
