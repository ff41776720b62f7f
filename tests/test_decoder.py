"""Decoder-only language models with a KV cache (issue 57): the causal softmax, RMSNorm and
rotary embeddings, decoding equal to recomputing the full sequence, the runs on the
accelerator and their figures, and the command line."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.graph import nn
from compiler.graph.decoder import DECODERS, DecoderModel, decoder_model
from compiler.graph.ir import GraphError
from compiler.graph.reference import run_reference

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- the operators
@settings(max_examples=40, deadline=None)
@given(lead=st.integers(1, 3), sq=st.integers(1, 9), extra=st.integers(0, 40),
       seed=st.integers(0, 2**16))
def test_a_causal_row_equals_the_decoding_step_that_sees_its_keys(lead: int, sq: int,
                                                                  extra: int, seed: int
                                                                  ) -> None:
    """Row i of a causal softmax over Sk keys is, bit for bit, the one-query softmax over the
    keys it sees (what a decoding step computes), and 0 beyond them."""
    sk = sq + extra
    x = np.random.default_rng(seed).standard_normal((lead, sq, sk)).astype(np.float32) * 4
    y = nn.softmax(x, causal=True)
    for i in range(sq):
        seen = i + sk - sq + 1
        one = nn.softmax(x[:, i:i + 1, :seen], causal=True)
        assert np.array_equal(y[:, i:i + 1, :seen], one)
        assert not y[:, i, seen:].any()
    # Sums to one (within float32 rounding) and matches the textbook formula.
    mask = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq
    e = np.where(mask, np.exp(x - np.where(mask, x, -np.inf).max(-1, keepdims=True)), 0)
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-6, atol=1e-7)


def test_causal_softmax_refuses_fewer_keys_than_queries() -> None:
    with pytest.raises(ValueError, match="3 keys for 4 queries"):
        nn.softmax(np.zeros((4, 3), np.float32), causal=True)
    with pytest.raises(ValueError, match="last of at least two axes"):
        nn.softmax(np.zeros((4, 4), np.float32), axis=0, causal=True)


def test_rms_norm_is_its_formula() -> None:
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    g = np.linspace(0.5, 1.5, 16).astype(np.float32)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(nn.rms_norm(x, g, 1e-6), want, rtol=1e-6)


def test_rotary_rotates_each_pair_by_its_positions_angle() -> None:
    """Position 0 is the identity; a pair (x[k], x[k + d/2]) keeps its length and turns by
    the table's angle."""
    d, s = 8, 3
    x = np.random.default_rng(2).standard_normal((1, s, 2 * d)).astype(np.float32)
    angle = np.arange(s)[:, None] * np.array([0.3, 0.7, 1.1, 1.9])[None, :]
    y = nn.rotary(x, np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32), d)
    np.testing.assert_allclose(y[0, 0], x[0, 0], rtol=1e-6)
    h, r = x.reshape(s, 2, d), y.reshape(s, 2, d)
    a, b = h[..., :4] + 1j * h[..., 4:], r[..., :4] + 1j * r[..., 4:]
    np.testing.assert_allclose(b, a * np.exp(1j * angle)[:, None, :], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cos must have shape"):
        nn.rotary(x, np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32), d)


# ---------------------------------------------------------------------- the model
def _decode_on_reference(model: DecoderModel, prompt: np.ndarray, tokens: np.ndarray
                         ) -> tuple[np.ndarray, list[np.ndarray]]:
    """Prefill ``prompt``, then one step per column of ``tokens``; the last logits and
    cache (numpy reference executor)."""
    g = model.prefill(prompt.shape[1])
    out = run_reference(g, {"input_ids": prompt})
    logits, *cache = [out[o] for o in g.outputs]
    for t in range(tokens.shape[1]):
        gd = model.decode(prompt.shape[1] + t)
        feeds = {"input_ids": tokens[:, t:t + 1]}
        feeds.update(zip([n for n in gd.inputs if n != "input_ids"], cache, strict=True))
        out = run_reference(gd, feeds)
        logits, *cache = [out[o] for o in gd.outputs]
    return logits, cache


@pytest.mark.parametrize("name", ["gpt2_tiny", "llama_tiny"])
def test_decoding_with_the_cache_equals_recomputing_the_sequence(name: str) -> None:
    """Prefill 7 tokens, decode 6 more one at a time: the logits and every layer's cache
    equal one prefill of all 13 (batch 2, tokens that are not the model's own choice)."""
    model = decoder_model(name, batch=2)
    rng = np.random.default_rng(5)
    seq = rng.integers(0, model.config.vocab, (2, 13)).astype(np.int32)
    logits, cache = _decode_on_reference(model, seq[:, :7], seq[:, 7:])
    full = model.prefill(13)
    ref = run_reference(full, {"input_ids": seq})
    assert np.array_equal(ref[full.outputs[0]], logits)
    assert len(cache) == 2 * model.config.layers
    for name_, value in zip(full.outputs[1:], cache, strict=True):
        assert np.array_equal(ref[name_], value), name_
    assert np.unique(logits).size > 10  # not a saturated constant


def test_a_batch_decodes_as_each_sequence_alone() -> None:
    seq = np.random.default_rng(6).integers(0, 512, (2, 9)).astype(np.int32)
    both, _ = _decode_on_reference(decoder_model("llama_tiny", batch=2), seq[:, :6], seq[:, 6:])
    for i in range(2):
        one, _ = _decode_on_reference(decoder_model("llama_tiny"), seq[i:i + 1, :6],
                                      seq[i:i + 1, 6:])
        assert np.array_equal(both[i:i + 1], one)


def test_grouped_query_attention_caches_the_key_value_heads_only() -> None:
    c = DECODERS["llama_tiny"]
    assert c.kv < c.heads
    g = decoder_model("llama_tiny").decode(5)
    key, value = g.values["past.0.key"], g.values["past.0.value"]
    assert key.shape == (1, c.kv, c.head_dim, 5) and value.shape == (1, c.kv, 5, c.head_dim)
    assert [g.values[o].shape for o in g.outputs[1:3]] == [(1, c.kv, c.head_dim, 6),
                                                          (1, c.kv, 6, c.head_dim)]


def test_gpt2_small_has_gpt2_small_parameters() -> None:
    """GPT-2 small's 124,439,808 parameters (its c_attn is our q, k and v), the head tied
    to the token embedding."""
    model = decoder_model("gpt2")
    g = model.decode(3)
    n = sum(v.size for k, v in g.params.items() if not k.startswith(("wpe", "last")))
    assert g.params["wte.table"].shape == (50257, 768)
    assert not any(k.startswith("lm_head.weight") for k in g.params)  # tied
    wpe = 1024 * 768
    assert n + wpe == 124_439_808


def test_bad_lengths_are_one_line() -> None:
    model = decoder_model("gpt2_tiny")
    with pytest.raises(GraphError, match=r"prompt length must be an int in 1\.\.256"):
        model.prefill(0)
    with pytest.raises(GraphError, match=r"cached tokens must be an int in 1\.\.255"):
        model.decode(256)
    with pytest.raises(GraphError, match="unknown decoder 'gpt3'"):
        decoder_model("gpt3")


# ---------------------------------------------------------------------- on the accelerator
def _compulsory_by_hand(graph: object, exe: object) -> int:
    """ROOFLINE.md's compulsory bytes of the accelerator layers, from the graph's shapes:
    a dense layer reads its input, weights and int32 bias and writes its output; a batched
    matmul reads both operands and writes its output; a residual add reads two and writes
    one."""
    total = 0
    for node in graph.nodes:  # type: ignore[attr-defined]
        if node.name not in exe.compiled:  # type: ignore[attr-defined]
            continue
        size = [math.prod(graph.values[v].shape) for v in node.inputs]  # type: ignore
        out = math.prod(graph.values[node.outputs[0]].shape)  # type: ignore[attr-defined]
        if node.op == "dense":
            w = graph.params[node.attrs["weight"]]  # type: ignore[attr-defined]
            bias = 4 * w.shape[0] if node.attrs.get("bias") is not None else 0
            total += size[0] + w.size + bias + out
        else:
            assert node.op in ("batch_matmul", "add"), node.op
            total += sum(size) + out
    return total


@pytest.mark.parametrize("name", ["gpt2_tiny", "llama_tiny"])
def test_generate_on_sim_is_bit_exact_and_counts_its_bytes(name: str) -> None:
    """Prefill and 3 steps on the timing simulator: every layer bit-exact, the last step
    equal to recomputing the sequence, the tokens the reference's own greedy choices, the
    compulsory bytes per token those of the shapes, the efficiency a fraction."""
    from accel.machine.config import load_config
    from runtime.decoding import generate
    from runtime.network import compile_network

    cfg = load_config("default")
    model = decoder_model(name)
    prompt = np.random.default_rng(7).integers(0, 512, (1, 8)).astype(np.int32)
    run = generate(model, cfg, prompt, 3)
    assert run.check is True and run.recompute_equal is True
    # The reference executor's greedy loop picks the same tokens.
    seq = prompt
    for _ in range(4):
        g = model.prefill(seq.shape[1])
        logits = run_reference(g, {"input_ids": seq})[g.outputs[0]]
        seq = np.concatenate([seq, logits.argmax(-1).astype(np.int32)[:, None]], axis=1)
    assert np.array_equal(run.tokens, seq[:, 8:])
    # Compulsory bytes of the last step, by hand.
    last = model.decode(10)
    exe = compile_network(last, cfg)
    assert run.compulsory_bytes[-1] == _compulsory_by_hand(exe.graph, exe)
    s = run.summary()
    assert s["decode_cycles"] == sum(r.accel_cycles for r in run.steps)
    assert s["tokens_per_s"] == pytest.approx(3 * cfg.clock_mhz * 1e6 / s["decode_cycles"])
    assert s["compulsory_bytes_per_token"] == sum(run.compulsory_bytes) / 3
    assert 0.5 < s["bandwidth_efficiency"] <= 1.0
    assert s["dram_bytes_per_token"] >= s["compulsory_bytes_per_token"]
    assert s["ttft_ms"] == pytest.approx(run.prefill.accel_cycles / (cfg.clock_mhz * 1e3))


# ---------------------------------------------------------------------- the command line
def _accel(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accel", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=300)


def test_accel_run_decoder_reports_the_figures() -> None:
    proc = _accel("run", "llama_tiny", "--prompt-len", "8", "--decode", "2", "--quiet")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for text in ("prompt of 8 tokens, 2 decoding steps", "time to first token",
                 "tokens/s at 100 MHz", "MB compulsory", "decode efficiency",
                 "equal a recomputation of all 10 tokens"):
        assert text in out, out


@pytest.mark.parametrize("args, message", [
    (["resnet18", "--decode", "4"], "--decode applies to the decoders"),
    (["gpt2_tiny", "--seq-len", "4"], "--seq-len does not apply to the decoder gpt2_tiny"),
    (["gpt2_tiny", "--prompt-len", "250", "--decode", "7"],
     "--prompt-len 250 and --decode 7 exceed the 256 positions of gpt2_tiny"),
    (["gpt2_tiny", "--prompt-len", "0"], "--prompt-len must be at least 1"),
])
def test_bad_decoder_options_are_one_line(args: list[str], message: str) -> None:
    proc = _accel("run", *args)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("accel: error: ") and message in lines[0], lines
