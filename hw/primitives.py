"""Vendor primitives the RTL instantiates when it is built for one FPGA family.

The accelerator's Verilog is generic by default: simulation (Amaranth, Verilator) and the
Xilinx and iCE40 flows see plain ``*`` and registers, which Yosys maps itself. For ECP5 the
GEMM array's multipliers are instantiated as ``MULT18X18D`` blocks with their own input and
output registers, and the ALU lanes' low products (16 x 16 bits) with their output registers:
Yosys maps a multiply to that block with every register bypassed and never
folds fabric registers into it, so the routes from the operand registers into the blocks and
from the blocks to the product registers (4-5 ns each on the 45F, placed apart) would stay in
the cycle. The registers are the same pipeline registers as in the generic netlist, so the
cycle count does not change. A few multiplexers whose inputs come late in the cycle (block-RAM
data, a multiplier's product) are instantiated as ``LUT4`` cells, one a bit (:func:`lut4`):
Yosys's mapper (ABC) sees through kept wires and, with five or more signals in a bit's cone,
maps the late ones through two levels; an instantiated LUT is left as it is.

A family is chosen by the ``platform`` argument of elaboration: :class:`Target` (what
``accel verilog --target`` and ``accel synth`` pass), or an ``amaranth.vendor`` platform.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amaranth.hdl import ClockSignal, Const, Instance, Module, Signal, Value, signed

__all__ = ["FAMILIES", "Target", "family_for", "family_of", "lut4", "lut4_init", "mult18x18d",
           "sim_model"]

FAMILIES = ("ecp5",)
"""Families with instantiated primitives; any other target gets the generic netlist."""


@dataclass(frozen=True)
class Target:
    """The ``platform`` object of elaboration: which family's primitives to instantiate.

    Raises
    ------
    ValueError
        ``family`` is not one of :data:`FAMILIES`.
    """

    family: str

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"no primitives for family {self.family!r}; known: "
                             f"{', '.join(FAMILIES)}")


def family_for(target: str | None) -> str | None:
    """The family whose primitives a synthesis ``target`` (``accel synth --target``) gets:
    itself where it has any (:data:`FAMILIES`), else None (the generic netlist)."""
    return target if target in FAMILIES else None


def family_of(platform: object) -> str | None:
    """The family whose primitives ``elaborate`` may instantiate on ``platform`` (or None)."""
    if isinstance(platform, Target):
        return platform.family
    if platform is None:
        return None
    from amaranth.vendor import LatticeECP5Platform

    if isinstance(platform, LatticeECP5Platform):
        return "ecp5"
    return None


def mult18x18d(m: Module, a: Value, b: Value, name: str, *, width: int = 16,
               input_registers: bool = True, signed_operands: bool = True) -> Signal:
    """An ECP5 ``MULT18X18D`` computing ``a * b``, the low ``width`` bits of the product, with
    its output register and (``input_registers``) its input registers: the product of the
    operands of two cycles before, or of one without the input registers.

    The operands (at most 18 bits; sign-extended with ``signed_operands``, else zero-extended
    and multiplied as unsigned) are the GEMM's int8 values or the ALU's 16-bit halves. The
    block's registers hold data only (no reset; the global set/reset clears them at
    configuration).

    Raises
    ------
    ValueError
        An operand wider than 18 bits, or ``width`` above the block's 36 product bits.
    """
    for operand in (a, b):
        if len(operand) > 18:
            raise ValueError(f"MULT18X18D operands are at most 18 bits, not {len(operand)}")
    if not 0 < width <= 36:
        raise ValueError(f"MULT18X18D products are 1 to 36 bits, not {width}")
    product = Signal(signed(width) if signed_operands else width, name=f"{name}_p")
    a18, b18 = Signal(signed(18), name=f"{name}_a"), Signal(signed(18), name=f"{name}_b")
    p36 = Signal(36, name=f"{name}_p36")
    extend = (lambda v: v.as_signed()) if signed_operands else (lambda v: v.as_unsigned())
    m.d.comb += [a18.eq(extend(a)), b18.eq(extend(b)), product.eq(p36[:width])]
    ports: dict[str, object] = {}
    for j in range(18):
        ports[f"i_A{j}"] = a18[j]
        ports[f"i_B{j}"] = b18[j]
        ports[f"i_C{j}"] = Const(0, 1)
    for j in range(36):
        ports[f"o_P{j}"] = p36[j]
    for k in range(4):
        ports[f"i_CLK{k}"] = ClockSignal() if k == 0 else Const(0, 1)
        ports[f"i_CE{k}"] = Const(1 if k == 0 else 0, 1)
        ports[f"i_RST{k}"] = Const(0, 1)
    inputs = "CLK0" if input_registers else "NONE"
    sign = Const(int(signed_operands), 1)
    m.submodules[name] = Instance(
        "MULT18X18D",
        p_REG_INPUTA_CLK=inputs, p_REG_INPUTB_CLK=inputs, p_REG_OUTPUT_CLK="CLK0",
        p_REG_PIPELINE_CLK="NONE", p_REG_INPUTC_CLK="NONE",
        i_SIGNEDA=sign, i_SIGNEDB=sign, i_SOURCEA=Const(0, 1),
        i_SOURCEB=Const(0, 1), **ports)
    return product


def lut4_init(fn: Callable[[int, int, int, int], int]) -> int:
    """The 16-bit ``INIT`` of an ECP5 ``LUT4`` computing ``fn(a, b, c, d)``: bit
    ``d << 3 | c << 2 | b << 1 | a`` is the output for those inputs."""
    return sum((fn(i & 1, i >> 1 & 1, i >> 2 & 1, i >> 3) & 1) << i for i in range(16))


def lut4(m: Module, a: Value, b: Value, c: Value, d: Value,
         fn: Callable[[int, int, int, int], int], name: str) -> Signal:
    """Bitwise ``fn(a, b, c, d)`` (equal widths), one ECP5 ``LUT4`` cell a bit.

    Raises
    ------
    ValueError
        The four inputs are not all as wide.
    """
    widths = {len(v) for v in (a, b, c, d)}
    if len(widths) != 1:
        raise ValueError("LUT4 inputs must be equally wide, not "
                         f"{', '.join(str(len(v)) for v in (a, b, c, d))}")
    (width,) = widths
    out = Signal(width, name=name)
    init = Const(lut4_init(fn), 16)
    for i in range(width):
        m.submodules[f"{name}_lut{i}"] = Instance(
            "LUT4", p_INIT=init, i_A=a[i], i_B=b[i], i_C=c[i], i_D=d[i], o_Z=out[i])
    return out


def sim_model(family: str) -> str:
    """Verilog simulation models of the primitives :func:`mult18x18d` and :func:`lut4`
    instantiate for ``family``, for simulating that family's netlist (Verilator) on its own:
    Yosys ships only a black box of the first, and the second is a few lines here rather than
    Yosys's whole cell library.

    ``MULT18X18D`` is modelled as far as the RTL uses it (Lattice TN1267): ``P = A * B`` with
    ``SIGNEDA``/``SIGNEDB``, the A, B and output registers each bypassed (``"NONE"``) or clocked
    by ``CLK0`` with ``CE0`` and synchronous ``RST0``; other settings stop the simulation.

    Raises
    ------
    ValueError
        ``family`` is not one of :data:`FAMILIES`.
    """
    Target(family)

    def bus(prefix: str, n: int) -> str:
        return "{" + ", ".join(f"{prefix}{j}" for j in reversed(range(n))) + "}"

    inputs = ([f"A{j}" for j in range(18)] + [f"B{j}" for j in range(18)]
              + [f"C{j}" for j in range(18)]
              + ["SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB"]
              + [f"{s}{k}" for s in ("CLK", "CE", "RST") for k in range(4)])
    outputs = [f"P{j}" for j in range(36)]
    ports = ",\n  ".join([f"input {n}" for n in inputs] + [f"output {n}" for n in outputs])
    checks = "\n".join(
        f'    if ({p} != "NONE" && {p} != "CLK0") $fatal(1, "MULT18X18D model: {p} %s", {p});'
        for p in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"))
    return f"""// Simulation model of the ECP5 MULT18X18D as accel's RTL uses it (hw/primitives.py).
module MULT18X18D(
  {ports});
  parameter REG_INPUTA_CLK = "NONE";
  parameter REG_INPUTB_CLK = "NONE";
  parameter REG_INPUTC_CLK = "NONE";
  parameter REG_PIPELINE_CLK = "NONE";
  parameter REG_OUTPUT_CLK = "NONE";
  initial begin
{checks}
    if (REG_PIPELINE_CLK != "NONE") $fatal(1, "MULT18X18D model: no pipeline register");
  end
  wire [17:0] a = {bus("A", 18)};
  wire [17:0] b = {bus("B", 18)};
  reg [17:0] a_q = 18'd0, b_q = 18'd0;
  reg [35:0] p_q = 36'd0;
  wire [17:0] a_in = (REG_INPUTA_CLK == "NONE") ? a : a_q;
  wire [17:0] b_in = (REG_INPUTB_CLK == "NONE") ? b : b_q;
  wire signed [18:0] a_ext = $signed({{SIGNEDA & a_in[17], a_in}});
  wire signed [18:0] b_ext = $signed({{SIGNEDB & b_in[17], b_in}});
  wire signed [37:0] prod = a_ext * b_ext;
  always @(posedge CLK0) begin
    if (RST0) begin
      a_q <= 18'd0; b_q <= 18'd0; p_q <= 36'd0;
    end else if (CE0) begin
      a_q <= a; b_q <= b; p_q <= prod[35:0];
    end
  end
  assign {bus("P", 36)} = (REG_OUTPUT_CLK == "NONE") ? prod[35:0] : p_q;
endmodule

// The ECP5 LUT4: Z is INIT's bit {{D, C, B, A}}.
module LUT4(input A, input B, input C, input D, output Z);
  parameter [15:0] INIT = 16'h0000;
  assign Z = INIT[{{D, C, B, A}}];
endmodule
"""
