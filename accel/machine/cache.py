"""On-disk caches for compiled artifacts (programs, zoo graphs, synthesis results, models).

Everything lives under ``$ACCEL_CACHE_DIR`` (default ``~/.cache/accel``), one folder per kind;
``ACCEL_CACHE_DIR=off`` disables caching. Entries are keyed by what produced them, including a
hash of the source code of the packages involved, so a code change never reuses a stale entry.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cache_dir", "code_version", "file_lock", "work_dir", "write_atomic"]


def cache_dir(kind: str) -> Path | None:
    """``$ACCEL_CACHE_DIR/<kind>``, created on demand; None when caching is off or the folder
    cannot be created."""
    root = os.environ.get("ACCEL_CACHE_DIR")
    if root is not None and root.strip().lower() in ("", "off", "0", "none"):
        return None
    base = Path(root) if root else Path.home() / ".cache" / "accel"
    path = base / kind
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return path


@contextlib.contextmanager
def file_lock(path: Path | None) -> Iterator[None]:
    """Hold an exclusive POSIX ``flock`` on ``path`` (created if missing) for the block, so that
    processes sharing a cache do a piece of work once; no lock where ``path`` is None (caching
    off) or ``flock`` is missing."""
    try:
        import fcntl
    except ImportError:
        fcntl = None  # type: ignore[assignment]
    if path is None or fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file of this process renamed into place:
    a failure leaves no partial file, and processes writing the same path at once (sweep or
    test workers filling one cache) each rename a whole file of their own."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(data, str):
            tmp.write_text(data)
        else:
            tmp.write_bytes(data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def work_dir(kind: str) -> Path:
    """:func:`cache_dir`, or a fresh temporary folder when caching is off (for work that needs
    a folder either way, such as a Verilator build)."""
    path = cache_dir(kind)
    return path if path is not None else Path(tempfile.mkdtemp(prefix=f"accel-{kind}-"))


@functools.cache
def code_version(*packages: str) -> str:
    """A short hash of every ``.py`` file of the given packages (sorted by path)."""
    digest = hashlib.sha256()
    for name in packages:
        # Found, not imported: the contract imports nothing of the packages it hashes.
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"{name!r} is not an importable package")
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
