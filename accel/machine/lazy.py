"""Package attributes loaded on first use, so that importing a package loads none of its parts.

A package's ``__init__.py`` names what it re-exports and from where::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {
        "accel.machine.config": ("HwConfig", "load_config"),
    })

``from package import HwConfig`` then imports ``accel.machine.config`` at that moment (Python
asks the module's ``__getattr__`` for a name it lacks), and caches the value in the package.
The command line's start-up (``accel --help`` in well under a second) rests on this.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, which re-exports each module's
    names of ``exports`` (``{module: names}``)."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__, sorted(where)
