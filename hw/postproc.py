"""The post-processing store's element stream: acc tiles read from the acc buffer's copy,
shifted, clipped and narrowed to out tiles, a few elements ahead of the beats that send them.

A STORE ACC (``store.postproc``) copies ``y_size * x_size`` acc tiles from ``sram_base``, each
element ``min(max(acc >> shift, clip_lo), clip_hi)`` narrowed to ``store.out_bits``
(``sim.functional.post_process``). The acc buffer's two ports are the compute module's, so the
store reads a copy of it (``hw.top``: written with every acc write). :class:`PostStream` reads it
``lanes`` elements a cycle (a beat's worth), in five register stages (the RAM's data twice, the
shift, the clip, the queue's slot), into a small queue of out tiles that the store engine takes
from as the beats go out. The RAM's clock-to-out, the shift and the clip's compares would not
fit one cycle at 100 MHz on the ECP5-45F; hence the stages: the RAM's data reaches the shift
from a fabric register, the shift keeps only what the clip needs (:func:`post_lane`), the
clip's compares (on the low bits and a "fits" test, not 32-bit carry chains) end in a register
of their own (with three stages they went on through the queue's slot multiplexers, 14-16 ns in
a non-timing-driven routing of default_postproc, now default), and a slot is picked from
registers and the store's ``take`` alone.
``costs.POSTPROC_SETUP_CYCLES`` (``STAGES``): the instruction asks for the channel only once the
first element can be in the queue.

The stream reads on past the instruction's last element (what it reads there is dropped when
the engine goes idle); it never waits for anything but room in its queue, which it has whenever
the beats keep up, so the queue never runs dry once the setup is over.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from accel.machine.costs import POSTPROC_SETUP_CYCLES
from hw.params import RtlParams
from hw.sram import BufferRead

__all__ = ["PostStream", "post_lane"]

STAGES = POSTPROC_SETUP_CYCLES
"""Register stages from a read of the acc copy to the element in the queue (the RAM's data twice,
the shift, the clip, the slot): the setup a STORE ACC waits before its first request."""


def post_lane(m: Module, word: object, shift: Signal, lo: Signal, hi: Signal, width: int,
              name: str) -> Signal:
    """One 32-bit word, shifted right by ``shift`` (arithmetic), clipped to ``[lo, hi]`` and
    narrowed to ``width`` bits, in two register stages (the second returned).

    The first stage keeps what the clip needs of ``word >> shift``, not the whole word: its
    low ``width`` bits (:func:`shift_low`), its sign and ``span``, where the highest of
    ``word``'s bits from ``width - 1`` up that differ from the sign lies (:func:`span_bits`).
    The shifted word fits ``width`` bits when its bits from ``width - 1`` up all equal its
    sign, that is when ``span <= shift``; a word that does not fit is above ``hi`` if positive
    and below ``lo`` if negative (``lo`` and ``hi`` are ``width``-bit numbers), and one that
    fits compares by its low bits. So no stage has a 32-bit shifter, register or compare; with
    them, the lanes were most of the stream's area (docs/notes/requantisation.md, "The lane's
    area")."""
    low1 = Signal(width, name=f"{name}_low")
    sign1 = Signal(name=f"{name}_sign")
    span = span_bits(word, width)
    span1 = Signal(span.shape(), name=f"{name}_span")
    m.d.sync += [low1.eq(shift_low(word, shift, width)), sign1.eq(word[31]), span1.eq(span)]
    fits = span1 <= shift
    low = low1.as_signed()
    above = Mux(fits, low > hi, ~sign1)
    below = Mux(fits, low < lo, sign1)
    out = Signal(width, name=f"{name}_out")
    m.d.sync += out.eq(Mux(above, hi, Mux(below, lo, low)))
    return out


def shift_low(word: object, shift: Signal, width: int) -> object:
    """The low ``width`` bits of ``word >> shift`` (32 bits, arithmetic, ``shift`` 5 bits): a
    logarithmic shifter whose stages run from the largest amount down, so that each keeps only
    the bits the later stages can still bring into the result (23, 15, 11, 9 and 8 for
    ``width`` 8: 66 two-way multiplexers where the whole word takes 160)."""
    bits = [word[i] for i in range(32)]
    sign = word[31]
    for k in reversed(range(len(shift))):
        amount = 1 << k
        keep = min(32, width + amount - 1)      # what the amounts 1 .. amount - 1 still reach
        bits = [Mux(shift[k], bits[i + amount] if i + amount < len(bits) else sign, bits[i])
                for i in range(keep)]
    return Cat(*bits[:width])


def span_bits(word: object, width: int) -> object:
    """Where the highest of ``word``'s bits ``width - 1`` .. 30 that differs from its sign
    lies: 0 when none does, else its position less ``width - 2`` (1 for bit ``width - 1``,
    ``32 - width`` for bit 30)."""
    top = 31 - (width - 1)                      # bits width-1 .. 30
    differ = Cat(*(word[width - 1 + j] ^ word[31] for j in range(top)))
    span = Const(0, range(top + 1))
    for j in range(top):                        # the highest set bit wins (last assignment)
        span = Mux(differ[j], j + 1, span)
    return span


class PostStream(wiring.Component):
    """Out tiles of a STORE ACC, ahead of the beats (module docstring).

    Parameters
    ----------
    params
        RTL parameters of the config (``store.postproc``).

    Ports
    -----
    idle : In
        The store engine runs no instruction (a register: ``hw.control.DepControl``'s
        ``busy``, inverted). While it is high the stream takes ``base``, ``shift``,
        ``clip_lo`` and ``clip_hi``, empties its queue and reads nothing; so in a decode cycle,
        an idle one, it takes the decoded instruction's fields, and it reads from ``base`` from
        the next cycle on. It does so for every STORE; only a STORE ACC's beats take from it.
    base, shift, clip_lo, clip_hi : In
        The instruction's fields.
    rd : Out(BufferRead)
        Reads of the acc buffer's copy, ``lanes`` elements at a time.
    data : Out
        The queue's first ``lanes`` out tiles, lane 0 first.
    take : In
        Out tiles the store engine takes this cycle (0 to ``lanes``).
    """

    def __init__(self, params: RtlParams) -> None:
        self._p = params
        acc, out = params.buffers["acc"], params.buffers["out"]
        self._lanes = out.lanes
        bits = params.cfg.store.out_bits
        super().__init__({
            "idle": In(1),
            "base": In(acc.addr_bits),
            "shift": In(5),
            "clip_lo": In(signed(bits)),
            "clip_hi": In(signed(bits)),
            "rd": Out(BufferRead(acc, lanes=self._lanes)),
            "data": Out(self._lanes * out.elem_bits),
            "take": In(range(self._lanes + 1)),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        lanes = self._lanes
        acc, out = p.buffers["acc"], p.buffers["out"]
        cfg = p.cfg
        words = cfg.batch * cfg.block_out               # int32 words of an acc tile
        bits = cfg.store.out_bits
        depth = (STAGES + 3) * lanes                    # queue slots: out tiles

        shift = Signal(5)
        lo, hi = Signal(signed(bits)), Signal(signed(bits))
        addr = Signal(acc.addr_bits)
        # The fields (and ``addr``, below) load in every idle cycle, not in the decode cycle
        # alone: nothing here waits for the decode (``start``, a function of the token queues),
        # which reached ``addr`` through ``issue`` at 10.79 ns (default_postproc, seed 3,
        # 32f767a).
        with m.If(self.idle):
            m.d.sync += [shift.eq(self.shift), lo.eq(self.clip_lo), hi.eq(self.clip_hi)]

        # Reads in flight (issued, not yet in the queue), one flag per stage.
        in_pipe = [Signal(name=f"post_valid{s}") for s in range(STAGES)]
        count = Signal(range(depth + 1))
        pending = Signal(range(STAGES + 1))
        m.d.comb += pending.eq(sum(in_pipe))
        issue = Signal()
        m.d.comb += issue.eq(~self.idle & (count + (pending + 1) * lanes <= depth))
        m.d.comb += self.rd.addr.eq(addr)
        with m.If(self.idle):
            m.d.sync += addr.eq(self.base)
        with m.Elif(issue):
            m.d.sync += addr.eq(addr + lanes)
        m.d.sync += in_pipe[0].eq(issue)
        for s in range(1, STAGES):
            m.d.sync += in_pipe[s].eq(in_pipe[s - 1] & ~self.idle)

        # The stages: the RAM's data registered twice, then each lane's shift and clip, each in
        # a register. The first register becomes the block RAM's own data latch (the copy is
        # transparent, ``hw.sram.SramBuffer``), whose clock-to-out (5.8 ns on ECP5) left no
        # room for the shift after it: 14.9 ns from the RAM to ``shifted`` at 0dd8d51
        # (default_postproc, seed 1).
        raw = Signal(lanes * acc.elem_bits)
        raw2 = Signal(lanes * acc.elem_bits)
        m.d.sync += [raw.eq(self.rd.data), raw2.eq(raw)]
        pushed = []
        for lane in range(lanes):
            element = raw2.word_select(lane, acc.elem_bits)
            parts = []
            for w in range(words):
                parts.append(post_lane(m, element.word_select(w, 32), shift, lo, hi, bits,
                                       f"post{lane}_{w}"))
            pushed.append(Cat(*parts))

        # The queue: slots of out tiles, the first ``count`` full; each cycle ``take`` leave the
        # front and the last stage's ``lanes`` join the back.
        # Lane ``lane`` of a push lands in slot ``count - take + lane``: the compares of
        # ``count`` (a register) are formed for every ``take`` and one is picked by ``take``,
        # which comes late (the arbiter's beat strobe), so that it passes no subtracter.
        slots = Array(Signal(out.elem_bits, name=f"post_slot{i}") for i in range(depth))
        push = in_pipe[STAGES - 1]
        remain = Signal(range(depth + 1))
        m.d.comb += remain.eq(count - self.take)
        for i in range(depth):
            nxt = Signal(out.elem_bits, name=f"post_next{i}")
            m.d.comb += nxt.eq(slots[i])
            for t in range(1, lanes + 1):
                if i + t < depth:
                    with m.If(self.take == t):
                        m.d.comb += nxt.eq(slots[i + t])
            for lane in range(lanes):
                lands = Array(count == i - lane + t if 0 <= i - lane + t <= depth else Const(0)
                              for t in range(lanes + 1))
                with m.If(push & lands[self.take]):
                    m.d.comb += nxt.eq(pushed[lane])
            m.d.sync += slots[i].eq(nxt)
        with m.If(self.idle):
            m.d.sync += count.eq(0)
        with m.Else():
            m.d.sync += count.eq(remain + Mux(push, lanes, 0))
        m.d.comb += self.data.eq(Cat(*(slots[i] for i in range(lanes))))
        return m
