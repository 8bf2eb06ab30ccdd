#!/usr/bin/env python3
"""make_fixture.py — the Gemma-4 mixture-of-experts reference fixture: a tiny random checkpoint
shaped like the 26B-A4B (model_type gemma4, enable_moe_block: every layer runs a routed-expert
block beside its dense MLP; docs/TRANSFORMER.md §5b) and the logits of an independent float64
forward of the Hugging Face semantics.

Pure Python (no numpy, no torch); the attention, norms, RoPE and the safetensors writer are the
gemma4unified fixture's (../gemma4unified/make_fixture.py), the expert block is written here. It
writes config.json, model.safetensors (every tensor F32, HF names under model.language_model.,
the experts stacked as experts.gate_up_proj [E, 2·Ie, H] and experts.down_proj [E, H, Ie]),
tokens.json and logits.ref.f32 (little-endian float32 [NTOK, V]). The seed is the first from
SEED0 whose top-1 / top-2 logits differ by at least MIN_ARGMAX_GAP at every position and whose
router never ranks the k-th and (k+1)-th expert within MIN_ROUTE_GAP of each other, so float32
rounding cannot change a routing choice or an argmax.

    python3 tests/data/ref-logits/gemma4moe/make_fixture.py
"""
import json
import math
import os
import random
import struct
import sys

sys.dont_write_bytecode = True

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gemma4unified"))
import make_fixture as base  # noqa: E402  (the dense Gemma-4 pieces)

V, H, L, NH, D, I = base.V, base.H, 4, base.NH, base.D, base.I
E, K, IE = 8, 2, 16
TYPES = ["S", "S", "S", "F"]
NTOK = 16
SEED0 = 11
MIN_ARGMAX_GAP = 0.05
MIN_ROUTE_GAP = 1e-4
PRE = base.PRE
f32, matvec, rmsnorm, gelu_tanh = base.f32, base.matvec, base.rmsnorm, base.gelu_tanh


def make_weights(seed):
    rng = random.Random(seed)
    w = {}

    def mat(name, shape, std):
        n = 1
        for s in shape:
            n *= s
        w[name] = (shape, [f32(rng.gauss(0.0, std)) for _ in range(n)])

    def vec(name, n, lo=0.7, hi=1.3):
        w[name] = ((n,), [f32(rng.uniform(lo, hi)) for _ in range(n)])

    mat(PRE + "embed_tokens.weight", (V, H), 1.0)
    for li in range(L):
        p = PRE + "layers.%d." % li
        full = TYPES[li] == "F"
        hd, nkv = (base.DG, base.NKVG) if full else (D, base.NKV)
        vec(p + "input_layernorm.weight", H)
        mat(p + "self_attn.q_proj.weight", (NH * hd, H), 0.2)
        mat(p + "self_attn.k_proj.weight", (nkv * hd, H), 0.2)
        if not full:
            mat(p + "self_attn.v_proj.weight", (nkv * hd, H), 0.2)
        mat(p + "self_attn.o_proj.weight", (H, NH * hd), 0.15)
        vec(p + "self_attn.q_norm.weight", hd)
        vec(p + "self_attn.k_norm.weight", hd)
        vec(p + "post_attention_layernorm.weight", H)
        vec(p + "pre_feedforward_layernorm.weight", H)
        mat(p + "mlp.gate_proj.weight", (I, H), 0.2)
        mat(p + "mlp.up_proj.weight", (I, H), 0.2)
        mat(p + "mlp.down_proj.weight", (H, I), 0.15)
        mat(p + "router.proj.weight", (E, H), 1.0)
        vec(p + "router.scale", H)
        vec(p + "router.per_expert_scale", E, 0.5, 1.5)
        mat(p + "experts.gate_up_proj", (E, 2 * IE, H), 0.2)
        mat(p + "experts.down_proj", (E, H, IE), 0.2)
        vec(p + "pre_feedforward_layernorm_2.weight", H)
        vec(p + "post_feedforward_layernorm_1.weight", H)
        vec(p + "post_feedforward_layernorm_2.weight", H)
        vec(p + "post_feedforward_layernorm.weight", H)
        vec(p + "layer_scalar", 1, 0.5, 0.9)
    vec(PRE + "norm.weight", H)
    return w


def experts(w, p, r, gaps):
    """the routed-expert branch on the residual r (before post_feedforward_layernorm_2)"""
    z = rmsnorm(r)
    sc = w[p + "router.scale"][1]
    z = [a * s * H ** -0.5 for a, s in zip(z, sc)]
    lg = matvec(w[p + "router.proj.weight"][1], E, H, z)
    mx = max(lg)
    pr = [math.exp(v - mx) for v in lg]
    tot = sum(pr)
    pr = [v / tot for v in pr]
    order = sorted(range(E), key=lambda e: (-pr[e], e))
    gaps.append(pr[order[K - 1]] - pr[order[K]])
    top = order[:K]
    ws = sum(pr[e] for e in top)
    pes = w[p + "router.per_expert_scale"][1]
    xin = rmsnorm(r, w[p + "pre_feedforward_layernorm_2.weight"][1])
    gu, dn = w[p + "experts.gate_up_proj"][1], w[p + "experts.down_proj"][1]
    out = [0.0] * H
    for e in top:
        g = matvec(gu[e * 2 * IE * H:(e * 2 * IE + IE) * H], IE, H, xin)
        u = matvec(gu[(e * 2 * IE + IE) * H:(e + 1) * 2 * IE * H], IE, H, xin)
        y = matvec(dn[e * H * IE:(e + 1) * H * IE], H, IE, [gelu_tanh(a) * b for a, b in zip(g, u)])
        wt = pr[e] / ws * pes[e]
        out = [o + wt * v for o, v in zip(out, y)]
    return out


def run(w, tokens, gaps):
    emb = w[PRE + "embed_tokens.weight"][1]
    scale = f32(math.sqrt(H))
    xs = [[v * scale for v in emb[t * H:(t + 1) * H]] for t in tokens]
    for li in range(L):
        p = PRE + "layers.%d." % li
        full = TYPES[li] == "F"
        normed = [rmsnorm(x, w[p + "input_layernorm.weight"][1]) for x in xs]
        att = base.attention(w, p, full, normed)
        for pos in range(len(xs)):
            r = [a + b for a, b in zip(xs[pos], rmsnorm(att[pos], w[p + "post_attention_layernorm.weight"][1]))]
            h = rmsnorm(r, w[p + "pre_feedforward_layernorm.weight"][1])
            g = matvec(w[p + "mlp.gate_proj.weight"][1], I, H, h)
            u = matvec(w[p + "mlp.up_proj.weight"][1], I, H, h)
            y1 = matvec(w[p + "mlp.down_proj.weight"][1], H, I, [gelu_tanh(a) * b for a, b in zip(g, u)])
            y1 = rmsnorm(y1, w[p + "post_feedforward_layernorm_1.weight"][1])
            y2 = rmsnorm(experts(w, p, r, gaps), w[p + "post_feedforward_layernorm_2.weight"][1])
            y = rmsnorm([a + b for a, b in zip(y1, y2)], w[p + "post_feedforward_layernorm.weight"][1])
            sc = w[p + "layer_scalar"][1][0]
            xs[pos] = [(a + b) * sc for a, b in zip(r, y)]
    logits = []
    for x in xs:
        h = rmsnorm(x, w[PRE + "norm.weight"][1])
        row = [sum(emb[t * H + j] * h[j] for j in range(H)) for t in range(V)]
        logits.append([base.SOFTCAP * math.tanh(v / base.SOFTCAP) for v in row])
    return logits


def config():
    t = base.text_config()
    t.update({"model_type": "gemma4_text", "num_hidden_layers": L,
              "layer_types": ["full_attention" if x == "F" else "sliding_attention" for x in TYPES],
              "enable_moe_block": True, "num_experts": E, "top_k_experts": K, "moe_intermediate_size": IE})
    return {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "text_config": t,
            "vision_config": None, "audio_config": None, "tie_word_embeddings": True, "dtype": "float32"}


def main():
    rng = random.Random(20261207)
    tokens = [2] + [rng.randrange(3, V) for _ in range(NTOK - 1)]
    for seed in range(SEED0, SEED0 + 40):
        w = make_weights(seed)
        gaps = []
        logits = run(w, tokens, gaps)
        amg = min(sorted(r)[-1] - sorted(r)[-2] for r in logits)
        print("seed %d: min argmax gap %.3f, min routing gap %.5f" % (seed, amg, min(gaps)))
        if amg >= MIN_ARGMAX_GAP and min(gaps) >= MIN_ROUTE_GAP:
            break
    else:
        raise SystemExit("no seed with a robust argmax and routing")
    with open(os.path.join(HERE, "config.json"), "w") as f:
        json.dump(config(), f, indent=2)
        f.write("\n")
    with open(os.path.join(HERE, "tokens.json"), "w") as f:
        f.write(json.dumps(tokens) + "\n")
    base.write_safetensors(os.path.join(HERE, "model.safetensors"), w)
    with open(os.path.join(HERE, "logits.ref.f32"), "wb") as f:
        for r in logits:
            f.write(struct.pack("<%df" % V, *r))
    print("seed %d written; max |logit| %.3f" % (seed, max(abs(v) for r in logits for v in r)))


if __name__ == "__main__":
    main()
