"""Search quality of ``accel codesign``: its best machine against an exhaustive grid's.

For each network and part, every point of :data:`SPACE` is priced (:func:`accel.dse.codesign.
grid`, the evaluator's area model and layer cycle models), then a fresh evaluator runs the
search (:func:`accel.dse.codesign.search`) for each seed. Printed per case: the grid's best
cycles and evaluations, and per seed the search's best, its ratio to the grid's and the share
of the grid's evaluations it used (the issue's target: within 2% using at most 10%).

Run from the repository root: ``python benchmarks/codesign_quality.py [--models resnet18,
bert_base] [--devices ecp5-85f] [--seeds 0,1,2] [--starts 1]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPACE = {
    "core.block_in": (4, 8, 16), "core.block_out": (4, 8, 16),
    "buffers.inp": (16384, 32768, 65536), "buffers.wgt": (32768, 65536, 131072),
    "buffers.acc": (16384, 32768, 65536), "dram.max_outstanding": (2, 8),
    "store.postproc": (False, True), "gemm.reset_from_acc": (False, True),
}
"""1,944 points: every core shape of the area model's sample, three sizes of each data
buffer, two request depths, the store and reset options (the micro-op buffer and the DRAM
width at the base's)."""


def main() -> int:
    from accel.dse.codesign import Evaluator, grid, search
    from accel.machine.fpga import load_device

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,bert_base")
    ap.add_argument("--devices", default="ecp5-85f")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--starts", type=int, default=1)
    args = ap.parse_args()
    failed = False
    for model in args.models.split(","):
        for name in args.devices.split(","):
            device = load_device(name)
            t0 = time.perf_counter()
            ev = Evaluator(model, device)
            exhaustive = grid(ev, SPACE)
            best = exhaustive.best
            print(f"{model} on {device.name}: grid {exhaustive.area_checks} points, "
                  f"{exhaustive.evaluations} priced for cycles, best {best.cycles:,.0f} "
                  f"cycles ({best.config.name}), {time.perf_counter() - t0:.0f} s",
                  flush=True)
            for seed in (int(s) for s in args.seeds.split(",")):
                t0 = time.perf_counter()
                found = search(Evaluator(model, device), SPACE, starts=args.starts, seed=seed)
                ratio = found.best.cycles / best.cycles
                share = found.evaluations / exhaustive.evaluations
                ok = ratio <= 1.02 and share <= 0.10
                failed |= not ok
                print(f"  seed {seed}: best {found.best.cycles:,.0f} cycles = {ratio:.4f} x "
                      f"the grid's, {found.evaluations} evaluations = {100 * share:.1f}% of "
                      f"the grid's ({found.area_checks} points priced), "
                      f"{time.perf_counter() - t0:.0f} s{'' if ok else '  MISSED'}",
                      flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
