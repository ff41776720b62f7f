"""A cycle-level DRAM model for the RTL's DRAM port, with the timing simulator's parameters.

One transaction at a time: a request accepted in cycle ``g`` is answered with
``ceil(bytes / bytes_per_cycle)`` beats in cycles ``g + latency ...`` (one per cycle), so the
channel is held ``latency + beats`` cycles, as ``accel.machine.costs.dram_cycles`` says. The C++
harness of the Verilator engine (``hw/harness/main.cpp``) implements the same model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DramModel", "RtlDramError"]


class RtlDramError(RuntimeError):
    """The RTL made a DRAM access outside the image, or broke the port protocol."""


@dataclass
class _Txn:
    start: int
    addr: int
    nbytes: int
    write: bool
    beats: int


class DramModel:
    """Byte image plus the channel's timing.

    Parameters
    ----------
    image
        The DRAM bytes (modified in place by writes).
    latency
        Cycles from a request to its first beat (``dram.latency``).
    bytes_per_cycle
        Bytes per beat (``dram.bytes_per_cycle``).
    """

    def __init__(self, image: np.ndarray, latency: int, bytes_per_cycle: int) -> None:
        self.image = image
        self.latency = latency
        self.bpc = bytes_per_cycle
        self.txn: _Txn | None = None
        self.bytes_read = 0
        self.bytes_written = 0
        self.transactions = 0

    def beat_at(self, cycle: int) -> int | None:
        """Index of the beat of the current transaction in ``cycle``, or None."""
        t = self.txn
        if t is None:
            return None
        j = cycle - t.start - self.latency
        return j if 0 <= j < t.beats else None

    def _span(self, j: int) -> tuple[int, int]:
        t = self.txn
        assert t is not None
        lo = t.addr + j * self.bpc
        hi = min(t.addr + t.nbytes, lo + self.bpc)
        return lo, hi

    def read_beat(self, j: int) -> int:
        """The data of read beat ``j`` as an integer (little-endian, zero beyond the burst)."""
        lo, hi = self._span(j)
        return int.from_bytes(self.image[lo:hi].tobytes(), "little")

    def write_beat(self, j: int, value: int) -> None:
        """Store write beat ``j`` (only the transaction's own bytes)."""
        lo, hi = self._span(j)
        self.image[lo:hi] = np.frombuffer(
            (value & ((1 << (8 * (hi - lo))) - 1)).to_bytes(hi - lo, "little"), dtype=np.uint8)

    def end_cycle(self, cycle: int) -> None:
        """Retire the transaction after its last beat (call at the end of each cycle)."""
        t = self.txn
        if t is not None and cycle >= t.start + self.latency + t.beats - 1:
            self.txn = None

    def request(self, cycle: int, addr: int, nbytes: int, write: bool) -> None:
        """Accept a request in ``cycle``.

        Raises
        ------
        RtlDramError
            A transaction is still running, the size is zero, or the range is outside the
            image.
        """
        if self.txn is not None:
            raise RtlDramError(f"cycle {cycle}: DRAM request while a transaction is running")
        if nbytes <= 0:
            raise RtlDramError(f"cycle {cycle}: DRAM request of {nbytes} bytes")
        if addr + nbytes > len(self.image):
            raise RtlDramError(
                f"cycle {cycle}: DRAM {'write' if write else 'read'} of {nbytes} bytes at "
                f"{addr} is beyond the {len(self.image)}-byte image"
            )
        beats = -(-nbytes // self.bpc)
        self.txn = _Txn(cycle, addr, nbytes, write, beats)
        self.transactions += 1
        if write:
            self.bytes_written += nbytes
        else:
            self.bytes_read += nbytes
