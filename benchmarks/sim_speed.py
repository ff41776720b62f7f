"""Timing-simulator speed, SimPy reference against the fast engine, and the cycles that latency
hiding saves.

Runs a synthetic ~10,000-instruction pipeline (loads, GEMMs, ALU ops, stores; see
``accel.testing.synthetic.pipelined_gemm``) through both timing engines, the SimPy reference
(``sim.timing.TimingSimulator``) and the fast one (``sim.fast_timing.FastTimingSimulator``), the
latter with functional effects (as the reference: each retiring instruction executed by the
functional simulator) and without (timing only), and prints

- each engine's instructions per wall-clock second and simulated cycles per wall-clock second
  (median of ``--repeats`` runs, each on a fresh DRAM image, the engines taking turns; program
  building is not timed), and the fast engine's speed-up over SimPy;
- the same work's cycles with two virtual threads (overlapped) and with one (serialised: each
  stage waits for the previous), their ratio, and the GEMM utilisation of each;
- checks: the fast engine's stats (every count, stall, slice) identical to SimPy's, both ways,
  and both engines' DRAM (with functional effects) equal to the functional simulator's.

    python benchmarks/sim_speed.py [--config default] [--iterations 1250] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from accel import load_config, run_program
from accel.machine.dram import Dram
from accel.machine.program import Program
from accel.testing.synthetic import pipelined_gemm
from sim.fast_timing import FastTimingSimulator
from sim.stats import SimStats
from sim.timing import TimingSimulator

ENGINES: dict[str, Callable[..., object]] = {
    "simpy": lambda cfg: TimingSimulator(cfg),
    "fast": lambda cfg: FastTimingSimulator(cfg),
    "fast, timing only": lambda cfg: FastTimingSimulator(cfg, functional=False),
}


def _summary(stats: SimStats) -> tuple[str, list[object]]:
    return json.dumps(stats.to_dict()), list(stats.timeline)


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
    ok = True
    for threads in (2, 1):
        program, dram = pipelined_gemm(cfg, args.iterations, threads=threads)
        walls: dict[str, list[float]] = {name: [] for name in ENGINES}
        runs: dict[str, tuple[SimStats, Dram]] = {}
        for _ in range(args.repeats):
            for name, make in ENGINES.items():
                image = dram.copy()
                sim = make(cfg)
                start = time.perf_counter()
                # The simulators themselves: the "sim" backend would reuse the timing of a
                # program it has already seen, which is not what this measures.
                stats = sim.run(program, image)  # type: ignore[attr-defined]
                walls[name].append(time.perf_counter() - start)
                runs[name] = (stats, image)
        ok &= _check(program, dram, runs)
        reference = runs["simpy"][0]
        results[threads] = reference
        label = "overlapped (2 threads)" if threads == 2 else "serialised (1 thread)"
        print(f"{label:<24} {len(program.insns):>6} insns  {reference.cycles:>9} cycles  "
              f"GEMM util {reference.gemm_utilization:6.1%}")
        simpy = statistics.median(walls["simpy"])
        for name in ENGINES:
            wall = statistics.median(walls[name])
            ratio = "" if name == "simpy" else f"  fast/simpy {simpy / wall:5.2f}x"
            print(f"  {name:<22} wall {wall:6.3f} s  {len(program.insns) / wall:>9,.0f} insn/s  "
                  f"{reference.cycles / wall:>12,.0f} cycles/s{ratio}")
    ratio = results[1].cycles / results[2].cycles
    print(f"serialised / overlapped cycles: {ratio:.3f}")
    if not ok:
        return 1
    print("check: fast engine's stats identical to SimPy's (with and without functional "
          "effects)")
    print("check: sim DRAM identical to fsim (SimPy and fast engine)")
    return 0


def _check(program: Program, dram: Dram, runs: dict[str, tuple[SimStats, Dram]]) -> bool:
    expected = _summary(runs["simpy"][0])
    ok = True
    for name in ("fast", "fast, timing only"):
        if _summary(runs[name][0]) != expected:
            print(f"check: FAILED - {name} stats differ from SimPy's", file=sys.stderr)
            ok = False
    reference = dram.copy()
    run_program(program, reference, backend="fsim")
    for name in ("simpy", "fast"):
        if not np.array_equal(runs[name][1].data, reference.data):
            print(f"check: FAILED - {name} and fsim DRAM differ", file=sys.stderr)
            ok = False
    return ok


if __name__ == "__main__":
    sys.exit(main())
