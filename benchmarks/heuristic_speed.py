"""Wall time of the conv2d knob heuristic's search against a baseline revision, whole trees.

For every shipped config and ResNet-18's C1-C12 (as the network gives them: bias, shift, ReLU)
it picks the default knobs with the search as checked out and as of git revision
``--baseline``: the baseline runs in a temporary worktree of that revision, so its helpers
(the contract's cost functions, the micro-op loop choice, the config) are its own too. Each
pass is a fresh process with the compile and knob caches off, the two alternating
``--repeats`` times; it prints each pass's wall time (the search alone, imports and config
loading excluded), the best and median of each and their ratio, and fails if any pick differs.

Run from the repository root: ``python benchmarks/heuristic_speed.py [--baseline REV]
[--repeats N] [--configs a,b]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PASS = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from accel.machine.config import load_config
from compiler.ops import heuristic
from compiler.ops.workloads import RESNET18_LAYERS, resnet18_layer
search = getattr(heuristic, "search_conv2d_knobs", None) or heuristic.default_conv2d_knobs
cases = [(resnet18_layer(n), load_config(c)) for c in sys.argv[2].split(",")
         for n in RESNET18_LAYERS]
start = time.perf_counter()
picks = []
for wl, cfg in cases:
    try:
        picks.append(list(vars(search(wl, cfg)).values()))
    except Exception as exc:  # a layer that fits no config: its error is its pick
        picks.append(type(exc).__name__)
wall = time.perf_counter() - start
print(json.dumps({"wall": wall, "picks": picks,
                  "cases": [f"{wl.signature()} on {cfg.name}" for wl, cfg in cases]}))
"""


def one_pass(tree: Path, configs: str) -> dict:
    """One fresh process's search over the layer-configs in ``tree``."""
    env = {**os.environ, "ACCEL_CACHE_DIR": "off", "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", PASS, str(tree), configs], cwd=tree, env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from accel.machine.config import shipped_configs

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="756da93", help="git revision (default 756da93, "
                        "the heuristic before the vectorised search)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--configs", default=",".join(shipped_configs()))
    args = parser.parse_args()
    times: dict[str, list[float]] = {"baseline": [], "current": []}
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), args.baseline],
                       cwd=ROOT, check=True)
        try:
            for i in range(args.repeats):
                for name, tree in (("baseline", base), ("current", ROOT)):
                    runs[name] = one_pass(tree, args.configs)
                    times[name].append(runs[name]["wall"])
                    print(f"pass {i + 1} {name:8s} {runs[name]['wall']:7.2f} s",
                          file=sys.stderr)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT,
                           check=True)
    cases = runs["current"]["cases"]
    differ = [case for case, a, b in zip(cases, runs["baseline"]["picks"],
                                         runs["current"]["picks"], strict=True) if a != b]
    print(f"{len(cases)} layer-configs ({args.configs}), {args.repeats} passes each")
    for name, ts in times.items():
        print(f"{name:8s} best {min(ts):7.3f} s  median {statistics.median(ts):7.3f} s")
    print(f"speed-up: best {min(times['baseline']) / min(times['current']):.1f}x, median "
          f"{statistics.median(times['baseline']) / statistics.median(times['current']):.1f}x")
    if differ:
        print(f"PICKS DIFFER on {len(differ)}: {', '.join(differ)}")
        return 1
    print("picks identical on every layer-config")
    return 0


if __name__ == "__main__":
    sys.exit(main())
