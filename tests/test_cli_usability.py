"""What a new user meets on the command line (issue 39): one-line errors that lose nothing,
Ctrl-C, progress on stderr, and options that mean one thing everywhere."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import accel
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


# ---------------------------------------------------------------------- image sizes
@pytest.mark.parametrize("command", ["run", "tune"])
@pytest.mark.parametrize("size", ["0", "-3"])
def test_image_size_below_one_is_an_error(command: str, size: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """0 used to run at 224 (``image_size or 224``)."""
    assert main([command, "resnet18", "--image-size", size]) == 2
    assert one_line(capsys) == f"--image-size must be at least 1, not {size}"


def test_load_model_refuses_image_size_zero() -> None:
    import accel
    from compiler.graph.ir import GraphError

    with pytest.raises(GraphError, match=r"^resnet18: image_size must be an int >= 1, got 0$"):
        accel.load_model("resnet18", image_size=0)


def test_image_size_with_an_onnx_model_is_refused(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """An ONNX file fixes its input shape: --image-size was silently ignored."""
    onnx = pytest.importorskip("onnx")
    from test_graph_frontends import small_cnn

    import accel
    from compiler.graph.ir import GraphError

    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(size=8), str(path))
    for command in ("run", "tune"):
        assert main([command, str(path), "--image-size", "64"]) == 2
        assert one_line(capsys) == (f"--image-size applies to zoo models only; the input "
                                    f"shape of {path} is fixed by the file")
    with pytest.raises(GraphError, match="image_size applies to zoo models only"):
        accel.load_model(str(path), image_size=64)


def test_sizes_a_zoo_model_does_not_read_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """accel run bert_tiny --image-size 64 ran at its sequence length without a word; the API
    ignored seq_len for a ResNet and image_size for BERT and ViT alike."""
    import accel
    from compiler.graph.ir import GraphError

    for model in ("bert_tiny", "vit_tiny"):
        assert main(["run", model, "--image-size", "64"]) == 2
        assert one_line(capsys) == (
            "--image-size applies to the CNNs only (resnet18, resnet34, resnet50, "
            f"mobilenet_v2, efficientnet_b0); {model} has a fixed input (BERT reads "
            "--seq-len, ViT-tiny is 224x224)")
    with pytest.raises(GraphError, match=r"^bert_tiny: image_size applies to resnet18, "
                                         r"resnet34, resnet50, mobilenet_v2, efficientnet_b0 "
                                         r"only, not to "
                                         r"bert_tiny$"):
        accel.load_model("bert_tiny", image_size=64)
    with pytest.raises(GraphError, match=r"^resnet18: seq_len applies to bert_tiny, "
                                         r"bert_base only, not to resnet18$"):
        accel.load_model("resnet18", seq_len=8)


def test_image_size_with_a_layer_list_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "C2-C12", "--image-size", "64"]) == 2
    assert one_line(capsys) == ("--image-size applies to zoo models only; the layers C2-C12 "
                                "have the sizes of the TVM paper's ResNet-18")


# ---------------------------------------------------------------------- accel asm
def _listing(program_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
             ) -> list[str]:
    assert main(["disasm", str(program_file)]) == 0
    return capsys.readouterr().out.splitlines()


def test_asm_without_config_names_the_file_line_and_directive(
        program_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It used to assemble for the packaged default config without a word (here: a program
    for tiny, silently rebuilt for 1x8x8)."""
    lines = [line for line in _listing(program_file, tmp_path, capsys)
             if not line.startswith(".config")]
    source = tmp_path / "noconf.s"
    source.write_text("\n".join(lines) + "\n")
    first = next(n for n, line in enumerate(lines, 1) if line.strip().startswith("0: LOAD"))
    out = tmp_path / "x.bin"
    assert main(["asm", str(source), "-o", str(out)]) == 2
    assert one_line(capsys) == (f"{source}:{first}: no .config directive before the first "
                                "instruction; add one (.config NAME) or pass the config "
                                "(accel asm --config NAME)")
    assert not out.exists()
    assert main(["asm", str(source), "-o", str(out), "--config", "tiny"]) == 0
    assert out.read_bytes() == program_file.read_bytes()


def test_asm_refuses_unbalanced_tokens(program_file: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """One GEMM line deleted: the token it popped stays in its queue at FINISH. accel exec
    used to be the first to notice."""
    lines = _listing(program_file, tmp_path, capsys)
    gemm = next(n for n, line in enumerate(lines) if ": GEMM pop_prev" in line)
    source = tmp_path / "unbalanced.s"
    source.write_text("\n".join(lines[:gemm] + lines[gemm + 1:]) + "\n")
    out = tmp_path / "u.bin"
    message = (f"{source}: dependency tokens do not balance: FINISH at instruction 8 left "
               "tokens in load->compute=1 (last pushed by instruction 2)")
    assert main(["asm", str(source), "-o", str(out)]) == 2
    assert one_line(capsys) == message + "; pass --allow-unbalanced to write it anyway"
    assert not out.exists()
    assert main(["asm", str(source), "-o", str(out), "--allow-unbalanced"]) == 0
    assert capsys.readouterr().err == f"accel: warning: {message}\n"
    assert out.exists()


def test_asm_validation_errors_name_the_file(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "empty.s"
    source.write_text(".config tiny\n.text\n  GEMM\n")
    assert main(["asm", str(source), "-o", str(tmp_path / "e.bin")]) == 2
    assert one_line(capsys) == f"{source}: program has no FINISH instruction"


# ---------------------------------------------------------------------- progress
def small_onnx(tmp_path: Path) -> Path:
    """A float CNN of two small conv2d layers (8x8 input): quick to tune."""
    onnx = pytest.importorskip("onnx")
    from test_graph_frontends import small_cnn

    path = tmp_path / "small.onnx"
    onnx.save(small_cnn(size=8), str(path))
    return path


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_every_few_seconds_off_a_terminal() -> None:
    from accel.cli_util import Progress

    clock, stream = FakeClock(), io.StringIO()
    p = Progress(stream, interval=5.0, clock=clock)
    p.start("compile", 4, "resnet18")
    for k, dt in ((1, 1.0), (2, 1.0), (3, 4.0)):
        clock.now += dt
        p.update(k, 4, f"layer{k}")
    clock.now += 0.5
    p.update(4, 4, "done")
    p.line("compiled")
    assert stream.getvalue().splitlines() == [
        "compile: 0/4 resnet18 (0.0 s)", "compile: 3/4 layer3 (6.0 s)",
        "compile: 4/4 done (6.5 s)", "compiled"]
    quiet = io.StringIO()
    q = Progress(quiet, quiet=True, clock=clock)
    q.start("run", 2)
    q.update(2, 2)
    q.line("x")
    assert quiet.getvalue() == ""


def test_progress_updates_one_line_on_a_terminal() -> None:
    from accel.cli_util import Progress

    clock, stream = FakeClock(), Terminal()
    p = Progress(stream, clock=clock)
    p.start("run", 2, "on sim")
    clock.now += 0.25
    p.update(1, 2, "conv1")
    p.line("done")
    text = stream.getvalue()
    assert text.count("\r") == 2 and text.endswith("\ndone\n")
    assert "run: [############............] 1/2 conv1" in text


def test_run_shows_compile_and_run_progress(capsys: pytest.CaptureFixture[str]) -> None:
    """It printed nothing while compiling, and nothing at all when stderr was not a
    terminal."""
    assert main(["run", "resnet18", "--image-size", "16", "--backend", "fsim"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("compile: resnet18 for 1x8x8_")
    n = len(accel.compile("resnet18", image_size=16).graph.nodes)
    compiled = [line for line in err if re.match(r"compile: (\d+)/\1 layers compiled", line)]
    assert len(compiled) == 1
    assert any(line.startswith(f"run: 0/{n} on fsim") for line in err)
    assert any(line.startswith(f"run: {n}/{n} done") for line in err)
    assert main(["run", "resnet18", "--image-size", "16", "--backend", "fsim", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_tune_shows_every_batch_and_measurement(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A batch of slow measurements printed nothing for a minute: each setting measured is a
    progress step (a line every PROGRESS_INTERVAL seconds off a terminal; every one here)."""
    import accel.cli_util

    monkeypatch.setattr(accel.cli_util, "PROGRESS_INTERVAL", 0.0)
    log = tmp_path / "t.jsonl"
    model = small_onnx(tmp_path)
    assert main(["tune", str(model), "--config", "tiny", "--trials", "6", "--workers", "1",
                 "--log", str(log)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"compile: {model} for 1x4x4_")
    first = [line for line in err if line.startswith("[1/")]
    assert re.match(r"\[1/\d+\] conv1: heuristic knobs \(\d+ valid settings\)", first[0])
    assert any(re.match(r"\[1/\d+\] conv1: xgb batch 1: 3/\d settings measured", line)
               for line in first)
    batches = [line for line in first if re.match(r"\[1/\d+\] conv1: xgb \d/6 trials, best ",
                                                  line)]
    assert len(batches) == 1  # six trials are one batch of eight or fewer
    assert main(["tune", str(model), "--config", "tiny", "--trials", "2", "--workers", "1",
                 "--log", str(log), "--quiet", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    summary = json.loads(captured.out)
    # Every accelerator layer is tuned (conv2 with the residual add fused into it, conv2d_add,
    # and the classifier too).
    assert [layer["layer"] for layer in summary["layers"]] == ["conv1", "conv2", "fc"]
    assert summary["records"] == len(log.read_text().splitlines())
    assert all(layer["tuned_cycles"] <= layer["heuristic_cycles"] for layer in summary["layers"])


# ---------------------------------------------------------------------- Ctrl-C
def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _gone(pid: int) -> bool:
    """The process has exited (reaped, or a zombie nobody waits for yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return "\nState:\tZ" in status


def interrupt(args: list[str], ready: Callable[[str], bool], workers: int = 0
              ) -> tuple[int, list[str], list[int]]:
    """Run ``accel ARGS``, wait for a stderr line for which ``ready`` holds (and for
    ``workers`` child processes), press Ctrl-C (SIGINT); return the exit status, the stderr
    lines and the children it had."""
    if not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists():
        pytest.skip("needs /proc/PID/task/TID/children (Linux) to find worker processes")
    env = dict(os.environ, PYTHONFAULTHANDLER="1")  # SIGABRT dumps every thread's stack
    # A shell's background job ignores SIGINT, and its children inherit that (Python then
    # leaves Ctrl-C ignored): the command gets the default disposition, as from a terminal.
    proc = subprocess.Popen([sys.executable, "-m", "accel", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if ready(line):
            break
    else:
        proc.wait()
        pytest.fail(f"accel {' '.join(args)} ended before it was ready: {lines}")
    children = _children(proc.pid)
    deadline = time.monotonic() + 30
    while len(children) < workers and time.monotonic() < deadline:
        time.sleep(0.02)
        children = _children(proc.pid)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        pytest.fail(f"accel {' '.join(args)} hangs after Ctrl-C:\n{proc.communicate()[1]}")
    lines += err.splitlines()
    deadline = time.monotonic() + 10
    while not all(_gone(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc.returncode, lines, children


def _progress_line(line: str) -> bool:
    return re.match(r"(compile|run|tune|\[\d+/\d+\]) ?\S*: ", line) is not None


@pytest.mark.parametrize("phase", ["compile", "run"])
def test_ctrl_c_during_run_is_one_line(phase: str) -> None:
    """It printed a KeyboardInterrupt traceback (from the wait on the timing worker), and the
    exit waited for that worker to simulate the remaining layers."""
    code, lines, children = interrupt(["run", "resnet18"], lambda line: line.startswith(phase),
                                      workers=int(phase == "run"))
    assert code == 130, lines
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    assert lines[-1] == "accel: interrupted"
    assert all(_progress_line(line) for line in lines[:-1]), lines
    assert (len(children) == 1) == (phase == "run")
    assert all(_gone(c) for c in children), "a worker process outlived the command"


def test_ctrl_c_during_run_with_out_stops_both_workers(tmp_path: Path) -> None:
    """``--out`` forks a second worker, the plot's, at the start: a Ctrl-C in the run stops
    it and the timing worker, and writes nothing."""
    out = tmp_path / "out"
    code, lines, children = interrupt(["run", "resnet18", "--out", str(out)],
                                      lambda line: line.startswith("run"), workers=2)
    assert code == 130, lines
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    assert lines[-1] == "accel: interrupted"
    assert len(children) == 2 and all(_gone(c) for c in children), children
    assert not out.exists() or not any(out.iterdir())


def test_ctrl_c_during_tune_keeps_the_log(tmp_path: Path) -> None:
    """It printed a KeyboardInterrupt traceback from inside simpy (with --workers 1) and left
    the measurement workers running their batch (with more)."""
    log = tmp_path / "t.jsonl"
    model = small_onnx(tmp_path)
    code, lines, children = interrupt(
        ["tune", str(model), "--config", "tiny", "--trials", "64", "--workers", "2",
         "--log", str(log)], lambda line: "trials, best" in line, workers=2)
    assert code == 130, lines
    assert not any("Traceback" in line for line in lines)
    records = log.read_text().count("\n")
    assert records >= 9  # the heuristic's knobs and a batch of eight
    assert lines[-1] == f"accel: tune interrupted; {log} keeps the {records} records it logged"
    assert all(_progress_line(line) for line in lines[:-1]), lines
    assert len(children) == 2 and all(_gone(c) for c in children)


def test_ctrl_c_that_ended_a_string_exec_still_exits_130(tmp_path: Path) -> None:
    """CI saw ``accel run`` die by SIGINT (-2) after its one line: the Ctrl-C had landed in an
    import building a dataclass (a string ``exec``), and CPython then kills ``python -m`` with
    SIGINT at exit whatever status it returns. :func:`interrupted` clears that mark."""
    (tmp_path / "ctrl_c_in_exec.py").write_text(
        "import sys\n"
        "from accel.cli_util import interrupted\n"
        "try:\n"
        "    exec('raise KeyboardInterrupt', {})\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(interrupted('accel: interrupted'))\n")
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "ctrl_c_in_exec"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stderr) == (130, "accel: interrupted\n")


def test_ctrl_c_wrapped_in_another_error_is_an_interrupt(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """CI saw ``accel: error: Error calling __set_name__ on 'Field' instance 'stalls'``: on
    Python 3.11 a Ctrl-C inside a class's ``__set_name__`` (an import building a dataclass)
    comes as a RuntimeError, which ``accel run`` turned into its own error."""
    import signal as signal_module

    from accel import cli
    from accel.cli_util import caused_by_interrupt

    class Interrupted:
        def __set_name__(self, owner: type, name: str) -> None:
            raise KeyboardInterrupt

    def build_class() -> None:
        type("Stats", (), {"stalls": Interrupted()})

    with pytest.raises(BaseException) as raised:
        build_class()
    assert caused_by_interrupt(raised.value)
    assert not caused_by_interrupt(ValueError("not an interrupt"))

    def command(args: argparse.Namespace) -> int:
        try:
            build_class()
        except RuntimeError as exc:
            raise cli.CliError(f"the RTL failed: {exc}") from exc
        return 0

    parser = argparse.ArgumentParser()
    parser.set_defaults(func=command)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    old = signal_module.getsignal(signal_module.SIGINT)
    try:
        assert main([]) == 130
    finally:
        signal_module.signal(signal_module.SIGINT, old)
    assert capsys.readouterr().err == "accel: interrupted\n"


# ---------------------------------------------------------------------- consistency
def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its name (``config show``, ``run``, ...)."""
    from accel.cli import build_parser

    out: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs and path:
            out[" ".join(path)] = parser
        for sub in subs:
            for name, child in sub.choices.items():
                walk(child, [*path, name])

    walk(build_parser(), [])
    return out


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings
            if a.help != argparse.SUPPRESS}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"accel {accel.__version__}\n"


def test_every_option_has_help() -> None:
    """run --batch, --backend, --no-check (and others) had none; the only hidden options are
    deprecated spellings."""
    from accel.cli_util import _DeprecatedAlias

    missing, hidden = [], []
    for name, parser in _commands().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            what = f"accel {name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help:
                missing.append(what)
            elif action.help == argparse.SUPPRESS and not isinstance(action, _DeprecatedAlias):
                hidden.append(what)
    assert missing == [] and hidden == []


def test_one_option_name_means_one_thing() -> None:
    """-o is a file and --out a folder everywhere, and say so; --window is the cycles a plot
    draws and --vcd-window those a dump holds, --cycle-limit the RTL's limit (--max-cycles
    meant the limit on exec and the window on plot); --workers has one default."""
    commands = _commands()
    seen: dict[str, list[str]] = {}
    for name, parser in commands.items():
        for option, action in _options(parser).items():
            seen.setdefault(option, []).append(name)
            if option == "-o":
                assert action.metavar == "FILE" and "file" in action.help, name
            if option == "--out":
                assert action.metavar == "DIR" and "folder" in action.help, name
            if option in ("--window", "--vcd-window"):
                assert action.metavar == "FIRST:LAST", name
    for old in ("--max-cycles", "--cycles", "--vcd-cycles"):
        assert old not in seen, f"{old} is still shown by {seen.get(old)}"
    assert sorted(seen["--out"]) == ["codesign", "plot", "run", "sweep", "waveform"]
    assert sorted(seen["-o"]) == ["asm", "disasm", "verilog"]
    assert sorted(seen["--window"]) == ["plot", "waveform"]
    assert sorted(seen["--vcd-window"]) == ["exec", "run"]
    assert seen["--cycle-limit"] == ["exec"]
    workers = [_options(commands[c])["--workers"] for c in ("sweep", "tune")]
    assert workers[0].help == workers[1].help and workers[0].default == workers[1].default
    for command in ("run", "tune", "sweep", "synth", "codesign"):  # reports and progress
        assert {"--json", "--quiet"} <= set(_options(commands[command])), command
    assert "--json" in _options(commands["exec"])


@pytest.mark.parametrize("args, note", [
    (["exec", "P", "--backend", "fsim", "--max-cycles", "5"], "--max-cycles"),
    (["exec", "P", "--vcd-cycles", "0:5"], "--vcd-cycles"),
])
def test_old_option_spellings_still_work_with_a_note(
        args: list[str], note: str, program_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(program_file) if a == "P" else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.splitlines()
    new = {"--max-cycles": "--cycle-limit", "--vcd-cycles": "--vcd-window"}[note]
    assert err[0] == f"accel: note: {note} is deprecated; use {new}"
    assert err[1].startswith("accel: error: ") and f"{new} need" in err[1]  # the new check


def test_run_json_is_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "resnet18", "--image-size", "16", "--backend", "fsim", "--json",
                 "--quiet"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["model"] == "resnet18" and report["check"] is True
    assert report["totals"]["layers"] == len(report["layers"])
    assert captured.err == ""


@pytest.mark.parametrize("argv", [["--help"], ["config", "show"], ["config", "list"]])
def test_start_up_loads_neither_numpy_nor_amaranth(argv: list[str]) -> None:
    """``accel --help`` builds every parser and ``accel config show`` reads a config: neither
    loads Amaranth, the compiler's operators, the runtime or the tuners (lazy package names,
    choices from hw.names and compiler.tune.names); ``--help`` loads no numpy either."""
    code = ("import sys\nfrom accel.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    loaded = set(run.stderr.split())
    heavy = {m for m in loaded if m.split(".")[0] in {"amaranth", "runtime", "sim", "jschon"}
             or m.startswith(("compiler.ops", "compiler.tune.tuners", "compiler.graph",
                              "hw.synth", "hw.backend", "accel.api"))}
    assert heavy == set()
    if argv == ["--help"]:
        assert "numpy" not in loaded
    assert "accel.cli" in loaded and "compiler.tune.names" in loaded


def test_the_light_choice_lists_name_what_the_tools_take() -> None:
    from compiler.tune.names import TUNER_NAMES
    from compiler.tune.tuners import TUNERS
    from hw.backend import ENGINES
    from hw.names import RTL_ENGINES, SYNTH_TARGETS
    from hw.synth import TARGETS

    assert tuple(TARGETS) == SYNTH_TARGETS
    assert tuple(TUNERS) == TUNER_NAMES
    assert ENGINES == RTL_ENGINES
