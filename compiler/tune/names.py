"""The tuners' names, importable without loading the tuners (``accel tune --tuner``'s
choices: ``accel --help`` builds every parser)."""

from __future__ import annotations

__all__ = ["TUNER_NAMES"]

TUNER_NAMES = ("xgb", "random", "ga")
"""The keys of :data:`compiler.tune.tuners.TUNERS`, in its order."""
