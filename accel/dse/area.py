"""Area per sweep point: the synthesis report of the point's config, cached per canonical name.

:func:`hw.synth.synthesize` already caches its reports on disk per canonical config name and
target (``$ACCEL_CACHE_DIR/synth``). Points of one config run back to back, and with several
workers two of them may ask for the same config at once; a lock file per (config, target)
makes the second wait for the first's cached report instead of synthesising again.

The estimator is pluggable (spec ``area: {target: ecp5, estimator: module:function}``): any
callable ``f(cfg, target)`` returning an object (or mapping) with ``luts``, ``ffs``, ``dsps``
and ``brams``, for instance a fast analytic model, or a fake in tests.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

from accel.machine.config import HwConfig

__all__ = ["AREA_FIELDS", "area_columns", "estimator", "synth_lock"]

AREA_FIELDS = ("luts", "ffs", "dsps", "brams")


def estimator(spec: str) -> Callable[[HwConfig, str], Any]:
    """The callable named ``module:function``.

    Raises
    ------
    ValueError
        The module cannot be imported or has no such callable.
    """
    module_name, _, func = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"area estimator {spec}: cannot import {module_name}: {exc}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ValueError(f"area estimator {spec}: {module_name} has no callable {func}")
    return fn  # type: ignore[no-any-return]


@contextlib.contextmanager
def synth_lock(cfg: HwConfig, target: str) -> Iterator[None]:
    """Hold an exclusive lock on ``(cfg.name, target)`` while synthesising (POSIX ``flock``;
    no lock where that is missing or caching is off)."""
    from accel.machine.cache import cache_dir, file_lock

    folder = cache_dir("synth")
    with file_lock(None if folder is None else folder / f"{cfg.name}__{target}.lock"):
        yield


def area_columns(cfg: HwConfig, target: str, spec: str = "hw.synth:synthesize"
                 ) -> dict[str, Any]:
    """``area.target``, ``area.luts``, ``area.ffs``, ``area.dsps``, ``area.brams`` of ``cfg``.

    Raises
    ------
    ValueError, RuntimeError
        The estimator cannot be found, or synthesis failed (``hw.synth.SynthError``).
    """
    fn = estimator(spec)
    with synth_lock(cfg, target):
        report = fn(cfg, target)
    get = report.get if isinstance(report, dict) else (lambda k: getattr(report, k, None))
    out: dict[str, Any] = {"area.target": target}
    for key in AREA_FIELDS:
        value = get(key)
        out[f"area.{key}"] = None if value is None else int(value)
    return out
