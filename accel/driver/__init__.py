"""A driver for the AXI-wrapped accelerator (``accel verilog --axi``, :mod:`hw.axi`).

One interface, :class:`Driver`, over a :class:`Transport`: how the host reaches the design's
AXI4-Lite registers and the memory its AXI4 master reads. Two transports:

- :class:`accel.driver.cocotb.CocotbTransport`: the design simulated by cocotb with Verilator,
  cocotbext-axi's AXI-Lite master on the registers and its AXI RAM as the memory (what the
  tests run: ``tests/test_axi.py``);
- :class:`accel.driver.pynq.PynqTransport`: a board with PYNQ (``pynq.MMIO`` on the register
  window, ``pynq.allocate`` for the DRAM image). It is a few lines over the same interface and
  has not been run on a board here.

The driver is written with ``async`` methods because cocotb's transport must yield to the
simulator; on a board, ``Driver.run_blocking`` runs the same steps with :func:`asyncio.run`.

Every register is named as :mod:`accel.machine.regmap` names it; a register access the design
answers with SLVERR raises :class:`DriverError`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from accel.machine import regmap
from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.program import Program

__all__ = ["Driver", "DriverError", "Loaded", "RunResult", "Transport"]


class DriverError(RuntimeError):
    """A register access was refused (SLVERR), or the run did not finish in time."""


class Transport(Protocol):
    """How the driver reaches the design. Offsets are the register map's; memory addresses
    are offsets into the DRAM image, which lies at bus address ``mem_base``."""

    mem_base: int

    async def write32(self, offset: int, value: int) -> bool:
        """Write a register; False when the design answered SLVERR."""

    async def read32(self, offset: int) -> tuple[int, bool]:
        """Read a register: its value and whether the design answered OKAY."""

    async def write_mem(self, addr: int, data: bytes) -> None:
        """Write bytes of the DRAM image."""

    async def read_mem(self, addr: int, length: int) -> bytes:
        """Read bytes of the DRAM image."""

    async def wait_interrupt(self, timeout_s: float) -> bool:
        """Wait for the interrupt line; False on timeout (or no interrupt: poll instead)."""

    async def pause(self) -> None:
        """Let some time pass between two polls of ``STATUS``."""

    def time_s(self) -> float:
        """The transport's clock in seconds (simulated time for a simulation)."""


@dataclass(frozen=True)
class Loaded:
    """A program placed in the memory: where its instructions are and how many bytes of data
    to read back."""

    insn_addr: int
    insn_count: int
    data_bytes: int


@dataclass(frozen=True)
class RunResult:
    """A finished run: the counters of ``regmap.COUNTERS`` and whether a DRAM response was
    not OKAY."""

    counters: dict[str, int]
    dram_error: bool

    @property
    def cycles(self) -> int:
        return self.counters["CYCLES"]


class Driver:
    """Runs programs on the AXI-wrapped accelerator of ``cfg`` through ``transport``."""

    def __init__(self, transport: Transport, cfg: HwConfig) -> None:
        self.transport = transport
        self.cfg = cfg

    # ----------------------------------------------------------------- registers
    async def write(self, name: str, value: int) -> None:
        """Write register ``name``.

        Raises
        ------
        DriverError
            The design answered SLVERR.
        """
        reg = regmap.register(name)
        if not await self.transport.write32(reg.offset, value & 0xFFFF_FFFF):
            raise DriverError(f"write of {value:#x} to {name} ({reg.offset:#05x}) answered SLVERR")

    async def read(self, name: str) -> int:
        """Read register ``name``.

        Raises
        ------
        DriverError
            The design answered SLVERR.
        """
        reg = regmap.register(name)
        value, ok = await self.transport.read32(reg.offset)
        if not ok:
            raise DriverError(f"read of {name} ({reg.offset:#05x}) answered SLVERR")
        return value

    async def write64(self, name: str, value: int) -> None:
        await self.write(f"{name}_LO", value & 0xFFFF_FFFF)
        await self.write(f"{name}_HI", value >> 32)

    async def counter(self, name: str) -> int:
        """A 64-bit counter of ``regmap.COUNTERS``: ``_LO`` (which latches ``_HI``), then
        ``_HI``."""
        lo = await self.read(f"{name}_LO")
        return lo | (await self.read(f"{name}_HI")) << 32

    async def counters(self) -> dict[str, int]:
        return {name: await self.counter(name) for name, _ in regmap.COUNTERS}

    # ----------------------------------------------------------------- runs
    async def load(self, program: Program, dram: Dram) -> Loaded:
        """Place ``program`` and its data (``hw.image``) in the memory and set ``DRAM_BASE``,
        ``INSN_ADDR`` and ``INSN_COUNT``."""
        from hw.image import prepare_image
        run = prepare_image(program, dram, self.cfg)
        await self.transport.write_mem(0, run.image.tobytes())
        await self.write64("DRAM_BASE", self.transport.mem_base)
        await self.write64("INSN_ADDR", run.insn_addr)
        await self.write("INSN_COUNT", run.insn_count)
        return Loaded(run.insn_addr, run.insn_count, run.data_bytes)

    async def start(self, interrupt: bool = True) -> None:
        """Clear the interrupt status, enable the interrupt (or not) and start."""
        done = regmap.register("IRQ_STATUS").field("DONE").mask
        await self.write("IRQ_STATUS", done)
        await self.write("IRQ_ENABLE", done if interrupt else 0)
        await self.write("CTRL", regmap.register("CTRL").field("START").mask)

    async def wait(self, timeout_s: float = 60.0, interrupt: bool = True) -> RunResult:
        """Wait for ``STATUS.DONE`` (on the interrupt line, else by polling ``STATUS``), then
        read the counters.

        Raises
        ------
        DriverError
            Not done within ``timeout_s`` (of the transport's time).
        """
        status = regmap.register("STATUS")
        done = status.field("DONE").mask
        if interrupt:
            if not await self.transport.wait_interrupt(timeout_s):
                raise DriverError(f"no interrupt within {timeout_s} s (STATUS "
                                  f"{await self.read('STATUS'):#x})")
        else:
            deadline = self.transport.time_s() + timeout_s
            while not (await self.read("STATUS")) & done:
                if self.transport.time_s() > deadline:
                    raise DriverError(f"not done within {timeout_s} s")
                await self.transport.pause()
        value = await self.read("STATUS")
        if not value & done:
            raise DriverError(f"interrupt without STATUS.DONE (STATUS {value:#x})")
        return RunResult(await self.counters(),
                         bool(value & status.field("DRAM_ERROR").mask))

    async def read_back(self, loaded: Loaded, dram: Dram) -> None:
        """Copy the data part of the memory into ``dram`` (the program's results)."""
        data = await self.transport.read_mem(0, loaded.data_bytes)
        dram.data[:loaded.data_bytes] = np.frombuffer(data, dtype=np.uint8)

    async def run(self, program: Program, dram: Dram, timeout_s: float = 60.0,
                  interrupt: bool = True) -> RunResult:
        """Load, start, wait and read back: ``dram`` ends as ``fsim`` would leave it."""
        loaded = await self.load(program, dram)
        await self.start(interrupt)
        result = await self.wait(timeout_s, interrupt)
        await self.read_back(loaded, dram)
        return result

    def run_blocking(self, program: Program, dram: Dram, timeout_s: float = 60.0,
                     interrupt: bool = False) -> RunResult:
        """:meth:`run` for a transport that never yields (a board): one ``asyncio.run``."""
        return asyncio.run(self.run(program, dram, timeout_s, interrupt))
