"""docs/reference.md cannot drift from the code: its field tables list exactly the fields the
files have, and its examples run."""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from accel.cli import main

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference.md"


def _sections() -> dict[str, str]:
    """The reference's text by heading (``### report.json: totals`` -> its body)."""
    text = REFERENCE.read_text(encoding="utf-8")
    parts = re.split(r"^(#{2,3} .+)$", text, flags=re.MULTILINE)
    return {head.lstrip("# ").strip(): body for head, body in zip(parts[1::2], parts[2::2],
                                                                  strict=True)}


def documented(heading: str) -> list[str]:
    """The names in the first column of the field table under ``heading``, in order."""
    body = _sections()[heading]
    names = re.findall(r"^\| `([^`]+)` \|", body, flags=re.MULTILINE)
    assert names, f"no field table under {heading!r}"
    return names


def example(name: str) -> str:
    """The fenced block after ``<!-- example: NAME -->``."""
    text = REFERENCE.read_text(encoding="utf-8")
    m = re.search(rf"<!-- example: {re.escape(name)} -->\n```\w*\n(.*?)^```", text,
                  flags=re.MULTILINE | re.DOTALL)
    assert m, f"no example {name!r} in {REFERENCE}"
    return m.group(1)


def test_readme_links_the_reference() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/reference.md" in readme
    # The README still opens with its two commands, unchanged: they are its first commands.
    commands = [line for line in readme.splitlines() if line.startswith("    ")]
    assert commands[:2] == [
        "    python3 -m venv .venv && . .venv/bin/activate && pip install . && accel run "
        "resnet18",
        "    python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' && "
        "python -m pytest -n auto --dist worksteal"]
    # CI runs README's test command as it stands.
    assert commands[1].strip() in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ``accel run --out`` folder (ResNet-18 at 16 px on sim)."""
    out = tmp_path_factory.mktemp("run") / "out"
    assert main(["run", "resnet18", "--image-size", "16", "--out", str(out), "--quiet"]) == 0
    return out


def test_report_json_fields_are_documented(run_folder: Path) -> None:
    report = json.loads((run_folder / "report.json").read_text())
    assert documented("report.json: top level") == list(report)
    assert documented("report.json: totals") == list(report["totals"])
    assert documented("report.json: memory_plan") == list(report["memory_plan"])
    assert documented("report.json: layers") == list(report["layers"][0])


def test_layers_csv_columns_are_documented(run_folder: Path) -> None:
    header = (run_folder / "layers.csv").read_text().splitlines()[0]
    assert documented("layers.csv") == header.split(",")


def test_results_csv_columns_are_documented() -> None:
    from accel.dse.results import METRIC_COLUMNS, MODULES, columns

    names: list[str] = []
    for name in documented("results.csv (`accel sweep SPEC --out DIR`)"):
        if "<module>" in name:
            names += [name.replace("<module>", m) for m in MODULES]
        else:
            names.append(name.replace("axis.<key>", "axis.buffers.wgt"))
    real = columns(["buffers.wgt"], list(METRIC_COLUMNS))
    assert sorted(names) == sorted(real)


def test_hand_written_assembly_and_builder_examples_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The ProgramBuilder example checks its own result; the .s file assembles to the same
    bytes, and runs as the page says."""
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(_write(tmp_path / "builder.py", example("builder.py"))))
    assert capsys.readouterr().out == "85 cycles: [-27  36 -65  -4]\n"
    built = (tmp_path / "gemm.bin").read_bytes()
    source = _write(tmp_path / "gemm.s", example("gemm.s"))
    assert main(["asm", str(source), "-o", "hand.bin"]) == 0
    assert "10 instructions, 1 micro-ops for 1x4x4_" in capsys.readouterr().out
    assert (tmp_path / "hand.bin").read_bytes() == built
    assert main(["exec", "hand.bin", "--check"]) == 0
    out = capsys.readouterr().out
    assert "85 cycles" in out and "check: DRAM identical to fsim's" in out


def test_stall_breakdown_script_runs(run_folder: Path) -> None:
    script = _write(run_folder.parent / "breakdown.py", example("breakdown.py"))
    done = subprocess.run([sys.executable, str(script), str(run_folder)], text=True,
                          capture_output=True, check=True)
    lines = done.stdout.splitlines()
    report: dict[str, Any] = json.loads((run_folder / "report.json").read_text())
    assert re.fullmatch(rf"{report['config']}: [\d,]+ cycles = [\d.]+ ms", lines[0])
    assert [line.split()[0] for line in lines[1:]] == ["load", "compute", "store"]
    assert all(re.match(r"  \w+ +busy +\d+%   waits: ", line) for line in lines[1:])


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
