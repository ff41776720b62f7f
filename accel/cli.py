"""The ``accel`` command line.

Every command has ``--help``. Exit status: 0 on success, 2 with a one-line ``accel: error: ...``
on bad input (a config, a program file, assembly text). Subsystems are imported inside the
command that needs them, so ``accel config show`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from accel.config import ConfigError, HwConfig, load_config, shipped_configs

__all__ = ["main"]

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


def _config(spec: str | None) -> HwConfig:
    return load_config(spec)


# ---------------------------------------------------------------------- config
def cmd_config_show(args: argparse.Namespace) -> int:
    cfg = _config(args.config)
    if args.json:
        print(json.dumps({"config": cfg.to_dict(), "derived": cfg.derived()}, indent=2))
        return 0
    print(f"# {cfg.name}  (from {cfg.source})")
    print(yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None).rstrip())
    print("# derived")
    print(yaml.safe_dump({"derived": cfg.derived()}, sort_keys=False,
                         default_flow_style=None).rstrip())
    return 0


def cmd_config_validate(args: argparse.Namespace) -> int:
    cfg = load_config(Path(args.path))
    print(f"{args.path}: ok ({cfg.name})")
    return 0


def cmd_config_list(args: argparse.Namespace) -> int:
    for name in shipped_configs():
        cfg = load_config(name)
        print(f"{name:<16} {cfg.name:<44} {cfg.description}")
    return 0


# ---------------------------------------------------------------------- programs
def cmd_asm(args: argparse.Namespace) -> int:
    from accel.program import assemble

    path = Path(args.source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: cannot read: {exc}") from None
    cfg = _config(args.config) if args.config else None
    program = assemble(text, config=cfg, source=str(path))
    program.validate()
    program.save(args.output)
    print(f"{args.output}: {len(program.insns)} instructions, {len(program.uops)} micro-ops "
          f"for {program.config.name}")
    return 0


def cmd_disasm(args: argparse.Namespace) -> int:
    from accel.program import Program, disassemble

    cfg = _config(args.config) if args.config else None
    program = Program.load(args.program, config=cfg)
    text = disassemble(program)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accel",
        description="Hardware/software co-design toolkit for VTA-style DL accelerators.",
    )
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
    p.set_defaults(func=cmd_config_list)

    p = sub.add_parser("asm", help="assemble a .s file into a binary program")
    p.add_argument("source", help="assembly text (the form accel disasm prints)")
    p.add_argument("-o", "--output", required=True, help="binary program file to write")
    p.add_argument("--config", help="config name or path (default: the .config directive)")
    p.set_defaults(func=cmd_asm)

    p = sub.add_parser("disasm", help="print a binary program as assembly text")
    p.add_argument("program", help="binary program file")
    p.add_argument("-o", "--output", help="write the text here instead of stdout")
    p.add_argument("--config", help="config the program must have been built for")
    p.set_defaults(func=cmd_disasm)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``accel`` console script; returns the exit status."""
    from accel.isa import DecodeError, EncodeError
    from accel.program import AsmError, ProgramError, ProgramFormatError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (CliError, ConfigError, AsmError, ProgramError, ProgramFormatError, EncodeError,
            DecodeError) as exc:
        print(f"accel: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
