"""The ``accel plot`` command: figures from a sweep's results directory (:mod:`accel.plots`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parsers", "cmd_plot", "cmd_waveform"]


def add_parsers(subparsers: Any) -> None:
    """Add ``plot`` and ``waveform`` to ``subparsers`` (an ``add_subparsers()`` result)."""
    from accel.plots import AREA_METRICS, KINDS

    p = subparsers.add_parser(
        "plot", help="plot a sweep's results: utilisation, stalls, roofline, Pareto, timeline, "
                     "energy (breakdown, energy-delay and energy-area fronts)")
    p.add_argument("dir", help="a sweep output directory (holding results.csv)")
    p.add_argument("--kind", action="append", choices=KINDS,
                   help="plot kind; repeat for several (default: all that the results allow)")
    p.add_argument("--out", default=None, help="output folder (default DIR/plots)")
    p.add_argument("--area", default="luts", choices=sorted(AREA_METRICS),
                   help="area axis of the pareto and energy_area plots (default luts)")
    p.add_argument("--trace", default=None,
                   help="Chrome trace for the timeline (default: the slowest point's trace "
                        "in DIR/traces)")
    p.add_argument("--max-cycles", type=int, default=None,
                   help="timeline window: only the first N cycles")
    p.set_defaults(func=cmd_plot)

    p = subparsers.add_parser(
        "waveform", help="draw signals of an RTL waveform dump (--vcd) as a PNG and SVG")
    p.add_argument("vcd", help="a VCD file from accel exec/run --vcd or run_rtl")
    p.add_argument("-s", "--signal", action="append", metavar="PATTERN",
                   help="glob pattern of the signals to draw, such as '*.top.load.issue'; "
                        "repeat for several, up to 64 signals in all (default: the modules' "
                        "issue/retire, a token queue, the DRAM request and done)")
    p.add_argument("--cycles", default=None, metavar="FIRST:LAST",
                   help="the program cycles to draw (read from the design's cycle counter, "
                        "top.cycles, which both engines dump; default: the dump's first 200)")
    p.add_argument("--clock", default="*.top.clk", help="the clock's pattern (default %(default)s)")
    p.add_argument("--out", default=".", help="output folder (default: the current one)")
    p.set_defaults(func=cmd_waveform)


def cmd_waveform(args: argparse.Namespace) -> int:
    """Draw ``args.signal`` from the dump; print the files written."""
    from accel.plots import WAVEFORM_SIGNALS, plot_waveform
    from hw.waveform import VcdDump

    out = Path(args.out)
    if not out.is_dir():
        raise ValueError(f"{out}: no such folder for the waveform")
    first: int | None = None
    cycles = 200
    if args.cycles is not None:
        window = VcdDump.parse(args.vcd, args.cycles)
        first = window.first
        cycles = (window.last - window.first) if window.last is not None else 1 << 62
    for path in plot_waveform(Path(args.vcd), args.signal or list(WAVEFORM_SIGNALS), out,
                              first, cycles, clock=args.clock,
                              stem=Path(args.vcd).stem + "_waveform", counter="*.top.cycles"):
        print(f"wrote {path}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Draw the requested kinds; print one line per file written and per kind skipped, and
    the energy-delay front's configs when that plot was drawn."""
    from accel.dse import read_results
    from accel.plots import KINDS, energy_front, plot_all

    kinds = args.kind or list(KINDS)
    written, skipped = plot_all(Path(args.dir), kinds, Path(args.out) if args.out else None,
                                area=args.area, trace=Path(args.trace) if args.trace else None,
                                max_cycles=args.max_cycles)
    for path in written:
        print(f"wrote {path}")
    if any(path.name == "energy_delay.png" for path in written):
        print("energy-delay Pareto front (energy and cycles of the whole workload):")
        for k, f in enumerate(energy_front(read_results(Path(args.dir))), 1):
            print(f"  {k}. {f['label']}: {f['uj']:.1f} uJ, {f['cycles']:,} cycles "
                  f"({f['ms']:.2f} ms)  [{f['config']}]")
    for note in skipped:
        print(f"skipped {note}", file=sys.stderr)
    if not written:
        print("accel: error: nothing could be plotted", file=sys.stderr)
        return 2
    return 0
