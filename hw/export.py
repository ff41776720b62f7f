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
from hw.primitives import Target
from hw.top import Accelerator

__all__ = ["TOP_NAME", "WRAPPER_VERSION", "PinWrapper", "design_hash", "verilog_text"]

TOP_NAME = "accel_top"
"""Module name of the top level in the generated Verilog."""

PARITY_CHUNK = 16
"""Outputs XOR-reduced per register in the first step of :class:`PinWrapper`'s parity."""

WRAPPER_VERSION = 2
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


def design_hash(cfg: HwConfig, family: str | None = None) -> str:
    """A short hash of the generated Verilog: keys caches of compiled models and reports."""
    return hashlib.sha1(verilog_text(cfg, family=family).encode()).hexdigest()[:10]


class PinWrapper(wiring.Component):
    """The accelerator behind two pins, for place and route on a package with few I/Os.

    Every input of the accelerator comes from a shift register fed by ``si``; every output is
    registered (as the DRAM controller or host would), and the registers are XOR-reduced in two
    registered steps into ``so``. Nothing of the accelerator can be optimised away, and the
    reported paths are the accelerator's own, from register to register: neither end of one
    crosses wrapper logic.

    Ports
    -----
    si : In
        Serial input.
    so : Out
        Parity of all outputs of three cycles before.

    ``inner`` replaces the accelerator (tests wrap a small component).
    """

    def __init__(self, cfg: HwConfig, inner: wiring.Component | None = None) -> None:
        self._cfg = cfg
        self._inner = inner
        super().__init__({"si": In(1), "so": Out(1)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        acc = self._inner if self._inner is not None else Accelerator(self._cfg)
        m.submodules.accel = acc
        ins, outs = [], []
        for _path, member, value in acc.signature.flatten(acc):
            (ins if member.flow == wiring.In else outs).append(value)
        width = sum(len(v) for v in ins)
        shreg = Signal(width)
        m.d.sync += shreg.eq(Cat(self.si, shreg[:-1]))
        m.d.comb += Cat(*ins).eq(shreg)
        out_bits = Cat(*outs)
        out_q = Signal(len(out_bits))
        m.d.sync += out_q.eq(out_bits)
        parts = Signal((len(out_q) + PARITY_CHUNK - 1) // PARITY_CHUNK)
        m.d.sync += [parts[i].eq(out_q[i * PARITY_CHUNK:(i + 1) * PARITY_CHUNK].xor())
                     for i in range(len(parts))]
        m.d.sync += self.so.eq(parts.xor())
        return m
