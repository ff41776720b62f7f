"""The PYNQ transport of :class:`accel.driver.Driver` (a Zynq board running PYNQ).

Not run on a board here: there is none. It is the interface's five methods over ``pynq.MMIO``
(the AXI4-Lite window at the address the block design gives ``s_axi``) and one
``pynq.allocate`` buffer (physically contiguous, which the accelerator reads through
``m_axi``). MMIO cannot see SLVERR (a refused access is a bus error on the CPU), so writes and
reads report OKAY; there is no interrupt controller here either, so the driver polls
``STATUS`` (``Driver.run_blocking`` with ``interrupt=False``, its default)::

    from accel import load_config
    from accel.driver import Driver
    from accel.driver.pynq import PynqTransport
    cfg = load_config("default")
    drv = Driver(PynqTransport(0x4000_0000, image_bytes=64 << 20), cfg)
    result = drv.run_blocking(program, dram)
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from accel.machine import regmap

__all__ = ["PynqTransport"]


class PynqTransport:
    """Registers at bus address ``regs_addr``; a DRAM buffer of ``image_bytes``."""

    def __init__(self, regs_addr: int, image_bytes: int) -> None:
        import numpy as np
        from pynq import MMIO, allocate  # only on a board
        self.mmio: Any = MMIO(regs_addr, regmap.WINDOW_BYTES)
        self.buffer: Any = allocate(shape=(image_bytes,), dtype=np.uint8)
        self.mem_base = int(self.buffer.physical_address)
        if self.mem_base % 4096:
            raise ValueError(f"DRAM buffer at {self.mem_base:#x} is not 4 KB aligned")

    async def write32(self, offset: int, value: int) -> bool:
        self.mmio.write(offset, value)
        return True

    async def read32(self, offset: int) -> tuple[int, bool]:
        return int(self.mmio.read(offset)), True

    async def write_mem(self, addr: int, data: bytes) -> None:
        self.buffer[addr:addr + len(data)] = memoryview(data)
        self.buffer.flush()

    async def read_mem(self, addr: int, length: int) -> bytes:
        self.buffer.invalidate()
        return bytes(self.buffer[addr:addr + length])

    async def wait_interrupt(self, timeout_s: float) -> bool:
        return False

    async def pause(self) -> None:
        await asyncio.sleep(0.0005)

    def time_s(self) -> float:
        return time.monotonic()
