#!/usr/bin/env bash
# Runs Kiln's GPU checks on a host with an NVIDIA GPU from a bundle made by
#   deploy/bundle.sh --system-cuda --with-tests --data /usr/share/datasets/fashion-mnist \
#       kiln-server kiln fashion_mnist kiln_gpu_test kiln_gpu_e2e_test
# so that the host needs only the driver, the CUDA libraries and (for the
# benchmark) Python with PyTorch and JAX. Phases, each bounded in time:
#   tests   kiln_gpu_test (every corpus module against the CPU backend, CUDA
#           graphs replayed) and the training part of kiln_gpu_e2e_test
#   e2e     all of kiln_gpu_e2e_test (also the corpus through `kiln run`)
#   train   Fashion-MNIST, MLP and LeNet-5, 5 epochs each on the default device
#           of `kiln-server --devices=auto` (the first GPU), as the README's job
#   resnet  examples/resnet on gpu:0 (RESNET_FLAGS adds flags, e.g. --epochs=8)
#   bench   benchmarks/gpu_vs_peers.py: Kiln's cached steps (CUDA graphs on,
#           then off) and microbenchmarks against PyTorch, torch.compile, JAX
# Logs and JSON results go to OUT; a summary is printed last.
#
# Usage: deploy/gpu_check.sh BUNDLE.tar.xz OUT [tests|e2e|train|resnet|bench]...
#        (default: tests bench)
set -uo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
(($# >= 2)) || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
tarball=$1
out=$2
shift 2
phases=("$@")
((${#phases[@]})) || phases=(tests bench)
mkdir -p "$out"
summary=()

log() { echo "[gpu_check] $*"; }
note() { summary+=("$*"); log "$*"; }

work=$(mktemp -d /tmp/kiln-gpu-check.XXXXXX)
tar -C "$work" -xf "$tarball" || { log "cannot unpack $tarball"; exit 1; }
bundle=$work/kiln-bundle
bin=$bundle/bin

# link_if_missing TARGET LINK: makes LINK point at TARGET unless LINK is a
# real file or folder (a link left by an earlier run is replaced).
link_if_missing() {
  if [[ -L $2 ]]; then rm -f "$2"; elif [[ -e $2 ]]; then return 0; fi
  mkdir -p "$(dirname "$2")"
  ln -s "$1" "$2"
}

# The tests look for the source tree and the binaries where they were built.
paths=$bundle/share/kiln/test-paths.txt
if [[ -f $paths ]]; then
  source_dir=$(sed -n 's/^source_dir=//p' "$paths")
  bin_dir=$(sed -n 's/^bin_dir=//p' "$paths")
  link_if_missing "$bundle/share/kiln" "$source_dir"
  link_if_missing "$bin" "$bin_dir"
fi
if [[ -d $bundle/share/datasets/fashion-mnist ]]; then
  link_if_missing "$bundle/share/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  | tee "$out/gpu.txt"

# run_phase NAME SECONDS COMMAND...: runs it with a time limit, output to OUT/NAME.log.
run_phase() {
  local name=$1 seconds=$2
  shift 2
  local start=$SECONDS rc
  log "$name: $*"
  timeout --kill-after=10 "$seconds" "$@" > "$out/$name.log" 2>&1
  rc=$?
  note "$name: exit $rc after $((SECONDS - start)) s$( ((rc == 124)) && echo " (time limit $seconds s)")"
  return $rc
}

# A test binary's totals and its failures.
gtest_result() {
  local log=$out/$1.log
  grep -E '^\[==========\] .* ran|^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$log" \
    | sed "s/^/  $1: /"
  grep -E '^\[  FAILED  \] [A-Z]' "$log" | sort -u | head -n 20 | sed "s/^/  $1: /"
}

# The table of a benchmark's log, or its last lines where it failed.
bench_result() {
  local log=$out/$1.log
  if grep -q -E "$2" "$log"; then sed -n "/$2/,\$p" "$log"; else tail -n 8 "$log"; fi
}

for phase in "${phases[@]}"; do
  case $phase in
    tests)
      run_phase gpu_test 240 "$bin/kiln_gpu_test"
      summary+=("$(gtest_result gpu_test)")
      run_phase gpu_e2e_test 180 "$bin/kiln_gpu_e2e_test" --gtest_filter='Models/*'
      summary+=("$(gtest_result gpu_e2e_test)")
      ;;
    e2e)
      run_phase gpu_e2e_test 300 "$bin/kiln_gpu_e2e_test"
      summary+=("$(gtest_result gpu_e2e_test)")
      ;;
    train)
      for model in mlp lenet; do
        run_phase "train_$model" 240 bash -c '
          "$1/kiln-server" --listen=127.0.0.1:0 --log_level=warn > "$2.server" 2>&1 &
          server=$!
          for _ in $(seq 100); do grep -q "^listening on " "$2.server" && break; sleep 0.1; done
          address=$(sed -n "s/^listening on //p" "$2.server")
          "$1/fashion_mnist" --server="$address" --model="$3" --epochs=5
          rc=$?
          kill "$server"; wait "$server"
          exit $rc' _ "$bin" "$out/train_$model" "$model"
        summary+=("$(grep -E '^(epoch [0-9]+: train|training )' "$out/train_$model.log" | sed "s/^/  $model: /")")
      done
      ;;
    resnet)
      # shellcheck disable=SC2086  # RESNET_FLAGS is a list of flags
      run_phase resnet "${RESNET_SECONDS:-600}" "$bin/resnet" --devices=cpu:1,gpu:1 \
        --device=gpu:0 --log_every=100 ${RESNET_FLAGS:-}
      summary+=("$(grep -E '^(training|epoch [0-9]+:|final)' "$out/resnet.log" | sed 's/^/  resnet: /')")
      ;;
    bench)
      run_phase bench_graphs 420 python3 "$src/benchmarks/gpu_vs_peers.py" --bin "$bin" \
        --runs 3 --steps 200 --json "$out/gpu_vs_peers.json" \
        --peer_args "--steps 100 --repeats 3 --warmup 10"
      summary+=("$(bench_result bench_graphs '^GPU:')")
      run_phase bench_no_graphs 120 env KILN_GPU_GRAPHS=0 python3 \
        "$src/benchmarks/gpu_vs_peers.py" --bin "$bin" --runs 2 --steps 200 --kiln_only
      summary+=("without CUDA graphs:" "$(bench_result bench_no_graphs 'kiln step p50')")
      ;;
    *)
      log "unknown phase $phase (tests, e2e, train, resnet, bench)"
      exit 2
      ;;
  esac
done

rm -rf "$work"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
