"""The Amaranth-simulator engine of the ``rtl`` backend: the design plus a Python DRAM model."""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

from amaranth.sim import Simulator

from accel.machine.config import HwConfig
from hw.activity import AmaranthCounters
from hw.dram_model import DramModel
from hw.image import RtlRun
from hw.top import Accelerator
from hw.waveform import VcdDump, window_vcd

__all__ = ["simulate"]


def simulate(cfg: HwConfig, run: RtlRun, vcd: VcdDump | None = None,
             max_cycles: int = 50_000_000,
             timeline: list[tuple[str, str, int]] | None = None,
             counters: bool = True) -> tuple[int, dict[str, Any]]:
    """Run the prepared image to FINISH; returns ``(cycles, stats)`` (see ``run_rtl``).

    With ``counters``, ``stats["counters"]`` holds the values of :func:`hw.activity.probes`
    over the run, sampled from the design's signals in every cycle.

    Raises
    ------
    RuntimeError
        FINISH did not retire within ``max_cycles`` cycles.

    With ``timeline`` (a list), ``(module, "issue" | "retire", cycle)`` events are appended.
    With ``vcd``, Amaranth's writer (which must start at time 0) dumps the whole run, to a
    temporary file when the window is narrower, which :func:`hw.waveform.window_vcd` then
    cuts: program cycle ``c`` starts at the clock's rising edge ``c``.
    """
    top = Accelerator(cfg)
    model = DramModel(run.image, cfg)
    port = top.dram
    result: dict[str, int] = {}
    sim = Simulator(top)
    # The simulator's design names every signal as the Verilog does; Amaranth 0.5 keeps it in
    # ``_design`` (there is no public accessor).
    probe = AmaranthCounters(cfg, sim._design) if counters else None

    async def bench(ctx: Any) -> None:
        ctx.set(port.req.ready, 1)
        ctx.set(top.insn_addr, run.insn_addr)
        ctx.set(top.insn_count, run.insn_count)
        ctx.set(top.start, 1)
        await ctx.tick()
        ctx.set(top.start, 0)
        cycle = 0
        beating = acking = False
        while True:
            beat = model.beat_at(cycle)
            if beat is None:
                if beating:
                    ctx.set(port.rsp_valid, 0)
                    beating = False
            else:
                write, j = beat
                ctx.set(port.rsp_valid, 1)
                beating = True
                if write:
                    model.write_beat(j, ctx.get(port.wr_data))
                else:
                    ctx.set(port.rsp_data, model.read_beat(j))
            ack = model.ack_at(cycle)
            if ack != acking:
                ctx.set(port.wr_ack, ack)
                acking = ack
            model.end_cycle(cycle)
            if timeline is not None:
                for name, (issue, retire) in top.trace_points.items():
                    if ctx.get(issue):
                        timeline.append((name, "issue", cycle))
                    if ctx.get(retire):
                        timeline.append((name, "retire", cycle))
            if ctx.get(port.req.valid):
                req = ctx.get(port.req.payload)
                model.request(cycle, int(req.addr), int(req.bytes), bool(req.write))
            if ctx.get(top.done):
                result["cycles"] = ctx.get(top.cycles)
                return
            if probe is not None:
                probe.sample(ctx)
            if cycle >= max_cycles:
                raise RuntimeError(
                    f"the RTL did not finish within {max_cycles} cycles (deadlock?)")
            await ctx.tick()
            cycle += 1

    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    whole = vcd is not None and vcd.first == 0 and vcd.last is None
    with contextlib.ExitStack() as stack:
        if vcd is None:
            path: Path | None = None
        elif whole:
            path = vcd.path
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="accel-vcd-"))
            path = Path(folder) / "whole.vcd"
        t0 = time.perf_counter()
        with sim.write_vcd(str(path)) if path else contextlib.nullcontext():
            sim.run()
        wall = time.perf_counter() - t0
        if vcd is not None and not whole:
            assert path is not None
            window_vcd(path, vcd.path, "bench.top.clk", vcd.first, vcd.last)
    stats: dict[str, Any] = {
        "dram_bytes_read": model.bytes_read,
        "dram_bytes_written": model.bytes_written,
        "dram_transactions": model.transactions,
        "dram_read_txns": model.read_transactions,
        "dram_write_txns": model.write_transactions,
        "dram_beats": model.beats,
        "wall_s": wall,
    }
    if probe is not None:
        stats["counters"] = list(probe.counts)
    return int(result["cycles"]), stats
