"""`accel run` end to end: zoo and ONNX models, report files, checks, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accel
from accel.cli import main

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from test_graph_frontends import small_cnn  # noqa: E402  (after the importorskips)


def test_run_resnet18_small_image_on_fsim_is_bit_exact(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["run", "resnet18", "--image-size", "32", "--backend", "fsim"]) == 0
    out = capsys.readouterr().out
    assert ("accelerator: functional only (fsim, 1x8x8_i8w8a32_u8k_i32k_w64k_a32k_o8_rr_pp_ra)"
            in out)
    assert "energy:" not in out            # energy needs cycles (leakage, the modules' clocks)
    assert "MACs offloaded: 100.00%" in out
    assert "and the final output are bit-exact with the numpy reference network" in out


SMALL = 16
"""The image size of the report-file test: ResNet-18 on tiny, every file and unit checked."""


def test_run_writes_report_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    assert main(["run", "resnet18", "--image-size", str(SMALL), "--config", "tiny",
                 "--out", str(out_dir)]) == 0
    text = capsys.readouterr().out
    report = json.loads((out_dir / "report.json").read_text())
    assert report["backend"] == "sim" and report["check"] is True
    cycles = report["totals"]["accel_cycles"]
    assert cycles == sum(layer["cycles"] or 0 for layer in report["layers"]) > 0
    assert f"accelerator: {cycles} cycles" in text
    # The roofline, per layer and in the totals: the sum of the bounds over the sum of cycles.
    assert {"bound", "roof"} <= set(text.splitlines()[0].split())
    totals = report["totals"]
    bounds = [layer["bound_cycles"] for layer in report["layers"] if layer["target"] == "accel"]
    assert totals["bound_cycles"] == pytest.approx(sum(bounds))
    assert totals["roofline_efficiency"] == pytest.approx(totals["bound_cycles"] / cycles)
    assert 0 < totals["roofline_efficiency"] <= 1
    assert (f"roofline: bound {totals['bound_cycles']:.0f} cycles, efficiency "
            f"{totals['roofline_efficiency']:.3f}") in text
    rows = (out_dir / "layers.csv").read_text().splitlines()
    assert len(rows) == 1 + len(report["layers"])
    check_layer_units(out_dir, report, text)
    # Energy: per layer and component, totals over the accelerated layers, the printed line.
    t = report["totals"]
    accel_layers = [layer for layer in report["layers"] if layer["target"] == "accel"]
    assert t["energy_uj"] == pytest.approx(sum(layer["energy_uj"] for layer in accel_layers))
    assert t["energy_uj"] == pytest.approx(sum(t["energy_components_uj"].values()))
    assert t["energy_uj_per_inference"] == t["energy_uj"]           # batch 1
    macs = sum(layer["macs"] for layer in accel_layers)
    assert t["pj_per_mac"] == pytest.approx(t["energy_uj"] * 1e6 / macs)
    assert t["tops_per_w"] == pytest.approx(2 * macs / (t["energy_uj"] * 1e-6) / 1e12)
    assert t["power_mw"] == pytest.approx(t["energy_uj"] / (cycles / 100.0) * 1e3)
    for layer in accel_layers:
        assert layer["energy_uj"] == pytest.approx(sum(layer["energy"].values()))
    assert all(layer["energy_uj"] is None for layer in report["layers"]
               if layer["target"] != "accel")
    assert (f"energy: {t['energy_uj_per_inference']:.2f} uJ per inference, "
            f"{t['pj_per_mac']:.2f} pJ/MAC, {t['tops_per_w']:.3f} TOPS/W") in text
    header = rows[0].split(",")
    assert header[-12:] == ["energy_uj", "pj_per_mac", "energy_mac_uj", "energy_alu_uj",
                            "energy_uop_uj", "energy_inp_uj", "energy_wgt_uj", "energy_acc_uj",
                            "energy_out_uj", "energy_dram_uj", "energy_control_uj",
                            "energy_leakage_uj"]
    assert (out_dir / "utilization.png").read_bytes()[:4] == b"\x89PNG"
    trace = json.loads((out_dir / "trace.json").read_text())["traceEvents"]
    assert {e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"} \
        >= {"fetch", "load", "compute", "store", "layers", "cpu fallback"}


def check_layer_units(out_dir: Path, report: dict[str, Any], table: str) -> None:
    """layers.csv: simulated time at the clock and host wall time in named columns (wall_ms
    was 0.0 for every accelerator layer), no utilisation for layers without MACs (it read
    0.00), DRAM in KiB by name and by value; the same values as report.json."""
    import csv

    from accel.machine.energy import COMPONENTS

    with (out_dir / "layers.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["name", "op", "target", "input_shapes", "output_shape", "macs",
                             "cycles", "sim_ms", "host_ms", "gemm_utilization", "bound_cycles",
                             "roofline_efficiency", "dram_kib", "dram_bytes_per_cycle",
                             "dram_bandwidth_share", "largest_stall", "check", "energy_uj",
                             "pj_per_mac", *(f"energy_{c}_uj" for c in COMPONENTS)]
    layers = {layer["name"]: layer for layer in report["layers"]}
    for row in rows:
        layer = layers[row["name"]]
        assert float(row["host_ms"]) > 0 and row["host_ms"] == str(layer["host_ms"])
        if row["target"] == "accel":
            assert float(row["sim_ms"]) == layer["sim_ms"] == pytest.approx(
                int(row["cycles"]) / (report["clock_mhz"] * 1000.0))
        else:
            assert row["sim_ms"] == row["cycles"] == row["dram_kib"] == ""
            assert layer["sim_ms"] is None
        no_util = row["macs"] == "0" or row["target"] != "accel"
        assert (row["gemm_utilization"] == "") == no_util
        assert (layer["gemm_utilization"] is None) == no_util
    # ResNet-18's residual adds run fused into their convs (conv2d_add, compiler.graph.passes
    # .residual): every accelerator layer has MACs; the pooling layers have none.
    assert any(r["op"] == "conv2d_add" and r["target"] == "accel" for r in rows)
    conv = next(r for r in rows if r["op"] == "conv2d" and r["target"] == "accel")
    op = accel.compile("resnet18", "tiny", image_size=SMALL).compiled[conv["name"]]
    stats = accel.run_program(op.program, op.dram(), backend="sim").stats
    assert float(conv["dram_kib"]) == (sum(stats.dram_loaded.values()) + stats.dram_stored) / 1024
    head = table.splitlines()[0].split()
    assert head[:6] == ["layer", "op", "shape", "(out)", "target", "cycles"]
    assert " sim ms " in table.splitlines()[0] and " host ms " in table.splitlines()[0]
    assert " DRAM KiB " in table.splitlines()[0]
    fused = next(line for line in table.splitlines() if line.startswith("layer1.0.conv2 "))
    # cycles, the roofline bound and efficiency, then the two times, then utilisation
    assert fused.split()[1] == "conv2d_add"
    assert fused.split()[7:9] == [f"{layers['layer1.0.conv2']['sim_ms']:.3f}",
                                  f"{layers['layer1.0.conv2']['host_ms']:.3f}"]
    pool = next(line for line in table.splitlines() if line.startswith("maxpool "))
    assert pool.split()[7:10] == ["-", f"{layers['maxpool']['host_ms']:.3f}", "-"]


@pytest.mark.slow
def test_resnet18_224_on_fsim_is_bit_exact() -> None:
    exe = accel.compile("resnet18")
    x = np.random.default_rng(0).integers(-128, 128, (1, 3, 224, 224), dtype=np.int8)
    outputs, report = exe.run(x, backend="fsim", check=True)
    assert report.check is True
    ref = exe.reference(x)
    np.testing.assert_array_equal(outputs["fc"] if "fc" in outputs else
                                  next(iter(outputs.values())), next(iter(ref.values())))


def test_onnx_model_through_accel_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    """A float CNN: onnxruntime (float) against the accelerator path (int8 with power-of-two
    scales). Agreement is judged by cosine similarity: quantising activations and weights to
    8 bits with power-of-two scales leaves a few percent of relative error (the graph tests
    measure 4% mean), which keeps cosine similarity above 0.99 on every sample."""
    model = small_cnn(seed=1)
    path = tmp_path / "cnn.onnx"
    onnx.save(model, str(path))
    assert main(["run", str(path), "--config", "tiny"]) == 0
    assert "MACs offloaded: 100.00%" in capsys.readouterr().out
    rng = np.random.default_rng(7)
    calibration = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
                   for _ in range(16)]
    exe = accel.compile(str(path), "tiny", calibration=calibration)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for _ in range(8):
        x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
        outputs, _ = exe.run(x, backend="sim")
        (got,) = outputs.values()
        want = session.run(None, {"x": x})[0]
        assert got.dtype == np.float32 and got.shape == want.shape
        cosine = float(np.dot(got.ravel(), want.ravel())
                       / (np.linalg.norm(got) * np.linalg.norm(want)))
        assert cosine > 0.99, cosine


def test_bad_models_give_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    assert main(["run", "resnet19"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("accel: error: ") and "resnet19" in err and err.count("\n") == 1
    corrupt = tmp_path / "broken.onnx"
    corrupt.write_bytes(b"\x08\x07garbage")
    assert main(["run", str(corrupt)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"accel: error: {corrupt}: not a valid ONNX model") and \
        err.count("\n") == 1
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu_1"),
             helper.make_node("Softsign", ["r"], ["y"], name="odd_7")]
    graph = helper.make_graph(nodes, "net",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    odd = tmp_path / "odd.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(odd))
    assert main(["run", str(odd)]) == 2
    err = capsys.readouterr().err
    assert "node 'odd_7' uses unsupported operator 'Softsign'" in err


def test_layers_that_fit_no_tile_run_on_the_fallback(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A weight buffer of 32 tiles cannot hold the 7x7 stem's 49 weight tiles: that layer runs
    on the CPU, the run says so, and the result is still exact."""
    cfg = tmp_path / "small_wgt.yaml"
    cfg.write_text("core: {batch: 1, block_in: 8, block_out: 8}\nbuffers: {wgt: 2048}\n")
    assert main(["run", "resnet18", "--image-size", "32", "--config", str(cfg),
                 "--backend", "fsim"]) == 0
    out = capsys.readouterr().out
    assert "note: 1 layer(s) do not fit the buffers of" in out and ": conv1" in out
    assert "bit-exact with the numpy reference network" in out
    from compiler.errors import LoweringError

    with pytest.raises(LoweringError, match="no tiling fits the buffers of"):
        rng = np.random.default_rng(0)
        accel.conv2d(rng.integers(-128, 128, (1, 3, 32, 32), dtype=np.int8),
                     rng.integers(-128, 128, (64, 3, 7, 7), dtype=np.int8), stride=2,
                     padding=3, config=accel.load_config(cfg), backend="fsim")
