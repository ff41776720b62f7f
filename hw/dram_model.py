"""A cycle-level DRAM model for the RTL's DRAM port, for Amaranth's simulator.

It follows :mod:`accel.machine.memory` (it places each granted transaction's beats with the
contract's :class:`~accel.machine.memory.DataBus`): a request accepted in cycle ``g`` gets its
``ceil(bytes / bytes_per_cycle)`` beats on the in-order data bus, a read's from ``g + latency``,
a write's from ``g + 1``; a write's response strobe (``wr_ack``) comes ``latency - 1`` cycles
after its last beat. The C++ harness of the Verilator engine (``hw/harness/main.cpp``)
implements the same model; the co-simulation tests run both against the timing simulator.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from accel.machine.config import HwConfig
from accel.machine.memory import DataBus, Transaction

__all__ = ["DramModel", "RtlDramError"]


class RtlDramError(RuntimeError):
    """The RTL made a DRAM access outside the image, or broke the port protocol."""


@dataclass
class _Txn:
    addr: int
    cycles: Transaction


class DramModel:
    """Byte image plus the channel's timing.

    Parameters
    ----------
    image
        The DRAM bytes (modified in place by writes).
    cfg
        The config: ``dram.latency``, ``dram.bytes_per_cycle`` and ``dram.max_outstanding``
        (a request beyond it is a protocol error: the arbiter must not make one).
    """

    def __init__(self, image: np.ndarray, cfg: HwConfig) -> None:
        self.image = image
        self.bpc = cfg.dram.bytes_per_cycle
        self.max_outstanding = cfg.dram.max_outstanding
        self.bus = DataBus(cfg)
        self.data: deque[_Txn] = deque()        # transactions whose beats are to come
        self.acks: deque[int] = deque()         # cycles of the write responses to come
        self.in_flight: list[int] = []          # ``done`` cycles of the transactions in flight
        self.bytes_read = 0
        self.bytes_written = 0
        self.transactions = 0
        self.read_transactions = 0
        self.write_transactions = 0
        self.beats = 0

    def beat_at(self, cycle: int) -> tuple[bool, int] | None:
        """``(write, j)``: the beat ``j`` of the transaction on the bus in ``cycle``, or None."""
        if not self.data:
            return None
        t = self.data[0].cycles
        j = cycle - t.first_beat
        return (t.write, j) if 0 <= j < t.beats else None

    def ack_at(self, cycle: int) -> bool:
        """A write's response strobe in ``cycle``."""
        return bool(self.acks) and self.acks[0] == cycle

    def _span(self, j: int) -> tuple[int, int]:
        t = self.data[0]
        lo = t.addr + j * self.bpc
        return lo, min(t.addr + t.cycles.nbytes, lo + self.bpc)

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
        """Retire what ends in ``cycle`` (call at the end of each cycle)."""
        if self.data and cycle >= self.data[0].cycles.end_beats - 1:
            self.data.popleft()
        while self.acks and self.acks[0] <= cycle:
            self.acks.popleft()

    def request(self, cycle: int, addr: int, nbytes: int, write: bool) -> None:
        """Accept a request in ``cycle``.

        Raises
        ------
        RtlDramError
            More transactions in flight than ``dram.max_outstanding``, a size of zero, or a
            range outside the image.
        """
        self.in_flight = [done for done in self.in_flight if done > cycle]
        if len(self.in_flight) >= self.max_outstanding:
            raise RtlDramError(f"cycle {cycle}: DRAM request with {len(self.in_flight)} "
                               f"transactions in flight (max_outstanding "
                               f"{self.max_outstanding})")
        if nbytes <= 0:
            raise RtlDramError(f"cycle {cycle}: DRAM request of {nbytes} bytes")
        if addr + nbytes > len(self.image):
            raise RtlDramError(
                f"cycle {cycle}: DRAM {'write' if write else 'read'} of {nbytes} bytes at "
                f"{addr} is beyond the {len(self.image)}-byte image"
            )
        t = self.bus.grant(cycle, nbytes, write)
        self.data.append(_Txn(addr, t))
        self.in_flight.append(t.done)
        if write:
            self.acks.append(t.done - 1)
            self.bytes_written += nbytes
            self.write_transactions += 1
        else:
            self.bytes_read += nbytes
            self.read_transactions += 1
        self.transactions += 1
        self.beats += t.beats
