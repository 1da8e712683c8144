"""A two-layer MLP on Fashion-MNIST with wgml: python mlp_fashion_mnist.py [epochs] [batches per epoch]"""
import gzip
import os
import sys
import time

import numpy as np
import wgml

DATA = os.environ.get("FASHION_MNIST", "/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist


def idx(name):  # an IDX file: magic (its 4th byte the dimension count), big-endian dims, bytes
    with gzip.open(os.path.join(DATA, name + "-ubyte.gz")) as f:
        raw = f.read()
    dims = np.frombuffer(raw, ">u4", raw[3], 4)
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * raw[3]).reshape(dims)


# float32 once here, so batches go to the GPU without a conversion each step
x_train = (idx("train-images-idx3").reshape(-1, 784) / np.float32(255)).astype(np.float32)
y_train = idx("train-labels-idx1").astype(np.int32)
x_test, y_test = (idx("t10k-images-idx3").reshape(-1, 784) / np.float32(255)).astype(np.float32), idx("t10k-labels-idx1")
epochs, batches = int(sys.argv[1]) if len(sys.argv) > 1 else 2, int(sys.argv[2]) if len(sys.argv) > 2 else None

wgml.manual_seed(0)
w1, b1 = wgml.kaiming_uniform((784, 256)), wgml.zeros(256)
w2, b2 = wgml.xavier_uniform((256, 10)), wgml.zeros(10)
opt = wgml.optim.AdamW([w1, b1, w2, b2], lr=1e-3)


def model(x):  # bias and ReLU fused into the first matmul
    return wgml.matmul(wgml.matmul(x, w1, bias=b1, activation="relu"), w2, bias=b2)


rng = np.random.default_rng(0)
for epoch in range(epochs):
    started = time.perf_counter()
    order = rng.permutation(len(x_train))[: batches and batches * 128]
    for i in range(0, len(order) - 127, 128):
        batch = order[i:i + 128]
        loss = wgml.cross_entropy(model(wgml.tensor(x_train[batch])), y_train[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()  # forward, backward and update: one submit
    accuracy = (wgml.argmax(model(x_test), axis=1).numpy() == y_test).mean()
    print(f"epoch {epoch + 1}: loss {loss.item():.4f}, test accuracy {accuracy:.4f} ({time.perf_counter() - started:.2f} s)")
