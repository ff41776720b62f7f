"""The ``rtl`` backend: run a Program on the RTL, leaving the DRAM image as ``fsim`` would.

Two engines: Amaranth's own simulator (slow; no tools needed) and Verilator (the generated
Verilog compiled with a C++ harness, cached per config). ``engine="auto"`` takes Verilator when
the ``verilator`` program is installed.

The instructions are placed after the DRAM image, 16-byte aligned, for fetch to read; that tail
is dropped again after the run, so the image keeps its size.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from accel.cache import cache_dir as accel_cache_dir
from accel.config import HwConfig
from accel.dram import Dram
from accel.isa import INSN_BYTES, encode_uops
from accel.program import Program, ProgramError
from accel.waveform import VcdDump
from hw.primitives import Target

__all__ = ["ENGINES", "RtlRun", "RtlStats", "cache_dir", "prepare_image", "run_rtl"]

ENGINES = ("auto", "verilator", "amaranth")


def cache_dir(kind: str) -> Path:
    """:func:`accel.cache.cache_dir`, or a fresh temporary folder when caching is off."""
    path = accel_cache_dir(kind)
    return path if path is not None else Path(tempfile.mkdtemp(prefix=f"accel-{kind}-"))


class RtlStats(dict):  # type: ignore[type-arg]
    """The counters of an RTL run: a plain dict that also has ``to_dict`` (like ``SimStats``)."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self)


@dataclass
class RtlRun:
    """A DRAM image ready for the RTL: the program's data, then its instructions."""

    image: np.ndarray
    insn_addr: int
    insn_count: int
    data_bytes: int


def _place_program(program: Program, dram: Dram) -> None:
    # The same placement as sim.functional.place_program (hw may not import sim).
    for region in program.regions.values():
        dram.add_region(region)
    if len(program.uops):
        assert program.uop_region is not None  # Program.validate checked it
        words = encode_uops(program.uops, program.config)
        dram.write(program.uop_region, words.astype(f"<u{program.config.uop_bytes}"))


def prepare_image(program: Program, dram: Dram, cfg: HwConfig) -> RtlRun:
    """Validate ``program``, place it in ``dram`` and build the RTL's DRAM image.

    Raises
    ------
    ProgramError
        The program was built for another config, or is invalid.
    """
    if program.config != cfg:
        raise ProgramError(
            f"program was built for config {program.config.name}, not {cfg.name}"
        )
    program.validate()
    _place_program(program, dram)
    insns = np.frombuffer(program.encode_insns(), dtype=np.uint8)
    data_bytes = dram.nbytes
    insn_addr = -(-data_bytes // INSN_BYTES) * INSN_BYTES
    image = np.zeros(insn_addr + len(insns), dtype=np.uint8)
    image[:data_bytes] = dram.data
    image[insn_addr:] = insns
    return RtlRun(image, insn_addr, len(program.insns), data_bytes)


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


def _model_cycles(program: Program, cfg: HwConfig) -> int:
    """The timing simulator's cycles for ``program`` (no data needed).

    Raises
    ------
    sim.errors.SimulationDeadlock
        The program deadlocks (a :class:`ProgramError` naming who waits on what).
    """
    from sim.timing import TimingSimulator

    return TimingSimulator(cfg).run(program, Dram()).cycles


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
        :class:`accel.waveform.VcdDump` names (the file's time stamps stay the whole run's).
    engine
        ``"auto"``, ``"verilator"`` or ``"amaranth"``.
    max_cycles
        Give up after this many cycles. Default on Amaranth's simulator: twice the timing
        simulator's count plus 1,000, the timing simulator run first (without data, in a
        fraction of this engine's time), so a program that deadlocks is reported before the
        RTL starts; on Verilator: 50 million (about a minute), and a run that reaches it is
        then checked with the timing simulator, which reports a deadlock.
    family
        Simulate the netlist built for this FPGA family, with its primitives
        (:mod:`hw.primitives`; Verilator only) instead of the generic one.

    Returns
    -------
    cycles, stats
        Cycles from the start to FINISH's retirement (the timing simulator's
        ``SimStats.cycles``) and counters (a dict with ``to_dict``): ``engine``,
        ``dram_bytes_read``, ``dram_bytes_written`` (bytes, instruction fetch included),
        ``dram_transactions``, ``wall_s`` (seconds in the simulator).

    Raises
    ------
    ProgramError
        Wrong config, invalid program, or a deadlock (``sim.errors.SimulationDeadlock``, with
        the timing simulator's report of who waits on what).
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

            if max_cycles is None:      # the model takes a fraction of this engine's time
                max_cycles = 2 * _model_cycles(program, cfg) + 1000
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
                _model_cycles(program, cfg)
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
    return cycles, stats
