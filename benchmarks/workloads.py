"""The workloads issue's figures: MobileNetV2 on each config, and ResNet-18's cycles per image
by batch.

For each config (``--configs``, default ``default,vta_1x16x16``) it runs, on the ``sim``
backend with the check on (every layer bit-exact with the numpy reference network):

- ``mobilenet_v2`` at 224x224: total accelerator cycles, the roofline bound and efficiency
  (``../shared/ROOFLINE.md``, over the accelerator layers), the MACs offloaded (the depthwise
  convolutions run on the CPU fallback and count in the total), and how many layers ran where;
- ``resnet18`` at 224x224 at each batch of ``--batches`` (default ``1,4,16``): cycles, cycles per
  image and their ratio to batch 1's.

    python benchmarks/workloads.py [--configs default,vta_1x16x16] [--batches 1,4,16]
"""

from __future__ import annotations

import argparse
import sys
import time

import accel


def run(model: str, config: str, batch: int = 1) -> tuple[dict, list]:
    graph = accel.load_model(model, batch=batch)
    x, calibration = accel.sample_inputs(graph, 0)
    exe = accel.compile(graph, config, calibration=calibration)
    _, report = exe.run(x, backend="sim", check=True)
    if report.check is not True:
        raise SystemExit(f"{model} on {config} (batch {batch}): not bit-exact")
    return report.totals(), report.layers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="default,vta_1x16x16")
    parser.add_argument("--batches", default="1,4,16")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    for config in args.configs.split(","):
        start = time.perf_counter()
        t, layers = run("mobilenet_v2", config)
        where = {target: sum(layer.target == target for layer in layers)
                 for target in ("accel", "cpu")}
        dw = sum(layer.target == "cpu" and layer.op == "conv2d" for layer in layers)
        print(f"mobilenet_v2 on {config}: {t['accel_cycles']:,} cycles, bound "
              f"{t['bound_cycles']:,.0f}, roofline efficiency {t['roofline_efficiency']:.3f}, "
              f"MACs offloaded {100 * t['offloaded_mac_share']:.2f}%; {where['accel']} layers "
              f"on the accelerator, {where['cpu']} on the CPU ({dw} of them depthwise "
              f"convolutions); bit-exact ({time.perf_counter() - start:.1f} s)", flush=True)
        first = None
        for batch in batches:
            start = time.perf_counter()
            t, _ = run("resnet18", config, batch)
            per = t["accel_cycles_per_inference"]
            first = first or per
            print(f"resnet18 on {config}, batch {batch:>3}: {t['accel_cycles']:>12,} cycles, "
                  f"{per:>12,.0f} per image ({per / first:.3f}x batch {batches[0]}'s), roofline "
                  f"efficiency {t['roofline_efficiency']:.3f}; bit-exact "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
