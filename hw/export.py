"""Verilog of the accelerator (``amaranth.back.verilog``), and a few-pin wrapper for place and
route."""

from __future__ import annotations

import functools
import hashlib

from amaranth.back import verilog
from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from accel.config import HwConfig
from hw.top import Accelerator

__all__ = ["TOP_NAME", "PinWrapper", "design_hash", "verilog_text"]

TOP_NAME = "accel_top"
"""Module name of the top level in the generated Verilog."""


@functools.lru_cache(maxsize=8)
def verilog_text(cfg: HwConfig, wrapped: bool = False) -> str:
    """The Verilog of ``Accelerator(cfg)`` (or of :class:`PinWrapper` around it), top
    ``accel_top``.

    Raises
    ------
    ValueError
        The config cannot be built (``hw.params.check_rtl_config``).
    """
    top = PinWrapper(cfg) if wrapped else Accelerator(cfg)
    return verilog.convert(top, name=TOP_NAME, emit_src=False)


def design_hash(cfg: HwConfig) -> str:
    """A short hash of the generated Verilog: keys caches of compiled models and reports."""
    return hashlib.sha1(verilog_text(cfg).encode()).hexdigest()[:10]


class PinWrapper(wiring.Component):
    """The accelerator behind two pins, for place and route on a package with few I/Os.

    Every input of the accelerator comes from a shift register fed by ``si``; every output is
    XOR-reduced into the registered ``so``. Nothing of the accelerator can be optimised away,
    and its timing paths stay register to register.

    Ports
    -----
    si : In
        Serial input.
    so : Out
        Registered parity of all outputs.
    """

    def __init__(self, cfg: HwConfig) -> None:
        self._cfg = cfg
        super().__init__({"si": In(1), "so": Out(1)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.accel = acc = Accelerator(self._cfg)
        ins, outs = [], []
        for _path, member, value in acc.signature.flatten(acc):
            (ins if member.flow == wiring.In else outs).append(value)
        width = sum(len(v) for v in ins)
        shreg = Signal(width)
        m.d.sync += shreg.eq(Cat(self.si, shreg[:-1]))
        m.d.comb += Cat(*ins).eq(shreg)
        m.d.sync += self.so.eq(Cat(*outs).xor())
        return m
