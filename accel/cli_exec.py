"""The ``accel exec`` command: run one binary program on a backend.

::

    accel asm gemm.s -o gemm.bin
    accel exec gemm.bin --backend rtl --check            # DRAM as fsim's, cycles as sim's
    accel exec gemm.s --trace gemm.json                  # assembly text too; a Perfetto trace
    accel exec gemm.bin --backend rtl --vcd gemm.vcd --vcd-window 0:500
    accel exec gemm.bin --dram-in inputs.bin --dram-out result.bin

A program file holds instructions, micro-ops and the layout of its DRAM regions, not their
contents: the regions are filled with random bytes (``--seed``), or the DRAM image is read from
``--dram-in`` (raw bytes, at least as long as the regions reach). The micro-ops are placed by the
run itself. With ``--check`` the same image also runs on ``fsim`` (and, for ``rtl``, on ``sim``),
and the command exits 1 unless the DRAM contents (and the cycles) are identical.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DEFAULT_VCD_CYCLES", "add_parsers", "add_vcd_arguments", "cmd_exec", "rtl_failure",
           "vcd_dump", "vcd_summary"]

DEFAULT_VCD_CYCLES = "0:10000"
"""The cycles ``--vcd`` dumps without ``--vcd-window``: a whole-design dump of a GEMM running
is about 15 KB a cycle on ``default``, so 10,000 cycles are about 150 MB."""


def add_vcd_arguments(p: argparse.ArgumentParser, what: str) -> None:
    """``--vcd`` and ``--vcd-window`` (for ``rtl`` runs of ``what``)."""
    from accel.cli_util import add_deprecated_alias

    p.add_argument("--vcd", metavar="FILE",
                   help=f"with --backend rtl: write waveforms of {what} to FILE (from Verilator "
                        "or Amaranth's simulator, whichever runs it)")
    p.add_argument("--vcd-window", metavar="FIRST:LAST", default=None,
                   help=f"the cycles --vcd dumps, LAST excluded, either end optional "
                        f"(default {DEFAULT_VCD_CYCLES}; a whole-design dump takes about "
                        "15 KB a cycle on default; 0: dumps the whole run)")
    add_deprecated_alias(p, "--vcd-cycles", "--vcd-window", "vcd_window")


def vcd_dump(args: argparse.Namespace) -> Any:
    """The :class:`hw.waveform.VcdDump` that ``--vcd``/``--vcd-window`` ask for, or None.

    Raises
    ------
    ValueError
        ``--vcd-window`` without ``--vcd``, ``--vcd`` on a backend other than ``rtl``, a
        malformed window, or a folder that does not exist.
    """
    from hw.waveform import VcdDump

    if args.vcd is None:
        if args.vcd_window is not None:
            raise ValueError("--vcd-window needs --vcd FILE")
        return None
    if args.backend != "rtl":
        raise ValueError(f"--vcd needs --backend rtl (the {args.backend} backend has no "
                         "waveforms)")
    dump = VcdDump.parse(args.vcd, args.vcd_window or DEFAULT_VCD_CYCLES)
    dump.check_folder()
    return dump


def rtl_failure(exc: RuntimeError) -> str:
    """A failed RTL run (a Verilator build, the cycle limit) in one line."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    more = len(lines) - 1
    return lines[0].rstrip(":") + (f" (ACCEL_DEBUG=1 shows the {more} lines of log that "
                                   "follow)" if more else "")


def vcd_summary(dump: Any, cycles: int, what: str) -> str:
    """The line saying what the dump holds."""
    size = dump.path.stat().st_size / 1e6
    return f"vcd: {dump.path}: {what}, {dump.covers(cycles)} ({size:.1f} MB)"


def add_parsers(subparsers: Any) -> None:
    """Add ``exec`` to ``subparsers`` (an ``add_subparsers()`` result)."""
    from accel.cli_util import add_deprecated_alias
    from hw.names import RTL_ENGINES

    p = subparsers.add_parser(
        "exec", help="run a binary program (accel asm) on fsim, sim or the RTL")
    p.add_argument("program", help="binary program file, or assembly text (.s, .asm: what "
                                   "accel disasm prints)")
    p.add_argument("--config", help="config the program must have been built for")
    p.add_argument("--backend", default="sim", choices=["fsim", "sim", "rtl"],
                   help="fsim: functional simulator, no cycles; sim: functional and SimPy "
                        "timing simulators (default); rtl: the Amaranth RTL")
    p.add_argument("--engine", default="auto", choices=RTL_ENGINES,
                   help="with --backend rtl: Verilator, Amaranth's simulator, or Verilator "
                        "when it is installed (auto, the default)")
    p.add_argument("--cycle-limit", type=int, default=None, metavar="N",
                   help="with --backend rtl: give up after N cycles (default: run_rtl's, 50 "
                        "million)")
    add_deprecated_alias(p, "--max-cycles", "--cycle-limit", "cycle_limit", type=int)
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random bytes the DRAM regions start with (default 0)")
    p.add_argument("--dram-in", metavar="FILE",
                   help="start from this DRAM image (raw bytes) instead of random bytes")
    p.add_argument("--dram-out", metavar="FILE",
                   help="the file to write the DRAM image to after the run")
    p.add_argument("--trace", metavar="FILE",
                   help="with --backend sim: write a Perfetto trace (Chrome JSON) of the run")
    p.add_argument("--check", action="store_true",
                   help="also run fsim (and sim, for rtl) and compare the DRAM (and cycles)")
    add_vcd_arguments(p, "the run")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_exec)


def _load_program(path: Path, cfg: Any) -> Any:
    """A binary program file, or assembly text when the name ends in .s or .asm."""
    from accel.machine.program import Program, assemble_file

    if path.suffix not in (".s", ".asm"):
        return Program.load(path, config=cfg)
    return assemble_file(path, config=cfg)


def _initial_image(program: Any, args: argparse.Namespace) -> Any:
    import numpy as np

    from accel.machine.dram import Dram

    dram = Dram()
    for region in program.regions.values():
        dram.add_region(region)
    if args.dram_in is not None:
        path = Path(args.dram_in)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{path}: cannot read the DRAM image: {exc.strerror}") from None
        if len(data) < dram.nbytes:
            raise ValueError(f"{path}: the DRAM image has {len(data)} bytes; the program's "
                             f"regions reach byte {dram.nbytes}")
        dram = Dram(len(data))
        dram.data[:] = np.frombuffer(data, dtype=np.uint8)
        return dram
    rng = np.random.default_rng(args.seed)
    for name in program.regions:
        if name != program.uop_region:
            raw = dram.raw(name)
            raw[:] = rng.integers(0, 256, raw.size, dtype=np.uint8)
    return dram


def _differences(got: np.ndarray, want: np.ndarray, regions: dict[str, Any]) -> str:
    """Where two DRAM images of one size differ, in words ('' when identical)."""
    import numpy as np

    bad = np.flatnonzero(got != want)
    if not bad.size:
        return ""
    first = int(bad[0])
    where = next((f" (region {r.name!r})" for r in regions.values()
                  if r.offset <= first < r.end), "")
    return f"{bad.size} bytes differ, the first at byte {first}{where}"


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.partial")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ValueError(f"{path}: cannot write the DRAM image: {exc.strerror}") from None


def cmd_exec(args: argparse.Namespace) -> int:
    """``accel exec``: run a program file; exit 1 when ``--check`` finds a difference."""
    from accel.cli_util import check_out_file
    from accel.machine.config import load_config
    from runtime.backends import run_program

    dump = vcd_dump(args)
    if args.trace is not None and args.backend != "sim":
        raise ValueError(f"--trace needs --backend sim (the {args.backend} backend records "
                         "no trace)")
    inputs = [p for p in (args.program, args.dram_in) if p is not None]
    for flag, path in (("--trace", args.trace), ("--dram-out", args.dram_out)):
        if path is not None:
            check_out_file(path, flag, inputs=inputs)
    if args.backend != "rtl" and (args.engine != "auto" or args.cycle_limit is not None):
        raise ValueError("--engine and --cycle-limit need --backend rtl")
    if args.cycle_limit is not None and args.cycle_limit < 1:
        raise ValueError(f"--cycle-limit must be at least 1, not {args.cycle_limit}")
    cfg = load_config(args.config) if args.config else None
    program = _load_program(Path(args.program), cfg)
    cfg = program.config
    dram = _initial_image(program, args)
    initial = dram.copy()
    options: dict[str, Any] = {}
    if args.backend == "rtl":
        options = {"engine": args.engine, "max_cycles": args.cycle_limit, "vcd": dump}
    try:
        result = run_program(program, dram, backend=args.backend,
                             trace=args.trace is not None, **options)
    except RuntimeError as exc:   # the RTL: a failed Verilator build, the cycle limit
        raise ValueError(rtl_failure(exc)) from exc
    out: dict[str, Any] = {"program": args.program, "config": cfg.name,
                           "instructions": len(program.insns), **result.to_dict()}
    failed = False
    if args.check:
        checks: dict[str, Any] = {}
        if args.backend != "fsim":
            ref = initial.copy()
            run_program(program, ref, backend="fsim")
            checks["dram_vs_fsim"] = _differences(dram.data, ref.data, program.regions) \
                or "identical"
        if args.backend == "rtl":
            sim = run_program(program, initial.copy(), backend="sim")
            checks["sim_cycles"] = sim.cycles
        if args.backend == "fsim":
            checks["note"] = "fsim is the reference: nothing to compare"
        failed = checks.get("dram_vs_fsim", "identical") != "identical" or \
            checks.get("sim_cycles", result.cycles) != result.cycles
        out["check"] = checks
    if args.dram_out is not None:
        _write_atomically(Path(args.dram_out), dram.data.tobytes())
    if args.trace is not None:
        result.stats.write_trace(args.trace)
    if args.json:
        if dump is not None:
            out["vcd"] = {"path": str(dump.path), "cycles": dump.covers(result.cycles)}
        print(json.dumps(out, indent=2, default=str))
        return 1 if failed else 0
    _print_result(args, program, cfg, result, out.get("check"), failed)
    if dump is not None:
        print(vcd_summary(dump, result.cycles, "the whole design"))
    if args.dram_out is not None:
        print(f"wrote {args.dram_out} ({dram.nbytes} bytes)")
    if args.trace is not None:
        print(f"wrote {args.trace} (open it at ui.perfetto.dev)")
    return 1 if failed else 0


def _print_result(args: argparse.Namespace, program: Any, cfg: Any, result: Any,
                  checks: dict[str, Any] | None, failed: bool) -> None:
    engine = result.stats.get("engine") if args.backend == "rtl" else None
    on = args.backend + (f" ({engine})" if engine else "")
    head = f"{args.program}: {len(program.insns)} instructions on {on}, {cfg.name}"
    if result.cycles is None:
        print(f"{head}: done (fsim counts no cycles)")
    else:
        print(f"{head}: {result.cycles:,} cycles = "
              f"{result.cycles / (cfg.clock_mhz * 1000.0):.3f} ms at {cfg.clock_mhz:g} MHz")
    stats = result.stats.to_dict()
    scalars = {k: v for k, v in stats.items() if isinstance(v, int | float) and k != "cycles"}
    if scalars:
        print("  " + ", ".join(f"{k} {v:,.3g}" if isinstance(v, float) else f"{k} {v:,}"
                               for k, v in scalars.items()))
    if checks is None:
        return
    if "note" in checks:
        print(f"check: {checks['note']}")
        return
    dram = checks["dram_vs_fsim"]
    parts = ["DRAM identical to fsim's" if dram == "identical"
             else f"DRAM differs from fsim's ({dram})"]
    if "sim_cycles" in checks:
        same = checks["sim_cycles"] == result.cycles
        parts.append(f"cycles {'equal to' if same else 'differ from'} sim's "
                     f"({checks['sim_cycles']:,})")
    print(("check: FAILED: " if failed else "check: ") + "; ".join(parts))
