"""Laying attention's second operand into the weight buffer's layout: at run time or by a pass.

``batch_matmul``'s second operand (``K^T`` for the scores, ``V`` for the context) must reach
DRAM in the weight buffer's blocked layout ``(G, N/o, K/i, o, i)``. Two ways, measured here on
the host work each does per encoder layer (the accelerator program and its cycles are the same
either way):

- **runtime** (what accel does): the head split runs on the fallback as the graph says
  (``reshape`` then ``transpose``, both views of the projection's output), and the operand's
  ``pack`` lays the result into the weight layout when the layer runs (one strided copy);
- **layout pass**: a pass that gives the head-split value the weight layout as its type, so
  that one strided copy goes from the projection's ``(B, S, H)`` output straight to the weight
  layout (the transpose and the pack fused).

Prints the median microseconds of each per layer (two operands) and their ratio, for
BERT-base's and ViT-tiny's shapes on the default and vta_1x16x16 configs.

    python benchmarks/attention_layout.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import accel
from compiler.ops.batch_matmul import BatchMatmulWorkload, pack_weight_operand
from runtime import kernels


def fused(x: np.ndarray, heads: int, transposed: bool, o: int, i: int) -> np.ndarray:
    """``(B, S, H)`` straight to the weight layout of the head-split operand, one copy."""
    b, s, h = x.shape
    d = h // heads
    # K^T per head is (d, S) as b; its transpose, the weight rows, is K (S, d): rows S.
    n, k = (s, d) if transposed else (d, s)
    nb, kb = -(-n // o), -(-k // i)
    out = np.zeros((b * heads, nb, kb, o, i), np.int8)
    split = x.reshape(b, s, heads, d).transpose(0, 2, 1, 3)  # (B, heads, S, d): a view
    rows = split if transposed else split.swapaxes(2, 3)     # (.., N, K)
    rows = rows.reshape(b * heads, n, k)
    if n % o == 0 and k % i == 0:
        out[:] = rows.reshape(b * heads, nb, o, kb, i).transpose(0, 1, 3, 2, 4)
    else:
        padded = np.zeros((b * heads, nb * o, kb * i), np.int8)
        padded[:, :n, :k] = rows
        out[:] = padded.reshape(b * heads, nb, o, kb, i).transpose(0, 1, 3, 2, 4)
    return out


def runtime(x: np.ndarray, heads: int, transposed: bool, cfg: accel.HwConfig) -> np.ndarray:
    """What the graph and the operand's pack do: transpose on the fallback, then pack."""
    b, s, h = x.shape
    d = h // heads
    split = kernels.reshape(x, (b, s, heads, d))
    perm = (0, 2, 3, 1) if transposed else (0, 2, 1, 3)
    operand = kernels.transpose(split, perm)                 # (B, heads, d, S) or (.., S, d)
    wl = BatchMatmulWorkload(b * heads, s, operand.shape[-2], operand.shape[-1])
    return pack_weight_operand(operand, wl, cfg)


def median_us(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=51)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'model':<10} {'config':<12} {'runtime us':>11} {'pass us':>9} {'pass/runtime':>13}")
    for model, seq, hidden, heads in (("bert_base", 128, 768, 12), ("vit_tiny", 197, 192, 3)):
        x = rng.integers(-128, 128, (1, seq, hidden), dtype=np.int8)
        for name in ("default", "vta_1x16x16"):
            cfg = accel.load_config(name)
            for transposed in (True, False):  # K^T and V
                a = runtime(x, heads, transposed, cfg)
                b = fused(x, heads, transposed, cfg.block_out, cfg.block_in)
                assert np.array_equal(a, b), "the two layouts differ"
            t_run = t_pass = 0.0
            for t in (True, False):
                t_run += median_us(lambda t=t, x=x, h=heads, c=cfg: runtime(x, h, t, c),
                                   args.repeats)
                t_pass += median_us(lambda t=t, x=x, h=heads, c=cfg: fused(
                    x, h, t, c.block_out, c.block_in), args.repeats)
            print(f"{model:<10} {name:<12} {t_run:>11.0f} {t_pass:>9.0f} {t_pass / t_run:>13.2f}")


if __name__ == "__main__":
    main()
