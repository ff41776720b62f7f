"""Verilog of the accelerator (``amaranth.back.verilog``), and a few-pin wrapper for place and
route."""

from __future__ import annotations

import functools
import hashlib

from amaranth.back import verilog
from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from accel.machine.config import HwConfig
from hw.primitives import Target
from hw.top import Accelerator

__all__ = ["AXI_TOP_NAME", "TOP_NAME", "WRAPPER_VERSION", "PinWrapper", "axi_verilog_text",
           "design_hash", "verilog_text"]

TOP_NAME = "accel_top"
"""Module name of the top level in the generated Verilog."""

AXI_TOP_NAME = "accel_axi"
"""Module name of the AXI-wrapped top level (:class:`hw.axi.AxiAccelerator`)."""

PARITY_FANIN = 4
"""Bits XOR-reduced into each register of :class:`PinWrapper`'s parity tree (one LUT4)."""

WRAPPER_VERSION = 3
"""Bumped when :class:`PinWrapper` changes; cached Fmax figures of another version are stale."""


@functools.lru_cache(maxsize=8)
def verilog_text(cfg: HwConfig, wrapped: bool = False, family: str | None = None) -> str:
    """The Verilog of ``Accelerator(cfg)`` (or of :class:`PinWrapper` around it), top
    ``accel_top``; with ``family`` (:data:`hw.primitives.FAMILIES`), instantiating that FPGA
    family's primitives where the RTL has them, else generic.

    Raises
    ------
    ValueError
        The config cannot be built (``hw.params.check_rtl_config``), or ``family`` is unknown.
    """
    platform = Target(family) if family is not None else None
    top = PinWrapper(cfg) if wrapped else Accelerator(cfg)
    return verilog.convert(top, name=TOP_NAME, emit_src=False, platform=platform)


@functools.lru_cache(maxsize=4)
def axi_verilog_text(cfg: HwConfig, family: str | None = None, wrapped: bool = False) -> str:
    """The Verilog of :class:`hw.axi.AxiAccelerator` ``(cfg)``, top :data:`AXI_TOP_NAME`
    (``accel verilog --axi``), or with ``wrapped`` of :class:`PinWrapper` around it (its
    ``clk`` pin is the design's ``aclk``).

    Raises
    ------
    ValueError
        The config cannot be built, its DRAM channel does not fit AXI
        (:func:`hw.axi.axi_limits`), or ``family`` is unknown.
    """
    from hw.axi import AxiAccelerator
    platform = Target(family) if family is not None else None
    top = AxiAccelerator(cfg)
    return verilog.convert(PinWrapper(cfg, inner=top) if wrapped else top, name=AXI_TOP_NAME,
                           emit_src=False, platform=platform)


def design_hash(cfg: HwConfig, family: str | None = None, axi: bool = False) -> str:
    """A short hash of the generated Verilog (of the AXI-wrapped design with ``axi``): keys
    caches of compiled models and reports."""
    text = axi_verilog_text(cfg, family) if axi else verilog_text(cfg, family=family)
    return hashlib.sha1(text.encode()).hexdigest()[:10]


class PinWrapper(wiring.Component):
    """The accelerator behind two pins, for place and route on a package with few I/Os.

    Every input of the accelerator comes from a shift register fed by ``si``; every output is
    registered twice (as the DRAM controller or host would, once), and the second registers
    are XOR-reduced into ``so`` by a tree of registers of :data:`PARITY_FANIN` bits each.
    Nothing of the accelerator can be optimised away, and the reported paths are the
    accelerator's own, from register to register: neither end of one crosses wrapper logic.
    The second register is there because Yosys folds a register that takes a block RAM's read
    data unchanged into the RAM (the out buffer's data go straight to the DRAM port's write
    data): the parity's first LUTs then followed the RAM's 5.8 ns clock-to-out in the same
    cycle, the worst path of the pin-wrapped netlist (11.1 ns) though none of the
    accelerator's.

    Ports
    -----
    si : In
        Serial input.
    so : Out
        Parity of all outputs of :meth:`latency` cycles before.
    clk : In
        Only around an ``inner`` with an ``aclk`` input (:class:`hw.axi.AxiAccelerator`, which
        makes its own clock domain of it): drives ``aclk``, and the wrapper's registers run in
        that domain. Every other input, ``aresetn`` among them, comes from the shift register.

    ``inner`` replaces the accelerator (tests wrap a small component).
    """

    @staticmethod
    def latency(outputs: int) -> int:
        """Cycles from the accelerator's ``outputs`` output bits to their parity on ``so``."""
        levels = 0
        while outputs > 1:
            outputs = -(-outputs // PARITY_FANIN)
            levels += 1
        return 2 + levels

    def __init__(self, cfg: HwConfig, inner: wiring.Component | None = None) -> None:
        self._cfg = cfg
        self._inner = inner
        self._aclk = inner is not None and "aclk" in inner.signature.members
        ports = {"si": In(1), "so": Out(1)}
        if self._aclk:
            ports["clk"] = In(1)
        super().__init__(ports)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        acc = self._inner if self._inner is not None else Accelerator(self._cfg)
        m.submodules.accel = acc
        ins, outs = [], []
        for path, member, value in acc.signature.flatten(acc):
            if self._aclk and path == ("aclk",):
                m.d.comb += value.eq(self.clk)
                continue
            (ins if member.flow == wiring.In else outs).append(value)
        width = sum(len(v) for v in ins)
        shreg = Signal(width)
        m.d.sync += shreg.eq(Cat(self.si, shreg[:-1]))
        m.d.comb += Cat(*ins).eq(shreg)
        out_bits = Cat(*outs)
        out_q = Signal(len(out_bits))
        out_q2 = Signal(len(out_bits))
        m.d.sync += [out_q.eq(out_bits), out_q2.eq(out_q)]
        level: Value = out_q2
        step = 0
        while len(level) > 1:
            parts = Signal(-(-len(level) // PARITY_FANIN), name=f"parity{step}")
            m.d.sync += [parts[i].eq(level[i * PARITY_FANIN:(i + 1) * PARITY_FANIN].xor())
                         for i in range(len(parts))]
            level, step = parts, step + 1
        m.d.comb += self.so.eq(level[0])
        return m
