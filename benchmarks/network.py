"""End-to-end network figures: `accel run resnet18` wall time, cycles, memory plan, ONNX agreement.

With ``--breakdown`` it prints instead, in one run on warm caches (a fresh cache folder, filled
by a warm-up run of each command, and the project's bytecode compiled), the toolkit's own
speed against the BLAS floor: the float32 time of ResNet-18's accelerator convolutions as one
im2col matrix product each (``numpy.matmul``, best of 5; the stem as compiled, folded), then
each command's best wall time
of ``--repeats`` and its ratio to that floor (``accel run resnet18``, with ``--out``,
``accel run resnet50 --no-check``, ``accel run bert_base --no-trace``, ``accel --help``,
``accel config show``), then ``accel run resnet18``'s parts measured in one process: imports
(``import accel.cli`` in a fresh interpreter less a bare one), compile (``accel.compile``),
functional (``FunctionalSimulator.run``), timing (the rest of the ``sim`` backend: the fast
engine, waiting on the prefetch worker), the rest of the run (fallback kernels, the layer
checks, the reference network) and outputs (``--out``'s wall time less the plain run's).

    python benchmarks/network.py --breakdown [--repeats 3]

Otherwise it prints, in one run:

- wall time of the whole command ``accel run resnet18`` at 224x224 on ``sim`` (default config,
  check on), beside ``--backend fsim`` and a numpy-only run of the same network (the reference
  executor), as medians of ``--repeats`` runs after one warm-up (so the compile and zoo caches
  are warm; the first, cold run is printed too);
- total accelerator cycles of ResNet-18 on ``default`` and ``vta_1x16x16`` with their DRAM
  parameters, the share of MACs offloaded, and the planned DRAM peak against the naive sum;
- agreement of a small float CNN run through onnxruntime and through the accelerator path
  (int8, power-of-two scales): relative L2 error, cosine similarity and top-1 agreement over
  random inputs.

    python benchmarks/network.py [--repeats 3] [--skip-onnx]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import accel

NUMPY_ONLY = (
    "import numpy as np, accel; exe = accel.compile('resnet18'); "
    "x = np.random.default_rng(0).integers(-128, 128, (1, 3, 224, 224), dtype=np.int8); "
    "exe.reference(x)"
)


ACCEL = str(Path(sys.executable).with_name("accel")) \
    if Path(sys.executable).with_name("accel").exists() else "accel"
"""The ``accel`` script of this interpreter's environment (the venv need not be activated)."""


def wall(cmd: list[str]) -> float:
    if cmd[0] == "accel":
        cmd = [ACCEL, *cmd[1:]]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def command_times(repeats: int) -> None:
    commands = {
        "accel run resnet18 (sim, check)": ["accel", "run", "resnet18"],
        "accel run resnet18 --backend fsim": ["accel", "run", "resnet18", "--backend", "fsim"],
        "numpy-only reference network": [sys.executable, "-c", NUMPY_ONLY],
    }
    with tempfile.TemporaryDirectory() as cache:
        os.environ["ACCEL_CACHE_DIR"] = cache
        cold = wall(commands["accel run resnet18 (sim, check)"])
        times: dict[str, list[float]] = {k: [] for k in commands}
        for cmd in commands.values():
            wall(cmd)  # warm-up
        for _ in range(repeats):
            for name, cmd in commands.items():
                times[name].append(wall(cmd))
    print(f"cold run (empty caches) of accel run resnet18: {cold:.2f} s")
    for name, ts in times.items():
        print(f"{name:<36} median {statistics.median(ts):6.2f} s  "
              f"(min {min(ts):.2f}, max {max(ts):.2f}, {repeats} runs)")


def cycles_and_plan() -> None:
    x = np.random.default_rng(0).integers(-128, 128, (1, 3, 224, 224), dtype=np.int8)
    for name in ("default", "vta_1x16x16"):
        cfg = accel.load_config(name)
        exe = accel.compile("resnet18", cfg)
        _, report = exe.run(x, backend="sim")
        plan = report.memory_plan
        d = cfg.dram
        print(f"resnet18 on {cfg.name}: {report.accel_cycles} accelerator cycles "
              f"({report.accel_sim_ms:.1f} ms at {cfg.clock_mhz:g} MHz; "
              f"DRAM {d.bytes_per_cycle} B/cycle, "
              f"latency {d.latency} cycles, bursts of {d.max_burst} B); MACs offloaded "
              f"{100 * report.offloaded_mac_share:.2f}%; DRAM plan peak "
              f"{plan['peak_bytes'] / 1024:.0f} KiB vs naive {plan['naive_bytes'] / 1024:.0f} KiB")


def onnx_agreement(samples: int = 32) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    w = {
        "w1": rng.normal(0, 0.3, (16, 3, 3, 3)), "b1": rng.normal(0, 0.1, 16),
        "g": rng.uniform(0.5, 1.5, 16), "be": rng.normal(0, 0.1, 16),
        "m": rng.normal(0, 0.1, 16), "v": rng.uniform(0.5, 2.0, 16),
        "w2": rng.normal(0, 0.15, (16, 16, 3, 3)), "b2": rng.normal(0, 0.1, 16),
        "wf": rng.normal(0, 0.2, (10, 16)), "bf": rng.normal(0, 0.1, 10),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "be", "m", "v"], ["n1"], name="bn"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cnn.onnx")
        onnx.save(model, path)
        calib = [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
                 for _ in range(32)]
        exe = accel.compile(path, "default", calibration=calib)
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        errors, cosines, top1 = [], [], 0
        for _ in range(samples):
            x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
            (got,) = exe.run(x, backend="fsim")[0].values()
            want = session.run(None, {"x": x})[0]
            errors.append(float(np.linalg.norm(got - want) / np.linalg.norm(want)))
            cosines.append(float(np.dot(got.ravel(), want.ravel())
                                 / (np.linalg.norm(got) * np.linalg.norm(want))))
            top1 += int(np.argmax(got) == np.argmax(want))
    print(f"ONNX CNN (conv+bn+relu, conv, add+relu, pool, gemm), {samples} random inputs: "
          f"relative L2 error mean {np.mean(errors):.3f} worst {max(errors):.3f}; cosine "
          f"mean {np.mean(cosines):.4f} worst {min(cosines):.4f}; top-1 agreement "
          f"{top1}/{samples}")


def blas_floor() -> float:
    """Best of 5 float32 wall times of ResNet-18's accelerator convolutions as im2col
    products."""
    from compiler.ops.conv2d import Conv2dWorkload

    rng = np.random.default_rng(0)
    exe = accel.compile("resnet18")
    mats = []
    for op in exe.compiled.values():
        wl = op.workload
        if isinstance(wl, Conv2dWorkload):
            m = wl.batch * wl.out_height * wl.out_width
            k = wl.in_channels * wl.kernel_h * wl.kernel_w
            mats.append((rng.standard_normal((m, k), dtype=np.float32),
                         rng.standard_normal((k, wl.out_channels), dtype=np.float32)))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for a, b in mats:
            np.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return best


def _timed(fn: Any, total: list[float]) -> Any:
    """``fn``, with its wall time added to ``total[0]`` at every call."""
    def wrapper(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            total[0] += time.perf_counter() - start

    return wrapper


def parts_of_a_run() -> dict[str, float]:
    """``accel run resnet18``'s compile and run parts, measured in this process (caches warm)."""
    import runtime.backends
    import sim.functional

    functional, in_sim = [0.0], [0.0]
    fsim_run = sim.functional.FunctionalSimulator.run
    sim.functional.FunctionalSimulator.run = _timed(fsim_run, functional)
    backend = runtime.backends._BACKENDS["sim"]
    runtime.backends._BACKENDS["sim"] = runtime.backends.Backend(
        backend.caps, _timed(backend.run, in_sim))
    from compiler.ops.compiled import cache_clear
    from compiler.ops.heuristic import default_conv2d_knobs

    cache_clear()  # as a fresh process finds them: the disk caches warm, memory empty
    default_conv2d_knobs.cache_clear()
    try:
        start = time.perf_counter()
        graph = accel.load_model("resnet18")
        x, calibration = accel.sample_inputs(graph, 0)
        exe = accel.compile(graph, calibration=calibration)
        compiled = time.perf_counter()
        exe.run(x, backend="sim", check=True)
        exe.reference(x)
        ran = time.perf_counter()
    finally:
        runtime.backends._BACKENDS["sim"] = backend
        sim.functional.FunctionalSimulator.run = fsim_run
    return {"compile": compiled - start, "functional": functional[0],
            "timing": in_sim[0] - functional[0],
            "rest of the run": ran - compiled - in_sim[0]}


def warm_bytecode() -> None:
    """Write the project's bytecode caches (``__pycache__``), as a wheel's install does and as
    any import does unless ``PYTHONDONTWRITEBYTECODE`` is set (it is on some machines,
    and then every command would compile the project's sources anew: 0.2 s of each)."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in ("accel", "compiler", "runtime", "sim", "hw"):
        compileall.compile_dir(root / package, quiet=1)


def breakdown(repeats: int) -> None:
    floor = blas_floor()
    print(f"BLAS floor (float32 im2col products of ResNet-18's convolutions, best of 5): "
          f"{floor:.4f} s")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["ACCEL_CACHE_DIR"] = str(Path(tmp) / "cache")
        out = str(Path(tmp) / "out")
        commands = {
            "accel run resnet18": ["accel", "run", "resnet18"],
            "accel run resnet18 --out DIR": ["accel", "run", "resnet18", "--out", out],
            "accel run resnet50 --no-check": ["accel", "run", "resnet50", "--no-check"],
            "accel run bert_base --no-trace": ["accel", "run", "bert_base", "--no-trace"],
            "accel --help": ["accel", "--help"],
            "accel config show": ["accel", "config", "show"],
        }
        warm_bytecode()
        for cmd in commands.values():
            wall(cmd)  # warm-up: fills the caches
            shutil.rmtree(out, ignore_errors=True)
        best: dict[str, float] = {}
        for _ in range(repeats):
            for name, cmd in commands.items():
                best[name] = min(best.get(name, float("inf")), wall(cmd))
                shutil.rmtree(out, ignore_errors=True)
        bare = min(wall([sys.executable, "-c", "pass"]) for _ in range(repeats))
        imports = min(wall([sys.executable, "-c", "import accel.cli"])
                      for _ in range(repeats)) - bare
        parts = parts_of_a_run()
    print(f"whole commands, best of {repeats}, warm caches:")
    for name, t in best.items():
        print(f"  {name:<34} {t:7.2f} s   {t / floor:8.0f}x the floor")
    print("accel run resnet18 by part:")
    parts = {"imports": imports, **parts,
             "outputs (--out less plain)": best["accel run resnet18 --out DIR"]
             - best["accel run resnet18"]}
    for name, t in parts.items():
        print(f"  {name:<34} {t:7.2f} s   {t / floor:8.0f}x the floor")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-onnx", action="store_true")
    parser.add_argument("--breakdown", action="store_true",
                        help="the toolkit's own speed against the BLAS floor (module docstring)")
    args = parser.parse_args()
    if args.breakdown:
        breakdown(args.repeats)
        return 0
    command_times(args.repeats)
    cycles_and_plan()
    if not args.skip_onnx:
        onnx_agreement()
    return 0


if __name__ == "__main__":
    sys.exit(main())
