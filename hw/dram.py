"""The DRAM port and the channel arbiter shared by fetch, load, compute and store.

A transaction is one request (byte address, byte count of at most ``dram.max_burst``, read or
write) followed by ``ceil(bytes / bytes_per_cycle)`` beats, one per ``rsp_valid`` strobe. Beat
``j`` carries bytes ``addr + j * bpc ...`` (the last one may be partial). A read beat's data is
on ``rsp_data``; a write beat takes ``wr_data`` in the cycle of the strobe. The DRAM model
decides when beats come (the timing simulator's channel: ``latency`` cycles after the request,
then one per cycle); the channel is free again in the cycle after the last beat.

Arbitration is the timing simulator's (``sim.timing.DramChannel``): the channel is granted once
per cycle, to the requester of highest fixed priority (fetch > load > compute > store) among
all those asking in that cycle, whenever it is free - including the cycle after the previous
holder's last beat, in which that holder may ask again.

Only store writes (fetch and the load engines of load and compute read), so the channel's
``wr_data`` is store's, not picked by the holder: the DRAM takes it only on a write's beats.
"""

from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.params import RtlParams

__all__ = ["REQUESTERS", "DramArbiter", "DramPort", "dram_port", "dram_request_layout"]

REQUESTERS = ("fetch", "load", "compute", "store")
"""Requesters in priority order (first wins)."""


def dram_request_layout(addr_bits: int, bytes_bits: int) -> data.StructLayout:
    """Payload of a DRAM request: byte address, byte count, write flag."""
    return data.StructLayout({
        "addr": addr_bits,
        "bytes": bytes_bits,
        "write": 1,
    })


class DramPort(wiring.Signature):
    """A DRAM channel port, seen from the side that issues requests.

    Members
    -------
    req : Out(stream)
        Requests (:func:`dram_request_layout`); ``valid & ready`` is the grant (``ready``
        may rise without ``valid``: the requester would be granted if it asked).
    rsp_valid : In
        Beat strobe of the current transaction.
    rsp_data : In
        Read data of the beat.
    wr_data : Out
        Write data of the beat, to be valid whenever a write beat may come.
    """

    def __init__(self, addr_bits: int, bytes_bits: int, beat_bits: int) -> None:
        self.addr_bits, self.bytes_bits, self.beat_bits = addr_bits, bytes_bits, beat_bits
        super().__init__({
            "req": Out(stream.Signature(dram_request_layout(addr_bits, bytes_bits))),
            "rsp_valid": In(1),
            "rsp_data": In(beat_bits),
            "wr_data": Out(beat_bits),
        })

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DramPort) and (
            (other.addr_bits, other.bytes_bits, other.beat_bits)
            == (self.addr_bits, self.bytes_bits, self.beat_bits)
        )

    def __hash__(self) -> int:
        return hash(("DramPort", self.addr_bits, self.bytes_bits, self.beat_bits))


def dram_port(params: RtlParams) -> DramPort:
    """The DRAM port of a config (address, burst size and beat widths)."""
    return DramPort(params.dram_addr_bits, params.burst_bytes_bits, params.beat_bits)


class DramArbiter(wiring.Component):
    """Grants the one DRAM channel to fetch, load, compute and store (module docstring).

    Parameters
    ----------
    addr_bits, bytes_bits, beat_bits
        Widths of the request address, byte count and beat data.

    Ports
    -----
    fetch, load, compute, store : In(DramPort)
        The requesters, in priority order.
    dram : Out(DramPort)
        The channel.
    """

    def __init__(self, addr_bits: int, bytes_bits: int, beat_bits: int) -> None:
        if beat_bits < 8 or beat_bits & (beat_bits - 1):
            raise ValueError(f"beat_bits must be a power of two >= 8, not {beat_bits}")
        port = DramPort(addr_bits, bytes_bits, beat_bits)
        self._beat_bytes = beat_bits // 8
        members: dict[str, object] = {name: In(port) for name in REQUESTERS}
        members["dram"] = Out(port)
        super().__init__(members)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        n = len(REQUESTERS)
        ports = [getattr(self, name) for name in REQUESTERS]
        busy = Signal()
        # The bytes the holder's beats have still to carry, not the beats: a grant takes the
        # requester's count as it is, with no adder behind the priority multiplexer (the
        # requests' valid flags, fetch's from the command queues' room, pick it: at 5c3a548
        # the worst path at seed 2 ran through that multiplexer and the beat count's carry
        # chain, 10.03 ns on the 45F).
        bytes_left = Signal(self.dram.req.payload.bytes.shape().width)

        sel = Signal(range(n))
        for i in reversed(range(n)):
            with m.If(ports[i].req.valid):
                m.d.comb += sel.eq(i)
        asking: object = Const(0, 1)
        for p in ports:
            asking = asking | p.req.valid
        payloads = Array(p.req.payload for p in ports)
        grant = Signal()
        m.d.comb += [
            self.dram.req.valid.eq(~busy & asking),
            self.dram.req.payload.eq(payloads[sel]),
            grant.eq(self.dram.req.valid & self.dram.req.ready),
        ]
        # ``holding[i]``: requester i holds the channel (one-hot, registered beside ``busy``),
        # so each beat strobe is one gate from flip-flops. A requester's ``ready`` says it is
        # granted if it asks: it does not wait for its own ``valid`` (the stream transfers on
        # both), only for those of higher priority: fetch's is one gate of two flip-flops.
        holding = Signal(n)
        higher: object = Const(0, 1)
        for i, p in enumerate(ports):
            m.d.comb += [
                p.req.ready.eq(~busy & self.dram.req.ready & ~higher),
                p.rsp_valid.eq(self.dram.rsp_valid & holding[i]),
                p.rsp_data.eq(self.dram.rsp_data),
            ]
            higher = higher | p.req.valid
        # The only writer's data, with no gate from the holder between the out buffer's read
        # and the channel.
        m.d.comb += self.dram.wr_data.eq(self.store.wr_data)

        with m.If(grant):
            nbytes = self.dram.req.payload.bytes
            m.d.sync += [
                busy.eq(1),
                holding.eq((Const(1, n) << sel)[:n]),
                bytes_left.eq(nbytes),
            ]
        with m.Elif(busy & self.dram.rsp_valid):
            m.d.sync += bytes_left.eq(bytes_left - self._beat_bytes)
            with m.If(bytes_left <= self._beat_bytes):
                m.d.sync += [busy.eq(0), holding.eq(0)]
        return m
