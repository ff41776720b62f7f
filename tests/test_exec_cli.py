"""``accel exec`` (a program file on a backend) and ``accel run --vcd``: output, checks, DRAM
images, waveform windows, and one-line errors that lose nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_vcd_window import AMARANTH_TOP, VERILATOR_TOP, assert_window, needs_verilator, small

import accel
from accel.cli import main
from accel.machine.config import HwConfig
from accel.machine.dram import Dram


@pytest.fixture
def program_file(tiny: HwConfig, tmp_path: Path) -> Path:
    program, _ = small(tiny)
    path = tmp_path / "p.bin"
    program.save(path)
    return path


def test_exec_on_sim_checks_against_fsim(program_file: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["exec", str(program_file), "--check"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{program_file}: 10 instructions on sim, ")
    assert out[0].endswith(": 94 cycles = 0.001 ms at 100 MHz")
    assert out[-1] == "check: DRAM identical to fsim's"


def test_exec_on_amaranth_rtl_with_check_and_vcd(program_file: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    vcd = tmp_path / "w.vcd"
    assert main(["exec", str(program_file), "--backend", "rtl", "--engine", "amaranth",
                 "--check", "--vcd", str(vcd), "--vcd-window", "40:60"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "instructions on rtl (amaranth)" in out[0]
    assert out[-2] == "check: DRAM identical to fsim's; cycles equal to sim's (94)"
    assert re.fullmatch(re.escape(f"vcd: {vcd}: the whole design, cycles 40-59 of 94 (")
                        + r"\d+\.\d MB\)", out[-1])
    assert_window(vcd, AMARANTH_TOP, f"{AMARANTH_TOP}.clk", 40, 60)


def test_exec_runs_assembly_text_and_writes_a_trace(program_file: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from accel.machine.program import Program, disassemble

    source = tmp_path / "p.s"
    source.write_text(disassemble(Program.load(program_file)))
    trace = tmp_path / "t.json"
    assert main(["exec", str(source), "--trace", str(trace), "--json"]) == 0
    from_text = json.loads(capsys.readouterr().out)
    assert main(["exec", str(program_file), "--json"]) == 0
    from_binary = json.loads(capsys.readouterr().out)
    assert from_text["cycles"] == from_binary["cycles"] == 94
    assert from_text["stats"] == from_binary["stats"]
    data = json.loads(trace.read_text())
    assert data["otherData"]["cycles"] == 94
    names = {e["args"]["name"] for e in data["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"load", "compute", "store"} <= names
    source.write_text("LOAD nonsense\n")
    assert main(["exec", str(source)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"accel: error: {source}:1: ") and err.count("\n") == 1, err


def test_exec_dram_images_and_json(program_file: Path, tmp_path: Path, tiny: HwConfig,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    program, dram = small(tiny)
    image = tmp_path / "in.bin"
    accel.run_program(program, dram.copy(), backend="fsim")   # places the regions
    image.write_bytes(dram.data.tobytes())
    after = tmp_path / "out.bin"
    assert main(["exec", str(program_file), "--backend", "fsim", "--dram-in", str(image),
                 "--dram-out", str(after), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["backend"] == "fsim" and result["cycles"] is None
    assert result["instructions"] == 10 and result["config"] == tiny.name
    want = dram.copy()
    accel.run_program(program, want, backend="fsim")
    assert after.read_bytes() == want.data.tobytes()
    # random inputs: a seed gives the same image twice, another seed another one
    outs = []
    for seed in (1, 1, 2):
        assert main(["exec", str(program_file), "--backend", "fsim", "--seed", str(seed),
                     "--dram-out", str(after)]) == 0
        outs.append(after.read_bytes())
    assert outs[0] == outs[1] != outs[2]


def test_exec_bad_input_is_one_line(program_file: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 10)
    corrupt = tmp_path / "corrupt.bin"
    corrupt.write_bytes(program_file.read_bytes()[:-1] + b"\1")
    kept = tmp_path / "kept.bin"
    kept.write_bytes(b"kept")
    cases = [
        (["--vcd", str(tmp_path / "w.vcd")],
         "--vcd needs --backend rtl (the sim backend has no waveforms)"),
        (["--vcd-window", "0:5"], "--vcd-window needs --vcd FILE"),
        (["--engine", "amaranth"], "--engine and --cycle-limit need --backend rtl"),
        (["--backend", "rtl", "--cycle-limit", "0"], "--cycle-limit must be at least 1, not 0"),
        (["--dram-in", str(short)], f"{short}: the DRAM image has 10 bytes; the program's "
                                    "regions reach byte "),
        (["--dram-in", str(tmp_path / "none.bin")],
         f"{tmp_path}/none.bin: cannot read the DRAM image: No such file or directory"),
        (["--dram-out", str(tmp_path / "no" / "o.bin")],
         f"{tmp_path}/no/o.bin: cannot write --dram-out: no folder {tmp_path}/no"),
        (["--trace", str(tmp_path / "no" / "t.json")],
         f"{tmp_path}/no/t.json: cannot write --trace: no folder {tmp_path}/no"),
        (["--backend", "rtl", "--trace", str(tmp_path / "t.json")],
         "--trace needs --backend sim (the rtl backend records no trace)"),
        (["--config", "default"], f"{program_file}: "),
        (["--backend", "rtl", "--engine", "amaranth", "--cycle-limit", "20", "--dram-out",
          str(kept)], "the RTL did not finish within 20 cycles (deadlock?)"),
    ]
    for extra, message in cases:
        assert main(["exec", str(program_file), *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith(f"accel: error: {message}") and err.count("\n") == 1, err
    assert main(["exec", str(corrupt)]) == 2
    assert capsys.readouterr().err == \
        f"accel: error: {corrupt}: checksum mismatch: the file is corrupt or truncated\n"
    assert kept.read_bytes() == b"kept"


def test_run_vcd_arguments_fail_before_compiling(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (["--vcd", str(tmp_path / "w.vcd")],
         "--vcd needs --backend rtl (the sim backend has no waveforms)"),
        (["--backend", "rtl", "--vcd-layer", "conv1"], "--vcd-layer needs --vcd FILE"),
        (["--backend", "rtl", "--vcd", str(tmp_path / "w.vcd"), "--vcd-window", "9:3"],
         "VCD window: cycles 9:3 are empty (the last cycle is excluded)"),
    ]
    for extra, message in cases:
        assert main(["run", "resnet18", *extra]) == 2
        assert capsys.readouterr().err == f"accel: error: {message}\n"


@needs_verilator
@pytest.mark.slow
def test_run_dumps_one_layer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vcd = tmp_path / "layer.vcd"
    # At 16 px the network is 2.4M cycles on tiny, layer1.0.conv1 40,246 of them.
    assert main(["run", "resnet18", "--config", "tiny", "--image-size", "16", "--backend", "rtl",
                 "--vcd", str(vcd), "--vcd-layer", "layer1.0.conv1", "--vcd-window",
                 "1000:1200"]) == 0
    out = capsys.readouterr().out
    assert re.search(re.escape(f"vcd: {vcd}: layer layer1.0.conv1, cycles 1000-1199 of ")
                     + r"\d+ \(\d+\.\d MB\)", out)
    assert "bit-exact with the numpy reference network" in out
    assert_window(vcd, VERILATOR_TOP, "TOP.clk", 1000, 1200)
    # accel waveform's default signals are found in Verilator's dump too
    assert main(["waveform", str(vcd), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "layer_waveform.png").stat().st_size > 2000


def test_a_failed_rtl_run_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A Verilator build that fails ends its message with the build log: the command line
    shows the first line and says how to see the rest."""
    import hw.backend

    def failing_build(*args: object, **kwargs: object) -> None:
        raise RuntimeError("verilator build failed:\n%Error: design.v:1: x\nmake: *** [all]")

    monkeypatch.setattr(hw.backend, "run_rtl", failing_build)
    assert main(["run", "resnet18", "--config", "tiny", "--image-size", "32", "--backend",
                 "rtl", "--quiet"]) == 2  # quiet: no progress lines before the error
    assert capsys.readouterr().err == (
        "accel: error: verilator build failed (ACCEL_DEBUG=1 shows the 2 lines of log that "
        "follow)\n")


def test_exec_check_reports_a_difference(program_file: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A backend whose DRAM or cycles differ from the references: exit status 1, and the
    check line says where."""
    import runtime.backends

    real = runtime.backends.run_program
    program = accel.machine.program.Program.load(program_file)
    out = program.regions["out"]

    def off_by_one(program: object, dram: Dram, backend: str = "fsim", **kw: object) -> object:
        result = real(program, dram, backend=backend, **kw)
        if backend == "sim":
            dram.data[out.offset + 3] ^= 1
            result.cycles += 1
        return result

    monkeypatch.setattr(runtime.backends, "run_program", off_by_one)
    assert main(["exec", str(program_file), "--check"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "check: FAILED: DRAM differs from fsim's (1 bytes differ, the first at byte "
        f"{out.offset + 3} (region 'out'))")
    assert main(["exec", str(program_file), "--backend", "rtl", "--engine", "amaranth",
                 "--check"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == \
        "check: FAILED: DRAM identical to fsim's; cycles differ from sim's (95)"
