"""The issue's 24-config sweep (GEMM shape x buffer sizes x DRAM width) over ResNet-18 C2-C12.

Runs ``accel sweep configs/sweeps/resnet18_24.yaml`` (24 configs x 11 layers = 264 points on
the timing simulator) three times, each in a fresh folder with a fresh compile cache
(``ACCEL_CACHE_DIR``) so no run reuses another's compiled programs:

1. on 1 worker (points run in the ``accel sweep`` process itself);
2. on 2 worker processes: wall times and the speedup, and a check that both runs wrote the
   same rows (timing and worker columns aside);
3. the resume check: a 2-worker run killed with SIGKILL (the whole process group) once a
   third of the rows are written, then the same command again; every point must be there
   exactly once and the rows written before the kill unchanged.

It prints the wall times, the speedup, the resume result and the results folder of run 2,
which is kept for ``accel plot``.

    python benchmarks/sweep.py [--root /tmp/sweep24] [--spec configs/sweeps/resnet18_24.yaml]
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accel.dse import expand, load_spec, read_results

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("wall_seconds", "finished_at", "worker", "compile_seconds")


def sweep_cmd(spec: Path, out: Path, workers: int) -> list[str]:
    return [sys.executable, "-m", "accel", "sweep", str(spec), "--out", str(out),
            "--workers", str(workers), "--quiet"]


def run(spec: Path, out: Path, workers: int, cache: Path) -> tuple[float, str]:
    """One complete ``accel sweep`` run; returns (wall seconds, its summary line)."""
    env = dict(os.environ, ACCEL_CACHE_DIR=str(cache))
    start = time.perf_counter()
    proc = subprocess.run(sweep_cmd(spec, out, workers), cwd=ROOT, env=env, text=True,
                          capture_output=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"accel sweep failed ({proc.returncode}): {proc.stderr.strip()}")
    return wall, proc.stdout.splitlines()[0]


def comparable(folder: Path) -> list[dict[str, object]]:
    rows = read_results(folder)
    return [{k: v for k, v in r.items() if k not in TIMING}
            for r in sorted(rows, key=lambda r: r["point_index"])]


def data_lines(path: Path) -> int:
    try:
        return max(0, path.read_bytes().count(b"\n") - 1)
    except FileNotFoundError:
        return 0


def resume_check(spec: Path, out: Path, cache: Path, total: int) -> str:
    """Kill a 2-worker sweep after a third of its rows, run it again, check every point once."""
    env = dict(os.environ, ACCEL_CACHE_DIR=str(cache))
    proc = subprocess.Popen(sweep_cmd(spec, out, 2), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    csv = out / "results.csv"
    while data_lines(csv) < total // 3 and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        return f"FAILED: the sweep ended (status {proc.returncode}) before it was killed"
    tail_torn = not csv.read_bytes().endswith(b"\n")
    before = read_results(out)
    wall, line = run(spec, out, 2, cache)
    after = read_results(out)
    ids = collections.Counter(r["point_id"] for r in after)
    expected = {p.point_id for p in expand(load_spec(spec))}
    dupes = sum(n > 1 for n in ids.values())
    missing = len(expected - set(ids))
    kept = after[: len(before)] == before
    ok = not dupes and not missing and kept and len(after) == total
    return (f"{'ok' if ok else 'FAILED'}: killed (SIGKILL) after {len(before)}/{total} rows"
            f"{' with a torn last line' if tail_torn else ''}; re-run in {wall:.1f} s: "
            f"{line.split(': ', 1)[1]}; {len(after)} rows, {len(ids)} distinct points, "
            f"{dupes} duplicated, {missing} missing, rows before the kill "
            f"{'unchanged' if kept else 'CHANGED'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--spec", default=str(ROOT / "configs" / "sweeps" / "resnet18_24.yaml"),
                        help="sweep spec (default: the shipped 24-config ResNet-18 sweep)")
    parser.add_argument("--root", default=None,
                        help="folder for the runs' results and caches (default: a new "
                             "temporary folder, kept)")
    args = parser.parse_args()
    spec_path = Path(args.spec).resolve()
    spec = load_spec(spec_path)
    points = expand(spec)
    configs = len({p.overrides for p in points})
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="accel-sweep-"))
    root.mkdir(parents=True, exist_ok=True)
    for name in ("workers1", "workers2", "resume"):
        if (root / name).exists():
            raise SystemExit(f"{root / name} exists; pass an empty --root")
    print(f"sweep {spec.name}: {configs} configs x {len(spec.workloads)} workload items = "
          f"{len(points)} points, backend {spec.backend}; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    walls = {}
    for workers in (1, 2):
        out = root / f"workers{workers}"
        wall, line = run(spec_path, out, workers, root / f"cache{workers}")
        walls[workers] = wall
        print(f"{workers} worker{'s' if workers > 1 else ' '}: {wall:7.1f} s wall  ({line})")
    print(f"speedup 1 -> 2 workers: {walls[1] / walls[2]:.2f}x")
    same = comparable(root / "workers1") == comparable(root / "workers2")
    print(f"rows of the 1- and 2-worker runs (timing and worker columns aside): "
          f"{'identical' if same else 'DIFFERENT'}")
    rows = read_results(root / "workers2")
    status = collections.Counter(str(r["status"]) for r in rows)
    print(f"rows: {len(rows)} ({', '.join(f'{n} {s}' for s, n in sorted(status.items()))})")
    result = resume_check(spec_path, root / "resume", root / "cache_resume", len(points))
    print(f"resume check: {result}")
    print(f"results: {root / 'workers2'}  (results.csv, results.parquet, spec.yaml)")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0 if same and result.startswith("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
