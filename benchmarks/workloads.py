"""The workloads issue's figures: MobileNetV2 and EfficientNet-B0 on each config, and
ResNet-18's cycles per image by batch.

For each config (``--configs``, default ``default,vta_1x16x16``) it runs, on the ``sim``
backend with the check on (every layer bit-exact with the numpy reference network):

- ``mobilenet_v2`` and ``efficientnet_b0`` at 224x224: total accelerator cycles, the roofline
  bound and efficiency (``../shared/ROOFLINE.md``, over the accelerator layers), the MACs
  offloaded, and how many layers ran where; then the depthwise convolutions alone (their cycles,
  bound, roofline efficiency and GEMM utilisation: they run as block groups with diagonal weight
  tiles); then the same network with the depthwise convolutions put on the CPU fallback instead
  (the choice the block groups replace: fewer accelerator cycles, because the fallback's are not
  counted, and 91-93% of the MACs offloaded);
- ``resnet18`` at 224x224 at each batch of ``--batches`` (default ``1,4,16``; ``--batches ""``
  skips it): cycles, cycles per image and their ratio to batch 1's.

    python benchmarks/workloads.py [--configs default,vta_1x16x16] [--batches 1,4,16]
"""

from __future__ import annotations

import argparse
import sys
import time

import accel
from compiler.graph.passes import optimize
from compiler.graph.passes.partition import default_supports
from runtime.executable import Executable


def run(model: str, config: str, batch: int = 1, grouped_on_cpu: bool = False
        ) -> tuple[dict, list]:
    graph = accel.load_model(model, batch=batch)
    x, calibration = accel.sample_inputs(graph, 0)
    if grouped_on_cpu:
        cfg = accel.load_config(config)
        supports = default_supports(cfg)
        exe = Executable(optimize(graph, cfg, calibration=calibration, supports=lambda n, g:
                                  int(n.attrs.get("groups", 1)) == 1 and supports(n, g)), cfg)
    else:
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
    batches = [int(b) for b in args.batches.split(",") if b]
    for config in args.configs.split(","):
        peak = accel.load_config(config).peak_macs_per_cycle
        for model, on_cpu in (("mobilenet_v2", False), ("mobilenet_v2", True),
                              ("efficientnet_b0", False), ("efficientnet_b0", True)):
            start = time.perf_counter()
            t, layers = run(model, config, grouped_on_cpu=on_cpu)
            where = {target: sum(layer.target == target for layer in layers)
                     for target in ("accel", "cpu")}
            dw = [layer for layer in layers if layer.name.endswith(".dw")]
            placed = "on the CPU" if on_cpu else "on the accelerator"
            print(f"{model} on {config}, depthwise {placed}: {t['accel_cycles']:,} "
                  f"cycles, bound {t['bound_cycles']:,.0f}, roofline efficiency "
                  f"{t['roofline_efficiency']:.3f}, MACs offloaded "
                  f"{100 * t['offloaded_mac_share']:.2f}%; {where['accel']} layers on the "
                  f"accelerator, {where['cpu']} on the CPU; bit-exact "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
            if not on_cpu:
                cycles = sum(layer.cycles for layer in dw)
                bound = sum(layer.bound_cycles for layer in dw)
                macs = sum(layer.macs for layer in dw)
                print(f"  its {len(dw)} depthwise layers: {cycles:,} cycles "
                      f"({100 * cycles / t['accel_cycles']:.1f}% of the network's), bound "
                      f"{bound:,.0f}, roofline efficiency {bound / cycles:.3f}, GEMM "
                      f"utilisation {macs / (cycles * peak):.3f}", flush=True)
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
