"""A character-level GPT trained on several GPUs from Python: one process a GPU, started by MPI.

    mpirun -np 2 --bind-to none python gpt_data_parallel.py --steps 200     # Open MPI
    mpiexec.mpich -n 2 python gpt_data_parallel.py --steps 200              # MPICH
    python gpt_data_parallel.py --steps 20                                  # one process

Every rank draws the same global batch and trains on its share; wgml.dist averages the
gradients over the ranks during the backward pass, so the ranks take the global batch's steps
and stay identical (checked at the end). Rank 0 prints the global batch's loss.
"""
import argparse
import os
import time

import numpy as np

import wgml.dist as dist
from wgml.gpt import GPT


def read_text(path):
    """The text of a file, or of every file of a folder (Debian's fortunes by default); a
    made-up one where there is none."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.endswith(".dat") and not n.startswith("."))
        files = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
        return b"".join(open(f, "rb").read() for f in files)
    if os.path.isfile(path):
        return open(path, "rb").read()
    return b"".join(b"line %d: the quick brown fox jumps over the lazy dog\n" % i for i in range(2000))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", default="/usr/share/games/fortunes")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32, help="the global batch: split over the ranks")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--precision", default="f32", choices=["f32", "mixed"])
    args = ap.parse_args()

    dist.init()  # first: each rank then opens the GPU of its local rank
    rank, ranks = dist.rank(), dist.size()
    if args.batch % ranks:
        raise SystemExit("--batch %d does not split over %d ranks" % (args.batch, ranks))
    text = read_text(args.text)
    model = GPT.new(vocabulary=text, block=args.block, layers=args.layers, heads=4, width=args.width, seed=1)
    dist.broadcast(model)  # every rank from rank 0's weights
    opt = model.optimizer(lr=3e-3, max_grad_norm=1.0, warmup_steps=min(10, args.steps // 2), total_steps=args.steps, decay="cosine",
                          precision=args.precision)
    dist.data_parallel(opt)
    ids = model.encode(text)
    start = time.time()
    for step in range(1, args.steps + 1):
        x, y = model.batch(ids, args.batch, seed=step)  # the same global batch on every rank
        loss = model.train_step(opt, x[rank::ranks], y[rank::ranks])
        loss = dist.all_reduce_host([loss])[0]  # the global batch's
        if rank == 0 and (step % 20 == 0 or step == args.steps):
            print("step %d  loss %.4f  %.0f tokens/s" % (step, loss, step * args.batch * args.block / (time.time() - start)),
                  flush=True)
    # the replicas: N ranks' parameter sums t_r are all equal exactly where N x sum(t_r^2) = (sum t_r)^2
    total = sum(float(np.sum(v, dtype=np.float64)) for v in model.state_dict().values())
    same = dist.all_reduce_host([total, total * total], op="sum")
    if rank == 0:
        print("%d rank(s): parameters %s" % (ranks, "identical" if abs(same[1] * ranks - same[0] ** 2) <= 1e-9 * same[0] ** 2
                                             else "DIFFER"))
    dist.finalize()


if __name__ == "__main__":
    main()
