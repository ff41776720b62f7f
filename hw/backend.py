"""The ``rtl`` backend: run a Program on the RTL, leaving the DRAM image as ``fsim`` would.

Two engines: Amaranth's own simulator (slow; no tools needed) and Verilator (the generated
Verilog compiled with a C++ harness, cached per config). ``engine="auto"`` takes Verilator when
the ``verilator`` program is installed.

The instructions are placed after the DRAM image (``hw.image``); that tail is dropped again
after the run, so the image keeps its size. A program that cannot finish is reported from the
machine contract's token protocol (``accel.machine.tokens.check_tokens``, who waits on what):
before Amaranth's simulator starts, and after a Verilator run that reached its cycle limit.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from accel.machine.config import HwConfig
from accel.machine.costs import serial_cycles
from accel.machine.dram import Dram
from accel.machine.program import Program
from accel.machine.tokens import check_tokens
from hw.activity import action_counts, active_cycles
from hw.image import prepare_image
from hw.names import RTL_ENGINES
from hw.primitives import Target
from hw.waveform import VcdDump

__all__ = ["ENGINES", "RtlStats", "run_rtl"]

ENGINES = RTL_ENGINES


class RtlStats(dict):  # type: ignore[type-arg]
    """The counters of an RTL run: a plain dict that also has ``to_dict`` (like ``SimStats``)."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self)


def _pick_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    from hw.verilator import available, find_verilator

    if engine == "auto":
        return "verilator" if available() else "amaranth"
    if engine == "verilator":
        find_verilator()  # raises, saying what is missing
    return engine


_VERILATOR_MAX_CYCLES = 50_000_000
"""Verilator's default cycle limit (about a minute at its speed on default)."""


def _vcd_dump(vcd: str | Path | VcdDump | None) -> VcdDump | None:
    """``vcd`` as a :class:`VcdDump`, its folder checked."""
    if vcd is None:
        return None
    dump = vcd if isinstance(vcd, VcdDump) else VcdDump(Path(vcd))
    dump.check_folder()
    return dump


def run_rtl(
    program: Program,
    dram: Dram,
    cfg: HwConfig,
    vcd: str | Path | VcdDump | None = None,
    engine: str = "auto",
    max_cycles: int | None = None,
    family: str | None = None,
) -> tuple[int, RtlStats]:
    """Run ``program`` on the RTL of ``cfg``; ``dram`` is modified in place.

    Parameters
    ----------
    program
        The program (its regions are added to ``dram`` and its micro-ops written there).
    dram
        The DRAM image with the program's inputs.
    cfg
        The hardware; must be the program's config.
    vcd
        Write waveforms to this file: of the whole run, or of the cycles a
        :class:`hw.waveform.VcdDump` names (the file's time stamps stay the whole run's).
    engine
        ``"auto"``, ``"verilator"`` or ``"amaranth"``.
    max_cycles
        Give up after this many cycles. Default on Amaranth's simulator: twice the program's
        cycles with nothing overlapped (``accel.machine.costs.serial_cycles``, an upper bound)
        plus 1,000, after its token protocol was checked (a deadlock is reported before the
        RTL starts); on Verilator: 50 million (about a minute), and a run that reaches it is
        then checked the same way, which reports a deadlock.
    family
        Simulate the netlist built for this FPGA family, with its primitives
        (:mod:`hw.primitives`; Verilator only) instead of the generic one.

    Returns
    -------
    cycles, stats
        Cycles from the start to FINISH's retirement (the timing simulator's
        ``SimStats.cycles``) and counters (a dict with ``to_dict``): ``engine``,
        ``dram_bytes_read``, ``dram_bytes_written`` (bytes, instruction fetch included),
        ``dram_transactions`` (``dram_read_txns``, ``dram_write_txns``), ``dram_beats``,
        ``wall_s`` (seconds in the simulator); ``counters`` (the raw values of
        :func:`hw.activity.probes`), ``actions`` (the
        :class:`~accel.machine.actions.ActionCounts` they make, as ``to_dict`` gives it) and
        ``active`` (each module's active cycles), all counted from the design's signals.

    Raises
    ------
    ProgramError
        Wrong config, invalid program, or a deadlock
        (:class:`~accel.machine.program.SimulationDeadlock`, saying who waits on what).
    ValueError
        Unknown engine or family, a family on the Amaranth engine, or a VCD path in a folder
        that does not exist.
    RuntimeError
        Verilator asked for but missing, or the run did not finish within ``max_cycles``.
    """
    chosen = _pick_engine(engine)
    if family is not None:
        Target(family)
        if chosen != "verilator":
            raise ValueError(f"family {family!r} needs the verilator engine, not {chosen}")
    dump = _vcd_dump(vcd)
    run = prepare_image(program, dram, cfg)
    # The waveforms go to a hidden file beside the VCD, renamed when the run has finished: a
    # run that fails leaves an earlier file of that name as it was.
    partial = None if dump is None else replace(
        dump, path=dump.path.with_name(f".{dump.path.name}.partial"))
    try:
        if chosen == "amaranth":
            from hw import amaranth_engine

            if max_cycles is None:
                check_tokens(program)
                max_cycles = 2 * serial_cycles(program) + 1000
            cycles, counters = amaranth_engine.simulate(cfg, run, vcd=partial,
                                                        max_cycles=max_cycles)
        else:
            from hw import verilator

            try:
                cycles, counters = verilator.simulate(
                    cfg, run, vcd=partial, max_cycles=_VERILATOR_MAX_CYCLES
                    if max_cycles is None else max_cycles, family=family)
            except RuntimeError:
                # A run that failed (the cycle limit, typically) on a program that deadlocks
                # is reported as the deadlock, with who waits on what.
                check_tokens(program)
                raise
    except BaseException:
        if partial is not None:
            partial.path.unlink(missing_ok=True)
        raise
    if dump is not None and partial is not None:
        os.replace(partial.path, dump.path)
    dram.data[:] = run.image[: run.data_bytes]
    stats = RtlStats(counters)
    stats["engine"] = chosen
    if "counters" in stats:
        stats["actions"] = action_counts(cfg, stats["counters"], stats).to_dict()
        stats["active"] = active_cycles(cfg, stats["counters"])
    return cycles, stats
