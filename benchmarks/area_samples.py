"""Yosys resource counts of the shipped configs and a seeded sample of generated ones: the data
the area model (:mod:`accel.dse.area_model`) is fitted to and checked against.

Each config is synthesised with :func:`hw.synth.synthesize` (cached per design under
``$ACCEL_CACHE_DIR/synth``) and one CSV row per config is
written: the config (as JSON), then ``luts, ffs, dsps, brams, lutrams``, every cell count of
the report (JSON: carry cells, multiplexers) and the synthesis time. Rows already in
``--out`` are kept and not synthesised again, so an interrupted run goes on where it stopped.
Progress goes to stderr. (A second run costs only Verilog generation: the cache answers.)

Run from the repository root::

    python benchmarks/area_samples.py --target ecp5 --count 28 --out ecp5.csv
    python benchmarks/area_samples.py --target ecp5 --count 6 --seed 2 --label heldout \
        --no-shipped --out ecp5.csv

The committed data (``accel/dse/area_data/<target>.csv``) was made this way: the first rows
are fitted, the ``heldout`` rows (another seed) only check the fit. The rows with LUT
multipliers (``gemm.lut_macs``) came after::

    python benchmarks/area_samples.py --target ecp5 --count 9 --seed 4 --label lutmac \
        --lut-macs --no-shipped --out ecp5.csv
    python benchmarks/area_samples.py --target ecp5 --count 2 --seed 5 \
        --label heldout-lutmac --lut-macs --no-shipped --out ecp5.csv
    python benchmarks/area_samples.py --target ecp5 --configs lut16x16.yaml \
        --label lutmac-full --no-shipped --out ecp5.csv

``lut16x16.yaml`` is ``vta_1x16x16`` with ``buffers: {inp: 16384, wgt: 65536, acc: 32768}`` and
``gemm.lut_macs: 256``: a second array wholly in LUTs (they cost less per MAC than the
linear term says; with one such row its error left out was 14.6%).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel.dse.area_model import CSV_COUNTS, config_row, sample_configs
from accel.machine.config import HwConfig, load_config, shipped_configs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ecp5", choices=("ecp5", "xilinx"))
    ap.add_argument("--count", type=int, default=24, help="generated configs (after the "
                    "shipped ones)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--label", default="sample", help="label of the generated rows (rows "
                    "labelled heldout... are left out of the fit and test it)")
    ap.add_argument("--no-shipped", action="store_true", help="generated configs only")
    ap.add_argument("--lut-macs", action="store_true", help="give each generated config "
                    "LUT multipliers (gemm.lut_macs): a quarter, half or all of its MACs, "
                    "drawn with the seed")
    ap.add_argument("--configs", default="", help="comma-separated config files or names to "
                    "synthesise (labelled LABEL0, LABEL1, ...) instead of a sample")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    from hw.synth import SynthError, synthesize

    configs: list[tuple[str, HwConfig]] = [] if args.no_shipped else [
        (n, load_config(n)) for n in shipped_configs()]
    generated = ([load_config(c) for c in args.configs.split(",")] if args.configs
                 else sample_configs(args.count, seed=args.seed))
    if args.lut_macs and not args.configs:
        rng = random.Random(args.seed)
        generated = [c.replace(**{"gemm.lut_macs": c.peak_macs_per_cycle * c.gemm.ii
                                  * rng.choice((1, 2, 4)) // 4}) for c in generated]
    configs += [(f"{args.label}{i}", c) for i, c in enumerate(generated)]
    done: set[str] = set()
    if args.out.exists():
        with args.out.open() as f:
            done = {row["name"] for row in csv.DictReader(f)}
    new = not args.out.exists()
    with args.out.open("a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(["label", "name", "config", *CSV_COUNTS, "cells", "seconds"])
            f.flush()
        for i, (label, cfg) in enumerate(configs):
            if cfg.name in done:
                continue
            print(f"[{i + 1}/{len(configs)}] {label} {cfg.name} ...", file=sys.stderr,
                  flush=True)
            t0 = time.perf_counter()
            try:
                rep = synthesize(cfg, args.target)
            except (SynthError, ValueError) as exc:
                print(f"  skipped: {exc}", file=sys.stderr, flush=True)
                continue
            seconds = time.perf_counter() - t0
            writer.writerow([label, cfg.name, *config_row(cfg),
                             rep.luts, rep.ffs, rep.dsps, rep.brams, rep.lutrams,
                             json.dumps(rep.cells, sort_keys=True, separators=(",", ":")),
                             f"{rep.seconds:.1f}"])
            f.flush()
            done.add(cfg.name)
            print(f"  {rep.luts} LUTs, {rep.ffs} FFs, {rep.dsps} DSPs, {rep.brams} BRAMs "
                  f"({seconds:.0f} s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
