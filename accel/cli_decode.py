"""``accel run gpt2 --prompt-len 128 --decode 32``: a decoder's prefill and decoding steps
(:func:`runtime.decoding.generate`), its time to first token, tokens/s, DRAM bytes per token
and efficiency against the DRAM-bandwidth bound."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from accel.cli_util import CliError, Progress, make_out_dir

__all__ = ["DEFAULT_DECODE", "DEFAULT_PROMPT_LEN", "run_decoder"]

DEFAULT_PROMPT_LEN = 128
DEFAULT_DECODE = 32


def run_decoder(args: argparse.Namespace, cfg: Any, out_dir: Path | None) -> int:
    """``accel run`` of a zoo decoder; the exit status (1: the check failed)."""
    import numpy as np

    from compiler.errors import LoweringError
    from compiler.graph.decoder import decoder_model
    from compiler.graph.ir import GraphError
    from runtime.decoding import generate

    for flag, value in (("--image-size", args.image_size), ("--seq-len", args.seq_len),
                        ("--vcd", args.vcd), ("--tuning-log", args.tuning_log)):
        if value is not None:
            raise CliError(f"{flag} does not apply to the decoder {args.model} (it reads "
                           "--prompt-len and --decode)")
    prompt_len = DEFAULT_PROMPT_LEN if args.prompt_len is None else args.prompt_len
    steps = DEFAULT_DECODE if args.decode is None else args.decode
    if prompt_len < 1:
        raise CliError(f"--prompt-len must be at least 1, not {prompt_len}")
    if steps < 0:
        raise CliError(f"--decode must be at least 0, not {steps}")
    check = True if args.check is None else args.check
    progress = Progress(sys.stderr, quiet=args.quiet)
    try:
        model = decoder_model(args.model, batch=args.batch, seed=args.seed)
        top = model.config.max_positions
        if prompt_len + steps > top:
            raise CliError(f"--prompt-len {prompt_len} and --decode {steps} exceed the "
                           f"{top} positions of {args.model}")
        prompt = np.random.default_rng([args.seed, 2]).integers(
            0, model.config.vocab, (args.batch, prompt_len)).astype(np.int32)

        def show(phase: str, k: int, n: int) -> None:
            if phase == "prefill":
                progress.start("run", None, f"{args.model} prefill of {prompt_len} tokens on "
                               f"{args.backend}")
            elif k == 0:
                progress.start("decode", n, f"{n} steps on {args.backend}")
            else:
                progress.update(k, n, f"step {k}" if k < n else "done")

        run = generate(model, cfg, prompt, steps, backend=args.backend,
                       fallback=args.fallback, check=check, progress=show)
    except (GraphError, LoweringError) as exc:
        raise CliError(str(exc)) from None
    finally:
        progress.end()
    summary = run.summary()
    if out_dir is not None:
        make_out_dir(out_dir, "--out")
        report = {"summary": summary, "prefill": run.prefill.to_dict(),
                  "steps": [r.totals() for r in run.steps]}
        (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print(summary, run, cfg, out_dir)
    return 1 if check and run.check is False else 0


def _print(s: dict[str, Any], run: Any, cfg: Any, out_dir: Path | None) -> None:
    mhz = s["clock_mhz"]
    print(f"{s['model']} on {cfg.name} ({s['backend']}): batch {s['batch']}, prompt of "
          f"{s['prompt_len']} tokens, {s['decode_steps']} decoding steps")
    if s["prefill_cycles"] is not None:
        print(f"prefill: {s['prefill_cycles']:,} cycles = {s['ttft_ms']:.2f} ms at {mhz:g} MHz "
              f"(time to first token, accelerator only); roofline efficiency "
              f"{s['prefill_roofline_efficiency']:.3f}")
    if s["decode_steps"] and s["decode_cycles"] is not None:
        print(f"decode: {s['cycles_per_token']:,.0f} cycles per step = "
              f"{s['tokens_per_s']:.2f} tokens/s at {mhz:g} MHz (batch {s['batch']})")
        print(f"DRAM per token: {s['dram_bytes_per_token'] / 1e6:.2f} MB moved, "
              f"{s['compulsory_bytes_per_token'] / 1e6:.2f} MB compulsory (weights, KV cache, "
              "activations)")
        print(f"bandwidth bound: {s['bandwidth_bound_cycles'] / s['decode_steps']:,.0f} cycles "
              f"per step at {cfg.dram.bytes_per_cycle:g} B/cycle; decode efficiency "
              f"{s['bandwidth_efficiency']:.3f} against it (roofline efficiency "
              f"{s['decode_roofline_efficiency']:.3f})")
    print(f"fallback ({run.prefill.fallback}): {s['fallback_host_ms']:.1f} ms host time "
          "(the float operators and the cache's append)")
    seq0 = s["tokens"][0] if s["tokens"] else []
    print("tokens (sequence 0, greedy): " + " ".join(map(str, seq0[:16]))
          + (" ..." if len(seq0) > 16 else ""))
    if s["check"] is not None:
        layers = len(run.prefill.layers) + sum(len(r.layers) for r in run.steps)
        if s["check"]:
            tail = (f"; the last step's logits and KV cache equal a recomputation of all "
                    f"{s['prompt_len'] + s['decode_steps']} tokens" if s["decode_steps"] else "")
            print(f"check: all {layers} layers of the prefill and the steps are bit-exact with "
                  f"the numpy reference{tail}")
        else:
            bad = sum(layer.check is False for r in (run.prefill, *run.steps)
                      for layer in r.layers)
            print(f"check: FAILED: {bad} layer(s) differ from the numpy reference; "
                  f"recomputation {'equal' if s['recompute_equal'] else 'differs'}")
    print(f"time: compile {s['compile_s']:.2f} s, run {s['run_s']:.2f} s")
    if out_dir is not None:
        print(f"wrote {out_dir}/report.json")
