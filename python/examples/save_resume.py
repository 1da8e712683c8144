"""Save a whole model and its optimiser mid-training, resume in a fresh process, and get the
run that never stopped: a small MLP regressing a random target with AdamW.

    python save_resume.py [STEPS (default 20)] [CHECKPOINT (default a temporary file)]

It trains STEPS steps straight; then trains STEPS/2, saves the parameters and
opt.state_dict() into one safetensors file (moments as tensors, numbers as metadata),
rebuilds everything from that file alone and trains the rest. The two final losses must
agree bit for bit (the same kernels on the same data in the same order).
"""
import json
import os
import sys
import tempfile

import numpy as np

import wgml


def make_model(rng):
    return {"w1": wgml.tensor(rng.normal(0, 0.5, (8, 16))), "b1": wgml.zeros(16),
            "w2": wgml.tensor(rng.normal(0, 0.5, (16, 1))), "b2": wgml.zeros(1)}


def make_optimizer(model):
    opt = wgml.optim.AdamW(list(model.values()), lr=3e-2, weight_decay=0.01)
    opt.set_schedule(warmup_steps=3, total_steps=40, min_lr_ratio=0.1)
    return opt


def loss_of(model, x, y):
    h = (x @ model["w1"] + model["b1"]).relu()
    return wgml.mse(h @ model["w2"] + model["b2"], y)


def train(model, opt, x, y, steps):
    loss = None
    for _ in range(steps):
        loss = loss_of(model, x, y)
        print("step %3d  loss %.6f" % (opt.steps, loss.item()))  # read before backward: allowed
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss_of(model, x, y).item()


def save_checkpoint(path, model, opt):
    """Parameters under their names, moments as optim.<i>.<name>, the rest as JSON metadata."""
    sd = opt.state_dict()
    tensors = dict(model)
    for i, moments in sd["state"].items():
        for name, array in moments.items():
            tensors["optim.%d.%s" % (i, name)] = array
    # one metadata entry per field (the format keeps values to 255 bytes)
    meta = {"optim." + k: json.dumps(v) for k, v in sd.items() if k != "state"}
    meta["names"] = json.dumps(list(model))
    wgml.save(tensors, path, metadata=meta)


def load_checkpoint(path):
    tensors, meta = wgml.load(path)
    model = {name: tensors[name] for name in json.loads(meta["names"])}
    opt = make_optimizer(model)
    sd = {k[len("optim."):]: json.loads(v) for k, v in meta.items() if k.startswith("optim.")}
    sd["state"] = {i: {name: tensors["optim.%d.%s" % (i, name)].numpy() for name in opt._MOMENTS}
                   for i in range(len(model))}
    opt.load_state_dict(sd)
    return model, opt


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(tempfile.mkdtemp(), "resume.safetensors")
    data = np.random.default_rng(1)
    x = wgml.tensor(data.normal(size=(32, 8)))
    y = wgml.tensor(data.normal(size=(32, 1)))

    model = make_model(np.random.default_rng(0))
    straight = train(model, make_optimizer(model), x, y, steps)

    model = make_model(np.random.default_rng(0))
    opt = make_optimizer(model)
    train(model, opt, x, y, steps // 2)
    save_checkpoint(path, model, opt)
    del model, opt
    model, opt = load_checkpoint(path)  # everything from the file
    resumed = train(model, opt, x, y, steps - steps // 2)

    print("final loss: straight %.9g, resumed %.9g" % (straight, resumed))
    if straight != resumed:
        raise SystemExit("the resumed run differs from the straight one")
    print("resumed run identical")


if __name__ == "__main__":
    main()
