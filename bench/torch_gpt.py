#!/usr/bin/env python3
"""The PyTorch peer of `wgml gpt train`: the same model, data, optimiser and schedule, started
from a wgml checkpoint, so that wgml's losses can be checked step by step and its speed
compared with PyTorch's on the same work.

The model (src/models/gpt.h), f32 with TF32 off, dropout only with --dropout (where wgml draws
it: after the embedding and after each block's attention and MLP, before the residual add; its
own masks, so only statistics are comparable): GPT-2 (layernorm, learned
positions, exact GELU) or Llama/Qwen (rmsnorm, RoPE rotate-half, grouped K/V, SwiGLU), head
tied to the embedding, matrices [in, out] used as x @ W as wgml stores them. The data
(src/io/text.h): a folder's files as one byte-level corpus, 90% train, batch i drawn by the
counter-based generator. The optimiser: AdamW betas and eps of the checkpoint, two groups (2-D
parameters with weight decay, 1-D without), clipping by global norm, the lr of wgml's
schedule (wgml_lr_at) set before each step. Step s (0-based) trains on training batch s.

  torch_gpt.py --init init.safetensors --steps 200 --compare metrics.csv   # loss parity
  torch_gpt.py --init init.safetensors --steps 5000 --eval-every 500       # a full run
  torch_gpt.py --init init.safetensors --bench [--compile] --json out.json # speed

Runs on CUDA when there is a GPU, else on the CPU (for checking). Exit status 1 when a
compared loss is off by more than --tol, 2 on bad input.
"""
import argparse
import csv
import json
import math
import os
import stat
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1
DEFAULT_DATA = "/usr/share/games/fortunes"


def fail(msg):
    print(f"torch_gpt: {msg}", file=sys.stderr)
    sys.exit(2)


def f32(x):
    """x rounded to the nearest f32, as wgml keeps its hyper-parameters."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ----------------------------------------------------------------------------- safetensors

ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
             "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8}


def read_safetensors(path):
    """(tensors by name, metadata): 8-byte little-endian header length, a JSON header giving
    each tensor's dtype, shape and [begin, end) byte offsets into the data after it, and
    "__metadata__" of strings."""
    if sys.byteorder != "little":
        fail("safetensors data is little-endian; this host is not")
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        fail(f"{path}: too short for a safetensors file")
    (hlen,) = struct.unpack_from("<Q", raw, 0)
    if 8 + hlen > len(raw):
        fail(f"{path}: header length {hlen} past the end of the file ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + hlen])
    meta = header.pop("__metadata__", None) or {}
    data = memoryview(raw)[8 + hlen:]
    tensors = {}
    for name, info in header.items():
        dtype = ST_DTYPES.get(info["dtype"])
        if dtype is None:
            fail(f"{path}: tensor {name} has dtype {info['dtype']}, not one this script reads")
        begin, end = info["data_offsets"]
        shape = info["shape"]
        numel = math.prod(shape)
        if not 0 <= begin <= end <= len(data) or end - begin != numel * dtype.itemsize:
            fail(f"{path}: tensor {name}'s offsets [{begin}, {end}) do not hold {shape} {info['dtype']}")
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if numel else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(shape)
    return tensors, meta


# ----------------------------------------------------------------------------- configuration

def meta_number(meta, key, kind, default=None):
    if key not in meta:
        if default is None:
            fail(f"checkpoint metadata has no '{key}'")
        return default
    text = meta[key]
    try:
        return int(text) if kind is int else float(text)
    except ValueError:
        fail(f"checkpoint metadata '{key}' = '{text}' is not a{'n integer' if kind is int else ' number'}")


def model_config(meta, tensors):
    """gpt.h's wgml_gpt_config from the checkpoint, its zeros resolved as wgml_gpt_config_resolve
    does (the MLP width read from the tensors, which settle any doubt about its rounding)."""
    if meta.get("format") != "wgml-gpt-1":
        fail(f"checkpoint format is '{meta.get('format')}', not 'wgml-gpt-1'")
    arch = meta.get("arch")
    if arch not in ("gpt2", "llama"):
        fail(f"checkpoint arch is '{arch}', not 'gpt2' or 'llama'")
    cfg = {"arch": arch}
    for key in ("vocab", "block", "layers", "heads", "width"):
        cfg[key] = meta_number(meta, key, int)
    cfg["kv_heads"] = meta_number(meta, "kv_heads", int, 0) or cfg["heads"]
    if arch == "gpt2" and cfg["kv_heads"] != cfg["heads"]:
        fail(f"gpt2 with kv_heads = {cfg['kv_heads']} != heads = {cfg['heads']}")
    cfg["ffn"] = meta_number(meta, "ffn", int, 0)
    if not cfg["ffn"]:  # unresolved: the MLP's first matrix says
        w = tensors.get("h.0.mlp.w1" if arch == "gpt2" else "h.0.mlp.wd")
        if w is None or w.dim() != 2:
            fail("checkpoint has ffn = 0 and no MLP matrix to read it from")
        cfg["ffn"] = w.shape[1] if arch == "gpt2" else w.shape[0]
    cfg["rope_base"] = f32(meta_number(meta, "rope_base", float, 0.0) or 10000.0)
    cfg["norm_eps"] = f32(meta_number(meta, "norm_eps", float, 0.0) or 1e-5)
    C, H, Hkv = cfg["width"], cfg["heads"], cfg["kv_heads"]
    if C % H or H % Hkv:
        fail(f"heads = {H} must divide width = {C} and kv_heads = {Hkv} must divide heads")
    if arch == "llama" and (C // H) % 2:
        fail(f"head width {C // H} is odd: RoPE pairs need it even")
    return cfg


def param_specs(cfg):
    """The parameters' names and shapes in gpt.h's order."""
    V, T, C, F_, L = cfg["vocab"], cfg["block"], cfg["width"], cfg["ffn"], cfg["layers"]
    D = C // cfg["heads"]
    if cfg["arch"] == "gpt2":
        specs = [("wte", [V, C]), ("wpe", [T, C])]
        layer = [("ln1.w", [C]), ("ln1.b", [C]), ("attn.wqkv", [C, 3 * C]), ("attn.bqkv", [3 * C]),
                 ("attn.wo", [C, C]), ("attn.bo", [C]), ("ln2.w", [C]), ("ln2.b", [C]),
                 ("mlp.w1", [C, F_]), ("mlp.b1", [F_]), ("mlp.w2", [F_, C]), ("mlp.b2", [C])]
        final = [("lnf.w", [C]), ("lnf.b", [C])]
    else:
        qkv = (cfg["heads"] + 2 * cfg["kv_heads"]) * D
        specs = [("wte", [V, C])]
        layer = [("norm1.w", [C]), ("attn.wqkv", [C, qkv]), ("attn.wo", [C, C]),
                 ("norm2.w", [C]), ("mlp.wgu", [C, 2 * F_]), ("mlp.wd", [F_, C])]
        final = [("normf.w", [C])]
    for l in range(L):
        specs += [(f"h.{l}.{n}", s) for n, s in layer]
    return specs + final


def train_config(meta, args):
    """The optimiser's and schedule's settings from the checkpoint, flags overriding."""
    t = {
        "lr": f32(meta_number(meta, "lr", float)),
        "min_lr_ratio": f32(meta_number(meta, "min_lr_ratio", float, 0.0)),
        "warmup": meta_number(meta, "warmup", int, 0),
        "total_steps": meta_number(meta, "total_steps", int, 0),
        "weight_decay": f32(meta_number(meta, "weight_decay", float, 0.0)),
        "max_grad_norm": f32(meta_number(meta, "max_grad_norm", float, 0.0)),
        "beta1": f32(meta_number(meta, "beta1", float, 0.0) or 0.9),
        "beta2": f32(meta_number(meta, "beta2", float, 0.0) or 0.99),
        "eps": 1e-8,
        "batch": args.batch or meta_number(meta, "batch", int),
        "seed": args.seed if args.seed is not None else meta_number(meta, "seed", int),
        "step": meta_number(meta, "step", int, 0),
        "decay": args.decay or meta.get("decay", "cosine"),
    }
    if t["decay"] not in ("cosine", "linear", "none"):
        fail(f"decay '{t['decay']}' is not cosine, linear or none")
    if t["decay"] != "none" and t["total_steps"] <= t["warmup"]:
        fail(f"total_steps = {t['total_steps']} must exceed warmup = {t['warmup']} with a {t['decay']} decay")
    return t


def lr_at(t, step):
    """wgml_lr_at: linear warm-up from base / (warmup + 1), then the decay to min_lr_ratio x base
    at total_steps; in double, rounded to f32."""
    base = t["lr"]
    if step < t["warmup"]:
        return f32(base * (step + 1) / (t["warmup"] + 1))
    if t["decay"] == "none":
        return base
    low = base * t["min_lr_ratio"]
    if step >= t["total_steps"]:
        return f32(low)
    r = (step - t["warmup"]) / (t["total_steps"] - t["warmup"])
    shape = 0.5 * (1 + math.cos(math.pi * r)) if t["decay"] == "cosine" else 1 - r
    return f32(low + (base - low) * shape)


# ----------------------------------------------------------------------------- data

def read_corpus(folder):
    """The folder's regular files (links, hidden files and names ending .dat skipped), in byte
    order of their names, as one byte string."""
    try:
        names = sorted(os.listdir(os.fsencode(folder)))
    except OSError as e:
        fail(f"cannot read the folder {folder}: {e.strerror}")
    parts = []
    for name in names:
        path = os.path.join(os.fsencode(folder), name)
        if name.startswith(b".") or name.endswith(b".dat") or not stat.S_ISREG(os.lstat(path).st_mode):
            continue
        with open(path, "rb") as f:
            parts.append(f.read())
    text = b"".join(parts)
    if not text:
        fail(f"{folder}: no text (no regular files, or all empty)")
    return text, len(parts)


class Corpus:
    """text.h's corpus: the vocabulary is the distinct bytes in increasing order, a token a
    byte's index in it; the first 90% of the tokens (rounded down) train, the rest validate."""

    def __init__(self, folder):
        text, self.files = read_corpus(folder)
        self.vocab = sorted(set(text))
        table = bytearray(256)
        for token, byte in enumerate(self.vocab):
            table[byte] = token
        self.tokens = torch.frombuffer(bytearray(text.translate(bytes(table))), dtype=torch.uint8).long()
        self.n = len(text)
        self.n_train = self.n * 9 // 10

    def split(self, s):
        return self.tokens[:self.n_train] if s == 0 else self.tokens[self.n_train:]


def mix(z):
    """text.h's mixing function, mod 2^64."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def batch_starts(seed, split, i, batch, span):
    """The windows' first tokens of batch i of a split: row r starts at
    mix(mix(seed + split) + i * batch + r) mod (len(split) - block)."""
    key = mix((seed + split) & MASK64)
    return [mix((key + i * batch + r) & MASK64) % span for r in range(batch)]


class Batches:
    """Batch i of split s as (x, y) [batch, block] int64 on the device."""

    def __init__(self, corpus, seed, batch, block, device):
        self.seed, self.batch, self.block = seed, batch, block
        self.splits = [corpus.split(s).to(device) for s in (0, 1)]
        for s, data in enumerate(self.splits):
            if len(data) <= block:
                fail(f"the {('training', 'validation')[s]} split ({len(data)} tokens) is not longer than block = {block}")
        self.window = torch.arange(block + 1, device=device)

    def get(self, split, i):
        data = self.splits[split]
        starts = batch_starts(self.seed, split, i, self.batch, len(data) - self.block)
        rows = data[torch.tensor(starts, device=data.device)[:, None] + self.window]
        return rows[:, :-1], rows[:, 1:]


# ----------------------------------------------------------------------------- model

class GPT(torch.nn.Module):
    """gpt.h's two architectures over explicit [in, out] parameters named as in the checkpoint.
    forward(idx) gives logits [B, T, V]; with a KV cache (new_cache) it appends idx's keys and
    values at position pos (a prompt from pos 0, or one token at a time)."""

    def __init__(self, cfg, weights, dropout=0.0):
        super().__init__()
        self.cfg = cfg
        self.dropout = dropout
        self.llama = cfg["arch"] == "llama"
        self.C, self.H, self.Hkv = cfg["width"], cfg["heads"], cfg["kv_heads"]
        self.D = self.C // self.H
        self.names = [name for name, _ in param_specs(cfg)]
        self.slot = {name: i for i, name in enumerate(self.names)}
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(weights[n].clone()) for n in self.names)
        if self.llama:
            # HF's f32 frequencies and f32 angles, as wgml_rope
            freq = 1.0 / cfg["rope_base"] ** (torch.arange(0, self.D, 2, dtype=torch.float32) / self.D)
            angle = torch.arange(cfg["block"], dtype=torch.float32)[:, None] * freq[None, :]
            self.register_buffer("cos", angle.cos(), persistent=False)
            self.register_buffer("sin", angle.sin(), persistent=False)

    def w(self, name):
        return self.weights[self.slot[name]]

    def norm(self, x, prefix):
        eps = self.cfg["norm_eps"]
        if self.llama:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.w(prefix + ".w")
        return F.layer_norm(x, (self.C,), self.w(prefix + ".w"), self.w(prefix + ".b"), eps)

    def rope(self, x, pos):
        T, half = x.shape[2], self.D // 2
        cos, sin = self.cos[pos:pos + T], self.sin[pos:pos + T]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def attention(self, l, h, cache, pos):
        B, T, _ = h.shape
        p = f"h.{l}.attn."
        qkv = h @ self.w(p + "wqkv")
        if not self.llama:
            qkv = qkv + self.w(p + "bqkv")
        q, k, v = qkv.split((self.H * self.D, self.Hkv * self.D, self.Hkv * self.D), dim=-1)
        q = q.view(B, T, self.H, self.D).transpose(1, 2)
        k = k.view(B, T, self.Hkv, self.D).transpose(1, 2)
        v = v.view(B, T, self.Hkv, self.D).transpose(1, 2)
        if self.llama:
            q, k = self.rope(q, pos), self.rope(k, pos)
        causal = True
        if cache is not None:
            kc, vc = cache[l]
            kc[:, :, pos:pos + T] = k
            vc[:, :, pos:pos + T] = v
            k, v = kc[:, :, :pos + T], vc[:, :, :pos + T]
            causal = T > 1  # a prompt from position 0; one new token sees everything cached
        if self.Hkv != self.H:  # query head h reads K/V head h / (H / Hkv)
            k = k.repeat_interleave(self.H // self.Hkv, dim=1)
            v = v.repeat_interleave(self.H // self.Hkv, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        a = a.transpose(1, 2).reshape(B, T, self.C) @ self.w(p + "wo")
        return a if self.llama else a + self.w(p + "bo")

    def mlp(self, l, h):
        p = f"h.{l}.mlp."
        if self.llama:
            g, u = (h @ self.w(p + "wgu")).chunk(2, dim=-1)
            return (F.silu(g) * u) @ self.w(p + "wd")
        h = F.gelu(h @ self.w(p + "w1") + self.w(p + "b1"))  # exact (erf) GELU
        return h @ self.w(p + "w2") + self.w(p + "b2")

    def drop(self, x):
        return F.dropout(x, self.dropout, self.training) if self.dropout > 0 else x

    def forward(self, idx, cache=None, pos=0):
        T = idx.shape[1]
        assert cache is None or T == 1 or pos == 0, "a cached prompt starts at position 0"
        x = F.embedding(idx, self.w("wte"))
        if not self.llama:
            x = x + self.w("wpe")[pos:pos + T]
        x = self.drop(x)
        n1, n2, nf = ("norm1", "norm2", "normf") if self.llama else ("ln1", "ln2", "lnf")
        for l in range(self.cfg["layers"]):
            x = x + self.drop(self.attention(l, self.norm(x, f"h.{l}.{n1}"), cache, pos))
            x = x + self.drop(self.mlp(l, self.norm(x, f"h.{l}.{n2}")))
        return self.norm(x, nf) @ self.w("wte").t()

    def new_cache(self, batch, device):
        shape = (batch, self.Hkv, self.cfg["block"], self.D)
        return [(torch.zeros(shape, device=device), torch.zeros(shape, device=device))
                for _ in range(self.cfg["layers"])]


def load_model(tensors, cfg, device, dropout=0.0):
    for name, shape in param_specs(cfg):
        if name not in tensors:
            fail(f"checkpoint has no tensor '{name}'")
        if list(tensors[name].shape) != shape or tensors[name].dtype != torch.float32:
            fail(f"tensor '{name}' is {list(tensors[name].shape)} {tensors[name].dtype}, expected {shape} float32")
    return GPT(cfg, tensors, dropout).to(device)


def make_optimizer(model, t):
    """AdamW in two groups, the 2-D parameters (decayed) first, each in gpt.h's order."""
    params = list(model.weights)
    groups = [{"params": [p for p in params if p.dim() == 2], "weight_decay": t["weight_decay"]},
              {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["eps"])


def load_moments(model, opt, tensors, steps):
    """A resumed checkpoint's moments "<name>.m" / "<name>.v" into the optimiser's state; False
    when the checkpoint has none."""
    names = [n for n in model.names if n + ".m" in tensors and n + ".v" in tensors]
    if not names:
        return False
    if len(names) != len(model.names):
        fail(f"checkpoint has moments for {len(names)} of {len(model.names)} parameters")
    for name in model.names:
        p = model.w(name)
        opt.state[p] = {"step": torch.tensor(float(steps)),
                        "exp_avg": tensors[name + ".m"].to(p.device).reshape(p.shape).clone(),
                        "exp_avg_sq": tensors[name + ".v"].to(p.device).reshape(p.shape).clone()}
    return True


# ----------------------------------------------------------------------------- training

def loss_of(forward, x, y):
    logits = forward(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def train_step(forward, model, opt, t, batches, step, amp=None, scaler=None):
    """Step `step` (steps taken before it): training batch `step`, the lr of that step. The
    loss (before the update) and the gradient norm (before clipping, unscaled), as tensors.
    amp: None (f32), or "fp16" / "bf16" autocast, with scaler a GradScaler for fp16."""
    x, y = batches.get(0, step)
    lr = lr_at(t, step)
    for g in opt.param_groups:
        g["lr"] = lr
    if amp:
        with torch.autocast(device_type=x.device.type, dtype=AMP_DTYPES[amp]):
            loss = loss_of(forward, x, y)
    else:
        loss = loss_of(forward, x, y)
    opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
    else:
        loss.backward()
    if t["max_grad_norm"] > 0:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t["max_grad_norm"])
    else:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()]))
    if scaler is not None:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    return loss.detach(), norm.detach(), lr


def grad_scaler(amp, device):
    """PyTorch's GradScaler (its defaults: 2^16, 2000 steps, 0.5, 2) for fp16; None otherwise."""
    if amp != "fp16":
        return None
    return torch.amp.GradScaler(device.type)


@torch.no_grad()
def validation_loss(model, batches, count):
    """The mean loss of validation batches 0 .. count-1 (no dropout)."""
    was = model.training
    model.eval()
    v = sum(loss_of(model, *batches.get(1, i)).item() for i in range(count)) / count
    model.train(was)
    return v


def read_metrics(path):
    """wgml's metrics CSV: loss by step (1-based: steps taken after the update), plus the other
    columns of those rows."""
    rows = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or "step" not in reader.fieldnames or "loss" not in reader.fieldnames:
            fail(f"{path}: the header needs columns 'step' and 'loss' (it has {reader.fieldnames})")
        for row in reader:
            if row.get("loss", "").strip():
                rows[int(float(row["step"]))] = row
    return rows


def rel_diff(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def run_training(args, tensors, model, t, batches, device):
    opt = make_optimizer(model, t)
    scaler = grad_scaler(args.amp, device)
    first = t["step"]
    if first and not load_moments(model, opt, tensors, first):
        print(f"warning: the checkpoint is at step {first} but has no moments: AdamW starts afresh",
              file=sys.stderr)
    wgml = read_metrics(args.compare) if args.compare else None
    checked = min(args.compare_steps, args.steps)
    out = {"first_step": first, "steps": [], "eval": []}
    worst, failed = 0.0, []
    cols = "step        lr   torch loss" + ("    wgml loss   rel diff" if wgml is not None else "") + "   grad norm"
    print(cols)
    t0 = time.perf_counter()
    for k in range(args.steps):
        s = first + k
        loss, norm, lr = train_step(model, model, opt, t, batches, s, args.amp, scaler)
        rec = {"step": s + 1, "lr": lr, "loss": loss.item(), "grad_norm": norm.item()}
        line = f"{s + 1:5d} {lr:9.3e} {rec['loss']:12.7f}"
        row = wgml.get(s + 1) if wgml is not None else None
        if wgml is not None:
            if row is None:
                if k < checked:
                    fail(f"{args.compare} has no loss for step {s + 1}")
            else:
                rec["wgml_loss"] = float(row["loss"])
                rec["rel_diff"] = rel_diff(rec["loss"], rec["wgml_loss"])
                line += f" {rec['wgml_loss']:12.7f} {rec['rel_diff']:10.3e}"
                if k < checked:
                    worst = max(worst, rec["rel_diff"])
                    if rec["rel_diff"] > args.tol:
                        failed.append(s + 1)
                if row.get("lr", "").strip() and rel_diff(lr, float(row["lr"])) > 1e-5:
                    line += f"  (wgml lr {float(row['lr']):.6e})"
        line += f" {rec['grad_norm']:11.5f}"
        if row is not None and row.get("grad_norm", "").strip():
            rec["wgml_grad_norm"] = float(row["grad_norm"])
            line += f" (wgml {rec['wgml_grad_norm']:.5f})"
        if failed and failed[-1] == s + 1:
            line += "  <-- over tol"
        print(line, flush=True)
        out["steps"].append(rec)
        done = k + 1 == args.steps
        if args.eval_every and ((s + 1) % args.eval_every == 0 or done):
            v = validation_loss(model, batches, args.eval_batches)
            out["eval"].append({"step": s + 1, "val_loss": v})
            print(f"step {s + 1}: validation loss {v:.6f} ({args.eval_batches} batches)", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    out["seconds"] = time.perf_counter() - t0
    if wgml is not None:
        out["compare"] = {"file": args.compare, "steps_checked": checked, "max_rel_diff": worst,
                          "tol": args.tol, "over_tol": failed, "ok": not failed}
        print(f"max relative difference over the first {checked} steps: {worst:.3e} "
              f"(tol {args.tol:g}): {'ok' if not failed else f'{len(failed)} over, first at step {failed[0]}'}")
    return out


# ----------------------------------------------------------------------------- benchmarks

def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def bench_training(args, model, forward, t, batches, device, amp=None):
    """Median ms of a whole training step (batch, forward, backward, clipping, AdamW, the loss
    read back as wgml reads it) over --bench-steps after --bench-warmup, and the peak memory."""
    if device.type == "cuda":  # the caching allocator's peak of this run alone (wgml's bench releases its pool too)
        torch.cuda.empty_cache()
    opt = make_optimizer(model, t)
    scaler = grad_scaler(amp, device)
    for s in range(args.bench_warmup):
        train_step(forward, model, opt, t, batches, s, amp, scaler)[0].item()
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for s in range(args.bench_warmup, args.bench_warmup + args.bench_steps):
        t0 = time.perf_counter()
        train_step(forward, model, opt, t, batches, s, amp, scaler)[0].item()
        sync(device)
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    res = {"ms_per_step": ms, "tokens_per_s": batches.batch * batches.block / ms * 1e3,
           "steps": args.bench_steps, "warmup": args.bench_warmup}
    if device.type == "cuda":
        res["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        res["peak_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20  # beside wgml's peak_pool
    return res


@torch.no_grad()
def generate(model, prompt, n, use_cache, device):
    """n greedy tokens at batch 1 after prompt: without a cache the nanoGPT way (the whole
    context, cropped to block, again for each token), with one by appending one token's keys
    and values a step (stopping at block tokens)."""
    block = model.cfg["block"]
    idx = prompt.clone()
    if not use_cache:
        for _ in range(n):
            logits = model(idx[:, -block:])[:, -1]
            idx = torch.cat((idx, logits.argmax(-1, keepdim=True)), dim=1)
        return idx
    cache = model.new_cache(1, device)
    logits = model(idx, cache, 0)[:, -1]
    steps = min(n, block + 1 - idx.shape[1])  # the last token fed sits at position block - 1
    for i in range(steps):
        nxt = logits.argmax(-1, keepdim=True)
        idx = torch.cat((idx, nxt), dim=1)
        if i + 1 < steps:
            logits = model(nxt, cache, idx.shape[1] - 1)[:, -1]
    return idx


def bench_generation(args, model, batches, device):
    """Tokens per second at batch 1, greedy, from the first token of the validation split; the
    cached run's tokens checked against the uncached ones."""
    n = args.gen_tokens or model.cfg["block"] - 1
    prompt = batches.splits[1][:1].view(1, 1)
    res = {}
    outs = {}
    for name, use_cache in (("no_cache", False), ("kv_cache", True)):
        generate(model, prompt, min(n, 8), use_cache, device)  # warm-up
        sync(device)
        t0 = time.perf_counter()
        out = generate(model, prompt, n, use_cache, device)
        sync(device)
        s = time.perf_counter() - t0
        made = out.shape[1] - 1
        outs[name] = out
        res[name] = {"tokens": made, "ms_per_token": s / made * 1e3, "tokens_per_s": made / s}
    m = min(outs["no_cache"].shape[1], outs["kv_cache"].shape[1])
    res["kv_cache"]["same_tokens"] = bool(torch.equal(outs["no_cache"][:, :m], outs["kv_cache"][:, :m]))
    return res


def run_bench(args, tensors, cfg, t, batches, device):
    out = {}
    model = load_model(tensors, cfg, device)
    out["train_eager"] = bench_training(args, model, model, t, batches, device)
    print_bench("train eager", out["train_eager"])
    for amp in args.bench_amp.split(",") if args.bench_amp else []:
        if amp not in AMP_DTYPES:
            fail(f"--bench-amp: {amp} is not one of {', '.join(AMP_DTYPES)}")
        model = load_model(tensors, cfg, device)
        out[f"train_amp_{amp}"] = bench_training(args, model, model, t, batches, device, amp)
        print_bench(f"train amp {amp}", out[f"train_amp_{amp}"])
        if args.compile:
            model = load_model(tensors, cfg, device)
            try:
                compiled = torch.compile(model)
                out[f"train_compile_amp_{amp}"] = bench_training(args, model, compiled, t, batches, device, amp)
                print_bench(f"compile {amp}", out[f"train_compile_amp_{amp}"])
            except Exception as e:  # the image's Triton has failed to build kernels: keep the rest
                out[f"train_compile_amp_{amp}"] = {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
                print(f"compile {amp}: failed ({out[f'train_compile_amp_{amp}']['error']})")
    if args.compile:
        model = load_model(tensors, cfg, device)
        t0 = time.perf_counter()
        compiled = torch.compile(model)
        out["train_compile"] = bench_training(args, model, compiled, t, batches, device)
        out["train_compile"]["compile_and_warmup_s"] = time.perf_counter() - t0
        print_bench("train compile", out["train_compile"])
    model = load_model(tensors, cfg, device)
    model.eval()
    out["generate"] = bench_generation(args, model, batches, device)
    for name, r in out["generate"].items():
        print(f"generate {name:9s} {r['ms_per_token']:9.3f} ms/token {r['tokens_per_s']:10.1f} tokens/s "
              f"({r['tokens']} tokens{', same as uncached' if r.get('same_tokens') else ''})")
    return out


def print_bench(name, r):
    peak = f" peak {r['peak_mib']:.1f} MiB" if "peak_mib" in r else ""
    if "peak_reserved_mib" in r:
        peak += f" (reserved {r['peak_reserved_mib']:.1f} MiB)"
    print(f"{name:14s} {r['ms_per_step']:9.3f} ms/step {r['tokens_per_s']:12.1f} tokens/s{peak}")


# ----------------------------------------------------------------------------- main

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init", required=True, help="wgml's checkpoint to start from (safetensors)")
    p.add_argument("--data", help="the text folder (default: the checkpoint's 'data', else %s)" % DEFAULT_DATA)
    p.add_argument("--steps", type=int, default=0, help="training steps to take")
    p.add_argument("--batch", type=int, help="batch size (default: the checkpoint's)")
    p.add_argument("--block", type=int, help="context length T (default: the checkpoint's block)")
    p.add_argument("--seed", type=int, help="the batches' seed (default: the checkpoint's seed)")
    p.add_argument("--decay", choices=("cosine", "linear", "none"),
                   help="the lr decay (default: the checkpoint's 'decay', else cosine)")
    p.add_argument("--compare", metavar="METRICS.csv", help="wgml's metrics (columns step, loss) to check against")
    p.add_argument("--tol", type=float, default=1e-4, help="largest relative loss difference allowed (default 1e-4)")
    p.add_argument("--compare-steps", type=int, default=50, help="steps held to --tol (default 50)")
    p.add_argument("--eval-every", type=int, default=0, help="validation loss every N steps and at the end")
    p.add_argument("--eval-batches", type=int,
                   help="validation batches 0..K-1 (default: the checkpoint's eval_batches, else 8)")
    p.add_argument("--bench", action="store_true", help="time training steps and generation")
    p.add_argument("--compile", action="store_true", help="with --bench: torch.compile too")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="train with dropout P (PyTorch's masks, not wgml's: for validation-loss comparisons)")
    p.add_argument("--amp", choices=tuple(AMP_DTYPES), help="train with autocast in this dtype (fp16: with a GradScaler)")
    p.add_argument("--bench-amp", metavar="LIST", help="with --bench: also time autocast steps, e.g. fp16,bf16")
    p.add_argument("--bench-steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--bench-warmup", type=int, default=5, help="untimed steps first (default 5)")
    p.add_argument("--gen-tokens", type=int, default=0, help="tokens to generate (default block - 1)")
    p.add_argument("--device", help="cuda or cpu (default: cuda if available)")
    p.add_argument("--json", metavar="PATH", help="write every result here as JSON")
    return p.parse_args()


def main():
    args = parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))

    tensors, meta = read_safetensors(args.init)
    cfg = model_config(meta, tensors)
    t = train_config(meta, args)
    args.eval_batches = args.eval_batches or meta_number(meta, "eval_batches", int, 8)
    block = args.block or cfg["block"]
    if block > cfg["block"]:
        fail(f"--block {block} is longer than the model's block {cfg['block']}")
    if not 0 <= args.dropout < 1:
        fail(f"--dropout {args.dropout}: want [0, 1)")
    if float(meta.get("dropout", "0") or 0) != args.dropout:
        print(f"warning: the checkpoint's dropout is {meta.get('dropout', '0')}; this run uses {args.dropout}", file=sys.stderr)

    folder = args.data or meta.get("data") or DEFAULT_DATA
    corpus = Corpus(folder)
    vocab = tensors.get("vocab")
    if vocab is not None and [int(b) for b in vocab.tolist()] != corpus.vocab:
        fail(f"the vocabulary of {folder} ({len(corpus.vocab)} bytes) differs from the checkpoint's ({vocab.numel()})")
    if len(corpus.vocab) != cfg["vocab"]:
        fail(f"{folder} has {len(corpus.vocab)} distinct bytes; the model's vocab is {cfg['vocab']}")
    batches = Batches(corpus, t["seed"], t["batch"], block, device)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}: {cfg['arch']} V={cfg['vocab']} block={cfg['block']} "
          f"L={cfg['layers']} H={cfg['heads']} Hkv={cfg['kv_heads']} C={cfg['width']} F={cfg['ffn']}, "
          f"{sum(math.prod(shape) for _, shape in param_specs(cfg)):,} parameters; "
          f"batch {t['batch']} x {block}, {folder}: {corpus.files} files, {corpus.n:,} tokens "
          f"({corpus.n_train:,} train)")
    results = {"device": name, "torch": torch.__version__, "model": cfg,
               "train_settings": {**t, "block": block}, "data": {"folder": folder, "files": corpus.files,
                                                                 "tokens": corpus.n, "train_tokens": corpus.n_train}}
    status = 0
    if args.steps > 0:
        model = load_model(tensors, cfg, device, args.dropout)
        model.train()
        results["train"] = run_training(args, tensors, model, t, batches, device)
        if not results["train"].get("compare", {}).get("ok", True):
            status = 1
    if args.bench:
        results["bench"] = run_bench(args, tensors, cfg, t, batches, device)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
