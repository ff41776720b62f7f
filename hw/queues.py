"""Command queues (instruction FIFOs) and dependency-token queues (counters).

Both hold one entry more than their configured depth ``D``. The timing simulator's bounded
queues let a producer's blocked ``put`` complete in the cycle the consumer takes an entry; in
registered hardware the producer's write lands at the end of its cycle, before it can know
whether the consumer takes an entry in the next one. So the producer always writes, and the
queue may briefly hold ``D + 1`` entries: the producer then counts its own put as pending and
waits while ``level > D``. ``room`` is the registered ``level <= D`` alone, so a producer goes
on in the cycle *after* the consumer's take (the simulator's ``TimingSimulator.put`` adds that
cycle too) and no combinational path runs from a consumer's handshake to its producer.
A consumer sees no difference: with ``D`` or ``D + 1`` entries present it can take one.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, ShapeLike, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["CommandQueue", "TokenQueue", "token_stream"]


def token_stream() -> stream.Signature:
    """A token stream: ``valid`` / ``ready`` only (a token carries no data)."""
    return stream.Signature(0)


def _next_level(level: Signal, up: object, down: object) -> object:
    """``level + up - down`` with both sums formed ahead of ``up`` and ``down``."""
    return Mux(up, level + 1, Mux(down, level - 1, level))


def _next_at_most(level: Signal, up: object, down: object, t: int) -> object:
    """``level + up - down <= t`` (``up``, ``down`` exclusive) as three compares of ``level``
    that do not wait for ``up`` and ``down``, which only pick one."""
    return Mux(up, level <= t - 1 if t >= 1 else 0, Mux(down, level <= t + 1, level <= t))


def _next_at_least(level: Signal, up: object, down: object, t: int) -> object:
    """``level + up - down >= t``, likewise."""
    return Mux(up, level >= t - 1 if t >= 2 else 1, Mux(down, level >= t + 1, level >= t))


def _check_depth(depth: object) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int):
        raise TypeError(f"depth must be an integer, not {depth!r}")
    if depth < 1:
        raise ValueError(f"depth must be a positive integer, not {depth}")
    return depth


class CommandQueue(wiring.Component):
    """An instruction FIFO of ``depth + 1`` entries, first-word fall-through: the head in a
    register, the others in a :class:`Memory`.

    An entry written at a clock edge is readable in the next cycle.

    Parameters
    ----------
    shape
        Shape of an entry (an instruction layout).
    depth
        Configured capacity ``D`` (``cfg.queues.cmd_depth``).
    pre_bits
        Width of the bits stored beside each entry (0: none): what the consumer would
        otherwise compute from the head in its own cycle (its ``predecode``), formed earlier by
        the writer (:class:`~hw.fetch.Fetch` forms it as the instruction arrives from DRAM)
        and read from flip-flops with the head.

    Ports
    -----
    w : In(stream)
        Entries from fetch.
    w_pre : In
        With ``pre_bits``: the bits stored with the entry written (with ``w``'s payload).
    r : Out(stream)
        Entries to the module; ``valid`` while non-empty.
    r_pre : Out
        With ``pre_bits``: the bits stored with the head entry.
    level : Out
        Entries held, ``0 .. depth + 1``.
    room : Out
        ``level <= depth``: a pending put is accepted now.
    room_next : Out
        ``room``'s value in the next cycle (the register's input), for a producer that forms
        a register of its own from it (:class:`~hw.fetch.Fetch`'s DRAM request).
    """

    def __init__(self, shape: ShapeLike, depth: int, pre_bits: int = 0) -> None:
        self._shape = shape
        self._depth = _check_depth(depth)
        if not isinstance(pre_bits, int) or pre_bits < 0:
            raise ValueError(f"pre_bits must be a non-negative integer, not {pre_bits!r}")
        self._pre_bits = pre_bits
        members = {
            "w": In(stream.Signature(shape)),
            "r": Out(stream.Signature(shape)),
            "level": Out(range(depth + 2)),
            "room": Out(1, init=1),
            "room_next": Out(1),
        }
        if pre_bits:
            members["w_pre"] = In(pre_bits)
            members["r_pre"] = Out(pre_bits)
        super().__init__(members)

    @property
    def shape(self) -> ShapeLike:
        return self._shape

    @property
    def depth(self) -> int:
        return self._depth

    def elaborate(self, platform: object) -> Module:
        m = Module()
        depth = self._depth
        slots = depth + 1
        # The head entry sits in a register (a memory's output is slow); the rest, at most
        # ``depth`` entries, in the memory.
        entry = data.StructLayout({"insn": self._shape, "pre": self._pre_bits})
        m.submodules.mem = mem = Memory(shape=entry, depth=depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=(wp,))
        head = Signal(entry)
        incoming = Signal(entry)
        m.d.comb += incoming.insn.eq(self.w.payload)
        if self._pre_bits:
            m.d.comb += [incoming.pre.eq(self.w_pre), self.r_pre.eq(head.pre)]
        head_valid = Signal()
        stored = Signal(range(slots + 1))
        wptr = Signal(range(depth))
        rptr = Signal(range(depth))
        w_fire = Signal()
        r_fire = Signal()
        not_full = Signal(init=1)
        to_mem = Signal()
        refill = Signal()

        def bump(ptr: Signal) -> object:
            return Mux(ptr == depth - 1, 0, ptr + 1)

        m.d.comb += [
            self.w.ready.eq(not_full),
            w_fire.eq(self.w.valid & self.w.ready),
            self.r.valid.eq(head_valid),
            self.r.payload.eq(head.insn),
            r_fire.eq(self.r.valid & self.r.ready),
            stored.eq(self.level - head_valid),
            refill.eq(r_fire & (stored != 0)),
            # A new entry goes to the memory unless the head is (or becomes) free of it.
            to_mem.eq(w_fire & head_valid & ~(r_fire & (stored == 0))),
            wp.addr.eq(wptr),
            wp.data.eq(incoming),
            # Every entry written is written to the memory too, at ``wptr``, which is free
            # whenever one is (the memory holds at most ``depth - 1`` entries behind the head
            # when a write is accepted); only ``wptr`` moves by whether it stays there. So the
            # block RAM's write enable does not wait for the consumer's take (at 5fe6f1e the
            # compute module's take into it was the 45F's worst path at seed 3, 10.9 ns).
            wp.en.eq(w_fire),
            # Read ahead: the port shows the entry behind the head of the next cycle. (One
            # read port: with two, for rptr and rptr + 1, Yosys cannot use a block RAM and
            # builds a deep queue from LUT RAM and multiplexers.)
            rp.addr.eq(Mux(refill, bump(rptr), rptr)),
            rp.en.eq(1),
        ]
        with m.If(refill):
            m.d.sync += [head.eq(rp.data), rptr.eq(bump(rptr))]
        with m.Elif(w_fire & ~to_mem):
            m.d.sync += [head.eq(incoming), head_valid.eq(1)]
        with m.Elif(r_fire):
            m.d.sync += head_valid.eq(0)
        with m.If(to_mem):
            m.d.sync += wptr.eq(bump(wptr))
        # The flags read by other modules are registered, formed from the next level.
        up, down = w_fire & ~r_fire, r_fire & ~w_fire
        m.d.comb += self.room_next.eq(_next_at_most(self.level, up, down, depth))
        m.d.sync += [
            self.level.eq(_next_level(self.level, up, down)),
            not_full.eq(_next_at_most(self.level, up, down, slots - 1)),
            self.room.eq(self.room_next),
        ]
        return m


class TokenQueue(wiring.Component):
    """A dependency-token queue: a counter of ``0 .. depth + 1`` tokens.

    A producer may push a token it has not logically put yet (the second push of an instruction
    whose first push is blocked): it raises ``hold``, a register of its own, in every cycle in
    which that newest token must stay invisible, and lowers it in the cycle the token becomes
    visible. ``pop.valid`` is then a function of registers alone, so that the producer's
    other queue (whose ``room`` ends the hold) reaches this queue's consumer through no logic
    of the producer's.

    Parameters
    ----------
    depth
        Configured capacity ``D`` (``cfg.queues.token_depth``).

    Ports
    -----
    push : In(token stream)
        From the producer; always accepted.
    pop : Out(token stream)
        To the consumer; ``valid`` while a visible token is present.
    hold : In
        The newest token is not visible in this cycle.
    level : Out
        Tokens held, including a held one.
    room : Out
        ``level <= depth``: a pending push is accepted now.
    room_next : Out
        ``room``'s value in the next cycle (the register's input), for a producer that forms
        a register from it (the other push's ``hold``).
    """

    def __init__(self, depth: int) -> None:
        self._depth = _check_depth(depth)
        super().__init__({
            "push": In(token_stream()),
            "pop": Out(token_stream()),
            "hold": In(1),
            "level": Out(range(depth + 2)),
            "room": Out(1, init=1),
            "room_next": Out(1),
        })

    @property
    def depth(self) -> int:
        return self._depth

    def elaborate(self, platform: object) -> Module:
        m = Module()
        pushed = Signal()
        popped = Signal()
        some = Signal()
        several = Signal()
        m.d.comb += [
            self.push.ready.eq(1),
            pushed.eq(self.push.valid),
            self.pop.valid.eq(Mux(self.hold, several, some)),
            popped.eq(self.pop.valid & self.pop.ready),
        ]
        # The flags are registered, formed from the next level.
        up, down = pushed & ~popped, popped & ~pushed
        m.d.comb += self.room_next.eq(_next_at_most(self.level, up, down, self._depth))
        m.d.sync += [
            self.level.eq(_next_level(self.level, up, down)),
            some.eq(_next_at_least(self.level, up, down, 1)),
            several.eq(_next_at_least(self.level, up, down, 2)),
            self.room.eq(self.room_next),
        ]
        return m
