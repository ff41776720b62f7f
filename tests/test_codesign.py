"""The co-design search (``accel.dse.codesign``, ``accel codesign``): a small space's search
equals its exhaustive answer, a budget nothing fits is one line and exit 2, and the written
configs load and run bit-exact; the predicted cycles hold to the timing simulator's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accel.cli import main
from accel.dse import codesign
from accel.dse.area_model import SPACE as AREA_SPACE
from accel.machine.config import load_config
from accel.machine.fpga import load_device, parse_device

SMALL = {"core.block_in": (4, 8), "core.block_out": (4, 8), "buffers.acc": (16384, 32768),
         "buffers.wgt": (32768, 65536), "dram.max_outstanding": (2, 8),
         "store.postproc": (False, True)}
"""64 points: square and oblong cores, buffers, requests in flight, the store option."""

NET = {"image_size": 32}
"""ResNet-18 at 32 x 32: every layer kind of the 224 network, priced in a fraction of it."""


@pytest.fixture(scope="module")
def grid_45f() -> codesign.SearchResult:
    return codesign.grid(codesign.Evaluator("resnet18", load_device("ecp5-45f"),
                                            graph_options=NET), SMALL)


def test_the_space_is_inside_the_area_models_sample() -> None:
    for k, values in codesign.SPACE.items():
        assert set(values) <= set(AREA_SPACE[k]), k
    assert "core.batch" not in codesign.SPACE


def test_search_of_a_small_space_finds_the_exhaustive_answer(
        grid_45f: codesign.SearchResult) -> None:
    ev = codesign.Evaluator("resnet18", load_device("ecp5-45f"), graph_options=NET)
    found = codesign.search(ev, SMALL, starts=2, seed=1)
    assert found.best.point == grid_45f.best.point
    assert found.best.cycles == grid_45f.best.cycles
    assert found.evaluations < grid_45f.evaluations


def test_grid_prices_every_point_and_ranks_them(grid_45f: codesign.SearchResult) -> None:
    assert grid_45f.area_checks == 64
    ranked = grid_45f.ranked
    assert [m.key() for m in ranked] == sorted(m.key() for m in ranked)
    for m in ranked:  # what qualifies fits the part and runs what the base runs
        assert all(used <= have for used, have in m.use.values()), m.point
        assert m.config.block_in == m.config.block_out  # the adds need a square core
        assert m.config.clock_mhz == 100.0


def test_rejections_say_why(grid_45f: codesign.SearchResult) -> None:
    ev = codesign.Evaluator("resnet18", load_device("ecp5-45f"), graph_options=NET)
    oblong = ev((("core.block_in", 4), ("core.block_out", 8)))
    assert not oblong.ok and "would run on the CPU" in oblong.reason
    wide = (("core.block_in", 16), ("core.block_out", 16))
    blocks_only = codesign.Evaluator("resnet18", load_device("ecp5-45f"), graph_options=NET,
                                     lut_multipliers=False)(wide)
    assert not blocks_only.ok and blocks_only.reason.startswith("over budget: ")
    assert "dsps 272 > 72" in blocks_only.reason and blocks_only.over > 0
    assert blocks_only.config.gemm.lut_macs == 0
    luts = ev(wide)  # 200 of the 256 MACs in LUTs: the blocks suffice, the LUTs do not
    assert luts.config.gemm.lut_macs == 256 + 16 - 72 and luts.use["dsps"] == (72, 72)
    assert not luts.ok and "luts" in luts.reason and "dsps" not in luts.reason


def test_predicted_cycles_hold_to_the_timing_simulator() -> None:
    """The evaluator's network cycles (the layers' models at the compiler's knobs) against the
    timing simulator's on the same machines: within 5% (3.1% on default, 224 x 224: 0.08%)."""
    from runtime.network import compile_network, sample_inputs

    for name in ("default", "tiny"):
        cfg = load_config(name)
        ev = codesign.Evaluator("resnet18", load_device("ecp5-85f"), base=cfg,
                                graph_options=NET)
        predicted = ev(()).cycles
        exe = compile_network("resnet18", ev.base, **NET)
        _, report = exe.run(sample_inputs(exe.graph)[0], backend="sim")
        assert abs(predicted / report.accel_cycles - 1) < 0.05, name


def test_predicted_energy_holds_to_the_timing_simulator() -> None:
    """The evaluator's energy per inference (compiled programs' actions, priced over the
    predicted cycles) against ``accel run``'s (the simulator's actions and activity): its
    actions are the simulator's exactly, and the energy within 2% (measured: 0.3% and 1.0%
    low on default and tiny, the module activity it leaves out, at 64 x 64)."""
    from accel.machine.actions import ActionCounts
    from runtime.network import compile_network, sample_inputs

    for name in ("default", "tiny"):
        ev = codesign.Evaluator("resnet18", load_device("ecp5-85f"), base=load_config(name),
                                graph_options=NET, objective="energy")
        machine = ev(())
        exe = compile_network("resnet18", ev.base, **NET)
        x = sample_inputs(exe.graph)[0]
        _, report = exe.run(x, backend="sim")
        for layer, _, stats in report.traces:
            if stats is not None:
                assert ActionCounts.of_program(exe.compiled[layer].program.insns,
                                               ev.base) == stats.actions, layer
        measured = report.totals()["energy_uj_per_inference"]
        assert machine.score == machine.energy_uj
        assert -0.02 < machine.energy_uj / measured - 1 < 0, (name, machine.energy_uj,
                                                              measured)


@pytest.mark.parametrize("objective", ["energy", "edp"])
def test_energy_objectives_find_the_exhaustive_answer(objective: str) -> None:
    space = {"core.block_in": (4, 8), "core.block_out": (4, 8), "buffers.inp": (8192, 32768),
             "buffers.wgt": (32768, 65536)}
    device = load_device("ecp5-45f")
    exhaustive = codesign.grid(codesign.Evaluator("resnet18", device, graph_options=NET,
                                                  objective=objective), space)
    found = codesign.search(codesign.Evaluator("resnet18", device, graph_options=NET,
                                               objective=objective), space)
    best = exhaustive.best
    assert found.best.point == best.point and found.best.score == best.score
    for m in exhaustive.ranked:
        assert m.energy_uj is not None and m.energy_uj > 0
        want = m.energy_uj if objective == "energy" else m.energy_uj * m.latency_ms
        assert m.score == pytest.approx(want)
    assert [m.score for m in exhaustive.ranked] == sorted(m.score for m in exhaustive.ranked)


def test_codesign_prints_energy_and_verifies_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["codesign", "resnet18", "--device", "ecp5-25f", "--image-size", "16",
                 "--objective", "energy", "--top", "1", "--quiet", "--verify", "--json"]) == 0
    import json

    report = json.loads(capsys.readouterr().out)
    assert report["objective"] == "energy"
    best = report["machines"][0]
    assert best["energy_uj"] > 0 and best["edp_uj_ms"] == pytest.approx(
        best["energy_uj"] * best["latency_ms"], rel=1e-3)
    v = report["verify"]
    assert v["bit_exact"] and -0.02 < v["energy_error"] < 0


def test_a_budget_nothing_fits_is_one_line_exit_2(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = load_device("ecp5-45f").to_dict()
    data["dsp"]["count"] = 4
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data))
    parse_device(yaml.safe_load(path.read_text()))  # a valid part, just a small one
    out = tmp_path / "out"
    assert main(["codesign", "resnet18", "--device", str(path), "--image-size", "32",
                 "--starts", "1", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("accel: error: no machine of the space fits")
    assert "over budget" in err[0]
    assert not out.exists()  # nothing written


def test_a_part_without_an_area_model_is_one_line_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["codesign", "resnet18", "--device", "zynq-7020", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no area model for the xilinx family" in err[0]


def test_bad_options_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from accel.cli_codesign import OBJECTIVES

    assert codesign.OBJECTIVES == OBJECTIVES
    assert main(["codesign", "resnet18", "--device", "ecp5-45f", "--top", "0"]) == 2
    assert main(["codesign", "resnet18", "--device", "ecp5-45f", "--pnr"]) == 2
    assert main(["codesign", "resnet18", "--device", "no-such-part"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("accel: error: ") for e in err)
    with pytest.raises(codesign.CodesignError, match="outside the area model"):
        codesign.check_space({"buffers.acc": (12345,)})


def test_written_configs_load_and_run_bit_exact(tmp_path: Path) -> None:
    """On the ECP5-25F the default does not fit: the search must find smaller machines, and
    each written config is a machine that runs the network."""
    from runtime.network import compile_network, sample_inputs

    out = tmp_path / "cd"
    assert main(["codesign", "resnet18", "--device", "ecp5-25f", "--image-size", "16",
                 "--starts", "1", "--top", "2", "--quiet", "--out", str(out)]) == 0
    report = yaml.safe_load((out / "codesign.json").read_text())
    # With 44 of its MACs in LUTs the default's multipliers fit, its LUTs and BRAMs do not.
    assert not report["base_fits"] and "brams 95 > 56" in report["base_reason"]
    assert "dsps" not in report["base_reason"]
    assert (out / "pareto.png").stat().st_size > 0
    for rank, machine in enumerate(report["machines"], 1):
        cfg = load_config(out / f"rank{rank}.yaml")
        assert cfg.name == machine["config"]
        assert cfg.peak_macs_per_cycle - cfg.gemm.lut_macs + cfg.batch * cfg.block_out <= 28
        exe = compile_network("resnet18", cfg, **NET)
        _, run = exe.run(sample_inputs(exe.graph)[0], backend="sim", check=True)
        assert run.check is True


def test_the_partition_does_not_read_the_dram_fields() -> None:
    """What lets the evaluator reuse a partition's layer names across DRAM settings."""
    ev = codesign.Evaluator("resnet18", load_device("ecp5-45f"), graph_options=NET)
    for change in ({"dram.bytes_per_cycle": 4}, {"dram.max_outstanding": 1},
                   {"dram.latency": 7, "dram.merge_rows": True}):
        assert set(ev._layers(ev.base.replace(**change))) == set(ev._layers(ev.base)), change
