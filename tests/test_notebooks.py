"""Every notebook in notebooks/ runs top to bottom in a fresh kernel (nbclient), as a user
would run it after installing the project; outputs go to a temporary folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# Synthesis and sweeps take minutes on two cores: those notebooks run with the slow tests
# (05 synthesises three tiny machines with Yosys: 2.5 to 4.7 minutes on two cores shared with
# other work, nine tenths of it synthesis;
# 06 runs the 264-point ResNet-18 sweep: about 45 s on two idle cores, and builds a Verilator
# model when Verilator is installed; 07 searches twice, simulates ResNet-18 and synthesises the
# best machine with Yosys).
# 05 is opt-in (`-m benchmark`): its figures are Yosys's, which the synthesis tests check.
SLOW = {"03_design_space.ipynb", "04_rtl.ipynb", "06_energy.ipynb", "07_codesign_search.ipynb"}
OPT_IN = {"05_codesign.ipynb"}


def _params() -> list[pytest.param]:
    return [pytest.param(path, id=path.stem,
                         marks=[pytest.mark.slow] if path.name in SLOW else
                         [pytest.mark.benchmark] if path.name in OPT_IN else [])
            for path in sorted(NOTEBOOKS.glob("*.ipynb"))]


def test_the_tours_exist() -> None:
    names = sorted(path.name for path in NOTEBOOKS.glob("*.ipynb"))
    assert [name[:3] for name in names] == ["01_", "02_", "03_", "04_", "05_", "06_",
                                            "07_"], names


@pytest.mark.parametrize("path", _params())
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        f"{path.name} is committed with outputs; clear them"
    shutil.copy(path, tmp_path / path.name)
    client = nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    images = [out for cell in notebook.cells if cell.cell_type == "code"
              for out in cell.outputs if "image/png" in out.get("data", {})]
    assert images, f"{path.name} displayed no figure"
    errors = [out for cell in notebook.cells if cell.cell_type == "code"
              for out in cell.outputs if out.get("output_type") == "error"]
    assert not errors
