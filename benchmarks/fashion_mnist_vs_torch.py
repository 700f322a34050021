#!/usr/bin/python3
"""Epoch time of Fashion-MNIST training: Kiln in step mode through a
kiln-server on loopback (what the README's main job runs) against PyTorch
eager (Debian's python3-torch 1.13), the newest PyTorch from PyPI (eager
and torch.compile) and JAX jit (XLA:CPU, from PyPI), same models, data,
batch and thread count, interleaved run by run. Prints the machine, the
kernels each side runs, the range of each time over the runs and the range
of the ratios.

    /usr/bin/python3 benchmarks/fashion_mnist_vs_torch.py [--threads 1,2] [--runs 3]
        [--train_limit 60000] [--models mlp,lenet] [--embedded]
        [--peers_venv DIR] [--no_jax] [--no_torch2] [--upload pixels|f32]

Kiln's batches travel as the dataset stores them, u8 pixels, and its step
standardizes them on the device (the example's default, --upload=pixels);
--upload=f32 sends them standardized on the client, four times the bytes.
The peers read standardized f32 batches from their own memory.

JAX and PyTorch 2 are never dependencies of Kiln: the first run creates a
virtual environment (--peers_venv, default build/peers-venv) and installs
jax[cpu] and torch into it from PyPI (PyPI's torch wheel brings its CUDA
libraries: several GB, once); without network or pip, their columns say
why they are missing and the rest runs. The JAX step is the same model,
loss and SGD with momentum (benchmarks/gpu_peers.py), jitted, with the
batch transferred and the loss read back every step as in Kiln's step
mode; its epoch time includes its compile, as Kiln's includes Kiln's. JAX
runs pinned to as many cores as threads (taskset), at one thread also with
XLA's single-thread flags. torch.compile compiles the model (forward and,
through AOTAutograd, backward) with its default backend, Inductor; its
first step is its compile, and steady steps are compared as for JAX.

For the MLP, whose step is mostly matrix products, it also times the
step's eight products alone in PyTorch 1.13 (the forward product of each
layer, the two input gradients and three weight gradients a step needs,
warm, best of 30 each) and prints how much faster than PyTorch's steady
step a runtime could be at most if everything else it did cost nothing:
PyTorch's step over those products' time. A speed goal above that bound
asks for faster products than the libraries' on this machine.

Kiln's compute runs in kiln-server, started here once per thread count with
--threads (OpenBLAS and oneDNN); PyTorch runs in a subprocess per run with
torch.set_num_threads, and at more than one thread with
OMP_WAIT_POLICY=passive (its best setting on this machine: with its
defaults it is slower at 2 threads than at 1).
"""
import argparse
import datetime
import gzip
import os
import platform
import re
import subprocess
import sys
import time

DATA = "/usr/share/datasets/fashion-mnist"
HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, "..", "build", "bin")


def load(prefix, limit):
    import torch
    images, labels = load_numpy(prefix, limit)
    return torch.from_numpy(images), torch.from_numpy(labels.astype("int64"))


def torch_model(name):
    import torch.nn as nn
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120),
        nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def torch_worker(args):
    """One PyTorch epoch in this process (eager, or torch.compile'd with
    --worker_peer=torch_compile); prints its seconds and the first step's."""
    import torch
    import torch.nn as nn
    torch.set_num_threads(args.threads)
    x, y = load("train", args.train_limit)
    torch.manual_seed(1)
    net = torch_model(args.worker_model)
    if args.worker_peer == "torch_compile":
        net = torch.compile(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    steps = len(x) // args.batch
    start = time.perf_counter()
    first = None
    for s in range(steps):
        xb, yb = x[s * args.batch:(s + 1) * args.batch], y[s * args.batch:(s + 1) * args.batch]
        opt.zero_grad()
        loss = loss_fn(net(xb), yb)
        loss.backward()
        opt.step()
        loss.item()  # the host reads the loss every step, as Kiln's step mode does
        if first is None:
            first = time.perf_counter() - start
    print(f"{time.perf_counter() - start:.4f} {first:.4f}")


def mlp_products_ms(batch, reps=30):
    """Milliseconds of the MLP step's matrix products alone, each its best of
    `reps` warm runs: forward x W^T per layer (as nn.Linear computes it),
    the input gradients of layers 2 and 3, and the three weight gradients."""
    import torch
    torch.manual_seed(1)
    sizes = [784, 512, 512, 10]
    acts = [torch.randn(batch, n) for n in sizes]
    weights = [torch.randn(o, i) * 0.05 for i, o in zip(sizes, sizes[1:])]
    grads = [torch.randn(batch, o) for o in sizes[1:]]
    products = []
    for layer, w in enumerate(weights):
        products.append((acts[layer], w.t()))             # forward
        products.append((grads[layer].t(), acts[layer]))  # weight gradient
        if layer > 0:
            products.append((grads[layer], w))            # input gradient
    total = 0.0
    for a, b in products:
        best = float("inf")
        for _ in range(reps):
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
        total += best
    return total * 1e3


def torch_worker_line(python, threads, worker_args):
    """The last line a PyTorch worker subprocess (this script with
    `worker_args`) prints, run with `threads` threads as the comparison
    does: OMP_WAIT_POLICY=passive at more than one."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if threads > 1:
        env["OMP_WAIT_POLICY"] = "passive"
    out = subprocess.run([python, __file__, "--threads", str(threads)] + worker_args,
                         env=env, check=True, capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


def torch_products_ms(args, threads):
    """mlp_products_ms in a PyTorch 1.13 subprocess set up as torch_epoch's."""
    return float(torch_worker_line(
        sys.executable, threads,
        ["--worker_model", "mlp", "--worker_peer", "torch_products", "--batch", str(args.batch)]))


def torch_epoch(name, args, threads, python=sys.executable, peer="torch"):
    """(epoch seconds, first-step seconds) of one PyTorch run: Debian's by
    default, or the peers venv's (python) eager or compiled (peer)."""
    epoch, first = torch_worker_line(
        python, threads,
        ["--worker_model", name, "--worker_peer", peer, "--train_limit", str(args.train_limit),
         "--batch", str(args.batch)]).split()
    return float(epoch), float(first)


def jax_worker(args):
    """One JAX epoch in this process (the venv's python); prints its seconds
    and the first step's (the compile)."""
    import numpy as np
    sys.path.insert(0, HERE)
    import gpu_peers
    jaxdev, missing = gpu_peers.import_jax("cpu", args.threads)
    if missing:
        sys.exit(missing)
    jax, dev = jaxdev
    jnp = jax.numpy
    model = args.worker_model
    x, y = load_numpy("train", args.train_limit)
    params = gpu_peers.kiln_params(model, 1)
    lr = gpu_peers.LEARNING_RATE[model]

    def loss_fn(p, xb, yb):
        logits = gpu_peers.jax_forward(jax, model, p, xb)
        one_hot = jax.nn.one_hot(yb, 10, dtype=logits.dtype)
        return -jnp.sum(one_hot * jax.nn.log_softmax(logits)) / xb.shape[0]

    def step(p, v, xb, yb):
        loss, g = jax.value_and_grad(loss_fn)(p, xb, yb)
        v = [gpu_peers.MOMENTUM * vi + gi for vi, gi in zip(v, g)]
        p = [pi - lr * vi for pi, vi in zip(p, v)]
        return p, v, loss

    jitted = jax.jit(step, donate_argnums=(0, 1))
    p = [jax.device_put(a, dev) for a in params]
    v = [jax.device_put(np.zeros_like(a), dev) for a in params]
    steps = len(x) // args.batch
    start = time.perf_counter()
    first = None
    for s in range(steps):
        xb = jax.device_put(x[s * args.batch:(s + 1) * args.batch], dev)
        yb = jax.device_put(y[s * args.batch:(s + 1) * args.batch], dev)
        p, v, loss = jitted(p, v, xb, yb)
        float(loss)  # the host reads the loss every step, as Kiln's step mode does
        if first is None:
            first = time.perf_counter() - start
    print(f"{time.perf_counter() - start:.4f} {first:.4f}")


def load_numpy(prefix, limit):
    import numpy as np

    def read(name):
        path = os.path.join(DATA, name)
        opener = gzip.open if not os.path.exists(path) else open
        with opener(path if os.path.exists(path) else path + ".gz", "rb") as f:
            return f.read()
    images = np.frombuffer(read(f"{prefix}-images-idx3-ubyte"), np.uint8, offset=16)
    labels = np.frombuffer(read(f"{prefix}-labels-idx1-ubyte"), np.uint8, offset=8)
    images = ((images.reshape(-1, 784)[:limit] / 255.0 - 0.2860) / 0.3530).astype(np.float32)
    return images, labels[:limit].astype(np.int32)


def peer_python(venv, module, requirement):
    """The venv's python with `module` importable, creating the venv and
    installing `requirement` from PyPI when needed; (python, version) or
    (None, why)."""
    python = os.path.join(venv, "bin", "python")
    check = [python, "-c", f"import {module}, numpy; print({module}.__version__)"]
    if os.path.exists(python):
        r = subprocess.run(check, capture_output=True, text=True)
        if r.returncode == 0:
            return python, r.stdout.strip()
    print(f"installing {requirement} from PyPI into {venv} (once)...", flush=True)
    try:
        if not os.path.exists(python):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True,
                           timeout=300)
        subprocess.run([python, "-m", "pip", "install", "-q", requirement, "numpy"], check=True,
                       capture_output=True, timeout=1800)
        r = subprocess.run(check, capture_output=True, text=True, check=True)
        return python, r.stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", None) or str(e)
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        return None, f"{module} could not be installed ({detail.strip().splitlines()[-1] if detail.strip() else e})"


def jax_epoch(name, args, threads, python):
    """(epoch seconds, first-step seconds) of one JAX run."""
    cmd = ["taskset", "-c", ",".join(str(c) for c in range(threads)), python, __file__,
           "--worker_model", name, "--worker_peer", "jax", "--threads", str(threads),
           "--train_limit", str(args.train_limit), "--batch", str(args.batch)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    epoch, first = out.strip().splitlines()[-1].split()
    return float(epoch), float(first)


class KilnServer:
    """kiln-server on a free loopback port, computing with `threads` threads."""

    def __init__(self, threads):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
        self.proc = subprocess.Popen([os.path.join(BIN, "kiln-server"), "--listen=127.0.0.1:0",
                                      "--log_level=warn", f"--threads={threads}"], env=env, stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            sys.exit("kiln-server did not start")
        self.address = line.split()[-1]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def kiln_epoch(name, args, address, threads):
    cmd = [os.path.join(BIN, "fashion_mnist"), f"--model={name}", "--epochs=1",
           f"--train_limit={args.train_limit}", "--test_limit=1000",
           f"--batch_size={args.batch}", "--lr=0.01", "--momentum=0.9", "--report=false",
           "--log_every=1000000", f"--upload={args.upload}"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    if address:
        cmd.append(f"--server={address}")
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    m = re.search(r"epoch 1: .* ([0-9.]+) s, compiles [0-9]+, first step ([0-9.]+) s", out)
    if not m:
        sys.exit("could not read Kiln's epoch time:\n" + out)
    return float(m.group(1)), float(m.group(2))


def torch_op_ns(ops=200000, requires_grad=False):
    """PyTorch's eager op on one element; with requires_grad, autograd
    records every op (as Kiln's eager mode does with gradients on)."""
    import torch
    torch.set_num_threads(1)
    a = torch.ones(1, requires_grad=requires_grad)
    b = torch.full((1,), 2.0, requires_grad=requires_grad)
    x = a
    start = time.perf_counter()
    for i in range(ops):
        x = x + b if i % 2 == 0 else x * b
        if i % 1000 == 999:
            x = a
    return (time.perf_counter() - start) * 1e9 / ops


def kiln_op_ns():
    """Kiln's cost per traced op and per eager op (without and with
    gradients recorded), in ns."""
    out = subprocess.run([os.path.join(BIN, "trace_benchmark")], check=True,
                         capture_output=True, text=True).stdout
    trace = re.search(r"kiln trace: .* ([0-9.]+) ns per op", out)
    eager = re.search(r"kiln eager: .* ([0-9.]+) ns per op", out)
    recorded = re.search(r"kiln eager with gradients: .* ([0-9.]+) ns per op", out)
    return float(trace.group(1)), float(eager.group(1)), float(recorded.group(1))


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.platform()}"


def torch_kernels():
    """PyTorch's version, BLAS and oneDNN, as this python's torch reports them."""
    import torch
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\n]*)", config)
    return (f"PyTorch {torch.__version__}: BLAS {blas.group(1) if blas else '?'}, oneDNN (mkldnn) "
            f"{'on' if torch.backends.mkldnn.is_available() else 'off'}")


def kernels():
    return (f"Kiln: f32 dot through oneDNN's or OpenBLAS's sgemm (timed per shape at compile "
            f"time; momentum updates accumulated into by the weight gradient's GEMM), "
            f"convolution through oneDNN (timed against its own scatter and im2col kernels "
            f"per shape at compile time), its own vectorized elementwise and pooling "
            f"loops, one OpenMP team of --threads | {torch_kernels()}")


def steady_ms(epochs, firsts, steps):
    """Milliseconds of a steady step: each epoch less its first step (the
    compile), over the other steps."""
    return [(e - f) / (steps - 1) * 1e3 for e, f in zip(epochs, firsts)]


def span(values, fmt="{:.2f}"):
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="1", help="thread counts, e.g. 1,2")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--train_limit", type=int, default=60000,
                   help="images per epoch (default: all of Fashion-MNIST's training set)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--models", default="mlp,lenet")
    p.add_argument("--embedded", action="store_true",
                   help="run Kiln's service in the training process instead of kiln-server")
    p.add_argument("--peers_venv", "--jax_venv",
                   default=os.path.join(HERE, "..", "build", "peers-venv"),
                   help="virtual environment for JAX and PyTorch 2 (created when missing)")
    p.add_argument("--no_jax", action="store_true", help="leave JAX out")
    p.add_argument("--no_torch2", action="store_true",
                   help="leave PyTorch 2 from PyPI (eager and torch.compile) out")
    p.add_argument("--upload", choices=["pixels", "f32"], default="pixels",
                   help="how Kiln's batches travel (fashion_mnist --upload)")
    p.add_argument("--worker_model", help=argparse.SUPPRESS)
    p.add_argument("--worker_peer", default="torch", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker_model:
        args.threads = int(args.threads)
        if args.worker_peer == "torch_op":
            print(f"{torch_op_ns():.1f}")
            print(f"{torch_op_ns(requires_grad=True):.1f}")
            print(torch_kernels())
            return None
        if args.worker_peer == "torch_products":
            import torch
            torch.set_num_threads(args.threads)
            print(f"{mlp_products_ms(args.batch):.4f}")
            return None
        return jax_worker(args) if args.worker_peer == "jax" else torch_worker(args)

    try:
        import torch  # noqa: F401 (Debian's python3-torch: the eager peer)
    except ImportError:
        sys.exit(f"{sys.executable} has no torch: install Debian's PyTorch first "
                 "(apt-get install python3-torch; benchmarks/run_all.sh does)")
    print(f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC | {machine()}")
    print(kernels())
    venv = os.path.abspath(args.peers_venv)
    python, jax_version = (None, "left out (--no_jax)") if args.no_jax else peer_python(
        venv, "jax", "jax[cpu]")
    print(f"JAX: {'jit on XLA:CPU, ' + jax_version if python else jax_version}")
    torch2, torch2_version = (None, "left out (--no_torch2)") if args.no_torch2 else peer_python(
        venv, "torch", "torch")
    torch2_ns = torch2_grad_ns = None
    if torch2:
        out = subprocess.run([torch2, __file__, "--worker_model", "op", "--worker_peer",
                              "torch_op"], check=True, capture_output=True, text=True).stdout
        torch2_ns, torch2_grad_ns = float(out.splitlines()[0]), float(out.splitlines()[1])
        print(f"PyTorch 2 from PyPI, eager and torch.compile (Inductor): {out.splitlines()[2]}")
    else:
        print(f"PyTorch 2 from PyPI: {torch2_version}")
    print(f"{args.train_limit} images per epoch, batch {args.batch}, {args.runs} interleaved runs, "
          f"Kiln {'embedded' if args.embedded else 'through kiln-server on loopback'}, "
          f"its batches sent as {'u8 pixels standardized on the device' if args.upload == 'pixels' else 'standardized f32'}")
    (kiln_ns, kiln_eager_ns, kiln_grad_ns) = kiln_op_ns()
    torch_ns, torch_grad_ns = torch_op_ns(), torch_op_ns(requires_grad=True)
    print(f"per-op cost: kiln trace {kiln_ns:.0f} ns | pytorch eager op on 1 element "
          f"{torch_ns:.0f} ns | ratio kiln/pytorch {kiln_ns / torch_ns:.2f}")
    # Without gradients: Kiln's NoGradients against tensors that do not
    # require them; with: every op recorded for a gradient on both sides.
    for what, kiln_op, peers in (
            ("eager op on 1 element", kiln_eager_ns,
             (("pytorch", torch_ns), ("pytorch2", torch2_ns))),
            ("eager op on 1 element, gradients recorded", kiln_grad_ns,
             (("pytorch", torch_grad_ns), ("pytorch2", torch2_grad_ns)))):
        for peer, peer_ns in peers:
            if peer_ns:
                print(f"{what}: kiln (embedded) {kiln_op:.0f} ns | {peer} {peer_ns:.0f} ns | "
                      f"ratio kiln/{peer} {kiln_op / peer_ns:.2f}")
    for threads in [int(t) for t in args.threads.split(",")]:
        server = None if args.embedded else KilnServer(threads)
        try:
            for name in args.models.split(","):
                kiln, kiln_first, peer, jax, jax_first = [], [], [], [], []
                eager2, compiled, compiled_first = [], [], []
                peer_first, products = [], []
                for _ in range(args.runs):
                    epoch, first = kiln_epoch(name, args, server and server.address, threads)
                    kiln.append(epoch)
                    kiln_first.append(first)
                    epoch, first = torch_epoch(name, args, threads)
                    peer.append(epoch)
                    peer_first.append(first)
                    if name == "mlp":
                        products.append(torch_products_ms(args, threads))
                    if torch2:
                        eager2.append(torch_epoch(name, args, threads, torch2)[0])
                        epoch, first = torch_epoch(name, args, threads, torch2, "torch_compile")
                        compiled.append(epoch)
                        compiled_first.append(first)
                    if python:
                        epoch, first = jax_epoch(name, args, threads, python)
                        jax.append(epoch)
                        jax_first.append(first)
                ratios = [k / t for k, t in zip(kiln, peer)]
                print(f"{name} threads={threads}: kiln {span(kiln)} s | pytorch eager "
                      f"{span(peer)} s | ratio kiln/pytorch {span(ratios)} "
                      f"(kiln runs at {span([1 / r for r in ratios])}x pytorch's speed)",
                      flush=True)
                # Steady steps: the epoch less its first step (which compiles).
                steps = args.train_limit // args.batch
                kiln_step = steady_ms(kiln, kiln_first, steps)
                if products:
                    peer_step = steady_ms(peer, peer_first, steps)
                    print(f"{name} threads={threads}: steady step kiln {span(kiln_step)} ms | "
                          f"pytorch eager {span(peer_step)} ms, of which its eight products "
                          f"alone (warm, best of 30) {span(products)} ms | the most a runtime "
                          f"with these products could be faster than pytorch: "
                          f"{span([s / p for s, p in zip(peer_step, products)])}x", flush=True)
                if eager2:
                    ratios = [k / t for k, t in zip(kiln, eager2)]
                    print(f"{name} threads={threads}: kiln {span(kiln)} s | pytorch 2 eager "
                          f"{span(eager2)} s | ratio kiln/pytorch2 {span(ratios)} "
                          f"(kiln runs at {span([1 / r for r in ratios])}x its speed)", flush=True)
                    compiled_step = steady_ms(compiled, compiled_first, steps)
                    print(f"{name} threads={threads}: kiln {span(kiln)} s (first step "
                          f"{span(kiln_first, '{:.3f}')} s) | torch.compile {span(compiled)} s "
                          f"(first step {span(compiled_first, '{:.3f}')} s) | ratio "
                          f"{span([k / c for k, c in zip(kiln, compiled)])}; steady step kiln "
                          f"{span(kiln_step)} ms | torch.compile {span(compiled_step)} ms | "
                          f"ratio kiln/torch.compile "
                          f"{span([k / c for k, c in zip(kiln_step, compiled_step)])}", flush=True)
                if jax:
                    jax_step = steady_ms(jax, jax_first, steps)
                    print(f"{name} threads={threads}: kiln {span(kiln)} s (first step "
                          f"{span(kiln_first, '{:.3f}')} s) | jax jit {span(jax)} s (first step "
                          f"{span(jax_first, '{:.3f}')} s) | ratio kiln/jax {span([k / j for k, j in zip(kiln, jax)])}; "
                          f"steady step kiln {span(kiln_step)} ms | jax {span(jax_step)} ms | "
                          f"ratio kiln/jax {span([k / j for k, j in zip(kiln_step, jax_step)])}",
                          flush=True)
        finally:
            if server:
                server.stop()


if __name__ == "__main__":
    main()
