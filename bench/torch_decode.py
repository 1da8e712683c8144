#!/usr/bin/env python3
"""PyTorch eager peer of `wgml bench decode` (tools/bench_decode.c): greedy generation with a KV
cache on the same shapes, random weights.

  char GPT:  GPT-2, 6 layers, 6 heads, width 384, block 256, f32; batch 1 and 8, a 1-token
             prompt, block - 1 tokens (as wgml's gpt_generate_plan_b1/_b8 rows)
  qwen3:     Llama/Qwen3-0.6B shape (28 layers, width 1024, 16 query / 8 K/V heads of 128,
             QK-norm, SwiGLU 3072, tied 151,936-token embedding, RoPE base 1e6), f16 weights
             and activations; prompts of 512 tokens prefilled, then 64 tokens, batch 1 and 8

Prints one JSON line per row: tokens/s over all sequences, ms per token step.

Usage: torch_decode.py [--device cuda] [--quick] [--only char|qwen3]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


class Decoder(torch.nn.Module):
    """A decoder-only transformer with a static KV cache; [in, out] weights as in wgml."""

    def __init__(self, c, dtype, device):
        super().__init__()
        self.c = c
        g = torch.Generator(device="cpu").manual_seed(1)

        def rnd(*shape, std=0.02):
            return (torch.randn(*shape, generator=g) * std).to(device=device, dtype=dtype)

        C, H, Hkv, D, Fd = c["width"], c["heads"], c["kv_heads"], c["head_dim"], c["ffn"]
        self.llama = c["arch"] == "llama"
        self.wte = rnd(c["vocab"], C)
        if not self.llama:
            self.wpe = rnd(c["block"], C)
        self.layers = []
        for _ in range(c["layers"]):
            L = {"n1": torch.ones(C, device=device, dtype=dtype), "n2": torch.ones(C, device=device, dtype=dtype),
                 "wqkv": rnd(C, (H + 2 * Hkv) * D), "wo": rnd(H * D, C)}
            if self.llama:
                L.update(wgu=rnd(C, 2 * Fd), wd=rnd(Fd, C))
                if c["qk_norm"]:
                    L.update(qn=torch.ones(D, device=device, dtype=dtype), kn=torch.ones(D, device=device, dtype=dtype))
            else:
                z = lambda n: torch.zeros(n, device=device, dtype=dtype)
                L.update(b1n=z(C), b2n=z(C), bqkv=z((H + 2 * Hkv) * D), bo=z(C), w1=rnd(C, Fd), b1=z(Fd), w2=rnd(Fd, C), b2=z(C))
            self.layers.append(L)
        self.nf = torch.ones(C, device=device, dtype=dtype)
        self.nfb = torch.zeros(C, device=device, dtype=dtype)
        if self.llama:
            freq = 1.0 / c["rope_base"] ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
            ang = torch.arange(c["block"], dtype=torch.float32)[:, None] * freq[None, :]
            self.cos, self.sin = ang.cos().to(device, dtype), ang.sin().to(device, dtype)

    def norm(self, x, w, b=None, eps=None):
        eps = self.c["norm_eps"] if eps is None else eps
        if self.llama:
            return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * w
        return F.layer_norm(x, (x.shape[-1],), w, b, eps)

    def rope(self, x, pos):
        T, half = x.shape[2], x.shape[3] // 2
        cos, sin = self.cos[pos:pos + T], self.sin[pos:pos + T]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def forward(self, idx, cache, pos):
        c = self.c
        B, T = idx.shape
        H, Hkv, D = c["heads"], c["kv_heads"], c["head_dim"]
        x = F.embedding(idx, self.wte)
        if not self.llama:
            x = x + self.wpe[pos:pos + T]
        for l, L in enumerate(self.layers):
            h = self.norm(x, L["n1"], L.get("b1n"))
            qkv = h @ L["wqkv"]
            if not self.llama:
                qkv = qkv + L["bqkv"]
            q, k, v = qkv.split((H * D, Hkv * D, Hkv * D), dim=-1)
            q = q.view(B, T, H, D).transpose(1, 2)
            k = k.view(B, T, Hkv, D).transpose(1, 2)
            v = v.view(B, T, Hkv, D).transpose(1, 2)
            if self.llama and c["qk_norm"]:
                q, k = self.norm(q, L["qn"]), self.norm(k, L["kn"])
            if self.llama:
                q, k = self.rope(q, pos), self.rope(k, pos)
            kc, vc = cache[l]
            kc[:, :, pos:pos + T] = k
            vc[:, :, pos:pos + T] = v
            k, v = kc[:, :, :pos + T], vc[:, :, :pos + T]
            if Hkv != H:
                k = k.repeat_interleave(H // Hkv, dim=1)
                v = v.repeat_interleave(H // Hkv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
            a = a.transpose(1, 2).reshape(B, T, H * D) @ L["wo"]
            x = x + (a if self.llama else a + L["bo"])
            h = self.norm(x, L["n2"], L.get("b2n"))
            if self.llama:
                g_, u = (h @ L["wgu"]).chunk(2, dim=-1)
                x = x + (F.silu(g_) * u) @ L["wd"]
            else:
                x = x + F.gelu(h @ L["w1"] + L["b1"]) @ L["w2"] + L["b2"]
        return self.norm(x[:, -1:], self.nf, self.nfb) @ self.wte.t()

    def new_cache(self, batch, dtype, device):
        c = self.c
        shape = (batch, c["kv_heads"], c["block"], c["head_dim"])
        return [(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))
                for _ in range(c["layers"])]


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@torch.no_grad()
def bench(name, c, dtype, batch, n_prompt, ntok, device, reps):
    m = Decoder(c, dtype, device)
    prompt = (torch.arange(batch * n_prompt, device=device).view(batch, n_prompt) * 2654435761 + 7) % c["vocab"]
    best, best_prefill = float("inf"), float("inf")
    for r in range(reps + 1):
        cache = m.new_cache(batch, dtype, device)
        sync(device)
        t0 = time.perf_counter()
        nxt = m(prompt, cache, 0)[:, -1].argmax(-1, keepdim=True)
        sync(device)
        t1 = time.perf_counter()
        pos = n_prompt
        for _ in range(ntok):
            nxt = m(nxt, cache, pos)[:, -1].argmax(-1, keepdim=True)
            pos += 1
        sync(device)
        t2 = time.perf_counter()
        if r > 0:  # the first warms up
            best, best_prefill = min(best, t2 - t1), min(best_prefill, t1 - t0)
    row = {"name": name, "batch": batch, "prompt": n_prompt, "tokens": ntok, "dtype": str(dtype).replace("torch.", ""),
           "tokens_per_s": batch * ntok / best, "ms_per_step": best / ntok * 1e3, "prefill_ms": best_prefill * 1e3,
           "device": torch.cuda.get_device_name() if device.startswith("cuda") else device}
    print(json.dumps(row), flush=True)
    del m
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="small shapes (a CPU check)")
    p.add_argument("--only", choices=("char", "qwen3"))
    a = p.parse_args()
    q = a.quick
    char = {"arch": "gpt2", "vocab": 114, "block": 32 if q else 256, "layers": 2 if q else 6, "heads": 2 if q else 6,
            "kv_heads": 2 if q else 6, "width": 64 if q else 384, "ffn": 256 if q else 1536, "norm_eps": 1e-5}
    char["head_dim"] = char["width"] // char["heads"]
    qwen = {"arch": "llama", "vocab": 1000 if q else 151936, "block": 64 if q else 1024, "layers": 2 if q else 28,
            "heads": 4 if q else 16, "kv_heads": 2 if q else 8, "width": 64 if q else 1024, "head_dim": 32 if q else 128,
            "qk_norm": 1, "ffn": 192 if q else 3072, "rope_base": 1e6, "norm_eps": 1e-6}
    if a.only in (None, "char"):
        for b in (1, 8):
            bench(f"torch_char_gpt_b{b}", char, torch.float32, b, 1, char["block"] - 1, a.device, 2)
    if a.only in (None, "qwen3"):
        dt = torch.float16 if a.device.startswith("cuda") else torch.float32
        for b in (1, 8):
            bench(f"torch_qwen3_0.6b_b{b}", qwen, dt, b, 24 if q else 512, 16 if q else 64, a.device, 2)


if __name__ == "__main__":
    main()
