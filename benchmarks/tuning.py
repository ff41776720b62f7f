"""Auto-tuning on the timing simulator: xgb vs random vs GA (the TVM paper's Fig. 4).

For the ResNet-18 layers (TVM's Table 2) on one config, measured in one run:

1. the heuristic's knobs (``compiler.ops.heuristic.default_conv2d_knobs``) per layer;
2. every tuner (``xgb``, ``random``, ``ga``) for ``--trials`` trials per layer and seed: the best
   cycles found after each trial. Table 1: the sum over the layers of the best cycles after
   8, 16, 32, 64 trials, averaged over the seeds, and the geometric-mean speedup over the
   heuristic; the plot (``--out``) shows the same curves, total and per layer;
3. on the ``--exhaustive`` layers (small spaces), every valid knob setting: the optimum;
4. Table 2: per layer, the heuristic's cycles and the best xgb cycles (over the seeds), the
   speedup, and the mean over seeds of xgb's best;
5. Table 3, on the exhaustive layers: how far xgb's best is from the optimum after 16, 32 and
   64 trials (mean and worst over seeds; target: within 3% by 64), and how many trials xgb and
   random search need to get within 3% (each run until it does; target: xgb at most half) -
   and within each other ``--within`` fraction of the optimum.

Measurements are deterministic, so they are cached in ``--cache`` (a tuning log of every
measured setting): a setting is simulated once across tuners, seeds and runs. Finished tuning
runs are kept beside it (``*-runs.json``, keyed by the compiler's code), so an interrupted run
resumes where it stopped and a second run only reprints. Trials answered by the cache still
count as trials. At start, a few cached entries are measured again; if they differ (the
compiler or simulator changed), the run stops: delete the cache. Never run as a test.

    python benchmarks/tuning.py [--config default] [--layers C2-C12] [--seeds 3]
        [--trials 64] [--tuners xgb,random,ga] [--exhaustive C10,C11] [--within 0.03,0]
        [--workers 2]
        [--out benchmarks/out/tuning.png] [--cache benchmarks/out/measurements.jsonl]

Quick look: ``--layers C11,C12 --seeds 1 --trials 16 --exhaustive C11``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from accel.cli_tune import parse_layers
from accel.machine.cache import code_version
from accel.machine.config import load_config
from compiler.ops.tuning_log import TuningLog
from compiler.ops.workloads import resnet18_layer
from compiler.tune import make_task, make_tuner
from compiler.tune.task import Task
from runtime.tuning import SimMeasure, measure_knobs

CHECKPOINTS = (8, 16, 32, 64)
WITHIN = 0.03


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _check_cache(cache: Path, cfg: Any, tasks: dict[str, Task]) -> None:
    """Measure up to three cached settings again; stop if the cache is stale."""
    if not cache.exists():
        return
    by_op = {t.signature: t for t in tasks.values()}
    records = [r for r in TuningLog(cache).records() if r.config == cfg.name and r.op in by_op]
    for rec in sorted(records, key=lambda r: r.cycles)[:3]:
        task = by_op[rec.op]
        fresh = measure_knobs(task.workload, cfg, task.knobs_from_dict(rec.knobs))
        if fresh.cycles != rec.cycles:
            sys.exit(f"{cache}: cached {rec.cycles} cycles for {rec.knobs} of {rec.op}, now "
                     f"{fresh.cycles}: the compiler or simulator changed; delete the cache")


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def _curve(trials: list[Any], n: int) -> list[float]:
    """Best cycles after each of ``n`` trials (the last value held when fewer ran)."""
    best, out = math.inf, []
    for t in trials[:n]:
        best = min(best, t.cycles)
        out.append(best)
    return out + [best] * (n - len(out))


def _trials_to_reach(task: Task, tuner: str, seed: int, target: float, measure: SimMeasure,
                     limit: int) -> int | None:
    """Trials ``tuner`` needs to find a setting with at most ``target`` cycles (None when
    ``limit`` trials do not)."""
    t = make_tuner(tuner, task, seed=seed)
    done = 0
    while done < limit:
        # Tune on in chunks of a batch, so the run stops soon after the target is reached;
        # the tuner keeps its state (measured settings, model) from one chunk to the next.
        result = t.tune(min(t.batch_size, limit - done), measure)
        if not result.trials:
            return None
        hit = next((x.index for x in result.trials if x.cycles <= target), None)
        if hit is not None:
            return done + hit
        done += len(result.trials)
    return None


def _plot(path: Path, curves: dict[str, np.ndarray], layers: list[str], heuristic: np.ndarray,
          cfg_name: str, seeds: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(layers) + 1
    cols = min(4, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    colours = {"xgb": "tab:red", "random": "tab:blue", "ga": "tab:green"}
    for k in range(rows * cols):
        ax = axes[k // cols][k % cols]
        if k >= n:
            ax.axis("off")
            continue
        for name, c in curves.items():
            mean = c.sum(axis=1).mean(axis=0) if k == 0 else c[:, k - 1].mean(axis=0)
            x = np.arange(1, len(mean) + 1)
            ax.plot(x, mean / 1e6, label=name, color=colours.get(name))
        base = heuristic.sum() if k == 0 else heuristic[k - 1]
        ax.axhline(base / 1e6, color="grey", linestyle="--", label="heuristic")
        ax.set_title(f"sum over {len(layers)} layers" if k == 0 else layers[k - 1],
                     fontsize="medium")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("measured trials")
        ax.set_ylabel("best cycles (M)")
        if k == 0:
            ax.legend(fontsize="small")
    fig.suptitle(f"Tuning on the timing simulator ({cfg_name}), mean of {seeds} seed(s)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="default")
    ap.add_argument("--layers", default="C2-C12")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--tuners", default="xgb,random,ga")
    ap.add_argument("--exhaustive", default="C10,C11",
                    help="layers to enumerate completely ('' for none)")
    ap.add_argument("--within", default="0.03",
                    help="fractions of the optimum to reach on the exhaustive layers, e.g. "
                         "'0.03,0.01,0' (0: the optimum itself)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default="benchmarks/out/tuning.png")
    ap.add_argument("--cache", default="benchmarks/out/measurements.jsonl")
    args = ap.parse_args(argv)

    cfg = load_config(args.config)
    layers = parse_layers(args.layers) or []
    exhaustive = (parse_layers(args.exhaustive) or []) if args.exhaustive else []
    tuners = [t.strip() for t in args.tuners.split(",") if t.strip()]
    try:
        within = [float(w) for w in args.within.split(",") if w.strip()]
    except ValueError:
        ap.error(f"--within: expected fractions such as 0.03,0, not {args.within!r}")
    if any(not 0 <= w < 1 for w in within):
        ap.error(f"--within: fractions must lie in [0, 1), not {args.within!r}")
    seeds = list(range(args.seeds))
    checkpoints = [c for c in CHECKPOINTS if c <= args.trials] or [args.trials]
    tasks = {name: make_task(resnet18_layer(name), cfg) for name in dict.fromkeys(
        layers + exhaustive)}
    cache = Path(args.cache)
    _check_cache(cache, cfg, tasks)
    # Finished tuning runs are kept beside the cache, keyed by the compiler's code, so an
    # interrupted benchmark resumes and a rerun with fewer seeds or layers only reprints.
    runs_path = cache.with_name(cache.stem + "-runs.json")
    runs: dict[str, Any] = json.loads(runs_path.read_text()) if runs_path.exists() else {}
    run_key = f"{cfg.name}|{code_version('compiler')}"
    started = time.perf_counter()
    print(f"# tuning benchmark: config {cfg.name}; layers {','.join(layers)}; tuners "
          f"{','.join(tuners)}; {len(seeds)} seed(s); {args.trials} trials; exhaustive "
          f"{','.join(exhaustive) or '-'}")
    with SimMeasure(workers=args.workers, cache_log=cache) as measure:
        print(f"# measurement cache {cache}: {len(measure.cache)} settings at start; "
              f"{measure.workers} worker(s)")
        heuristic = {}
        for name, task in tasks.items():
            heuristic[name] = measure(task, [task.default_knobs()])[0].cycles
        # ------------------------------------------------------------- tuner curves
        # Seed by seed, so that an interrupted run has whole seeds done (rerun with --seeds).
        curves = {t: np.zeros((len(seeds), len(layers), args.trials)) for t in tuners}
        tune_seconds = dict.fromkeys(tuners, 0.0)
        best_knobs: dict[str, tuple[int, dict[str, int]]] = {}
        for s in seeds:
            for j, name in enumerate(layers):
                for tuner in tuners:
                    key = f"{run_key}|{name}|{tuner}|{s}|{args.trials}"
                    if key not in runs:
                        t0 = time.perf_counter()
                        result = make_tuner(tuner, tasks[name], seed=s).tune(args.trials,
                                                                             measure)
                        top = result.best
                        runs[key] = {"curve": _curve(result.trials, args.trials),
                                     "best": [top.cycles, top.knobs.to_dict()],
                                     "seconds": time.perf_counter() - t0}
                        _save(runs_path, runs)
                        _log(f"seed {s} {name} {tuner}: best {top.cycles} (heuristic "
                             f"{heuristic[name]}), {time.perf_counter() - t0:.0f} s; total "
                             f"{time.perf_counter() - started:.0f} s")
                    run = runs[key]
                    curves[tuner][s, j] = run["curve"]
                    tune_seconds[tuner] += run["seconds"]
                    cycles, knobs = run["best"]
                    if tuner == "xgb" and (name not in best_knobs
                                           or cycles < best_knobs[name][0]):
                        best_knobs[name] = (cycles, knobs)
        # ------------------------------------------------------------- exhaustive optima
        optimum: dict[str, int] = {}
        for name in exhaustive:
            task = tasks[name]
            knobs_list = [task.space.knobs(p) for p in task.space]
            results = []
            for i in range(0, len(knobs_list), 16):
                results += measure(task, knobs_list[i:i + 16])
                _log(f"exhaustive {name}: {min(i + 16, len(knobs_list))}/{len(knobs_list)} "
                     f"({time.perf_counter() - started:.0f} s)")
            optimum[name] = min(r.cycles for r in results if r.cycles is not None)
        # ------------------------------------------------------------- trials to reach
        reach: dict[tuple[str, float], dict[str, list[int | None]]] = {}
        for name in exhaustive:
            for w in within:
                target = optimum[name] * (1 + w)
                reach[name, w] = {}
                for tuner in ("xgb", "random"):
                    found = []
                    for s in seeds:
                        key = f"{run_key}|reach|{name}|{tuner}|{s}"
                        if w != WITHIN:
                            key += f"|within={w!r}"
                        if key not in runs:
                            runs[key] = _trials_to_reach(tasks[name], tuner, s, target,
                                                         measure, len(tasks[name].space))
                            _save(runs_path, runs)
                        found.append(runs[key])
                    reach[name, w][tuner] = found
                    _log(f"{name} {tuner}: trials to within {100 * w:g}%: {found}")
        simulated, hits, failures = measure.simulated, measure.hits, measure.failures

    base = np.array([heuristic[n] for n in layers], dtype=np.float64)
    print()
    print(f"## Best cycles found vs measured trials, {','.join(layers)} on {cfg.name}, mean of "
          f"{len(seeds)} seed(s)")
    print("sum over layers of each layer's best cycles (M); geometric-mean speedup over the "
          "heuristic in brackets")
    print(f"{'tuner':<8}" + "".join(f"{f'{c} trials':>22}" for c in checkpoints))
    for tuner in tuners:
        cells = []
        for c in checkpoints:
            at = curves[tuner][:, :, c - 1]  # seeds x layers
            total = at.sum(axis=1).mean() / 1e6
            geo = float(np.exp(np.log(base[None, :] / at).mean(axis=1)).mean())
            cells.append(f"{total:>13.3f} ({geo:.2f}x)")
        print(f"{tuner:<8}" + "".join(f"{x:>22}" for x in cells))
    print(f"{'heur.':<8}{f'{base.sum() / 1e6:.3f} (1.00x)':>22}")
    print()
    print("## Per-layer speedup of tuned (best xgb over seeds) over heuristic knobs")
    print(f"{'layer':<6} {'space':>6} {'heuristic':>10} {'xgb best':>10} {'speedup':>8} "
          f"{'xgb mean':>10}  best knobs")
    if "xgb" in tuners:
        for j, name in enumerate(layers):
            finals = curves["xgb"][:, j, -1]
            best = int(finals.min())
            knobs = best_knobs[name][1] if name in best_knobs else {}
            text = " ".join(f"{k.replace('tile_', '').replace('_nthread', 'T')}={v}"
                            for k, v in knobs.items())
            print(f"{name:<6} {len(tasks[name].space):>6} {heuristic[name]:>10} {best:>10} "
                  f"{heuristic[name] / best:>7.3f}x {finals.mean():>10.0f}  {text}")
        finals = curves["xgb"][:, :, -1].min(axis=0)
        geo = float(np.exp(np.log(base / finals).mean()))
        print(f"geometric mean speedup {geo:.3f}x; total {base.sum():.0f} -> {finals.sum():.0f} "
              f"cycles ({base.sum() / finals.sum():.3f}x)")
    if exhaustive:
        print()
        print(f"## Exhaustive optimum vs xgb ({len(seeds)} seed(s)); gap = best/optimum - 1")
        gaps = [c for c in (16, 32, 64) if c <= args.trials]
        print(f"{'layer':<6} {'space':>6} {'optimum':>9} {'heuristic':>10}"
              + "".join(f"{f'gap@{c} mean/max':>18}" for c in gaps))
        for name in exhaustive:
            row = f"{name:<6} {len(tasks[name].space):>6} {optimum[name]:>9} {heuristic[name]:>10}"
            for c in gaps:
                if name in layers and "xgb" in tuners:
                    g = curves["xgb"][:, layers.index(name), c - 1] / optimum[name] - 1
                    row += f"{f'{100 * g.mean():.1f}% / {100 * g.max():.1f}%':>18}"
                else:
                    row += f"{'-':>18}"
            print(row)
        print()
        print("## Trials to get within a fraction of the optimum (each run until it does), per "
              "seed; ratio = xgb mean / random mean")
        print(f"{'layer':<6} {'within':>7} {'xgb':>22} {'random':>22} {'ratio':>6}")
        for name in exhaustive:
            for w in within:
                x, r = reach[name, w]["xgb"], reach[name, w]["random"]
                mx = statistics.mean(v for v in x if v is not None) if any(x) else math.nan
                mr = statistics.mean(v for v in r if v is not None) if any(r) else math.nan
                print(f"{name:<6} {f'{100 * w:g}%':>7} {f'{mx:.1f} {x}':>22} "
                      f"{f'{mr:.1f} {r}':>22} {mx / mr:>6.2f}")
    print()
    print(f"# {simulated} settings simulated, {hits} answered by the cache, {failures} failed "
          "to build; tuner wall time "
          + ", ".join(f"{t} {s:.0f} s" for t, s in tune_seconds.items())
          + f"; total {time.perf_counter() - started:.0f} s")
    if tuners:
        _plot(Path(args.out), curves, layers, base, cfg.name, len(seeds))
        print(f"# plot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
