"""The cocotb transport of :class:`accel.driver.Driver`: the AXI-wrapped design simulated by
cocotb, cocotbext-axi's ``AxiLiteMaster`` on ``s_axi_*`` and its ``AxiRam`` on ``m_axi_*``.

Runs inside a cocotb test (``tests/axi_bench.py``); cocotb and cocotbext-axi are imported
here only.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from cocotb.triggers import ClockCycles, First, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam, AxiResp

__all__ = ["CocotbTransport", "random_pauses"]


def random_pauses(rng: random.Random, p: float) -> Iterator[bool]:
    """A pause generator for cocotbext-axi channels: pause with probability ``p`` each
    cycle."""
    while True:
        yield rng.random() < p


class CocotbTransport:
    """Registers through ``AxiLiteMaster``, memory in an ``AxiRam`` of ``size`` bytes; the
    DRAM image at bus address ``mem_base`` (which a test may move between runs). One per
    test: each attaches its models to the design's ports for good."""

    POLL_CYCLES = 17
    """Cycles between two polls of ``STATUS``."""

    def __init__(self, dut: Any, size: int, mem_base: int = 0) -> None:
        self.dut = dut
        self.mem_base = mem_base
        self.lite = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi"), dut.aclk, dut.aresetn,
                                  reset_active_level=False)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.aclk, dut.aresetn,
                          reset_active_level=False, size=mem_base + size)

    def stall(self, rng: random.Random, p: float) -> None:
        """Random ready/valid pauses with probability ``p`` on every channel: the RAM's five
        (AR, R, AW, W, B) and the AXI-Lite master's five."""
        for ch in (self.ram.read_if.ar_channel, self.ram.read_if.r_channel,
                   self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                   self.ram.write_if.b_channel,
                   self.lite.read_if.ar_channel, self.lite.read_if.r_channel,
                   self.lite.write_if.aw_channel, self.lite.write_if.w_channel,
                   self.lite.write_if.b_channel):
            ch.set_pause_generator(random_pauses(random.Random(rng.random()), p) if p else None)

    async def write32(self, offset: int, value: int) -> bool:
        resp = await self.lite.write(offset, value.to_bytes(4, "little"))
        return resp.resp == AxiResp.OKAY

    async def read32(self, offset: int) -> tuple[int, bool]:
        resp = await self.lite.read(offset, 4)
        return int.from_bytes(resp.data, "little"), resp.resp == AxiResp.OKAY

    async def write_mem(self, addr: int, data: bytes) -> None:
        self.ram.write(self.mem_base + addr, data)

    async def read_mem(self, addr: int, length: int) -> bytes:
        return bytes(self.ram.read(self.mem_base + addr, length))

    async def pause(self) -> None:
        await ClockCycles(self.dut.aclk, self.POLL_CYCLES)

    def time_s(self) -> float:
        return float(get_sim_time("sec"))

    async def wait_interrupt(self, timeout_s: float) -> bool:
        """Wait for ``interrupt``, ``timeout_s`` seconds of simulated time at the 10 ns clock
        the test bench drives."""
        cycles = int(timeout_s * 1e8)
        if int(self.dut.interrupt.value):
            return True
        timer = ClockCycles(self.dut.aclk, cycles)
        edge = RisingEdge(self.dut.interrupt)
        fired = await First(edge, timer)
        return fired is edge
