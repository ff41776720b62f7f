"""Decoder-only language models: GPT-2 and a Llama-style model, with a KV cache.

A :class:`DecoderModel` is the weights and the calibrated shifts of one model, fixed once: it
builds the graph of any step from them, so every graph does the same arithmetic on the same
parameters.

- :meth:`DecoderModel.prefill` ``(S)``: ``input_ids`` ``(B, S)`` in; out the ``logits`` of the
  last token and, per layer, the KV cache ``present.{i}.key`` ``(B, kv_heads, head_dim, S)``
  (keys stored transposed, as the scores' GEMM reads them) and ``present.{i}.value``
  ``(B, kv_heads, S, head_dim)``, int8 in DRAM.
- :meth:`DecoderModel.decode` ``(T)``: one token ``(B, 1)`` at position ``T`` and the cache
  of the ``T`` tokens before it (``past.{i}.key`` / ``past.{i}.value``); out its logits and
  the cache of ``T + 1`` tokens (the new key and value appended: a ``concat``).

The attention's softmax is causal (:func:`compiler.graph.nn.softmax`): query ``i`` sees the
keys up to its own position, with a sequential sum, so the one row of a decoding step equals
the row of the same token in a prefill of the whole sequence bit for bit, and every other
operator computes a token's row from that row alone (integer GEMMs, row-wise norms,
elementwise float). Decoding with the cache therefore gives exactly the logits and cache of
recomputing the full sequence, which the tests check.

Both shapes are pre-LN. GPT-2: learned positions added to the token embedding, LayerNorm,
biases, GELU (tanh form), the head tied to the token embedding. Llama: RMSNorm, rotary
embeddings on queries and keys (float, on the fallback, between ``dequantize`` and
``quantize``), no biases, a SwiGLU feed-forward (``silu(gate) * up``), grouped-query attention
(``kv_heads`` key and value heads, each shared by ``heads / kv_heads`` query heads: the queries
of a group are stacked as rows of one GEMM against their shared keys, so the cache is read
once per group, not copied per head), an untied head.

The accelerator runs the projections, the scores and context GEMMs and the residual adds;
the fallback runs the norms, softmax, activations, rotary embedding and the cache's append.
Calibration (:mod:`compiler.graph.transformers`'s builder) runs a seeded random sequence of
``calibration_len`` tokens through the prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler.graph.ir import Graph, GraphError
from compiler.graph.transformers import GraphBuilder

__all__ = ["DECODERS", "DecoderConfig", "DecoderModel", "decoder_model"]


@dataclass(frozen=True)
class DecoderConfig:
    """A decoder-only transformer's shape."""

    style: str
    """``"gpt2"`` or ``"llama"`` (see the module docstring)."""
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    kv_heads: int | None = None
    """Key and value heads (grouped-query attention); None: as many as query heads."""
    rope_base: float = 10000.0

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


#: Zoo names -> shapes. ``gpt2`` is GPT-2 small; ``llama_small`` a Llama of about its size
#: (grouped-query attention with 4 key/value heads for 12 query heads); the ``_tiny`` ones are
#: for tests.
DECODERS: dict[str, DecoderConfig] = {
    "gpt2": DecoderConfig("gpt2", layers=12, hidden=768, heads=12, ffn=3072, vocab=50257,
                          max_positions=1024),
    "gpt2_tiny": DecoderConfig("gpt2", layers=2, hidden=128, heads=2, ffn=512, vocab=512,
                               max_positions=256),
    "llama_small": DecoderConfig("llama", layers=12, hidden=768, heads=12, ffn=2048,
                                 vocab=32000, max_positions=2048, kv_heads=4),
    "llama_tiny": DecoderConfig("llama", layers=2, hidden=128, heads=4, ffn=384, vocab=512,
                                max_positions=256, kv_heads=2),
}


class DecoderModel:
    """One decoder's weights and calibrated shifts; builds its prefill and decoding graphs.

    Parameters
    ----------
    config, name
        The shape and the model's name (graph names derive from it).
    batch
        Sequences decoded together (every graph's leading axis); the weights and shifts do
        not depend on it (calibration runs one sequence).
    seed
        Weights and the calibration sequence.
    calibration_len
        Tokens of the calibration sequence (at most ``config.max_positions``).
    """

    def __init__(self, config: DecoderConfig, name: str, batch: int = 1, seed: int = 0,
                 calibration_len: int = 128) -> None:
        if config.style not in ("gpt2", "llama"):
            raise GraphError(f"{name}: unknown decoder style {config.style!r}")
        if config.hidden % config.heads or config.heads % config.kv:
            raise GraphError(f"{name}: {config.heads} heads must divide hidden {config.hidden} "
                             f"and be a multiple of {config.kv} key/value heads")
        _check_int(name, "batch", batch, 1 << 16)
        calibration_len = min(calibration_len, config.max_positions)
        self.config, self.name, self.batch, self.seed = config, name, batch, seed
        bld = GraphBuilder(name, seed)
        # One sequence, whatever the batch: the model is the same at every batch, so a batch
        # of sequences decodes as each of them alone.
        ids = np.random.default_rng([seed, 1]).integers(0, config.vocab, (1, calibration_len))
        self._build(bld, ids.astype(np.int32), past=0)
        self._made = bld.made

    # ------------------------------------------------------------------ graphs
    def prefill(self, seq_len: int) -> Graph:
        """The graph of a prompt of ``seq_len`` tokens (see the module docstring)."""
        _check_int(self.name, "prompt length", seq_len, self.config.max_positions)
        return self._graph(f"{self.name}_prefill{seq_len}", seq_len, past=0)

    def decode(self, past: int) -> Graph:
        """The graph of one decoding step after ``past`` tokens (see the module docstring)."""
        _check_int(self.name, "cached tokens", past, self.config.max_positions - 1)
        return self._graph(f"{self.name}_decode{past}", 1, past=past)

    def _graph(self, name: str, seq_len: int, past: int) -> Graph:
        bld = GraphBuilder(name, self.seed, frozen=self._made)
        return self._build(bld, np.zeros((self.batch, seq_len), np.int32), past)

    # ------------------------------------------------------------------ the network
    def _build(self, bld: GraphBuilder, ids: np.ndarray, past: int) -> Graph:
        c = self.config
        b, s = ids.shape
        h = c.hidden
        table = bld.once("wte", lambda: bld.quantize_weights(bld.rng.standard_normal(
            (c.vocab, h))))
        word, s_t = table
        x = bld.input("input_ids", ids)
        hid = bld.emit("wte", "embedding", [x], {"table": bld.param("wte.table", word)},
                       scale=s_t)
        if c.style == "gpt2":
            wpe = bld.once("wpe", lambda: np.clip(np.rint(
                0.1 * bld.rng.standard_normal((c.max_positions, h)) * 2.0**s_t),
                -127, 127).astype(np.int8))
            rows = np.ascontiguousarray(np.broadcast_to(wpe[past:past + s], (b, s, h)))
            hid = bld.add("embed", hid, bld.constant("wpe", rows, s_t))
        rope = _rope_tables(c, past, s) if c.style == "llama" else None
        outputs: list[str] = []
        for i in range(c.layers):
            p = f"h{i}"
            a = self._attention(bld, f"{p}.attn", self._norm(bld, f"{p}.ln_1", hid), past,
                                rope, bld.scale[hid], outputs)
            hid = bld.add(f"{p}.attn.residual", hid, a)
            m = self._mlp(bld, f"{p}.mlp", self._norm(bld, f"{p}.ln_2", hid), bld.scale[hid])
            hid = bld.add(f"{p}.mlp.residual", hid, m)
        last = bld.emit("last", "take", [hid], {
            "indices": bld.param("last.index", np.array(s - 1, np.int64)), "axis": 1},
            scale=bld.scale[hid])
        final = self._norm(bld, "ln_f", last)
        logits = bld.dense("lm_head", final, c.vocab, bias=False,
                           tied=("wte.table", s_t) if c.style == "gpt2" else None)
        return bld.finish([logits, *outputs], output_scale={logits: bld.scale[logits]},
                          input_range={"input_ids": [0, c.vocab]},
                          decoder={"past": past, "tokens": s})

    def _norm(self, bld: GraphBuilder, name: str, x: str) -> str:
        if self.config.style == "gpt2":
            return bld.layer_norm(name, x)
        width = bld.graph.values[x].shape[-1]
        gamma = bld.once(f"{name}.rms", lambda: (
            1.0 + 0.05 * bld.rng.standard_normal(width)).astype(np.float32))
        y = bld.emit(f"{name}.rms", "rms_norm", [bld.dequantize(x)], {
            "scale": bld.param(f"{name}.gamma", gamma), "epsilon": 1e-6})
        return bld.quantize(name, y)

    def _rotate(self, bld: GraphBuilder, name: str, x: str, rope: tuple[np.ndarray, np.ndarray]
                ) -> str:
        cos, sin = rope
        y = bld.emit(f"{name}.rope", "rotary", [bld.dequantize(x)], {
            "cos": bld.param(f"{name}.cos", cos), "sin": bld.param(f"{name}.sin", sin),
            "head_dim": self.config.head_dim})
        return bld.quantize(name, y)

    def _attention(self, bld: GraphBuilder, p: str, x: str, past: int,
                   rope: tuple[np.ndarray, np.ndarray] | None, residual_scale: int,
                   outputs: list[str]) -> str:
        c = self.config
        b, s, h = bld.graph.values[x].shape
        kv, d = c.kv, c.head_dim
        g = c.heads // kv
        bias = c.style == "gpt2"
        q = bld.dense(f"{p}.q", x, h, bias=bias)
        k = bld.dense(f"{p}.k", x, kv * d, bias=bias)
        v = bld.dense(f"{p}.v", x, kv * d, bias=bias)
        if rope is not None:
            q, k = self._rotate(bld, f"{p}.q_rot", q, rope), self._rotate(bld, f"{p}.k_rot", k,
                                                                          rope)
        # Queries (B, S, kv * g * d) -> (B, kv, g * S, d): a group's queries are one GEMM's rows.
        qh = bld.move(f"{p}.q_rows", "reshape", [bld.move(
            f"{p}.q_heads", "transpose",
            [bld.move(f"{p}.q_split", "reshape", [q], shape=(b, s, kv, g, d))],
            perm=(0, 2, 3, 1, 4))], shape=(b, kv, g * s, d))
        kt = bld.move(f"{p}.k_heads", "transpose",
                      [bld.move(f"{p}.k_split", "reshape", [k], shape=(b, s, kv, d))],
                      perm=(0, 2, 3, 1))
        vh = bld.move(f"{p}.v_heads", "transpose",
                      [bld.move(f"{p}.v_split", "reshape", [v], shape=(b, s, kv, d))],
                      perm=(0, 2, 1, 3))
        if past:
            i = p.split(".")[0][1:]
            pk = bld.input(f"past.{i}.key", np.zeros((b, kv, d, past), np.int8),
                           scale=bld.scale[kt])
            pv = bld.input(f"past.{i}.value", np.zeros((b, kv, past, d), np.int8),
                           scale=bld.scale[vh])
            kt = bld.move(f"{p}.k_cache", "concat", [pk, kt], axis=3)
            vh = bld.move(f"{p}.v_cache", "concat", [pv, vh], axis=2)
        outputs += [kt, vh]
        t = past + s
        factor = 1.0 / math.sqrt(d)
        scores = bld.batch_matmul(f"{p}.scores", qh, kt, factor)
        sf = bld.emit(f"{p}.scores_split", "reshape", [bld.dequantize(scores)],
                      {"shape": (b, kv, g, s, t)})
        if not math.log2(factor).is_integer():
            sc = bld.emit(f"{p}.scale", "constant", [], {
                "value": bld.param(f"{p}.scale", np.array(factor, np.float32))})
            sf = bld.emit(f"{p}.scaled", "mul", [sf, sc], {})
        probs = bld.quantize(f"{p}.probs", bld.emit(f"{p}.softmax", "softmax", [sf],
                                                     {"axis": -1, "causal": True}))
        rows = bld.move(f"{p}.probs_rows", "reshape", [probs], shape=(b, kv, g * s, t))
        ctx = bld.batch_matmul(f"{p}.context", rows, vh)
        joined = bld.move(f"{p}.merge", "reshape", [bld.move(
            f"{p}.context_t", "transpose",
            [bld.move(f"{p}.context_split", "reshape", [ctx], shape=(b, kv, g, s, d))],
            perm=(0, 3, 1, 2, 4))], shape=(b, s, h))
        return bld.dense(f"{p}.o", joined, h, out_scale=residual_scale, bias=bias)

    def _mlp(self, bld: GraphBuilder, p: str, x: str, residual_scale: int) -> str:
        c = self.config
        if c.style == "gpt2":
            up = bld.quantize(f"{p}.act", bld.emit(f"{p}.gelu", "gelu", [
                bld.dequantize(bld.dense(f"{p}.fc", x, c.ffn))], {"form": "tanh"}))
            return bld.dense(f"{p}.proj", up, c.hidden, out_scale=residual_scale)
        gate = bld.dequantize(bld.dense(f"{p}.gate", x, c.ffn, bias=False))
        up = bld.dequantize(bld.dense(f"{p}.up", x, c.ffn, bias=False))
        silu = bld.emit(f"{p}.silu", "mul", [gate, bld.emit(f"{p}.sigmoid", "sigmoid", [gate],
                                                               {})], {})
        act = bld.quantize(f"{p}.act", bld.emit(f"{p}.swiglu", "mul", [silu, up], {}))
        return bld.dense(f"{p}.down", act, c.hidden, out_scale=residual_scale, bias=False)


def _rope_tables(c: DecoderConfig, past: int, s: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (S, head_dim / 2) of positions ``past .. past + S - 1``."""
    half = c.head_dim // 2
    inv = c.rope_base ** (-np.arange(half, dtype=np.float64) / half)
    angle = np.arange(past, past + s, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def _check_int(name: str, what: str, v: object, top: int) -> None:
    if not isinstance(v, int | np.integer) or isinstance(v, bool) or not 1 <= v <= top:
        raise GraphError(f"{name}: {what} must be an int in 1..{top}, got {v!r}")


def decoder_model(name: str, batch: int = 1, seed: int = 0) -> DecoderModel:
    """The zoo decoder ``name`` (:data:`DECODERS`).

    Raises
    ------
    GraphError
        An unknown name.
    """
    if name not in DECODERS:
        raise GraphError(f"unknown decoder {name!r}; known: {', '.join(DECODERS)}")
    return DecoderModel(DECODERS[name], name, batch=batch, seed=seed)
