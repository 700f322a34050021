#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test with CTest, then again
# under ASan and UBSan (deploy/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install_deps.sh
bash deploy/build.sh
ctest --test-dir build --output-on-failure -j2 --timeout 600
# The suite again under AddressSanitizer and UndefinedBehaviorSanitizer.
bash deploy/sanitize.sh
