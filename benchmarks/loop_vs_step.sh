#!/usr/bin/env bash
# Fashion-MNIST epoch time in loop mode (examples/infeed_training: one device
# program per epoch fed through the infeed) against step mode
# (examples/fashion_mnist: one program execution per step), both through
# one kiln-server on loopback, same data, batch and threads, in one run.
#   benchmarks/loop_vs_step.sh [models] [epochs]     (default: mlp,lenet 1)
set -euo pipefail
cd "$(dirname "$0")/.."
models="${1:-mlp,lenet}"
epochs="${2:-1}"
bin=build/bin
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
out=$(mktemp)
"$bin/kiln-server" --listen=127.0.0.1:0 --log_level=warn > "$out" &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$out" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$out")
echo "kiln-server at $addr, OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS, $epochs epoch(s)"
# Mean seconds of the epochs' training phase, from "epoch N: ... S s, ..." lines.
mean_epoch() { grep -E '^epoch [0-9]+:.* s, ' | sed -E 's/.* ([0-9.]+) s, .*/\1/' |
  awk '{s += $1; n++} END {if (n) printf "%.2f", s / n; else print "nan"}'; }
for model in ${models//,/ }; do
  # Batches as f32 and steps pipelined, as loop mode's infeed has them.
  step=$("$bin/fashion_mnist" --server="$addr" --model="$model" --epochs="$epochs" \
           --upload=f32 --pipeline=true --report=false --log_every=100000 | mean_epoch)
  loop=$("$bin/infeed_training" --server="$addr" --model="$model" --epochs="$epochs" \
           --log_every=100000 | mean_epoch)
  ratio=$(awk -v a="$loop" -v b="$step" 'BEGIN {printf "%.2f", a / b}')
  echo "$model: loop mode $loop s/epoch | step mode $step s/epoch | ratio loop/step $ratio"
done
