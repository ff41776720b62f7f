"""The area model's error against Yosys and its time per config.

For every fitted row of ``accel/dse/area_data/<target>.csv`` (or ``--data``) it prints Yosys's
LUTs, flip-flops, DSP and block-RAM counts beside the model's, fitted to the other rows (leave
one out), then the ``heldout`` rows beside the model fitted to all fitted rows; then the worst
and mean absolute relative error of each resource over each set, and the model's time per
config (its first call, which fits, apart).

Run from the repository root: ``python benchmarks/area_model.py [--target ecp5] [--data CSV]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel.dse.area_model import (
    HELD_OUT,
    AreaModel,
    cross_validate,
    data_path,
    fit_rows,
    load_rows,
)

KEYS = ("luts", "ffs", "carries", "dsps", "brams", "lutrams")


def _table(title: str, results: list) -> dict[str, list[float]]:
    print(f"\n{title}")
    print(f"{'config':<16} " + "  ".join(f"{k + ' yosys/model':>22}" for k in KEYS))
    errors: dict[str, list[float]] = {k: [] for k in KEYS}
    for label, counts, got in results:
        cells = []
        for k in KEYS:
            want, have = counts[k], getattr(got, k)
            errors[k].append(abs(have - want) / want if want else float(have != want))
            cells.append(f"{want:>10} / {have:<10}")
        print(f"{label:<16} " + "  ".join(cells))
    for k in KEYS:
        e = errors[k]
        print(f"  {k:<8} mean |error| {100 * statistics.mean(e):5.1f}%   worst "
              f"{100 * max(e):5.1f}%   exact {sum(x == 0 for x in e)}/{len(e)}")
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ecp5")
    ap.add_argument("--data", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = load_rows(args.data or data_path(args.target))
    fitted = fit_rows(rows)
    held = [r for r in rows if r[0].startswith(HELD_OUT)]
    print(f"{args.target}: {len(fitted)} fitted rows, {len(held)} held out")
    _table("each fitted row, predicted by a model fitted to the others (leave one out)",
           cross_validate(fitted, args.target))
    t0 = time.perf_counter()
    model = AreaModel.fit(fitted, args.target)
    fit_s = time.perf_counter() - t0
    if held:
        _table("held-out rows, predicted by the model fitted to every fitted row",
               [(label, counts, model.predict(cfg)) for label, cfg, counts in held])
    cfgs = [cfg for _, cfg, _ in rows]
    model.predict(cfgs[0])
    t0 = time.perf_counter()
    for cfg in cfgs:
        model.predict(cfg)
    per = (time.perf_counter() - t0) / len(cfgs)
    print(f"\nfit {1000 * fit_s:.0f} ms; predict {1000 * per:.1f} ms per config "
          f"(mean of {len(cfgs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
