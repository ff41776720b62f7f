"""The ``accel plot`` command: figures from a sweep's results directory (:mod:`accel.plots`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parsers", "cmd_plot", "cmd_waveform"]


def add_parsers(subparsers: Any) -> None:
    """Add ``plot`` and ``waveform`` to ``subparsers`` (an ``add_subparsers()`` result)."""
    from accel.cli_util import add_deprecated_alias
    from accel.plots import AREA_METRICS, KINDS

    p = subparsers.add_parser(
        "plot", help="plot a sweep's results (utilisation, stalls, roofline, Pareto, "
                     "timeline, energy: breakdown, energy-delay and energy-area fronts) or an "
                     "accel run folder's (utilisation, stalls, timeline)")
    p.add_argument("dir", help="a sweep's --out folder (results.csv, traces/) or an accel run "
                               "--out folder (report.json, trace.json)")
    p.add_argument("--kind", action="append", choices=KINDS,
                   help="plot kind; repeat for several (default: all that the results allow)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="the folder to write the plots to (created when missing; default "
                        "DIR/plots)")
    p.add_argument("--area", default="luts", choices=sorted(AREA_METRICS),
                   help="area axis of the pareto and energy_area plots (default luts)")
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="Chrome trace for the timeline (default: the slowest point's trace "
                        "in DIR/traces, or a run folder's trace.json)")
    p.add_argument("--window", default=None, metavar="FIRST:LAST",
                   help="the cycles the timeline draws, LAST excluded, either end optional "
                        "(default: the whole run)")
    # It meant the first N cycles; the old name now means only exec's RTL cycle limit.
    add_deprecated_alias(p, "--max-cycles", "--window", "max_cycles", type=int)
    p.set_defaults(func=cmd_plot)

    p = subparsers.add_parser(
        "waveform", help="draw signals of an RTL waveform dump (--vcd) as a PNG and SVG")
    p.add_argument("vcd", help="a VCD file from accel exec/run --vcd or run_rtl")
    p.add_argument("-s", "--signal", action="append", metavar="PATTERN",
                   help="glob pattern of the signals to draw, such as '*.top.load.issue'; "
                        "repeat for several, up to 64 signals in all (default: the modules' "
                        "issue/retire, a token queue, the DRAM request and done)")
    p.add_argument("--window", default=None, metavar="FIRST:LAST",
                   help="the program cycles to draw, LAST excluded (read from the design's "
                        "cycle counter, top.cycles, which both engines dump; default: the "
                        "dump's first 200)")
    add_deprecated_alias(p, "--cycles", "--window", "window")
    p.add_argument("--clock", default="*.top.clk", help="the clock's pattern (default %(default)s)")
    p.add_argument("--out", default=".", metavar="DIR",
                   help="the folder to write the PNG and SVG to (created when missing; "
                        "default: the current one)")
    p.set_defaults(func=cmd_waveform)


def cmd_waveform(args: argparse.Namespace) -> int:
    """Draw ``args.signal`` from the dump; print the files written."""
    from accel.cli_util import make_out_dir, parse_window
    from accel.plots import WAVEFORM_SIGNALS, plot_waveform

    first: int | None = None
    cycles = 200
    if args.window is not None:
        first, last = parse_window(args.window, "--window")
        cycles = (last - first) if last is not None else 1 << 62
    out = make_out_dir(args.out, "--out")
    for path in plot_waveform(Path(args.vcd), args.signal or list(WAVEFORM_SIGNALS), out,
                              first, cycles, clock=args.clock,
                              stem=Path(args.vcd).stem + "_waveform", counter="*.top.cycles"):
        print(f"wrote {path}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Draw the requested kinds; print one line per file written and per kind skipped, and
    the energy-delay front's configs when that plot was drawn."""
    from accel.cli_util import EXIT_FAILED, CliError, check_out_dir, parse_window
    from accel.dse import read_results
    from accel.plots import KINDS, energy_front, plot_all

    first, last = parse_window(args.window, "--window") if args.window else (0, None)
    if args.max_cycles is not None:  # the deprecated spelling: the first N cycles
        if args.max_cycles < 1:
            raise CliError(f"--max-cycles must be at least 1, not {args.max_cycles}")
        first, last = 0, args.max_cycles
    out = check_out_dir(args.out, "--out") if args.out else None
    kinds = args.kind or list(KINDS)
    failed: list[str] = []
    written, skipped = plot_all(Path(args.dir), kinds, out,
                                area=args.area, trace=Path(args.trace) if args.trace else None,
                                max_cycles=None if last is None else last - first,
                                first_cycle=first, failed=failed)
    for path in written:
        print(f"wrote {path}")
    if any(path.name == "energy_delay.png" for path in written):
        print("energy-delay Pareto front (energy and cycles of the whole workload):")
        for k, f in enumerate(energy_front(read_results(Path(args.dir))), 1):
            print(f"  {k}. {f['label']}: {f['uj']:.1f} uJ, {f['cycles']:,} cycles "
                  f"({f['ms']:.2f} ms)  [{f['config']}]")
    for note in skipped:
        print(f"skipped {note}", file=sys.stderr)
    for note in failed:  # each kind fails alone, on its own line
        print(f"accel: error: {note}", file=sys.stderr)
    if failed:
        return EXIT_FAILED
    if not written:
        print("accel: error: nothing could be plotted", file=sys.stderr)
        return 2
    return 0
