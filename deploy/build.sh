#!/usr/bin/env bash
# Configures and builds Kiln into build/ (binaries in build/bin/).
set -euo pipefail
cd "$(dirname "$0")/.."
build_type="${KILN_BUILD_TYPE:-RelWithDebInfo}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type" > /dev/null
echo "[kiln] building ($build_type) with $(nproc 2>/dev/null || echo 2) jobs max 2"
ninja -C build -j2
