"""Timing-simulator speed and the cycles that latency hiding saves.

Runs a synthetic ~10,000-instruction pipeline (loads, GEMMs, ALU ops, stores; see
``accel.testing.synthetic.pipelined_gemm``) through the SimPy timing simulator and prints

- instructions per wall-clock second and simulated cycles per wall-clock second (median of
  ``--repeats`` runs, each on a fresh DRAM image; program building is not timed);
- the same work's cycles with two virtual threads (overlapped) and with one (serialised: each
  stage waits for the previous), their ratio, and the GEMM utilisation of each;
- a check that the timing simulator's DRAM equals the functional simulator's.

    python benchmarks/sim_speed.py [--config default] [--iterations 1250] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from accel import load_config, run_program
from accel.testing.synthetic import pipelined_gemm
from sim.timing import TimingSimulator


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    parser.add_argument("--iterations", type=int, default=1250,
                        help="pipeline iterations, 8 instructions each (default 1250)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cfg = load_config(args.config)
    print(f"config {cfg.name}")
    results = {}
    for threads in (2, 1):
        program, dram = pipelined_gemm(cfg, args.iterations, threads=threads)
        walls = []
        for _ in range(args.repeats):
            image = dram.copy()
            start = time.perf_counter()
            # The simulator itself: the "sim" backend would reuse the timing of a program it
            # has already seen, which is not what this measures.
            stats = TimingSimulator(cfg).run(program, image)
            walls.append(time.perf_counter() - start)
        reference = dram.copy()
        run_program(program, reference, backend="fsim")
        if not np.array_equal(image.data, reference.data):
            print("check: FAILED - sim and fsim DRAM differ", file=sys.stderr)
            return 1
        wall = statistics.median(walls)
        results[threads] = stats
        label = "overlapped (2 threads)" if threads == 2 else "serialised (1 thread)"
        print(f"{label:<24} {len(program.insns):>6} insns  {stats.cycles:>9} cycles  "
              f"GEMM util {stats.gemm_utilization:6.1%}  wall {wall:6.3f} s  "
              f"{len(program.insns) / wall:>9,.0f} insn/s  {stats.cycles / wall:>12,.0f} cycles/s")
    ratio = results[1].cycles / results[2].cycles
    print(f"serialised / overlapped cycles: {ratio:.3f}")
    print("check: sim DRAM identical to fsim")
    return 0


if __name__ == "__main__":
    sys.exit(main())
