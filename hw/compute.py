"""The compute module: LOAD UOP / LOAD ACC, GEMM, ALU and FINISH.

Micro-op pipeline (one stage per cycle, micro-op issued in stage 0)::

    s-1 read uop[u] (two lanes: u and u + 1)
    s0  uop registered out of the buffer             (issue; the decode cycle issues the first)
    s1  dst/src/wgt = uop fields + loop bases       -> registered; GEMM: read inp[src], wgt[wgt]
    s2  GEMM: read data registered                  ALU: read acc[src]
    s3  GEMM: operands registered                   ALU: read acc[dst], acc[src] registered
    s4  GEMM: multiply, products registered,        ALU: acc[dst] registered
              read acc[dst]
    s5  GEMM: adder tree and acc[dst] registered    ALU: operands (forwarded) registered
    s6  GEMM: accumulate (acc forwarded from s7,    ALU: operation, result registered
              s8), result registered
    s7  GEMM: write acc[dst], out[dst]              ALU: (MUL: partial sums added), result
                                                         registered
    s8                                              ALU: write acc[dst], out[dst]

Where ``gemm.depth`` leaves room (:func:`hw.params.gemm_deep`: 5 at ``gemm.ii`` 1) the GEMM's
products are registered once more in s5 and everything after them is a stage later: adder tree
in s6, acc[dst] read in s5 and registered in s6, accumulate in s7, write in s8.

The first micro-op of an instruction is read in the cycle before its decode, from the
instruction then in front of the command queue (``DepControl.seen``); when that was another
instruction, it is read in the decode cycle and issues a cycle later (``accel.machine.costs``).

MUL registers its partial products in s6 and adds them in s7 (:class:`AluLane`): one multiplier
block per lane instead of four, and the LUT cross terms' adder tree split between the two stages.

The GEMM reads ``acc[dst]`` three cycles before writing it: the result of the micro-op three
ahead, written at the read's edge, is taken from the write port's data (``acc_bypass``: the acc
port is not transparent), and the results of the two just ahead are forwarded, so no
read-after-write hazard exists at one micro-op per cycle (a reset from acc reads and forwards
its source the same way). The ALU reads twice through the same port when its operand is an acc
tile, so such an instruction issues every other cycle at least; one with an immediate reads
once and issues every cycle at ``alu.ii`` 1 (``accel.machine.costs.alu_ii``). An operand read
before a micro-op two to five ahead wrote it is forwarded from that one's result; the one just
ahead (possible only at ``alu.ii`` 1) is still forming its result, so fsim rejects an immediate
operation whose consecutive micro-ops write one tile at that interval. An instruction of ``n``
micro-ops takes ``1 + n * ii + depth`` cycles (``accel.machine.costs``): the last micro-op is
issued ``(n - 1) * ii`` cycles after decode,
its result is formed 6 (ALU: 7) cycles later and written at the end of the next
(:func:`hw.params.writeback_stage`), and the module waits out the rest of the drain. At
the shortest depths the last result is written two cycles after the instruction's last
(:data:`hw.params.WRITE_AFTER_LAST`): nothing reads it earlier.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from accel.machine.isa import AluOp, MemType, Opcode
from hw.control import CommandUnit, DepControl
from hw.dma import LoadEngine, mem_predecode
from hw.dram import dram_port
from hw.lutmul import carry_save, compress_lut4, mul_low_lut_parts, tree_sum
from hw.params import RtlParams, writeback_stage
from hw.primitives import family_of, mult18x18d
from hw.queues import token_stream
from hw.sram import BufferRead, BufferWrite, SramBuffer, late_mux

__all__ = ["ALU_PICK", "COMPUTE_PRE", "CROSS_PARTS", "AluLane", "Compute", "GemmCore",
           "alu_op", "alu_pick", "compute_predecode", "mul_low_cross_parts", "uop_read_lanes"]

CROSS_PARTS = 4
"""Partial sums of MUL's LUT cross terms (ECP5's netlist) registered in stage 5 and added in
stage 6: the 16 radix-4 Booth addends' first two adder levels are before the register; after
it the four partial sums and the low product's upper half are compressed to two in LUTs
(:func:`carry_save`, the upper half joining in the last level, see :class:`AluLane`) and added
by one adder."""


COMPUTE_PRE = data.StructLayout({
    "alu": 1,       # ALU (else the loop fields are GEMM's)
    "loop": 1,      # GEMM or ALU
    "load": 1,      # LOAD (UOP or ACC)
    "finish": 1,    # FINISH
    "empty": 1,     # a loop with no micro-op to issue: uop_end == uop_bgn or a zero count
    "one": 1,       # uop_bgn + 1 == uop_end: a kernel of one micro-op
    "two": 1,       # uop_bgn + 2 == uop_end
    "in1": 1,       # iter_in == 1
    "out1": 1,      # iter_out == 1
    "in2": 1,       # iter_in == 2
    "out2": 1,      # iter_out == 2
    "zero": 1,      # a LOAD that moves nothing (:func:`hw.dma.mem_predecode`)
})
"""What the compute command queue stores beside each instruction (:func:`compute_predecode`):
the decode's compares of the instruction's fields, done as the instruction arrives in fetch's
buffer (:class:`~hw.fetch.Fetch`'s ``predecode``)."""


def compute_predecode(insn: object) -> object:
    """The :data:`COMPUTE_PRE` bits of an instruction (a view of ``RtlParams.insn_layout``)."""
    opcode = insn.raw[:3]
    alu = opcode == int(Opcode.ALU)

    def field(name: str) -> object:
        return Mux(alu, getattr(insn.alu, name), getattr(insn.gemm, name))

    bgn, end = field("uop_bgn"), field("uop_end")
    n_out, n_in = field("iter_out"), field("iter_in")
    bits = {
        "alu": alu,
        "loop": alu | (opcode == int(Opcode.GEMM)),
        "load": opcode == int(Opcode.LOAD),
        "finish": opcode == int(Opcode.FINISH),
        "empty": (end == bgn) | (n_out == 0) | (n_in == 0),
        "one": bgn + 1 == end,
        "two": bgn + 2 == end,
        "in1": n_in == 1,
        "out1": n_out == 1,
        "in2": n_in == 2,
        "out2": n_out == 2,
        "zero": mem_predecode(insn),
    }
    return Cat(*(bits[name] for name in COMPUTE_PRE.members))


def _starts_loop(bits: Value) -> Value:
    """From an instruction's predecoded bits: a GEMM or ALU with micro-ops to issue."""
    pre = COMPUTE_PRE(bits)
    return pre.loop & ~pre.empty


def _starts_load(bits: Value) -> Value:
    """From an instruction's predecoded bits: a LOAD (of the micro-op or acc buffer)."""
    return COMPUTE_PRE(bits).load


ALU_PICK = {"a": 0, "value": 1, "shr": 2, "shl": 3, "sign": 4, "zero": 5}
"""What a lane's other operations' result is, one stage after the operands
(:func:`alu_op`'s ``pick``): ``a``, ``value``, the right or left shift, ``a``'s sign, or 0."""


def alu_op(m: Module, op: object, a: object, b: object) -> dict[str, Value]:
    """MIN/MAX/ADD/SHR on 32-bit signed operands (``sim.functional.alu_apply`` semantics) as
    the parts :class:`AluLane` registers, and :func:`alu_pick` then picks from in the next
    stage: ``value`` (ADD's sum, MIN/MAX's ``b``), ``shr`` and ``shl`` (the two shifts), and
    ``pick`` (an :data:`ALU_PICK` code, from the operation, the compare and ``b``'s range).

    Only the carry chains, the shifters and the picking code's compares lie between the
    operands and the registers; the 32-bit multiplexers that pick follow them. SHR by ``b``:
    arithmetic right shift by ``min(b, 31)`` when ``b >= 0`` (``b > 31`` leaves the sign),
    else left shift by ``-b`` (zero once ``-b >= 32``). Both shifters take their amounts
    straight from ``b``'s low bits, the left one by ``-b`` mod 32, which is ``~b[:5] + 1``
    where it is used (``b[:5] != 0``): ``a << 1`` shifted by ``~b[:5]``, with no negation
    in front of the shifter. ADD keeps the low 32 bits. MUL is not computed here
    (:class:`AluLane` builds it).
    """
    a = a.as_signed()
    b = b.as_signed()
    parts = {
        "value": Signal(32, name="alu_value"),
        "shr": Signal(32, name="shr_value"),
        "shl": Signal(32, name="shl_value"),
        "pick": Signal(range(len(ALU_PICK)), name="alu_pick"),
    }
    high_zero = Signal(name="shr_high_zero")        # b[5:32] all zeros: 0 <= b <= 31
    high_ones = Signal(name="shr_high_ones")        # b[5:32] all ones: -32 <= b <= -1
    less = Signal(name="alu_less")
    m.d.comb += [
        parts["value"].eq(Mux(op == int(AluOp.ADD), a + b, b)),
        parts["shr"].eq(a >> b[:5]),
        parts["shl"].eq((a << 1)[:32] << ~b[:5]),
        high_zero.eq(b[5:] == 0),
        high_ones.eq(b[5:] == (1 << 27) - 1),
        less.eq(a < b),
    ]
    pick = parts["pick"]
    with m.Switch(op):
        with m.Case(int(AluOp.MIN)):
            m.d.comb += pick.eq(Mux(less, ALU_PICK["a"], ALU_PICK["value"]))
        with m.Case(int(AluOp.MAX)):                # a == b: either
            m.d.comb += pick.eq(Mux(less, ALU_PICK["value"], ALU_PICK["a"]))
        with m.Case(int(AluOp.SHR)):
            with m.If(high_zero):
                m.d.comb += pick.eq(ALU_PICK["shr"])
            with m.Elif(~b[31]):
                m.d.comb += pick.eq(ALU_PICK["sign"])
            with m.Elif(high_ones & (b[:5] != 0)):
                m.d.comb += pick.eq(ALU_PICK["shl"])
            with m.Else():
                m.d.comb += pick.eq(ALU_PICK["zero"])
        with m.Default():                           # ADD (MUL's result is not picked here)
            m.d.comb += pick.eq(ALU_PICK["value"])
    return parts


def alu_pick(pick: Value, a: Value, value: Value, shr: Value, shl: Value) -> Value:
    """The other operations' result from :func:`alu_op`'s registered parts (and ``a``)."""
    sign = Cat(*([a[31]] * 32))
    return Mux(pick == ALU_PICK["a"], a,
               Mux(pick == ALU_PICK["value"], value,
                   Mux(pick == ALU_PICK["shr"], shr,
                       Mux(pick == ALU_PICK["shl"], shl,
                           Mux(pick == ALU_PICK["sign"], sign, 0)))))


def mul_low_cross_parts(m: Module, a: object, b: object) -> list[Signal]:
    """The cross terms of MUL's low 32 bits on ECP5, in LUTs: ``CROSS_PARTS`` partial sums of
    ``a[16:] * b[:16] + a[:16] * b[16:] mod 2**16`` (:func:`hw.lutmul.mul_low_lut_parts`, from
    a radix-4 Booth recoding of ``b``'s halves, the last levels of its adder tree left to the
    caller). With ``lo = a[:16] * b[:16]`` (one 18x18 multiplier block) the low 32 bits of
    ``a * b`` are ``lo + (cross << 16)``: ``a[16:] * b[16:]`` only reaches bits 32 and up, and
    signedness does not matter mod 2**32."""
    a = a.as_unsigned()
    b = b.as_unsigned()
    return mul_low_lut_parts(m, [(a[16:32], b[:16]), (a[:16], b[16:32])], 16, "mul_cross",
                             parts=CROSS_PARTS, booth=True)


class AluLane(wiring.Component):
    """One 32-bit ALU lane with a register stage: the result of ``op(a, b)`` one cycle later.

    The other operations register their parts (:func:`alu_op`: ADD's sum or MIN/MAX's ``b``,
    both shifts, which to take, and ``a``) and pick after the register (:func:`alu_pick`),
    so the stage holds a carry chain or a shifter, not the multiplexers behind them (the
    result is formed a stage after the operands either way); MUL registers its partial products
    and adds them after the register. Built for ECP5 (:func:`hw.primitives.family_of`) one lane
    costs one multiplier block (the 45F's 72 blocks then hold the default 1x8x8 GEMM array and
    its 8 ALU lanes): the cross terms are in LUTs (:func:`mul_low_cross_parts`), and the low
    product's register is the ``MULT18X18D``'s own output register
    (:func:`hw.primitives.mult18x18d`): with a fabric register the route out of the block
    (2.8-3.2 ns on the 45F) and the one into it from the operand registers (3.4-4.1 ns) were
    both in the stage, 11.1-11.3 ns in all.

    Ports
    -----
    op : In(3)
        :class:`~accel.machine.isa.AluOp`.
    a, b : In(signed(32))
        Operands (``acc[dst]`` and ``acc[src]`` or the immediate).
    result : Out(signed(32))
        ``sim.functional.alu_apply(op, a, b)`` of the operands of the previous cycle:
        ``product`` where ``mul`` is set, else ``other``.
    product : Out(signed(32))
        The MUL result, the last of the lane's outputs to settle (its upper half comes
        through an adder from the multiplier block).
    mul : Out(1)
        The operation was MUL (a register).
    other : Out(signed(32))
        The result of the other operations (from registers through the pick's multiplexers).

    ``product``, ``mul`` and ``other`` let the caller put the product behind the last of its
    own multiplexers rather than behind ``result``'s.
    """

    def __init__(self) -> None:
        super().__init__({
            "op": In(3),
            "a": In(signed(32)),
            "b": In(signed(32)),
            "result": Out(signed(32)),
            "product": Out(signed(32)),
            "mul": Out(1),
            "other": Out(signed(32)),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        parts = alu_op(m, self.op, self.a, self.b)
        parts_q = {k: Signal.like(v, name=f"{k}_q") for k, v in parts.items()}
        a_q = Signal(signed(32))
        mul_q = Signal()
        m.d.sync += [parts_q[k].eq(v) for k, v in parts.items()]
        m.d.sync += [
            a_q.eq(self.a),
            mul_q.eq(self.op == int(AluOp.MUL)),
        ]
        # MUL's low 32 bits are ``lo + (cross << 16)`` (:func:`mul_low_cross_parts`), both
        # registered and added after the register.
        a, b = self.a.as_unsigned(), self.b.as_unsigned()
        if family_of(platform) == "ecp5":
            lo_q = mult18x18d(m, a[:16], b[:16], "mul_lo", width=32,
                              input_registers=False, signed_operands=False)
            cross = mul_low_cross_parts(m, a, b)
            cross_q = [Signal(16, name=f"cross_q{k}") for k in range(len(cross))]
            m.d.sync += [q.eq(c) for q, c in zip(cross_q, cross, strict=True)]
            # One carry chain: the cross terms' partial sums and the low product's upper half
            # are compressed to two addends in LUTs first. Two chains in a row (the cross sum,
            # then the upper half) bounded the clock at 10.1 ns on the 45F, and three levels of
            # 3:2 compressors at 10.06 ns.
            # The upper half comes out of the multiplier block with 3.7-4.1 ns of route on
            # the 45F, so it passes one LUT (an instantiated 3:2 compressor, which Yosys's
            # mapper cannot fold deeper) in front of the chain; the cross terms, from fabric
            # registers placed beside their LUTs, pass three (column counters, a 3:2
            # compressor, then that one). With the upper half in the counters' level (two
            # LUTs) its paths into ``wdata`` were the worst at 1c9804f (10.17 ns, seed 2).
            # (As signals: a LUT's input bit of an expression would repeat the expression.)
            x, y = Signal(16, name="mul_cross_x"), Signal(16, name="mul_cross_y")
            m.d.comb += [v.eq(e) for v, e in zip((x, y), carry_save(cross_q, 16), strict=True)]
            total, carry = compress_lut4(m, x, y, lo_q[16:32], "mul_hi")
            high = (total + carry)[:16]
        else:
            # Elsewhere as products and a sum, for the synthesis tool to map to its family's
            # multipliers. Verilator's model of a lane is then about 75 instructions a cycle,
            # against about 680 for the LUT form above (tiny's model took 1.85 times as long
            # with it, see docs/notes/verilator-speed.md).
            lo_q = Signal(32, name="mul_lo_q")
            cross_q = Signal(16, name="cross_q")
            m.d.sync += [
                lo_q.eq(a[:16] * b[:16]),
                cross_q.eq(a[16:] * b[:16] + a[:16] * b[16:]),
            ]
            high = (lo_q[16:] + cross_q)[:16]
        m.d.comb += [
            self.product.eq(Cat(lo_q[:16], high)),
            self.mul.eq(mul_q),
            self.other.eq(alu_pick(parts_q["pick"], a_q, parts_q["value"], parts_q["shr"],
                                   parts_q["shl"])),
            self.result.eq(Mux(self.mul, self.product, self.other)),
        ]
        return m


class GemmCore(wiring.Component):
    """The ``batch x block_in x block_out`` int8 MAC array: products, then an adder tree.

    Four register stages: the buffers' read data (stage 2 -> 3), the operands (3 -> 4), the
    products (4 -> 5) and the dot products (5 -> 6). The read data is registered in the fabric
    next to the block RAMs, whose clock-to-out is long (5.8 ns on ECP5), so that the long
    routes to the multipliers spread over the chip start from flip-flops. Built for ECP5
    (:func:`hw.primitives.family_of`), each product is a ``MULT18X18D`` holding its operand and
    product registers (:func:`hw.primitives.mult18x18d`); elsewhere the operands are registered
    once more for the array and each product is a ``*``. Where the GEMM's depth allows
    (:func:`hw.params.gemm_deep`) the products are registered once more in the fabric (5 -> 6)
    and the adder tree has a stage of its own (6 -> 7): on ECP5 the route out of the
    multiplier blocks alone took 4.5-6.5 ns, and with three adder levels behind it in the same
    stage the dot products bounded the clock (12-13 ns on the 45F).

    Parameters
    ----------
    params
        RTL parameters of the config.

    Ports
    -----
    inp : In
        One inp tile, ``batch x block_in`` int8, element ``(b, k)`` at byte ``b * block_in + k``.
    wgt : In
        One wgt tile, ``block_out x block_in`` int8, ``(o, k)`` at byte ``o * block_in + k``.
    sums : Out
        Four cycles later (five when deep): ``batch x block_out`` dot products as int32,
        ``(b, o)`` at word ``b * block_out + o``.
    """

    def __init__(self, params: RtlParams) -> None:
        cfg = params.cfg
        self._shape = (cfg.batch, cfg.block_in, cfg.block_out)
        self._deep = params.gemm_deep
        self._lut_macs = cfg.gemm.lut_macs
        super().__init__({
            "inp": In(cfg.inp_tile_bytes * 8),
            "wgt": In(cfg.wgt_tile_bytes * 8),
            "sums": Out(cfg.batch * cfg.block_out * 32),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        batch, bi, bo = self._shape
        ecp5 = family_of(platform) == "ecp5"
        inp = Signal.like(self.inp, name="inp_rd")
        wgt = Signal.like(self.wgt, name="wgt_rd")
        m.d.sync += [inp.eq(self.inp), wgt.eq(self.wgt)]
        if not ecp5:
            inp_rd, wgt_rd = inp, wgt
            inp, wgt = Signal.like(self.inp, name="inp_q"), Signal.like(self.wgt, name="wgt_q")
            m.d.sync += [inp.eq(inp_rd), wgt.eq(wgt_rd)]
        sums = []
        first_lut = batch * bi * bo - self._lut_macs
        for b in range(batch):
            for o in range(bo):
                prods = []
                for k in range(bi):
                    x = inp.word_select(b * bi + k, 8).as_signed()
                    w = wgt.word_select(o * bi + k, 8).as_signed()
                    name = f"{b}_{o}_{k}"
                    if (b * bo + o) * bi + k >= first_lut:
                        prods.append(self._lut_mac(m, x, w, name, operands_registered=not ecp5))
                        continue
                    if ecp5:
                        prod = mult18x18d(m, x, w, f"mul_{name}")
                    else:
                        prod = Signal(signed(16), name=f"prod_{name}")
                        m.d.sync += prod.eq(x * w)
                    if self._deep:
                        prod_q = Signal(signed(16), name=f"prod_q_{name}")
                        m.d.sync += prod_q.eq(prod)
                        prod = prod_q
                    prods.append(prod)
                dot = Signal(signed(16 + (bi - 1).bit_length()), name=f"dot_{b}_{o}")
                m.d.sync += dot.eq(tree_sum(prods))
                sums.append(dot.as_signed())
        for i, dot in enumerate(sums):
            m.d.comb += self.sums.word_select(i, 32).eq(dot)
        return m

    def _lut_mac(self, m: Module, x: Value, w: Value, name: str,
                 operands_registered: bool) -> Signal:
        """One MAC's product from LUTs and carry chains (``gemm.lut_macs``), in the cycle a
        multiplier block's would be ready: the operands registered (as the block's input
        registers hold them, unless the array's operands already are), then the radix-4 Booth
        rows of :func:`hw.lutmul.mul_low_lut_parts` summed, on 16 bits (an int8 product's).
        Deep (:func:`hw.params.gemm_deep`), the rows' tree stops at two partial sums, registered,
        and the fabric register after it holds their sum: the tree spans two stages."""
        if not operands_registered:
            x_q = Signal(signed(8), name=f"lut_x_{name}")
            w_q = Signal(signed(8), name=f"lut_w_{name}")
            m.d.sync += [x_q.eq(x), w_q.eq(w)]
            x, w = x_q, w_q
        x16, w16 = Signal(16, name=f"lut_xs_{name}"), Signal(16, name=f"lut_ws_{name}")
        m.d.comb += [x16.eq(x), w16.eq(w)]  # sign-extended: the product mod 2**16
        parts = mul_low_lut_parts(m, [(x16, w16)], 16, f"lut_rows_{name}",
                                  parts=2 if self._deep else 1, booth=True)
        regs = [Signal(16, name=f"lut_prod_{name}_{i}") for i in range(len(parts))]
        m.d.sync += [r.eq(p) for r, p in zip(regs, parts, strict=True)]
        prod = Signal(signed(16), name=f"lut_prod_{name}")
        if self._deep:
            m.d.sync += prod.eq((regs[0] + regs[1])[:16])
        else:
            m.d.comb += prod.eq(regs[0])
        return prod


def uop_read_lanes(params: RtlParams) -> int:
    """Micro-ops one read of the micro-op buffer returns: two at least, so that the reader can
    pick the next while it issues one."""
    return max(2, params.buffers["uop"].lanes)


_FACTORS = ("dst_out", "dst_in", "src_out", "src_in", "wgt_out", "wgt_in")
"""The loop instruction's index factors: ``i * <k>_out + j * <k>_in`` is added to each micro-op's
index ``k``."""


@dataclass
class _Loop:
    """:class:`Compute`'s loop instruction (GEMM or ALU), as decoded and registered."""

    now: dict[str, Value]       # the loop fields in the decode cycle, from the instruction
    held: dict[str, Signal]     # the same registered at decode (``held["alu"]`` is ``alu_q``)
    reset_q: Signal             # GEMM: reset the acc elements
    from_acc_q: Signal | None   # ... by copying acc[src] (``gemm.reset_from_acc``; else None)
    op_q: Signal                # ALU: the operation, its immediate and whether to use it
    use_imm_q: Signal
    imm_q: Signal
    first: Signal               # a loop's decode cycle, with micro-ops to issue
    first_go: Signal            # ... whose first micro-op issues in it


@dataclass
class _Sequencer:
    """:class:`Compute`'s micro-op sequencer: its registers and what they are formed from."""

    state: dict[str, Signal]    # what ``_advance`` forms: wait, drain, loop counters, bases
    nw: dict[str, Signal]       # the loop fields in the decode cycle, as signals
    one_q: Signal               # the kernel is one micro-op long
    in1_q: Signal               # iter_in == 1
    wait_zero: Signal           # the issue waits no more


@dataclass
class _Stages:
    """:class:`Compute`'s micro-op pipeline by stage: a micro-op in it, and its indices."""

    valid: dict[int, Signal]    # v1, v2, ...
    dsts: dict[int, Signal]     # dst2, dst3, ...: acc index
    srcs: dict[int, Signal]     # src2, src3, src4: inp or acc index
    reads: dict[int, Signal]    # the GEMM's acc read index by stage, from ``arrive - 1`` on:
                                # dst, or src for a reset from acc (``gemm.reset_from_acc``)


@dataclass
class _Written:
    """:class:`Compute`'s registered acc/out write port and the results it wrote."""

    wdata: Signal               # the result written at the end of this cycle
    wdata2: Signal              # the one before
    w_valid: Signal
    w_dst: Signal


@dataclass
class _AluOut:
    """:class:`Compute`'s ALU lanes' outputs (:class:`AluLane`) for the micro-op in s7."""

    prod7: Signal               # the MUL results
    other7: Signal              # the other operations' results
    mul7: Signal                # it is a MUL


class Compute(CommandUnit):
    """The compute module with its uop and acc buffers.

    Parameters
    ----------
    params
        RTL parameters of the config.

    Ports
    -----
    cmd, issue, retire
        As for :class:`~hw.control.CommandUnit`.
    cmd_pre : In(COMPUTE_PRE)
        :func:`compute_predecode` of the queue's head.
    l2c, s2c : In(token stream)
        Tokens popped (``pop_prev`` from load, ``pop_next`` from store).
    c2l, c2s : Out(token stream)
        Tokens pushed (``push_prev`` to load, ``push_next`` to store).
    c2l_room, c2s_room : In
        ``room`` of the queues this module feeds.
    c2l_room_next : In
        ``room_next`` of the ``c2l`` queue (the ``c2s`` hold ends when ``c2l`` has room).
    c2s_hold : Out
        The ``c2s`` token pushed with a blocked ``c2l`` push is invisible (a register).
    dram : Out(DramPort)
        DRAM reads of LOAD UOP / LOAD ACC.
    rd_inp, rd_wgt : Out(BufferRead)
        GEMM operand reads.
    wr_acc_copy : Out(BufferWrite)
        With ``store.postproc``: every acc write, for the store's copy of the acc buffer.
    wr_out : Out(BufferWrite)
        Low 8 bits of every result.
    finish : Out
        FINISH retires at the end of this cycle.
    """

    predecode = staticmethod(compute_predecode)
    """What the command queue stores beside each instruction (``cmd_pre``)."""

    def __init__(self, params: RtlParams) -> None:
        super().__init__(params, COMPUTE_PRE, {
            "l2c": In(token_stream()),
            "s2c": In(token_stream()),
            "c2l": Out(token_stream()),
            "c2s": Out(token_stream()),
            "c2l_room": In(1),
            "c2s_room": In(1),
            "c2l_room_next": In(1),
            "c2s_hold": Out(1),
            "dram": Out(dram_port(params)),
            "rd_inp": Out(BufferRead(params.buffers["inp"])),
            "rd_wgt": Out(BufferRead(params.buffers["wgt"])),
            "wr_out": Out(BufferWrite(params.buffers["out"])),
            **({"wr_acc_copy": Out(BufferWrite(params.buffers["acc"]))}
               if params.cfg.store.postproc else {}),
            "finish": Out(1),
        })

    def _uop_fetch(self, m: Module, buf: SramBuffer, wr: object, addr: Signal,
                   sel: Signal) -> Value:
        """The micro-op at ``addr + sel`` (read in this cycle), as seen in the next one.

        The buffer registers its write port (``SramBuffer(write_register=True)``): a write
        lands at the end of the cycle after it is presented, and the read port is not
        transparent. LOAD UOP writes until its last cycle and the next instruction's first
        micro-op is read then, or in the cycle after, so the writes presented in this cycle
        and the one before, which the read cannot see, are forwarded from registers in the
        next cycle instead (the newer first).
        """
        g = buf.geom
        # The writes and the read address are registered, and compared in the next cycle,
        # beside the block RAM's read (whose clock-to-out is longer than the compares): the
        # address comes from the instruction in front through the command queue, and the write
        # from the load engine's counters, both late in this cycle. ``sel`` (late too: it
        # depends on the decode signal) picks the lane after the register, as for the read data.
        # A write's address is kept as ``lanes + 1`` registers, ``addr - 1 .. addr + lanes - 1``
        # (lane ``i`` holds ``addr + i``), so that the compares below are between registers,
        # with no adder's carry chain in front of them (at 07ad499 the lane adders led the
        # worst path at seeds 1 and 2, 10.22 and 10.75 ns on the 45F). The write port's
        # address arrives early in its cycle (under 4 ns there), so the adders fit before the
        # first register.
        writes = []                     # (enables, addresses, data): this cycle's, the one before
        for age in (1, 2):
            writes.append((Signal(g.lanes, name=f"uop_wr_en_q{age}"),
                           [Signal(g.addr_bits, name=f"uop_wr_addr_q{age}_{d + 1}")
                            for d in range(-1, g.lanes)],
                           Signal(g.lanes * g.elem_bits, name=f"uop_wr_data_q{age}")))
        (en1, addrs1, data1), (en2, addrs2, data2) = writes
        addr_q = Signal(g.addr_bits, name="uop_addr_q")
        sel_q = Signal(name="uop_sel_q")
        m.d.sync += [en1.eq(wr.en), data1.eq(wr.data), en2.eq(en1), data2.eq(data1),
                     addr_q.eq(addr), sel_q.eq(sel)]
        m.d.sync += [a.eq((wr.addr + d)[:g.addr_bits])
                     for a, d in zip(addrs1, range(-1, g.lanes), strict=True)]
        m.d.sync += [a2.eq(a1) for a2, a1 in zip(addrs2, addrs1, strict=True)]
        # Which write lane, if any, holds the micro-op wanted (``addr + sel``): formed from
        # registers only, beside the block RAM's read, and kept (``keep``) as its own logic so
        # that the RAM's data, which Yosys's mapper sees as arriving no later than a
        # register's, passes only the last LUT (the buffer's, see below) rather than the
        # compares' LUT levels.
        # Each write lane is compared against ``addr_q`` and ``addr_q + 1`` both, and ``sel_q``
        # picks after the compares (it does not go through an adder's carry chain first).
        hit = Signal(name="uop_fwd_hit", attrs={"keep": 1})
        fwd = Signal(g.elem_bits, name="uop_fwd", attrs={"keep": 1})
        word: object = Const(0, g.elem_bits)
        hits = []
        for en, w_addrs, w_data in reversed(writes):        # the older first: the newer wins
            for i in range(g.lanes):
                at = w_addrs[i + 1] == addr_q                   # addr + i
                after = w_addrs[i] == addr_q                    # addr + i - 1
                lane_hit = en[i] & Mux(sel_q, after, at)
                word = Mux(lane_hit, w_data.word_select(i, g.elem_bits), word)
                hits.append(lane_hit)
        m.d.comb += [hit.eq(Cat(*hits).any()), fwd.eq(word)]
        # The buffer picks the lane itself (``SramBuffer(pick=True)``: its bank select formed
        # from registers) and takes the forwarded micro-op in the same LUT (``force``), so each
        # bit of the RAMs' data passes one LUT of four inputs.
        m.d.comb += [buf.pick.eq(sel), buf.force.eq(hit), buf.forced.eq(fwd)]
        return buf.picked[:self._p.cfg.uop_bits]

    def elaborate(self, platform: object) -> Module:
        m = Module()
        family = family_of(platform)
        # The parts add their statements in this order, which the generated Verilog's names
        # and numbering follow: keep it.
        ctrl, eng, uop_buf, acc_buf, core = self._submodules(m)
        pre, is_load, is_loop, seq_last = self._decode(m, ctrl, eng)
        # ---------------------------------------------------------------- sequencer
        loop = self._loop_insn(m, ctrl, pre, is_load, is_loop)
        seq = self._loop_counters(m, ctrl, pre, is_loop, loop)
        issue = self._sequence(m, ctrl, pre, loop, seq, seq_last)
        # ---------------------------------------------------------------- pipeline
        uop = self._uop_read(m, uop_buf, eng, pre, loop, seq)
        stages, b1 = self._index_stages(m, uop, issue, loop, seq)
        self._gemm_operands(m, core, uop, b1)
        wr = self._write_registers(m)
        arrive, acc_data, acc_seen = self._acc_read_port(m, acc_buf, loop, stages, wr)
        self._late_stages(m, stages, arrive)
        gemm_acc6, gemm_hit7, gemm_hit8 = self._gemm_acc_read(m, stages, arrive, acc_seen)
        a6, b6, out = self._alu_operands(m, loop, stages, wr, acc_data, acc_seen, family)
        self._alu_lanes(m, loop, a6, b6, out)
        wb_valid, wb_dst = self._result_dst(m, loop, stages, arrive)
        gemm_acc, gemm_sum = self._gemm_accumulate(m, core, wr, gemm_acc6, gemm_hit7, gemm_hit8)
        self._write_port(m, eng, acc_buf, loop, wr, out, wb_valid, wb_dst, gemm_acc, gemm_sum,
                         family)
        return m

    def _submodules(self, m: Module
                    ) -> tuple[DepControl, LoadEngine, SramBuffer, SramBuffer, GemmCore]:
        """The dependency control, the load engine of LOAD UOP / LOAD ACC, the uop and acc
        buffers and the GEMM core, wired to this module's queues, tokens and DRAM port."""
        p = self._p
        m.submodules.control = ctrl = DepControl(
            p.insn_layout, pops=("pop_prev", "pop_next"), pushes=("push_prev", "push_next"),
            token_depth=p.token_depth, pre_bits=COMPUTE_PRE.size,
            start_when={"loop": _starts_loop, "load": _starts_load})
        m.submodules.engine = eng = LoadEngine(p, (MemType.UOP, MemType.ACC))
        m.submodules.uop_buffer = uop_buf = SramBuffer(p.buffers["uop"], transparent=False,
                                                       read_lanes=uop_read_lanes(p),
                                                       write_register=True, pick=True)
        m.submodules.acc_buffer = acc_buf = SramBuffer(p.buffers["acc"], transparent=False)
        m.submodules.gemm_core = core = GemmCore(p)
        wiring.connect(m, wiring.flipped(self.cmd), ctrl.cmd)
        wiring.connect(m, wiring.flipped(self.l2c), ctrl.pop_prev)
        wiring.connect(m, wiring.flipped(self.s2c), ctrl.pop_next)
        wiring.connect(m, ctrl.push_prev, wiring.flipped(self.c2l))
        wiring.connect(m, ctrl.push_next, wiring.flipped(self.c2s))
        wiring.connect(m, eng.dram, wiring.flipped(self.dram))
        wiring.connect(m, eng.wr_uop, uop_buf.w)
        m.d.comb += [
            ctrl.push_prev_room.eq(self.c2l_room),
            ctrl.push_next_room.eq(self.c2s_room),
            ctrl.push_prev_room_next.eq(self.c2l_room_next),
            self.c2s_hold.eq(ctrl.hold),
        ]
        return ctrl, eng, uop_buf, acc_buf, core

    def _decode(self, m: Module, ctrl: DepControl, eng: LoadEngine
                ) -> tuple[data.View, Signal, Signal, Signal]:
        """The decode: the predecoded bits (``pre``, ``is_load``, ``is_loop``), LOAD's start of
        the load engine, FINISH, and ``last`` from the engine or the sequencer (``seq_last``)."""
        insn = ctrl.insn
        # The decode's compares of the instruction come predecoded from the command queue.
        pre = Signal(COMPUTE_PRE)
        start = ctrl.start
        is_load = Signal()
        is_loop = Signal()
        m.d.comb += [
            ctrl.cmd_pre.eq(self.cmd_pre),
            pre.eq(ctrl.insn_pre),
            is_load.eq(pre.load),
            is_loop.eq(pre.loop),
            # ``start`` comes late (command queue -> tokens -> start) and fans out to the
            # load engine's state, request and address enables: the control forms the LOAD's
            # start as its own two products rather than ``start`` and'ed with the flag.
            eng.start.eq(ctrl.start_load),                # start & is_load
            eng.idle.eq(~ctrl.busy),
            eng.insn.eq(insn.mem),
            self.finish.eq(start & pre.finish),
        ]
        seq_last = Signal()
        m.d.comb += [
            ctrl.last.eq(eng.last | seq_last),
            self.issue.eq(start),
            self.retire.eq(ctrl.retire),
        ]
        return pre, is_load, is_loop, seq_last

    def _loop_widths(self) -> dict[str, int]:
        """Bits of each loop field (:class:`_Loop`'s ``held``)."""
        cfg = self._p.cfg
        acc_bits, wgt_bits = cfg.acc_index_bits, cfg.wgt_index_bits
        src_bits = cfg.src_index_bits
        return {"bgn": cfg.uop_index_bits + 1, "end": cfg.uop_index_bits + 1,
                "n_out": cfg.isa.iter_bits, "n_in": cfg.isa.iter_bits,
                "dst_out": acc_bits, "dst_in": acc_bits, "src_out": src_bits,
                "src_in": src_bits, "wgt_out": wgt_bits, "wgt_in": wgt_bits, "alu": 1}

    def _loop_insn(self, m: Module, ctrl: DepControl, pre: data.View, is_load: Signal,
                   is_loop: Signal) -> _Loop:
        """The loop fields of a GEMM or ALU and its other fields, registered at decode; the
        control's ``single``, and ``first`` and ``first_go`` of a loop's decode cycle."""
        insn = ctrl.insn
        start = ctrl.start
        # The loop fields sit at different offsets in the GEMM and ALU formats. In the decode
        # cycle they come from the instruction (``now``), later from registers (``held``).
        g, a = insn.gemm, insn.alu
        is_alu_now = Signal()
        m.d.comb += is_alu_now.eq(pre.alu)
        # ``bgn`` is the micro-op buffer's read address before decode (``_uop_read``), a block
        # RAM's address port: the held instruction's is registered on its own, loaded while
        # none is held (so in the cycle it is taken), so that the address depends on the
        # queue's head, ``held`` and that register, not on the held instruction's predecoded
        # bits through the control's multiplexers.
        head_pre = Signal(COMPUTE_PRE)
        head = self.cmd.payload
        head_bgn = Signal(self._loop_widths()["bgn"], name="head_bgn")
        held_bgn = Signal.like(head_bgn, name="held_bgn")
        m.d.comb += [head_pre.eq(self.cmd_pre),
                     head_bgn.eq(Mux(head_pre.alu, head.alu.uop_bgn, head.gemm.uop_bgn))]
        with m.If(~ctrl.held):
            m.d.sync += held_bgn.eq(head_bgn)
        now: dict[str, object] = {
            "bgn": Mux(ctrl.held, held_bgn, head_bgn),
            **{name: Mux(is_alu_now, getattr(a, field), getattr(g, field))
               for name, field in (("end", "uop_end"), ("n_out", "iter_out"),
                                   ("n_in", "iter_in"), ("dst_out", "dst_factor_out"),
                                   ("dst_in", "dst_factor_in"), ("src_out", "src_factor_out"),
                                   ("src_in", "src_factor_in"))},
        }
        now["wgt_out"] = Mux(is_alu_now, 0, g.wgt_factor_out)
        now["wgt_in"] = Mux(is_alu_now, 0, g.wgt_factor_in)
        now["alu"] = is_alu_now
        held = {k: Signal(w, name=f"{k}_q") for k, w in self._loop_widths().items()}

        reset_q = Signal()
        from_acc_q = (Signal(name="from_acc_q") if self._p.cfg.gemm.reset_from_acc
                      else None)
        op_q = Signal(3)
        use_imm_q = Signal()
        imm_q = Signal(signed(32))
        with m.If(start & is_loop):
            m.d.sync += [held[k].eq(v) for k, v in now.items()]
            m.d.sync += [
                reset_q.eq(g.reset & ~is_alu_now),
                op_q.eq(a.alu_op),
                use_imm_q.eq(a.use_imm & is_alu_now),
                imm_q.eq(a.imm),
            ]
            if from_acc_q is not None:
                m.d.sync += from_acc_q.eq(g.from_acc & ~is_alu_now)
        empty = Signal()
        m.d.comb += empty.eq(pre.empty)
        # One-cycle instructions: FINISH, an empty loop, a LOAD of zero size.
        m.d.comb += ctrl.single.eq(Mux(is_load, pre.zero, ~is_loop | empty))
        first = Signal()
        m.d.comb += first.eq(ctrl.start_loop)     # start & is_loop & ~empty
        # The micro-op buffer is read a cycle ahead of each issue (see the pipeline below). The
        # first micro-op was read in the cycle before decode, at the ``bgn`` of the instruction
        # then in front (``ctrl.seen``): it issues in the decode cycle (``first_go``). Otherwise
        # (the instruction arrived in an empty queue this cycle, or the one before it took a
        # single cycle) it is read now and issues a cycle later (the
        # ``accel.machine.costs.UOP_PREFETCH_MISS_CYCLES`` of the timing simulator).
        first_go = Signal()
        m.d.comb += first_go.eq(first & ctrl.seen)
        return _Loop(now, held, reset_q, from_acc_q, op_q, use_imm_q, imm_q, first, first_go)

    def _loop_counters(self, m: Module, ctrl: DepControl, pre: data.View, is_loop: Signal,
                       loop: _Loop) -> _Sequencer:
        """The sequencer's registers: the issue's wait, the drain, the loop counters and the
        bases, with the loop fields of the decode cycle (``nw``) they start from."""
        cfg = self._p.cfg
        widths = self._loop_widths()
        alu_ii = max(cfg.alu.ii, 2)             # with an acc operand (costs.alu_ii)
        max_ii = max(cfg.gemm.ii, alu_ii)
        issuing = Signal()
        wait = Signal(range(max_ii))
        drain = Signal(range(max(cfg.gemm.ii + cfg.gemm.depth, alu_ii + cfg.alu.depth)))
        draining = Signal()
        # Loop counters and the bases i * factor_out, j * factor_in.
        u_q = Signal(widths["bgn"])
        u_last_q = Signal()         # u_q + 1 == end: u_q is the kernel's last micro-op
        j_last_q = Signal()         # j_q + 1 == iter_in, likewise
        i_last_q = Signal()         # i_q + 1 == iter_out
        j_q = Signal(cfg.isa.iter_bits)
        i_q = Signal(cfg.isa.iter_bits)
        base_q = {k: Signal(widths[k], name=f"base_{k}_q") for k in _FACTORS}
        nw = {k: Signal(w, name=f"{k}_now") for k, w in widths.items()}
        m.d.comb += [nw[k].eq(loop.now[k]) for k in widths]
        one_q = Signal()
        in1_q = Signal()
        with m.If(ctrl.start & is_loop):
            m.d.sync += [one_q.eq(pre.one), in1_q.eq(pre.in1)]
        wait_zero = Signal()
        m.d.comb += wait_zero.eq(wait == 0)
        state: dict[str, Signal] = {
            "wait": wait, "issuing": issuing, "draining": draining, "drain": drain, "u_q": u_q,
            "u_last_q": u_last_q, "j_q": j_q, "i_q": i_q, "j_last_q": j_last_q,
            "i_last_q": i_last_q, **{f"base_{k}": base_q[k] for k in _FACTORS},
        }
        return _Sequencer(state, nw, one_q, in1_q, wait_zero)

    def _advance(self, ctrl: DepControl, pre: data.View, loop: _Loop, seq: _Sequencer,
                 decode: bool) -> dict[str, Value]:
        """The next value of each of the sequencer's registers (``seq.state``), as in a loop's
        decode cycle (``decode``: from the instruction) or as in any other (from registers)."""
        cfg = self._p.cfg
        held, nw, state, wait_zero = loop.held, seq.nw, seq.state, seq.wait_zero
        wait, issuing = state["wait"], state["issuing"]
        draining, drain = state["draining"], state["drain"]
        u_q, u_last_q = state["u_q"], state["u_last_q"]
        j_q, j_last_q = state["j_q"], state["j_last_q"]
        i_q, i_last_q = state["i_q"], state["i_last_q"]
        base_q = {k: state[f"base_{k}"] for k in _FACTORS}
        if decode:
            # The first micro-op issues now (``first_go``) or, when it was not read in
            # the cycle before, in the next cycle from the registers (``late`` below).
            go = ctrl.seen
            alu, bgn = nw["alu"], nw["bgn"]
            u_wrap, j_wrap, i_wrap = pre.one, pre.in1, pre.out1
            u_next, u_last_next = bgn + 1, pre.two
            j, i, j_next, i_next = Const(0), Const(0), Const(1), Const(1)
            j_last_next, i_last_next, one, in1 = pre.in2, pre.out2, pre.one, pre.in1
            base = {k: Const(0) for k in _FACTORS}
            stepped = {k: Value.cast(nw[k]) for k in _FACTORS}           # base + factor
        else:
            go = issuing & wait_zero
            alu, bgn = held["alu"], held["bgn"]
            u_wrap, j_wrap, i_wrap = u_last_q, j_last_q, i_last_q
            u_next, u_last_next = u_q + 1, u_q + 2 == held["end"]         # of u_next
            j, i, j_next, i_next = j_q, i_q, j_q + 1, i_q + 1
            j_last_next = j_q + 2 == held["n_in"]                           # of j_next
            i_last_next = i_q + 2 == held["n_out"]                          # of i_next
            one, in1 = seq.one_q, seq.in1_q                                 # of j = 0
            base = {k: Value.cast(base_q[k]) for k in _FACTORS}
            stepped = {k: base_q[k] + held[k] for k in _FACTORS}
        last = u_wrap & j_wrap & i_wrap
        # The ALU's interval (``accel.machine.costs.alu_ii``): at ``alu.ii`` 1 an immediate
        # operation issues every cycle, one with an acc operand every other (two reads).
        ii_alu: Value | int = cfg.alu.ii
        if cfg.alu.ii < 2:
            use_imm = ctrl.insn.alu.use_imm if decode else loop.use_imm_q
            ii_alu = Mux(use_imm, cfg.alu.ii, 2)
        # The kernel goes on, or wraps and the inner loop steps, or both wrap and the
        # outer loop steps.
        kernel = {"u_q": u_next, "u_last_q": u_last_next, "j_q": j, "i_q": i,
                  "j_last_q": j_wrap, "i_last_q": i_wrap,
                  **{f"base_{k}": base[k] for k in _FACTORS}}
        inner = {"u_q": bgn, "u_last_q": one, "j_q": j_next, "i_q": i,
                 "j_last_q": j_last_next, "i_last_q": i_wrap,
                 **{f"base_{k}": stepped[k] if k.endswith("_in") else base[k]
                    for k in _FACTORS}}
        outer = {"u_q": bgn, "u_last_q": one, "j_q": Const(0), "i_q": i_next,
                 "j_last_q": in1, "i_last_q": i_last_next,
                 **{f"base_{k}": Const(0) if k.endswith("_in") else stepped[k]
                    for k in _FACTORS}}
        issued = {name: Mux(~u_wrap, v, Mux(~j_wrap, inner[name], outer[name]))
                  for name, v in kernel.items()}
        issued.update({
            "wait": Mux(alu, ii_alu, cfg.gemm.ii) - 1,
            "issuing": ~last,
            "draining": last | draining,
            "drain": Mux(last, Mux(alu, ii_alu + cfg.alu.depth - 1,
                                   cfg.gemm.ii + cfg.gemm.depth - 1), drain),
        })
        if decode:
            late = {name: Value.cast(sig) for name, sig in state.items()}
            late.update({"u_q": nw["bgn"], "u_last_q": pre.one, "j_q": Const(0),
                         "i_q": Const(0), "j_last_q": pre.in1, "i_last_q": pre.out1,
                         "issuing": Const(1), "wait": Const(0),
                         **{f"base_{k}": Const(0) for k in _FACTORS}})
            return {name: Mux(go, issued[name], late[name]) for name in state}
        idle = {name: Value.cast(sig) for name, sig in state.items()}
        idle["wait"] = Mux(issuing, wait - 1, wait)
        return {name: Mux(go, issued[name], idle[name]) for name in state}

    def _sequence(self, m: Module, ctrl: DepControl, pre: data.View, loop: _Loop,
                  seq: _Sequencer, seq_last: Signal) -> Signal:
        """The sequencer's registers stepped (:meth:`_advance`), its drain ending the
        instruction (``seq_last``); returns ``issue``, a micro-op issued in this cycle."""
        state, wait_zero = seq.state, seq.wait_zero
        issuing, draining, drain = state["issuing"], state["draining"], state["drain"]
        # ``first`` comes late in the decode cycle (command queue -> tokens -> start), so the
        # sequencer's next state is formed twice, as in a loop instruction's decode cycle
        # (from the instruction, the loop counters at their start values) and as in any other
        # cycle (from the registers), and ``first`` picks one of the two as the last
        # multiplexer in front of each register.
        advance_decode = self._advance(ctrl, pre, loop, seq, decode=True)
        advance_run = self._advance(ctrl, pre, loop, seq, decode=False)

        # Both are kept (Yosys ``keep``) as logic of their own, so that the mapper leaves
        # ``first`` a single LUT in front of each register rather than spread through the sums
        # and compares behind it.
        for name, sig in state.items():
            at_decode = Signal.like(sig, name=f"{name}_at_decode", attrs={"keep": 1})
            running = Signal.like(sig, name=f"{name}_running", attrs={"keep": 1})
            m.d.comb += [at_decode.eq(advance_decode[name]), running.eq(advance_run[name])]
            m.d.sync += sig.eq(Mux(loop.first, at_decode, running))
        issue = Signal()
        m.d.comb += issue.eq(loop.first_go | (issuing & wait_zero))
        with m.If(draining):
            with m.If(drain == 0):
                m.d.comb += seq_last.eq(1)
                m.d.sync += draining.eq(0)
            with m.Else():
                m.d.sync += drain.eq(drain - 1)
        return issue

    def _uop_read(self, m: Module, uop_buf: SramBuffer, eng: LoadEngine, pre: data.View,
                  loop: _Loop, seq: _Sequencer) -> data.View:
        """The micro-op buffer's read, a cycle ahead of the issue (address and lane from the
        sequencer); returns ``uop``, the micro-op registered out of it in the issue cycle."""
        p = self._p
        held, nw, wait_zero = loop.held, seq.nw, seq.wait_zero
        issuing, u_q, u_last_q = seq.state["issuing"], seq.state["u_q"], seq.state["u_last_q"]
        # Micro-op fetch, a cycle ahead of the issue: the buffer is read in the cycle before,
        # and the micro-op registered out of it in the issue cycle, so stage 1's index adders
        # start from flip-flops rather than from a block RAM's output. A read returns two
        # consecutive micro-ops, ``addr`` and ``addr + 1``, so the address is formed from
        # registers only and the late ``first`` only picks the lane (``sel``):
        # - not running: the ``bgn`` of the instruction in front (lane 0), for its decode
        #   cycle; in the decode cycle itself the same read serves the second micro-op
        #   (lane 1, or lane 0 when the kernel is one micro-op long);
        # - running: the next micro-op is ``u_q`` (waiting) or follows ``u_q`` (issuing:
        #   lane 1 of ``u_q``, or ``bgn`` once the kernel wraps).
        uop_addr = Signal(p.buffers["uop"].addr_bits)
        sel = Signal()
        m.d.comb += [
            uop_addr.eq(Mux(issuing, Mux(wait_zero & u_last_q, held["bgn"], u_q), nw["bgn"])),
            uop_buf.r.addr.eq(uop_addr),
            sel.eq(Mux(loop.first_go, ~pre.one, issuing & wait_zero & ~u_last_q)),
        ]
        uop = Signal(p.uop_layout)
        m.d.sync += uop.eq(self._uop_fetch(m, uop_buf, eng.wr_uop, uop_addr, sel))
        return uop

    def _index_stages(self, m: Module, uop: data.View, issue: Signal, loop: _Loop,
                      seq: _Sequencer) -> tuple[_Stages, dict[str, Signal]]:
        """Stages 1-7: each micro-op's valid bit, its indices (the uop's fields plus the loop's
        bases, ``b1``, added in s2) and their copies down the pipeline; returns them and ``b1``."""
        cfg = self._p.cfg
        acc_bits, wgt_bits = cfg.acc_index_bits, cfg.wgt_index_bits
        src_bits = cfg.src_index_bits
        first = loop.first
        base_q = {k: seq.state[f"base_{k}"] for k in _FACTORS}
        v1, v2, v3, v4, v5 = (Signal(name=f"v{s}") for s in range(1, 6))
        b1 = {k: Signal(acc_bits if k == "dst" else src_bits if k == "src" else wgt_bits,
                        name=f"b1_{k}") for k in ("dst", "src", "wgt")}
        m.d.sync += [
            v1.eq(issue),
            b1["dst"].eq(Mux(first, 0, base_q["dst_out"] + base_q["dst_in"])),
            b1["src"].eq(Mux(first, 0, base_q["src_out"] + base_q["src_in"])),
            b1["wgt"].eq(Mux(first, 0, base_q["wgt_out"] + base_q["wgt_in"])),
        ]
        dst2 = Signal(acc_bits)
        src2 = Signal(src_bits)
        wgt2 = Signal(wgt_bits)
        m.d.sync += [
            v2.eq(v1),
            dst2.eq(uop.dst + b1["dst"]),
            src2.eq(uop.src + b1["src"]),
            wgt2.eq(uop.wgt + b1["wgt"]),
        ]
        dst3, dst4, dst5 = (Signal(acc_bits, name=f"dst{s}") for s in (3, 4, 5))
        src3, src4 = Signal(src_bits), Signal(src_bits)
        m.d.sync += [v3.eq(v2), v4.eq(v3), v5.eq(v4), dst3.eq(dst2), dst4.eq(dst3),
                     dst5.eq(dst4), src3.eq(src2), src4.eq(src3)]
        v6, v7 = Signal(name="v6"), Signal(name="v7")
        dst6, dst7 = (Signal(acc_bits, name=f"dst{s}") for s in (6, 7))
        m.d.sync += [v6.eq(v5), v7.eq(v6), dst6.eq(dst5), dst7.eq(dst6)]
        stages = _Stages(valid={1: v1, 2: v2, 3: v3, 4: v4, 5: v5, 6: v6, 7: v7},
                         dsts={2: dst2, 3: dst3, 4: dst4, 5: dst5, 6: dst6, 7: dst7},
                         srcs={2: src2, 3: src3, 4: src4}, reads={})
        self._gemm_read_index(m, stages, loop)
        return stages, b1

    def _gemm_read_index(self, m: Module, stages: _Stages, loop: _Loop) -> None:
        """``stages.reads``: the index the GEMM reads acc at (in ``arrive - 1``) and compares
        the results ahead against (in ``arrive``). A reset from acc reads its source, picked a
        stage ahead into a register of its own, so the read address and the forwarding
        compares stay one register away, as with the destination alone."""
        cfg = self._p.cfg
        arrive = writeback_stage(cfg, "gemm") - 2
        dsts, srcs = stages.dsts, stages.srcs
        if loop.from_acc_q is None:
            stages.reads.update({arrive - 1: dsts[arrive - 1], arrive: dsts[arrive]})
            return
        read, read_next = (Signal(cfg.acc_index_bits, name=f"gemm_read{s}")
                           for s in (arrive - 1, arrive))
        m.d.sync += [read.eq(Mux(loop.from_acc_q, srcs[arrive - 2][:cfg.acc_index_bits],
                                 dsts[arrive - 2])),
                     read_next.eq(read)]
        stages.reads.update({arrive - 1: read, arrive: read_next})

    def _gemm_operands(self, m: Module, core: GemmCore, uop: data.View,
                       b1: dict[str, Signal]) -> None:
        """The GEMM's operand reads in s1 (inp and wgt buffers, at the micro-op's indices plus
        the bases ``b1``) into the GEMM core."""
        cfg = self._p.cfg
        inp_bits, src_bits = cfg.inp_index_bits, cfg.src_index_bits
        # GEMM operands: read in s1 at the index being formed (the same sums as src2/wgt2),
        # registered out of the buffers in s2 and again in s3 (on ECP5 in the multiplier
        # blocks) by the GEMM core, so that neither the block RAMs' clock-to-out nor the
        # multipliers share a cycle with the routes across the chip between them. The inp and
        # wgt buffers' read ports are not transparent, which keeps the first register out of
        # the block RAMs (with a transparent port Yosys folds it into the RAM, see
        # ``SramBuffer``).
        inp_idx = Signal(src_bits)
        m.d.comb += [
            inp_idx.eq(uop.src + b1["src"]),
            self.rd_inp.addr.eq(inp_idx[:inp_bits]),
            self.rd_wgt.addr.eq(uop.wgt + b1["wgt"]),
            core.inp.eq(self.rd_inp.data[:cfg.inp_tile_bytes * 8]),
            core.wgt.eq(self.rd_wgt.data[:cfg.wgt_tile_bytes * 8]),
        ]

    def _write_registers(self, m: Module) -> _Written:
        """The write port's registers (``wdata``, ``w_valid``, ``w_dst``, set by
        :meth:`_write_port`) and ``wdata2``, the result written a cycle before."""
        cfg = self._p.cfg
        acc_bits = cfg.acc_index_bits
        # Results are registered on their way to the buffers (``wdata``): the acc and out RAMs
        # are spread over the chip, so the write lands a cycle after the result is formed (at
        # the end of s7). The last micro-op's write then lands one (ALU) or two (GEMM) cycles
        # after the instruction's last one, before anything can read it: the next compute
        # instruction reads acc two cycles after its decode at the earliest (an ALU source in
        # s2), and STORE's first out read is latched after its own decode cycle, through a
        # transparent port.
        width = cfg.acc_tile_bytes * 8
        wdata = Signal(width)       # the result of one cycle ago: ALU's in s7, GEMM's in s7 (s8)
        wdata2 = Signal(width)      # two cycles ago
        m.d.sync += wdata2.eq(wdata)
        w_valid = Signal()          # a result is written (acc and out) at the end of this cycle
        w_dst = Signal(acc_bits)
        return _Written(wdata, wdata2, w_valid, w_dst)

    def _acc_read_port(self, m: Module, acc_buf: SramBuffer, loop: _Loop, stages: _Stages,
                       wr: _Written) -> tuple[int, Value, Signal]:
        """The acc buffer's read address (ALU src in s2, dst in s3, GEMM dst in s4 or s5), and
        its data with the write at the read's edge bypassed; returns ``arrive``, both data."""
        cfg = self._p.cfg
        acc_bits = cfg.acc_index_bits
        width = cfg.acc_tile_bytes * 8
        alu_q = loop.held["alu"]
        v3, dst3 = stages.valid[3], stages.dsts[3]
        src2 = stages.srcs[2]
        # acc read port: ALU src in s2, ALU dst in s3, GEMM dst in s4 (s5 when deep: every
        # GEMM stage from the products on is a stage later, see ``GemmCore``).
        arrive = writeback_stage(cfg, "gemm") - 2   # the stage the GEMM's acc[dst] arrives in
        with m.If(alu_q):
            with m.If(v3):
                m.d.comb += acc_buf.r.addr.eq(dst3)
            with m.Else():
                m.d.comb += acc_buf.r.addr.eq(src2[:acc_bits])
        with m.Else():
            m.d.comb += acc_buf.r.addr.eq(stages.reads[arrive - 1])

        # The acc port is not transparent, so Yosys adds no multiplexer after the RAM (its
        # emulation of a transparent port), and a read at the edge of a write to the same
        # element returns what no reader uses (``no_rw_check``). Each reader instead takes the
        # written result, ``wdata2`` in the cycle the read data arrive, where ``acc_bypass``
        # (a register) says so: the GEMM for the micro-op three ahead, the ALU's source for a
        # micro-op six cycles ahead (``alu.ii`` 2, 3 or 6). The ALU's destination operand,
        # read in s3, is registered as the RAM returns it: a micro-op written at that read's
        # edge (five cycles ahead, ``alu.ii`` 5) is forwarded (from ``wdata3``) with the
        # others. Only results are compared: LOAD ACC never writes in a cycle in which acc is
        # read (no micro-op is in flight while it loads, the next instruction reads two cycles
        # after its decode).
        acc_data = acc_buf.r.data[:width]
        acc_bypass = Signal(name="acc_bypass")
        acc_seen = Signal(width)            # what a transparent port would have returned
        m.d.sync += acc_bypass.eq(wr.w_valid & (wr.w_dst == acc_buf.r.addr))
        m.d.comb += acc_seen.eq(Mux(acc_bypass, wr.wdata2, acc_data))
        return arrive, acc_data, acc_seen

    def _late_stages(self, m: Module, stages: _Stages, arrive: int) -> None:
        """Stages 8 and on (at least to s9, for the ALU's forwarding; further when the GEMM is
        deep): the valid bits and acc indices, added to ``stages``."""
        acc_bits = self._p.cfg.acc_index_bits
        valid, dsts = stages.valid, stages.dsts
        for st in range(8, max(arrive + 3, 10)):
            valid[st], dsts[st] = Signal(name=f"v{st}"), Signal(acc_bits, name=f"dst{st}")
            m.d.sync += [valid[st].eq(valid[st - 1]), dsts[st].eq(dsts[st - 1])]

    def _gemm_acc_read(self, m: Module, stages: _Stages, arrive: int, acc_seen: Signal
                       ) -> tuple[Signal, Signal, Signal]:
        """The GEMM's acc[dst] registered as it arrives (``gemm_acc6``), and whether the results
        of the micro-ops one and two ahead, written too late for the read, are to be taken."""
        width = self._p.cfg.acc_tile_bytes * 8
        valid, dsts, read = stages.valid, stages.dsts, stages.reads[arrive]
        # GEMM: acc[dst] arrives in s5 and is registered, so that the accumulate in s6 starts
        # from flip-flops rather than from a block-RAM output. The read (at the end of s4)
        # takes the write of the micro-op three ahead, at the same edge, from the write port
        # (``acc_seen``), and cannot see those one and two ahead, written at the end of s5 and
        # s6: their results (in s7 and s8 when this one accumulates) are forwarded. When deep,
        # all of it a stage later. A reset from acc reads and forwards its source the same way.
        gemm_acc6 = Signal(width)
        gemm_hit7 = Signal()
        gemm_hit8 = Signal()
        m.d.sync += [
            gemm_acc6.eq(acc_seen),
            gemm_hit7.eq(valid[arrive + 1] & (dsts[arrive + 1] == read)),
            gemm_hit8.eq(valid[arrive + 2] & (dsts[arrive + 2] == read)),
        ]
        return gemm_acc6, gemm_hit7, gemm_hit8

    def _alu_operands(self, m: Module, loop: _Loop, stages: _Stages, wr: _Written,
                      acc_data: Value, acc_seen: Signal, family: str | None
                      ) -> tuple[Signal, Signal, _AluOut]:
        """The ALU's operands, registered in s5 (``a6``, ``b6``): the acc reads, the immediate or
        results forwarded from micro-ops ahead, among them the lanes' outputs (returned)."""
        cfg = self._p.cfg
        acc_bits = cfg.acc_index_bits
        width = cfg.acc_tile_bytes * 8
        lanes = cfg.batch * cfg.block_out
        valid, dsts = stages.valid, stages.dsts
        dst4, src4 = stages.dsts[4], stages.srcs[4]
        wdata, wdata2 = wr.wdata, wr.wdata2
        use_imm_q, imm_q = loop.use_imm_q, loop.imm_q
        # ALU: source operand read in s2, destination in s3, both registered as they arrive
        # (the source once more), so that the routes from the block RAMs, whose clock-to-out
        # is long (5.8 ns on ECP5), end at flip-flops beside them: with the destination read
        # straight into the operand's multiplexer that path bounded the clock at 10.29 ns
        # (a44db65, seed 3 on the 45F). In s5 both are taken from the micro-op in s7 (forming
        # its result now), s8, s9 or s10 (results in ``wdata``, ``wdata2``, ``wdata3``) when
        # that one writes what they read and the read came too early to see it (s6 is
        # impossible at ``alu.ii >= 2``); the operation runs in s6 (MUL: s6 and s7). The hits
        # are compared a cycle ahead (in s4, against the micro-ops then in s6 to s9: the
        # pipeline from s3 on never stalls) and registered. The late inputs, the MUL result of
        # the micro-op in s7 (its upper half through an adder from the multiplier block)
        # and the operand read (from its register beside the RAM, across the chip) then pass
        # one LUT on ECP5 (``late_mux``): everything else (which of them to take, the other
        # operations' result, the written results, the immediate) is formed from registers
        # into the LUT's other two inputs.
        src_data4, src_data5, dst_data5 = (Signal(width, name=n)
                                           for n in ("src_data4", "src_data5", "dst_data5"))
        a6, b6 = (Signal(width, name=n) for n in ("a6", "b6"))
        prod7, other7 = (Signal(width, name=n) for n in ("prod7", "other7"))
        mul7 = Signal(name="mul7")              # the micro-op in s7 is a MUL
        wdata3 = Signal(width)                  # the result of three cycles ago
        m.d.sync += [src_data4.eq(acc_seen), src_data5.eq(src_data4), dst_data5.eq(acc_data),
                     wdata3.eq(wdata2)]
        written = {7: other7, 8: wdata, 9: wdata2, 10: wdata3}

        def forwarded(index: Signal, read: Value, name: str,
                      imm: Value | None = None) -> Value:
            hits = {st: Signal(name=f"{name}_hit{st}") for st in written}
            use = Signal(name=f"{name}_use_fwd")
            ahead = {st: valid[st - 1] & (dsts[st - 1] == index) for st in written}
            m.d.sync += [hits[st].eq(ahead[st]) for st in written]
            m.d.sync += use.eq(Cat(*ahead.values()).any())
            no_imm = Const(1) if imm is None else ~use_imm_q
            oldest, *younger = sorted(written, reverse=True)
            fwd = written[oldest]
            for st in younger:                  # the youngest writer wins
                fwd = Mux(hits[st], written[st], fwd)
            rest = fwd if imm is None else Mux(use_imm_q, imm, fwd)
            return late_mux(m, name, hits[7] & mul7 & no_imm, prod7, ~use & no_imm, read, rest,
                            family)

        m.d.sync += [
            a6.eq(forwarded(dst4, dst_data5, "dst")),
            b6.eq(forwarded(src4[:acc_bits], src_data5, "src", imm=Cat(*([imm_q] * lanes)))),
        ]
        return a6, b6, _AluOut(prod7, other7, mul7)

    def _alu_lanes(self, m: Module, loop: _Loop, a6: Signal, b6: Signal, out: _AluOut) -> None:
        """The ALU lanes (:class:`AluLane`, one per 32-bit element): the operation in s6 on the
        operands ``a6`` and ``b6``, their results in s7 (``out``)."""
        cfg = self._p.cfg
        lanes = cfg.batch * cfg.block_out
        for lane in range(lanes):
            alu = AluLane()
            m.submodules[f"alu_lane_{lane}"] = alu
            m.d.comb += [
                alu.op.eq(loop.op_q),
                alu.a.eq(a6.word_select(lane, 32)),
                alu.b.eq(b6.word_select(lane, 32)),
                out.prod7.word_select(lane, 32).eq(alu.product),
                out.other7.word_select(lane, 32).eq(alu.other),
            ]
            if lane == 0:
                m.d.comb += out.mul7.eq(alu.mul)

    def _result_dst(self, m: Module, loop: _Loop, stages: _Stages, arrive: int
                    ) -> tuple[Signal, Signal]:
        """Whether a result is formed in this cycle, the ALU's or the GEMM's, and its
        destination (``wb_valid``, ``wb_dst``)."""
        acc_bits = self._p.cfg.acc_index_bits
        alu_q = loop.held["alu"]
        valid, dsts = stages.valid, stages.dsts
        v7, dst7 = valid[7], dsts[7]
        # Results, GEMM's in s6 (a deep GEMM's in s7), the ALU's in s7; registered with their
        # destination, then written. ``alu_q`` changes at the next instruction's decode at the
        # earliest, after the last result of this one is formed.
        wb_valid = Signal()
        wb_dst = Signal(acc_bits)
        formed = arrive + 1                         # the stage a GEMM result is formed in
        m.d.comb += [wb_valid.eq(Mux(alu_q, v7, valid[formed])),
                     wb_dst.eq(Mux(alu_q, dst7, dsts[formed]))]
        return wb_valid, wb_dst

    def _gemm_accumulate(self, m: Module, core: GemmCore, wr: _Written, gemm_acc6: Signal,
                         gemm_hit7: Signal, gemm_hit8: Signal) -> tuple[Signal, Signal]:
        """The GEMM's accumulate: acc[dst] (read, or forwarded from the results one and two
        ahead; a reset from acc's acc[src]) plus the core's dot products; returns both
        (``gemm_acc``, ``gemm_sum``)."""
        cfg = self._p.cfg
        width = cfg.acc_tile_bytes * 8
        lanes = cfg.batch * cfg.block_out
        gemm_acc = Signal(width)
        gemm_sum = Signal(width)
        m.d.comb += gemm_acc.eq(Mux(gemm_hit7, wr.wdata, Mux(gemm_hit8, wr.wdata2, gemm_acc6)))
        for lane in range(lanes):
            m.d.comb += gemm_sum.word_select(lane, 32).eq(
                gemm_acc.word_select(lane, 32) + core.sums.word_select(lane, 32))
        return gemm_acc, gemm_sum

    def _write_port(self, m: Module, eng: LoadEngine, acc_buf: SramBuffer, loop: _Loop,
                    wr: _Written, out: _AluOut, wb_valid: Signal, wb_dst: Signal,
                    gemm_acc: Signal, gemm_sum: Signal, family: str | None) -> None:
        """The registered write port of acc and out: the result (``wdata``, ``w_dst``,
        ``w_valid``) or LOAD ACC's write, and the buffers' write ports driven from it."""
        cfg = self._p.cfg
        width = cfg.acc_tile_bytes * 8
        lanes = cfg.batch * cfg.block_out
        alu_q, reset_q = loop.held["alu"], loop.reset_q
        prod7, other7, mul7 = out.prod7, out.other7, out.mul7
        wdata, w_valid, w_dst = wr.wdata, wr.w_valid, wr.w_dst
        # One registered write port serves acc and out: the result with its destination, or
        # LOAD ACC's write, whose engine data and enable come through a few gates from its
        # state. Either lands a cycle later, before anything can read it. The engine's data is
        # picked while it is past its request (``writing_acc``, from flip-flops: the enable
        # itself comes late, behind the DRAM beat), at least two cycles after the LOAD's
        # decode: never with the previous instruction's last result (formed, at the latest,
        # the cycle after that instruction's last), and no micro-op is in flight to forward
        # ``wdata`` while it loads.
        # A DRAM beat wider than an acc element carries several (``lanes`` of the acc buffer's
        # write port, one enable each): LOAD ACC's other lanes are registered beside
        # ``wdata``, which holds lane 0 (a result is always lane 0).
        w_load = Signal(len(acc_buf.w.en))          # LOAD ACC's lane enables (acc only)
        w_rest = Signal(len(acc_buf.w.data) - width)  # LOAD ACC's lanes 1 and up
        m.d.sync += [w_load.eq(eng.wr_acc.en), w_rest.eq(eng.wr_acc.data[width:])]
        # The late inputs of ``wdata``, the MUL result and the GEMM's accumulated sum, pass one
        # LUT on ECP5 (``late_mux``); which to take and everything else (LOAD ACC's data, the
        # other ALU operations' result, a GEMM reset's zeros) is formed from registers.
        rest = Signal(width)
        reset_value = 0 if loop.from_acc_q is None else Mux(loop.from_acc_q, gemm_acc, 0)
        m.d.comb += rest.eq(Mux(eng.writing_acc, eng.wr_acc.data[:width],
                                Mux(alu_q, other7, reset_value)))
        m.d.sync += wdata.eq(late_mux(m, "wb", ~eng.writing_acc & alu_q & mul7, prod7,
                                      ~eng.writing_acc & ~alu_q & ~reset_q, gemm_sum, rest,
                                      family))
        with m.If(eng.writing_acc):
            m.d.sync += [w_dst.eq(eng.wr_acc.addr), w_valid.eq(0)]
        with m.Else():
            m.d.sync += [w_dst.eq(wb_dst), w_valid.eq(wb_valid)]
        out_tile = Cat(*(wdata.word_select(lane, 32)[:8] for lane in range(lanes)))
        m.d.comb += [
            acc_buf.w.addr.eq(w_dst),
            acc_buf.w.en.eq(w_load | w_valid),
            acc_buf.w.data.eq(Cat(wdata, w_rest)),
        ]
        if self._p.cfg.store.postproc:
            # The store's copy of the acc buffer takes every acc write (``hw.postproc``).
            m.d.comb += [self.wr_acc_copy.addr.eq(w_dst), self.wr_acc_copy.en.eq(w_load | w_valid),
                         self.wr_acc_copy.data.eq(Cat(wdata, w_rest))]
        m.d.comb += [
            self.wr_out.addr.eq(w_dst),
            self.wr_out.en.eq(w_valid),
            self.wr_out.data.eq(out_tile),
        ]
