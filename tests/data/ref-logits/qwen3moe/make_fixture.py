#!/usr/bin/env python3
"""make_fixture.py — the qwen3moe reference fixture: a tiny random Qwen3-MoE checkpoint and the
logits of an independent float64 forward of the Hugging Face semantics (Qwen3MoeForCausalLM).

Pure Python (no numpy, no torch): it writes config.json, model.safetensors (every tensor F32, HF
names), tokens.json and logits.ref.f32 (little-endian float32 [24, V]) into its own folder. It
reads nothing the engine writes. The seed is the first one from SEED0 whose routing is robust:
at every token and MoE layer the k-th and (k+1)-th router logits differ by at least MIN_ROUTE_GAP
and the top-1 / top-2 logits at every position by at least MIN_ARGMAX_GAP, so float32 rounding
cannot change a chosen expert or an argmax.

    python3 tests/data/ref-logits/qwen3moe/make_fixture.py
"""
import json
import math
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
V, H, L, NH, NKV, D, I = 512, 32, 3, 4, 2, 16, 64
E, K, IE = 8, 2, 24          # experts, experts per token, expert width
DENSE = [1]                  # mlp_only_layers: layer 1 keeps the dense MLP
EPS, THETA = 1e-6, 1000000.0
NTOK = 24
SEED0 = 31
MIN_ROUTE_GAP, MIN_ARGMAX_GAP = 1e-3, 0.05


def normal(rng, n, std):
    return [rng.gauss(0.0, std) for _ in range(n)]


def make_weights(seed):
    """name → (shape, flat f32-representable values), HF names"""
    rng = random.Random(seed)
    w = {}

    def mat(name, n, k, std):
        w[name] = ((n, k), [f32(x) for x in normal(rng, n * k, std)])

    def vec(name, n):
        w[name] = ((n,), [f32(rng.uniform(0.7, 1.3)) for _ in range(n)])

    mat("model.embed_tokens.weight", V, H, 0.8)
    for li in range(L):
        p = "model.layers.%d." % li
        vec(p + "input_layernorm.weight", H)
        mat(p + "self_attn.q_proj.weight", NH * D, H, 0.2)
        mat(p + "self_attn.k_proj.weight", NKV * D, H, 0.2)
        mat(p + "self_attn.v_proj.weight", NKV * D, H, 0.2)
        mat(p + "self_attn.o_proj.weight", H, NH * D, 0.2)
        vec(p + "self_attn.q_norm.weight", D)
        vec(p + "self_attn.k_norm.weight", D)
        vec(p + "post_attention_layernorm.weight", H)
        if li in DENSE:
            mat(p + "mlp.gate_proj.weight", I, H, 0.2)
            mat(p + "mlp.up_proj.weight", I, H, 0.2)
            mat(p + "mlp.down_proj.weight", H, I, 0.15)
        else:
            mat(p + "mlp.gate.weight", E, H, 0.5)
            for e in range(E):
                q = p + "mlp.experts.%d." % e
                mat(q + "gate_proj.weight", IE, H, 0.2)
                mat(q + "up_proj.weight", IE, H, 0.2)
                mat(q + "down_proj.weight", H, IE, 0.2)
    vec("model.norm.weight", H)
    return w


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def matvec(m, n, k, x):
    return [sum(m[r * k + j] * x[j] for j in range(k)) for r in range(n)]


def rmsnorm(x, wt):
    s = math.sqrt(sum(v * v for v in x) / len(x) + EPS)
    return [v / s * g for v, g in zip(x, wt)]


def rope(x, pos):
    """rotate_half RoPE of one head: pairs (j, j + D/2)"""
    out = list(x)
    for j in range(D // 2):
        a = pos * THETA ** (-2.0 * j / D)
        c, s = math.cos(a), math.sin(a)
        out[j] = x[j] * c - x[j + D // 2] * s
        out[j + D // 2] = x[j + D // 2] * c + x[j] * s
    return out


def silu(v):
    return v / (1.0 + math.exp(-v))


def swiglu(w, p, x, width):
    g = matvec(w[p + "gate_proj.weight"][1], width, H, x)
    u = matvec(w[p + "up_proj.weight"][1], width, H, x)
    return matvec(w[p + "down_proj.weight"][1], H, width, [silu(a) * b for a, b in zip(g, u)])


def moe(w, p, x, gaps):
    """Qwen3MoeSparseMoeBlock: softmax, top-k, renormalised (norm_topk_prob), Σ w·expert(x)"""
    logit = matvec(w[p + "mlp.gate.weight"][1], E, H, x)
    order = sorted(range(E), key=lambda e: -logit[e])
    gaps.append(logit[order[K - 1]] - logit[order[K]])
    mx = max(logit)
    ex = [math.exp(v - mx) for v in logit]
    prob = [v / sum(ex) for v in ex]
    top = order[:K]
    tot = sum(prob[e] for e in top)
    out = [0.0] * H
    for e in sorted(top):
        y = swiglu(w, p + "mlp.experts.%d." % e, x, IE)
        out = [o + prob[e] / tot * v for o, v in zip(out, y)]
    return out


def forward(w, tokens):
    """float64 logits [NTOK][V] and the routing gaps seen"""
    emb = w["model.embed_tokens.weight"][1]
    xs = [emb[t * H:(t + 1) * H] for t in tokens]
    gaps = []
    for li in range(L):
        p = "model.layers.%d." % li
        kc, vc = [], []
        for pos, x in enumerate(xs):
            h = rmsnorm(x, w[p + "input_layernorm.weight"][1])
            q = matvec(w[p + "self_attn.q_proj.weight"][1], NH * D, H, h)
            k = matvec(w[p + "self_attn.k_proj.weight"][1], NKV * D, H, h)
            v = matvec(w[p + "self_attn.v_proj.weight"][1], NKV * D, H, h)
            qn, kn = w[p + "self_attn.q_norm.weight"][1], w[p + "self_attn.k_norm.weight"][1]
            q = [rope(rmsnorm(q[i * D:(i + 1) * D], qn), pos) for i in range(NH)]
            kc.append([rope(rmsnorm(k[i * D:(i + 1) * D], kn), pos) for i in range(NKV)])
            vc.append([v[i * D:(i + 1) * D] for i in range(NKV)])
            att = []
            for hh in range(NH):
                g = hh // (NH // NKV)
                sc = [sum(a * b for a, b in zip(q[hh], kc[t][g])) / math.sqrt(D) for t in range(pos + 1)]
                mx = max(sc)
                pr = [math.exp(s - mx) for s in sc]
                z = sum(pr)
                att += [sum(pr[t] / z * vc[t][g][d] for t in range(pos + 1)) for d in range(D)]
            o = matvec(w[p + "self_attn.o_proj.weight"][1], H, NH * D, att)
            xs[pos] = [a + b for a, b in zip(x, o)]
        for pos, x in enumerate(xs):
            h = rmsnorm(x, w[p + "post_attention_layernorm.weight"][1])
            y = swiglu(w, p + "mlp.", h, I) if li in DENSE else moe(w, p, h, gaps)
            xs[pos] = [a + b for a, b in zip(x, y)]
    logits = []
    for x in xs:
        h = rmsnorm(x, w["model.norm.weight"][1])
        logits.append([sum(emb[t * H + j] * h[j] for j in range(H)) for t in range(V)])
    return logits, gaps


def write_safetensors(path, w):
    names = sorted(w)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for n in names:
        shape, vals = w[n]
        header[n] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + 4 * len(vals)]}
        off += 4 * len(vals)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - (8 + len(hj)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for n in names:
            f.write(struct.pack("<%df" % len(w[n][1]), *w[n][1]))


def config():
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": V,
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH,
        "num_key_value_heads": NKV, "head_dim": D, "hidden_act": "silu", "max_position_embeddings": 4096,
        "rms_norm_eps": EPS, "rope_theta": THETA, "rope_scaling": None, "attention_bias": False,
        "use_sliding_window": False, "sliding_window": None, "tie_word_embeddings": True,
        "num_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": IE, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": DENSE, "output_router_logits": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    }


def main():
    rng = random.Random(20261205)
    tokens = [1] + [rng.randrange(3, V) for _ in range(NTOK - 1)]
    for seed in range(SEED0, SEED0 + 50):
        w = make_weights(seed)
        logits, gaps = forward(w, tokens)
        amg = min(sorted(r)[-1] - sorted(r)[-2] for r in logits)
        print("seed %d: min routing gap %.2e, min argmax gap %.3f" % (seed, min(gaps), amg))
        if min(gaps) >= MIN_ROUTE_GAP and amg >= MIN_ARGMAX_GAP:
            break
    else:
        raise SystemExit("no seed with robust routing")
    with open(os.path.join(HERE, "config.json"), "w") as f:
        json.dump(config(), f, indent=2)
        f.write("\n")
    with open(os.path.join(HERE, "tokens.json"), "w") as f:
        f.write(json.dumps(tokens) + "\n")
    write_safetensors(os.path.join(HERE, "model.safetensors"), w)
    with open(os.path.join(HERE, "logits.ref.f32"), "wb") as f:
        for r in logits:
            f.write(struct.pack("<%df" % V, *r))
    print("seed %d written; max |logit| %.3f" % (seed, max(abs(v) for r in logits for v in r)))


if __name__ == "__main__":
    main()
