"""The ``accel sweep`` command: run a YAML sweep spec into a results folder.

    accel sweep configs/sweeps/small.yaml --out out/small [--workers N]
    accel sweep SPEC --out DIR --scheduler tcp://host:8786     # on a Dask cluster

Failures that stop the sweep (a bad spec, a results folder of another spec, an unreachable
scheduler) are one ``accel: error: ...`` line and exit status 2; a point that fails is a row
with ``status == error`` and the sweep goes on, and then exits with status 1 and a line
counting the failed points. Re-running the same command resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_parsers", "cmd_sweep"]

from accel.cli_util import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    WORKERS_HELP,
    caused_by_interrupt,
    interrupted,
)


def add_parsers(subparsers: Any) -> None:
    """Add ``sweep`` to ``subparsers`` (an ``add_subparsers()`` result)."""
    p = subparsers.add_parser(
        "sweep", help="run a design-space sweep spec (YAML) into a results folder",
        description="Run every (config, workload) point of a sweep spec and append one row "
                    "per point to DIR/results.csv as it finishes (and DIR/results.parquet "
                    "when pyarrow is installed). Re-running the same command resumes.")
    p.add_argument("spec", help="sweep spec YAML, or a shipped one by name (small, resnet18_24)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the results folder (created when missing; the same folder resumes)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=None, metavar="N", help=WORKERS_HELP)
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="submit to a running Dask scheduler (e.g. tcp://10.0.0.1:8786)")
    p.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    p.add_argument("--json", action="store_true",
                   help="print the summary as JSON instead of lines")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    """``accel sweep``: load the spec, run the missing points, print a summary."""
    from accel.dse import load_spec, read_results, run_sweep

    spec = load_spec(args.spec)
    if args.workers is not None and args.workers < 1:
        print(f"accel: error: --workers: expected at least 1, got {args.workers}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        summary = run_sweep(spec, args.out, workers=args.workers, scheduler=args.scheduler,
                            quiet=args.quiet)
    except BaseException as exc:
        if not caused_by_interrupt(exc):
            raise
        return interrupted(f"accel: sweep interrupted; completed rows are kept in "
                           f"{args.out}/results.csv; run the same command again to resume")
    s = summary
    # Counted over the whole results file: a resumed sweep keeps the error rows of earlier
    # runs (their points are done), and a script must still see that the sweep has failures.
    failed = {r["point_id"] for r in read_results(args.out) if r.get("status") == "error"}
    configs = s.points // max(len(spec.workloads), 1)
    if args.json:
        print(json.dumps({
            "sweep": spec.name, "configs": configs, "workload_items": len(spec.workloads),
            "points": s.points, "already_done": s.skipped, "ran": s.ran, "ok": s.ok,
            "errors": s.errors, "failed_points": len(failed), "rows": s.rows,
            "seconds": round(s.seconds, 3), "repaired_bytes": s.repaired_bytes,
            "results": str(s.results), "parquet": str(s.parquet) if s.parquet else None,
            "first_error": s.error_messages[0] if s.error_messages else None}, indent=2))
    else:
        resumed = f", {s.skipped} already done" if s.skipped else ""
        repaired = (f"; cut a torn last line ({s.repaired_bytes} bytes)" if s.repaired_bytes
                    else "")
        print(f"sweep {spec.name}: {configs} configs x {len(spec.workloads)} workload items = "
              f"{s.points} points{resumed}; ran {s.ran}: {s.ok} ok, "
              f"{s.errors} error, {s.rows} rows in {s.seconds:.1f} s{repaired}")
        files = f"{s.results}" + (f", {s.parquet}" if s.parquet else "")
        print(f"results: {files}")
        if s.error_messages:
            print(f"first error: {s.error_messages[0]}")
    if failed:
        print(f"accel: {len(failed)} of {s.points} points of sweep {spec.name} ended in error; "
              f"the error column of {s.results} says why", file=sys.stderr)
        return EXIT_FAILED
    return 0
