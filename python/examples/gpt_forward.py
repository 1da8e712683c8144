"""A GPT-2 forward pass written with wgml's ops from Python, checked against NumPy, and text
generated from a checkpoint of `wgml gpt train` (the C model, src/models/gpt.h: same weights'
names and layout, a character-level vocabulary).

    python gpt_forward.py                     # random weights: the forward against NumPy
    python gpt_forward.py --checkpoint out/gpt/gpt.safetensors --prompt "The " --tokens 200

The C library's own GPT (wgml_gpt.h, built on the same public ops) is wgml.gpt.GPT.
"""
import argparse
import math

import numpy as np
import wgml


def gpt2_forward(p, ids, cfg):
    """Logits [B, T, V] of GPT-2 (pre-norm, tied head) for token ids [B, T] (NumPy int32)."""
    B, T = ids.shape
    C, H, eps = cfg["width"], cfg["heads"], cfg["norm_eps"]
    D = C // H
    x = wgml.embedding(p["wte"], ids) + p["wpe"][:T]
    for l in range(cfg["layers"]):
        w = lambda name: p["h.%d.%s" % (l, name)]  # noqa: E731
        h = wgml.layernorm(x, w("ln1.w"), w("ln1.b"), eps)
        qkv = wgml.matmul(h, w("attn.wqkv"), bias=w("attn.bqkv"))  # [B, T, 3C]
        q, k, v = (t.reshape(B, T, H, D).permute(0, 2, 1, 3) for t in wgml.split(qkv, [C, C, C], axis=-1))
        a = wgml.attention(q, k, v, causal=True).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + wgml.matmul(a, w("attn.wo"), bias=w("attn.bo"))
        h = wgml.layernorm(x, w("ln2.w"), w("ln2.b"), eps)
        x = x + wgml.matmul(wgml.matmul(h, w("mlp.w1"), bias=w("mlp.b1"), activation="gelu_exact"),
                            w("mlp.w2"), bias=w("mlp.b2"))
    x = wgml.layernorm(x, p["lnf.w"], p["lnf.b"], eps)
    return wgml.matmul(x, p["wte"], trans_b=True)  # the head tied to the embedding


def numpy_forward(p, ids, cfg):
    """The same in float64 NumPy: the reference."""
    erf = np.vectorize(math.erf)
    B, T = ids.shape
    C, H, eps = cfg["width"], cfg["heads"], cfg["norm_eps"]
    D = C // H

    def ln(x, g, b):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * g + b

    x = p["wte"][ids] + p["wpe"][:T]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for l in range(cfg["layers"]):
        w = lambda name: p["h.%d.%s" % (l, name)]  # noqa: E731
        qkv = ln(x, w("ln1.w"), w("ln1.b")) @ w("attn.wqkv") + w("attn.bqkv")
        q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, H, D).transpose(0, 2, 1, 3) for i in range(3))
        s = np.where(mask, -np.inf, q @ k.transpose(0, 1, 3, 2) / math.sqrt(D))
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + a @ w("attn.wo") + w("attn.bo")
        h = ln(x, w("ln2.w"), w("ln2.b")) @ w("mlp.w1") + w("mlp.b1")
        x = x + 0.5 * h * (1 + erf(h / math.sqrt(2))) @ w("mlp.w2") + w("mlp.b2")
    return ln(x, p["lnf.w"], p["lnf.b"]) @ p["wte"].T


def random_weights(cfg, rng):
    C, F, V = cfg["width"], cfg["ffn"], cfg["vocab"]
    shapes = {"wte": (V, C), "wpe": (cfg["block"], C), "lnf.w": (C,), "lnf.b": (C,)}
    for l in range(cfg["layers"]):
        for name, shape in (("ln1.w", (C,)), ("ln1.b", (C,)), ("attn.wqkv", (C, 3 * C)), ("attn.bqkv", (3 * C,)),
                            ("attn.wo", (C, C)), ("attn.bo", (C,)), ("ln2.w", (C,)), ("ln2.b", (C,)),
                            ("mlp.w1", (C, F)), ("mlp.b1", (F,)), ("mlp.w2", (F, C)), ("mlp.b2", (C,))):
            shapes["h.%d.%s" % (l, name)] = shape
    weights = {}
    for name, shape in shapes.items():
        w = rng.standard_normal(shape) * (0.02 if len(shape) == 2 else 0.1)
        if name.endswith(("ln1.w", "ln2.w", "lnf.w")):
            w += 1  # norm gains near 1, as trained ones are
        weights[name] = w.astype(np.float32)
    return weights

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", help="a GPT-2 checkpoint of `wgml gpt train`")
    ap.add_argument("--prompt", default="The ")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--temperature", type=float, default=0.8, help="0: greedy (the most likely token)")
    args = ap.parse_args()
    if not args.temperature >= 0:
        ap.error("--temperature must be >= 0 (0: greedy), not %g" % args.temperature)
    rng = np.random.default_rng(0)

    if args.checkpoint:
        tensors, meta = wgml.load(args.checkpoint)
        if meta.get("arch") != "gpt2":
            raise SystemExit("gpt_forward.py runs the GPT-2 architecture, not %r" % meta.get("arch"))
        cfg = {k: int(meta[k]) for k in ("vocab", "block", "layers", "heads", "width", "ffn")}
        cfg["norm_eps"] = float(meta["norm_eps"])
        vocab = [int(b) for b in tensors["vocab"].numpy()]  # token i is this byte
        # the weights without the AdamW moments (".m", ".v") the checkpoint also holds
        params = {k: t for k, t in tensors.items() if not k.endswith((".m", ".v")) and k != "vocab"}
        host = {k: t.numpy() for k, t in params.items()}
        ids = [vocab.index(b) for b in args.prompt.encode() if b in vocab] or [0]
    else:
        cfg = {"vocab": 65, "block": 32, "layers": 2, "heads": 4, "width": 64, "ffn": 256, "norm_eps": 1e-5}
        host = random_weights(cfg, rng)
        params = {k: wgml.tensor(v) for k, v in host.items()}
        vocab = list(range(ord("0"), ord("0") + cfg["vocab"]))
        ids = list(rng.integers(0, cfg["vocab"], size=4))

    batch = rng.integers(0, cfg["vocab"], size=(3, min(17, cfg["block"]))).astype(np.int32)
    got = gpt2_forward(params, batch, cfg).numpy()
    want = numpy_forward({k: v.astype(np.float64) for k, v in host.items()}, batch, cfg)
    err = np.abs(got - want).max() / np.abs(want).max()
    print("logits %s, largest difference from NumPy (float64): %.2e of the largest logit" % (got.shape, err))
    if not err < 1e-4:
        raise SystemExit("the forward pass does not match NumPy")

    # sampling: the whole window again for each token (no KV cache here; the C model has one)
    for _ in range(args.tokens):
        window = np.array([ids[-cfg["block"]:]], dtype=np.int32)
        logits = gpt2_forward(params, window, cfg)[:, -1]  # [1, V]: the last position
        if args.temperature == 0:  # greedy: the most likely token (dividing by 0 would give NaN)
            ids.append(int(logits.argmax().item()))
            continue
        probs = wgml.softmax(logits / args.temperature).numpy()[0].astype(np.float64)
        ids.append(int(rng.choice(len(probs), p=probs / probs.sum())))
    print(repr(bytes(vocab[i] for i in ids).decode("utf-8", "replace")))


if __name__ == "__main__":
    main()
