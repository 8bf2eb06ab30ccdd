#!/usr/bin/env python3
"""make-moe-target.py — a Gemma-4 mixture-of-experts target whose text has structure, for
measuring speculative decoding on an MoE (docs/MOE.md). It adds Gemma-4's routed-expert block
(enable_moe_block, docs/TRANSFORMER.md §5b) to every layer of a trained dense Gemma-4 target,
keeping all of its tensors:

    m = post_feedforward_layernorm_1(dense MLP) + ALPHA · norm(Experts(...))

with random experts (E experts of width IE, K per token), a random router whose scale gives
routing logits of about unit spread, and post_feedforward_layernorm_2 = ALPHA. With ALPHA = 0 the
model computes the dense target's function (the two stacked RMSNorms of the dense branch reduce
to one); ALPHA sets how far the experts move it. Every expert is real weights that the forward
streams, so the cost of routing, of distinct experts per verify block and of the expert matmuls
is that of an MoE; only the acceptance a drafter of the dense target reaches is inherited.

    python3 tools/make-moe-target.py SRC_DIR OUT_DIR [--experts 16] [--top-k 4] [--width 256]
                                     [--alpha 0.1] [--seed 1]

Pure Python (standard library). Values are bf16, drawn uniform with the std of a 1/sqrt(fan_in)
initialisation from a seeded generator.
"""
import argparse
import array
import json
import os
import random
import shutil
import struct
import sys


def bf16_bits(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def uniform_bf16(rng, n, std):
    """n bf16 values uniform in [-a, a], a = std·sqrt(3), through a 4096-level table"""
    a = std * 3 ** 0.5
    table = [bf16_bits(a * (2.0 * (i + 0.5) / 4096 - 1.0)) for i in range(4096)]
    raw = array.array("H", rng.randbytes(2 * n))
    out = array.array("H", (table[v & 4095] for v in raw))
    return out.tobytes()


def const_bf16(n, v):
    return array.array("H", [bf16_bits(v)] * n).tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    o = ap.parse_args()
    with open(os.path.join(o.src, "config.json")) as f:
        cfg = json.load(f)
    tc = cfg.get("text_config", cfg)
    if tc.get("enable_moe_block"):
        sys.exit("make-moe-target: %s is already a mixture of experts" % o.src)
    H, L = tc["hidden_size"], tc["num_hidden_layers"]
    E, K, IE = o.experts, o.top_k, o.width
    if not (1 <= K <= E):
        sys.exit("make-moe-target: --top-k must be in 1..--experts")
    with open(os.path.join(o.src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        blob = f.read()
    meta = header.pop("__metadata__", {"format": "pt"})
    prefix = "model.language_model."
    tensors = {}  # name -> (dtype, shape, bytes)
    for name, t in header.items():
        if t["dtype"] != "BF16":
            sys.exit("make-moe-target: %s is %s; expected a bf16 checkpoint" % (name, t["dtype"]))
        b, e = t["data_offsets"]
        tensors[name] = ("BF16", t["shape"], blob[b:e])
    rng = random.Random(o.seed)
    for li in range(L):
        p = prefix + "layers.%d." % li
        if p + "mlp.gate_proj.weight" not in tensors:
            sys.exit("make-moe-target: %s has no dense MLP in layer %d" % (o.src, li))
        tensors[p + "router.proj.weight"] = ("BF16", [E, H], uniform_bf16(rng, E * H, H ** -0.5))
        # the router reads rmsnorm(x)·scale·H^-1/2 (entries ~H^-1/2): scale sqrt(H) gives logits of unit spread
        tensors[p + "router.scale"] = ("BF16", [H], const_bf16(H, H ** 0.5))
        tensors[p + "router.per_expert_scale"] = ("BF16", [E], const_bf16(E, 1.0))
        tensors[p + "experts.gate_up_proj"] = ("BF16", [E, 2 * IE, H], uniform_bf16(rng, E * 2 * IE * H, H ** -0.5))
        tensors[p + "experts.down_proj"] = ("BF16", [E, H, IE], uniform_bf16(rng, E * H * IE, IE ** -0.5))
        tensors[p + "pre_feedforward_layernorm_2.weight"] = ("BF16", [H], const_bf16(H, 1.0))
        tensors[p + "post_feedforward_layernorm_1.weight"] = ("BF16", [H], const_bf16(H, 1.0))
        tensors[p + "post_feedforward_layernorm_2.weight"] = ("BF16", [H], const_bf16(H, o.alpha))
    tc.update({"enable_moe_block": True, "num_experts": E, "top_k_experts": K, "moe_intermediate_size": IE})
    os.makedirs(o.out, exist_ok=True)
    for fn in os.listdir(o.src):
        if fn not in ("model.safetensors", "config.json") and os.path.isfile(os.path.join(o.src, fn)):
            shutil.copy(os.path.join(o.src, fn), os.path.join(o.out, fn))
    with open(os.path.join(o.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    names = sorted(tensors)
    hdr, off = {"__metadata__": meta}, 0
    for nm in names:
        dt, shape, b = tensors[nm]
        hdr[nm] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
    hj = json.dumps(hdr, separators=(",", ":")).encode()
    hj += b" " * ((8 - (8 + len(hj)) % 8) % 8)
    tmp = os.path.join(o.out, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for nm in names:
            f.write(tensors[nm][2])
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(o.out, "model.safetensors"))
    print("wrote %s: %d layers, %d experts of width %d, %d per token, alpha %g" % (o.out, L, E, IE, K, o.alpha))


if __name__ == "__main__":
    main()
