"""``accel codesign MODEL --device PART``: the machine for a network on an FPGA part.

Searches :data:`accel.dse.codesign.SPACE` (:func:`accel.dse.codesign.search`), prints the best
machines with their predicted cycles, latency at the part's clock, energy per inference and
resources against its budget (``--objective`` ranks by latency, energy or their product), and
with ``--out DIR`` writes each as a ready config (``rank1.yaml``, ...), every
priced machine (``machines.csv``) and the ranking's Pareto plot (``pareto.png``: latency
against LUT positions). ``--verify`` runs the best machine through the timing simulator on
the whole network (every layer checked bit-exact against numpy) and says where prediction and
measurement differ; ``--synth`` synthesises it with Yosys (``--pnr``: and places and routes it
for its Fmax).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
from typing import Any

import yaml

from accel.cli_util import (
    EXIT_FAILED,
    CliError,
    Progress,
    check_model_options,
    check_out_dir,
    make_out_dir,
)

__all__ = ["OBJECTIVES", "add_parsers", "cmd_codesign"]

OBJECTIVES = ("latency", "energy", "edp")
"""``accel.dse.codesign.OBJECTIVES``, without importing it (start-up; a test checks)."""


def _use_text(m: Any) -> str:
    return "  ".join(f"{k} {u}/{h}" for k, (u, h) in m.use.items())


def _changes(m: Any, base: Any) -> str:
    """The fields where ``m`` differs from the base config, as ``key=value``."""
    b = dict(base.point)
    diff = [f"{k}={v}" for k, v in m.point if b.get(k) != v]
    if m.config.gemm.lut_macs:
        diff.append(f"gemm.lut_macs={m.config.gemm.lut_macs} (MACs in LUTs)")
    return ", ".join(diff) or "(the base config)"


def _machine_json(m: Any, base: Any) -> dict[str, Any]:
    energy = None if m.energy_uj is None else round(m.energy_uj, 3)
    return {"config": m.config.name, "fields": dict(m.point), "cycles": round(m.cycles),
            "latency_ms": round(m.latency_ms, 4), "modelled_share": round(m.modelled, 4),
            "energy_uj": energy,
            "edp_uj_ms": None if energy is None else round(m.energy_uj * m.latency_ms, 4),
            "gain_over_base": (round(base.cycles / m.cycles, 4) if base.ok else None),
            "energy_gain_over_base": (round(base.energy_uj / m.energy_uj, 4)
                                      if base.ok and base.energy_uj and m.energy_uj else None),
            "resources": {k: {"used": u, "available": h} for k, (u, h) in m.use.items()}}


def _energy_text(m: Any, base: Any) -> str:
    if m.energy_uj is None:
        return ""
    gain = (f" ({base.energy_uj / m.energy_uj:.3f}x the base)"
            if base is not m and base.ok and base.energy_uj else "")
    return f", {m.energy_uj:,.1f} uJ{gain}"


def _write_outputs(out: Any, result: Any, ev: Any, top: list[Any], model: str) -> list[str]:
    written = []
    for rank, m in enumerate(top, 1):
        data = m.config.to_dict()
        data["description"] = (f"accel codesign {model} --device {ev.device.name}: rank {rank}, "
                               f"{round(m.cycles):,} predicted cycles")
        path = out / f"rank{rank}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        written.append(str(path))
    keys = sorted({k for m in ev.machines for k, _ in m.point})
    path = out / "machines.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*keys, "cycles", "energy_uj", "lut_positions", "ffs", "dsps", "brams",
                    "rejected"])
        for m in ev.machines:
            p = dict(m.point)
            a = m.area
            w.writerow([*(p.get(k) for k in keys), round(m.cycles) if m.ok else "",
                        "" if m.energy_uj is None else round(m.energy_uj, 3),
                        *((a.lut_positions, a.ffs, a.dsps, a.brams) if a else ("",) * 4),
                        m.reason])
    written.append(str(path))
    from accel.plots import plot_codesign

    written += [str(p) for p in plot_codesign(result, ev.device, ev.graph.name, out)]
    return written


def _verify(model: str, m: Any, progress: Progress, options: dict[str, Any]) -> dict[str, Any]:
    """The best machine on the timing simulator, whole network, every layer checked."""
    from accel.cli_util import steps
    from runtime.network import compile_network, sample_inputs

    progress.start("verify: compile")
    exe = compile_network(model, m.config, progress=steps(progress, "compiled"), **options)
    x, _ = sample_inputs(exe.graph)
    progress.start("verify: timing simulation")
    _, report = exe.run(x, backend="sim", check=True, progress=steps(progress, "simulated"))
    progress.end()
    layers = {r.name: r.cycles for r in report.layers if r.cycles is not None}
    worst = max(((abs(m.layers[n] - c) / c, n) for n, c in layers.items()
                 if n in m.layers and c), default=(0.0, ""))
    energy = report.totals()["energy_uj_per_inference"]
    return {"cycles": report.accel_cycles, "bit_exact": bool(report.check),
            "predicted": round(m.cycles), "error": m.cycles / report.accel_cycles - 1,
            "worst_layer": worst[1], "worst_layer_error": worst[0],
            "energy_uj": energy, "predicted_energy_uj": m.energy_uj,
            "energy_error": (m.energy_uj / energy - 1 if energy and m.energy_uj is not None
                             else None)}


def _synth(m: Any, device: Any, pnr: bool) -> dict[str, Any]:
    from accel.dse.area_model import CSV_COUNTS
    from hw.synth import synthesize

    kw: dict[str, Any] = {"pnr": pnr}
    if pnr:
        if not device.nextpnr:
            raise CliError(f"--pnr: {device.name} has no nextpnr device")
        kw["device"] = device.nextpnr["device"]
    r = synthesize(m.config, device.family, **kw)
    measured = {k: getattr(r, k) for k in CSV_COUNTS}
    predicted = {k: getattr(m.area, k) for k in CSV_COUNTS}
    return {"measured": measured, "predicted": predicted, "fmax_mhz": r.fmax_mhz}


def cmd_codesign(args: argparse.Namespace) -> int:
    from accel.dse.codesign import Evaluator, search
    from accel.machine.fpga import load_device

    if args.top < 1:
        raise CliError(f"--top must be at least 1, not {args.top}")
    if args.starts < 1:
        raise CliError(f"--starts must be at least 1, not {args.starts}")
    if args.pnr and not args.synth:
        raise CliError("--pnr needs --synth")
    out = check_out_dir(args.out, "--out") if args.out else None
    device = load_device(args.device)
    progress = Progress(quiet=args.quiet)
    progress.start("codesign: load", text=args.model)
    check_model_options(args.model, 1, args.image_size)
    options = {k: v for k, v in (("image_size", args.image_size), ("seq_len", args.seq_len))
               if v is not None}
    ev = Evaluator(args.model, device, base=args.base, graph_options=options,
                   lut_multipliers=not args.no_lut_multipliers, objective=args.objective)
    progress.start("codesign: search")
    unit = {"latency": "cycles", "energy": "uJ", "edp": "uJ x ms"}[args.objective]

    def show(best: Any, evaluations: int) -> None:
        text = f"best {best.key()[1]:,.1f} {unit}" if best.ok else "no machine yet"
        progress.update(evaluations, None, f"{text}, {ev.area_checks} priced")

    result = search(ev, starts=args.starts, seed=args.seed, progress=show)
    progress.start("codesign: energy of the best")  # compiled, where latency was the goal
    top = [ev.with_energy(m) for m in result.ranked[:args.top]]
    result = dataclasses.replace(result, base=ev.with_energy(result.base),
                                 ranked=top + result.ranked[args.top:])
    progress.end()
    report: dict[str, Any] = {
        "model": ev.graph.name, "device": device.name, "objective": args.objective,
        "clock_mhz": device.clock_mhz, "evaluations": result.evaluations,
        "area_checks": result.area_checks, "base": ev.base.name,
        "base_fits": result.base.ok, "base_reason": result.base.reason,
        "machines": [_machine_json(m, result.base) for m in top]}
    if args.verify:
        report["verify"] = _verify(args.model, result.best, progress, options)
    if args.synth:
        report["synth"] = _synth(result.best, device, args.pnr)
    if out is not None:
        make_out_dir(out, "--out")
        report["written"] = _write_outputs(out, result, ev, top, args.model)
        (out / "codesign.json").write_text(json.dumps(report, indent=2))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report, result, top, ev)
    failed = "verify" in report and not report["verify"]["bit_exact"]
    return EXIT_FAILED if failed else 0


def _print(report: dict[str, Any], result: Any, top: list[Any], ev: Any) -> None:
    d = ev.device
    print(f"{report['model']} on {d.name} ({d.part}, {d.clock_mhz:g} MHz), objective "
          f"{report['objective']}: {result.evaluations} machines priced for cycles, "
          f"{result.area_checks} in all (area model first); energy per inference predicted "
          "from the compiled programs")
    b = result.base
    if b.ok:
        print(f"base {ev.base.name}: {b.cycles:,.0f} cycles, {b.latency_ms:.3f} ms"
              f"{_energy_text(b, b)}  {_use_text(b)}")
    else:
        print(f"base {ev.base.name}: does not qualify on {d.name}: {b.reason}")
    for rank, m in enumerate(top, 1):
        gain = f"  {b.cycles / m.cycles:.3f}x the base" if b.ok else ""
        print(f"#{rank} {m.cycles:,.0f} cycles, {m.latency_ms:.3f} ms{gain}"
              f"{_energy_text(m, b)}  {_use_text(m)}")
        print(f"   {m.config.name}: {_changes(m, b)}")
    best = result.best
    if best.modelled < 1:
        print(f"(of #1's cycles {100 * (1 - best.modelled):.1f}% are the roofline bounds of "
              "layers whose operator has no cycle model)")
    v = report.get("verify")
    if v:
        state = "every layer bit-exact" if v["bit_exact"] else "NOT bit-exact"
        print(f"verified #1 on the timing simulator: {v['cycles']:,} cycles ({state}); "
              f"predicted {v['predicted']:,} ({100 * v['error']:+.2f}%), worst layer "
              f"{v['worst_layer']} {100 * v['worst_layer_error']:.1f}% off")
        if v.get("energy_error") is not None:
            print(f"   energy {v['energy_uj']:,.1f} uJ per inference; predicted "
                  f"{v['predicted_energy_uj']:,.1f} ({100 * v['energy_error']:+.2f}%)")
    s = report.get("synth")
    if s:
        parts = ", ".join(f"{k} {s['measured'][k]} (predicted {s['predicted'][k]})"
                          for k in s["measured"])
        fmax = f"; Fmax {s['fmax_mhz']:.1f} MHz" if s.get("fmax_mhz") else ""
        print(f"synthesised #1 with Yosys: {parts}{fmax}")
    for path in report.get("written", []):
        print(f"wrote {path}", file=sys.stderr)


def add_parsers(subparsers: Any) -> None:
    """Add ``codesign`` to ``subparsers``."""
    p = subparsers.add_parser(
        "codesign", help="search for the machine that runs a network fastest on an FPGA part")
    p.add_argument("model", help="zoo model (resnet18, bert_base, ...) or .onnx file")
    p.add_argument("--device", required=True,
                   help="shipped part (ecp5-45f, ...) or device YAML: the budget and clock")
    p.add_argument("--objective", default="latency", choices=OBJECTIVES,
                   help="what to minimise: latency at the part's clock, energy per inference, "
                        "or energy x latency (edp); energy compiles each machine's layers")
    p.add_argument("--base", default=None,
                   help="config the search starts from and varies (default: the packaged "
                        "default)")
    p.add_argument("--no-lut-multipliers", action="store_true",
                   help="every MAC on a multiplier block (default: as many MACs in LUTs, "
                        "gemm.lut_macs, as the part's blocks are short of)")
    p.add_argument("--top", type=int, default=3, help="machines to print and write")
    p.add_argument("--starts", type=int, default=1,
                   help="coordinate-descent starts: the base, then seeded random points "
                        "(default 1: the base alone)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random starts")
    p.add_argument("--image-size", type=int, default=None,
                   help="ResNet input size (default 224)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="BERT tokens per sequence (default 128)")
    p.add_argument("--out", metavar="DIR",
                   help="folder to write rank<N>.yaml, machines.csv, pareto.png/.svg and "
                   "codesign.json into")
    p.add_argument("--verify", action="store_true",
                   help="run the best machine on the timing simulator, every layer checked")
    p.add_argument("--synth", action="store_true", help="synthesise the best with Yosys")
    p.add_argument("--pnr", action="store_true",
                   help="with --synth: place and route for the Fmax (20-50 minutes)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.set_defaults(func=cmd_codesign)
