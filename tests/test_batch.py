"""Batch N: a network run on N images gives each image what a batch-1 run gives it, and the
report counts cycles per inference."""

from __future__ import annotations

import numpy as np
import pytest

import accel
from accel.cli import main


@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2"])
def test_batch_equals_batch_one_runs(model: str) -> None:
    """The zoo's weights do not depend on the batch (seeded draws, calibrated on one image),
    so the batch-3 network's output for each image equals the batch-1 network's."""
    batched = accel.load_model(model, batch=3, image_size=32)
    x, _ = accel.sample_inputs(batched, 1)
    exe = accel.compile(batched, "default")
    out, report = exe.run(x, backend="sim", check=True)
    assert report.check is True and report.batch == 3
    single = accel.compile(accel.load_model(model, batch=1, image_size=32), "default")
    for i in range(3):
        one, _ = single.run(x[i:i + 1], backend="sim", check=True)
        np.testing.assert_array_equal(out["fc"][i:i + 1], one["fc"])
    totals = report.totals()
    assert totals["accel_cycles_per_inference"] == totals["accel_cycles"] / 3


def test_run_prints_cycles_per_inference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "resnet18", "--image-size", "32", "--batch", "2", "--no-check"]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines()
                if s.startswith("accelerator: "))
    cycles = int(line.split()[1])
    assert line.endswith(f"; {cycles / 2:.0f} cycles per inference (batch 2)")
