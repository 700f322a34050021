#!/usr/bin/python3
"""Time per training step, and so per Fashion-MNIST epoch, of
examples/resnet on the CPU against the same network in PyTorch eager
(Debian's python3-torch), in one run, at each thread count.

    /usr/bin/python3 benchmarks/resnet_vs_torch.py [--threads 1,2] [--width 12]
        [--steps 40] [--batch 128] [--bin build/bin]

Kiln: kiln-server started here with --threads=N, and `resnet --server`
training two epochs of --steps steps each (a device loop per epoch fed
through the infeed, the losses read from the outfeed); its figure is the
second epoch's time per step, when the program is compiled and cached.
PyTorch: the same network (3x3 stem with batch normalization, four stages
of two basic blocks of width, 2, 4 and 8 times width channels, strides 1,
2, 2, 2, projection shortcuts where the shape changes, global average
pooling, a linear classifier), the same SGD (Nesterov momentum 0.9,
weight decay 5e-4), batch and thread count, on the real images, each step
reading its loss back as Kiln's does; the median of the timed steps after
three warm-up steps. One epoch is 468 steps of 128, so the epoch time is
printed as 468 times the step time. Both sides train without augmentation.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS_PER_EPOCH = 60000 // 128

TORCH_PEER = r'''
import gzip, statistics, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

width, steps, batch, threads = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(1)

def read(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)

images = read("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", 16)
labels = read("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz", 8)
x_all = torch.tensor(images.reshape(-1, 1, 28, 28)[: (steps + 3) * batch], dtype=torch.float32) / 255
x_all = (x_all - x_all.mean()) / x_all.std()
y_all = torch.tensor(labels[: (steps + 3) * batch], dtype=torch.int64)

class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))
    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        h = self.b2(self.c2(h))
        return F.relu(h + (x if self.short is None else self.short(x)))

class ResNet(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.stem = nn.Conv2d(1, w, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(w)
        blocks, cin = [], w
        for stage in range(4):
            cout = w << stage
            for b in range(2):
                blocks.append(Block(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(8 * w, 10)
    def forward(self, x):
        h = self.blocks(F.relu(self.bn(self.stem(x))))
        return self.fc(h.mean(dim=(2, 3)))

net = ResNet(width)
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
times = []
for s in range(steps + 3):
    x, y = x_all[s * batch:(s + 1) * batch], y_all[s * batch:(s + 1) * batch]
    start = time.perf_counter()
    opt.zero_grad()
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    loss.item()
    if s >= 3:
        times.append(time.perf_counter() - start)
print("torch %s ms_per_step %.3f" % (torch.__version__, 1e3 * statistics.median(times)))
'''


def log(msg):
    print(f"[resnet_vs_torch] {msg}", file=sys.stderr, flush=True)


def kiln_step_ms(bin_dir, threads, width, steps, batch):
    server = subprocess.Popen(
        [os.path.join(bin_dir, "kiln-server"), "--listen=127.0.0.1:0", f"--threads={threads}",
         "--log_level=warn"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = server.stdout.readline().strip()
        if not line.startswith("listening on "):
            sys.exit(f"kiln-server did not start: {line}")
        address = line[len("listening on "):]
        cmd = [os.path.join(bin_dir, "resnet"), f"--server={address}", f"--width={width}",
               "--epochs=2", f"--train_limit={steps * batch}", f"--batch_size={batch}",
               "--test_limit=500", "--augment=false", "--log_every=1000000"]
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{run.stdout}{run.stderr}")
        m = re.search(r"^epoch 2: .*\(([0-9.]+) ms per step\)", run.stdout, re.M)
        if m is None:
            sys.exit(f"no second epoch in:\n{run.stdout}")
        return float(m.group(1))
    finally:
        server.terminate()
        server.wait()


def torch_step_ms(threads, width, steps, batch):
    env = dict(os.environ)
    if threads > 1:
        env["OMP_WAIT_POLICY"] = "passive"
    run = subprocess.run(["/usr/bin/python3", "-c", TORCH_PEER, str(width), str(steps),
                          str(batch), str(threads)],
                         capture_output=True, text=True, check=False, env=env)
    m = re.search(r"torch (\S+) ms_per_step ([0-9.]+)", run.stdout)
    if run.returncode != 0 or m is None:
        sys.exit(f"the PyTorch peer failed:\n{run.stdout}{run.stderr}")
    return m.group(1), float(m.group(2))


def ensure_torch():
    """Debian's python3-torch and python3-numpy, installed when missing (as root)."""
    probe = ["/usr/bin/python3", "-c", "import numpy, torch"]
    if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return
    log("installing python3-numpy and python3-torch")
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                    "python3-numpy", "python3-torch"], check=True,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    p.add_argument("--threads", default="2")
    p.add_argument("--width", type=int, default=12)
    p.add_argument("--steps", type=int, default=40, help="steps per timed epoch")
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args()
    ensure_torch()
    cpu = ""
    with open("/proc/cpuinfo") as f:
        m = re.search(r"model name\s*:\s*(.*)", f.read())
        cpu = m.group(1) if m else "unknown CPU"
    print(f"CPU: {cpu}, {os.cpu_count()} cores; ResNet width {args.width}, batch {args.batch}")
    print(f"{'threads':>7} {'kiln ms/step':>13} {'torch ms/step':>14} {'kiln epoch s':>13} "
          f"{'torch epoch s':>14} {'kiln/torch':>10}")
    for threads in (int(t) for t in args.threads.split(",")):
        log(f"kiln at {threads} thread(s)")
        k = kiln_step_ms(args.bin, threads, args.width, args.steps, args.batch)
        log(f"PyTorch at {threads} thread(s)")
        version, t = torch_step_ms(threads, args.width, args.steps, args.batch)
        print(f"{threads:7d} {k:13.1f} {t:14.1f} {k * STEPS_PER_EPOCH / 1e3:13.1f} "
              f"{t * STEPS_PER_EPOCH / 1e3:14.1f} {k / t:10.2f}   (PyTorch {version})",
              flush=True)


if __name__ == "__main__":
    main()
