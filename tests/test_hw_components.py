# amaranth: UnusedElaboratable=no
"""RTL components: structural facts from the config, error text, async testbenches vs models."""

from __future__ import annotations

import re
from collections import deque

import numpy as np
import pytest
from amaranth.hdl import Cat, Module, Shape
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from accel import load_config
from accel.machine.config import HwConfig
from accel.machine.isa import AluOp, IsaLayout, MemType, Opcode
from hw.compute import AluLane, GemmCore
from hw.control import DepControl
from hw.dram import REQUESTERS, DramArbiter, DramPort
from hw.export import PinWrapper
from hw.lutmul import mul_low_lut
from hw.params import (
    BufferGeometry,
    RtlParams,
    check_rtl_config,
    format_layout,
    gemm_deep,
    writeback_stage,
)
from hw.queues import CommandQueue, TokenQueue
from hw.sram import SramBuffer
from hw.top import Accelerator
from sim.functional import alu_apply


def exact(message: str) -> str:
    """A ``match=`` pattern for exactly ``message``."""
    return "^" + re.escape(message) + "$"


def run_bench(dut: wiring.Component, bench: object, *, processes: tuple = ()) -> None:
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    for p in processes:
        sim.add_process(p)
    sim.run()


# ---------------------------------------------------------------------- structure
def width(member: object) -> int:
    return Shape.cast(member.shape).width  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["tiny", "default", "vta_1x16x16"])
def test_top_signature_follows_config(name: str) -> None:
    cfg = load_config(name)
    top = Accelerator(cfg)
    members = top.signature.members
    dram = members["dram"].signature.members
    assert width(dram["rsp_data"]) == cfg.dram.bytes_per_cycle * 8
    assert width(dram["wr_data"]) == cfg.dram.bytes_per_cycle * 8
    p = RtlParams.of(cfg)
    req = dram["req"].signature.members["payload"].shape
    assert Shape.cast(req["bytes"].shape).width == cfg.dram.max_burst.bit_length()
    assert width(members["insn_addr"]) == p.dram_addr_bits
    assert width(members["insn_count"]) == 32
    # Buffers: one bank per element a DRAM beat carries.
    beat = cfg.dram.bytes_per_cycle
    for buf in ("uop", "inp", "wgt", "acc", "out"):
        g = p.buffers[buf]
        assert g.depth == cfg.depth(buf)
        assert g.lanes == max(1, beat // cfg.tile_bytes(buf))
        assert g.beats_per_elem == max(1, cfg.tile_bytes(buf) // beat)
    assert p.buffers["uop"].store_bits == cfg.uop_bits


def test_instruction_layout_is_generated_from_isa_layout(tiny: HwConfig, cfg: HwConfig) -> None:
    for c in (tiny, cfg):
        isa = IsaLayout.of(c)
        p = RtlParams.of(c)
        for fmt in isa.formats.values():
            layout = format_layout(fmt, p.insn_bits)
            assert layout.size == p.insn_bits
            for f in fmt.fields:
                assert layout[f.name].offset == f.lsb
                assert Shape.cast(layout[f.name].shape).width == f.width
                assert Shape.cast(layout[f.name].shape).signed == f.signed
        assert p.insn_layout["gemm"].shape["uop_end"].offset \
            == isa.formats[Opcode.GEMM].field("uop_end").lsb
        assert p.uop_layout["wgt"].offset == c.acc_index_bits + c.src_index_bits


def test_queue_signatures() -> None:
    q = CommandQueue(40, 16)
    assert width(q.signature.members["level"]) == 5             # 0..17
    assert width(q.signature.members["w"].signature.members["payload"]) == 40
    t = TokenQueue(8)
    assert width(t.signature.members["level"]) == 4             # 0..9
    assert t.depth == 8


def test_arbiter_and_dram_port_signatures() -> None:
    arb = DramArbiter(36, 7, 64)
    assert set(REQUESTERS) <= set(arb.signature.members)
    assert arb.signature.members["fetch"].signature == DramPort(36, 7, 64).flip()


# ---------------------------------------------------------------------- error text
def test_rtl_config_checks(tiny: HwConfig) -> None:
    with pytest.raises(ValueError, match=re.escape(
            "gemm.depth must be at least 4 cycles for ii=1 (results are written 7 cycles "
            "after the micro-op issues, at most 2 after the instruction's last cycle), "
            "not 3")):
        check_rtl_config(tiny.replace(**{"gemm.depth": 3}))
    with pytest.raises(ValueError, match=re.escape(
            "alu.depth must be at least 4 cycles for ii=2 (results are written 8 cycles "
            "after the micro-op issues, at most 2 after the instruction's last cycle), "
            "not 3")):
        check_rtl_config(tiny.replace(**{"alu.depth": 3}))
    with pytest.raises(ValueError, match=re.escape(
            "alu.depth must be at least 5 cycles for ii=1 (results are written 8 cycles "
            "after the micro-op issues, at most 2 after the instruction's last cycle), "
            "not 4")):
        check_rtl_config(tiny.replace(**{"alu.ii": 1}))
    with pytest.raises(ValueError, match=re.escape(
            "dram.latency must be at least 1 cycle for the registered DRAM port, not 0")):
        Accelerator(tiny.replace(**{"dram.latency": 0}))
    with pytest.raises(TypeError, match=exact("cfg must be a HwConfig, not str")):
        Accelerator("tiny")  # type: ignore[arg-type]


def test_component_parameter_errors(tiny: HwConfig) -> None:
    with pytest.raises(ValueError, match=exact("depth must be a positive integer, not 0")):
        CommandQueue(8, 0)
    with pytest.raises(ValueError, match=exact("pre_bits must be a non-negative integer, not -1")):
        CommandQueue(8, 2, pre_bits=-1)
    from hw.fetch import Fetch
    with pytest.raises(ValueError, match=exact(
            "predecode for unknown queues ['alu']; the queues are load, compute, store")):
        Fetch(RtlParams.of(tiny), predecode={"alu": lambda insn: insn.raw[:1]})
    with pytest.raises(TypeError, match=exact("depth must be an integer, not '4'")):
        TokenQueue("4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=exact("beat_bits must be a power of two >= 8, not 48")):
        DramArbiter(32, 8, 48)
    p = RtlParams.of(tiny)
    with pytest.raises(ValueError, match=re.escape(
            "pops must be a subset of ('pop_prev', 'pop_next'), not ('pop',)")):
        DepControl(p.insn_layout, pops=("pop",), pushes=(), token_depth=4)
    with pytest.raises(ValueError, match=exact(
            "start_when needs predecoded bits (pre_bits > 0)")):
        DepControl(p.insn_layout, pops=(), pushes=(), token_depth=4,
                   start_when={"a": lambda bits: bits[0]})
    with pytest.raises(ValueError, match=exact(
            "start_when names must be identifiers, not 'a b'")):
        DepControl(p.insn_layout, pops=(), pushes=(), token_depth=4, pre_bits=2,
                   start_when={"a b": lambda bits: bits[0]})
    with pytest.raises(ValueError, match=exact("read_lanes must be a power of two, not 3")):
        SramBuffer(p.buffers["uop"], read_lanes=3)


# ---------------------------------------------------------------------- behaviour
def _drive_two_lanes(ctx: object, dut: SramBuffer, rng: np.random.Generator,
                     reread: int | None) -> tuple[int, int, list[int], int]:
    """Drive a random write of a two-lane buffer and a read, a third of the reads at
    ``reread`` (None: the address written now); returns ``(addr, en, lanes, raddr)``."""
    depth = dut.geom.depth
    addr = int(rng.integers(0, depth - 1))
    en = int(rng.integers(0, 4))
    lanes = [int(rng.integers(0, 2**32)) for _ in range(2)]
    again = addr if reread is None else reread
    raddr = again if rng.random() < 1 / 3 else int(rng.integers(0, depth - 1))
    ctx.set(dut.w.addr, addr)
    ctx.set(dut.w.en, en)
    ctx.set(dut.w.data, lanes[0] | lanes[1] << 32)
    ctx.set(dut.r.addr, raddr)
    return addr, en, lanes, raddr


@pytest.mark.parametrize("transparent", [True, False])
def test_sram_buffer_banked_writes_and_reads(tiny: HwConfig, transparent: bool) -> None:
    p = RtlParams.of(tiny)
    g = p.buffers["inp"]                       # 4-byte tiles, 8-byte beats: 2 lanes
    assert g.lanes == 2
    dut = SramBuffer(g, transparent=transparent)
    rng = np.random.default_rng(5)
    model = np.zeros(g.depth, dtype=np.uint64)

    async def bench(ctx: object) -> None:
        for _ in range(200):
            # A third of the reads are of an element written at the same edge.
            addr, en, lanes, raddr = _drive_two_lanes(ctx, dut, rng, None)
            old = model.copy()
            await ctx.tick()
            for i in range(2):
                if en >> i & 1:
                    model[addr + i] = lanes[i]
            # Read data is the pre-edge address's, with this edge's writes visible only when
            # the port is transparent.
            got = ctx.get(dut.r.data)
            collisions[0] += bool((old[raddr:raddr + 2] != model[raddr:raddr + 2]).any())
            if not transparent:
                assert got & 0xFFFFFFFF == old[raddr]
                assert got >> 32 == old[raddr + 1]
                continue
            assert got & 0xFFFFFFFF == model[raddr]
            assert got >> 32 == model[raddr + 1]
            ctx.set(dut.w.en, 0)

    collisions = [0]
    run_bench(dut, bench)
    assert collisions[0] > 20                  # the two port kinds were told apart


def test_dep_control_start_when_is_start_of_the_instructions_it_names(tiny: HwConfig) -> None:
    """Each ``start_<name>`` (formed from the queue's head and the held instruction
    separately) is ``start & start_when[name](insn_pre)`` in every cycle, under random queues,
    tokens and room."""
    p = RtlParams.of(tiny)
    dut = DepControl(p.insn_layout, pops=("pop_prev", "pop_next"),
                     pushes=("push_prev", "push_next"), token_depth=2, pre_bits=3,
                     start_when={"a": lambda bits: bits[0] & ~bits[1],
                                 "b": lambda bits: bits[2]})
    rng = np.random.default_rng(3)
    seen = {True: 0, False: 0}
    seen_b = {True: 0, False: 0}

    async def bench(ctx: object) -> None:
        for _ in range(600):
            ctx.set(dut.cmd.valid, int(rng.random() < 0.6))
            ctx.set(dut.cmd.payload.as_value(), int(rng.integers(0, 2**63)))
            ctx.set(dut.cmd_pre, int(rng.integers(0, 8)))
            for name in ("pop_prev", "pop_next"):
                ctx.set(getattr(dut, name).valid, int(rng.random() < 0.6))
            for name in ("push_prev_room", "push_next_room"):
                ctx.set(getattr(dut, name), int(rng.random() < 0.7))
            ctx.set(dut.single, int(rng.random() < 0.5))
            ctx.set(dut.last, int(rng.random() < 0.4))
            start, pre = ctx.get(dut.start), ctx.get(dut.insn_pre)
            want = bool(start and pre & 1 and not pre & 2)
            want_b = bool(start and pre & 4)
            assert ctx.get(dut.start_a) == want
            assert ctx.get(dut.start_b) == want_b
            if start:
                seen[want] += 1
                seen_b[want_b] += 1
            await ctx.tick()

    run_bench(dut, bench)
    assert seen[True] > 10 and seen[False] > 10      # starts of both kinds were made
    assert seen_b[True] > 10 and seen_b[False] > 10


def test_dep_control_single_pre_pushes_as_start_and_single(tiny: HwConfig) -> None:
    """With ``single_pre`` (no ``single`` port: the predecoded bit 0 is it), the push is
    ``start & insn_pre[0] & insn.push_prev`` in a decode cycle and ``last`` with the running
    instruction's flag later, in every cycle under random queues, tokens and room; ``busy``
    is high from the cycle after a multi-cycle instruction's start to its ``last``."""
    p = RtlParams.of(tiny)
    dut = DepControl(p.insn_layout, pops=("pop_prev",), pushes=("push_prev",), token_depth=2,
                     pre_bits=1, single_pre=True)
    assert not hasattr(dut, "single")
    rng = np.random.default_rng(4)
    pushed = {"decode": 0, "later": 0}

    async def bench(ctx: object) -> None:
        running, busy = 0, 0
        for _ in range(800):
            ctx.set(dut.cmd.valid, int(rng.random() < 0.6))
            ctx.set(dut.cmd.payload.as_value(), int(rng.integers(0, 2**63)))
            ctx.set(dut.cmd_pre, int(rng.random() < 0.5))
            ctx.set(dut.pop_prev.valid, int(rng.random() < 0.6))
            ctx.set(dut.push_prev_room, int(rng.random() < 0.7))
            ctx.set(dut.last, int(busy and rng.random() < 0.3))
            start, pre, last = ctx.get(dut.start), ctx.get(dut.insn_pre), ctx.get(dut.last)
            flag = ctx.get(dut.insn.mem.push_prev)
            now = bool(start and pre & 1 and flag)
            want = now or bool(last and running)
            assert ctx.get(dut.push_prev.valid) == want
            assert ctx.get(dut.busy) == busy
            assert ctx.get(dut.retire) == bool((start and pre & 1) or last)
            pushed["decode"] += now
            pushed["later"] += bool(last and running)
            if start:
                running, busy = flag, int(not pre & 1)
            elif last:
                busy = 0
            await ctx.tick()

    run_bench(dut, bench)
    assert pushed["decode"] > 10 and pushed["later"] > 10     # both kinds of push were made


def test_sram_buffer_write_register_lands_writes_a_cycle_later(tiny: HwConfig) -> None:
    """With ``write_register`` a write lands at the edge after the one it is presented at: a
    read presented in the next cycle still returns the old element, one in the cycle after
    that returns the new one."""
    g = RtlParams.of(tiny).buffers["inp"]     # two lanes: the rotation is registered too
    dut = SramBuffer(g, transparent=False, write_register=True)
    rng = np.random.default_rng(11)
    snaps = [np.zeros(g.depth, dtype=np.uint64)]   # the elements after each cycle's writes
    stale = [0]

    async def bench(ctx: object) -> None:
        prev_addr = 0
        for t in range(200):
            # A third of the reads are of what the previous cycle wrote.
            addr, en, lanes, raddr = _drive_two_lanes(ctx, dut, rng, prev_addr)
            await ctx.tick()
            model = snaps[-1].copy()
            for i in range(2):
                if en >> i & 1:
                    model[addr + i] = lanes[i]
            snaps.append(model)
            seen = snaps[max(t - 1, 0)]             # the writes of cycles up to t - 2
            got = ctx.get(dut.r.data)
            assert (got & 0xFFFFFFFF, got >> 32) == (seen[raddr], seen[raddr + 1]), t
            stale[0] += bool((snaps[t][raddr:raddr + 2] != seen[raddr:raddr + 2]).any())
            prev_addr = addr

    run_bench(dut, bench)
    assert stale[0] > 20                     # reads a cycle after a write were made


@pytest.mark.parametrize("read_lanes", [1, 2, 4])
def test_sram_buffer_reads_more_lanes_than_it_writes(read_lanes: int) -> None:
    """One element written per beat, several consecutive elements per read (the micro-op
    buffer of a 32-bit DRAM bus): one bank per read lane, reads wrap around the end of the
    buffer; ``picked`` is the element ``pick`` of them, sampled with the address, or
    ``forced`` (all 32 bits, beyond the 24 kept too) where ``force`` is set in the cycle the
    data arrive."""
    g = BufferGeometry(name="uop", elem_bits=32, store_bits=24, depth=64, lanes=1,
                       beats_per_elem=1)
    dut = SramBuffer(g, transparent=False, read_lanes=read_lanes, pick=True)
    assert dut.r.signature.lanes == read_lanes and len(dut.r.data) == 32 * read_lanes
    assert len(dut.w.en) == 1 and len(dut.pick) == read_lanes.bit_length() - 1
    assert len(dut.picked) == 32
    rng = np.random.default_rng(8)
    model = np.zeros(g.depth, dtype=np.uint64)
    reads = [0]
    picks = set()
    forced = [0]

    async def bench(ctx: object) -> None:
        for step in range(300):
            addr = int(rng.integers(0, g.depth))
            en = int(step < 100 or rng.random() < 0.3)
            word = int(rng.integers(0, 2**24))
            raddr = int(rng.integers(0, g.depth))
            pick = int(rng.integers(0, read_lanes))
            ctx.set(dut.w.addr, addr)
            ctx.set(dut.w.en, en)
            ctx.set(dut.w.data, word)
            ctx.set(dut.r.addr, raddr)
            ctx.set(dut.pick, pick)
            old = model.copy()
            await ctx.tick()
            ctx.set(dut.pick, (pick + 1) % read_lanes)     # sampled at the edge, not after
            if en:
                model[addr] = word
            got = ctx.get(dut.r.data)
            for i in range(read_lanes):
                assert got >> (32 * i) & 0xFFFFFFFF == old[(raddr + i) % g.depth], (step, i)
            assert ctx.get(dut.picked) == old[(raddr + pick) % g.depth], step
            force, other = int(rng.random() < 0.3), int(rng.integers(0, 2**32))
            ctx.set(dut.force, force)
            ctx.set(dut.forced, other)
            want = other if force else old[(raddr + pick) % g.depth]
            assert ctx.get(dut.picked) == want, step
            forced[0] += force
            ctx.set(dut.force, 0)
            reads[0] += raddr + read_lanes > g.depth
            picks.add(pick)

    run_bench(dut, bench)
    assert model.any() and (reads[0] > 0) == (read_lanes > 1)  # written, read across the wrap
    assert picks == set(range(read_lanes)) and forced[0] > 50


class _Scrambler(wiring.Component):
    """A stand-in for the accelerator: 37 outputs, some registered, from 21 inputs."""

    def __init__(self) -> None:
        super().__init__({"a": In(13), "b": In(8), "x": Out(20), "y": Out(17)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.d.comb += self.x.eq(self.a * 3 + self.b)
        m.d.sync += self.y.eq(Cat(self.a ^ self.b, self.b[:4]))
        return m


def test_pin_wrapper_shifts_in_and_reports_the_parity_of_the_outputs(tiny: HwConfig) -> None:
    inner = _Scrambler()
    dut = PinWrapper(tiny, inner=inner)
    rng = np.random.default_rng(3)
    bits = [int(b) for b in rng.integers(0, 2, 300)]

    async def bench(ctx: object) -> None:
        shreg, parities, seen = 0, [], []
        for bit in bits:
            ctx.set(dut.si, bit)
            await ctx.tick()
            shreg = (shreg << 1 | bit) & (2**21 - 1)     # si enters at the low end
            assert ctx.get(inner.a) | ctx.get(inner.b) << 13 == shreg
            parities.append(bin(ctx.get(inner.x) | ctx.get(inner.y) << 20).count("1") & 1)
            seen.append(ctx.get(dut.so))
        late = PinWrapper.latency(37)
        assert late == 2 + 3                            # 37 -> 10 -> 3 -> 1
        assert seen[late:] == parities[:-late]
        assert 0 < sum(seen) < len(seen)

    run_bench(dut, bench)


@pytest.mark.parametrize("depth", [1, 3])
def test_command_queue_matches_a_deque(depth: int) -> None:
    """Entries come out in order, with the bits written beside them (here the low byte's
    parity and whether the entry is a multiple of 3), through the bypass and the memory."""
    def pre(v: int) -> int:
        return bin(v & 0xFF).count("1") % 2 | (v % 3 == 0) << 1

    dut = CommandQueue(16, depth, pre_bits=2)
    rng = np.random.default_rng(7)

    async def bench(ctx: object) -> None:
        model: deque[int] = deque()
        counter = 0
        for _ in range(400):
            push = bool(rng.integers(0, 2)) and len(model) < depth + 1
            pop = bool(rng.integers(0, 2))
            ctx.set(dut.w.valid, push)
            ctx.set(dut.w.payload, counter)
            ctx.set(dut.w_pre, pre(counter))
            ctx.set(dut.r.ready, pop)
            assert ctx.get(dut.level) == len(model)
            assert ctx.get(dut.r.valid) == bool(model)
            if model:
                assert ctx.get(dut.r.payload) == model[0]
                head = model[0]
                assert ctx.get(dut.r_pre) == pre(head)
            popped = pop and bool(model)
            assert ctx.get(dut.room) == (len(model) <= depth)      # registered: not popped
            room_next = ctx.get(dut.room_next)
            await ctx.tick()
            if popped:
                model.popleft()
            if push:
                model.append(counter)
                counter += 1
            assert room_next == (len(model) <= depth)               # the next cycle's room

    run_bench(dut, bench)


@pytest.mark.parametrize("bpc", [8, 16, 32])
def test_fetch_dispatches_predecoded_bits(bpc: int) -> None:
    """Fetch dispatches the program's words in order, each to its module's queue with every
    queue's predecoded bits of it, formed as the words arrived (as two beats, one, or two
    words in a beat). Half the words are a random program's instructions, half random bits
    (whose routing follows the opcode alone)."""
    from accel.machine.isa import decode_insn, encode_insn, module_of
    from accel.testing.randprog import numpy_pick, random_program
    from hw.compute import compute_predecode
    from hw.dma import mem_predecode
    from hw.fetch import QUEUES, Fetch

    cfg = load_config("tiny").replace(**{"dram.bytes_per_cycle": bpc})
    p = RtlParams.of(cfg)
    fns = {"load": mem_predecode, "compute": compute_predecode, "store": mem_predecode}
    dut = Fetch(p, predecode=fns)
    assert dut.pre_bits("compute") == len(Cat(compute_predecode(dut.cmd_compute.payload)))
    assert dut.pre_bits("load") == dut.pre_bits("store") == 1
    rng = np.random.default_rng(bpc)
    count = 3 * p.fetch_batch + 1
    program, _ = random_program(cfg, numpy_pick(rng), 3)
    valid = [encode_insn(insn, cfg) for insn in program.insns]
    words = [valid[i % len(valid)] if i % 2 else int.from_bytes(rng.bytes(16), "little")
             for i in range(count)]
    image = b"".join(w.to_bytes(16, "little") for w in words)
    base = 64

    async def bench(ctx: object) -> None:
        ctx.set(dut.dram.req.ready, 1)
        for q in QUEUES:
            ctx.set(getattr(dut, f"room_{q}"), 1)
            ctx.set(getattr(dut, f"room_next_{q}"), 1)
        ctx.set(dut.insn_addr, base)
        ctx.set(dut.insn_count, count)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        beats: deque[int] = deque()     # DRAM: a read's beats, from the cycle after its grant
        seen = []
        for _ in range(40 * count):
            ctx.set(dut.dram.rsp_valid, bool(beats))
            ctx.set(dut.dram.rsp_data, beats.popleft() if beats else 0)
            for q in QUEUES:
                port = getattr(dut, f"cmd_{q}")
                if ctx.get(port.valid):
                    seen.append(ctx.get(port.payload.as_value()))
                    if len(seen) % 2 == 0:      # a valid instruction
                        module = module_of(decode_insn(seen[-1], cfg))
                        assert module.name.lower() == q, (len(seen), q)
                    want = ctx.get(Cat(fns[q](port.payload)))
                    assert ctx.get(getattr(dut, f"pre_{q}")) == want, (len(seen), q)
            if ctx.get(dut.dram.req.valid):
                addr = ctx.get(dut.dram.req.payload.addr) - base
                size = ctx.get(dut.dram.req.payload.bytes)
                beats.extend(int.from_bytes(image[addr + at:addr + min(at + bpc, size)],
                                            "little") for at in range(0, size, bpc))
            await ctx.tick()
        mask = (1 << p.insn_bits) - 1
        assert seen == [w & mask for w in words]

    run_bench(dut, bench)


def test_token_queue_counts_and_holds() -> None:
    dut = TokenQueue(2)

    async def bench(ctx: object) -> None:
        ctx.set(dut.pop.ready, 1)
        assert not ctx.get(dut.pop.valid)
        ctx.set(dut.push.valid, 1)
        await ctx.tick()
        ctx.set(dut.push.valid, 0)
        assert ctx.get(dut.pop.valid)                  # a token pushed at the last edge
        ctx.set(dut.pop.ready, 0)
        await ctx.tick()
        ctx.set(dut.hold, 1)                           # now a second, held token
        ctx.set(dut.push.valid, 1)
        await ctx.tick()
        ctx.set(dut.push.valid, 0)
        assert ctx.get(dut.level) == 2
        ctx.set(dut.pop.ready, 1)
        assert ctx.get(dut.pop.valid)                  # the old one
        await ctx.tick()
        assert ctx.get(dut.level) == 1
        assert not ctx.get(dut.pop.valid)              # only the held one is left
        ctx.set(dut.hold, 0)                           # it becomes visible
        assert ctx.get(dut.pop.valid)
        await ctx.tick()
        assert ctx.get(dut.level) == 0

    run_bench(dut, bench)


def test_token_queue_room_is_the_registered_level() -> None:
    dut = TokenQueue(1)

    async def bench(ctx: object) -> None:
        ctx.set(dut.push.valid, 1)
        await ctx.tick()
        await ctx.tick()
        ctx.set(dut.push.valid, 0)
        assert ctx.get(dut.level) == 2                 # one over: the producer waits
        assert not ctx.get(dut.room)
        ctx.set(dut.pop.ready, 1)
        assert ctx.get(dut.pop.valid)
        assert not ctx.get(dut.room)                   # not in the cycle of the pop ...
        await ctx.tick()
        ctx.set(dut.pop.ready, 0)
        assert ctx.get(dut.level) == 1
        assert ctx.get(dut.room)                       # ... but in the next one

    run_bench(dut, bench)


def test_arbiter_grants_by_priority_when_free() -> None:
    """Whenever the channel is free (including the cycle after the last beat), the asking
    requester of highest priority gets it, whoever asked first (``sim.timing.DramChannel``),
    and holds it for ``ceil(bytes / 8)`` beats. The channel's write data are store's (the one
    writer) whoever holds it."""
    dut = DramArbiter(16, 5, 64)
    rng = np.random.default_rng(3)
    ports = [getattr(dut, name) for name in REQUESTERS]

    async def bench(ctx: object) -> None:
        ctx.set(dut.dram.req.ready, 1)
        asking = [False] * 4
        busy_beats = 0
        holder = 0
        grants = 0
        for _ in range(400):
            for i in range(4):
                if not asking[i] and rng.integers(0, 3) == 0:
                    asking[i] = True
                ctx.set(ports[i].req.valid, asking[i])
                ctx.set(ports[i].req.payload.bytes, int(rng.integers(1, 32)))
                ctx.set(ports[i].wr_data, int(rng.integers(0, 2**63)))
            assert ctx.get(dut.dram.wr_data) == ctx.get(dut.store.wr_data)
            beat = busy_beats > 0
            ctx.set(dut.dram.rsp_valid, beat)
            expect = None if busy_beats else next((i for i in range(4) if asking[i]), None)
            granted = [asking[i] and bool(ctx.get(p.req.ready)) for i, p in enumerate(ports)]
            assert granted == [i == expect for i in range(4)]
            if beat:
                assert ctx.get(ports[holder].rsp_valid)
                assert not any(ctx.get(p.rsp_valid) for i, p in enumerate(ports) if i != holder)
            if expect is not None:
                nbytes = ctx.get(ports[expect].req.payload.bytes)
            await ctx.tick()
            busy_beats = max(0, busy_beats - 1)
            if expect is not None:
                holder, busy_beats = expect, -(-nbytes // 8)    # the last beat partial
                asking[expect] = False
                grants += 1
        assert grants > 50

    run_bench(dut, bench)


@pytest.mark.parametrize("op", list(AluOp))
def test_alu_lane_matches_functional_semantics(op: AluOp) -> None:
    """The registered lane gives ``alu_apply(op, a, b)`` of the previous cycle's operands;
    MUL's partial products (LUT cross terms included) cover the sign and carry corners. The
    parts the compute module picks from itself agree: ``product`` for MUL, ``other`` else."""
    rng = np.random.default_rng(int(op))
    dut = AluLane()
    edge = [0, 1, -1, 31, 32, -31, -32, -33, 2**31 - 1, -2**31, 100, -100, 0xFFFF, 0x10000,
            -0x10000, 0x7FFF8000, -0x7FFF, 0x12345678]
    cases = [(x, y) for x in edge for y in edge]
    cases += [tuple(int(v) for v in rng.integers(-2**31, 2**31, 2)) for _ in range(100)]
    cases += [(int(rng.integers(-2**31, 2**31)), int(rng.integers(-2**15, 2**15)))
              for _ in range(50)]                       # 16-bit immediates

    async def bench(ctx: object) -> None:
        ctx.set(dut.op, int(op))
        for x, y in cases:
            ctx.set(dut.a, x)
            ctx.set(dut.b, y)
            await ctx.tick()
            ctx.set(dut.a, 0)                           # the result is held, not combinational
            ctx.set(dut.b, 0)
            want = int(alu_apply(op, np.array([x], dtype=np.int32), y)[0])
            assert ctx.get(dut.result) == want, (op, x, y)
            assert ctx.get(dut.mul) == (op is AluOp.MUL)
            assert ctx.get(dut.product if op is AluOp.MUL else dut.other) == want, (op, x, y)

    run_bench(dut, bench)


def test_lut_multiplier_matches_products() -> None:
    """``mul_low_lut`` on odd widths: the low bits of a sum of unsigned products."""
    from amaranth.hdl import Module, Signal

    rng = np.random.default_rng(5)
    m = Module()
    x1, y1, x2, y2 = Signal(7), Signal(5), Signal(3), Signal(9)
    out = mul_low_lut(m, [(x1, y1), (x2, y2)], 6, "out")
    assert len(out) == 6
    cases = [(0, 0, 0, 0), (127, 31, 7, 511)]
    cases += [tuple(int(rng.integers(0, 1 << w)) for w in (7, 5, 3, 9)) for _ in range(200)]

    async def bench(ctx: object) -> None:
        for a1, b1, a2, b2 in cases:
            for sig, v in zip((x1, y1, x2, y2), (a1, b1, a2, b2), strict=True):
                ctx.set(sig, v)
            assert ctx.get(out) == (a1 * b1 + a2 * b2) % 64

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("booth", [False, True])
def test_lut_multiply_add_matches(booth: bool) -> None:
    """``mul_low_lut`` with ``extra`` addends, as the DMA engines form a padded block's first
    address: ``base + y * cols`` with a short ``y`` (Booth: as many rows as its digits)."""
    from amaranth.hdl import Module, Signal

    from hw.lutmul import _booth_rows

    rng = np.random.default_rng(6)
    m = Module()
    cols, y, base, x0 = Signal(18), Signal(4), Signal(11), Signal(4)
    out = mul_low_lut(m, [(cols, y)], 11, "out", extra=(base, x0), booth=booth)
    assert len(out) == 11
    assert len(_booth_rows([(cols, y)], 11)) == 3
    cases = [(0, 0, 0, 0), ((1 << 18) - 1, 15, (1 << 11) - 1, 15), (5, 8, 3, 1)]
    cases += [(int(rng.integers(0, 1 << 18)), int(rng.integers(0, 16)),
               int(rng.integers(0, 1 << 11)), int(rng.integers(0, 16))) for _ in range(400)]

    async def bench(ctx: object) -> None:
        for c, yv, b, x in cases:
            for sig, v in zip((cols, y, base, x0), (c, yv, b, x), strict=True):
                ctx.set(sig, v)
            assert ctx.get(out) == (c * yv + b + x) % (1 << 11), (c, yv, b, x)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize(("widths", "width", "parts"), [
    ((16, 16, 16, 16), 16, 4),      # the ALU's MUL cross terms
    ((7, 5, 3, 9), 6, 1),           # y shorter and longer than the result, odd result width
    ((5, 12, 12, 5), 11, 2),
    ((9, 9, 4, 3), 7, 2),
])
def test_booth_lut_multiplier_matches_products(widths: tuple[int, ...], width: int,
                                               parts: int) -> None:
    """``mul_low_lut_parts(booth=True)``: the partial sums add up to the low bits of a sum of
    unsigned products, with half the addends of the AND-gate rows (one adder level fewer)."""
    from amaranth.hdl import Module, Signal

    from hw.lutmul import _binary_rows, _booth_rows, mul_low_lut_parts

    rng = np.random.default_rng(width)
    m = Module()
    sigs = [Signal(w) for w in widths]
    pairs = [(sigs[0], sigs[1]), (sigs[2], sigs[3])]
    outs = mul_low_lut_parts(m, pairs, width, "out", parts, booth=True)
    assert len(outs) == parts
    digits = [min((width + 1) // 2, len(y) // 2 + 1) for _, y in pairs]
    assert len(_booth_rows(pairs, width)) == sum(digits)
    if widths == (16, 16, 16, 16):
        assert len(_binary_rows(pairs, width)) == 32
    top = [(1 << w) - 1 for w in widths]
    cases = [(0, 0, 0, 0), tuple(top), (top[0], 1 << (widths[1] - 1), 1, top[3])]
    cases += [tuple(int(rng.integers(0, 1 << w)) for w in widths) for _ in range(1500)]

    async def bench(ctx: object) -> None:
        for values in cases:
            for sig, v in zip(sigs, values, strict=True):
                ctx.set(sig, v)
            a1, b1, a2, b2 = values
            got = sum(ctx.get(o) for o in outs) % (1 << width)
            assert got == (a1 * b1 + a2 * b2) % (1 << width), values

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize(("n_terms", "width"), [
    (5, 16),        # the ALU's MUL: four cross partial sums and the low product's upper half
    (0, 5), (1, 7), (2, 6), (3, 9), (4, 8), (6, 11), (7, 10), (9, 4), (13, 12),
])
def test_carry_save_keeps_the_sum(n_terms: int, width: int) -> None:
    """``carry_save``: the two values add up to every term's sum mod ``2**width``, with operands
    wider and narrower than ``width``."""
    from amaranth.hdl import Module, Signal

    from hw.lutmul import carry_save

    rng = np.random.default_rng(100 * n_terms + width)
    widths = [int(rng.integers(1, width + 4)) for _ in range(n_terms)]
    sigs = [Signal(w) for w in widths]
    x, y = carry_save(sigs, width)
    m = Module()
    out_x, out_y = Signal(width), Signal(width)
    m.d.comb += [out_x.eq(x), out_y.eq(y)]
    top = [(1 << w) - 1 for w in widths]
    cases = [[0] * len(widths), top]
    cases += [[int(rng.integers(0, 1 << w)) for w in widths] for _ in range(300)]

    async def bench(ctx: object) -> None:
        for values in cases:
            for sig, v in zip(sigs, values, strict=True):
                ctx.set(sig, v)
            got = (ctx.get(out_x) + ctx.get(out_y)) % (1 << width)
            assert got == sum(values) % (1 << width), values

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_gemm_deep_follows_the_depth(tiny: HwConfig) -> None:
    """The GEMM gets its product register where the depth pays for it: 5 at ii 1, 4 at ii 2."""
    def deep(ii: int, depth: int) -> bool:
        return gemm_deep(tiny.replace(**{"gemm.ii": ii, "gemm.depth": depth}))

    assert [deep(1, d) for d in (4, 5, 6)] == [False, True, True]
    assert [deep(2, d) for d in (3, 4)] == [False, True]
    assert RtlParams.of(load_config("default")).gemm_deep and RtlParams.of(tiny).gemm_deep
    for ii, depth in ((1, 4), (1, 5), (2, 4)):
        cfg = tiny.replace(**{"gemm.ii": ii, "gemm.depth": depth})
        assert writeback_stage(cfg, "gemm") == 7 + deep(ii, depth)
        assert writeback_stage(cfg, "alu") == 8


@pytest.mark.parametrize("lut_macs", [0, 5, 16])
@pytest.mark.parametrize("depth", [4, 5])
def test_gemm_core_matches_numpy(tiny: HwConfig, depth: int, lut_macs: int) -> None:
    """Every MAC on a multiplier, some (the last five) or all in LUTs (``gemm.lut_macs``):
    the same sums in the same cycle, the extremes of int8 included."""
    cfg = tiny.replace(**{"gemm.depth": depth, "gemm.lut_macs": lut_macs})
    p = RtlParams.of(cfg)
    dut = GemmCore(p)
    b, bi, bo = tiny.batch, tiny.block_in, tiny.block_out
    lag = 3 + p.gemm_deep
    rng = np.random.default_rng(11)
    tiles = [(rng.integers(-128, 128, (b, bi), dtype=np.int8),
              rng.integers(-128, 128, (bo, bi), dtype=np.int8)) for _ in range(20)]
    for x, w in ((-128, -128), (-128, 127), (127, 127), (-1, -128)):
        tiles.append((np.full((b, bi), x, np.int8), np.full((bo, bi), w, np.int8)))

    async def bench(ctx: object) -> None:
        for k in range(len(tiles) + lag):
            if k < len(tiles):
                x, w = tiles[k]
                ctx.set(dut.inp, int.from_bytes(x.tobytes(), "little"))
                ctx.set(dut.wgt, int.from_bytes(w.tobytes(), "little"))
            await ctx.tick()
            if k >= lag:
                # Four register stages (five when deep): after edge k + 1 the sums are those of
                # tile k - 3 (k - 4).
                x, w = tiles[k - lag]
                want = (x.astype(np.int32) @ w.astype(np.int32).T).astype("<i4")
                assert ctx.get(dut.sums) == int.from_bytes(want.tobytes(), "little")

    run_bench(dut, bench)


def test_load_engine_targets_are_checked(tiny: HwConfig) -> None:
    from hw.dma import LoadEngine

    p = RtlParams.of(tiny)
    eng = LoadEngine(p, (MemType.INP, MemType.WGT))
    assert {"wr_inp", "wr_wgt"} <= set(eng.signature.members)
    with pytest.raises(ValueError, match=exact("targets must name at least one memory type")):
        LoadEngine(p, ())


def test_lut4_init_and_widths() -> None:
    """``lut4_init`` puts ``fn(a, b, c, d)`` at bit ``{d, c, b, a}`` of ``INIT`` (as the ECP5
    LUT4 reads it); ``lut4`` wants four inputs of one width."""
    from amaranth.hdl import Signal

    from hw.primitives import lut4, lut4_init

    assert lut4_init(lambda a, b, c, d: a & b & c & d) == 0x8000
    assert lut4_init(lambda a, b, c, d: a) == 0xAAAA
    assert lut4_init(lambda a, b, c, d: d) == 0xFF00
    assert lut4_init(lambda a, b, c, d: b ^ c) == 0x3C3C
    m = Module()
    out = lut4(m, *(Signal(3) for _ in range(4)), lambda a, b, c, d: a, "z")
    assert len(out) == 3
    with pytest.raises(ValueError, match=re.escape(
            "LUT4 inputs must be equally wide, not 3, 3, 2, 3") + "$"):
        lut4(m, Signal(3), Signal(3), Signal(2), Signal(3), lambda a, b, c, d: a, "z")


def test_mult18x18d_rejects_what_the_block_cannot_hold() -> None:
    from amaranth.hdl import Signal

    from hw.primitives import mult18x18d

    m = Module()
    with pytest.raises(ValueError, match="^" + re.escape(
            "MULT18X18D operands are at most 18 bits, not 19") + "$"):
        mult18x18d(m, Signal(19), Signal(8), "wide")
    with pytest.raises(ValueError, match="^" + re.escape(
            "MULT18X18D products are 1 to 36 bits, not 37") + "$"):
        mult18x18d(m, Signal(16), Signal(16), "long", width=37)
