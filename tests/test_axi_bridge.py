"""``hw.axi.AxiDramBridge`` alone on Amaranth's simulator: random channel transactions (any
address, any length up to ``dram.max_burst``, across 4 KB boundaries) against a Python AXI4
slave with random ready/valid pauses on all five channels; read data and the memory after the
writes are checked byte for byte, and every burst against the AXI rules."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from amaranth.sim import Simulator

from accel.machine.config import HwConfig
from hw.axi import AXI_BOUNDARY, AxiDramBridge
from hw.params import RtlParams

READ_SPAN = 3 * AXI_BOUNDARY
WRITE_BASE = 4 * AXI_BOUNDARY


class _Slave:
    """An AXI4 memory: bursts answered in order, random pauses; the rules asserted."""

    def __init__(self, mem: np.ndarray, bpc: int, rng: np.random.Generator, p: float) -> None:
        self.mem, self.bpc, self.rng, self.p = mem, bpc, rng, p
        self.reads: deque[list[int]] = deque()      # [addr, beats left]
        self.aws: deque[list[int]] = deque()        # [addr, beats, received]
        self.b_due = 0
        self.pause = {}

    def roll(self) -> None:
        self.pause = {ch: self.rng.random() < self.p for ch in ("ar", "r", "aw", "w", "b")}

    def check_burst(self, addr: int, length: int, size: int, burst: int) -> None:
        beats = length + 1
        assert burst == 1 and 1 << size == self.bpc and addr % self.bpc == 0
        assert addr % AXI_BOUNDARY + beats * self.bpc <= AXI_BOUNDARY, (addr, beats)


def _run(cfg: HwConfig, n_txns: int, seed: int, p: float) -> dict[str, int]:
    params = RtlParams.of(cfg)
    dut = AxiDramBridge(params)
    bpc = cfg.dram.bytes_per_cycle
    rng = np.random.default_rng(seed)
    mem = rng.integers(0, 256, WRITE_BASE + READ_SPAN, dtype=np.uint8)
    expect = mem.copy()
    slave = _Slave(mem, bpc, rng, p)
    max_b = cfg.dram.max_burst
    txns = []
    for _ in range(n_txns):
        write = bool(rng.integers(0, 2))
        nbytes = int(rng.integers(1, max_b + 1))
        addr = int(rng.integers(0, READ_SPAN - max_b)) + (WRITE_BASE if write else 0)
        data = rng.integers(0, 256, nbytes, dtype=np.uint8)
        txns.append((addr, nbytes, write, data))
    stats = {"bursts": 0, "split": 0, "unaligned": 0}

    async def bench(ctx: object) -> None:
        pending = deque(txns)
        in_flight: deque[dict] = deque()            # grant order
        writes_unacked: deque[dict] = deque()
        done = 0
        cycles = 0
        while done < n_txns:
            cycles += 1
            assert cycles < 200 * n_txns + 1000, \
                f"bridge hangs: {done} done, {len(writes_unacked)} writes unacknowledged"
            slave.roll()
            # Channel side: the next request, if a slot is free.
            asking = bool(pending) and len(in_flight) + len(writes_unacked) \
                < cfg.dram.max_outstanding and rng.random() < 0.7
            if asking:
                addr, nbytes, write, _ = pending[0]
                ctx.set(dut.dram.req.payload.addr, addr)
                ctx.set(dut.dram.req.payload.bytes, nbytes)
                ctx.set(dut.dram.req.payload.write, int(write))
            ctx.set(dut.dram.req.valid, int(asking))
            wr = next((t for t in in_flight if t["write"] and t["left"]), None)
            if wr is not None:
                j = wr["beats"] - wr["left"]
                chunk = wr["data"][j * bpc:(j + 1) * bpc]
                ctx.set(dut.dram.wr_data, int.from_bytes(bytes(chunk), "little"))
            # Slave side: present what it has.
            ctx.set(dut.m_axi_arready, int(not slave.pause["ar"]))
            ctx.set(dut.m_axi_awready, int(not slave.pause["aw"]))
            ctx.set(dut.m_axi_wready, int(not slave.pause["w"] and bool(slave.aws)))
            r_ok = bool(slave.reads) and not slave.pause["r"]
            if r_ok:
                a, left = slave.reads[0]
                ctx.set(dut.m_axi_rdata, int.from_bytes(bytes(mem[a:a + bpc]), "little"))
                ctx.set(dut.m_axi_rlast, int(left == 1))
                ctx.set(dut.m_axi_rresp, 0)
            ctx.set(dut.m_axi_rvalid, int(r_ok))
            b_ok = slave.b_due > 0 and not slave.pause["b"]
            ctx.set(dut.m_axi_bvalid, int(b_ok))
            ctx.set(dut.m_axi_bresp, 0)
            # What the bridge does this cycle.
            granted = asking and ctx.get(dut.dram.req.ready)
            strobe, wr_ack = ctx.get(dut.dram.rsp_valid), ctx.get(dut.dram.wr_ack)
            rsp_data = ctx.get(dut.dram.rsp_data)
            ar = ctx.get(dut.m_axi_arvalid) and not slave.pause["ar"]
            aw = ctx.get(dut.m_axi_awvalid) and not slave.pause["aw"]
            w = ctx.get(dut.m_axi_wvalid) and ctx.get(dut.m_axi_wready)
            r = r_ok and ctx.get(dut.m_axi_rready)
            b = b_ok and ctx.get(dut.m_axi_bready)
            if ar:
                slave.check_burst(ctx.get(dut.m_axi_araddr), ctx.get(dut.m_axi_arlen),
                                  ctx.get(dut.m_axi_arsize), ctx.get(dut.m_axi_arburst))
                slave.reads.append([ctx.get(dut.m_axi_araddr), ctx.get(dut.m_axi_arlen) + 1])
                stats["bursts"] += 1
            if w:
                a, beats, got = slave.aws[0]
                data = ctx.get(dut.m_axi_wdata).to_bytes(bpc, "little")
                strb = ctx.get(dut.m_axi_wstrb)
                for i in range(bpc):
                    if strb >> i & 1:
                        mem[a + got * bpc + i] = data[i]
                assert ctx.get(dut.m_axi_wlast) == int(got + 1 == beats)
                slave.aws[0][2] += 1
                if got + 1 == beats:
                    slave.aws.popleft()
                    slave.b_due += 1
            if aw:
                slave.check_burst(ctx.get(dut.m_axi_awaddr), ctx.get(dut.m_axi_awlen),
                                  ctx.get(dut.m_axi_awsize), ctx.get(dut.m_axi_awburst))
                slave.aws.append([ctx.get(dut.m_axi_awaddr), ctx.get(dut.m_axi_awlen) + 1, 0])
                stats["bursts"] += 1
            if r:
                slave.reads[0][0] += bpc
                slave.reads[0][1] -= 1
                if slave.reads[0][1] == 0:
                    slave.reads.popleft()
            if b:
                slave.b_due -= 1
            if strobe:
                front = next(t for t in in_flight if t["left"])
                j = front["beats"] - front["left"]
                if not front["write"]:
                    want = mem[front["addr"] + j * bpc:front["addr"] + min(
                        (j + 1) * bpc, front["bytes"])]
                    got_bytes = rsp_data.to_bytes(bpc, "little")[:len(want)]
                    assert got_bytes == bytes(want), (front["addr"], front["bytes"], j)
                front["left"] -= 1
                if not front["left"]:
                    in_flight.remove(front)
                    if front["write"]:
                        writes_unacked.append(front)
                    else:
                        done += 1
            if wr_ack:
                assert writes_unacked, "wr_ack with no write done on the bus"
                writes_unacked.popleft()
                done += 1
            if granted:
                addr, nbytes, write, data = pending.popleft()
                in_flight.append({"addr": addr, "bytes": nbytes, "write": write, "data": data,
                                  "beats": -(-nbytes // bpc), "left": -(-nbytes // bpc)})
                if write:
                    expect[addr:addr + nbytes] = data
                stats["unaligned"] += addr % bpc != 0
                stats["split"] += addr // AXI_BOUNDARY != (addr + nbytes - 1) // AXI_BOUNDARY
            await ctx.tick()
        np.testing.assert_array_equal(mem, expect)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return stats


@pytest.mark.parametrize(("changes", "p"), [
    ({}, 0.0),
    ({}, 0.4),
    ({"dram.max_outstanding": 1}, 0.3),
    ({"dram.bytes_per_cycle": 16, "dram.max_burst": 256}, 0.3),
    ({"dram.bytes_per_cycle": 4}, 0.2),  # beats to a 4 KB boundary outnumber a burst's 256
])
def test_bridge_moves_every_byte(tiny: HwConfig, changes: dict, p: float) -> None:
    cfg = tiny.replace(**{"dram.max_burst": 512, **changes})
    stats = _run(cfg, 240 if "dram.bytes_per_cycle" in changes else 120,
                 seed=len(changes) + int(10 * p), p=p)
    assert stats["unaligned"] > 10 and stats["split"] > 1     # the cases that matter ran
