"""RTL simulation speed on Amaranth's simulator and on Verilator, and Verilog size.

Two workloads, each run on the RTL of each config with both engines; prints simulated cycles per
wall-clock second (median of ``--repeats`` runs), end to end through ``run_rtl`` (elaboration,
DRAM image, process start) and in the simulator alone; the Verilator model's one-off build time
is printed apart.

- ``pipelined``: ``accel.testing.synthetic.pipelined_gemm``, the load / GEMM / ALU / store
  pipeline of a tiled convolution, every module busy. Verilator runs 10,000 iterations (2.0-2.8
  million cycles), so that the process start and the DRAM image's round trip are a small part of it.
- ``gemm_tile``: ``accel.testing.synthetic.gemm_tile``, one tile's GEMM (64 x 16 x 4 micro-ops a
  repeat, one a cycle) with load and store idle: the speed "on a GEMM tile". Verilator runs
  500 repeats (2.05 million cycles).

Every run is checked: DRAM identical to the functional simulator, cycles identical to the
timing simulator. Then the line count of the generated Verilog of every shipped config.

    python benchmarks/rtl_speed.py [--configs tiny default] [--workloads pipelined gemm_tile]
                                   [--amaranth-iterations 12] [--verilator-iterations 10000]
                                   [--amaranth-repeats-tile 1] [--verilator-repeats-tile 500]
                                   [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from accel import load_config, run_program, shipped_configs
from accel.testing.synthetic import gemm_tile, pipelined_gemm
from hw.backend import run_rtl
from hw.verilator import available as verilator_available

# Each takes the config and a size: pipelined_gemm's iterations, gemm_tile's repeats.
WORKLOADS = {"pipelined": pipelined_gemm, "gemm_tile": gemm_tile}


def measure(cfg_name: str, workload: str, engine: str, size: int, repeats: int) -> bool:
    cfg = load_config(cfg_name)
    program, dram = WORKLOADS[workload](cfg, size)
    reference = dram.copy()
    run_program(program, reference, backend="fsim")
    sim_cycles = run_program(program, dram.copy(), backend="sim").cycles
    walls = []
    engine_walls = []
    for _ in range(repeats):
        image = dram.copy()
        start = time.perf_counter()
        cycles, stats = run_rtl(program, image, cfg, engine=engine)
        walls.append(time.perf_counter() - start)
        engine_walls.append(stats["wall_s"])
        if not np.array_equal(image.data, reference.data) or cycles != sim_cycles:
            print(f"check FAILED on {cfg_name}/{workload}/{engine}: cycles {cycles} vs sim "
                  f"{sim_cycles}", file=sys.stderr)
            return False
    wall = statistics.median(walls)
    engine_wall = statistics.median(engine_walls)
    print(f"{cfg_name:<12} {workload:<10} {engine:<10} {len(program.insns):>6} insns "
          f"{cycles:>9} cycles  "
          f"wall {wall:8.3f} s  {cycles / wall:>12,.0f} cycles/s "
          f"({cycles / engine_wall:,.0f} in the simulator alone)")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["tiny", "default"])
    parser.add_argument("--amaranth-iterations", type=int, default=12)
    parser.add_argument("--verilator-iterations", type=int, default=10000)
    parser.add_argument("--amaranth-repeats-tile", type=int, default=1)
    parser.add_argument("--verilator-repeats-tile", type=int, default=500)
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS),
                        default=["pipelined", "gemm_tile"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ok = True
    sizes = {
        ("pipelined", "amaranth"): args.amaranth_iterations,
        ("pipelined", "verilator"): args.verilator_iterations,
        ("gemm_tile", "amaranth"): args.amaranth_repeats_tile,
        ("gemm_tile", "verilator"): args.verilator_repeats_tile,
    }
    engines = ["amaranth"]
    have_verilator = verilator_available()
    if have_verilator:
        from hw.verilator import build_model, find_verilator

        tool = find_verilator()
        engines.append("verilator")
        print(f"verilator: {tool.version} ({tool.command})")
    else:
        print("verilator not installed: Verilator figures skipped")
    for name in args.configs:
        if have_verilator:
            start = time.perf_counter()
            build_model(load_config(name))
            print(f"{name:<12} verilator  model ready in {time.perf_counter() - start:.1f} s "
                  f"(build, or cache hit)")
        for workload in args.workloads:
            for engine in engines:
                ok &= measure(name, workload, engine, sizes[workload, engine], args.repeats)
    from hw.export import verilog_text

    for name in shipped_configs():
        cfg = load_config(name)
        print(f"verilog {name:<12} {len(verilog_text(cfg).splitlines()):>8} lines  ({cfg.name})")
    print("check: every RTL run identical to fsim (DRAM) and sim (cycles)" if ok
          else "check: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
