"""Agreement of the int8 accelerator path with onnxruntime on an ONNX BERT encoder layer.

The layer is the one tests/test_onnx_transformer.py builds node by node as PyTorch exports it
(decomposed LayerNorm, erf GELU, Shape chains, a constant attention mask). It is imported,
quantised with calibration samples, compiled for a config and run on the functional
simulator; the final hidden states are compared with onnxruntime's float ones.

    python benchmarks/onnx_encoder.py [--config default] [--samples 16]

Prints the cosine similarity (min, mean) and the relative L2 error (mean, max) over samples.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import accel
from compiler.graph.onnx_frontend import import_onnx


def main() -> None:
    import onnxruntime as ort
    from test_onnx_transformer import HIDDEN, SEQ, bert_layer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1, help="weights of the layer")
    args = parser.parse_args()
    model = bert_layer(seed=args.seed)
    rng = np.random.default_rng(8)
    calibration = [{"x": rng.standard_normal((1, SEQ, HIDDEN)).astype(np.float32)}
                   for _ in range(8)]
    exe = accel.compile(import_onnx(model), args.config, calibration=calibration)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    cosines, errors = [], []
    for _ in range(args.samples):
        x = rng.standard_normal((1, SEQ, HIDDEN)).astype(np.float32)
        got = exe.run(x, backend="fsim")[0]["hidden_states"].astype(np.float64)
        want = session.run(None, {"x": x})[0].astype(np.float64)
        cosines.append(float(got.ravel() @ want.ravel()
                             / (np.linalg.norm(got) * np.linalg.norm(want))))
        errors.append(float(np.linalg.norm(got - want) / np.linalg.norm(want)))
    print(f"ONNX BERT layer (seq {SEQ}, hidden {HIDDEN}) on {exe.cfg.name}, {args.samples} "
          f"samples: cosine min {min(cosines):.4f} mean {np.mean(cosines):.4f}; relative L2 "
          f"mean {np.mean(errors):.4f} max {max(errors):.4f}")


if __name__ == "__main__":
    main()
