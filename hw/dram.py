"""The DRAM port and the channel arbiter shared by fetch, load, compute and store.

A transaction is one request (byte address, byte count of at most ``dram.max_burst``, read or
write) followed by ``ceil(bytes / bytes_per_cycle)`` beats, one per ``rsp_valid`` strobe. Beat
``j`` carries bytes ``addr + j * bpc ...`` (the last one may be partial). A read beat's data is
on ``rsp_data``; a write beat takes ``wr_data`` in the cycle of the strobe. The DRAM model
decides when beats come (the timing simulator's channel: ``latency`` cycles after the request,
then one per cycle); the channel is free again in the cycle after the last beat.

Arbitration follows the timing simulator (``sim.timing.DramChannel``, a SimPy priority
resource) cycle for cycle, including how SimPy orders requests made in the cycle the channel is
released: waiting requests win by fixed priority fetch > load > compute > store; in the release
cycle the previous holder's next request competes with the waiting ones only, otherwise new
requests from load, compute and store compete with them too, but only the first of them in
SimPy's event order (lowest ``rank``; on a tie, a module released by another's token goes
before that one, else priority); a new fetch request is served in its first cycle only if
nobody else asks.
"""

from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.control import RANK_BITS
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
        Requests (:func:`dram_request_layout`); ``ready`` is the grant.
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
        The requesters.
    load_rank, compute_rank, store_rank : In
        SimPy event level of the decode that led to a module's first request
        (``DepControl.rank``), registered by the module.
    load_after, compute_after, store_after : In
        Requesters whose token, pushed in that decode's cycle, the module popped.
    dram : Out(DramPort)
        The channel.
    """

    def __init__(self, addr_bits: int, bytes_bits: int, beat_bits: int) -> None:
        if beat_bits < 8 or beat_bits & (beat_bits - 1):
            raise ValueError(f"beat_bits must be a power of two >= 8, not {beat_bits}")
        port = DramPort(addr_bits, bytes_bits, beat_bits)
        self._beat_bytes = beat_bits // 8
        members: dict[str, object] = {name: In(port) for name in REQUESTERS}
        for name in REQUESTERS[1:]:
            members[f"{name}_rank"] = In(RANK_BITS)
            members[f"{name}_after"] = In(len(REQUESTERS))
        members["dram"] = Out(port)
        super().__init__(members)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        n = len(REQUESTERS)
        ports = [getattr(self, name) for name in REQUESTERS]
        shift = (self._beat_bytes - 1).bit_length()
        busy = Signal()
        release = Signal()
        holder = Signal(range(n))
        beats_left = Signal(self.dram.req.payload.bytes.shape().width + 1)
        waited = Signal(n)      # asked in the previous cycle and was not granted

        req = Signal(n)
        for i, p in enumerate(ports):
            m.d.comb += req[i].eq(p.req.valid)
        waiting = Signal(n)
        new = Signal(n)
        m.d.comb += [waiting.eq(req & waited), new.eq(req & ~waited)]
        fetch_bit = 1 << REQUESTERS.index("fetch")
        units = ((1 << n) - 1) & ~fetch_bit
        holder_bit = Signal(n)
        m.d.comb += holder_bit.eq(1 << holder)
        rerequest = Signal()
        m.d.comb += rerequest.eq(release & ((req & holder_bit) != 0))
        first = Signal(n)
        with m.If(rerequest):
            m.d.comb += first.eq(waiting | holder_bit)
        with m.Else():
            m.d.comb += first.eq(waiting | self._first_new(m, new & units))
        cands = Signal(n)
        m.d.comb += cands.eq(first)
        with m.If(first == 0):
            m.d.comb += cands.eq(new & fetch_bit)

        sel = Signal(range(n))
        for i in reversed(range(n)):
            with m.If(cands[i]):
                m.d.comb += sel.eq(i)
        payloads = Array(p.req.payload for p in ports)
        grant = Signal()
        m.d.comb += [
            self.dram.req.valid.eq(~busy & (cands != 0)),
            self.dram.req.payload.eq(payloads[sel]),
            grant.eq(self.dram.req.valid & self.dram.req.ready),
        ]
        for i, p in enumerate(ports):
            m.d.comb += [
                p.req.ready.eq(grant & (sel == i)),
                p.rsp_valid.eq(self.dram.rsp_valid & busy & (holder == i)),
                p.rsp_data.eq(self.dram.rsp_data),
            ]
        wr = Array(p.wr_data for p in ports)
        m.d.comb += self.dram.wr_data.eq(wr[holder])

        m.d.sync += release.eq(0)
        granted_now = Signal(n)
        for i in range(n):
            m.d.comb += granted_now[i].eq(grant & (sel == i))
        m.d.sync += waited.eq(req & ~granted_now)
        with m.If(grant):
            nbytes = self.dram.req.payload.bytes
            m.d.sync += [
                busy.eq(1),
                holder.eq(sel),
                beats_left.eq((nbytes + self._beat_bytes - 1) >> shift),
            ]
        with m.Elif(busy & self.dram.rsp_valid):
            m.d.sync += beats_left.eq(beats_left - 1)
            with m.If(beats_left == 1):
                m.d.sync += [busy.eq(0), release.eq(1)]
        return m

    def _first_new(self, m: Module, new: Signal) -> Signal:
        """One-hot: the new unit request SimPy makes first (see the module docstring)."""
        n = len(REQUESTERS)
        units = range(1, n)
        rank = {i: getattr(self, f"{REQUESTERS[i]}_rank") for i in units}
        after = {i: getattr(self, f"{REQUESTERS[i]}_after") for i in units}
        wins = {}
        for u in units:
            beats_all: object = new[u]
            for v in units:
                if v == u:
                    continue
                beats = Signal(name=f"{REQUESTERS[u]}_before_{REQUESTERS[v]}")
                tie_u_first = after[u][v] | (~after[v][u] & (u < v))
                m.d.comb += beats.eq((rank[u] < rank[v]) | ((rank[u] == rank[v]) & tie_u_first))
                beats_all = beats_all & (~new[v] | beats)
            wins[u] = Signal(name=f"{REQUESTERS[u]}_first")
            m.d.comb += wins[u].eq(beats_all)
        out = Signal(n, name="first_new")
        chosen: object = Const(0, 1)
        for u in units:
            with m.If(wins[u] & ~chosen):
                m.d.comb += out.eq(1 << u)
            chosen = chosen | wins[u]
        # A cyclic order cannot come from SimPy; fall back to priority if it ever did.
        with m.If(~chosen):
            for u in reversed(units):
                with m.If(new[u]):
                    m.d.comb += out.eq(1 << u)
        return out
