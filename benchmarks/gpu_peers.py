#!/usr/bin/env python3
"""Training-step time of Kiln's Fashion-MNIST models in the peer frameworks
on one GPU (PyTorch eager, torch.compile, JAX jit), float32 with TF32 off,
plus that GPU's f32 GEMM rate and memory bandwidth, so that Kiln's GPU
backend can be measured against them in the same run.

    python3 benchmarks/gpu_peers.py [--models mlp,lenet] [--batches 128,1024]
        [--steps 200] [--warmup 20] [--repeats 5] [--peers eager,compile,jax]
        [--compile_modes default,reduce-overhead] [--device cuda|cpu]
        [--threads N] [--quick] [--no_micro] [--json FILE]

The models, their initialisation, loss and optimizer are those of
examples/fashion_mnist/trainer.cc: "mlp" is 784-512-512-10 with ReLU,
"lenet" is LeNet-5 on NHWC 28x28x1 (conv 5x5x6 SAME, max pool 2x2/2, conv
5x5x16 VALID, max pool, dense 120, 84, 10, ReLU after all but the last);
weights He-normal, biases zero; loss the batch mean of
-sum(one_hot * log_softmax(logits)); SGD with momentum 0.9 (v = 0.9 v + g,
p -= lr v) at the example's default rate (0.02 mlp, 0.04 lenet). A step
is forward, loss, correct count, backward and update, with the batch
already on the device and nothing read back; the device is synchronised
only at the ends of each timed run of --steps steps. Every peer starts
from the same weights and sees the same random batches, and the loss of
its first step is checked against a float64 NumPy evaluation of the model
in Kiln's layout.

The microbenchmarks time torch.mm on random f32 operands (each product's
error against float64 shows whether it ran in full f32), a device-to-device
copy and the triad a = b + s*c, with CUDA events; bandwidth counts bytes
read plus bytes written.

Progress goes to stderr, the tables to stdout. `--device cpu` runs the same
code without a GPU, timed with host clocks (a smoke test, not a peer).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

# DefaultLearningRate(model, "sgd") and TrainerOptions::momentum (also the
# default of fashion_mnist's --momentum flag).
LEARNING_RATE = {"mlp": 0.02, "lenet": 0.04}
MOMENTUM = 0.9
# Distinct batches the steps cycle through, so inputs are not one cached buffer.
DATA_BATCHES = 8
# Relative error of an f32 product against float64 above which it was not
# computed in full f32: f32 lands near 1e-7..1e-6 here, TF32 near 3e-4.
PRECISION_LIMIT = 1e-4


def log(msg):
    print(f"[gpu_peers] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the models

def kiln_params(model, seed):
    """The parameters in Kiln's layouts ([in, out] dense, HWIO kernels),
    drawn as trainer.cc draws them (He normal, zero biases)."""
    rng = np.random.default_rng(seed)
    if model == "mlp":
        sizes = [784, 512, 512, 10]
        layers = [((sizes[i], sizes[i + 1]), sizes[i]) for i in range(3)]
    else:
        layers = [((5, 5, 1, 6), 25), ((5, 5, 6, 16), 150), ((400, 120), 400),
                  ((120, 84), 120), ((84, 10), 84)]
    params = []
    for dims, fan_in in layers:
        params.append((rng.standard_normal(dims) * np.sqrt(2.0 / fan_in)).astype(np.float32))
        params.append(np.zeros(dims[-1], np.float32))
    return params


def make_data(batch, seed):
    rng = np.random.default_rng(seed + 1000)
    images = rng.standard_normal((DATA_BATCHES, batch, 784)).astype(np.float32)
    labels = rng.integers(0, 10, (DATA_BATCHES, batch)).astype(np.int32)
    return images, labels


def _conv_nhwc(x, w, pad):
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(x, w.shape[:2], axis=(1, 2))
    return np.tensordot(win, w, axes=([3, 4, 5], [2, 0, 1]))  # [n, h, w, c, kh, kw] x HWIO


def _pool2(x):
    n, h, w, c = x.shape
    return x[:, :h // 2 * 2, :w // 2 * 2].reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def reference_loss(model, params, images, labels):
    """The first step's loss in float64, computed in Kiln's layout."""
    p = [a.astype(np.float64) for a in params]
    relu = lambda a: np.maximum(a, 0)
    total = 0.0
    for s in range(0, len(images), 256):
        h = images[s:s + 256].astype(np.float64)
        n = len(h)
        if model == "mlp":
            for i in range(3):
                h = h @ p[2 * i] + p[2 * i + 1]
                if i < 2:
                    h = relu(h)
        else:
            h = h.reshape(n, 28, 28, 1)
            h = _pool2(relu(_conv_nhwc(h, p[0], 2) + p[1]))
            h = _pool2(relu(_conv_nhwc(h, p[2], 0) + p[3])).reshape(n, 400)
            h = relu(h @ p[4] + p[5])
            h = relu(h @ p[6] + p[7])
            h = h @ p[8] + p[9]
        m = h.max(axis=1, keepdims=True)
        logp = h - m - np.log(np.exp(h - m).sum(axis=1, keepdims=True))
        total -= logp[np.arange(n), labels[s:s + 256]].sum()
    return total / len(images)


def torch_layout(model, params):
    """Kiln's parameters for PyTorch's NCHW LeNet: OIHW kernels, and the rows
    of the first dense weight reordered from Kiln's HWC flattening to CHW,
    so both compute the same function on the same weights."""
    if model == "mlp":
        return [np.ascontiguousarray(a) for a in params]
    out = list(params)
    out[0] = params[0].transpose(3, 2, 0, 1)
    out[2] = params[2].transpose(3, 2, 0, 1)
    out[4] = params[4].reshape(5, 5, 16, 120).transpose(2, 0, 1, 3).reshape(400, 120)
    return [np.ascontiguousarray(a) for a in out]


# ---------------------------------------------------------------- timing

def time_training(step, batches, sync, loss_of, warmup, steps, repeats):
    """Runs `step(x, y)` over `batches` cyclically; returns the per-step
    seconds of each repeat and the losses seen outside the timed runs."""
    t0 = time.perf_counter()
    out = step(*batches[0])
    sync()
    first_call_s = time.perf_counter() - t0
    loss_first = loss_of(out)
    for i in range(1, warmup):
        out = step(*batches[i % len(batches)])
    sync()
    loss_after_warmup = loss_of(out)
    per_step = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for i in range(steps):
            out = step(*batches[i % len(batches)])
        sync()
        per_step.append((time.perf_counter() - t0) / steps)
    return {"first_call_s": first_call_s, "loss_first": loss_first,
            "loss_after_warmup": loss_after_warmup, "loss_last": loss_of(out),
            "step_s_repeats": per_step}


def summarize(times):
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


# ---------------------------------------------------------------- PyTorch

def set_torch_precision(torch):
    """Full f32 in cuBLAS and cuDNN (no TF32); returns how it was set."""
    if hasattr(torch.backends, "fp32_precision"):
        # PyTorch 2.9+: the per-backend settings replace allow_tf32, and
        # mixing the two APIs is refused, so only the new one is used.
        torch.backends.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
        return (f"TF32 off: torch.backends.cuda.matmul.fp32_precision="
                f"{torch.backends.cuda.matmul.fp32_precision}, "
                f"torch.backends.cudnn.conv.fp32_precision="
                f"{torch.backends.cudnn.conv.fp32_precision}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return (f"TF32 off: torch.backends.cuda.matmul.allow_tf32="
            f"{torch.backends.cuda.matmul.allow_tf32}, torch.backends.cudnn.allow_tf32="
            f"{torch.backends.cudnn.allow_tf32}")


def torch_model(torch, model, params, device):
    import torch.nn.functional as F

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # Copies: on the CPU from_numpy(a).to(device) would share `a`,
            # and the updates would change the weights the next peer starts from.
            self.p = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.tensor(a, device=device)) for a in params])

        def forward(self, x):
            p = self.p
            if model == "mlp":
                h = x
                for i in range(3):
                    h = torch.addmm(p[2 * i + 1], h, p[2 * i])
                    if i < 2:
                        h = torch.relu(h)
                return h
            # NHWC with one channel is NCHW's memory too.
            h = x.view(x.shape[0], 1, 28, 28)
            h = F.max_pool2d(torch.relu(F.conv2d(h, p[0], p[1], padding=2)), 2, 2)
            h = F.max_pool2d(torch.relu(F.conv2d(h, p[2], p[3])), 2, 2)
            h = torch.relu(torch.addmm(p[5], h.flatten(1), p[4]))
            h = torch.relu(torch.addmm(p[7], h, p[6]))
            return torch.addmm(p[9], h, p[8])

    return Net()


def torch_peer(torch, model, params, batches, device, mode, args):
    """One PyTorch peer: mode None is eager, else a torch.compile mode."""
    import torch.nn.functional as F
    net = torch_model(torch, model, torch_layout(model, params), device)
    opt = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE[model], momentum=MOMENTUM)
    # Momentum starts as zeros, as Kiln's does (the first update is then the
    # gradient, as when SGD makes the buffer itself). Made inside a CUDA-graphed
    # step instead, the buffers would live in the graph's pool and be
    # overwritten by its next replay.
    for q in net.parameters():
        opt.state[q]["momentum_buffer"] = torch.zeros_like(q)

    def forward_loss(x, y):
        logits = net(x)
        return F.cross_entropy(logits, y), (logits.argmax(1) == y).sum()

    def update():
        opt.step()

    counters, mark = None, None
    if mode is None:
        fwd, upd = forward_loss, update
    else:
        if not hasattr(torch, "compile"):
            raise Skip(f"torch.compile is not in torch {torch.__version__}")
        torch._dynamo.reset()
        from torch._dynamo.utils import counters
        counters.clear()
        # The usual split: forward and loss in one graph (AOTAutograd compiles
        # its backward too), the optimizer step in another; loss.backward()
        # between them is a graph break either way.
        fwd = torch.compile(forward_loss, mode=mode)
        upd = torch.compile(update, mode=mode)
        if mode == "reduce-overhead":
            mark = getattr(torch.compiler, "cudagraph_mark_step_begin", None)

    def step(x, y):
        if mark is not None:
            mark()  # a new iteration: the last step's graph outputs may be reused
        loss, correct = fwd(x, y)
        loss.backward()
        upd()
        opt.zero_grad(set_to_none=True)
        return loss.detach(), correct

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    result = time_training(step, batches, sync, lambda out: float(out[0]), args.warmup,
                           args.steps, args.repeats)
    note = ""
    if counters is not None:
        breaks = sum(counters["graph_break"].values())
        graphs = counters["stats"].get("unique_graphs", 0)
        note = f"{graphs} graphs, {breaks} graph breaks"
        if mode == "reduce-overhead":
            skips = counters["inductor"].get("cudagraph_skips", 0)
            note += f", CUDA graphs skipped {skips}x" if skips else ", no CUDA graph skipped"
        torch._dynamo.reset()
    result["note"] = note
    return result


# ---------------------------------------------------------------- JAX

def import_jax(device, threads):
    # Torch and JAX share the GPU: JAX takes memory as it needs it instead
    # of 75% of the card up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if device == "cpu" and threads == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false"
                                   " intra_op_parallelism_threads=1").strip()
    try:
        import jax
    except Exception as e:  # ImportError, or a broken plugin
        return None, f"jax is not importable ({type(e).__name__}: {e})"
    jax.config.update("jax_default_matmul_precision", "highest")
    try:
        dev = jax.devices("cuda" if device == "cuda" else "cpu")[0]
    except Exception as e:
        return None, f"jax {jax.__version__} has no {device} device ({e})"
    return (jax, dev), None


def jax_forward(jax, model, p, x):
    jnp, lax = jax.numpy, jax.lax
    hi = lax.Precision.HIGHEST
    relu = jax.nn.relu
    if model == "mlp":
        h = x
        for i in range(3):
            h = jnp.dot(h, p[2 * i], precision=hi) + p[2 * i + 1]
            if i < 2:
                h = relu(h)
        return h

    def conv(h, w, padding):
        return lax.conv_general_dilated(h, w, (1, 1), padding,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                        precision=hi)

    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    n = x.shape[0]
    h = x.reshape(n, 28, 28, 1)
    h = pool(relu(conv(h, p[0], "SAME") + p[1]))
    h = pool(relu(conv(h, p[2], "VALID") + p[3])).reshape(n, 400)
    h = relu(jnp.dot(h, p[4], precision=hi) + p[5])
    h = relu(jnp.dot(h, p[6], precision=hi) + p[7])
    return jnp.dot(h, p[8], precision=hi) + p[9]


def jax_peer(jaxdev, model, params, images, labels, device, args):
    jax, dev = jaxdev
    jnp = jax.numpy
    lr = LEARNING_RATE[model]

    def loss_fn(p, x, y):
        logits = jax_forward(jax, model, p, x)
        one_hot = jax.nn.one_hot(y, 10, dtype=logits.dtype)
        return -jnp.sum(one_hot * jax.nn.log_softmax(logits)) / x.shape[0], logits

    def step(p, v, x, y):
        (loss, logits), g = jax.value_and_grad(loss_fn, has_aux=True)(p, x, y)
        v = [MOMENTUM * vi + gi for vi, gi in zip(v, g)]
        p = [pi - lr * vi for pi, vi in zip(p, v)]
        correct = jnp.sum((jnp.argmax(logits, 1) == y).astype(jnp.float32))
        return p, v, loss, correct

    jitted = jax.jit(step, donate_argnums=(0, 1) if device == "cuda" else ())
    state = {"p": [jax.device_put(a, dev) for a in params]}
    state["v"] = [jax.device_put(np.zeros_like(a), dev) for a in params]
    batches = [(jax.device_put(images[i], dev), jax.device_put(labels[i], dev))
               for i in range(len(images))]

    def run(x, y):
        state["p"], state["v"], loss, correct = jitted(state["p"], state["v"], x, y)
        return loss, correct

    sync = lambda: jax.block_until_ready(state["p"])
    result = time_training(run, batches, sync, lambda out: float(out[0]), args.warmup,
                           args.steps, args.repeats)
    result["note"] = f"precision HIGHEST, on {dev.device_kind}"
    return result


class Skip(Exception):
    """A peer that cannot run here; reported as a row, not a failure."""


# ---------------------------------------------------------------- microbenchmarks

def time_op(torch, fn, device, repeats, target_s=0.05):
    """Median-ready list of seconds per call of `fn`; CUDA events on a GPU."""
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    sync()
    iters = max(1, min(1000, int(target_s / max((time.perf_counter() - t0) / 3, 1e-9))))
    times = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            times.append((time.perf_counter() - t0) / iters)
    return times


def rel_error(out, ref):
    return float(np.linalg.norm((out - ref).ravel()) / np.linalg.norm(ref.ravel()))


def micro(torch, jaxdev, device, args):
    rows = []
    gen = torch.Generator(device=device).manual_seed(args.seed)
    big = 1024 if args.quick and device == "cpu" else 4096
    for m, k, n in [(128, 784, 512), (1024, 784, 512), (big, big, big)]:
        a = torch.randn(m, k, device=device, generator=gen)
        b = torch.randn(k, n, device=device, generator=gen)
        c = torch.empty(m, n, device=device)
        times = time_op(torch, lambda a=a, b=b, c=c: torch.mm(a, b, out=c), device, args.repeats)
        s = summarize(times)
        err = None
        if device == "cuda" or m * n * k <= 2 ** 30:
            err = rel_error(c.double().cpu().numpy(), (a.double() @ b.double()).cpu().numpy())
        rows.append({"what": "f32 matmul (torch.mm)", "shape": f"[{m}x{k}]x[{k}x{n}]",
                     "time_s": s, "rate": 2 * m * n * k / s["median"] / 1e12, "unit": "TFLOP/s",
                     "rel_error_vs_f64": err})
        log(f"matmul [{m}x{k}]x[{k}x{n}]: {s['median'] * 1e6:.1f} us, "
            f"{rows[-1]['rate']:.2f} TFLOP/s" + (f", rel error {err:.1e}" if err is not None else ""))
    # cuDNN's f32 convolution, checked for precision only (LeNet's second conv).
    import torch.nn.functional as F
    x = torch.randn(128, 6, 14, 14, device=device, generator=gen)
    w = torch.randn(16, 6, 5, 5, device=device, generator=gen)
    err = rel_error(F.conv2d(x, w).double().cpu().numpy(),
                    F.conv2d(x.double(), w.double()).cpu().numpy())
    rows.append({"what": "f32 conv2d (precision check)", "shape": "[128,6,14,14]*[16,6,5,5]",
                 "time_s": None, "rate": None, "unit": "", "rel_error_vs_f64": err})
    if jaxdev is not None:
        jax, dev = jaxdev
        rng = np.random.default_rng(args.seed)
        an, bn = rng.standard_normal((1024, 784)), rng.standard_normal((784, 512))
        hi = jax.lax.Precision.HIGHEST
        out = np.asarray(jax.jit(lambda p, q: jax.numpy.dot(p, q, precision=hi))(
            jax.device_put(an.astype(np.float32), dev), jax.device_put(bn.astype(np.float32), dev)))
        rows.append({"what": "jax f32 dot HIGHEST (precision check)", "shape": "[1024x784]x[784x512]",
                     "time_s": None, "rate": None, "unit": "",
                     "rel_error_vs_f64": rel_error(out, an.astype(np.float32).astype(np.float64) @
                                                   bn.astype(np.float32).astype(np.float64))})

    mib = args.bw_mib if args.bw_mib else (64 if args.quick and device == "cpu" else 1024)
    count = mib * 2 ** 20 // 4
    a = torch.empty(count, device=device)
    b = torch.rand(count, device=device, generator=gen)
    c = torch.rand(count, device=device, generator=gen)
    for name, fn, moved in [("copy a.copy_(b)", lambda: a.copy_(b), 2),
                            ("triad a = b + s*c", lambda: torch.add(b, c, alpha=1.5, out=a), 3)]:
        s = summarize(time_op(torch, fn, device, args.repeats))
        nbytes = moved * count * 4
        rows.append({"what": name, "shape": f"{mib} MiB f32 per array", "time_s": s,
                     "rate": nbytes / s["median"] / 1e9, "unit": "GB/s", "bytes": nbytes,
                     "rel_error_vs_f64": None})
        log(f"{name}: {s['median'] * 1e3:.3f} ms, {rows[-1]['rate']:.0f} GB/s (read+written)")
    return rows


# ---------------------------------------------------------------- environment

def gpu_facts(torch, device):
    facts = {}
    if device != "cuda":
        return facts
    facts["gpu"] = torch.cuda.get_device_name(0)
    props = torch.cuda.get_device_properties(0)
    facts["gpu_memory_gib"] = round(props.total_memory / 2 ** 30, 1)
    facts["multiprocessors"] = props.multi_processor_count
    facts["torch_cuda"] = torch.version.cuda
    facts["cudnn"] = torch.backends.cudnn.version()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        facts["driver"] = out.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        facts["driver"] = "unknown (nvidia-smi did not answer)"
    return facts


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


# ---------------------------------------------------------------- output

def fmt_ms(s):
    return f"{s * 1e3:.3f}" if s < 1 else f"{s * 1e3:.0f}"


def print_tables(meta, rows, micro_rows):
    print(f"date {meta['date']} | {meta['machine']}")
    if "gpu" in meta:
        print(f"GPU {meta['gpu']} ({meta['gpu_memory_gib']} GiB, {meta['multiprocessors']} SMs), "
              f"driver {meta['driver']}, CUDA {meta['torch_cuda']}, cuDNN {meta['cudnn']}")
    print(f"torch {meta['torch']} | jax {meta['jax']} | python {meta['python']} | "
          f"device {meta['device']} | torch threads {meta['torch_threads']}")
    print(f"precision: float32; {meta['torch_precision']}; JAX dot/conv precision HIGHEST")
    print(f"step = forward + loss + correct count + backward + SGD(momentum {MOMENTUM}) update, "
          f"lr {LEARNING_RATE['mlp']} mlp / {LEARNING_RATE['lenet']} lenet; data on the device, "
          f"{DATA_BATCHES} random batches cycled")
    print(f"timing: {meta['warmup']} warm-up steps (first call, compilation included, reported "
          f"apart), then {meta['repeats']} runs of {meta['steps']} steps, device synchronised at "
          f"each run's ends; ms/step is the median run's mean, range over runs")
    print()
    head = ["model", "batch", "peer", "ms/step", "range", "eager/peer", "img/s", "first call s",
            "loss step 1 (f64 ref)", f"loss step {meta['warmup']}", "note"]
    table = []
    for r in rows:
        if r["status"] != "ok":
            note = r["note"] if len(r["note"]) <= 100 else r["note"][:97] + "..."
            table.append([r["model"], str(r["batch"]), r["peer"], r["status"].upper(), "", "", "",
                          "", "", "", note])
            continue
        eager = next((e for e in rows if e["model"] == r["model"] and e["batch"] == r["batch"]
                      and e["peer"] == "torch eager" and e["status"] == "ok"), None)
        s = r["step_s"]
        table.append([
            r["model"], str(r["batch"]), r["peer"], fmt_ms(s["median"]),
            f"{fmt_ms(s['min'])}..{fmt_ms(s['max'])}",
            f"{eager['step_s']['median'] / s['median']:.2f}" if eager else "",
            f"{r['batch'] / s['median']:.0f}", f"{r['first_call_s']:.2f}",
            f"{r['loss_first']:.5f} ({r['loss_reference']:.5f}{'' if r['loss_matches'] else ' MISMATCH'})",
            f"{r['loss_after_warmup']:.5f}", r["note"]])
    print_table(head, table)
    if micro_rows:
        print()
        table = []
        for m in micro_rows:
            err = m["rel_error_vs_f64"]
            err_s = "" if err is None else f"{err:.1e}" + (" NOT F32" if err > PRECISION_LIMIT else "")
            if m["time_s"] is None:
                table.append([m["what"], m["shape"], "", "", "", err_s])
                continue
            s = m["time_s"]
            table.append([m["what"], m["shape"], fmt_ms(s["median"]),
                          f"{fmt_ms(s['min'])}..{fmt_ms(s['max'])}", f"{m['rate']:.2f} {m['unit']}",
                          err_s])
        print_table(["microbenchmark", "shape", "ms", "range", "rate", "rel error vs f64"], table)
        print(f"(bandwidth counts bytes read + written; f32 lands near 1e-7..1e-6 relative "
              f"error, TF32 near 3e-4: above {PRECISION_LIMIT:g} is flagged NOT F32)")


def print_table(head, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    print(line(head))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))


# ---------------------------------------------------------------- main

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,lenet")
    p.add_argument("--batches", default="128,1024")
    p.add_argument("--steps", type=int, help="timed steps per run (default 200, --quick 10)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default 20, --quick 3)")
    p.add_argument("--repeats", type=int, help="timed runs (default 5, --quick 3)")
    p.add_argument("--peers", default="eager,compile,jax")
    p.add_argument("--compile_modes", default="default,reduce-overhead",
                   help="torch.compile modes the compile peer runs")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--threads", type=int,
                   help="torch CPU threads (default: 1 with --device cpu, torch's own on cuda)")
    p.add_argument("--quick", action="store_true",
                   help="few steps; on cpu also a 1024 square matmul and 64 MiB arrays")
    p.add_argument("--no_micro", action="store_true", help="skip the microbenchmarks")
    p.add_argument("--bw_mib", type=int, help="MiB per array in the bandwidth tests (default 1024)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="also write every number to this file")
    args = p.parse_args()
    args.steps = args.steps or (10 if args.quick else 200)
    args.warmup = args.warmup or (3 if args.quick else 20)
    args.repeats = args.repeats or (3 if args.quick else 5)
    if args.threads is None and args.device == "cpu":
        args.threads = 1
    models = args.models.split(",")
    peers = args.peers.split(",")
    for m in models:
        if m not in LEARNING_RATE:
            p.error(f"unknown model '{m}' (mlp or lenet)")
    for peer in peers:
        if peer not in ("eager", "compile", "jax"):
            p.error(f"unknown peer '{peer}' (eager, compile or jax)")

    try:
        import torch
    except ImportError as e:
        sys.exit(f"gpu_peers: PyTorch is needed ({e})")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_peers: torch sees no CUDA device (use --device cpu for a smoke test)")
    if args.threads:
        torch.set_num_threads(args.threads)
    precision = set_torch_precision(torch)
    jaxdev, jax_missing = import_jax(args.device, args.threads) if (
        "jax" in peers or not args.no_micro) else (None, "not asked for")
    if jax_missing:
        log(f"JAX skipped: {jax_missing}")

    meta = {
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "machine": f"{cpu_name()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(), "torch": torch.__version__,
        "jax": jaxdev[0].__version__ if jaxdev else f"skipped: {jax_missing}",
        "device": args.device, "torch_threads": torch.get_num_threads(),
        "torch_precision": precision, "steps": args.steps, "warmup": args.warmup,
        "repeats": args.repeats, "data_batches": DATA_BATCHES, "momentum": MOMENTUM,
        "learning_rate": LEARNING_RATE, "seed": args.seed,
    }
    meta.update(gpu_facts(torch, args.device))
    if jaxdev:
        meta["jax_device"] = str(jaxdev[1])
        try:
            meta["jax_backend"] = jaxdev[1].client.platform_version
        except AttributeError:
            pass
    log(f"torch {meta['torch']} on {meta.get('gpu', args.device)}; {precision}")

    rows = []
    for model in models:
        params = kiln_params(model, args.seed)
        for batch in [int(b) for b in args.batches.split(",")]:
            images, labels = make_data(batch, args.seed)
            ref = float(reference_loss(model, params, images[0], labels[0]))
            tbatches = [(torch.from_numpy(images[i]).to(args.device),
                         torch.from_numpy(labels[i].astype(np.int64)).to(args.device))
                        for i in range(DATA_BATCHES)]
            todo = []
            if "eager" in peers:
                todo.append(("torch eager", None))
            if "compile" in peers:
                todo += [(f"torch.compile {m}", m) for m in args.compile_modes.split(",")]
            if "jax" in peers:
                todo.append(("jax.jit", "jax"))
            for name, mode in todo:
                row = {"model": model, "batch": batch, "peer": name}
                log(f"{model} batch {batch}: {name} ...")
                try:
                    if mode == "jax":
                        if jaxdev is None:
                            raise Skip(jax_missing)
                        r = jax_peer(jaxdev, model, params, images, labels, args.device, args)
                    else:
                        r = torch_peer(torch, model, params, tbatches, args.device, mode, args)
                except Skip as e:
                    row.update(status="skipped", note=str(e))
                except Exception as e:  # a peer that breaks is a row, not the end of the run
                    msg = str(e).strip().splitlines()
                    row.update(status="error",
                               note=f"{type(e).__name__}: {msg[0][:500] if msg else ''}")
                else:
                    row.update(r, status="ok", step_s=summarize(r["step_s_repeats"]),
                               loss_reference=ref,
                               loss_matches=bool(abs(r["loss_first"] - ref) <= 1e-4 * max(1.0, abs(ref))))
                    s = row["step_s"]
                    log(f"  first call {r['first_call_s']:.2f} s, {fmt_ms(s['median'])} ms/step "
                        f"({fmt_ms(s['min'])}..{fmt_ms(s['max'])}), loss step 1 "
                        f"{r['loss_first']:.5f} (f64 reference {ref:.5f})")
                if row["status"] != "ok":
                    log(f"  {row['status']}: {row['note']}")
                rows.append(row)
                if args.device == "cuda":
                    torch.cuda.empty_cache()

    micro_rows = []
    if not args.no_micro:
        log("microbenchmarks ...")
        micro_rows = micro(torch, jaxdev, args.device, args)

    print_tables(meta, rows, micro_rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "steps": rows, "micro": micro_rows}, f, indent=1)
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
