"""Generating tokens with a decoder and its KV cache: a prefill, then one step per token.

:func:`generate` compiles the prefill graph of the prompt and one decoding graph per step
(:class:`compiler.graph.decoder.DecoderModel`: the cache grows by a token per step, so each
step's attention GEMMs have their own shapes; the projections' programs and timings are the
compiler's and the timing simulator's cached ones after the first step), runs them in turn,
feeding each step the previous step's token (greedy: the first largest int8 logit) and the
cache the previous graph wrote, and reports:

- **time to first token**: the prefill's accelerator cycles at the config's clock (the
  prefill's logits give the first token);
- **tokens/s**: decoding steps per second of their accelerator time, times the batch;
- **DRAM bytes per token**: a step's DRAM traffic as the timing simulator counts it
  (instructions included), and its compulsory bytes (ROOFLINE.md: the weights, the cache
  read, the activations), per sequence;
- **efficiency against the bandwidth bound**: the steps' compulsory bytes over the DRAM's
  bytes per cycle, against their cycles. At batch 1 every weight is read once per token and
  used for one multiply-accumulate per byte, so the roofline of such a matrix-vector machine
  is its bandwidth (ROOFLINE.md's bound: the steps' roofline efficiency is reported beside).

Times are the accelerator's only; the fallback's host time (norms, softmax, the cache's
append) is reported apart, as for every network. With ``check``, every layer is compared with
the numpy kernels, and the last step's logits and cache with a recomputation of the whole
sequence by the numpy reference executor.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accel.machine.config import HwConfig

__all__ = ["DecodeRun", "generate"]


@dataclass
class DecodeRun:
    """What :func:`generate` measured (see the module docstring)."""

    model: str
    config: str
    backend: str
    clock_mhz: float
    batch: int
    prompt_len: int
    tokens: np.ndarray
    """``(batch, 1 + steps)``: the prefill's token, then each step's."""
    prefill: Any
    """The prefill's :class:`runtime.executable.RunReport`."""
    steps: list[Any] = field(default_factory=list)
    """Each decoding step's :class:`runtime.executable.RunReport`."""
    compulsory_bytes: list[int] = field(default_factory=list)
    """Each step's compulsory DRAM bytes (its accelerator layers', ROOFLINE.md)."""
    bytes_per_cycle: float = 8.0
    recompute_equal: bool | None = None
    """The last step's logits and cache equal the full sequence's recomputation (None: not
    checked)."""
    compile_s: float = 0.0
    run_s: float = 0.0

    @property
    def check(self) -> bool | None:
        """Every layer of every graph bit-exact, and the recomputation equal (None: not
        checked)."""
        checks = [r.check for r in (self.prefill, *self.steps)]
        checks += [self.recompute_equal] if self.steps else []
        return None if any(c is None for c in checks) else all(checks)

    @property
    def decode_cycles(self) -> int:
        return sum(r.accel_cycles for r in self.steps)

    def summary(self) -> dict[str, Any]:
        """The figures, as numbers (None where the backend gives no cycles)."""
        timed = self.backend != "fsim"
        n = len(self.steps)
        hz = self.clock_mhz * 1e6
        cycles = self.decode_cycles
        dram = sum(sum((layer.dram_kib or 0.0) * 1024 for layer in r.layers
                       if layer.target == "accel") for r in self.steps)
        bandwidth_bound = sum(self.compulsory_bytes) / self.bytes_per_cycle
        bound = sum(r.bound_cycles for r in self.steps)
        per = max(n * self.batch, 1)
        return {
            "model": self.model, "config": self.config, "backend": self.backend,
            "clock_mhz": self.clock_mhz, "batch": self.batch, "prompt_len": self.prompt_len,
            "decode_steps": n,
            "prefill_cycles": self.prefill.accel_cycles if timed else None,
            "ttft_ms": self.prefill.accel_cycles / hz * 1e3 if timed else None,
            "decode_cycles": cycles if timed else None,
            "cycles_per_token": cycles / n if timed and n else None,
            "tokens_per_s": n * self.batch * hz / cycles if timed and cycles else None,
            "dram_bytes_per_token": dram / per if timed and n else None,
            "compulsory_bytes_per_token": sum(self.compulsory_bytes) / per if n else None,
            "bandwidth_bound_cycles": bandwidth_bound,
            "bandwidth_efficiency": bandwidth_bound / cycles if timed and cycles else None,
            "decode_roofline_efficiency": bound / cycles if timed and cycles else None,
            "prefill_roofline_efficiency": self.prefill.roofline_efficiency if timed else None,
            "fallback_host_ms": sum(r.fallback_host_ms for r in (self.prefill, *self.steps)),
            "tokens": self.tokens.tolist(),
            "check": self.check,
            "recompute_equal": self.recompute_equal,
            "compile_s": self.compile_s, "run_s": self.run_s,
        }


def _compulsory_bytes(exe: Any) -> int:
    return sum(int(exe.entries[n].dram_bytes(exe.workloads[n])) for n in exe.compiled)


def _next_token(logits: np.ndarray) -> np.ndarray:
    """Greedy: each sequence's first largest logit, as ``(batch, 1)`` int32 ids."""
    return np.argmax(logits.reshape(logits.shape[0], -1), axis=1).astype(np.int32)[:, None]


def generate(model: Any, cfg: HwConfig, prompt: np.ndarray, steps: int, backend: str = "sim",
             fallback: str = "cpu", check: bool = True,
             progress: Callable[[str, int, int], None] | None = None) -> DecodeRun:
    """Prefill ``prompt`` (int32 ``(batch, P)``) and decode ``steps`` tokens on ``cfg``.

    ``model`` is a :class:`compiler.graph.decoder.DecoderModel` of the prompt's batch;
    ``progress(phase, k, n)`` is called before each graph (``"prefill"`` then ``"decode"``).

    Raises
    ------
    compiler.graph.ir.GraphError
        A prompt of the wrong batch or dtype, or prompt and steps beyond the model's
        positions.
    """
    from compiler.graph.ir import GraphError
    from compiler.graph.reference import run_reference
    from runtime.network import compile_network

    prompt = np.asarray(prompt)
    if prompt.ndim != 2 or prompt.shape[0] != model.batch or prompt.dtype != np.int32:
        raise GraphError(f"{model.name}: the prompt must be int32 ({model.batch}, P), got "
                         f"{prompt.dtype} {prompt.shape}")
    p = prompt.shape[1]
    top = model.config.max_positions
    if p + steps > top:
        raise GraphError(f"{model.name}: a prompt of {p} and {steps} decoded tokens exceed "
                         f"its {top} positions")
    compile_s = run_s = 0.0

    def run(graph: Any, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], Any, Any]:
        nonlocal compile_s, run_s
        t0 = time.perf_counter()
        exe = compile_network(graph, cfg)
        t1 = time.perf_counter()
        outs, report = exe.run(feeds, backend=backend, fallback=fallback, check=check)
        compile_s += t1 - t0
        run_s += time.perf_counter() - t1
        return [outs[o] for o in graph.outputs], report, exe

    if progress is not None:
        progress("prefill", 0, 1)
    (logits, *cache), pre, _ = run(model.prefill(p), {"input_ids": prompt})
    tokens = [_next_token(logits)]
    result = DecodeRun(model.name, cfg.name, backend, cfg.clock_mhz, model.batch, p,
                       np.zeros((model.batch, 0), np.int32), pre,
                       bytes_per_cycle=cfg.dram.bytes_per_cycle)
    for t in range(steps):
        if progress is not None:
            progress("decode", t, steps)
        graph = model.decode(p + t)
        feeds = {"input_ids": tokens[-1]}
        feeds.update(zip([n for n in graph.inputs if n != "input_ids"], cache, strict=True))
        (logits, *cache), report, exe = run(graph, feeds)
        result.steps.append(report)
        result.compulsory_bytes.append(_compulsory_bytes(exe))
        tokens.append(_next_token(logits))
    if progress is not None:
        progress("decode", steps, steps)
    result.tokens = np.concatenate(tokens, axis=1)
    result.compile_s, result.run_s = compile_s, run_s
    if check and steps:
        # The whole sequence but the last token (which no step has read yet), recomputed.
        full = model.prefill(p + steps)
        seq = np.concatenate([prompt, result.tokens[:, :-1]], axis=1)
        ref = run_reference(full, {"input_ids": seq})
        result.recompute_equal = all(
            np.array_equal(ref[name], value)
            for name, value in zip(full.outputs, [logits, *cache], strict=True))
    return result
