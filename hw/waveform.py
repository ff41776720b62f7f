"""Value-change dump (VCD) files from the RTL simulators: which cycles to dump, and reading
them back for waveform excerpts.

``run_rtl(..., vcd=PATH)`` writes a VCD from Amaranth's simulator or Verilator, of the whole
run or (with a :class:`VcdDump`) of a window of its cycles; :func:`window_vcd` cuts such a
window out of a whole dump. :func:`read_vcd` reads the signals whose hierarchical names match
glob patterns (``*.load.issue``, ``*token_queue.level``) into per-signal lists of value
changes, and :func:`clock_edges` converts times to clock cycles from the clock's own edges.

pyvcd (which Amaranth installs) has a reader, but it rejects the ``$signal`` identifiers that
Amaranth's VCD writer emits for anonymous signals, so this is a small line reader of the subset
both simulators write: ``$scope`` / ``$upscope`` / ``$var`` declarations, ``#time`` stamps,
scalar (``0!``) and vector (``b1010 !``) changes.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Signal", "VcdDump", "VcdError", "clock_edges", "first_edge_cycle", "read_vcd",
           "window_vcd"]


class VcdError(ValueError):
    """A VCD file that cannot be read, or a pattern no signal matches (one-line message)."""


@dataclass(frozen=True)
class VcdDump:
    """A waveform dump to write during an RTL run: the file and the cycles it covers.

    ``first`` and ``last`` are program cycles (0 is the cycle the run starts in, as in the
    cycle counts ``run_rtl`` reports), ``last`` excluded; ``last=None`` dumps to the end of the
    run. The file's time stamps stay those of the whole run. A whole-design dump of a GEMM
    running is about 15 KB per cycle on ``default``, so a network layer needs a window.

    Raises
    ------
    ValueError
        ``first`` is negative, or ``last`` is not after it.
    """

    path: Path
    first: int = 0
    last: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        if self.first < 0:
            raise ValueError(f"VCD window: first cycle must be >= 0, got {self.first}")
        if self.last is not None and self.last <= self.first:
            raise ValueError(f"VCD window: cycles {self.first}:{self.last} are empty "
                             "(the last cycle is excluded)")

    @classmethod
    def parse(cls, path: str | Path, cycles: str | None) -> VcdDump:
        """From a ``FIRST:LAST`` window as the command line takes it (either end may be left
        out, like a Python slice: ``:5000``, ``1000:``); None is the whole run.

        Raises
        ------
        ValueError
            ``cycles`` is not of that form, or the window is empty.
        """
        if cycles is None:
            return cls(Path(path))
        head, sep, tail = cycles.partition(":")
        try:
            if not sep:
                raise ValueError
            first = int(head) if head.strip() else 0
            last = int(tail) if tail.strip() else None
        except ValueError:
            raise ValueError(f"VCD window {cycles!r}: expected FIRST:LAST in cycles, such as "
                             "0:10000 or 5000: (LAST excluded)") from None
        return cls(Path(path), first, last)

    def check_folder(self) -> None:
        """Raise ValueError unless the file's folder exists (checked before a long run)."""
        if not self.path.parent.is_dir():
            raise ValueError(f"{self.path}: cannot write the VCD: no folder {self.path.parent}")

    def covers(self, cycles: int) -> str:
        """The cycles of a run of ``cycles`` cycles that the dump holds, in words."""
        last = cycles if self.last is None else min(self.last, cycles)
        if self.first >= last:
            return f"no cycles: the run ended at cycle {cycles}, before the window"
        return f"cycles {self.first}-{last - 1} of {cycles}"


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
             until: int | None = None, optional: Sequence[str] = ()) -> dict[str, Signal]:
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
    optional
        More patterns, which may match nothing.

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
                    if any(fnmatch.fnmatchcase(name, p) for p in (*patterns, *optional)):
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


def first_edge_cycle(edges: Sequence[int], counter: Signal) -> int:
    """The program cycle of a dump's first rising edge, from the design's cycle counter.

    The counter reads ``c`` from the edge that starts program cycle ``c`` on (in both engines'
    dumps), so the first edge where it is above 0 gives the offset. A dump that ends before
    cycle 1 counts from 0. Verilator's whole dumps start with two reset edges: cycle -2.
    """
    for k, t in enumerate(edges):
        value = counter.value_at(t)
        if value:
            return value - k
    return 0


def window_vcd(src: str | Path, dst: str | Path, clock: str, first: int,
               last: int | None) -> None:
    """Copy to ``dst`` the part of ``src`` around rising edges ``first`` to ``last`` (excluded;
    None: to the end) of ``clock`` (a pattern matching one 1-bit signal).

    ``dst`` starts with ``src``'s declarations, then a ``$dumpvars`` block with every signal's
    value at the time stamp just before edge ``first`` (the clock low, so that edge counts as
    the dump's first rising edge), then the changes up to edge ``last``, whose time stamp ends
    the file. A window past the end of ``src`` leaves the declarations only. Time stamps are
    ``src``'s.

    Raises
    ------
    VcdError
        ``src`` cannot be read or is not a VCD, or no signal matches ``clock``.
    """
    src, dst = Path(src), Path(dst)
    found = read_vcd(src, [clock])
    edges = clock_edges(next(iter(found.values())))
    start = edges[first] if first < len(edges) else None
    stop = edges[last] if last is not None and last < len(edges) else None
    state: dict[str, str] = {}       # identifier -> its latest change line, before the window
    before: int | None = None        # the last time stamp before edge ``first``
    opened = False
    with src.open("r", encoding="ascii", errors="replace") as inp, \
            dst.open("w", encoding="ascii") as out:
        for line in inp:
            out.write(line)
            if line.split()[:1] == ["$enddefinitions"]:
                break
        if start is None:
            return
        for line in inp:
            tokens = line.split()
            if not tokens or tokens[0] in ("$dumpvars", "$dumpall", "$dumpon", "$dumpoff",
                                           "$end"):
                continue
            head = tokens[0]
            if head.startswith("#"):
                time = int(head[1:])
                if stop is not None and time >= stop:
                    out.write(f"#{stop}\n")
                    break
                if not opened:
                    if time < start:
                        before = time
                        continue
                    stamp = start if before is None else before
                    out.write(f"#{stamp}\n$dumpvars\n{''.join(state.values())}$end\n")
                    opened = True
                out.write(line)
            elif opened:
                out.write(line)
            else:                    # remember the value: "b1010 id", "r1.5 id" or "1id"
                ident = tokens[1] if head[0] in "bBrR" and len(tokens) >= 2 else head[1:]
                state[ident] = line if line.endswith("\n") else line + "\n"
