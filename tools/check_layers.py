#!/usr/bin/env python3
"""Fails when an #include crosses a layer the wrong way.

The layers (docs/architecture.md), each allowed to include itself and those
listed:

    base            -
    compiler/ir     base, proto messages
    compiler/passes base, compiler/ir
    runtime (HAL)   base, compiler
    runtime/host    base, compiler, runtime (HAL)
    runtime/<name>  base, compiler, runtime (HAL), runtime/host: one backend
                    never includes another
    server          base, compiler, runtime (HAL only: no backend is named),
                    proto messages
    client          base, compiler/ir, proto messages
    embedded        base, compiler/ir, runtime (HAL), server, client, proto
    tools, examples base, compiler/ir, client, embedded, proto messages

gRPC (grpcpp/, *.grpc.pb.h) appears only in server/grpc_* (the server's gRPC layer) and
client/grpc_transport.*. Tests (*_test.cc, *test_util.h), tests/ and
benchmarks/ are harnesses that may drive their code through any layer.

    python3 tools/check_layers.py [ROOT]     exit 1 and one line per violation
"""
import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".cc", ".def")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# Project folders: an include starting with one of these is ours.
PROJECT_ROOTS = ("base/", "compiler/", "runtime/", "server/", "client/", "embedded/",
                 "tools/", "examples/", "tests/", "benchmarks/", "kiln/v1/", "proto/")
GRPC_FILES = ("server/grpc_", "client/grpc_transport.")
HARNESS_DIRS = ("tests/", "benchmarks/")


def layer_of(path):
    """The layer a repository-relative path belongs to."""
    parts = path.split("/")
    if parts[0] == "compiler" and len(parts) > 2:
        return "compiler/" + parts[1]
    if parts[0] == "runtime":
        if len(parts) == 2:
            return "runtime"
        return "runtime/host" if parts[1] == "host" else "backend:" + parts[1]
    if parts[0] == "kiln":
        return "proto"
    return parts[0]


ALLOWED = {
    "base": {"base"},
    "compiler/ir": {"base", "compiler/ir", "proto"},
    "compiler/passes": {"base", "compiler/ir", "compiler/passes"},
    "runtime": {"base", "compiler/ir", "compiler/passes", "runtime"},
    "runtime/host": {"base", "compiler/ir", "compiler/passes", "runtime", "runtime/host"},
    "server": {"base", "compiler/ir", "compiler/passes", "runtime", "server", "proto"},
    "client": {"base", "compiler/ir", "client", "proto"},
    "embedded": {"base", "compiler/ir", "runtime", "server", "client", "embedded", "proto"},
    "tools": {"base", "compiler/ir", "client", "embedded", "tools", "proto"},
    "examples": {"base", "compiler/ir", "client", "embedded", "examples", "proto"},
}


def allowed(src_layer, dst_layer):
    if src_layer.startswith("backend:"):
        return dst_layer in ("base", "compiler/ir", "compiler/passes", "runtime",
                             "runtime/host", src_layer)
    return dst_layer in ALLOWED.get(src_layer, {src_layer})


def is_harness(path):
    name = os.path.basename(path)
    return (path.startswith(HARNESS_DIRS) or name.endswith("_test.cc") or
            name.endswith("test_util.h"))


def check_file(path, text):
    """Violations of one file, as messages."""
    problems = []
    src = layer_of(path)
    for m in INCLUDE.finditer(text):
        inc = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        where = f"{path}:{line}"
        if ("grpcpp/" in inc or inc.endswith(".grpc.pb.h")) and not path.startswith(GRPC_FILES) \
                and not is_harness(path):
            problems.append(f"{where}: includes gRPC ({inc}) outside the transport files")
            continue
        if not inc.startswith(PROJECT_ROOTS) or is_harness(path):
            continue
        dst = layer_of(inc)
        if not allowed(src, dst):
            problems.append(f"{where}: {src} may not include {inc} ({dst})")
    for m in re.finditer(r"#\s*include\s*<(grpcpp/[^>]+)>", text):
        if not path.startswith(GRPC_FILES) and not is_harness(path):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{path}:{line}: includes gRPC ({m.group(1)}) outside the "
                            "transport files")
    return problems


def check_tree(root):
    problems = []
    for top in ("base", "compiler", "runtime", "server", "client", "embedded", "tools",
                "examples"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                with open(full, encoding="utf-8", errors="replace") as f:
                    problems += check_file(rel, f.read())
    return problems


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = check_tree(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) cross a layer the wrong way (docs/architecture.md)")
        return 1
    print("layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
