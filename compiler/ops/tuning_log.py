"""The tuning log: one JSON line per measured knob setting, appended safely.

Each line is a record::

    {"config": "1x8x8_i8w8a32_u8k_i32k_w64k_a64k", "op": "conv2d_n1_c64_h56_...",
     "knobs": {"tile_b": 1, "tile_h": 8, ...}, "cycles": 2073325,
     "timestamp": "2025-01-01T12:00:00+00:00", "tuner": "xgb"}

``config`` is the config's canonical name and ``op`` the operator signature, so a record is
only ever used for the same hardware and the same layer. Appends open the file in append
mode, write one whole line, flush and ``fsync``; a line torn by a crash is skipped on reading
(and an append after one starts on a fresh line, so the torn part never swallows a record).
Lines that are not records are counted in :attr:`TuningLog.skipped`, never silently used.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["TuningLog", "TuningLogError", "TuningRecord", "as_log", "now"]


class TuningLogError(ValueError):
    """A tuning log that cannot be read or written; the message names the file."""


@dataclass(frozen=True)
class TuningRecord:
    """One measured knob setting."""

    config: str
    op: str
    knobs: dict[str, int]
    cycles: int
    timestamp: str = ""
    tuner: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=False, separators=(", ", ": "))

    @staticmethod
    def from_json(line: str) -> TuningRecord | None:
        """The record of one line, or None when the line is not a well-formed record."""
        try:
            d = json.loads(line)
        except ValueError:
            return None
        if not isinstance(d, dict):
            return None
        knobs = d.get("knobs")
        cycles = d.get("cycles")
        if not (isinstance(d.get("config"), str) and isinstance(d.get("op"), str)
                and isinstance(knobs, dict) and isinstance(cycles, int) and cycles > 0
                and all(isinstance(k, str) and isinstance(v, int) for k, v in knobs.items())):
            return None
        return TuningRecord(d["config"], d["op"], dict(knobs), cycles,
                            str(d.get("timestamp", "")), str(d.get("tuner", "")))


def now() -> str:
    """The current UTC time as an ISO 8601 string (seconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class TuningLog:
    """A JSON-lines tuning log file.

    Reading is lazy and cached; the cache is refreshed when the file changes (size or
    modification time), so one ``TuningLog`` can serve a whole network's compilation.

    Parameters
    ----------
    path
        The log file (need not exist until the first append).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._records: list[TuningRecord] = []
        self._skipped = 0
        self._best: dict[tuple[str, str], TuningRecord] = {}

    def __repr__(self) -> str:
        return f"TuningLog({str(self.path)!r})"

    # ------------------------------------------------------------------ writing
    def append(self, record: TuningRecord) -> None:
        """Append one record: one write of one line, flushed and fsync'ed.

        Raises
        ------
        TuningLogError
            The file cannot be opened or written.
        """
        line = record.to_json() + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a+b") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() > 0:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        line = "\n" + line  # a torn line before: keep it on its own line
                f.write(line.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise TuningLogError(f"{self.path}: cannot append: {exc.strerror or exc}") from None

    def add(self, config: str, op: str, knobs: dict[str, int], cycles: int,
            tuner: str = "") -> TuningRecord:
        """Build a record stamped now and append it; returns it."""
        record = TuningRecord(config, op, dict(knobs), int(cycles), now(), tuner)
        self.append(record)
        return record

    # ------------------------------------------------------------------ reading
    def _load(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._records, self._skipped, self._best = None, [], 0, {}
            return
        except OSError as exc:
            raise TuningLogError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        stamp = (st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise TuningLogError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        records, skipped = [], 0
        for line in text.splitlines():
            if not line.strip():
                continue
            rec = TuningRecord.from_json(line)
            if rec is None:
                skipped += 1
            else:
                records.append(rec)
        best: dict[tuple[str, str], TuningRecord] = {}
        for rec in records:
            key = (rec.config, rec.op)
            if key not in best or rec.cycles < best[key].cycles:
                best[key] = rec
        self._stamp, self._records, self._skipped, self._best = stamp, records, skipped, best

    def records(self) -> list[TuningRecord]:
        """Every well-formed record, in file order."""
        self._load()
        return list(self._records)

    @property
    def skipped(self) -> int:
        """Lines of the file that are not records (torn by a crash, or foreign)."""
        self._load()
        return self._skipped

    def best(self, config: str, op: str) -> TuningRecord | None:
        """The record with the fewest cycles for config name ``config`` and operator signature
        ``op`` (the earliest of equals), or None."""
        self._load()
        return self._best.get((config, op))

    def best_by_op(self, config: str) -> dict[str, TuningRecord]:
        """The best record of every operator logged for config name ``config``."""
        self._load()
        return {op: rec for (c, op), rec in self._best.items() if c == config}

    def __len__(self) -> int:
        return len(self.records())


def as_log(log: TuningLog | str | os.PathLike[str] | Any) -> TuningLog:
    """``log`` itself, or a :class:`TuningLog` of the path it is."""
    return log if isinstance(log, TuningLog) else TuningLog(log)
