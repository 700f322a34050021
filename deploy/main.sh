#!/usr/bin/env bash
# The main job: installs dependencies, builds, starts kiln-server on
# loopback and trains a Fashion-MNIST classifier through it, with progress.
# KILN_MODEL (lenet|mlp), KILN_EPOCHS and KILN_BATCH override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install_deps.sh
bash deploy/build.sh

model="${KILN_MODEL:-lenet}"
epochs="${KILN_EPOCHS:-5}"
batch="${KILN_BATCH:-128}"

out="$(mktemp)"
build/bin/kiln-server --listen=127.0.0.1:0 > "$out" &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 1 100); do
  grep -q "^listening on " "$out" && break
  sleep 0.1
done
address="$(sed -n 's/^listening on //p' "$out")"
if [ -z "$address" ]; then
  echo "[kiln] kiln-server did not start" >&2
  exit 1
fi
echo "[kiln] kiln-server is listening on $address"
build/bin/kiln devices --server="$address"
build/bin/fashion_mnist --server="$address" --model="$model" --epochs="$epochs" \
  --batch_size="$batch" --log_every=100
echo "[kiln] server counters:"
build/bin/kiln stats --server="$address" | grep -E "compile_cache|executes|bytes_in|sessions"
