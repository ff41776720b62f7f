"""What the ``accel`` commands share: exit statuses, one-line errors, output paths checked
before long work, cycle windows, deprecated option spellings, worker counts, and progress on
stderr.

Conventions every command keeps:

- bad input is one ``accel: error: ...`` line on stderr and exit status 2 (:class:`CliError`,
  or any ``ValueError``), found before long work where it can be (:func:`check_out_dir`,
  :func:`check_out_file`);
- Ctrl-C is one ``accel: ... interrupted ...`` line and exit status 130, with worker processes
  stopped;
- ``-o/--output FILE`` names a file, ``--out DIR`` a folder (created when missing);
- long work reports progress on stderr (:class:`Progress`), which ``--quiet`` turns off.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_INTERRUPTED", "PROGRESS_INTERVAL",
           "WORKERS_HELP", "CliError", "Progress", "add_deprecated_alias",
           "caused_by_interrupt", "check_model_options", "check_out_dir", "check_out_file",
           "default_workers", "interrupted", "make_out_dir", "parse_window", "steps"]

EXIT_FAILED = 1
"""The command ran but what it checks failed (a check, error rows of a sweep)."""
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
"""128 + SIGINT, what a shell reports for a command stopped by Ctrl-C."""

PROGRESS_INTERVAL = 5.0
"""Seconds between progress lines when stderr is not a terminal (a log file, CI): often
enough to show the work goes on, rarely enough to keep a log readable."""


class CliError(ValueError):
    """A user-facing failure: printed as one ``accel: error: ...`` line, exit status 2."""


def interrupted(message: str) -> int:
    """After Ctrl-C: ``message`` as the one line on stderr, and the exit status to return.

    A second Ctrl-C while the command winds down (workers stopped, files closed) is ignored,
    so that it cannot print a traceback of the cleanup.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stderr.write("\n" if getattr(sys.stderr, "isatty", lambda: False)() else "")
    print(message, file=sys.stderr)
    # CPython (seen on 3.11 and 3.12): a KeyboardInterrupt that ends a string exec or eval (a
    # dataclass or namedtuple being built by an import the Ctrl-C landed in) marks the
    # interpreter to kill itself with SIGINT at exit under ``python -m``, whatever status the
    # command returns. Every string eval clears that mark as it starts: this one does.
    exec("None", {})
    return EXIT_INTERRUPTED


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C, or an error that one caused: Python 3.11 wraps a
    KeyboardInterrupt raised inside a class's ``__set_name__`` (a dataclass field, while an
    import builds the class) in a RuntimeError, and a command may turn that into its own
    error; an error raised while a Ctrl-C is handled is its consequence too."""
    todo, seen = [exc], set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        todo += [e.__cause__, e.__context__]
    return False


# ---------------------------------------------------------------------- output paths
def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (``.`` at worst)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def check_out_dir(path: str | os.PathLike[str], flag: str) -> Path:
    """``path`` checked as a folder to write into, before any long work: it is a folder, or
    it can be created. Creates nothing (a run that fails later leaves no empty folder).

    Raises
    ------
    CliError
        ``path`` is a file, or lies under a file or a folder that cannot be written.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CliError(f"{out}: cannot write {flag}: it is a file, not a folder")
    base = _nearest_existing(out)
    if not base.is_dir():
        raise CliError(f"{out}: cannot write {flag}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise CliError(f"{out}: cannot write {flag}: {base} is not writable")
    return out


def make_out_dir(path: str | os.PathLike[str], flag: str) -> Path:
    """:func:`check_out_dir`, then create the folder (and its parents)."""
    out = check_out_dir(path, flag)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"{out}: cannot create the folder for {flag}: {exc.strerror}") from None
    return out


def check_out_file(path: str | os.PathLike[str], flag: str,
                   inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """``path`` checked as a file to write, before any long work: not a folder, in a folder
    that exists and can be written, and none of ``inputs`` (writing there would destroy the
    input). Creates nothing.

    Raises
    ------
    CliError
        Naming the path, the option and what is wrong.
    """
    out = Path(path)
    if out.is_dir():
        raise CliError(f"{out}: cannot write {flag}: it is a folder")
    parent = out.parent
    if not parent.is_dir():
        raise CliError(f"{out}: cannot write {flag}: no folder {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise CliError(f"{out}: cannot write {flag}: not writable")
    for source in inputs:
        if out.exists() and Path(source).exists() and out.samefile(source):
            raise CliError(f"{out}: cannot write {flag}: it is the input file")
    return out


# ---------------------------------------------------------------------- models
def check_model_options(model: str, batch: int, image_size: int | None,
                        layers: bool = False) -> None:
    """``--batch`` and ``--image-size`` checked against the model they size, before loading.

    ``layers``: ``model`` names ResNet-18 layers (``accel tune C2-C12``), whose sizes are fixed.

    Raises
    ------
    CliError
        A size below 1, or ``--image-size`` where nothing would read it (an ONNX file, a
        layer list, a zoo model other than a ResNet, whose input shapes are fixed), which used
        to be ignored without a word.
    """
    if batch < 1:
        raise CliError(f"--batch must be at least 1, not {batch}")
    if image_size is None:
        return
    if image_size < 1:
        raise CliError(f"--image-size must be at least 1, not {image_size}")
    if layers:
        raise CliError(f"--image-size applies to zoo models only; the layers {model} have the "
                       "sizes of the TVM paper's ResNet-18")
    if Path(model).suffix == ".onnx":
        raise CliError(f"--image-size applies to zoo models only; the input shape of {model} "
                       "is fixed by the file")
    from compiler.graph.zoo import IMAGE_MODELS, ZOO

    if model in ZOO and model not in IMAGE_MODELS:
        raise CliError(f"--image-size applies to the CNNs only ({', '.join(IMAGE_MODELS)}); "
                       f"{model} has a fixed input (BERT reads --seq-len, ViT-tiny is 224x224)")


# ---------------------------------------------------------------------- windows
def parse_window(text: str, flag: str) -> tuple[int, int | None]:
    """A ``FIRST:LAST`` window of cycles, LAST excluded, either end optional (``:5000``,
    ``1000:``), as ``(first, last)`` with ``last`` None for open-ended.

    Raises
    ------
    CliError
        Not of that form, a negative FIRST, or an empty window.
    """
    head, sep, tail = text.partition(":")
    try:
        if not sep:
            raise ValueError
        first = int(head) if head.strip() else 0
        last = int(tail) if tail.strip() else None
    except ValueError:
        raise CliError(f"{flag} {text!r}: expected FIRST:LAST in cycles, such as 0:5000 or "
                       "1000: (LAST excluded)") from None
    if first < 0:
        raise CliError(f"{flag} {text!r}: FIRST must be 0 or more")
    if last is not None and last <= first:
        raise CliError(f"{flag} {text!r}: the window is empty (LAST must be greater than FIRST)")
    return first, last


# ---------------------------------------------------------------------- options
class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores its value and says, on stderr, what replaced it."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "",
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"accel: note: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_deprecated_alias(p: argparse.ArgumentParser, old: str, new: str, dest: str,
                         **kwargs: Any) -> None:
    """Accept ``old`` (hidden from ``--help``) as a deprecated spelling of ``new``; its value
    goes to ``dest`` (the new option's, or its own where the meaning needs converting)."""
    p.add_argument(old, dest=dest, action=_DeprecatedAlias, new=new, help=argparse.SUPPRESS,
                   **kwargs)


def default_workers() -> int:
    """Worker processes of ``accel sweep`` and ``accel tune`` when ``--workers`` is not
    given: one per CPU."""
    return os.cpu_count() or 1


WORKERS_HELP = (f"worker processes (default: the CPU count, {default_workers()} here; 1 runs "
                "in this process)")


# ---------------------------------------------------------------------- progress
class Progress:
    """Progress of long work on ``stream`` (stderr by default).

    On a terminal one line updates in place (a bar when the total is known). Otherwise (a
    log, a pipe) a line is written when a phase starts, then at most one every ``interval``
    seconds, and one when it ends, so a log shows the work going on without filling up.
    ``quiet`` writes nothing.

    Parameters
    ----------
    stream
        Where to write (default ``sys.stderr``).
    quiet
        Write nothing.
    interval
        Seconds between lines when ``stream`` is not a terminal (default
        :data:`PROGRESS_INTERVAL`).
    clock
        Monotonic seconds (tests pass a fake one).
    """

    def __init__(self, stream: TextIO | None = None, quiet: bool = False,
                 interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.interval = PROGRESS_INTERVAL if interval is None else interval
        self.clock = clock
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.phase = ""
        self.started = clock()
        self.last_line = -float("inf")
        self._open = False  # a terminal line is waiting for its newline

    def start(self, phase: str, total: int | None = None, text: str = "") -> None:
        """Begin a phase (``compile``, ``run``, ...): shown at once in either mode."""
        self.phase = phase
        self.started = self.clock()
        self.last_line = -float("inf")
        self.update(0, total, text)

    def update(self, done: int, total: int | None = None, text: str = "") -> None:
        """``done`` of ``total`` steps of the current phase, ``text`` saying which."""
        if self.quiet:
            return
        now = self.clock()
        elapsed = now - self.started
        count = f"{done}/{total} " if total is not None else ""
        if self.tty:
            bar = ""
            if total:
                filled = int(24 * min(done, total) / total)
                bar = f"[{'#' * filled}{'.' * (24 - filled)}] "
            line = f"{self.phase}: {bar}{count}{text}"[:92]
            self.stream.write(f"\r{line:<92} {elapsed:6.1f}s")
            self._open = True
        else:
            if now - self.last_line < self.interval and not (total is not None and done >= total):
                return
            self.stream.write(f"{self.phase}: {count}{text}".rstrip() + f" ({elapsed:.1f} s)\n")
        self.last_line = now
        self.stream.flush()

    def line(self, text: str) -> None:
        """A line of its own (a finished step), ending any line being updated."""
        if self.quiet:
            return
        self.end()
        self.stream.write(text + "\n")
        self.stream.flush()
        self.last_line = self.clock()

    def end(self) -> None:
        """End the line being updated on a terminal (before other output)."""
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def steps(progress: Progress, finished: str) -> Callable[[int, int, str], None]:
    """The ``progress(k, n, name)`` callback of compiling or running a network's layers
    (:func:`accel.compile`, ``Executable.run``) as :class:`Progress` steps: the layer about to
    start, then ``finished``."""

    def show(k: int, n: int, name: str) -> None:
        progress.update(k, n, name if k < n else finished)

    return show
