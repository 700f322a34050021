#!/usr/bin/python3
"""Epoch time of Fashion-MNIST training: Kiln (lazy mode) against PyTorch
eager (Debian's python3-torch), same models, data, batch and thread count,
measured in one run. Prints both times and the ratio.

    /usr/bin/python3 benchmarks/fashion_mnist_vs_torch.py [--threads 1] [--train_limit 12800]
"""
import argparse
import gzip
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"
HERE = os.path.dirname(os.path.abspath(__file__))
KILN = os.path.join(HERE, "..", "build", "bin", "fashion_mnist")


def load(prefix, limit):
    def read(name):
        path = os.path.join(DATA, name)
        opener = gzip.open if not os.path.exists(path) else open
        with opener(path if os.path.exists(path) else path + ".gz", "rb") as f:
            return f.read()
    images = np.frombuffer(read(f"{prefix}-images-idx3-ubyte"), np.uint8, offset=16)
    labels = np.frombuffer(read(f"{prefix}-labels-idx1-ubyte"), np.uint8, offset=8)
    images = ((images.reshape(-1, 784)[:limit] / 255.0 - 0.2860) / 0.3530).astype(np.float32)
    return torch.from_numpy(images), torch.from_numpy(labels[:limit].astype(np.int64))


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120),
        nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def torch_epoch(name, x, y, batch, lr, momentum):
    torch.manual_seed(1)
    net = model(name)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    loss_fn = nn.CrossEntropyLoss()
    steps = len(x) // batch
    start = time.perf_counter()
    for s in range(steps):
        xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
        opt.zero_grad()
        loss = loss_fn(net(xb), yb)
        loss.backward()
        opt.step()
        loss.item()  # the host reads the loss every step, as Kiln's loop does
    return time.perf_counter() - start


def kiln_epoch(name, limit, batch, lr, momentum, threads):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run(
        [KILN, f"--model={name}", "--epochs=1", f"--train_limit={limit}", "--test_limit=1000",
         f"--batch_size={batch}", f"--lr={lr}", f"--momentum={momentum}", "--report=false",
         "--log_every=1000000"], env=env, check=True, capture_output=True, text=True).stdout
    m = re.search(r"epoch 1: .* ([0-9.]+) s, compiles", out)
    if not m:
        sys.exit("could not read Kiln's epoch time:\n" + out)
    return float(m.group(1))


def torch_op_ns(ops=200000):
    a, b = torch.ones(1), torch.full((1,), 2.0)
    x = a
    start = time.perf_counter()
    for i in range(ops):
        x = x + b if i % 2 == 0 else x * b
        if i % 1000 == 999:
            x = a
    return (time.perf_counter() - start) * 1e9 / ops


def kiln_trace_ns():
    out = subprocess.run([os.path.join(HERE, "..", "build", "bin", "trace_benchmark")],
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"([0-9.]+) ns per op", out).group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--train_limit", type=int, default=12800)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--models", default="mlp,lenet")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    x, y = load("train", args.train_limit)
    core = os.environ.get("OPENBLAS_CORETYPE", "(auto)")
    print(f"threads {args.threads}, OPENBLAS_CORETYPE {core}, torch {torch.__version__}, "
          f"{args.train_limit} images, batch {args.batch}")
    kiln_ns, torch_ns = kiln_trace_ns(), torch_op_ns()
    print(f"per-op cost: kiln trace {kiln_ns:.0f} ns | pytorch eager op on 1 element "
          f"{torch_ns:.0f} ns | ratio kiln/pytorch {kiln_ns / torch_ns:.2f}")
    for name in args.models.split(","):
        kiln = kiln_epoch(name, args.train_limit, args.batch, 0.01, 0.9, args.threads)
        peer = torch_epoch(name, x, y, args.batch, 0.01, 0.9)
        print(f"{name}: kiln lazy {kiln:.2f} s | pytorch eager {peer:.2f} s | "
              f"ratio kiln/pytorch {kiln / peer:.2f}")


if __name__ == "__main__":
    main()
