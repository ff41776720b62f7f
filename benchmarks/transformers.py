"""Summarise `accel run` reports of transformer encoders by layer group.

Run ``accel run bert_base --config C --out DIR`` (or ``vit_tiny``) first, then::

    python benchmarks/transformers.py DIR [DIR ...]

For each report: the accelerator cycles, the GEMM utilisation of the QKV projections, the
attention products (``batch_matmul``), the attention output projection and the FFN layers
(MAC-weighted over the group: the group's MACs over its cycles times the peak), the roofline
efficiency (ROOFLINE.md: the sum of the bounds over the sum of the cycles of the accelerator
layers), the MAC share offloaded, the fallback's host time and its share of the run's, and the
accelerator layers' host time (the simulators', with the operands' packing).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

GROUPS = {
    "qkv": (".query", ".key", ".value"),
    "attention": (),  # batch_matmul layers
    "output": ("attention.output", "attn.output"),
    "ffn": (".intermediate", "ffn.output", "mlp.output"),
}


def group_of(layer: dict[str, Any]) -> str | None:
    if layer["op"] == "batch_matmul":
        return "attention"
    if layer["op"] != "dense":
        return None
    for group, marks in GROUPS.items():
        if any(m in layer["name"] for m in marks):
            return group
    return None


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    totals = report["totals"]
    out: dict[str, Any] = {
        "model": report["model"], "config": report["config"],
        "accel_cycles": totals["accel_cycles"],
        "roofline_efficiency": totals["roofline_efficiency"],
        "offloaded_mac_share": totals["offloaded_mac_share"],
        "fallback_host_ms": totals["fallback_host_ms"],
        "fallback_host_share": totals["fallback_host_share"],
        "accel_host_ms": sum(x["host_ms"] for x in report["layers"] if x["target"] == "accel"),
    }
    for group in GROUPS:
        layers = [x for x in report["layers"] if x["target"] == "accel" and group_of(x) == group]
        cycles = sum(x["cycles"] or 0 for x in layers)
        busy = sum((x["gemm_utilization"] or 0) * (x["cycles"] or 0) for x in layers)
        out[f"util_{group}"] = busy / cycles if cycles else None
        out[f"cycles_{group}"] = cycles
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", help="folders written by accel run --out")
    args = parser.parse_args()
    for d in args.dirs:
        s = summarise(json.loads((Path(d) / "report.json").read_text()))
        print(f"{s['model']} on {s['config']}: {s['accel_cycles']:,} cycles, roofline "
              f"efficiency {s['roofline_efficiency']:.3f}, MACs offloaded "
              f"{100 * s['offloaded_mac_share']:.2f}%, fallback {s['fallback_host_ms']:.0f} ms "
              f"host time ({100 * (s['fallback_host_share'] or 0):.1f}% of the run's), "
              f"accelerator layers {s['accel_host_ms'] / 1000:.1f} s host time")
        print("  GEMM utilisation: " + ", ".join(
            f"{g} {s[f'util_{g}']:.3f} ({s[f'cycles_{g}']:,} cycles)" for g in GROUPS
            if s[f"util_{g}"] is not None))


if __name__ == "__main__":
    main()
