"""Results of a timing simulation: ``SimStats`` and its Chrome trace-event (Perfetto) export."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

from accel.machine.actions import ActionCounts

__all__ = ["MODULES", "ModuleStats", "SimStats", "Slice", "TraceWriter", "trace_metadata"]

MODULES = ("fetch", "load", "compute", "store")

CMD_EMPTY = "cmd_empty"
"""Stall cause: waiting for an instruction (includes the idle tail after a module's last one)."""
DRAM_CONTENTION = "dram_contention"
"""Stall cause: waiting for the DRAM channel: a grant, a free slot among
``dram.max_outstanding``, or the data bus busy with other requesters' beats."""
DRAM_LATENCY = "dram_latency"
"""Stall cause: waiting for data granted and on its way (a read's access latency, a write's
response)."""
QUEUE_FULL = "queue_full"
"""Stall cause of fetch: the destination command queue is full."""


def pop_cause(queue: str) -> str:
    """Stall cause: waiting for a token in ``queue`` (e.g. ``"token load->compute"``)."""
    return f"token {queue}"


def push_cause(queue: str) -> str:
    """Stall cause: ``queue`` is full, so the token cannot be pushed downstream."""
    return f"full {queue}"


@dataclass
class ModuleStats:
    """Per-module cycle accounting: ``busy + sum(stalls.values()) == SimStats.cycles``.

    ``active`` counts the cycles the module runs an instruction, from its decode cycle through
    its last (DRAM waits inside it included); fetch's run from cycle 0 through its last
    dispatch. It is what the energy model charges a module's clock for
    (:mod:`accel.machine.energy`), and what the RTL counts (``hw.activity``).
    """

    busy: int = 0
    stalls: dict[str, int] = field(default_factory=dict)
    insns: int = 0
    active: int = 0

    def stall(self, cause: str, cycles: int) -> None:
        if cycles:
            self.stalls[cause] = self.stalls.get(cause, 0) + cycles

    @property
    def stall_total(self) -> int:
        return sum(self.stalls.values())

    def largest_stall(self) -> str | None:
        """The cause with the most stall cycles (None when the module never stalled)."""
        return max(self.stalls, key=lambda c: self.stalls[c]) if self.stalls else None

    def to_dict(self) -> dict[str, Any]:
        return {"busy": self.busy, "stalls": dict(self.stalls), "insns": self.insns,
                "active": self.active}


@dataclass(frozen=True)
class Slice:
    """One instruction's execution on a module: ``[start, end)`` in cycles."""

    module: str
    index: int
    name: str
    start: int
    end: int


@dataclass
class SimStats:
    """What the timing simulator measured.

    Attributes
    ----------
    cycles
        Cycle at which FINISH retired.
    modules
        ``fetch``, ``load``, ``compute``, ``store`` -> :class:`ModuleStats`.
    macs
        Multiply-accumulates the GEMM core performed (reset GEMMs do none).
    gemm_busy, alu_busy
        Cycles the GEMM core / ALU spent executing instructions.
    bytes_read, bytes_written
        Bytes read from / written to each on-chip buffer (uop, inp, wgt, acc, out).
    dram_bytes
        Bytes moved over the DRAM channel (instructions, loads and stores).
    dram_write_bytes, dram_transactions
        Of those, the bytes written; the transactions granted.
    dram_busy
        Cycles the DRAM data bus carried a beat.
    peak_dram_bytes_per_cycle
        The data bus's width (``dram.bytes_per_cycle``).
    insn_counts
        Instructions by opcode (``LOAD_INP``, ``GEMM``, ``ALU_ADD``, ...).
    dram_loaded, dram_stored
        DRAM bytes read per destination buffer (padding excluded) and written from out.
    actions
        Every action that costs energy (:mod:`accel.machine.actions`): the functional
        simulator's counts of the instructions retired, instruction fetch included.
    """

    cycles: int
    peak_macs_per_cycle: int
    clock_mhz: float
    modules: dict[str, ModuleStats]
    peak_dram_bytes_per_cycle: int = 0
    macs: int = 0
    gemm_busy: int = 0
    alu_busy: int = 0
    bytes_read: dict[str, int] = field(default_factory=dict)
    bytes_written: dict[str, int] = field(default_factory=dict)
    dram_bytes: int = 0
    dram_write_bytes: int = 0
    dram_transactions: int = 0
    dram_busy: int = 0
    insn_counts: dict[str, int] = field(default_factory=dict)
    dram_loaded: dict[str, int] = field(default_factory=dict)
    dram_stored: int = 0
    actions: ActionCounts = field(default_factory=ActionCounts)
    timeline: list[Slice] = field(default_factory=list, repr=False)
    counters: list[tuple[str, int, float]] = field(default_factory=list, repr=False)

    # A run's trace is pickled packed (the timing worker sends it to the parent): its slices
    # and counters as a few numpy arrays, not hundreds of thousands of objects, which cost
    # the receiving process as much to unpickle as to write. The receiver keeps them packed
    # (the trace writer reads the arrays) until ``timeline`` or ``counters`` is asked for.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        packed = _pack_trace(state.get("timeline", ()), state.get("counters", ()))
        if packed is not None:
            del state["timeline"], state["counters"]
            state["_packed"] = packed
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __getattr__(self, name: str) -> Any:  # only for attributes not there: packed ones
        packed = self.__dict__.get("_packed")
        if packed is None or name not in ("timeline", "counters"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.timeline, self.counters = _unpack_trace(packed)
        del self.__dict__["_packed"]
        return self.__dict__[name]

    @property
    def gemm_utilization(self) -> float:
        """MACs performed / (cycles x peak MACs per cycle), 0..1."""
        if not self.cycles:
            return 0.0
        return self.macs / (self.cycles * self.peak_macs_per_cycle)

    @property
    def dram_bytes_per_cycle(self) -> float:
        """Achieved DRAM bandwidth over the whole run, bytes per cycle."""
        return self.dram_bytes / self.cycles if self.cycles else 0.0

    @property
    def dram_bandwidth_share(self) -> float:
        """Achieved DRAM bandwidth over the whole run as a share of the peak, 0..1."""
        peak = self.peak_dram_bytes_per_cycle
        return self.dram_bytes_per_cycle / peak if peak else 0.0

    @property
    def dram_gbytes_per_s(self) -> float:
        """Achieved DRAM bandwidth at the config's clock, GB/s."""
        return self.dram_bytes_per_cycle * self.clock_mhz / 1000.0

    @property
    def milliseconds(self) -> float:
        """Run time at the config's clock."""
        return self.cycles / (self.clock_mhz * 1000.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the timeline and counters are left to :meth:`write_trace`)."""
        return {
            "cycles": self.cycles,
            "milliseconds": self.milliseconds,
            "gemm_utilization": self.gemm_utilization,
            "macs": self.macs,
            "gemm_busy": self.gemm_busy,
            "alu_busy": self.alu_busy,
            "modules": {name: m.to_dict() for name, m in self.modules.items()},
            "bytes_read": dict(self.bytes_read),
            "bytes_written": dict(self.bytes_written),
            "dram_bytes": self.dram_bytes,
            "dram_write_bytes": self.dram_write_bytes,
            "dram_transactions": self.dram_transactions,
            "dram_busy": self.dram_busy,
            "dram_bytes_per_cycle": self.dram_bytes_per_cycle,
            "peak_dram_bytes_per_cycle": self.peak_dram_bytes_per_cycle,
            "dram_bandwidth_share": self.dram_bandwidth_share,
            "dram_gbytes_per_s": self.dram_gbytes_per_s,
            "insn_counts": dict(self.insn_counts),
            "dram_loaded": dict(self.dram_loaded),
            "dram_stored": self.dram_stored,
            "actions": self.actions.to_dict(),
        }

    def trace_events(self) -> list[dict[str, Any]]:
        """Chrome trace events: one track per module, counters for queues and DRAM.

        Timestamps are microseconds at the config's clock, so Perfetto shows real time; each
        slice's ``args`` carry the instruction index and its cycles.
        """
        us = 1.0 / self.clock_mhz
        events: list[dict[str, Any]] = [
            {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "accelerator"}},
        ]
        for tid, name in enumerate(MODULES):
            events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name",
                           "args": {"name": name}})
        tids = {name: tid for tid, name in enumerate(MODULES)}
        for s in self.timeline:
            events.append({
                "ph": "X", "pid": 1, "tid": tids[s.module], "name": s.name,
                "ts": s.start * us, "dur": (s.end - s.start) * us,
                "args": {"index": s.index, "start_cycle": s.start, "cycles": s.end - s.start},
            })
        for name, cycle, value in self.counters:
            events.append({"ph": "C", "pid": 1, "name": name, "ts": cycle * us,
                           "args": {"value": value}})
        return events

    def write_trace(self, path: str | Path) -> None:
        """Write Chrome trace-event JSON that Perfetto (ui.perfetto.dev) opens: the events of
        :meth:`trace_events`, in that order, written by :class:`TraceWriter` (as text
        built by numpy, not one dict per event: a fraction of the time)."""
        with TraceWriter(path, {"cycles": self.cycles, "clock_mhz": self.clock_mhz}) as out:
            for event in trace_metadata():
                out.event(event)
            out.stats(self)


def trace_metadata() -> list[dict[str, Any]]:
    """The metadata events of :meth:`SimStats.trace_events`: the process and one named
    track (thread) per module."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "accelerator"}},
    ]
    for tid, name in enumerate(MODULES):
        events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name",
                       "args": {"name": name}})
    return events


class TraceWriter:
    """Chrome trace-event JSON written to ``path`` on :meth:`close` (atomically: a temporary
    file renamed): ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": ...}``.

    The events are those given, in that order: :meth:`event` one event dict, written as
    :func:`json.dumps` writes it; :meth:`stats` a :class:`SimStats`' slices and counters,
    the events :meth:`SimStats.trace_events` lists after its metadata, with the same values
    (a timestamp shifted by ``offset_us`` is ``ts + offset_us``, as a merged trace's event
    dicts had it). Those are not made into dicts: every program's slices and counters are
    turned into text together, column by column, by numpy. The text differs from
    ``json.dumps``' only in whitespace (numbers and names padded to their column's width,
    one event a line) and in how some floats are spelt (each reads back as the same float).

    Use it as a context manager: the file is written when the block ends without an
    exception.
    """

    def __init__(self, path: str | Path, other_data: dict[str, Any]) -> None:
        self.path = Path(path)
        self.other_data = other_data
        self._queue: list[dict[str, Any] | tuple[SimStats, float]] = []

    def event(self, event: dict[str, Any]) -> None:
        self._queue.append(event)

    def stats(self, stats: SimStats, offset_us: float = 0.0) -> None:
        self._queue.append((stats, offset_us))

    def close(self) -> None:
        blocks = [q for q in self._queue if isinstance(q, tuple)]
        slices = _slice_rows(blocks)
        counters = _counter_rows(blocks)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("wb") as f:
            f.write(b'{"traceEvents":[\n')
            first = True
            k = 0
            for item in self._queue:
                if isinstance(item, dict):
                    parts = [json.dumps(item, separators=(",", ":")).encode()]
                else:
                    parts = [_block(rows, k) for rows in (slices, counters)]
                    k += 1
                for part in parts:
                    if part is None:
                        continue
                    if not first:
                        f.write(b",\n")
                    first = False
                    f.write(part)
            tail = json.dumps({"displayTimeUnit": "ns", "otherData": self.other_data},
                              separators=(",", ":"))
            f.write(b"\n]," + tail[1:].encode())
        tmp.replace(self.path)
        self._queue = []

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is None:
            self.close()


def _block(rows: tuple[Any, Any] | None, k: int) -> Any:
    """The text of program ``k``'s events in ``rows`` (a matrix of event rows and each
    program's first row), less the separator after its last; None if it has none."""
    if rows is None:
        return None
    matrix, bounds = rows
    first, end = int(bounds[k]), int(bounds[k + 1])
    if first == end:
        return None
    return memoryview(matrix[first:end].reshape(-1))[:-2]


# ---------------------------------------------------------------------- trace text
# Each event is one row of a uint8 matrix: literal bytes and columns of text padded with
# spaces, after a ':' or before a ',' or '}' (JSON's whitespace between tokens, which
# Perfetto's JSON tokenizer and parser skip too).

def _rows(n: int, parts: list[Any]) -> Any:
    """A (n, width) uint8 matrix of ``parts`` side by side: bytes (the same in every row)
    and (n, w) uint8 text columns; each row ends with ``,\n``."""
    import numpy as np

    parts = [*parts, b",\n"]
    template = b"".join(p if isinstance(p, bytes) else b" " * p.shape[1] for p in parts)
    out = np.tile(np.frombuffer(template, np.uint8), (n, 1))  # the literals, row by row
    at = 0
    for part in parts:
        if isinstance(part, bytes):
            at += len(part)
        else:
            out[:, at:at + part.shape[1]] = part
            at += part.shape[1]
    return out


_QUADS: Any = None  # "0000" .. "9999" as uint32, built on first use


def _zero_padded(mag: Any, width: int) -> Any:
    """Non-negative int64 ``mag`` as ``width`` digits with leading zeros, an (n, width) uint8
    matrix (four digits a step, from a table of "0000" .. "9999")."""
    import numpy as np

    global _QUADS
    if _QUADS is None:
        _QUADS = np.frombuffer(b"".join(b"%04d" % i for i in range(10000)), "<u4")
    quads = -(-width // 4)
    out = np.empty((len(mag), quads), "<u4")
    rest = mag
    for j in range(quads - 1, -1, -1):
        out[:, j] = _QUADS[rest % 10000]
        rest = rest // 10000
    return out.view(np.uint8).reshape(len(mag), 4 * quads)[:, 4 * quads - width:]


def _blank_leading(text: Any, ndigits: Any) -> Any:
    """``text`` (zero-padded digits) with the zeros before the last ``ndigits`` of each row
    made spaces."""
    import numpy as np

    text[np.arange(text.shape[1]) < (text.shape[1] - ndigits)[:, None]] = 32
    return text


def _ndigits(mag: Any) -> Any:
    import numpy as np

    return np.maximum(np.searchsorted(np.array(_POW10, np.int64), mag, side="right"), 1)


_POW10 = [10**k for k in range(19)]
_POW10_FLOAT = [float(10**k) for k in range(23)]  # exact: 10**22 is float64's last


def _int_text(values: Any) -> Any:
    """Right-aligned decimal text of int64 ``values``, an (n, width) uint8 matrix."""
    import numpy as np

    neg = values < 0
    mag = np.abs(values)
    ndigits = _ndigits(mag) + neg
    width = int(ndigits.max()) if len(mag) else 1
    out = _blank_leading(_zero_padded(mag, width), ndigits)
    if neg.any():
        at = np.flatnonzero(neg)
        out[at, width - ndigits[at]] = 45  # "-"
    return out


def _exact_products(x: Any, scale: Any) -> Any:
    """``round(x * scale)`` exactly (int64), ``x * scale`` below 2**62: the float product and
    its rounding error (Dekker's two-product, float64 arithmetic alone) added as integers."""
    import numpy as np

    def split(a: Any) -> tuple[Any, Any]:
        c = 134217729.0 * a  # 2**27 + 1
        high = c - (c - a)
        return high, a - high

    product = x * scale
    xh, xl = split(x)
    sh, sl = split(scale)
    error = ((xh * sh - product) + xh * sl + xl * sh) + xl * sl
    whole = np.rint(product)
    return whole.astype(np.int64) + np.rint(error + (product - whole)).astype(np.int64)


def _float_text(values: Any) -> Any:
    """Text of float64 ``values`` that ``json.loads`` (any correctly rounding reader) reads
    back as exactly those values, an (n, width) uint8 matrix: the points in one column, the
    digits before them right-aligned, the zeros that end the decimals blanked (whitespace,
    to JSON, before the ``,`` or ``}`` that follows).

    Each value is ``m / 10**d`` for an integer ``m``, the first way that applies:

    - d up to 9 (as many as keep m below 2**52), if that reads back as the value: ``float``
      of the text is the correctly rounded quotient, and so is float64 division of the exact
      ``m`` by the exact ``10**d``, so the check is exact;
    - 17 significant digits (from 0.1 to 1e15), ``m`` the exact ``round(x * 10**d)``: 17
      digits are within 5e-17 of the value relative, less than half its float64 spacing, so
      they read back as it;
    - else as ``json.dumps`` spells it (negative values, -0.0, infinities, nan, the rest).
    """
    import numpy as np

    n = len(values)
    pow10 = np.array(_POW10, np.int64)
    pow10f = np.array(_POW10_FLOAT)
    ok = np.isfinite(values) & ~np.signbit(values)  # 0.0 and up
    x = np.where(ok, values, 1.0)
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log10(x))  # of the first digit (or one off); 0.0: -inf
    decimals = np.clip(15.653559774527022 - exponent, 1, 9).astype(np.int64)  # log10(2**52)
    scale = pow10f[decimals]
    m = np.rint(x * scale)
    short = ok & (m < 2.0**52) & (m / scale == x)
    mantissa = np.where(short, m, 0.0).astype(np.int64)
    rows = np.flatnonzero(ok & ~short & (x >= 0.1) & (x < 1e15))
    if len(rows):  # 17 significant digits
        xr = x[rows]
        first = exponent[rows].astype(np.int64)
        digits = np.zeros(len(rows), np.int64)
        pending = np.arange(len(rows))
        for _ in range(3):
            digits[pending] = _exact_products(xr[pending], pow10f[16 - first[pending]])
            low = digits[pending] < 10**16
            high = digits[pending] >= 10**17
            first[pending[low]] -= 1
            first[pending[high]] += 1
            pending = pending[low | high]
            if not len(pending):
                break
        fine = np.ones(len(rows), bool)
        fine[pending] = False  # (cannot happen) left to json.dumps
        fine &= (first >= -1) & (first <= 14)
        rows, digits, first = rows[fine], digits[fine], first[fine]
        mantissa[rows] = digits
        decimals[rows] = 16 - first
    spelt = short.copy()
    spelt[rows] = True
    fallback = np.flatnonzero(~spelt)
    decimals[fallback] = 1
    widest = int(decimals.max()) if n else 1
    whole = mantissa // pow10[decimals]
    fraction = (mantissa - whole * pow10[decimals]) * pow10[widest - decimals]
    ndigits = _ndigits(whole)
    left = int(ndigits.max()) if n else 1
    frac = _zero_padded(fraction, widest)
    if widest > 1:  # the zeros that end the decimals, but the first decimal
        zeros = np.logical_and.accumulate(frac[:, :0:-1] == 48, axis=1)[:, ::-1]
        frac[:, 1:][zeros] = 32
    out = np.concatenate([_blank_leading(_zero_padded(whole, left), ndigits),
                          np.full((n, 1), 46, np.uint8), frac], axis=1)  # "."
    if len(fallback):
        # float.__repr__ is json.dumps' spelling of a finite float (-0.0 included)
        texts = list(map(float.__repr__, values[fallback].tolist()))
        for i in np.flatnonzero(~np.isfinite(values[fallback])).tolist():
            texts[i] = json.dumps(float(texts[i]))  # NaN, Infinity, -Infinity
        table = _table_text(np.arange(len(texts)), texts)
        width = max(out.shape[1], table.shape[1])
        pad = np.full((n, width - out.shape[1]), 32, np.uint8)
        out = np.concatenate([pad, out], 1) if pad.shape[1] else out
        out[fallback] = 32
        out[fallback, width - table.shape[1]:] = table
    return out


def _table_text(index: Any, texts: Sequence[str]) -> Any:
    """``texts[index[i]]`` right-aligned in one width, as an (n, width) uint8 matrix."""
    import numpy as np

    width = max(map(len, texts))
    table = np.frombuffer("".join(t.rjust(width) for t in texts).encode(),
                          np.uint8).reshape(len(texts), width)
    return table[index]


def _value_text(values: list[Any]) -> Any:
    """Counter values as ``json.dumps`` spells them (floats as floats, ints as ints): by
    column for floats and ints, one by one for anything else (bools, numpy scalars)."""
    import numpy as np

    kinds = set(map(type, values))
    if kinds <= {float, int} and len(kinds) > 1:  # ints among floats: each kind by itself
        is_int = np.fromiter(map(int.__instancecheck__, values), bool, len(values))
        out = []
        for rows in (np.flatnonzero(~is_int), np.flatnonzero(is_int)):
            out.append((rows, _value_text(np.array(values, object)[rows].tolist())))
        width = max(t.shape[1] for _, t in out)
        column = np.full((len(values), width), 32, np.uint8)
        for rows, text in out:
            column[rows, width - text.shape[1]:] = text
        return column
    if kinds == {float}:
        array = np.array(values, np.float64)
        if not (np.signbit(array) & (array == 0)).any():  # unique would take -0.0 for 0.0
            # a queue's occupancy, a bandwidth: few distinct values, each spelt once
            distinct, index = np.unique(array, return_inverse=True)
            return _float_text(distinct)[index]
        return _float_text(array)
    if kinds == {int} and min(values) > -(2**62) and max(values) < 2**62:
        return _int_text(np.array(values, np.int64))
    texts = [json.dumps(v) for v in values]
    unique = list(dict.fromkeys(texts))
    where = {t: i for i, t in enumerate(unique)}
    return _table_text(np.array([where[t] for t in texts], np.int64), unique)


class _Numbering(dict):  # type: ignore[type-arg]
    """Name -> its number, numbered as first looked up (``map(numbering.__getitem__, ...)``
    stays in C but for new names)."""

    def __missing__(self, key: str) -> int:
        self[key] = len(self)
        return self[key]


def _names(items: Sequence[Any], get: Any) -> tuple[Any, list[str]]:
    """Index of each item's name (``get(item)``) in the list of distinct names, and those
    names as JSON text."""
    import numpy as np

    where = _Numbering()
    index = np.fromiter(map(where.__getitem__, map(get, items)), np.int64, len(items))
    return index, [json.dumps(name) for name in where]


def _program_columns(blocks: Sequence[tuple[SimStats, float]], lists: list[Sequence[Any]]
                     ) -> tuple[int, Any, Any, Any]:
    """For the items of ``lists`` (one list per block) taken together: their number, each
    block's first item (and the end), and per item its block's microseconds per cycle and
    time offset."""
    import numpy as np

    counts = np.array([len(x) for x in lists], np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    us = np.repeat(np.array([1.0 / stats.clock_mhz for stats, _ in blocks], np.float64), counts)
    offset = np.repeat(np.array([float(o) for _, o in blocks], np.float64), counts)
    return int(bounds[-1]), bounds, us, offset


def _pack_slices(timeline: Sequence[Slice]) -> tuple[Any, ...]:
    """Slices as arrays: module (its index in ``MODULES``), name (an index into the list of
    names that follows), instruction index, start, end."""
    import numpy as np

    tids = {name: tid for tid, name in enumerate(MODULES)}
    names, n = _Numbering(), len(timeline)
    return (np.fromiter(map(tids.__getitem__, map(attrgetter("module"), timeline)), np.int8, n),
            np.fromiter(map(names.__getitem__, map(attrgetter("name"), timeline)), np.int32, n),
            list(names), np.fromiter(map(attrgetter("index"), timeline), np.int64, n),
            np.fromiter(map(attrgetter("start"), timeline), np.int64, n),
            np.fromiter(map(attrgetter("end"), timeline), np.int64, n))


def _pack_counters(counters: Sequence[tuple[str, int, float]]) -> tuple[Any, ...] | None:
    """Counters as arrays: name (an index into the list of names that follows), cycle,
    value; None unless every counter is ``(str, int, float)``."""
    import numpy as np

    if not all(type(c) is int and type(v) is float for _, c, v in counters):
        return None
    names, n = _Numbering(), len(counters)
    return (np.fromiter(map(names.__getitem__, map(itemgetter(0), counters)), np.int32, n),
            list(names), np.fromiter(map(itemgetter(1), counters), np.int64, n),
            np.fromiter(map(itemgetter(2), counters), np.float64, n))


def _pack_trace(timeline: Sequence[Slice], counters: Sequence[tuple[str, int, float]]
                ) -> dict[str, Any] | None:
    """A trace's slices and counters as arrays (:meth:`SimStats.__getstate__`); None when
    there is none, or a counter is of other types (the lists are pickled as they are)."""
    if not (timeline or counters):
        return None
    packed = _pack_counters(counters)
    return None if packed is None else {"slices": _pack_slices(timeline), "counters": packed}


def _unpack_trace(packed: dict[str, Any]) -> tuple[list[Slice], list[tuple[str, int, float]]]:
    """The lists :func:`_pack_trace` packed."""
    tid, name, slice_names, index, start, end = packed["slices"]
    code, names, cycle, value = packed["counters"]
    timeline = list(map(Slice, map(MODULES.__getitem__, tid.tolist()),
                        index.tolist(), map(slice_names.__getitem__, name.tolist()),
                        start.tolist(), end.tolist()))
    counters = list(zip(map(names.__getitem__, code.tolist()), cycle.tolist(),
                        value.tolist(), strict=True))
    return timeline, counters


def _columns(stats: SimStats, part: str) -> tuple[Any, ...] | None:
    """``stats``' slices or counters (``part``) as :func:`_pack_trace` packs them: as they
    came pickled, or packed now from the lists."""
    packed = stats.__dict__.get("_packed")
    if packed is not None:
        return packed[part]
    return _pack_slices(stats.timeline) if part == "slices" else _pack_counters(stats.counters)


def _merged_names(columns: Sequence[tuple[Any, list[str]]]) -> tuple[Any, list[str]]:
    """Blocks' ``(name indices, names)`` as one: indices into one list of names, and those
    names as JSON text."""
    import numpy as np

    numbering = _Numbering()
    index = [np.array([numbering[t] for t in names], np.int64)[codes] if len(codes)
             else codes.astype(np.int64) for codes, names in columns]
    return np.concatenate(index), [json.dumps(t) for t in numbering]


def _slice_rows(blocks: Sequence[tuple[SimStats, float]]) -> tuple[Any, Any] | None:
    """Every block's slices as event rows, and each block's first row."""
    import numpy as np

    columns = [_columns(stats, "slices") for stats, _ in blocks]
    n, bounds, us, offset = _program_columns(blocks, [c[0] for c in columns])
    if not n:
        return None
    tid = np.concatenate([c[0] for c in columns]).astype(np.int64)
    index, start, end = (np.concatenate([c[k] for c in columns]) for k in (3, 4, 5))
    cycles = end - start
    name, texts = _merged_names([(c[1], c[2]) for c in columns])
    # start * us (+ 0.0 for a block without an offset) is the float the event dicts hold
    return _rows(n, [b'{"ph":"X","pid":1,"tid":', _int_text(tid), b',"name":',
                     _table_text(name, texts), b',"ts":', _float_text(start * us + offset),
                     b',"dur":', _float_text(cycles * us), b',"args":{"index":',
                     _int_text(index), b',"start_cycle":', _int_text(start), b',"cycles":',
                     _int_text(cycles), b"}}"]), bounds


def _counter_rows(blocks: Sequence[tuple[SimStats, float]]) -> tuple[Any, Any] | None:
    """Every block's counters as event rows, and each block's first row."""
    import numpy as np

    columns = [_columns(stats, "counters") for stats, _ in blocks]
    if any(c is None for c in columns):  # counters of other types: from the lists
        lists = [stats.counters for stats, _ in blocks]
        n, bounds, us, offset = _program_columns(blocks, lists)
        counters = list(chain.from_iterable(lists))
        name, texts = _names(counters, itemgetter(0))
        cycle = np.fromiter(map(itemgetter(1), counters), np.int64, n)
        values = list(map(itemgetter(2), counters))
    else:
        n, bounds, us, offset = _program_columns(blocks, [c[0] for c in columns])
        name, texts = _merged_names([(c[0], c[1]) for c in columns])
        cycle = np.concatenate([c[2] for c in columns])
        values = np.concatenate([c[3] for c in columns]).tolist()
    if not n:
        return None
    return _rows(n, [b'{"ph":"C","pid":1,"name":', _table_text(name, texts), b',"ts":',
                     _float_text(cycle * us + offset), b',"args":{"value":',
                     _value_text(values), b"}}"]), bounds
