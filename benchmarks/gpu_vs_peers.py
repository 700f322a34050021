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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    p.add_argument("--models", default="mlp,lenet")
    p.add_argument("--batches", default="128,1024")
    p.add_argument("--steps", type=int, default=200, help="training steps per Kiln run")
    p.add_argument("--runs", type=int, default=3, help="Kiln runs per model and batch")
    p.add_argument("--peer_args", default="", help="extra arguments for gpu_peers.py")
    p.add_argument("--json", help="also write every number to this file")
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

    with tempfile.TemporaryDirectory() as tmp:
        peers_json = os.path.join(tmp, "peers.json")
        cmd = [sys.executable, os.path.join(HERE, "gpu_peers.py"), "--models", args.models,
               "--batches", args.batches, "--json", peers_json] + args.peer_args.split()
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"kiln": {f"{m} {b}": v for (m, b), v in kiln.items()}, "peers": peers},
                      f, indent=1)


if __name__ == "__main__":
    main()
