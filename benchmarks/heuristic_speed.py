"""Wall time of the conv2d knob heuristic (``default_conv2d_knobs``) against a baseline revision.

For every shipped config and ResNet-18's C1-C12 (as the network gives them: bias, shift, ReLU)
it picks the default knobs with ``compiler/ops/heuristic.py`` as checked out and as of git
revision ``--baseline``, the latter loaded as a module of its own. Each pass starts from cleared
caches (a fresh process's state, no compile cache), the two alternate ``--repeats`` times; it
prints each pass's wall time, the best and median of each and their ratio, and fails if any
pick differs.

Run from the repository root: ``python benchmarks/heuristic_speed.py [--baseline REV]
[--repeats N] [--configs a,b]``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    import accel  # noqa: F401
except ImportError:  # not installed: run from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel.machine.config import load_config, shipped_configs
from compiler.ops import heuristic
from compiler.ops.workloads import RESNET18_LAYERS, resnet18_layer

ROOT = Path(__file__).resolve().parents[1]


def load_baseline(rev: str) -> ModuleType:
    """``compiler/ops/heuristic.py`` at git revision ``rev``, imported as a module of its own
    (it imports the rest of the package as checked out)."""
    source = subprocess.run(["git", "show", f"{rev}:compiler/ops/heuristic.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "heuristic_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("heuristic_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module


def clear_caches(module: ModuleType) -> None:
    """Empty every ``functools`` cache the module holds (its own and those it wraps)."""
    for value in vars(module).values():
        if isinstance(value, functools._lru_cache_wrapper):
            value.cache_clear()


def search(module: ModuleType) -> Any:
    """The module's search, past its caches (the baseline had only the in-memory one)."""
    found = getattr(module, "search_conv2d_knobs", None)
    return found if found is not None else module.default_conv2d_knobs


def one_pass(module: ModuleType, cases: list[tuple[Any, Any]]) -> tuple[float, list[Any]]:
    clear_caches(module)
    for name, loaded in list(sys.modules.items()):  # the helpers' too: costs, uops, conv2d
        if name.split(".")[0] in ("accel", "compiler") and loaded is not None:
            clear_caches(loaded)
    start = time.perf_counter()
    picks = []
    for wl, cfg in cases:
        try:
            picks.append(tuple(vars(search(module)(wl, cfg)).values()))
        except Exception as exc:  # a layer that fits no config: its error is its pick
            picks.append(type(exc).__name__)
    return time.perf_counter() - start, picks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="756da93", help="git revision (default 756da93, "
                        "the heuristic before the vectorised search)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--configs", default=",".join(shipped_configs()))
    args = parser.parse_args()
    cases = [(resnet18_layer(name), load_config(c)) for c in args.configs.split(",")
             for name in RESNET18_LAYERS]
    base = load_baseline(args.baseline)
    times: dict[str, list[float]] = {"baseline": [], "current": []}
    picks: dict[str, list[Any]] = {}
    for i in range(args.repeats):
        for name, module in (("baseline", base), ("current", heuristic)):
            wall, picks[name] = one_pass(module, cases)
            times[name].append(wall)
            print(f"pass {i + 1} {name:8s} {wall:7.2f} s", file=sys.stderr)
    differ = [f"{wl.signature()} on {cfg.name}" for (wl, cfg), a, b in
              zip(cases, picks["baseline"], picks["current"], strict=True) if a != b]
    print(f"{len(cases)} layer-configs ({args.configs}), {args.repeats} passes each")
    for name, ts in times.items():
        print(f"{name:8s} best {min(ts):7.2f} s  median {statistics.median(ts):7.2f} s")
    print(f"speed-up: best {min(times['baseline']) / min(times['current']):.1f}x, median "
          f"{statistics.median(times['baseline']) / statistics.median(times['current']):.1f}x")
    if differ:
        print(f"PICKS DIFFER on {len(differ)}: {', '.join(differ)}")
        return 1
    print("picks identical on every layer-config")
    return 0


if __name__ == "__main__":
    sys.exit(main())
