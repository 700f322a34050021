#!/usr/bin/env python3
"""Runs a benchmark several times and prints its output once, each number
replaced by its range over the runs ("176.2-198.4"), under a header with
the date, the machine and the thread settings. Lines are matched by their
text with the numbers taken out, so any benchmark that prints the same
lines every run works unchanged.

    python3 benchmarks/repeat.py [--runs 3] -- build/bin/rpc_benchmark [ARGS...]
"""
import argparse
import datetime
import os
import platform
import re
import subprocess
import sys

NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.platform()}"


def merge(runs):
    """One output with each number replaced by its range over `runs`."""
    shapes = [[(NUMBER.sub("#", line), NUMBER.findall(line)) for line in out.splitlines()]
              for out in runs]
    merged = []
    for i, (shape, numbers) in enumerate(shapes[0]):
        others = [s[i] for s in shapes[1:] if i < len(s) and s[i][0] == shape]
        if len(others) != len(shapes) - 1:
            merged.append(runs[0].splitlines()[i] + "   (differs between runs)")
            continue
        columns = zip(numbers, *[o[1] for o in others])
        parts = shape.split("#")
        line = parts[0]
        for column, rest in zip(columns, parts[1:]):
            values = [float(v) for v in column]
            lo, hi = min(values), max(values)
            text = {float(v): v for v in column}
            line += text[lo] if lo == hi else f"{text[lo]}-{text[hi]}"
            line += rest
        merged.append(line)
    return "\n".join(merged)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no benchmark command given")
    threads = {k: os.environ[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                          "OPENBLAS_CORETYPE") if k in os.environ}
    print(f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC | {machine()}")
    print(f"{' '.join(command)} | {args.runs} runs | "
          f"{' '.join(f'{k}={v}' for k, v in threads.items()) or 'thread settings unset'}")
    runs = []
    for _ in range(args.runs):
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        runs.append(out)
    print(merge(runs))


if __name__ == "__main__":
    sys.exit(main())
