"""The ``accel verilog`` and ``accel synth`` commands.

``accel.cli`` calls :func:`add_parsers` with its sub-parser collection. The commands report
their own failures as one ``accel: error: ...`` line on stderr and exit status 2, like the rest
of the command line, so ``accel.cli.main`` needs no knowledge of their exceptions.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

__all__ = ["EXIT_BAD_INPUT", "add_parsers", "cmd_synth", "cmd_verilog"]

EXIT_BAD_INPUT = 2


def _fail(message: str) -> int:
    print(f"accel: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def add_parsers(subparsers: Any) -> None:
    """Add ``verilog`` and ``synth`` to ``subparsers`` (an ``add_subparsers()`` result)."""
    from hw.names import ECP5_DEVICES, SYNTH_TARGETS

    p = subparsers.add_parser("verilog", help="write the accelerator's Verilog (Amaranth)")
    p.add_argument("--config", default=None,
                   help="shipped config name or YAML path (default: the packaged default)")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the Verilog file to write")
    p.add_argument("--target", default=None, choices=sorted(SYNTH_TARGETS),
                   help="FPGA family whose primitives to instantiate where the RTL has them "
                        "(ecp5: the multipliers, the last LUTs after block RAMs and multipliers; "
                        "default: generic Verilog)")
    p.add_argument("--sim-models", action="store_true",
                   help="append simulation models of the instantiated primitives")
    p.add_argument("--axi", action="store_true",
                   help="the SoC block: AXI4 master (m_axi_*) for DRAM, AXI4-Lite slave "
                        "(s_axi_*) for the registers of docs/register-map.md, aclk, aresetn, "
                        "interrupt (top module accel_axi)")
    p.set_defaults(func=cmd_verilog)

    p = subparsers.add_parser(
        "synth", help="FPGA resource estimate with Yosys (and ECP5 Fmax with --pnr)")
    p.add_argument("--config", default=None,
                   help="shipped config name or YAML path (default: the packaged default)")
    p.add_argument("--target", required=True, choices=sorted(SYNTH_TARGETS), help="FPGA family")
    p.add_argument("--pnr", action="store_true",
                   help="also place and route on ECP5 with nextpnr and report the Fmax")
    p.add_argument("--device", default="45k", choices=sorted(ECP5_DEVICES),
                   help="ECP5 device for --pnr (LFE5U-25F/45F/85F; default 45k)")
    p.add_argument("--seed", type=int, default=1,
                   help="nextpnr placement seed for --pnr (default 1)")
    p.add_argument("--default-placer", action="store_true",
                   help="place with nextpnr's default placer weights (default: weighted "
                        "toward timing, see hw.synth.TIMING_PLACER)")
    p.add_argument("--pnr-timeout", type=float, default=None, metavar="SECONDS",
                   help="stop nextpnr after this many seconds (default two hours; 0: no "
                        "limit): its router never gives up on a placement it cannot route")
    p.add_argument("--late", type=int, default=10, metavar="N",
                   help="with --pnr, list the N registers with the latest inputs (default 10, "
                        "at most 100)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true",
                   help="no progress line on stderr while the tools run")
    p.add_argument("--no-cache", action="store_true", help="ignore cached results")
    p.add_argument("--workdir", default=None, help="keep the tools' files in this folder")
    p.add_argument("--axi", action="store_true",
                   help="the AXI-wrapped design of `accel verilog --axi` (top accel_axi)")
    p.set_defaults(func=cmd_synth)


def _load(spec: str | None) -> Any:
    from accel.machine.config import load_config

    return load_config(spec)


def cmd_verilog(args: argparse.Namespace) -> int:
    """``accel verilog``: write the Verilog of the config's accelerator."""
    from accel.machine.config import ConfigError

    try:
        cfg = _load(args.config)
    except ConfigError as exc:
        return _fail(str(exc))
    from hw.export import axi_verilog_text, verilog_text
    from hw.primitives import family_for, sim_model

    family = family_for(args.target)
    try:
        text = axi_verilog_text(cfg, family) if args.axi else verilog_text(cfg, family=family)
    except ValueError as exc:
        return _fail(f"{cfg.source}: {exc}")
    if args.sim_models and family is not None:
        text += "\n" + sim_model(family)
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        return _fail(f"{args.output}: cannot write: {exc.strerror}")
    built = f" ({family} primitives)" if family else ""
    if args.axi:
        built += ", AXI-wrapped (top accel_axi)"
    print(f"{args.output}: {len(text.splitlines())} lines of Verilog for {cfg.name}{built}")
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    """``accel synth``: resources (and Fmax) of the config's accelerator."""
    from accel.machine.config import ConfigError
    from hw.synth import PNR_TIMEOUT_S, SynthError, synthesize

    if args.pnr and args.target != "ecp5":
        return _fail(f"--pnr is supported for ecp5 only, not {args.target}")
    timeout = PNR_TIMEOUT_S if args.pnr_timeout is None else args.pnr_timeout
    if not (math.isfinite(timeout) and timeout >= 0):
        return _fail(f"--pnr-timeout must be a number of seconds, 0 for no limit, not "
                     f"{args.pnr_timeout}")
    try:
        cfg = _load(args.config)
    except ConfigError as exc:
        return _fail(str(exc))
    try:
        if not (args.json or args.quiet):
            what = "synthesising" + (" and placing" if args.pnr else "")
            what += " the AXI-wrapped" if args.axi else ""
            print(f"{what} {cfg.name} for {args.target} (minutes)...", file=sys.stderr)
        report = synthesize(cfg, args.target, pnr=args.pnr, use_cache=not args.no_cache,
                            workdir=Path(args.workdir) if args.workdir else None,
                            device=args.device, seed=args.seed,
                            timing_placer=not args.default_placer,
                            pnr_timeout=timeout or None, axi=args.axi)
    except SynthError as exc:
        if exc.report is not None:  # the resources were measured before place and route failed
            _print_resources(exc.report, args.json)
        return _fail(str(exc))
    except ValueError as exc:
        return _fail(f"{cfg.source}: {exc}")
    _print_resources(report, args.json)
    if not args.json and report.fmax_mhz is not None:
        placer = "timing-weighted placer" if report.timing_placer else "default placer"
        # A report cached before the flow put the clock on a pin has no clock_pin.
        pin = report.clock_pin or "a pin of nextpnr's choosing"
        print(f"Fmax     {report.fmax_mhz:.1f} MHz (ECP5 LFE5U-{report.device.upper()}, "
              f"post-route, seed {report.seed}, {placer}, clock on {pin})")
        _print_timing(report, cfg.clock_mhz, args.late)
    return 0


def _print_resources(report: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        return
    print(f"config   {report.config}{' (AXI-wrapped, top accel_axi)' if report.axi else ''}")
    print(f"target   {report.target}")
    print(f"LUTs     {report.luts}")
    print(f"FFs      {report.ffs}")
    print(f"DSPs     {report.dsps}")
    print(f"BRAMs    {report.brams}")
    print(f"LUTRAM   {report.lutrams}")


def _print_timing(report: Any, clock_mhz: float, limit: int) -> None:
    """The worst path and the registers whose inputs arrive after the clock period."""
    path = report.critical_path
    if path:
        print(f"worst    {path['ns']:.2f} ns from {path['from']} to {path['to']} "
              f"({path['routing_ns']:.2f} ns routing, {path['cells']} logic cells)")
    if report.late is None:
        return
    period = 1000.0 / clock_mhz
    print(f"late     {report.late} endpoints arrive later than {period:.2f} ns "
          f"({clock_mhz:g} MHz)")
    for group in report.late_groups[:limit]:
        print(f"  {group['worst_ns']:6.2f} ns  {group['endpoints']:5d}  {group['register']}")
