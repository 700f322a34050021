#!/usr/bin/env python3
"""Kiln's training step on a GPU against PyTorch (eager, torch.compile) and
JAX jit on the same GPU, in one run, with the ratios printed.

    python3 benchmarks/gpu_vs_peers.py [--bin build/bin] [--models mlp,lenet]
        [--batches 128,1024] [--steps 200] [--runs 3] [--peer_args "..."]
        [--json FILE]

Kiln's side starts kiln-server on loopback with every GPU of the host
(--devices=auto) and trains examples/fashion_mnist on gpu:0 for --steps
steps of each model and batch size, --runs times (the first run compiles;
the server's cache serves the others). Its number is the median of the
runs' "execute round trip p50" from the client's metrics report: one
cached training step through the server, including the RPC, the upload of
the batch and the inline loss that comes back. The peers' numbers come from
benchmarks/gpu_peers.py in the same run: a step with the batch already on
the device and nothing read back, so they bound what a step can cost; the
ratio kiln/peer above 1 means Kiln is slower.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(f"[gpu_vs_peers] {msg}", file=sys.stderr, flush=True)


def start_server(bin_dir):
    server = subprocess.Popen(
        [os.path.join(bin_dir, "kiln-server"), "--listen=127.0.0.1:0", "--devices=auto",
         "--log_level=warn"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = server.stdout.readline().strip()
    if not line.startswith("listening on "):
        server.kill()
        sys.exit(f"kiln-server did not start: {line}")
    address = line[len("listening on "):]
    devices = subprocess.run([os.path.join(bin_dir, "kiln"), "devices", f"--server={address}"],
                             capture_output=True, text=True, check=False).stdout
    if "gpu:0" not in devices:
        server.terminate()
        sys.exit("kiln-server found no GPU on this host (kiln devices lists none)")
    return server, address


def kiln_step(bin_dir, address, model, batch, steps):
    """One training run; returns (p50 ms of the cached step, seconds compiling)."""
    cmd = [os.path.join(bin_dir, "fashion_mnist"), f"--server={address}", "--device=gpu:0",
           f"--model={model}", f"--batch_size={batch}", "--epochs=1",
           f"--train_limit={steps * batch}", "--test_limit=1000", "--log_every=1000000",
           "--lr_schedule=constant"]
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{run.stdout}{run.stderr}")
    p50 = re.search(r"execute round trip\s+p50 ([0-9.]+) ms", run.stdout)
    compile_s = re.search(r"uncached compiles\s+\d+ \(([0-9.]+) s compiling", run.stdout)
    if p50 is None:
        sys.exit(f"no execute round trip in the output of {' '.join(cmd)}:\n{run.stdout}")
    return float(p50.group(1)), float(compile_s.group(1)) if compile_s else 0.0


def run_repeated(bin_dir, text, repeat):
    """Median and minimum ms of `repeat` executions of HLO `text` on gpu:0 (after one warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.hlo")
        with open(path, "w") as f:
            f.write(text)
        cmd = [os.path.join(bin_dir, "kiln"), "run", path, "--device=gpu:0", "--random_inputs=1",
               f"--repeat={repeat + 1}"]
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{run.stdout}{run.stderr}")
    times = [float(t) for t in re.findall(r"^run \d+: ([0-9.]+) ms", run.stdout, re.M)][1:]
    return statistics.median(times), min(times)


DOT = """HloModule dot
ENTRY main {{
  a = f32[{m},{k}] parameter(0)
  b = f32[{k},{n}] parameter(1)
  ROOT c = f32[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""

TRIAD = """HloModule triad
ENTRY main {{
  b = f32[{count}] parameter(0)
  c = f32[{count}] parameter(1)
  s = f32[] constant(1.5)
  sb = f32[{count}] broadcast(s), dimensions={{}}
  sc = f32[{count}] multiply(sb, c)
  ROOT a = f32[{count}] add(b, sc)
}}
"""

SCALAR = """HloModule scalar
ENTRY main {
  x = f32[] parameter(0)
  ROOT y = f32[] negate(x)
}
"""


def kiln_micro(bin_dir, bw_mib, repeat):
    """Kiln's dots and fused triad on gpu:0, as rows like gpu_peers.py's micro rows."""
    rows = []
    floor_ms, _ = run_repeated(bin_dir, SCALAR, repeat)
    rows.append({"what": "one-element program (fixed cost)", "shape": "f32[]",
                 "median_ms": floor_ms, "rate": None, "unit": ""})
    log(f"kiln one-element program: {floor_ms:.3f} ms per execution")
    for m, k, n in [(128, 784, 512), (1024, 784, 512), (4096, 4096, 4096)]:
        med, best = run_repeated(bin_dir, DOT.format(m=m, k=k, n=n), repeat)
        rate = 2 * m * n * k / (med * 1e-3) / 1e12
        rows.append({"what": "f32 dot", "shape": f"[{m}x{k}]x[{k}x{n}]", "median_ms": med,
                     "min_ms": best, "rate": rate, "unit": "TFLOP/s"})
        log(f"kiln dot [{m}x{k}]x[{k}x{n}]: {med:.3f} ms, {rate:.2f} TFLOP/s")
    count = bw_mib * 2 ** 20 // 4
    med, best = run_repeated(bin_dir, TRIAD.format(count=count), repeat)
    rate = 3 * count * 4 / (med * 1e-3) / 1e9
    rows.append({"what": "triad a = b + s*c (one fused kernel)", "shape": f"{bw_mib} MiB f32 per array",
                 "median_ms": med, "min_ms": best, "rate": rate, "unit": "GB/s"})
    log(f"kiln triad {bw_mib} MiB: {med:.3f} ms, {rate:.0f} GB/s (read+written)")
    return rows


def print_micro(kiln_rows, peer_rows):
    print("Kiln alone (kiln run --device=gpu:0, median per execution) against the peer's figure:")
    peer_rate = {}
    for m in peer_rows:
        if m.get("rate") is None:
            continue
        if m["what"].startswith("f32 matmul"):
            peer_rate[("dot", m["shape"])] = (m["rate"], "cuBLAS (torch.mm)")
        elif m["what"].startswith("triad"):
            peer_rate[("triad", "")] = (m["rate"], "the peer's triad")
        elif m["what"].startswith("copy"):
            peer_rate[("copy", "")] = (m["rate"], "a device copy")
    for r in kiln_rows:
        if r["rate"] is None:
            print(f"  {r['what']:40} {r['median_ms']:9.3f} ms")
            continue
        key = ("dot", r["shape"]) if r["what"].startswith("f32 dot") else ("triad", "")
        peer = peer_rate.get(key)
        line = f"  {r['what']} {r['shape']:24} {r['median_ms']:9.3f} ms {r['rate']:8.1f} {r['unit']}"
        if peer:
            line += f" | {peer[1]} {peer[0]:.1f} {r['unit']}: kiln/peer rate {r['rate'] / peer[0]:.2f}"
        print(line)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    p.add_argument("--models", default="mlp,lenet")
    p.add_argument("--batches", default="128,1024")
    p.add_argument("--steps", type=int, default=200, help="training steps per Kiln run")
    p.add_argument("--runs", type=int, default=3, help="Kiln runs per model and batch")
    p.add_argument("--peer_args", default="", help="extra arguments for gpu_peers.py")
    p.add_argument("--json", help="also write every number to this file")
    p.add_argument("--kiln_only", action="store_true",
                   help="time Kiln's steps only: no peers, no microbenchmarks")
    p.add_argument("--no_micro", action="store_true", help="leave the microbenchmarks out")
    p.add_argument("--bw_mib", type=int, default=1024, help="MiB per array of the triad")
    p.add_argument("--micro_repeat", type=int, default=20)
    args = p.parse_args()
    models = args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]

    server, address = start_server(args.bin)
    kiln = {}
    try:
        for model in models:
            for batch in batches:
                runs = [kiln_step(args.bin, address, model, batch, args.steps)
                        for _ in range(args.runs)]
                p50s = [r[0] for r in runs]
                kiln[(model, batch)] = {"p50_ms": statistics.median(p50s), "runs_ms": p50s,
                                        "compile_s": runs[0][1]}
                log(f"kiln {model} batch {batch}: step p50 {statistics.median(p50s):.3f} ms "
                    f"(runs {', '.join(f'{x:.3f}' for x in p50s)}), first compile {runs[0][1]:.1f} s")
    finally:
        server.terminate()
        server.wait()
    if args.kiln_only:
        for (model, batch), k in kiln.items():
            print(f"{model:6} {batch:5d} kiln step p50 {k['p50_ms']:.3f} ms "
                  f"(runs {', '.join(f'{x:.3f}' for x in k['runs_ms'])})")
        return
    kiln_micro_rows = [] if args.no_micro else kiln_micro(args.bin, args.bw_mib, args.micro_repeat)

    with tempfile.TemporaryDirectory() as tmp:
        peers_json = os.path.join(tmp, "peers.json")
        cmd = [sys.executable, os.path.join(HERE, "gpu_peers.py"), "--models", args.models,
               "--batches", args.batches, "--json", peers_json] + args.peer_args.split()
        cmd += ["--no_micro"] if args.no_micro else ["--bw_mib", str(args.bw_mib)]
        log("running " + " ".join(cmd))
        subprocess.run(cmd, check=True, stdout=sys.stderr)
        with open(peers_json) as f:
            peers = json.load(f)

    peer_names = []
    peer_ms = {}
    for row in peers["steps"]:
        if row.get("status") != "ok":
            continue
        if row["peer"] not in peer_names:
            peer_names.append(row["peer"])
        peer_ms[(row["model"], row["batch"], row["peer"])] = row["step_s"]["median"] * 1e3

    print(f"GPU: {peers['meta'].get('gpu', peers['meta'].get('device'))}; "
          f"{peers['meta'].get('torch_precision', '')}")
    print("Kiln: cached step through kiln-server (RPC, batch upload, loss back); "
          "peers: step on device-resident data. ratio = kiln / peer")
    header = f"{'model':6} {'batch':>5} {'kiln ms':>9}"
    for name in peer_names:
        header += f" | {name[:22]:>22} ms  ratio"
    print(header)
    for model in models:
        for batch in batches:
            k = kiln[(model, batch)]["p50_ms"]
            line = f"{model:6} {batch:5d} {k:9.3f}"
            for name in peer_names:
                ms = peer_ms.get((model, batch, name))
                line += (f" | {ms:25.3f} {k / ms:6.2f}" if ms else f" | {'-':>25} {'-':>6}")
            print(line)
    for m in peers.get("micro", []):
        if m.get("rate") is None:
            continue  # a precision check, not a rate
        rate = f"{m['rate']:.1f} {m['unit']}"
        print(f"peer micro: {m['what']} {m.get('shape', '')} {rate}")
    if kiln_micro_rows:
        print_micro(kiln_micro_rows, peers.get("micro", []))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kiln": {f"{m} {b}": v for (m, b), v in kiln.items()},
                       "kiln_micro": kiln_micro_rows, "peers": peers}, f, indent=1)


if __name__ == "__main__":
    main()
