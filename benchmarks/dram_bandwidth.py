"""Achieved DRAM bandwidth of contiguous loads against ``dram.max_outstanding``.

For each transfer size (1 KB to 1 MB, in rows of 512 bytes) and each ``max_outstanding`` (1, 2,
4, 8, 16), ``accel.testing.synthetic.contiguous_load`` runs on the timing simulator with the
config's other fields as shipped (``--config``, default ``default``), rows merged into runs
(``dram.merge_rows: true``) and, for comparison, the original channel (one transaction at a
time, rows one by one). Achieved bandwidth = bytes / cycles from the first LOAD's decode to
the last LOAD's end, printed in bytes per cycle and as a share of ``dram.bytes_per_cycle``.
With ``--plot FILE`` also a small plot (bytes/cycle against transfer size, one line per
``max_outstanding``). Every run's DRAM image is checked against the functional simulator.

    python benchmarks/dram_bandwidth.py [--config default] [--plot out/dram_bandwidth.png]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from accel import load_config
from accel.testing.synthetic import contiguous_load
from runtime.backends import run_program

SIZES = [1 << k for k in range(10, 21, 2)]          # 1 KB, 4 KB, ..., 1 MB
OUTSTANDING = (1, 2, 4, 8, 16)


def achieved(cfg: object, nbytes: int) -> float:
    """Bytes per cycle of a contiguous load of ``nbytes`` on ``cfg`` (checked against fsim)."""
    program, dram = contiguous_load(cfg, nbytes)
    reference = dram.copy()
    result = run_program(program, dram, backend="sim")
    run_program(program, reference, backend="fsim")
    if not np.array_equal(dram.data, reference.data):
        raise SystemExit("check: FAILED - sim and fsim DRAM differ")
    loads = [s for s in result.stats.timeline if s.module == "load"]
    return nbytes / (loads[-1].end - loads[0].start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    parser.add_argument("--plot", metavar="FILE", help="also draw the table as a PNG")
    args = parser.parse_args()
    base = load_config(args.config)
    peak = base.dram.bytes_per_cycle
    print(f"config {base.name}: latency {base.dram.latency} cycles, {peak} bytes/cycle, "
          f"bursts of {base.dram.max_burst} bytes; bytes/cycle (share of peak)")
    lines = {"1, rows one by one": [
        achieved(base.replace(**{"dram.max_outstanding": 1, "dram.merge_rows": False}), n)
        for n in SIZES]}
    for k in OUTSTANDING:
        cfg = base.replace(**{"dram.max_outstanding": k, "dram.merge_rows": True})
        lines[f"{k}"] = [achieved(cfg, n) for n in SIZES]
    print(f"{'max_outstanding':<20}" + "".join(f"{n // 1024:>10} KB" for n in SIZES))
    for label, values in lines.items():
        print(f"{label:<20}" + "".join(f"{v:6.2f} ({v / peak:3.0%})" for v in values))
    print("check: every run's DRAM identical to fsim")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.6))
        for label, values in lines.items():
            ax.plot([n / 1024 for n in SIZES], values, marker="o", label=label)
        ax.axhline(peak, color="grey", linestyle="--", linewidth=1, label="peak")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("contiguous load (KB)")
        ax.set_ylabel("achieved bytes/cycle")
        ax.set_title(f"DRAM bandwidth, {args.config} (latency {base.dram.latency})")
        ax.legend(title="max_outstanding", fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
