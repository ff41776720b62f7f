"""On-disk caches for compiled artifacts (programs, zoo graphs, synthesis results, models).

Everything lives under ``$ACCEL_CACHE_DIR`` (default ``~/.cache/accel``), one folder per kind;
``ACCEL_CACHE_DIR=off`` disables caching. Entries are keyed by what produced them, including a
hash of the source code of the packages involved, so a code change never reuses a stale entry.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
from pathlib import Path

__all__ = ["cache_dir", "code_version"]


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


@functools.cache
def code_version(*packages: str) -> str:
    """A short hash of every ``.py`` file of the given packages (sorted by path)."""
    digest = hashlib.sha256()
    for name in packages:
        module = importlib.import_module(name)
        root = Path(module.__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
