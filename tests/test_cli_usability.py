"""What a new user meets on the command line (issue 39): one-line errors that lose nothing,
Ctrl-C, progress on stderr, and options that mean one thing everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel.cli import main
from accel.machine.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single line on stderr, without ``accel: error: `` (fails on anything else)."""
    err = capsys.readouterr().err
    assert err.startswith("accel: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err[len("accel: error: "):-1]


@pytest.fixture
def program_file(tmp_path: Path) -> Path:
    from accel.testing.synthetic import gemm_tile

    program, _ = gemm_tile(load_config("tiny"), 1, inner=4, pixels=2, in_blocks=1)
    path = tmp_path / "p.bin"
    program.save(path)
    return path


# ---------------------------------------------------------------------- output paths
def test_run_out_that_is_a_file_fails_before_running(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before compiling: the only output is the error line (no progress, no table),
    and the file is left as it was."""
    clash = tmp_path / "p.bin"
    clash.write_bytes(b"keep me")
    assert main(["run", "resnet18", "--image-size", "32", "--out", str(clash)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"accel: error: {clash}: cannot write --out: it is a file, not a " \
                           "folder\n"
    assert captured.out == ""
    assert clash.read_bytes() == b"keep me"
    assert main(["run", "resnet18", "--image-size", "32", "--out", str(clash / "sub")]) == 2
    assert one_line(capsys) == f"{clash / 'sub'}: cannot write --out: {clash} is a file, not " \
                               "a folder"


def test_plot_asm_disasm_output_paths_are_one_line(program_file: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    clash = tmp_path / "file.png"
    clash.write_bytes(b"keep me")
    assert main(["plot", str(tmp_path), "--out", str(clash)]) == 2
    assert one_line(capsys) == f"{clash}: cannot write --out: it is a file, not a folder"
    assert clash.read_bytes() == b"keep me"
    missing = tmp_path / "nofolder" / "x.s"
    assert main(["disasm", str(program_file), "-o", str(missing)]) == 2
    assert one_line(capsys) == f"{missing}: cannot write -o: no folder {missing.parent}"
    source = tmp_path / "p.s"
    assert main(["disasm", str(program_file), "-o", str(source)]) == 0
    capsys.readouterr()
    text = source.read_text()
    missing = tmp_path / "nofolder" / "x.bin"
    assert main(["asm", str(source), "-o", str(missing)]) == 2
    assert one_line(capsys) == f"{missing}: cannot write -o: no folder {missing.parent}"
    assert main(["asm", str(source), "-o", str(tmp_path)]) == 2
    assert one_line(capsys) == f"{tmp_path}: cannot write -o: it is a folder"
    assert main(["asm", str(source), "-o", str(source)]) == 2
    assert one_line(capsys) == f"{source}: cannot write -o: it is the input file"
    assert source.read_text() == text
