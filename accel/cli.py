"""The ``accel`` command line.

Every command has ``--help``. Exit status: 0 on success, 2 with a one-line ``accel: error: ...``
on bad input (a config, a program file, assembly text). Subsystems are imported inside the
command that needs them, so ``accel config show`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from accel.cli_util import (
    EXIT_BAD_INPUT,
    CliError,
    Progress,
    caused_by_interrupt,
    check_model_options,
    check_out_dir,
    check_out_file,
    interrupted,
    make_out_dir,
    steps,
)
from accel.machine.config import HwConfig, load_config, shipped_configs

__all__ = ["CliError", "main"]


def _config(spec: str | None) -> HwConfig:
    return load_config(spec)


# ---------------------------------------------------------------------- config
def _energy_summary(cfg: HwConfig) -> dict[str, Any]:
    """The config's energy table (where from) and its energies per action, in picojoules."""
    from accel.machine.energy import action_energies, sram_kb

    t = cfg.energy
    per_action = {k: (round(v, 4) if isinstance(v, float)
                      else {kk: round(vv, 4) for kk, vv in v.items()})
                  for k, v in action_energies(cfg).to_dict().items()}
    return {"table": t.source, "description": t.description,
            "node_nm": t.technology.node_nm, "vdd": t.technology.vdd,
            "sram_kb": round(sram_kb(cfg), 3), "pj": per_action}


def cmd_config_show(args: argparse.Namespace) -> int:
    cfg = _config(args.config)
    energy = _energy_summary(cfg)
    if args.json:
        print(json.dumps({"config": cfg.to_dict(), "derived": cfg.derived(),
                          "energy": energy}, indent=2))
        return 0
    print(f"# {cfg.name}  (from {cfg.source})")
    print(yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None).rstrip())
    print("# derived")
    print(yaml.safe_dump({"derived": cfg.derived()}, sort_keys=False,
                         default_flow_style=None).rstrip())
    print("# energy per action (pJ; read/write: per access, active: per cycle a module runs "
          "an instruction, leakage: per cycle)")
    print(yaml.safe_dump({"energy": energy}, sort_keys=False, default_flow_style=None).rstrip())
    return 0


def cmd_config_validate(args: argparse.Namespace) -> int:
    cfg = load_config(Path(args.path))
    print(f"{args.path}: ok ({cfg.name})")
    return 0


def cmd_config_list(args: argparse.Namespace) -> int:
    configs = [(name, load_config(name)) for name in shipped_configs()]
    if args.json:
        print(json.dumps([{"name": name, "config": cfg.name, "description": cfg.description}
                          for name, cfg in configs], indent=2))
        return 0
    wide = max(len(name) for name, _ in configs)
    full = max(len(cfg.name) for _, cfg in configs)
    for name, cfg in configs:
        print(f"{name:<{wide}} {cfg.name:<{full}} {cfg.description}")
    return 0


# ---------------------------------------------------------------------- device
def cmd_device_show(args: argparse.Namespace) -> int:
    from accel.machine.fpga import load_device

    dev = load_device(args.device)
    if args.json:
        print(json.dumps({"name": dev.name, **dev.to_dict()}, indent=2))
        return 0
    print(f"# {dev.name}  (from {dev.source})")
    print(yaml.safe_dump(dev.to_dict(), sort_keys=False, default_flow_style=None).rstrip())
    return 0


def cmd_device_validate(args: argparse.Namespace) -> int:
    from accel.machine.fpga import load_device

    dev = load_device(Path(args.path))
    print(f"{args.path}: ok ({dev.part}, {dev.family})")
    return 0


def cmd_device_list(args: argparse.Namespace) -> int:
    from accel.machine.fpga import load_device, shipped_devices

    devices = [load_device(name) for name in shipped_devices()]
    if args.json:
        print(json.dumps([{"name": d.name, **d.budget(), "clock_mhz": d.clock_mhz,
                           "part": d.part, "description": d.description} for d in devices],
                         indent=2))
        return 0
    wide = max(len(d.name) for d in devices)
    print(f"{'name':<{wide}} {'LUTs':>7} {'FFs':>7} {'DSPs':>5} {'BRAMs':>5} {'MHz':>4}  part")
    for d in devices:
        b = d.budget()
        print(f"{d.name:<{wide}} {b['luts']:>7} {b['ffs']:>7} {b['dsps']:>5} {b['brams']:>5} "
              f"{d.clock_mhz:>4g}  {d.part}: {d.description}")
    return 0


def cmd_area(args: argparse.Namespace) -> int:
    from accel.dse.area_model import budget_use, estimate
    from accel.machine.fpga import load_device

    cfg = _config(args.config)
    device = load_device(args.device) if args.device else None
    est = estimate(cfg, device.family if device else "ecp5")
    use = budget_use(est, device) if device else {}
    over = [k for k, (used, have) in use.items() if used > have]
    if args.json:
        out: dict[str, Any] = {"config": cfg.name, **vars(est),
                               "lut_positions": est.lut_positions}
        if device:
            out["device"] = device.name
            out["budget"] = {k: {"used": u, "available": a} for k, (u, a) in use.items()}
            out["fits"] = not over
        print(json.dumps(out, indent=2))
        return 0
    print(f"{cfg.name}: predicted by the area model (accel.dse.area_model), not synthesised")
    print(f"  LUT4 {est.luts}, carry cells {est.carries}, distributed RAM cells {est.lutrams}: "
          f"{est.lut_positions} LUT positions")
    print(f"  flip-flops {est.ffs}, DSP blocks {est.dsps}, block RAMs {est.brams}")
    if device:
        print(f"on {device.name} ({device.part}):")
        for k, (used, have) in use.items():
            mark = "   OVER" if k in over else ""
            print(f"  {k:<6} {used:>7} of {have:>7} ({100 * used / have:5.1f}%){mark}")
        print(f"does not fit: {', '.join(over)}" if over else "fits")
    return 0


# ---------------------------------------------------------------------- programs
def cmd_asm(args: argparse.Namespace) -> int:
    from accel.machine.program import ProgramError, assemble_file
    from accel.machine.tokens import check_tokens

    output = check_out_file(args.output, "-o", inputs=[args.source])
    cfg = _config(args.config) if args.config else None
    program = assemble_file(args.source, config=cfg)
    try:
        program.validate()
    except ProgramError as exc:
        raise CliError(f"{args.source}: {exc}") from None
    try:
        check_tokens(program)  # a deadlock or tokens left at FINISH: accel exec would fail
    except ProgramError as exc:
        message = f"{args.source}: dependency tokens do not balance: {exc}"
        if not args.allow_unbalanced:
            raise CliError(f"{message}; pass --allow-unbalanced to write it anyway") from None
        print(f"accel: warning: {message}", file=sys.stderr)
    program.save(output)
    print(f"{args.output}: {len(program.insns)} instructions, {len(program.uops)} micro-ops "
          f"for {program.config.name}")
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    from accel.machine.program import Program, disassemble

    output = check_out_file(args.output, "-o", inputs=[args.program]) if args.output else None
    cfg = _config(args.config) if args.config else None
    program = Program.load(args.program, config=cfg)
    text = disassemble(program)
    if output is not None:
        output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


# ---------------------------------------------------------------------- networks
def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_report(report: Any, out: Any = None) -> None:
    """The per-layer table and the totals (columns as in layers.csv, docs/reference.md;
    energy: the accelerator's, by component)."""
    out = out or sys.stdout
    header = (f"{'layer':<22} {'op':<16} {'shape (out)':<17} {'target':<6} {'cycles':>10} "
              f"{'bound':>10} {'roof':>5} {'sim ms':>8} {'host ms':>8} {'util':>5} "
              f"{'DRAM KiB':>8} {'bw':>4} {'uJ':>8} {'pJ/MAC':>7}  largest stall")
    print(header, file=out)
    print("-" * len(header), file=out)
    for layer in report.layers:
        shape = "x".join(str(s) for s in layer.output_shape)
        print(f"{layer.name:<22.22} {layer.op:<16.16} {shape:<17.17} {layer.target:<6} "
              f"{_fmt(layer.cycles, 'd'):>10} {_fmt(layer.bound_cycles, '.0f'):>10} "
              f"{_fmt(layer.roofline_efficiency, '.2f'):>5} {_fmt(layer.sim_ms, '.3f'):>8} "
              f"{_fmt(layer.host_ms, '.3f'):>8} {_fmt(layer.gemm_utilization, '.2f'):>5} "
              f"{_fmt(layer.dram_kib, '.1f'):>8} {_fmt(layer.dram_bandwidth_share, '4.0%'):>4} "
              f"{_fmt(layer.energy_uj, '.2f'):>8} {_fmt(layer.pj_per_mac, '.1f'):>7}  "
              f"{layer.largest_stall or ''}", file=out)
    t = report.totals()
    print("-" * len(header), file=out)
    cycles = t["accel_cycles"]
    if cycles is not None:
        print(f"accelerator: {cycles} cycles = {t['accel_sim_ms']:.3f} ms at "
              f"{report.clock_mhz:g} MHz ({report.backend}, {report.config})"
              + (f"; {t['accel_cycles_per_inference']:.0f} cycles per inference (batch "
                 f"{report.batch})" if report.batch > 1 else ""), file=out)
        print(f"roofline: bound {t['bound_cycles']:.0f} cycles, efficiency "
              f"{_fmt(t['roofline_efficiency'], '.3f')} (sum of bounds / sum of cycles over "
              "accelerator layers)", file=out)
    else:
        print(f"accelerator: functional only ({report.backend}, {report.config}); roofline "
              f"bound {t['bound_cycles']:.0f} cycles", file=out)
    if t["energy_uj"] is not None:
        parts = t["energy_components_uj"]
        total = t["energy_uj"] or 1.0
        print(f"energy: {t['energy_uj_per_inference']:.2f} uJ per inference, "
              f"{_fmt(t['pj_per_mac'], '.2f')} pJ/MAC, {_fmt(t['tops_per_w'], '.3f')} TOPS/W, "
              f"{_fmt(t['power_mw'], '.1f')} mW at {report.clock_mhz:g} MHz (accelerator only)",
              file=out)
        print("  by component (uJ): " + ", ".join(
            f"{c} {v:.2f} ({100 * v / total:.0f}%)" for c, v in parts.items()), file=out)
    share = t.get("fallback_host_share")
    print(f"fallback ({report.fallback}): {t['fallback_host_ms']:.1f} ms host time"
          + (f" ({100 * share:.1f}% of the run's {t['run_host_ms'] / 1000:.2f} s)"
             if share is not None else "")
          + f"; MACs offloaded: {100 * t['offloaded_mac_share']:.2f}%", file=out)
    plan = report.memory_plan
    if plan.get("peak_bytes"):
        print(f"DRAM plan: peak {plan['peak_bytes'] / 1024:.0f} KiB vs naive "
              f"{plan['naive_bytes'] / 1024:.0f} KiB", file=out)


def cmd_run(args: argparse.Namespace) -> int:

    from accel.cli_exec import vcd_dump
    from compiler.graph.decoder import DECODERS

    check_model_options(args.model, args.batch, args.image_size)
    out_dir = check_out_dir(args.out, "--out") if args.out else None
    cfg = _config(args.config)
    if args.model in DECODERS:
        from accel.cli_decode import run_decoder

        return run_decoder(args, cfg, out_dir)
    for flag, value in (("--prompt-len", args.prompt_len), ("--decode", args.decode)):
        if value is not None:
            raise CliError(f"{flag} applies to the decoders ({', '.join(DECODERS)}) only, "
                           f"not to {args.model}")
    if args.tuning_log and not Path(args.tuning_log).is_file():
        raise CliError(f"{args.tuning_log}: no such tuning log")
    dump = vcd_dump(args)
    if args.vcd_layer is not None and dump is None:
        raise CliError("--vcd-layer needs --vcd FILE")
    plotter = Plotter.start() if out_dir is not None and args.backend != "fsim" else None
    try:
        return _run_checked(args, cfg, out_dir, dump, plotter)
    finally:
        if plotter is not None:
            plotter.close()


def _run_checked(args: argparse.Namespace, cfg: Any, out_dir: Path | None, dump: Any,
                 plotter: Plotter | None) -> int:
    """:func:`cmd_run` once its arguments are checked."""
    import numpy as np

    import accel
    from accel.cli_exec import rtl_failure, vcd_summary
    from compiler.errors import LoweringError
    from compiler.graph.ir import GraphError

    is_onnx = str(args.model).endswith(".onnx")
    progress = Progress(sys.stderr, quiet=args.quiet)
    started = time.perf_counter()
    try:
        # Loading takes a few seconds at most and finds bad input (an unknown model, a broken
        # file): before any progress, so that bad input is its one error line.
        graph = accel.load_model(args.model, batch=args.batch, image_size=args.image_size,
                                 seq_len=args.seq_len)
        x, calibration = accel.sample_inputs(graph, args.seed)
        progress.start("compile", None, f"{args.model} for {cfg.name}")
        exe = accel.compile(graph, cfg, calibration=calibration, tuning_log=args.tuning_log,
                            progress=steps(progress, "layers compiled"))
    except (GraphError, LoweringError) as exc:
        progress.end()
        raise CliError(str(exc)) from None
    compiled = time.perf_counter()
    progress.end()  # a terminal's updating line, before anything on stdout
    if args.tuning_log:
        logged = _logged_layers(exe, args.tuning_log)
        print(f"tuning log {args.tuning_log}: {logged} of {len(exe.compiled)} accelerator "
              "layers use logged knobs, the others the heuristic's",
              file=sys.stderr if args.json else sys.stdout)  # --json: stdout is JSON only
    check = (not is_onnx) if args.check is None else args.check
    dumped = None
    if dump is not None:
        dumped = args.vcd_layer or next(iter(exe.compiled), None)
        if dumped is None:
            raise CliError(f"--vcd: no layer of {graph.name} runs on the accelerator")
    progress.start("run", len(exe.graph.nodes), f"on {args.backend}")
    try:
        outputs, report = exe.run(x, backend=args.backend, fallback=args.fallback, check=check,
                                  trace=out_dir is not None and args.backend != "fsim"
                                  and not args.no_trace,
                                  progress=steps(progress, "done"),
                                  layer_options={dumped: {"vcd": dump}} if dumped else None)
    except RuntimeError as exc:   # the RTL: a failed Verilator build, the cycle limit
        raise CliError(rtl_failure(exc)) from exc
    finally:
        progress.end()
    ran = time.perf_counter()
    if args.json:
        return _run_json(args, exe, x, outputs, report, check, out_dir, plotter)
    print_report(report)
    if dump is not None:
        layer = next(layer for layer in report.layers if layer.name == dumped)
        print(vcd_summary(dump, layer.cycles, f"layer {dumped}"))
    unfit, unsupported = _cpu_layers(exe, report)
    for names, why in ((unfit, f"do not fit the buffers of {cfg.name}"),
                       (unsupported, "are not accelerator operators in this form")):
        if names:
            print(f"note: {len(names)} layer(s) {why} and ran on the {args.fallback} fallback: "
                  f"{', '.join(names[:6])}" + (" ..." if len(names) > 6 else ""))
    if check:
        ref = exe.reference(x)
        final_ok = all(np.array_equal(outputs[k], ref[k]) for k in ref)
        bad = [layer.name for layer in report.layers if layer.check is False]
        if bad or not final_ok:
            print(f"check: FAILED: {len(bad)} layer(s) differ from the numpy reference "
                  f"({', '.join(bad[:5])}); final output "
                  f"{'matches' if final_ok else 'differs'}")
        else:
            print(f"check: all {len(report.layers)} layers and the final output are bit-exact "
                  "with the numpy reference network")
    print(f"time: compile {compiled - started:.2f} s, run {ran - compiled:.2f} s")
    if out_dir is not None:
        names = _write_run_files(report, out_dir, args.backend, trace=not args.no_trace,
                                 plotter=plotter)
        print(f"wrote {out_dir}/{', '.join(names)}")
    return 1 if check and report.check is False else 0


def _run_json(args: argparse.Namespace, exe: Any, x: Any, outputs: Any, report: Any,
              check: bool, out_dir: Path | None, plotter: Plotter | None) -> int:
    """``accel run --json``: report.json's content on stdout (the check included)."""
    import numpy as np

    if check:
        ref = exe.reference(x)
        if not all(np.array_equal(outputs[k], ref[k]) for k in ref):
            report.check = False
    if out_dir is not None:
        _write_run_files(report, out_dir, args.backend, plotter=plotter)
    print(json.dumps(report.to_dict(), indent=2))
    return 1 if check and report.check is False else 0


def _write_run_files(report: Any, out_dir: Path, backend: str, trace: bool = True,
                     plotter: Plotter | None = None) -> list[str]:
    """report.json, layers.csv (and utilization.png, trace.json but on fsim; no trace.json
    without ``trace``) in ``out_dir``; the names written. ``plotter``: the worker that draws
    the plot (else it is drawn here)."""
    make_out_dir(out_dir, "--out")
    report.write_json(out_dir / "report.json")
    report.write_csv(out_dir / "layers.csv")
    names = ["report.json", "layers.csv"]
    if backend != "fsim":
        drawn = plotter.plot(report, out_dir / "utilization.png") if plotter else None
        if trace:
            report.write_trace(out_dir / "trace.json")
        if drawn is not None:
            drawn.result()  # the worker's error, if any, raised here
        else:
            report.plot_utilization(out_dir / "utilization.png")
        names += ["utilization.png", "trace.json"] if trace else ["utilization.png"]
    return names


def _cpu_layers(exe: Any, report: Any) -> tuple[list[str], list[str]]:
    """The layers of an accelerator operator that ran on the fallback: those that do not fit
    the buffers, and those whose workload the accelerator cannot form (a grouped
    convolution with a fused residual add)."""
    from compiler.errors import LoweringError
    from compiler.ops.registry import accel_op

    nodes = {node.name: node for node in exe.graph.nodes}
    unfit, unsupported = [], []
    for layer in report.layers:
        entry = accel_op(layer.op)
        if layer.target == "accel" or entry is None:
            continue
        try:
            entry.workload(nodes[layer.name], exe.graph)
        except LoweringError:
            unsupported.append(layer.name)
        else:
            unfit.append(layer.name)
    return unfit, unsupported


class Plotter:
    """A worker process that draws ``accel run --out``'s ``utilization.png`` beside this one.

    Forked when the command starts, it imports matplotlib (most of what the plot costs) while
    this process compiles and runs the network, and draws the plot from the finished report
    (its layers: the traces stay here) while this process writes the trace. ``start``
    returns None where no worker can be forked; :meth:`close` stops it (on an error or
    Ctrl-C, at once)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    @classmethod
    def start(cls) -> Plotter | None:
        from runtime.workers import PoolHandle, forked_pool, sigint_deferred

        with sigint_deferred():  # the worker is forked at the first submit: record it first
            pool = forked_pool()
            if pool is None:
                return None
            pool.submit(_import_plotting)
            return cls(PoolHandle.of(pool))

    def plot(self, report: Any, path: Path) -> Any:
        """A future of ``report.plot_utilization(path)`` drawn by the worker."""
        import dataclasses

        return self.handle.pool.submit(_plot_utilization,
                                       dataclasses.replace(report, traces=[]), path)

    def close(self) -> None:
        from runtime.workers import stop_pool

        stop_pool(self.handle)


def _import_plotting() -> None:
    """The plot worker's first task, at the lowest priority: the run's timing worker comes
    first on the core they share, and the import takes what the run leaves idle. An import
    that fails here fails again, with its message, where the plot is drawn."""
    import os

    with contextlib.suppress(OSError, AttributeError):
        os.nice(19)
    with contextlib.suppress(Exception):
        import matplotlib.backends.backend_agg
        import matplotlib.collections
        import matplotlib.figure
        import matplotlib.patches  # noqa: F401


def _plot_utilization(report: Any, path: Path) -> Path:
    return report.plot_utilization(path)


def _logged_layers(exe: Any, path: str) -> int:
    """How many of ``exe``'s compiled layers have a record in the tuning log at ``path``."""
    from compiler.ops.tuning_log import TuningLog

    log = TuningLog(path)
    return sum(log.best(exe.cfg.name, op.workload.signature()) is not None
               for op in exe.compiled.values())


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    import accel

    parser = argparse.ArgumentParser(
        prog="accel",
        description="Hardware/software co-design toolkit for VTA-style DL accelerators.",
        epilog="Options named -o/--output take a file, options named --out a folder (created "
               "when missing). Exit status: 0 done, 1 a check or a sweep point failed, 2 bad "
               "input (one 'accel: error:' line), 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"accel {accel.__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p_cfg = sub.add_parser("config", help="show, validate or list hardware configs")
    cfg_sub = p_cfg.add_subparsers(dest="config_command", metavar="ACTION")
    cfg_sub.required = True
    p = cfg_sub.add_parser("show", help="print a resolved config and its derived values")
    p.add_argument("config", nargs="?", default=None,
                   help="shipped config name or YAML path (default: the packaged default)")
    p.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    p.set_defaults(func=cmd_config_show)
    p = cfg_sub.add_parser("validate", help="check a YAML config; exit 0 or 2 with one line")
    p.add_argument("path", help="YAML config file")
    p.set_defaults(func=cmd_config_validate)
    p = cfg_sub.add_parser("list", help="list the shipped configs")
    p.add_argument("--json", action="store_true",
                   help="print JSON (name, canonical name, description of each)")
    p.set_defaults(func=cmd_config_list)

    p = sub.add_parser("area", help="a config's FPGA resources from the area model, in "
                       "milliseconds; with --device, against a part's budget")
    p.add_argument("config", nargs="?", default=None,
                   help="shipped config name or YAML path (default: the packaged default)")
    p.add_argument("--device", default=None,
                   help="shipped part (ecp5-45f, ...) or device YAML: hold the estimate to it "
                   "(LUTs less 5%% for packing)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_area)

    p_dev = sub.add_parser("device", help="show, validate or list FPGA parts (budgets)")
    dev_sub = p_dev.add_subparsers(dest="device_command", metavar="ACTION")
    dev_sub.required = True
    p = dev_sub.add_parser("show", help="print a part's resources and clock")
    p.add_argument("device", help="shipped part name (ecp5-45f, zynq-7020, ...) or YAML path")
    p.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    p.set_defaults(func=cmd_device_show)
    p = dev_sub.add_parser("validate", help="check a device YAML file; exit 0 or 2 with one "
                           "line")
    p.add_argument("path", help="device YAML file")
    p.set_defaults(func=cmd_device_validate)
    p = dev_sub.add_parser("list", help="list the shipped parts")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_device_list)

    p = sub.add_parser("run", help="run a network (zoo name or .onnx) through a backend")
    p.add_argument("model", help="zoo model (resnet18, resnet34, resnet50, mobilenet_v2, "
                   "efficientnet_b0, bert_tiny, bert_base, vit_tiny; the decoders gpt2, "
                   "llama_small, gpt2_tiny, llama_tiny) or an .onnx file")
    p.add_argument("--config", help="hardware config name or YAML path")
    p.add_argument("--backend", default="sim", choices=["fsim", "sim", "rtl"],
                   help="fsim: functional simulator, no cycles; sim: functional and SimPy "
                        "timing simulators (default); rtl: the Amaranth RTL (Verilator or "
                        "Amaranth's simulator)")
    p.add_argument("--fallback", default="cpu", choices=["cpu", "gpu"],
                   help="where operators the accelerator cannot run go (default cpu: numpy; "
                        "gpu: CuPy)")
    p.add_argument("--batch", type=int, default=1,
                   help="batch size of a zoo model, or of an ONNX model's symbolic batch "
                        "dimension (default 1)")
    p.add_argument("--image-size", type=int, default=None,
                   help="input height and width of a zoo model (default 224; an ONNX file "
                        "fixes its own)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="tokens per sequence of a BERT zoo model (default 128)")
    p.add_argument("--prompt-len", type=int, default=None,
                   help="tokens of a decoder's prompt, run as one prefill (default 128)")
    p.add_argument("--decode", type=int, default=None, metavar="N",
                   help="decoding steps after a decoder's prefill, one token each with the KV "
                        "cache (default 32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    p.add_argument("--out", metavar="DIR",
                   help="folder (created when missing) for report.json, layers.csv and, on sim "
                        "and rtl, utilization.png and trace.json")
    p.add_argument("--no-trace", action="store_true",
                   help="with --out, no trace.json (a BERT-base trace runs to gigabytes)")
    p.add_argument("--check", dest="check", action="store_true", default=None,
                   help="compare every layer with the numpy reference (default for zoo models)")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="do not compare with the numpy reference (default for ONNX models, "
                        "which are float: their reference is onnxruntime)")
    from accel.cli_exec import add_vcd_arguments

    add_vcd_arguments(p, "one accelerator layer")
    p.add_argument("--vcd-layer", metavar="NAME",
                   help="the accelerator layer --vcd dumps (default: the first)")
    p.add_argument("--tuning-log", metavar="FILE",
                   help="compile conv2d/dense layers with the best knobs of this accel tune log")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (compiling and running each layer)")
    p.add_argument("--json", action="store_true",
                   help="print report.json's content instead of the table")
    p.set_defaults(func=cmd_run)

    from hw.cli import add_parsers as add_hw_parsers

    add_hw_parsers(sub)  # verilog, synth

    from accel.cli_codesign import add_parsers as add_codesign_parsers
    from accel.cli_plot import add_parsers as add_plot_parsers
    from accel.cli_sweep import add_parsers as add_sweep_parsers
    from accel.cli_tune import add_parsers as add_tune_parsers

    add_sweep_parsers(sub)  # sweep
    add_plot_parsers(sub)  # plot
    add_tune_parsers(sub)  # tune
    add_codesign_parsers(sub)  # codesign

    from accel.cli_exec import add_parsers as add_exec_parsers

    add_exec_parsers(sub)  # exec

    p = sub.add_parser("asm", help="assemble a .s file into a binary program")
    p.add_argument("source", help="assembly text (the form accel disasm prints)")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the binary program file to write")
    p.add_argument("--config", help="config name or path (default: the .config directive)")
    p.add_argument("--allow-unbalanced", action="store_true",
                   help="write a program whose dependency tokens do not balance (it deadlocks "
                        "or leaves tokens at FINISH) with a warning instead of refusing it")
    p.set_defaults(func=cmd_asm)

    p = sub.add_parser("disasm", help="print a binary program as assembly text")
    p.add_argument("program", help="binary program file")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="the file to write the text to (default: stdout)")
    p.add_argument("--config", help="config the program must have been built for")
    p.set_defaults(func=cmd_disasm)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``accel`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except Exception as exc:
        if caused_by_interrupt(exc):
            return interrupted("accel: interrupted")
        return _failed(exc)
    except KeyboardInterrupt:
        return interrupted("accel: interrupted")


def _failed(exc: Exception) -> int:
    """The exit status for an error that ended a command, after its one line; re-raises what
    is not the user's input (a bug: its traceback is what a report needs)."""
    import os

    if isinstance(exc, (CliError, ValueError)):
        # Every user-input error in accel is a ValueError subclass with a one-line message
        # (ConfigError, ProgramError, LoweringError, GraphError, ...). ACCEL_DEBUG=1 re-raises.
        if os.environ.get("ACCEL_DEBUG"):
            raise exc
        print(f"accel: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if isinstance(exc, BrokenPipeError):
        return 0
    if isinstance(exc, OSError) and exc.filename and not os.environ.get("ACCEL_DEBUG"):
        # A file that could not be read or written after the checks passed (a full disk, a
        # folder removed meanwhile): still one line naming it.
        print(f"accel: error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    raise exc


if __name__ == "__main__":
    sys.exit(main())
