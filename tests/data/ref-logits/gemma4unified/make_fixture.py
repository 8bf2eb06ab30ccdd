#!/usr/bin/env python3
"""make_fixture.py — the gemma4_unified reference fixture: a tiny random Gemma-4 12B-style
checkpoint (model_type gemma4_unified, text_config gemma4_unified_text) and the logits of an
independent float64 forward of the Hugging Face Gemma-4 text semantics, plus a tiny
gemma4_unified_assistant beside it whose config declares the centroid head but whose file
ships no centroid tensors (docs/GEMMA4-UNIFIED.md).

Pure Python (no numpy, no torch): it writes config.json, model.safetensors (every tensor F32, HF
names under model.language_model.), tokens.json and logits.ref.f32 (little-endian float32
[24, V]) into its own folder, and assistant/{config.json, model.safetensors}. It reads nothing
the engine writes. The 12B's shape traits are kept: no per-layer input, no KV sharing, five
sliding layers then one full one, K = V on full layers with one KV head of a wider head dim,
final-logit softcap 30, layer_scalar per layer, tied head. The seed is the first from SEED0
whose top-1 / top-2 logits differ by at least MIN_ARGMAX_GAP at every position.

    python3 tests/data/ref-logits/gemma4unified/make_fixture.py
"""
import json
import math
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
V, H, L, NH, NKV, D, DG, NKVG, I = 512, 32, 6, 4, 2, 16, 32, 1, 64
TYPES = ["S", "S", "S", "S", "S", "F"]
W = 8                      # sliding_window
EPS, SOFTCAP = 1e-6, 30.0
THETA_S, THETA_F, PRF = 10000.0, 1000000.0, 0.25
NTOK = 24
SEED0 = 7
MIN_ARGMAX_GAP = 0.05
PRE = "model.language_model."


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def make_weights(seed):
    """name → (shape, flat f32-representable values), HF names"""
    rng = random.Random(seed)
    w = {}

    def mat(name, n, k, std):
        w[name] = ((n, k), [f32(rng.gauss(0.0, std)) for _ in range(n * k)])

    def vec(name, n, lo=0.7, hi=1.3):
        w[name] = ((n,), [f32(rng.uniform(lo, hi)) for _ in range(n)])

    mat(PRE + "embed_tokens.weight", V, H, 1.0)
    for li in range(L):
        p = PRE + "layers.%d." % li
        full = TYPES[li] == "F"
        hd, nkv = (DG, NKVG) if full else (D, NKV)
        vec(p + "input_layernorm.weight", H)
        mat(p + "self_attn.q_proj.weight", NH * hd, H, 0.2)
        mat(p + "self_attn.k_proj.weight", nkv * hd, H, 0.2)
        if not full:
            mat(p + "self_attn.v_proj.weight", nkv * hd, H, 0.2)
        mat(p + "self_attn.o_proj.weight", H, NH * hd, 0.15)
        vec(p + "self_attn.q_norm.weight", hd)
        vec(p + "self_attn.k_norm.weight", hd)
        vec(p + "post_attention_layernorm.weight", H)
        vec(p + "pre_feedforward_layernorm.weight", H)
        mat(p + "mlp.gate_proj.weight", I, H, 0.2)
        mat(p + "mlp.up_proj.weight", I, H, 0.2)
        mat(p + "mlp.down_proj.weight", H, I, 0.15)
        vec(p + "post_feedforward_layernorm.weight", H)
        vec(p + "layer_scalar", 1, 0.5, 0.9)
    vec(PRE + "norm.weight", H)
    # a stand-in for the multimodal tensors a unified checkpoint carries beside the text stack
    mat("model.vision_embedder.patch_dense.weight", H, 12, 0.1)
    return w


def matvec(m, n, k, x):
    return [sum(m[r * k + j] * x[j] for j in range(k)) for r in range(n)]


def rmsnorm(x, wt=None):
    s = math.sqrt(sum(v * v for v in x) / len(x) + EPS)
    return [v / s * (g if wt else 1.0) for v, g in zip(x, wt or [1.0] * len(x))]


def rope(x, pos, full):
    """rotate-half over pairs (j, j + hd/2); full layers: proportional, the first PRF·hd/2 angles"""
    hd = len(x)
    n = int(PRF * hd / 2) if full else hd // 2
    theta = THETA_F if full else THETA_S
    out = list(x)
    for j in range(n):
        a = pos * theta ** (-2.0 * j / hd)
        c, s = math.cos(a), math.sin(a)
        out[j] = x[j] * c - x[j + hd // 2] * s
        out[j + hd // 2] = x[j + hd // 2] * c + x[j] * s
    return out


def gelu_tanh(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))


def attention(w, p, full, xs_normed):
    """per position: the attention output of one layer (before o_proj), causal / window W"""
    hd, nkv = (DG, NKVG) if full else (D, NKV)
    qn, kn = w[p + "self_attn.q_norm.weight"][1], w[p + "self_attn.k_norm.weight"][1]
    ks, vs, outs = [], [], []
    for pos, h in enumerate(xs_normed):
        q = matvec(w[p + "self_attn.q_proj.weight"][1], NH * hd, H, h)
        k = matvec(w[p + "self_attn.k_proj.weight"][1], nkv * hd, H, h)
        v = k if full else matvec(w[p + "self_attn.v_proj.weight"][1], nkv * hd, H, h)
        q = [rope(rmsnorm(q[i * hd:(i + 1) * hd], qn), pos, full) for i in range(NH)]
        ks.append([rope(rmsnorm(k[i * hd:(i + 1) * hd], kn), pos, full) for i in range(nkv)])
        vs.append([rmsnorm(v[i * hd:(i + 1) * hd]) for i in range(nkv)])
        lo = 0 if full else max(0, pos - W + 1)
        att = []
        for hh in range(NH):
            g = hh // (NH // nkv)
            sc = [sum(a * b for a, b in zip(q[hh], ks[t][g])) for t in range(lo, pos + 1)]
            mx = max(sc)
            pr = [math.exp(s - mx) for s in sc]
            z = sum(pr)
            att += [sum(pr[t - lo] / z * vs[t][g][d] for t in range(lo, pos + 1)) for d in range(hd)]
        outs.append(matvec(w[p + "self_attn.o_proj.weight"][1], H, NH * hd, att))
    return outs


def forward(w):
    emb = w[PRE + "embed_tokens.weight"][1]
    scale = f32(math.sqrt(H))
    return lambda tokens: run(w, emb, scale, tokens)


def run(w, emb, scale, tokens):
    xs = [[v * scale for v in emb[t * H:(t + 1) * H]] for t in tokens]
    for li in range(L):
        p = PRE + "layers.%d." % li
        full = TYPES[li] == "F"
        normed = [rmsnorm(x, w[p + "input_layernorm.weight"][1]) for x in xs]
        att = attention(w, p, full, normed)
        for pos in range(len(xs)):
            x = [a + b for a, b in zip(xs[pos], rmsnorm(att[pos], w[p + "post_attention_layernorm.weight"][1]))]
            h = rmsnorm(x, w[p + "pre_feedforward_layernorm.weight"][1])
            g = matvec(w[p + "mlp.gate_proj.weight"][1], I, H, h)
            u = matvec(w[p + "mlp.up_proj.weight"][1], I, H, h)
            y = matvec(w[p + "mlp.down_proj.weight"][1], H, I, [gelu_tanh(a) * b for a, b in zip(g, u)])
            y = rmsnorm(y, w[p + "post_feedforward_layernorm.weight"][1])
            sc = w[p + "layer_scalar"][1][0]
            xs[pos] = [(a + b) * sc for a, b in zip(x, y)]
    logits = []
    for x in xs:
        h = rmsnorm(x, w[PRE + "norm.weight"][1])
        row = [sum(emb[t * H + j] * h[j] for j in range(H)) for t in range(V)]
        logits.append([SOFTCAP * math.tanh(v / SOFTCAP) for v in row])
    return logits


def write_safetensors(path, w):
    names = sorted(w)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for n in names:
        shape, vals = w[n]
        dt = "I64" if n.endswith("token_ordering") else "F32"
        size = 8 * len(vals) if dt == "I64" else 4 * len(vals)
        header[n] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + size]}
        off += size
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - (8 + len(hj)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for n in names:
            code = "<%dq" if n.endswith("token_ordering") else "<%df"
            f.write(struct.pack(code % len(w[n][1]), *w[n][1]))


def rope_parameters():
    return {"sliding_attention": {"rope_type": "default", "rope_theta": THETA_S},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": PRF, "rope_theta": THETA_F}}


def text_config():
    return {
        "model_type": "gemma4_unified_text", "vocab_size": V, "hidden_size": H, "intermediate_size": I,
        "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": D,
        "global_head_dim": DG, "num_global_key_value_heads": NKVG, "attention_k_eq_v": True,
        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 4096, "rms_norm_eps": EPS,
        "rope_parameters": rope_parameters(), "attention_bias": False, "attention_dropout": 0.0,
        "sliding_window": W,
        "layer_types": ["full_attention" if t == "F" else "sliding_attention" for t in TYPES],
        "final_logit_softcapping": SOFTCAP, "vocab_size_per_layer_input": V, "hidden_size_per_layer_input": 0,
        "num_kv_shared_layers": 0, "enable_moe_block": False, "use_double_wide_mlp": False,
        "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": [1, 106], "tie_word_embeddings": True,
        "dtype": "float32",
    }


def config():
    return {
        "architectures": ["Gemma4UnifiedForConditionalGeneration"], "model_type": "gemma4_unified",
        "text_config": text_config(),
        "vision_config": {"model_type": "gemma4_unified_vision", "hidden_size": H, "model_patch_size": 2},
        "audio_config": None, "tie_word_embeddings": True, "dtype": "float32",
    }


def assistant(seed):
    """a 2-layer gemma4_unified_assistant for this target: config declares 16 centroids, the file
    ships none (the tied head); layers borrow the target's last sliding and full KV"""
    rng = random.Random(seed)
    d, ia = 24, 48
    w = {}

    def mat(name, n, k, std):
        w[name] = ((n, k), [f32(rng.gauss(0.0, std)) for _ in range(n * k)])

    def vec(name, n, lo=0.7, hi=1.3):
        w[name] = ((n,), [f32(rng.uniform(lo, hi)) for _ in range(n)])

    mat("model.embed_tokens.weight", V, d, 1.0)
    mat("pre_projection.weight", d, 2 * H, 0.15)
    mat("post_projection.weight", H, d, 0.15)
    for li, full in enumerate([False, True]):
        p = "model.layers.%d." % li
        hd = DG if full else D
        vec(p + "input_layernorm.weight", d)
        mat(p + "self_attn.q_proj.weight", NH * hd, d, 0.2)
        vec(p + "self_attn.q_norm.weight", hd)
        mat(p + "self_attn.o_proj.weight", d, NH * hd, 0.15)
        vec(p + "post_attention_layernorm.weight", d)
        vec(p + "pre_feedforward_layernorm.weight", d)
        mat(p + "mlp.gate_proj.weight", ia, d, 0.2)
        mat(p + "mlp.up_proj.weight", ia, d, 0.2)
        mat(p + "mlp.down_proj.weight", d, ia, 0.15)
        vec(p + "post_feedforward_layernorm.weight", d)
        vec(p + "layer_scalar", 1, 0.5, 0.9)
    vec("model.norm.weight", d)
    t = text_config()
    t.update({"hidden_size": d, "intermediate_size": ia, "num_hidden_layers": 2,
              "layer_types": ["sliding_attention", "full_attention"], "num_kv_shared_layers": 2,
              "final_logit_softcapping": None, "vocab_size_per_layer_input": 0})
    cfg = {"architectures": ["Gemma4UnifiedAssistantForCausalLM"], "model_type": "gemma4_unified_assistant",
           "backbone_hidden_size": H, "use_ordered_embeddings": True, "num_centroids": 16,
           "centroid_intermediate_top_k": 4, "tie_word_embeddings": True, "text_config": t, "dtype": "float32"}
    return cfg, w


def main():
    rng = random.Random(20261206)
    tokens = [2] + [rng.randrange(3, V) for _ in range(NTOK - 1)]
    for seed in range(SEED0, SEED0 + 30):
        w = make_weights(seed)
        logits = forward(w)(tokens)
        amg = min(sorted(r)[-1] - sorted(r)[-2] for r in logits)
        print("seed %d: min argmax gap %.3f" % (seed, amg))
        if amg >= MIN_ARGMAX_GAP:
            break
    else:
        raise SystemExit("no seed with a robust argmax")
    with open(os.path.join(HERE, "config.json"), "w") as f:
        json.dump(config(), f, indent=2)
        f.write("\n")
    with open(os.path.join(HERE, "tokens.json"), "w") as f:
        f.write(json.dumps(tokens) + "\n")
    write_safetensors(os.path.join(HERE, "model.safetensors"), w)
    with open(os.path.join(HERE, "logits.ref.f32"), "wb") as f:
        for r in logits:
            f.write(struct.pack("<%df" % V, *r))
    acfg, aw = assistant(seed + 1000)
    os.makedirs(os.path.join(HERE, "assistant"), exist_ok=True)
    with open(os.path.join(HERE, "assistant", "config.json"), "w") as f:
        json.dump(acfg, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(HERE, "assistant", "model.safetensors"), aw)
    print("seed %d written; max |logit| %.3f" % (seed, max(abs(v) for r in logits for v in r)))


if __name__ == "__main__":
    main()
