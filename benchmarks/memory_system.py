"""ResNet-18 accelerator cycles against the DRAM channel's settings.

For each config (``--configs``, default ``default,vta_1x16x16``) and each combination of
``dram.max_outstanding`` (1, 2, 8), ``dram.arbiter`` and ``dram.merge_rows``, compiles ResNet-18
(224x224, batch 1, the default heuristic's knobs) and runs it on the timing simulator; prints
the accelerator cycles of the whole network and of the layers between the max-pool and the
global pool (the layers VTA's published 7.73M cycles cover), and the ratio to the original
channel (one transaction at a time, fixed priority, rows one by one). The first row of each
config is that original channel.

    python benchmarks/memory_system.py [--configs default,vta_1x16x16] [--check]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import accel
from accel.api import sample_inputs

SETTINGS = [(1, "priority", False)] + [
    (n, arbiter, merge) for n, arbiter, merge in
    itertools.product((1, 2, 8), ("priority", "round_robin"), (False, True))
    if (n, arbiter, merge) != (1, "priority", False)]
OUTSIDE = ("conv1", "fc")          # on VTA's CPU


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="default,vta_1x16x16")
    parser.add_argument("--check", action="store_true",
                        help="also compare every layer with the numpy reference network")
    args = parser.parse_args()
    for name in args.configs.split(","):
        base = accel.load_config(name)
        print(f"{name}: ResNet-18 accelerator cycles (sim), latency {base.dram.latency}, "
              f"{base.dram.bytes_per_cycle} bytes/cycle")
        print(f"{'in flight':>9} {'arbiter':<12} {'merged':<7} {'network':>12} "
              f"{'max-pool..global pool':>22} {'ratio':>6} {'wall s':>7}")
        first = None
        for n, arbiter, merge in SETTINGS:
            cfg = base.replace(**{"dram.max_outstanding": n, "dram.arbiter": arbiter,
                                  "dram.merge_rows": merge})
            start = time.perf_counter()
            exe = accel.compile("resnet18", config=cfg)
            x, _ = sample_inputs(exe.graph, seed=0)
            _, report = exe.run(x, backend="sim", check=args.check)
            if args.check and not report.check:
                print(f"check: FAILED on {cfg.name}", file=sys.stderr)
                return 1
            middle = sum(layer.cycles or 0 for layer in report.layers
                         if layer.target == "accel" and layer.name not in OUTSIDE)
            first = first or report.accel_cycles
            print(f"{n:>9} {arbiter:<12} {'yes' if merge else 'no':<7} "
                  f"{report.accel_cycles:>12,} {middle:>22,} "
                  f"{report.accel_cycles / first:>6.3f} {time.perf_counter() - start:>7.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
