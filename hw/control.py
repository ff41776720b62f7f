"""Instruction issue and dependency tokens of one module (load, compute or store).

The cycle behaviour is the timing simulator's (``sim.timing._Unit.run``):

1. when the previous instruction's pushes are done, take the next instruction from the
   command queue (as soon as there is one);
2. pop its tokens in order (``pop_prev`` then ``pop_next``), each as soon as it is there;
3. the cycle in which the last pop succeeds is the instruction's decode cycle (``start``); the
   execution engine runs from there and flags its ``last`` cycle (an instruction that ends in
   its decode cycle is flagged ``single`` by the module instead, from the instruction alone);
4. the pushes are written at the end of the last cycle, so the consumer sees the token in the
   next cycle, exactly when the simulator's ``put`` happens. A push into a queue that already
   holds ``D`` tokens stays *pending* (see :mod:`hw.queues`): the module waits until the
   queue's registered level is back to ``D`` - the cycle after the consumer's pop, as in the
   simulator (``sim.timing.TimingSimulator.put``) - and takes its next instruction then.

Of two pushes (compute's ``push_prev`` and ``push_next``) the second is only logically made once
the first is accepted: its token is ``hold`` (invisible) until then. ``hold`` is a register,
formed from the first queue's ``room_next`` (its ``room`` in the next cycle), so that the second
queue's consumer does not wait on the first queue through this module's logic in the same
cycle.

No combinational path runs from one module's handshakes to another's: a module sees the other
modules only through registered queue levels and valid flags.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from amaranth.hdl import Module, Mux, ShapeLike, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Member, Out

from hw.params import RtlParams
from hw.queues import token_stream

__all__ = ["CommandUnit", "DepControl"]


def _kept(name: str) -> Signal:
    """A 1-bit wire that synthesis keeps (Yosys ``keep``): the logic behind it is mapped as
    its own cone, not merged into the logic that reads it."""
    return Signal(name=name, attrs={"keep": 1})

class CommandUnit(wiring.Component):
    """A module that runs the instructions of one command queue (load, compute or store): the
    ports :class:`hw.top.Top` wires alike for each, around the module's own.

    Subclasses set ``predecode``: what the command queue stores beside each instruction
    (``cmd_pre``), a function of an instruction (a view of ``params.insn_layout``).

    Parameters
    ----------
    params
        RTL parameters of the config.
    pre
        The shape of ``cmd_pre`` (``predecode``'s value).
    ports
        The module's own ports, between ``cmd_pre`` and ``issue`` (in this order in the
        Verilog).

    Ports
    -----
    cmd : In(stream)
        The module's command queue.
    cmd_pre : In(pre)
        ``predecode`` of the queue's head.
    issue, retire : Out
        Decode cycle / last cycle of an instruction (for tracing).
    """

    predecode: Callable[[object], object]

    def __init__(self, params: RtlParams, pre: ShapeLike, ports: Mapping[str, Member]) -> None:
        self._p = params
        super().__init__({
            "cmd": In(stream.Signature(params.insn_layout)),
            "cmd_pre": In(pre),
            **ports,
            "issue": Out(1),
            "retire": Out(1),
        })


_POPS = ("pop_prev", "pop_next")
_PUSHES = ("push_prev", "push_next")


class DepControl(wiring.Component):
    """Takes instructions, pops and pushes tokens, and frames each instruction's execution.

    Parameters
    ----------
    insn_layout
        Layout of a command-queue entry (``RtlParams.insn_layout``).
    pops, pushes
        The dependency flags this module honours (others are ignored), e.g.
        ``("pop_next",)`` and ``("push_next",)`` for load.
    token_depth
        Token queue capacity ``D``.
    pre_bits
        Width of the predecoded bits the command queue stores beside each instruction
        (:class:`~hw.queues.CommandQueue`'s ``pre_bits``), 0 for none.
    start_when
        With ``pre_bits``: named functions of an instruction's predecoded bits (each a 1-bit
        value); ``start_<name>`` is then ``start`` of an instruction for which that one holds,
        formed as early in the cycle as ``start`` itself.
    single_pre
        With ``pre_bits``: the predecoded bit 0 says that an instruction ends in its decode
        cycle (the load and store modules' zero-size LOAD or STORE). There is then no
        ``single`` port, and a push in the decode cycle is formed, as ``start`` is, from the
        queue's head and the held instruction separately (a sum of kept products), not
        through ``start``: a token queue's level is then two LUT levels from this module's
        registers and the popped queue's flags.

    Ports
    -----
    cmd : In(stream)
        The command queue.
    insn : Out
        The instruction that starts when ``start`` is high (valid in that cycle only).
    start : Out
        This is the decode cycle of ``insn``.
    cmd_pre : In
        With ``pre_bits``: the predecoded bits of the queue's head.
    insn_pre : Out
        With ``pre_bits``: those of ``insn`` (held ones are registered with it).
    start_<name> : Out
        One per ``start_when`` entry: ``start & start_when[name](insn_pre)``.
    seen : Out
        ``insn`` is the instruction that was in front in the previous cycle (held, or at the
        queue's head) and did not start then; so a reader can look at the instruction a cycle
        before its decode (the compute module prefetches its first micro-op).
    single : In
        From the module: ``insn`` takes one cycle (if it starts now, this is also its last);
        a function of ``insn`` only, so a push in the decode cycle waits on ``start`` through
        one gate. Absent with ``single_pre``, where it is the predecoded bit 0 instead.
    last : In
        From the engine: the last cycle of an instruction that started in an earlier cycle.
    retire : Out
        The last cycle of an instruction (``start & single``, or ``last``).
    held : Out
        ``insn`` is an instruction taken in an earlier cycle and held (a register), not the
        queue's head.
    busy : Out
        An instruction runs past its decode cycle (a register: from the cycle after its
        ``start`` to its ``last``); low in every decode cycle. An engine may load the
        registers it decodes an instruction into in every cycle this is low (see
        :class:`hw.dma.LoadEngine`), which keeps them off ``start``'s fan-out.
    <pop> : In(token stream)
        One per honoured pop flag.
    <push> : Out(token stream)
        One per honoured push flag.
    <push>_room : In
        That queue's registered ``room`` (``TokenQueue.room``: at most ``D`` tokens).
    push_prev_room_next : In
        With two pushes: the first push's queue's ``room_next`` (``TokenQueue.room_next``).
    hold : Out
        With two pushes: the second push's token is invisible in this cycle (a register).
    """

    def __init__(self, insn_layout: data.Layout, pops: tuple[str, ...],
                 pushes: tuple[str, ...], token_depth: int, pre_bits: int = 0,
                 start_when: Mapping[str, Callable[[Value], Value]] | None = None,
                 single_pre: bool = False) -> None:
        for name in pops:
            if name not in _POPS:
                raise ValueError(f"pops must be a subset of {_POPS}, not {pops!r}")
        for name in pushes:
            if name not in _PUSHES:
                raise ValueError(f"pushes must be a subset of {_PUSHES}, not {pushes!r}")
        self._layout = insn_layout
        self._pops = tuple(p for p in _POPS if p in pops)
        self._pushes = tuple(p for p in _PUSHES if p in pushes)
        self._depth = token_depth
        self._pre_bits = pre_bits
        start_when = dict(start_when or {})
        if start_when and not pre_bits:
            raise ValueError("start_when needs predecoded bits (pre_bits > 0)")
        for name in start_when:
            if not name.isidentifier():
                raise ValueError(f"start_when names must be identifiers, not {name!r}")
        self._start_when = start_when
        if single_pre and not pre_bits:
            raise ValueError("single_pre needs predecoded bits (pre_bits > 0)")
        self._single_pre = single_pre
        members: dict[str, object] = {
            "cmd": In(stream.Signature(insn_layout)),
            "insn": Out(insn_layout),
            "start": Out(1),
            "seen": Out(1),
            "last": In(1),
            "retire": Out(1),
            "held": Out(1),
            "busy": Out(1),
        }
        if not single_pre:
            members["single"] = In(1)
        if pre_bits:
            members["cmd_pre"] = In(pre_bits)
            members["insn_pre"] = Out(pre_bits)
        for name in start_when:
            members[f"start_{name}"] = Out(1)
        for name in self._pops:
            members[name] = In(token_stream())
        for name in self._pushes:
            members[name] = Out(token_stream())
            members[f"{name}_room"] = In(1)
        if len(self._pushes) == 2:
            members["push_prev_room_next"] = In(1)
            members["hold"] = Out(1, init=0)
        super().__init__(members)

    @property
    def pops(self) -> tuple[str, ...]:
        return self._pops

    @property
    def pushes(self) -> tuple[str, ...]:
        return self._pushes

    def elaborate(self, platform: object) -> Module:
        m = Module()
        insn_q = Signal(self._layout)
        has_insn = Signal()
        executing = Signal()
        need = {name: Signal(name=f"need_{name}") for name in self._pops}
        pend = {name: Signal(name=f"pend_{name}") for name in self._pushes}
        # The handshakes below are written as flat sums of products over registers, each
        # product a kept wire (``keep``: the synthesis tool maps it alone and does not merge
        # it into its users), so that the queues' ``room`` registers reach the pops' ``ready``
        # and ``start`` through two LUT levels at most: these paths run from one token queue
        # through this module into another, across the chip, and the tool, which does not see
        # the routing, otherwise trades their depth for area.
        ok = {}
        all_ok: object = 1
        for name in self._pushes:
            ok[name] = Signal(name=f"ok_{name}")
            m.d.comb += ok[name].eq(~pend[name] | getattr(self, f"{name}_room"))
            all_ok = all_ok & ok[name]
        ok_all = _kept("ok_all")            # the previous instruction's pushes are accepted
        idle_valid = Signal()               # nothing held or running, an instruction waits
        m.d.comb += [
            ok_all.eq(all_ok),
            idle_valid.eq(~executing & ~has_insn & self.cmd.valid),
        ]
        take = Signal()
        m.d.comb += [
            self.cmd.ready.eq(~executing & ~has_insn & ok_all),
            take.eq(idle_valid & ok_all),
            # The instruction that starts if ``start`` rises: the held one, else the queue's
            # head. It does not depend on ``take``, which comes late in the cycle.
            self.insn.eq(Mux(has_insn, insn_q, self.cmd.payload)),
        ]
        header = self.cmd.payload.mem

        # Pops in order, each as soon as its token is there and the ones before it are done:
        # the taken instruction's (``take``: the queue's head) or the held one's (``need``).
        # ``fire`` is ``want & valid & done-before`` with ``want = take ? header : held``,
        # written as ``valid & (ok_all & hdr_go | held_go)`` (``take`` and ``has_insn``
        # exclude each other).
        fire: dict[str, Signal] = {}
        want: dict[str, Signal] = {}
        hdr_ok: object = 1                  # the header's pops so far have their tokens
        held_ok: object = 1                 # the held instruction's likewise
        for name in self._pops:
            stream_in = getattr(self, name)
            hdr_go, held_go = _kept(f"hdr_go_{name}"), _kept(f"held_go_{name}")
            fire[name] = Signal(name=f"fire_{name}")
            want[name] = Signal(name=f"want_{name}")
            m.d.comb += [
                hdr_go.eq(idle_valid & getattr(header, name) & hdr_ok),
                held_go.eq(has_insn & need[name] & held_ok),
                fire[name].eq(stream_in.valid & ((ok_all & hdr_go) | held_go)),
                stream_in.ready.eq(fire[name]),
                want[name].eq(Mux(take, getattr(header, name), has_insn & need[name])),
            ]
            hdr_ok = hdr_ok & (~getattr(header, name) | stream_in.valid)
            held_ok = held_ok & (~need[name] | stream_in.valid)
        # ``start`` is ``(take | has_insn) & done`` of the last pop, in the same flat form: its
        # fan-out is the decode logic of the module, and it bounds the clock.
        hdr_start, held_start = _kept("hdr_start"), _kept("held_start")
        m.d.comb += [
            hdr_start.eq(idle_valid & hdr_ok),
            held_start.eq(has_insn & held_ok),
            self.start.eq((ok_all & hdr_start) | held_start),
        ]

        with m.If(take):
            m.d.sync += [insn_q.eq(self.cmd.payload), has_insn.eq(1)]
        if self._pre_bits:
            pre_q = Signal(self._pre_bits)
            with m.If(take):
                m.d.sync += pre_q.eq(self.cmd_pre)
            m.d.comb += self.insn_pre.eq(Mux(has_insn, pre_q, self.cmd_pre))
            for name, when in self._start_when.items():
                # The same two products as ``start``, each with the condition on its own
                # instruction's bits, rather than ``start`` and the condition on the picked
                # bits (one gate and a multiplexer later).
                m.d.comb += getattr(self, f"start_{name}").eq(
                    (ok_all & hdr_start & when(self.cmd_pre)) | (held_start & when(pre_q)))
        for name in self._pops:
            m.d.sync += need[name].eq(want[name] & ~fire[name])
        with m.If(self.start):
            m.d.sync += has_insn.eq(0)
        single = self.insn_pre[0] if self._single_pre else self.single
        # The held instruction stays; the queue's head changes only when it is taken (then it
        # is held) or when the queue was empty.
        m.d.sync += self.seen.eq((has_insn | self.cmd.valid) & ~self.start)
        m.d.sync += executing.eq(Mux(self.start, ~single, executing & ~self.last))
        m.d.comb += [self.retire.eq((self.start & single) | self.last),
                     self.held.eq(has_insn),
                     self.busy.eq(executing)]

        # The instruction after its start cycle: loaded while none runs, so in its decode
        # cycle too, and read only in a ``last`` cycle, which is never a decode cycle.
        running = Signal(self._layout)
        with m.If(~executing):
            m.d.sync += running.eq(self.insn)
        # A push in the decode cycle (a one-cycle instruction) is ``start`` and'ed with flags
        # of ``insn``; a later one comes from the engine's ``last`` and the running
        # instruction. ``start`` comes late in the cycle and the pushes feed the token queues'
        # registered flags. With ``single_pre`` the first term is written, as ``start`` is, as
        # the sum of the queue's head's and the held instruction's products, each kept.
        pushing = {}
        for name in self._pushes:
            pushing[name] = Signal(name=f"pushing_{name}")
            later = self.last & getattr(running.mem, name)
            if self._single_pre:
                hdr_push, held_push = _kept(f"hdr_{name}"), _kept(f"held_{name}")
                m.d.comb += [
                    hdr_push.eq(idle_valid & hdr_ok & self.cmd_pre[0] & getattr(header, name)),
                    held_push.eq(has_insn & held_ok & pre_q[0] & getattr(insn_q.mem, name)),
                    pushing[name].eq((ok_all & hdr_push) | held_push | later),
                ]
            else:
                now = Signal(name=f"{name}_now")
                m.d.comb += [
                    now.eq(single & getattr(self.insn.mem, name)),
                    pushing[name].eq((self.start & now) | later),
                ]
            m.d.comb += getattr(self, name).valid.eq(pushing[name])
            m.d.sync += pend[name].eq(Mux(pushing[name], 1, pend[name] & ~ok[name]))
        if len(self._pushes) == 2:
            # The second token is invisible from the cycle after both pushes until the first
            # push is accepted: in a cycle where it is pending (``pend``, set by both pushes
            # and kept while it waits) and its queue has no room. ``pend`` holds whenever the
            # hold does, so that is ``hold`` and'ed with the queue's next ``room``.
            both = pushing["push_prev"] & pushing["push_next"]
            m.d.sync += self.hold.eq((both | self.hold) & ~self.push_prev_room_next)
        return m
