#!/usr/bin/env python3
"""The data-parallel peer of `mpirun -np N wgml gpt train`: torch_gpt.py's model, data and
optimiser under DistributedDataParallel (NCCL, its default buckets), started by torchrun with
one process per GPU. Each rank trains on its share of the rows of the global batch, as wgml's
ranks do. Rank 0 prints the median step time and the global tokens/s and writes them as JSON.

  torchrun --nproc_per_node 4 bench/torch_gpt_ddp.py --init gpt.safetensors --batch 128 --json out.json

f32 with TF32 off, eager (torch.compile failed on the lent image), no dropout.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402  (the model, data and optimiser)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init", required=True, help="a wgml gpt checkpoint (the model and its settings)")
    p.add_argument("--data", help="the text folder (default: the checkpoint's)")
    p.add_argument("--batch", type=int, required=True, help="the global batch (split over the ranks)")
    p.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    p.add_argument("--amp", choices=tuple(torch_gpt.AMP_DTYPES), help="autocast in this dtype (fp16: with a GradScaler)")
    p.add_argument("--json", help="rank 0 writes the result here")
    args = p.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        torch_gpt.fail(f"batch {args.batch} does not split over {world} ranks")

    tensors, meta = torch_gpt.read_safetensors(args.init)
    cfg = torch_gpt.model_config(meta, tensors)
    targs = argparse.Namespace(batch=args.batch, seed=None, decay=None)
    t = torch_gpt.train_config(meta, targs)
    corpus = torch_gpt.Corpus(args.data or meta.get("data") or torch_gpt.DEFAULT_DATA)
    batches = torch_gpt.Batches(corpus, t["seed"], args.batch, cfg["block"], device)
    model = torch_gpt.load_model(tensors, cfg, device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch_gpt.make_optimizer(model, t)
    rows = args.batch // world

    scaler = torch_gpt.grad_scaler(args.amp, device)

    def step(s):
        x, y = batches.get(0, s)
        x, y = x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]
        for g in opt.param_groups:
            g["lr"] = torch_gpt.lr_at(t, s)
        if args.amp:
            with torch.autocast(device_type="cuda", dtype=torch_gpt.AMP_DTYPES[args.amp]):
                loss = torch_gpt.loss_of(ddp, x, y)
        else:
            loss = torch_gpt.loss_of(ddp, x, y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        if t["max_grad_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t["max_grad_norm"])
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        return loss.item()  # read back each step, as wgml reads its loss

    for s in range(args.warmup):
        step(s)
    torch.cuda.synchronize()
    times = []
    for s in range(args.warmup, args.warmup + args.steps):
        t0 = time.perf_counter()
        step(s)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    res = {"ranks": world, "batch": args.batch, "block": cfg["block"], "ms_per_step": ms,
           "tokens_per_s": args.batch * cfg["block"] / ms * 1e3, "device": torch.cuda.get_device_name(device),
           "torch": torch.__version__, "steps": args.steps, "warmup": args.warmup, "amp": args.amp or "f32"}
    if rank == 0:
        print(f"torch DDP {world} GPU(s) {args.amp or 'f32'}: batch {args.batch} x {cfg['block']}: {ms:.2f} ms/step, "
              f"{res['tokens_per_s']:.0f} tokens/s ({res['device']})", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
