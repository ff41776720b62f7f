"""cocotb tests of the AXI-wrapped design (``hw.axi``), run by ``tests/test_axi.py`` through
``hw.cocotb_sim`` (not collected by pytest: the module runs inside the simulator).

The cases come from the JSON file in ``$ACCEL_AXI_CASES``: each names a pickled
``(Program, Dram)``, a stall probability for every AXI channel and a seed; the bench runs each
through :class:`accel.driver.Driver` on cocotbext-axi's AXI RAM and AXI-Lite master, writes the
DRAM image after the run and the counters back, and checks every transaction the master
issues against the AXI4 rules (:class:`AxiChecker`). ``tests/test_axi.py`` compares the images
with fsim's, and gives each program a simulation of its own: the design's buffers are not
cleared by a reset, and a random program may store a tile it never wrote (fsim's is zero).
"""

from __future__ import annotations

import json
import os
import pickle
import random
from collections import deque
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from accel.driver import Driver, DriverError
from accel.driver.cocotb import CocotbTransport
from accel.machine import regmap
from accel.machine.config import HwConfig

CLOCK_NS = 10


def _cases() -> tuple[HwConfig, list[dict[str, Any]], Path]:
    path = Path(os.environ["ACCEL_AXI_CASES"])
    spec = json.loads(path.read_text())
    with open(spec["config"], "rb") as f:
        cfg = pickle.load(f)
    return cfg, spec["cases"], path.parent


async def _reset(dut: Any) -> None:
    dut.aresetn.value = 0
    await ClockCycles(dut.aclk, 4)
    dut.aresetn.value = 1
    await ClockCycles(dut.aclk, 2)


def _int(sig: Any) -> int:
    return int(sig.value)


class AxiChecker:
    """The AXI4 rules for every transaction the master issues, checked each cycle.

    - a valid stays up, and its payload unchanged, until its handshake (AR, AW, W, and the
      master's ready-free channels);
    - every burst is INCR, full-width (``size`` = log2 of the data bytes), aligned, at most 256
      beats and inside one 4 KB page; its ID is 0;
    - W beats come in AW order, each burst's ``wlast`` on its last beat and nowhere else;
    - no more responses than requests (R beats, B), no more than ``2 x max_outstanding`` bursts
      of each direction in flight (a transaction is one or two bursts).
    """

    def __init__(self, dut: Any, cfg: HwConfig) -> None:
        self.dut = dut
        self.cfg = cfg
        self.size = (cfg.dram.bytes_per_cycle - 1).bit_length()
        self.errors: list[str] = []
        self.bursts = {"ar": 0, "aw": 0}
        self.beats = {"r": 0, "w": 0}
        self.reads: deque[int] = deque()        # beats each AR asked for, not yet returned
        self.writes: deque[int] = deque()       # beats of each AW, W not yet all sent
        self.w_count = 0                        # W beats of the current burst
        self.w_done: deque[int] = deque()       # W bursts sent before their AW
        self.b_due = 0
        self.max_in_flight = {"ar": 0, "aw": 0}
        self._held: dict[str, tuple[int, ...] | None] = {}

    def _payload(self, ch: str) -> tuple[int, ...]:
        d = self.dut
        if ch in ("ar", "aw"):
            names = ("id", "addr", "len", "size", "burst", "lock", "cache", "prot", "qos")
            return tuple(_int(getattr(d, f"m_axi_{ch}{n}")) for n in names)
        return (_int(d.m_axi_wdata), _int(d.m_axi_wstrb), _int(d.m_axi_wlast))

    def _error(self, text: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(text)

    async def run(self) -> None:
        d = self.dut
        limit = 2 * self.cfg.dram.max_outstanding
        cycle = 0
        while True:
            await RisingEdge(d.aclk)
            cycle += 1
            if not _int(d.aresetn):
                continue
            for ch in ("ar", "aw", "w"):
                valid = _int(getattr(d, f"m_axi_{ch}valid"))
                ready = _int(getattr(d, f"m_axi_{ch}ready"))
                held = self._held.get(ch)
                now = self._payload(ch) if valid else None
                if held is not None and now != held:
                    self._error(f"cycle {cycle}: {ch} valid dropped or payload changed before "
                                "its handshake")
                self._held[ch] = now if valid and not ready else None
                if not (valid and ready):
                    continue
                if ch in ("ar", "aw"):
                    self._address(ch, now, cycle)
                    if len(self.reads if ch == "ar" else self.writes) > limit:
                        self._error(f"cycle {cycle}: more than {limit} {ch} bursts in flight")
                else:
                    self._write_beat(now, cycle)
            if _int(d.m_axi_rvalid) and _int(d.m_axi_rready):
                self.beats["r"] += 1
                if not self.reads:
                    self._error(f"cycle {cycle}: R beat with no read in flight")
                else:
                    self.reads[0] -= 1
                    if self.reads[0] == 0:
                        self.reads.popleft()
            if _int(d.m_axi_bvalid) and _int(d.m_axi_bready):
                self.b_due -= 1
                if self.b_due < 0:
                    self._error(f"cycle {cycle}: B with no write burst done")

    def _address(self, ch: str, p: tuple[int, ...], cycle: int) -> None:
        ident, addr, length, size, burst = p[:5]
        beats = length + 1
        bpc = 1 << size
        self.bursts[ch] += 1
        where = f"cycle {cycle}: {ch} burst at {addr:#x}"
        if ident != 0:
            self._error(f"{where}: ID {ident}, not 0")
        if size != self.size:
            self._error(f"{where}: size {size}, not the full width {self.size}")
        if burst != 1:
            self._error(f"{where}: burst type {burst}, not INCR")
        if addr % bpc:
            self._error(f"{where}: not aligned to {bpc} bytes")
        if (addr % 4096) + beats * bpc > 4096:
            self._error(f"{where}: {beats} beats cross a 4 KB boundary")
        if ch == "ar":
            self.reads.append(beats)
        else:
            self.writes.append(beats)
            if self.w_done:                     # W beats came first
                self._close_write(self.w_done.popleft(), cycle)
        self.max_in_flight[ch] = max(self.max_in_flight[ch],
                                     len(self.reads if ch == "ar" else self.writes))

    def _write_beat(self, p: tuple[int, ...], cycle: int) -> None:
        self.beats["w"] += 1
        self.w_count += 1
        last = p[2]
        # The burst these beats belong to: the oldest AW not yet filled, if it came.
        expected = self.writes[0] if self.writes else None
        if expected is not None and not last and self.w_count >= expected:
            self._error(f"cycle {cycle}: W burst of {expected} beats without wlast on its last")
        if last:
            if expected is None:
                self.w_done.append(self.w_count)
            else:
                self._close_write(self.w_count, cycle)
            self.w_count = 0

    def _close_write(self, count: int, cycle: int) -> None:
        expected = self.writes.popleft()
        if count != expected:
            self._error(f"cycle {cycle}: W burst of {count} beats for an AW of {expected}")
        self.b_due += 1

    def finish(self) -> list[str]:
        if self.reads:
            self._error(f"{len(self.reads)} read bursts never answered")
        if self.writes or self.w_done or self.w_count:
            self._error("write bursts left incomplete")
        return self.errors


async def _all_registers(drv: Driver) -> dict[str, int]:
    return {r.name: await drv.read(r.name) for r in regmap.REGISTERS}


@cocotb.test()
async def register_map(dut: Any) -> None:
    """Every register at the map's offset: ``ID`` reads the magic, ``rw`` registers hold what
    is written (byte strobes too), ``wo`` reads 0; bad accesses answer SLVERR and change
    nothing."""
    cfg = _cases()[0]
    cocotb.start_soon(Clock(dut.aclk, CLOCK_NS, unit="ns").start())
    t = CocotbTransport(dut, 4096)
    await _reset(dut)
    drv = Driver(t, cfg)
    assert await drv.read("ID") == regmap.ID_MAGIC
    for r in regmap.REGISTERS:
        if r.access == "rw":
            pattern = (0x5A5A_0000 | r.offset) & 0xFFFF_FFFF
            await drv.write(r.name, pattern)
            assert await drv.read(r.name) == pattern, r.name
        if r.access == "wo":
            assert await drv.read(r.name) == 0, r.name
    # A one-byte write changes that byte alone.
    reg = regmap.register("INSN_COUNT")
    before = await drv.read("INSN_COUNT")
    resp = await t.lite.write(reg.offset + 1, b"\xee")
    assert resp.resp == 0
    assert await drv.read("INSN_COUNT") == (before & ~0xFF00) | 0xEE00
    snapshot = await _all_registers(drv)
    used = {r.offset for r in regmap.REGISTERS}
    unmapped = [off for off in range(0, regmap.WINDOW_BYTES, 4) if off not in used]
    for off in (unmapped[0], unmapped[len(unmapped) // 2], unmapped[-1]):
        assert not await t.write32(off, 0xFFFF_FFFF), f"write to {off:#x} not refused"
        _value, ok = await t.read32(off)
        assert not ok, f"read of {off:#x} not refused"
    for r in regmap.REGISTERS:
        if r.access == "ro":
            assert not await t.write32(r.offset, 0xFFFF_FFFF), f"write to {r.name} not refused"
    after = await _all_registers(drv)
    assert after == snapshot, {k: (snapshot[k], after[k]) for k in after if after[k] != snapshot[k]}
    try:
        await drv.write("STATUS", 1)
    except DriverError as exc:
        assert "SLVERR" in str(exc)
    else:
        raise AssertionError("the driver let a write to STATUS pass")


@cocotb.test()
async def programs(dut: Any) -> None:
    """Every case of ``$ACCEL_AXI_CASES`` through the driver, with the AXI rules checked."""
    cfg, cases, folder = _cases()
    cocotb.start_soon(Clock(dut.aclk, CLOCK_NS, unit="ns").start())
    results = []
    inputs = []
    for case in cases:
        with open(folder / case["input"], "rb") as f:
            inputs.append(pickle.load(f))
    size = max(case.get("base", 0) + 4 * dram.nbytes + 16 * len(program.insns) + 4096
               for case, (program, dram) in zip(cases, inputs, strict=True))
    t = CocotbTransport(dut, size)
    for i, (case, (program, dram)) in enumerate(zip(cases, inputs, strict=True)):
        t.mem_base = case.get("base", 0)
        t.stall(random.Random(case["seed"]), case["stall"])
        await _reset(dut)
        checker = AxiChecker(dut, cfg)
        task = cocotb.start_soon(checker.run())
        drv = Driver(t, cfg)
        loaded = await drv.load(program, dram)
        await drv.start(interrupt=case.get("interrupt", True))
        if i == 0:
            status = await drv.read("STATUS")
            busy = regmap.register("STATUS").field("BUSY").mask
            refused = not await t.write32(regmap.register("CTRL").offset, 1)
            assert status & busy and refused, f"START while busy: STATUS {status:#x}, " \
                f"refused {refused}"
        result = await drv.wait(timeout_s=case.get("timeout_s", 0.01),
                                interrupt=case.get("interrupt", True))
        await drv.read_back(loaded, dram)
        await ClockCycles(dut.aclk, 4)
        task.cancel()
        errors = checker.finish()
        np.save(folder / case["output"], dram.data)
        results.append({"counters": result.counters, "dram_error": result.dram_error,
                        "protocol_errors": errors, "bursts": checker.bursts,
                        "beats": checker.beats, "max_in_flight": checker.max_in_flight,
                        "interrupt": int(dut.interrupt.value)})
        (folder / "results.json").write_text(json.dumps(results))
        assert not errors, errors
