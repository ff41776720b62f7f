"""Throughput of the functional simulator: a synthetic GEMM-heavy program, or a network.

The program loads inputs and weights once, then runs 1,000 accumulating GEMM instructions of
512 micro-ops each (two alternating micro-op kernels whose destinations are distinct within a
kernel, so no micro-op writes an acc entry that either of the two before it wrote), after one
reset GEMM, and stores the result. It times ``FunctionalSimulator(cfg).run`` (median of
``--repeats`` runs, program built outside the timing), prints micro-ops and MACs per second, and
checks the stored and accumulated results bit-exactly against numpy.

Run from the repository root: ``python benchmarks/fsim_throughput.py [--config NAME]
[--repeats N] [--gemms N] [--uops N]``. Kernels are shrunk to fit the buffers of small configs.

With ``--network NAME`` (``resnet18``) it compiles the zoo network (``accel.compile``, cached
in ``$ACCEL_CACHE_DIR``), runs it once on a random input with the ``fsim`` backend, recording
every accelerator layer's program and input DRAM image, then times the functional simulator
on all of those layer programs (a fresh simulator per layer, as the backend does), against a
baseline implementation: ``sim/functional.py`` as of git revision ``--baseline`` (``HEAD`` by
default), loaded as a separate module. The two run alternately, ``--repeats`` times each, every
pass starting from cleared module caches (a fresh process's state); it prints the wall time of
each pass, the best and the median, their ratio, and checks that both leave identical DRAM
images and ``FsimStats.to_dict()``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

try:
    from accel.machine.builder import ProgramBuilder
except ImportError:  # not installed: run from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from accel.machine.builder import ProgramBuilder

import sim.functional
from accel.machine.config import HwConfig, load_config
from accel.machine.dram import Dram
from accel.machine.isa import MemType
from accel.machine.program import Program
from sim.functional import FunctionalSimulator

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Workload:
    """A built program, its DRAM image and what the numpy check needs."""

    program: Program
    dram: Dram
    inp: NDArray[np.int8]
    wgt: NDArray[np.int8]
    kernels: list[NDArray[np.int64]]  # (n_uops, 3) per kernel: dst, src, wgt
    n_gemms: int
    n_uops: int

    @property
    def macs(self) -> int:
        cfg = self.program.config
        return self.n_gemms * self.n_uops * cfg.batch * cfg.block_in * cfg.block_out


def build_workload(cfg: HwConfig, n_gemms: int, n_uops: int, seed: int = 0) -> Workload:
    """The synthetic program: LOAD UOP/INP/WGT, reset, ``n_gemms`` GEMMs, STORE, FINISH."""
    n_uops = min(n_uops, cfg.uop_depth // 2, cfg.acc_depth, cfg.inp_depth // 2)
    if n_uops < 3:
        raise SystemExit(f"config {cfg.name}: buffers too small for a 3-micro-op kernel")
    n_wgt = min(128, cfg.wgt_depth)
    rng = np.random.default_rng(seed)
    inp = rng.integers(-128, 128, size=(2 * n_uops, cfg.batch, cfg.block_in), dtype=np.int8)
    wgt = rng.integers(-128, 128, size=(n_wgt, cfg.block_out, cfg.block_in), dtype=np.int8)
    u = np.arange(n_uops, dtype=np.int64)
    kernels = [
        np.stack([u, u, u % n_wgt], axis=1),
        np.stack([u, n_uops + u, (u + 37) % n_wgt], axis=1),
    ]
    for kernel in kernels:
        assert len(np.unique(kernel[:, 0])) == n_uops  # distinct destinations: no RAW hazard
        assert kernel[:, 0].max() < cfg.acc_depth and kernel[:, 1].max() < cfg.inp_depth
        assert kernel[:, 2].max() < cfg.wgt_depth
    assert 2 * n_uops <= cfg.uop_depth

    b = ProgramBuilder(cfg)
    inp_addr, wgt_addr = b.tensor("inp", inp), b.tensor("wgt", wgt)
    out_addr = b.buffer("out", n_uops * cfg.out_tile_bytes, cfg.out_tile_bytes)
    spans = [b.uops(k.tolist()) for k in kernels]
    b.load(MemType.UOP, dram_base=b.uop_base, x_size=2 * n_uops, x_stride=2 * n_uops)
    # Micro-op 0 is (0, 0, 0): the reset walks it over every destination.
    b.gemm(reset=True, uop_bgn=0, uop_end=1, iter_in=n_uops, dst_factor_in=1)
    b.load(MemType.INP, dram_base=inp_addr, x_size=2 * n_uops, x_stride=2 * n_uops)
    b.load(MemType.WGT, dram_base=wgt_addr, x_size=n_wgt, x_stride=n_wgt, push_next=True)
    for g in range(n_gemms):
        bgn, end = spans[g % 2]
        b.gemm(uop_bgn=bgn, uop_end=end, pop_prev=g == 0, push_next=g == n_gemms - 1)
    b.store(dram_base=out_addr, x_size=n_uops, x_stride=n_uops, pop_prev=True, push_prev=True)
    b.finish(pop_next=True)
    program, dram = b.build()
    program.validate()
    return Workload(program, dram, inp, wgt, kernels, n_gemms, n_uops)


def expected_acc(work: Workload) -> NDArray[np.int32]:
    """acc[dst] after the run, from numpy int64 arithmetic wrapped to int32."""
    cfg = work.program.config
    total = np.zeros((work.n_uops, cfg.batch, cfg.block_out), dtype=np.int64)
    for k, kernel in enumerate(work.kernels):
        times = len(range(k, work.n_gemms, 2))  # GEMMs that ran this kernel
        a = work.inp[kernel[:, 1]].astype(np.int64)
        w = work.wgt[kernel[:, 2]].astype(np.int64)
        total[kernel[:, 0]] += times * np.einsum("nbk,nok->nbo", a, w)
    return ((total + 2**31) % 2**32 - 2**31).astype(np.int32)


def eng(value: float, unit: str) -> str:
    """``value`` with an engineering prefix: ``eng(3.1e6, "uops/s") == "3.1 M uops/s"``."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix} {unit}"
    return f"{value:.3g} {unit}"


# --------------------------------------------------------------------------- a network's layers
def network_layers(name: str, seed: int = 0) -> list[tuple[Program, Dram]]:
    """Every accelerator layer's program and input DRAM image of zoo network ``name``, run once
    with the ``fsim`` backend on a random int8 input (each layer's input is its predecessors'
    output, as in a real run)."""
    import accel

    start = time.perf_counter()
    exe = accel.compile(name)
    print(f"compiled {name} in {time.perf_counter() - start:.1f} s")
    graph = exe.graph
    value = graph.values[graph.inputs[0]]
    x = np.random.default_rng(seed).integers(-128, 128, size=value.shape).astype(value.dtype)
    layers: list[tuple[Program, Dram]] = []
    run = FunctionalSimulator.run

    def recording(self: FunctionalSimulator, program: Program, dram: Dram) -> Any:
        layers.append((program, dram.copy()))
        return run(self, program, dram)

    FunctionalSimulator.run = recording  # type: ignore[method-assign]
    try:
        exe.run(x, backend="fsim")
    finally:
        FunctionalSimulator.run = run  # type: ignore[method-assign]
    return layers


def baseline_module(rev: str) -> ModuleType:
    """``sim/functional.py`` at git revision ``rev``, imported as a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:sim/functional.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="fsim-baseline-")) / "fsim_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("fsim_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fsim_baseline"] = module
    spec.loader.exec_module(module)
    return module


def clear_caches(module: ModuleType) -> None:
    """Empty a simulator module's process-wide caches (a fresh process's state)."""
    for name in ("_PLANS", "_DELTAS", "_COUNT_FIELDS"):
        cache = getattr(module, name, None)
        if isinstance(cache, dict):
            cache.clear()


def time_layers(module: ModuleType, layers: list[tuple[Program, Dram]]
                ) -> tuple[float, list[tuple[NDArray[np.uint8], dict[str, Any]]]]:
    """Wall seconds of ``module``'s simulator over ``layers`` (image copies outside the timing)
    and each layer's resulting DRAM bytes and counters."""
    clear_caches(module)
    seconds, results = 0.0, []
    for program, image in layers:
        dram = image.copy()
        start = time.perf_counter()
        stats = module.FunctionalSimulator(program.config).run(program, dram)
        seconds += time.perf_counter() - start
        results.append((dram.data.copy(), stats.to_dict()))
    return seconds, results


def network_main(args: argparse.Namespace) -> int:
    layers = network_layers(args.network)
    n_insns = sum(len(p.insns) for p, _ in layers)
    print(f"{args.network}: {len(layers)} accelerator layer programs, {n_insns} instructions, "
          f"config {layers[0][0].config.name}")
    impls = {f"baseline ({args.baseline})": baseline_module(args.baseline),
             "current": sim.functional}
    times: dict[str, list[float]] = {name: [] for name in impls}
    results: dict[str, list[tuple[NDArray[np.uint8], dict[str, Any]]]] = {}
    for _ in range(args.repeats):
        for name, module in impls.items():      # alternate: load changes hit both alike
            seconds, results[name] = time_layers(module, layers)
            times[name].append(seconds)
    for name, ts in times.items():
        print(f"{name:>18}: best {min(ts):.3f} s, median {statistics.median(ts):.3f} s "
              f"(passes: {', '.join(f'{t:.3f}' for t in ts)})")
    base, current = (times[name] for name in impls)
    print(f"speed-up: {min(base) / min(current):.2f}x best to best, "
          f"{statistics.median(base) / statistics.median(current):.2f}x median to median")
    first, second = results.values()
    same_dram = all(np.array_equal(a[0], b[0]) for a, b in zip(first, second, strict=True))
    same_stats = all(a[1] == b[1] for a, b in zip(first, second, strict=True))
    print(f"check: DRAM images {'identical' if same_dram else 'DIFFER'}, FsimStats "
          f"{'identical' if same_stats else 'DIFFER'} on all {len(layers)} layers")
    return 0 if same_dram and same_stats else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default", help="config name or YAML path")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median reported)")
    parser.add_argument("--gemms", type=int, default=1000, help="accumulating GEMM insns")
    parser.add_argument("--uops", type=int, default=512, help="micro-ops per GEMM")
    parser.add_argument("--network", help="time a zoo network's layer programs (resnet18) "
                        "against --baseline instead")
    parser.add_argument("--baseline", default="HEAD",
                        help="git revision of sim/functional.py to compare with (--network)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.gemms < 1:
        parser.error("--repeats and --gemms must be >= 1")
    if args.network:
        return network_main(args)

    cfg = load_config(args.config)
    work = build_workload(cfg, args.gemms, args.uops)
    times, sim = [], None
    for _ in range(args.repeats):
        dram = work.dram.copy()
        sim = FunctionalSimulator(cfg)
        start = time.perf_counter()
        stats = sim.run(work.program, dram)
        times.append(time.perf_counter() - start)
    assert sim is not None
    seconds = statistics.median(times)

    uops = work.n_gemms * work.n_uops
    print(f"config:       {cfg.name} ({args.config})")
    print(f"instructions: {len(work.program.insns)} ({work.n_gemms} accumulating GEMM + 1 reset "
          f"GEMM, {work.n_uops} micro-ops each)")
    print(f"micro-ops:    {uops} accumulating (+{work.n_uops} reset; fsim gemm_uops "
          f"{stats.gemm_uops})")
    print(f"MACs:         {work.macs} (fsim macs {stats.macs})")
    print(f"seconds:      {seconds:.4f} (median of {args.repeats}: "
          f"{', '.join(f'{t:.4f}' for t in times)})")
    print(f"micro-ops/s:  {uops / seconds:.0f} ({eng(uops / seconds, 'uops/s')})")
    print(f"MACs/s:       {work.macs / seconds:.0f} ({eng(work.macs / seconds, 'MAC/s')})")

    acc = expected_acc(work)
    byte = acc.astype(np.int64) & 0xFF
    low8 = (byte - ((byte & 0x80) << 1)).astype(np.int8)  # STORE keeps the low 8 bits
    out = dram.read("out", "int8", (work.n_uops, cfg.batch, cfg.block_out))
    ok = (
        np.array_equal(sim.sram.acc[: work.n_uops], acc)
        and np.array_equal(out, low8)
        and stats.macs == work.macs
    )
    if not ok:
        print("check: MISMATCH against numpy", file=sys.stderr)
        return 1
    print("check: bit-exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
