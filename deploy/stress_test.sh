#!/usr/bin/env bash
# Runs the whole CTest suite ROUNDS times in a row (default 20) while
# `stress` keeps both cores busy, and stops at the first failing round.
# Tests must not depend on timing: this is how we check it.
#   bash deploy/stress_test.sh [ROUNDS] [extra ctest arguments]
# Needs a built tree (deploy/build.sh) and Debian's `stress` package.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-20}"
shift || true
command -v stress > /dev/null || {
  echo "[kiln] installing stress"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends stress
}
cores="$(nproc)"
stress --cpu "$cores" --timeout 86400 > /dev/null 2>&1 &
stress_pid=$!
trap 'kill "$stress_pid" 2>/dev/null; wait "$stress_pid" 2>/dev/null || true' EXIT
echo "[kiln] $(date -u +%FT%TZ): $rounds rounds of ctest under stress --cpu $cores"
for ((round = 1; round <= rounds; round++)); do
  start=$(date +%s)
  log="$(mktemp)"
  if ctest --test-dir build -j2 --timeout 600 "$@" > "$log" 2>&1; then
    echo "[kiln] round $round/$rounds passed ($(( $(date +%s) - start )) s," \
         "$(grep -o '[0-9]*% tests passed.*' "$log"))"
    rm -f "$log"
  else
    echo "[kiln] round $round/$rounds FAILED:"
    sed -n '/The following tests FAILED/,$p' "$log"
    echo "[kiln] full log: $log"
    exit 1
  fi
done
echo "[kiln] all $rounds rounds passed under load"
