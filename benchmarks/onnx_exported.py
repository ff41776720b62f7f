"""ONNX models as ``torch.onnx.export`` writes them: which import, and how the imported ones
agree with onnxruntime (issue 57, item 3).

Two steps, in two environments: PyTorch is not one of accel's dependencies.

1. ``export DIR`` (needs ``torch`` and ``torchvision``, with ``onnx`` and ``onnxscript``):
   one model of each torchvision classification family, with its random initial weights
   (nothing is downloaded), and a ``torch.nn.TransformerEncoderLayer``, exported at opset 18
   by the default (dynamo) exporter, batch 1, 224x224 (Inception 299x299). Writes
   ``DIR/<name>.onnx`` and ``DIR/ops.json`` (each model's operator types, or why it did not
   export).

       python -m venv /tmp/export && /tmp/export/bin/pip install torch==2.14.1 \\
           torchvision==0.29.1 onnx onnxscript
       /tmp/export/bin/python benchmarks/onnx_exported.py export out/onnx

2. ``run DIR`` (accel's environment, with onnxruntime): imports every model (each is
   imported or refused with the one line naming the operator and the node); then, for the
   models of ``--agree`` (default: resnet18, mobilenet_v2, efficientnet_b0 and the encoder
   layer), quantises with ``--calibration`` samples, runs ``--samples`` random inputs on the
   functional simulator and compares with onnxruntime's float outputs (cosine, and top-1
   agreement for the classifiers), and runs one input on the timing simulator on
   ``--config`` (cycles, roofline efficiency, MACs offloaded).

       python benchmarks/onnx_exported.py run out/onnx [--config default] [--samples 8]

Random weights are a harder test of agreement than trained ones (no BatchNorm statistics
that match the activations); top-1 agreement on random inputs counts where the int8 run and
onnxruntime pick the same class.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

#: One model per torchvision classification family, and the input side of each.
FAMILIES = ("alexnet", "vgg11", "resnet18", "resnext50_32x4d", "wide_resnet50_2",
            "squeezenet1_0", "densenet121", "googlenet", "inception_v3", "shufflenet_v2_x0_5",
            "mobilenet_v2", "mobilenet_v3_small", "mnasnet0_5", "efficientnet_b0",
            "efficientnet_v2_s", "regnet_x_400mf", "convnext_tiny", "vit_b_16", "swin_t",
            "maxvit_t")
ENCODER = "transformer_encoder_layer"
AGREE = ("resnet18", "mobilenet_v2", "efficientnet_b0", ENCODER)


def export(out: Path) -> int:
    import onnx
    import torch
    import torchvision

    out.mkdir(parents=True, exist_ok=True)
    ops: dict[str, object] = {}
    models: list[tuple[str, object, tuple[int, ...]]] = [
        (name, lambda n=name: getattr(torchvision.models, n)(weights=None, **(
            {"aux_logits": False, "init_weights": True} if n in ("googlenet", "inception_v3")
            else {})), (1, 3, 299, 299) if name == "inception_v3" else (1, 3, 224, 224))
        for name in FAMILIES]
    models.append((ENCODER, lambda: torch.nn.TransformerEncoderLayer(
        d_model=256, nhead=4, dim_feedforward=1024, batch_first=True), (1, 64, 256)))
    for name, make, shape in models:
        start = time.perf_counter()
        torch.manual_seed(0)
        try:
            model = make().eval()
            x = torch.randn(*shape)
            path = out / f"{name}.onnx"
            torch.onnx.export(model, (x,), str(path), opset_version=18, dynamo=True,
                              input_names=["x"], output_names=["y"])
            graph = onnx.load(str(path)).graph
            ops[name] = sorted({n.op_type for n in graph.node})
            print(f"{name}: {len(graph.node)} nodes, {len(ops[name])} operator types "
                  f"({time.perf_counter() - start:.1f} s)", file=sys.stderr)
        except Exception as exc:  # a family the exporter cannot take: recorded, not fatal
            ops[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            print(f"{name}: not exported: {ops[name]['error']}", file=sys.stderr)
    (out / "ops.json").write_text(json.dumps({"torch": torch.__version__,
                                              "torchvision": torchvision.__version__,
                                              "opset": 18, "models": ops}, indent=2) + "\n")
    return 0


def run(src: Path, config: str, samples: int, calibration: int, agree: list[str]) -> int:
    import numpy as np
    import onnxruntime as ort

    import accel
    from compiler.graph.ir import GraphError

    info = json.loads((src / "ops.json").read_text())
    print(f"exported with torch {info['torch']}, torchvision {info['torchvision']}, opset "
          f"{info['opset']}")
    every_op: set[str] = set()
    refused: dict[str, str] = {}
    imported: dict[str, object] = {}
    for name, ops in info["models"].items():
        if isinstance(ops, dict):
            print(f"{name:26s} not exported ({ops['error'][:80]})")
            continue
        every_op.update(ops)
        start = time.perf_counter()
        try:
            imported[name] = accel.load_model(str(src / f"{name}.onnx"))
            print(f"{name:26s} imported: {len(imported[name].nodes)} nodes "  # type: ignore
                  f"({time.perf_counter() - start:.1f} s)")
        except GraphError as exc:
            refused[name] = str(exc)
            print(f"{name:26s} refused: {exc}")
    print(f"operator types emitted: {len(every_op)}: {', '.join(sorted(every_op))}")
    print(f"models imported: {len(imported)} of {len(imported) + len(refused)}")
    failed = False
    for name in agree:
        if name not in imported:
            print(f"{name}: not imported, no agreement figures")
            failed = True
            continue
        graph = imported[name]
        rng = np.random.default_rng(11)
        shape = graph.values[graph.inputs[0]].shape  # type: ignore[attr-defined]

        def draw(rng: np.random.Generator = rng, shape: tuple[int, ...] = shape) -> np.ndarray:
            return rng.standard_normal(shape).astype(np.float32)

        cal = [{graph.inputs[0]: draw()} for _ in range(calibration)]  # type: ignore
        start = time.perf_counter()
        exe = accel.compile(graph, config, calibration=cal)
        session = ort.InferenceSession(str(src / f"{name}.onnx"),
                                       providers=["CPUExecutionProvider"])
        cosines, top1 = [], []
        for _ in range(samples):
            x = draw()
            got = next(iter(exe.run(x, backend="fsim")[0].values())).astype(np.float64)
            want = session.run(None, {session.get_inputs()[0].name: x})[0].astype(np.float64)
            cosines.append(float(got.ravel() @ want.ravel()
                                 / (np.linalg.norm(got) * np.linalg.norm(want) or 1.0)))
            if want.ndim == 2:
                top1.append(bool(np.argmax(got) == np.argmax(want)))
        _, report = exe.run(draw(), backend="sim")
        t = report.totals()
        print(f"{name}: cosine min {min(cosines):.4f} mean {np.mean(cosines):.4f} over "
              f"{samples} inputs" + (f"; top-1 agreement {sum(top1)}/{len(top1)}" if top1
                                     else "")
              + f"; on {config}: {t['accel_cycles']:,} cycles, roofline efficiency "
              f"{t['roofline_efficiency']:.3f}, MACs offloaded "
              f"{100 * t['offloaded_mac_share']:.1f}% ({time.perf_counter() - start:.0f} s)")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("export")
    p.add_argument("dir", type=Path)
    p = sub.add_parser("run")
    p.add_argument("dir", type=Path)
    p.add_argument("--config", default="default")
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--calibration", type=int, default=4)
    p.add_argument("--agree", default=",".join(AGREE))
    args = parser.parse_args()
    if args.step == "export":
        return export(args.dir)
    return run(args.dir, args.config, args.samples, args.calibration,
               [a for a in args.agree.split(",") if a])


if __name__ == "__main__":
    sys.exit(main())
