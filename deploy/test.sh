#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install_deps.sh
bash deploy/build.sh
ctest --test-dir build --output-on-failure -j2 --timeout 600
