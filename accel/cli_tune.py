"""The ``accel tune`` command: tune the conv2d schedules of a model or of ResNet-18 layers.

::

    accel tune C2-C12 --trials 64                   # the TVM paper's ResNet-18 layers
    accel tune resnet18 --config vta_1x16x16 --tuner ga --log vta.jsonl
    accel run resnet18 --tuning-log tuning.jsonl    # then compile with the best knobs found

For every distinct accelerator workload (conv2d, dense, batch_matmul, the residual add: each
operator's registry entry gives its knob space), the heuristic's knobs are measured first (the
baseline, logged with tuner ``heuristic``), then the tuner measures ``--trials`` settings on
the timing simulator in ``--workers`` processes; every measurement is appended to the log.
Layers of a model that differ only in their shift amount or ReLU have identical timing
(:func:`timing_class`): one is tuned, and its heuristic and best records are logged for the
others too (tuner ``shared:...``).
Progress goes to stderr, the summary table to stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import Any

__all__ = ["TuneError", "add_parsers", "cmd_tune", "parse_layers", "timing_class"]

_ITEM = re.compile(r"[Cc](\d+)(?:-[Cc]?(\d+))?")


class TuneError(ValueError):
    """Bad input to ``accel tune``; the message is one line naming it."""


def parse_layers(spec: str) -> list[str] | None:
    """The ResNet-18 layer names of a list like ``C2,C3,C9`` or ``C2-C12`` (in order, once
    each), or None when ``spec`` is not a layer list (then it names a model).

    Raises
    ------
    TuneError
        A layer outside C1..C12 or a range that runs backwards.
    """
    from compiler.ops.workloads import RESNET18_LAYERS

    items = [item.strip() for item in spec.split(",")]
    matches = [_ITEM.fullmatch(item) for item in items]
    if not all(matches):
        if any(matches) or "," in spec:
            bad = next(item for item, m in zip(items, matches, strict=True) if not m)
            raise TuneError(f"bad layer {bad!r} in {spec!r}; expected names like C2 or "
                            "ranges like C2-C12")
        return None
    names: list[str] = []
    for item, m in zip(items, matches, strict=True):
        assert m is not None
        lo, hi = int(m[1]), int(m[2] or m[1])
        if lo > hi:
            raise TuneError(f"layer range {item!r} runs backwards")
        for i in range(lo, hi + 1):
            name = f"C{i}"
            if name not in RESNET18_LAYERS:
                raise TuneError(f"unknown layer {name} in {spec!r}; expected C1..C"
                                f"{len(RESNET18_LAYERS)} (ResNet-18 layers of the TVM paper)")
            if name not in names:
                names.append(name)
    return names


def timing_class(wl: Any) -> tuple[Any, ...]:
    """What a conv2d's timing depends on: its workload with the shift amount reduced to
    whether there is one and ReLU left out. Those only change ALU immediates, which no cycle
    cost reads, so workloads of one class give programs of identical timing for any knobs.
    A workload of several requantisations (conv2d_add) says its own (``timing_class()``)."""
    from dataclasses import astuple, replace

    if hasattr(wl, "timing_class"):
        return tuple(wl.timing_class())
    return astuple(replace(wl, shift=int(wl.shift > 0), relu=False))


def _workloads(args: argparse.Namespace, cfg: Any, progress: Any
               ) -> list[tuple[str, Any, list[Any]]]:
    """(label, workload, other workloads of its timing class) of every conv2d to tune; a
    model is compiled to find them, with ``progress``."""
    from compiler.ops.workloads import resnet18_layer

    layers = parse_layers(args.target)
    if layers is not None:
        return [(name, resnet18_layer(name, batch=args.batch), []) for name in layers]
    import accel
    from accel.cli_util import steps
    from compiler.errors import LoweringError
    from compiler.graph.ir import GraphError
    try:
        graph = accel.load_model(args.target, batch=args.batch, image_size=args.image_size,
                                 seq_len=args.seq_len)
        calibration = None
        first = graph.values[graph.inputs[0]]
        if first.dtype == "float32":  # a float ONNX model: quantise as accel run does
            import numpy as np

            rng = np.random.default_rng(0)
            calibration = [{graph.inputs[0]: rng.standard_normal(first.shape).astype(np.float32)}
                           for _ in range(8)]
        progress.start("compile", None, f"{args.target} for {cfg.name}")
        exe = accel.compile(graph, cfg, calibration=calibration,
                            progress=steps(progress, "layers compiled"))
    except (GraphError, LoweringError) as exc:
        raise TuneError(str(exc)) from None
    classes: dict[tuple[Any, ...], tuple[list[str], list[Any]]] = {}
    for node, op in exe.compiled.items():  # every accelerator operator has a knob space
        wl = op.workload
        nodes, members = classes.setdefault((type(wl).__name__, timing_class(wl)), ([], []))
        nodes.append(node)
        if wl not in members:
            members.append(wl)
    if not classes:
        raise TuneError(f"{args.target}: no layer runs on the accelerator of {cfg.name}")
    out = []
    for nodes, members in classes.values():
        label = nodes[0] + (f" (+{len(nodes) - 1})" if len(nodes) > 1 else "")
        out.append((label, members[0], members[1:]))
    return out


def _short(wl: Any) -> str:
    if hasattr(wl, "kernel_h"):  # a conv2d
        return (f"{wl.height}x{wl.width} {wl.in_channels}->{wl.out_channels} "
                f"k{wl.kernel_h} s{wl.stride_h}")
    return wl.signature().rsplit("_sh", 1)[0]  # e.g. matmul_m128_k768_n768_b1


def _knob_text(knobs: Any) -> str:
    from compiler.ops.conv2d import TILE_ORDERS

    k = knobs.to_dict()
    if "tile_order" not in k:
        return " ".join(f"{name}={value}" for name, value in k.items())
    return (f"b{k['tile_b']} h{k['tile_h']} w{k['tile_w']} ci{k['tile_ci']} co{k['tile_co']} "
            f"t{k['oc_nthread']}x{k['h_nthread']} {TILE_ORDERS[k['tile_order']]}")


def cmd_tune(args: argparse.Namespace) -> int:
    from accel.cli_util import Progress, caused_by_interrupt, check_model_options, interrupted
    from accel.machine.config import load_config
    from compiler.ops.tuning_log import TuningLog

    if args.trials < 1:
        raise TuneError(f"--trials must be >= 1, got {args.trials}")
    if args.workers is not None and args.workers < 1:
        raise TuneError(f"--workers must be >= 1, got {args.workers}")
    check_model_options(args.target, args.batch, args.image_size,
                        layers=parse_layers(args.target) is not None)
    cfg = load_config(args.config)
    started = time.perf_counter()
    log = TuningLog(args.log)
    if log.path.is_dir():
        raise TuneError(f"--log {args.log}: is a directory")
    skipped_before = log.skipped
    logged_before = len(log)
    progress = Progress(sys.stderr, quiet=args.quiet)
    try:
        rows = _tune(args, cfg, log, progress, started)
    except BaseException as exc:
        if not caused_by_interrupt(exc):
            raise
        # Every measurement was appended to the log as it came (a whole line, flushed).
        n = len(log) - logged_before
        return interrupted(f"accel: tune interrupted; {log.path} keeps the {n} "
                           f"record{'s' if n != 1 else ''} it logged")
    if args.json:
        print(json.dumps(_rows_json(rows, cfg, log), indent=2))
    else:
        _print_table(rows, cfg, log, skipped_before)
    return 0


def _rows_json(rows: list[tuple[Any, ...]], cfg: Any, log: Any) -> dict[str, Any]:
    """``accel tune --json``: the summary table as data."""
    layers = []
    for label, wl, space, trials, base_c, best_c, knobs in rows:
        tuned = min(base_c, best_c) if base_c is not None and best_c else base_c
        layers.append({
            "layer": label, "workload": wl.signature(), "space": space if base_c else None,
            "trials": trials if base_c else None, "heuristic_cycles": base_c,
            "tuned_cycles": tuned,
            "speedup": base_c / tuned if base_c and tuned else None,
            "knobs": knobs.to_dict() if knobs is not None and best_c and best_c < base_c
            else None})
    return {"config": cfg.name, "log": str(log.path), "records": len(log), "layers": layers}


def _tune(args: argparse.Namespace, cfg: Any, log: Any, progress: Any, started: float
          ) -> list[tuple[Any, ...]]:
    """Tune every layer of ``args.target``, logging each measurement; one table row each."""
    from accel.cli_util import default_workers
    from compiler.errors import LoweringError
    from compiler.tune import make_task, make_tuner
    from runtime.tuning import SimMeasure

    workloads = _workloads(args, cfg, progress)
    rows = []
    with SimMeasure(workers=args.workers or default_workers()) as measure:
        for n, (label, wl, siblings) in enumerate(workloads, 1):
            head = f"[{n}/{len(workloads)}] {label}"
            try:
                task = make_task(wl, cfg)
                default = task.default_knobs()
            except LoweringError as exc:
                progress.line(f"{head}: skipped: {exc}")
                rows.append((label, wl, 0, 0, None, None, None))
                continue
            progress.start(head, None, f"heuristic knobs ({len(task.space)} valid settings)")
            batch = [0]  # the tuner's batch being measured (0: the heuristic's knobs)

            def measuring(done: int, total: int, head: str = head, batch: list[int] = batch
                          ) -> None:
                # A batch can take minutes (seconds per setting): each setting is a step.
                if done == 0 and batch[0]:
                    progress.start(f"{head}: {args.tuner} batch {batch[0]}", total,
                                   "settings measured")
                else:
                    progress.update(done, total, "settings measured")

            measure.progress = measuring
            base = measure(task, [default])[0]
            if base.cycles is None:
                raise TuneError(f"{label}: the heuristic's knobs do not build: {base.error}")
            log.add(cfg.name, task.signature, default.to_dict(), base.cycles, "heuristic")
            tuner = make_tuner(args.tuner, task, seed=args.seed)
            batch[0] = 1

            def report(tuner: Any, result: Any, new: Any, head: str = head,
                       base_cycles: int = base.cycles, batch: list[int] = batch) -> None:
                batch[0] += 1
                best = result.best.cycles
                progress.line(f"{head}: {tuner.name} {len(result.trials)}/{args.trials} trials, "
                              f"best {best} cycles ({base_cycles / best:.2f}x heuristic) "
                              f"({time.perf_counter() - started:.1f} s)")

            result = tuner.tune(args.trials, measure, callbacks=[report], log=log)
            best = result.best
            for other in siblings:  # same timing: the measurements hold for them too
                log.add(cfg.name, other.signature(), default.to_dict(), base.cycles,
                        "shared:heuristic")
                if best is not None and best.cycles < base.cycles:
                    log.add(cfg.name, other.signature(), best.knobs.to_dict(), best.cycles,
                            f"shared:{tuner.name}")
            rows.append((label, wl, len(task.space), len(result.trials), base.cycles,
                         best.cycles if best else None, best.knobs if best else None))
    return rows


def _print_table(rows: list[tuple[Any, ...]], cfg: Any, log: Any, skipped_before: int) -> None:
    """The summary on stdout: a line per layer, then where the log is."""
    print(f"{'layer':<20} {'workload':<24} {'space':>6} {'trials':>6} {'heuristic':>10} "
          f"{'tuned':>10} {'speedup':>7}  best knobs")
    for label, wl, space, trials, base_c, best_c, knobs in rows:
        if base_c is None:
            print(f"{label:<20.20} {_short(wl):<24} {'-':>6} {'-':>6} {'-':>10} {'-':>10} "
                  f"{'-':>7}  no valid setting on {cfg.name}")
            continue
        chosen = min(base_c, best_c) if best_c else base_c
        print(f"{label:<20.20} {_short(wl):<24} {space:>6} {trials:>6} {base_c:>10} "
              f"{chosen:>10} {base_c / chosen:>6.2f}x  "
              f"{_knob_text(knobs) if best_c and best_c < base_c else 'heuristic'}")
    print(f"log: {log.path} ({len(log)} records; accel run MODEL --tuning-log {log.path} "
          "compiles with the best of each layer)")
    if log.skipped > skipped_before or skipped_before:
        print(f"note: {log.skipped} line(s) of {log.path} are not records and were skipped")


def add_parsers(subparsers: Any) -> None:
    """Add ``tune`` to ``subparsers``."""
    from accel.cli_util import WORKERS_HELP
    from compiler.tune.names import TUNER_NAMES

    p = subparsers.add_parser(
        "tune", help="tune layer schedules on the timing simulator (model or layer list)")
    p.add_argument("target", metavar="MODEL|LAYER-LIST",
                   help="zoo model (resnet18, bert_base, ...) or .onnx file: every distinct "
                        "accelerator layer; or ResNet-18 layers like C2,C3,C9 or C2-C12")
    p.add_argument("--config", help="hardware config name or YAML path")
    p.add_argument("--trials", type=int, default=64, help="measured settings per layer")
    p.add_argument("--tuner", default="xgb", choices=TUNER_NAMES,
                   help="xgb (cost model + simulated annealing), random or ga")
    p.add_argument("--log", default="tuning.jsonl",
                   help="tuning log to append to (JSON lines; default tuning.jsonl)")
    p.add_argument("--seed", type=int, default=0, help="seed of the tuner")
    p.add_argument("--workers", type=int, default=None, metavar="N", help=WORKERS_HELP)
    p.add_argument("--batch", type=int, default=1, help="batch size of the layers")
    p.add_argument("--image-size", type=int, default=None,
                   help="zoo model input size (default 224)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="BERT tokens per sequence (default 128)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (each layer, batch and measurement)")
    p.add_argument("--json", action="store_true",
                   help="print the summary as JSON instead of a table (knobs: null where the "
                        "heuristic's are best)")
    p.set_defaults(func=cmd_tune)
