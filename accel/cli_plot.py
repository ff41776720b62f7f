"""The ``accel plot`` command: figures from a sweep's results directory (:mod:`accel.plots`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parsers", "cmd_plot"]


def add_parsers(subparsers: Any) -> None:
    """Add ``plot`` to ``subparsers`` (an ``add_subparsers()`` result)."""
    from accel.plots import AREA_METRICS, KINDS

    p = subparsers.add_parser(
        "plot", help="plot a sweep's results: utilisation, stalls, roofline, Pareto, timeline")
    p.add_argument("dir", help="a sweep output directory (holding results.csv)")
    p.add_argument("--kind", action="append", choices=KINDS,
                   help="plot kind; repeat for several (default: all that the results allow)")
    p.add_argument("--out", default=None, help="output folder (default DIR/plots)")
    p.add_argument("--area", default="luts", choices=sorted(AREA_METRICS),
                   help="area axis of the Pareto plot (default luts)")
    p.add_argument("--trace", default=None,
                   help="Chrome trace for the timeline (default: the slowest point's trace "
                        "in DIR/traces)")
    p.add_argument("--max-cycles", type=int, default=None,
                   help="timeline window: only the first N cycles")
    p.set_defaults(func=cmd_plot)


def cmd_plot(args: argparse.Namespace) -> int:
    """Draw the requested kinds; print one line per file written and per kind skipped."""
    from accel.plots import KINDS, plot_all

    kinds = args.kind or list(KINDS)
    written, skipped = plot_all(Path(args.dir), kinds, Path(args.out) if args.out else None,
                                area=args.area, trace=Path(args.trace) if args.trace else None,
                                max_cycles=args.max_cycles)
    for path in written:
        print(f"wrote {path}")
    for note in skipped:
        print(f"skipped {note}", file=sys.stderr)
    if not written:
        print("accel: error: nothing could be plotted", file=sys.stderr)
        return 2
    return 0
