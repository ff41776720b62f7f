"""The results of a sweep: ``DIR/results.csv`` (one row per point, appended as each finishes),
``DIR/results.parquet`` (when pyarrow is installed) and the reader the plotting code uses.

Durability: the CSV is only ever appended to, one point's complete line(s) per ``os.write``
followed by ``os.fsync``, so a crash or a kill at any moment leaves every completed row intact;
at worst the last line is torn (no newline), and :meth:`ResultsFile.open` cuts it off before
appending again. The Parquet file is rewritten from the CSV through a temporary file and
``os.replace``, so it is either the previous or the new complete file.

Columns (the contract with :mod:`accel.plots`; see :func:`columns`):

- identity: ``point_id``, ``point_index``, ``sweep``, ``config_name``, ``axis.<key>`` per
  axis key, ``core``, ``workload``, ``layer``, ``backend``, ``status`` (ok | error), ``error``;
- config facts: ``peak_macs_per_cycle``, ``clock_mhz``, ``dram_bytes_per_cycle``,
  ``dram_latency``, ``buffers.inp``, ``buffers.wgt``, ``buffers.acc``, ``buffers.uop``;
- per metric group: ``cycles``: ``cycles``, ``milliseconds``, ``macs``, ``compile_seconds``;
  ``gemm_utilization``; ``dram_bytes``: ``dram_bytes``, ``bytes.inp|wgt|acc|uop|out``;
  ``stalls``: ``busy.<m>``, ``stall.<m>.dram|cmd_empty|queue_full|token|full`` for m in fetch,
  load, compute, store; ``area``: ``area.target``, ``area.luts|ffs|dsps|brams``;
  ``energy``: ``energy_uj``, ``pj_per_mac``, ``tops_per_w``, ``power_mw`` (at the config's
  clock) and ``energy.<component>`` in microjoules (``accel.machine.energy.COMPONENTS``), with
  the config's energy table; per MAC and TOPS/W over the layer's MACs (empty on fsim);
- trailer: ``wall_seconds``, ``finished_at`` (ISO 8601 UTC), ``worker``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from accel.machine.energy import COMPONENTS

__all__ = [
    "CONFIG_COLUMNS",
    "METRIC_COLUMNS",
    "STRING_COLUMNS",
    "ResultsError",
    "ResultsFile",
    "columns",
    "read_results",
    "repair_torn_tail",
    "stall_columns",
    "write_parquet",
]

MODULES = ("fetch", "load", "compute", "store")
STALL_KINDS = ("dram_contention", "dram_latency", "cmd_empty", "queue_full", "token", "full")

IDENTITY_HEAD = ("point_id", "point_index", "sweep", "config_name")
IDENTITY_TAIL = ("core", "workload", "layer", "backend", "status", "error")
CONFIG_COLUMNS = ("peak_macs_per_cycle", "clock_mhz", "dram_bytes_per_cycle", "dram_latency",
                  "dram_max_outstanding",
                  "buffers.inp", "buffers.wgt", "buffers.acc", "buffers.uop")
METRIC_COLUMNS: dict[str, tuple[str, ...]] = {
    "cycles": ("cycles", "milliseconds", "macs", "compile_seconds"),
    "gemm_utilization": ("gemm_utilization",),
    "dram_bytes": ("dram_bytes", "bytes.inp", "bytes.wgt", "bytes.acc", "bytes.uop",
                   "bytes.out", "dram_achieved_bytes_per_cycle", "dram_bandwidth_share"),
    "stalls": tuple(c for m in MODULES
                    for c in (f"busy.{m}", *(f"stall.{m}.{k}" for k in STALL_KINDS))),
    "area": ("area.target", "area.luts", "area.ffs", "area.dsps", "area.brams"),
    "energy": ("energy_uj", "pj_per_mac", "tops_per_w", "power_mw",
               *(f"energy.{c}" for c in COMPONENTS)),
}
TRAILER = ("wall_seconds", "finished_at", "worker")
STRING_COLUMNS = frozenset({"point_id", "sweep", "config_name", "core", "workload", "layer",
                            "backend", "status", "error", "area.target", "finished_at",
                            "worker"})
"""Columns kept as text by :func:`read_results` (everything else is parsed as a number)."""
_FLOAT_COLUMNS = frozenset({"clock_mhz", "milliseconds", "compile_seconds", "gemm_utilization",
                            "wall_seconds", *METRIC_COLUMNS["energy"]})

RESULTS_CSV = "results.csv"
RESULTS_PARQUET = "results.parquet"


class ResultsError(ValueError):
    """A results file cannot be used (another spec's columns, a damaged line); one line."""


def stall_columns(busy: Mapping[str, int], stalls: Mapping[str, Mapping[str, int]]
                  ) -> dict[str, int]:
    """The ``busy.<m>`` and ``stall.<m>.<kind>`` columns of every module, from its busy
    cycles and stall causes as the timing simulator names them (``dram_contention``,
    ``dram_latency``, ``cmd_empty``,
    ``queue_full``, ``token l2c``, ``full c2s``, ...: the token and full causes summed over
    their queues)."""
    out: dict[str, int] = {}
    for m in MODULES:
        if m not in busy:
            continue
        s = stalls.get(m, {})
        out[f"busy.{m}"] = int(busy[m])
        out[f"stall.{m}.dram_contention"] = s.get("dram_contention", 0)
        out[f"stall.{m}.dram_latency"] = s.get("dram_latency", 0)
        out[f"stall.{m}.cmd_empty"] = s.get("cmd_empty", 0)
        out[f"stall.{m}.queue_full"] = s.get("queue_full", 0)
        out[f"stall.{m}.token"] = sum(v for c, v in s.items() if c.startswith("token "))
        out[f"stall.{m}.full"] = sum(v for c, v in s.items() if c.startswith("full "))
    return out


def columns(axis_keys: Iterable[str], metrics: Iterable[str]) -> list[str]:
    """The header of a sweep's results: identity, axes, config facts, metric groups, trailer.

    Parameters
    ----------
    axis_keys
        Dotted config keys the axes set (a zipped group's members one by one).
    metrics
        Metric groups, in any order (columns follow :data:`METRIC_COLUMNS`' order).
    """
    wanted = set(metrics)
    out = [*IDENTITY_HEAD, *(f"axis.{k}" for k in axis_keys), *IDENTITY_TAIL, *CONFIG_COLUMNS]
    for group, cols in METRIC_COLUMNS.items():
        if group in wanted:
            out.extend(cols)
    out.extend(TRAILER)
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return " ".join(str(value).split()) if isinstance(value, str) else str(value)


def format_rows(rows: list[dict[str, Any]], header: list[str]) -> bytes:
    """CSV text of ``rows`` in ``header`` order, one line each (newlines in values flattened)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in rows:
        writer.writerow([_cell(row.get(col)) for col in header])
    return buf.getvalue().encode("utf-8")


def repair_torn_tail(path: Path) -> int:
    """Cut a torn last line (one without its newline) off ``path``; return the bytes removed."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with path.open("rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        # Find the last newline, reading backwards in blocks.
        pos = size
        keep = 0
        while pos > 0:
            start = max(0, pos - 65536)
            f.seek(start)
            block = f.read(pos - start)
            nl = block.rfind(b"\n")
            if nl >= 0:
                keep = start + nl + 1
                break
            pos = start
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return size - keep


def _read_lines(path: Path, tolerate_torn: bool = True) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a results CSV; a torn last line is ignored (not modified)."""
    data = path.read_bytes()
    if tolerate_torn and data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
    text = data.decode("utf-8")
    lines = list(csv.reader(io.StringIO(text)))
    if not lines:
        return [], []
    header, rows = lines[0], lines[1:]
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ResultsError(f"{path}:{i + 2}: expected {len(header)} fields, got {len(row)}; "
                               "fix or delete that line")
    return header, rows


class ResultsFile:
    """Append-only ``results.csv`` of one sweep, opened for resuming.

    Parameters
    ----------
    path
        The CSV file (created with ``header`` when missing).
    header
        The sweep's columns; an existing file must have exactly these.
    """

    def __init__(self, path: str | Path, header: list[str]) -> None:
        self.path = Path(path)
        self.header = list(header)
        self.done: set[str] = set()
        self.rows_written = 0
        self.repaired = 0
        self._fd: int | None = None

    def open(self) -> ResultsFile:
        """Repair a torn tail, read the point ids already present, open for appending.

        Raises
        ------
        ResultsError
            The file's header differs from this sweep's, or a line is damaged.
        """
        self.repaired = repair_torn_tail(self.path)
        new = not self.path.exists() or self.path.stat().st_size == 0
        if not new:
            header, rows = _read_lines(self.path, tolerate_torn=False)
            if header != self.header:
                raise ResultsError(f"{self.path}: its columns differ from this sweep's; "
                                   "write to a new --out folder")
            idx = header.index("point_id")
            self.done = {row[idx] for row in rows}
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if new:
            self._write(format_rows([{c: c for c in self.header}], self.header))
            _fsync_dir(self.path.parent)
        return self

    def _write(self, data: bytes) -> None:
        assert self._fd is not None, "ResultsFile.open() first"
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Append one point's rows in one write and make them durable (``fsync``)."""
        if not rows:
            return
        self._write(format_rows(rows, self.header))
        self.rows_written += len(rows)
        if "point_id" in rows[0]:
            self.done.add(str(rows[0]["point_id"]))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ResultsFile:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _parse(col: str, text: str) -> Any:
    if text == "":
        return None
    if col in STRING_COLUMNS:
        return text
    if col not in _FLOAT_COLUMNS:
        with contextlib.suppress(ValueError):
            return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def read_results(folder: str | Path) -> list[dict[str, Any]]:
    """The rows of a sweep's ``results.csv``, typed: numbers parsed, empty cells None.

    Text columns (:data:`STRING_COLUMNS`) stay strings; ``axis.*`` and metric columns become
    int or float. A torn last line (a sweep killed mid-write) is skipped, not modified.

    Parameters
    ----------
    folder
        The sweep's ``--out`` folder, or the CSV file itself.

    Raises
    ------
    ResultsError
        No results file, or a damaged line.
    """
    path = Path(folder)
    if path.is_dir():
        path = path / RESULTS_CSV
    if not path.is_file():
        raise ResultsError(f"{path}: no such results file")
    header, rows = _read_lines(path)
    return [{col: _parse(col, cell) for col, cell in zip(header, row, strict=True)} for row in rows]


def write_parquet(folder: str | Path) -> Path | None:
    """Rewrite ``DIR/results.parquet`` from ``DIR/results.csv`` atomically.

    Returns the path, or None when pyarrow is not installed or there is no CSV yet.
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    folder = Path(folder)
    csv_path = folder / RESULTS_CSV
    if not csv_path.is_file():
        return None
    header, _ = _read_lines(csv_path)
    rows = read_results(folder)
    arrays = []
    for col in header:
        values = [r[col] for r in rows]
        present = [v for v in values if v is not None]
        if col in STRING_COLUMNS or any(isinstance(v, str) for v in present):
            arr = pa.array([None if v is None else str(v) for v in values], type=pa.string())
        elif present and all(isinstance(v, int) for v in present) and col not in _FLOAT_COLUMNS:
            arr = pa.array(values, type=pa.int64())
        else:
            arr = pa.array([None if v is None else float(v) for v in values],
                           type=pa.float64())
        arrays.append(arr)
    table = pa.Table.from_arrays(arrays, names=header)
    out = folder / RESULTS_PARQUET
    tmp = folder / (RESULTS_PARQUET + ".tmp")
    pq.write_table(table, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, out)
    return out
