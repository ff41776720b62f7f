"""The DRAM port and the channel arbiter shared by fetch, load, compute and store.

The channel's rules are :mod:`accel.machine.memory`'s. A transaction is one request (byte
address, byte count of at most ``dram.max_burst``, read or write) and
``ceil(bytes / bytes_per_cycle)`` beats on the one data bus, one per ``rsp_valid`` strobe, the
transactions' beats in the order they were granted. Beat ``j`` carries bytes
``addr + j * bpc ...`` (the last one may be partial). A read beat's data is on ``rsp_data``; a
write beat takes ``wr_data`` in the cycle of the strobe, and the write's response comes later
on ``wr_ack``. The DRAM model decides when beats and responses come (``hw.dram_model``, the
Verilator harness).

The arbiter keeps up to ``dram.max_outstanding`` transactions in flight (a read until its last
beat, a write until its response). In a cycle with a free slot it grants one of the requests
presented in that cycle: the first in :data:`REQUESTERS` order (``priority``) or the first
after the one granted last (``round_robin``); a slot freed in a cycle is free for a grant in the
next. The owners of the transactions in flight wait in a queue in grant order: the one in front
owns the bus's beats, and each beat strobe is routed to it alone.

Only store writes (fetch and the load engines of load and compute read), so the channel's
``wr_data`` is store's, not picked by the owner, and every ``wr_ack`` is store's.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from accel.machine.config import DRAM_ARBITERS
from accel.machine.memory import REQUESTERS
from hw.params import RtlParams

__all__ = ["REQUESTERS", "DramArbiter", "DramPort", "dram_port", "dram_request_layout"]


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
        Beat strobe of the requester's transaction in front on the data bus.
    rsp_data : In
        Read data of the beat.
    wr_data : Out
        Write data of the beat, to be valid whenever a write beat may come.
    wr_ack : In
        A write's response: the oldest of the requester's writes in flight is done.
    """

    def __init__(self, addr_bits: int, bytes_bits: int, beat_bits: int) -> None:
        self.addr_bits, self.bytes_bits, self.beat_bits = addr_bits, bytes_bits, beat_bits
        super().__init__({
            "req": Out(stream.Signature(dram_request_layout(addr_bits, bytes_bits))),
            "rsp_valid": In(1),
            "rsp_data": In(beat_bits),
            "wr_data": Out(beat_bits),
            "wr_ack": In(1),
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
    max_outstanding
        Transactions in flight at most (``dram.max_outstanding``).
    arbiter
        ``"priority"`` or ``"round_robin"`` (``dram.arbiter``).

    Ports
    -----
    fetch, load, compute, store : In(DramPort)
        The requesters, in priority order.
    dram : Out(DramPort)
        The channel.
    """

    def __init__(self, addr_bits: int, bytes_bits: int, beat_bits: int,
                 max_outstanding: int = 1, arbiter: str = "priority") -> None:
        if beat_bits < 8 or beat_bits & (beat_bits - 1):
            raise ValueError(f"beat_bits must be a power of two >= 8, not {beat_bits}")
        if not isinstance(max_outstanding, int) or max_outstanding < 1:
            raise ValueError(f"max_outstanding must be a positive integer, not {max_outstanding!r}")
        if arbiter not in DRAM_ARBITERS:
            raise ValueError(f"arbiter must be one of {', '.join(DRAM_ARBITERS)}, not {arbiter!r}")
        port = DramPort(addr_bits, bytes_bits, beat_bits)
        self._beat_bytes = beat_bits // 8
        self._max_outstanding = max_outstanding
        self._round_robin = arbiter == "round_robin"
        members: dict[str, object] = {name: In(port) for name in REQUESTERS}
        members["dram"] = Out(port)
        super().__init__(members)

    def _grant(self, m: Module, ports: list, full: Signal) -> tuple[Signal, Signal]:
        """The grant of this cycle: ``(sel, grant)``, the index granted and whether one is.

        A requester's ``ready`` says it is granted if it asks: it does not wait for its own
        ``valid`` (the stream transfers on both), only for those that come before it, in fixed
        order or after the last granted (``last``, one-hot, a register): fetch's, under fixed
        priority, is one gate of two flip-flops.
        """
        n = len(REQUESTERS)
        sel = Signal(range(n))
        grant = Signal()
        valid = [p.req.valid for p in ports]
        if self._round_robin:
            last = Signal(n, init=1 << (n - 1))     # as if store was granted last: fetch first
            for i, p in enumerate(ports):
                # ``i`` waits for ``j`` when ``j`` lies between the last granted and ``i``.
                before = Const(0, 1)
                for k in range(n):
                    between = [(k + 1 + d) % n for d in range(n)]
                    ahead = between[:between.index(i)]
                    waits = Const(0, 1)
                    for j in ahead:
                        waits = waits | valid[j]
                    before = before | (last[k] & waits)
                m.d.comb += p.req.ready.eq(~full & self.dram.req.ready & ~before)
            with m.If(grant):
                m.d.sync += last.eq(Cat(*(p.req.valid & p.req.ready for p in ports)))
        else:
            higher = Const(0, 1)
            for p in ports:
                m.d.comb += p.req.ready.eq(~full & self.dram.req.ready & ~higher)
                higher = higher | p.req.valid
        for i, p in enumerate(ports):
            with m.If(p.req.valid & p.req.ready):
                m.d.comb += sel.eq(i)
        asking = Const(0, 1)
        for v in valid:
            asking = asking | v
        payloads = Array(p.req.payload for p in ports)
        m.d.comb += [
            self.dram.req.valid.eq(~full & asking),
            self.dram.req.payload.eq(payloads[sel]),
            grant.eq(self.dram.req.valid & self.dram.req.ready),
        ]
        return sel, grant

    def elaborate(self, platform: object) -> Module:
        m = Module()
        n = len(REQUESTERS)
        depth = self._max_outstanding
        beat = self._beat_bytes
        ports = [getattr(self, name) for name in REQUESTERS]
        bytes_width = self.dram.req.payload.bytes.shape().width

        in_flight = Signal(range(depth + 1))
        full = Signal()                 # ``in_flight == depth``, a register of its own
        sel, grant = self._grant(m, ports, full)

        # The transaction in front on the data bus, in registers (owner one-hot, so each beat
        # strobe is one gate from flip-flops), and the rest in grant order behind it. The bytes
        # its beats have still to carry, not the beats: a grant takes the requester's count as
        # it is, with no adder behind the priority multiplexer (at 5c3a548 the worst path at
        # seed 2 ran through that multiplexer and the beat count's carry chain, 10.03 ns on the
        # 45F).
        front = Signal(n)               # owner, one-hot; 0: nothing in flight on the bus
        front_left = Signal(bytes_width)
        front_last = Signal()           # ``front_left <= beat``: the next beat is its last
        front_write = Signal()
        owner_bits = max(1, (n - 1).bit_length())
        # ``short``: the transaction is one beat, compared at each requester ahead of the grant's
        # multiplexer, so the front's ``front_last`` takes one multiplexed bit, not a
        # comparator behind the round-robin pick (at ec57295 ``front_last`` was the third
        # latest register at seed 1 on the 45F, 10.23 ns).
        entry = data.StructLayout({"owner": owner_bits, "bytes": bytes_width, "write": 1,
                                   "short": 1})
        # The owners behind the front: the newest granted one in ``stage`` (a register written
        # from the grant's multiplexer), the older ones in ``behind*`` (written from ``stage``
        # in the next cycle, not from the grant: at 0dd8d51 the grant's path into ``behind*``
        # was the latest at seeds 5-7 on the 45F, docs/notes/memory-system.md).
        queue = Array(Signal(entry, name=f"behind{i}") for i in range(max(1, depth - 1)))
        q_rd = Signal(range(max(1, depth - 1)))
        q_wr = Signal(range(max(1, depth - 1)))
        q_count = Signal(range(depth))  # entries in ``behind*``
        stage = Signal(entry)
        staged = Signal()

        for i, p in enumerate(ports):
            m.d.comb += [
                p.rsp_valid.eq(self.dram.rsp_valid & front[i]),
                p.rsp_data.eq(self.dram.rsp_data),
                p.wr_ack.eq(self.dram.wr_ack if REQUESTERS[i] == "store" else 0),
            ]
        # The only writer's data, with no gate from the owner between the out buffer's read
        # and the channel.
        m.d.comb += self.dram.wr_data.eq(self.store.wr_data)

        last_beat = Signal()            # the front transaction's last beat, this cycle
        m.d.comb += last_beat.eq(self.dram.rsp_valid & front_last)
        empty_front = Signal()          # the front register is free at the end of this cycle
        m.d.comb += empty_front.eq((front == 0) | last_beat)
        granted = Signal(entry)
        m.d.comb += [granted.owner.eq(sel), granted.bytes.eq(self.dram.req.payload.bytes),
                     granted.write.eq(self.dram.req.payload.write)]
        shorts = Array(Signal(name=f"short_{name}") for name in REQUESTERS)
        for i, p in enumerate(ports):
            m.d.comb += shorts[i].eq(p.req.payload.bytes <= beat)
        m.d.comb += granted.short.eq(shorts[sel])

        def load_front(e: object) -> list:
            return [front.eq((Const(1, n) << e.owner)[:n]), front_left.eq(e.bytes),
                    front_last.eq(e.short), front_write.eq(e.write)]

        with m.If(empty_front):
            with m.If(q_count != 0):
                m.d.sync += load_front(queue[q_rd])
                m.d.sync += q_rd.eq(Mux(q_rd == len(queue) - 1, 0, q_rd + 1))
            with m.Elif(staged):
                m.d.sync += load_front(stage)
            with m.Elif(grant):
                m.d.sync += load_front(granted)
            with m.Else():
                m.d.sync += front.eq(0)
        with m.Elif(self.dram.rsp_valid):
            m.d.sync += [front_left.eq(front_left - beat),
                         front_last.eq(front_left <= 2 * beat)]
        # Grant order: ``behind*`` (oldest first), then ``stage``, then this cycle's grant.
        nothing_behind = Signal()       # ``behind*`` empty
        m.d.comb += nothing_behind.eq(q_count == 0)
        to_stage = Signal()
        m.d.comb += to_stage.eq(grant & ~(empty_front & nothing_behind & ~staged))
        m.d.sync += staged.eq(to_stage)
        with m.If(to_stage):
            m.d.sync += stage.eq(granted)
        to_queue = Signal()             # ``stage`` moves behind, unless it goes to the front
        m.d.comb += to_queue.eq(staged & ~(empty_front & nothing_behind))
        with m.If(to_queue):
            m.d.sync += [queue[q_wr].eq(stage),
                         q_wr.eq(Mux(q_wr == len(queue) - 1, 0, q_wr + 1))]
        popped = Signal()
        m.d.comb += popped.eq(empty_front & ~nothing_behind)
        m.d.sync += q_count.eq(q_count + to_queue - popped)

        # A slot frees at a read's last beat and at a write's response.
        done_read = Signal()
        m.d.comb += done_read.eq(last_beat & ~front_write)
        after = Signal.like(in_flight)
        m.d.comb += after.eq(in_flight + grant - done_read - self.dram.wr_ack)
        m.d.sync += [in_flight.eq(after), full.eq(after == depth)]
        return m
