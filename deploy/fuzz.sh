#!/usr/bin/env bash
# Builds Kiln's fuzzers with clang (libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer) into build-fuzz/ and runs each for SECONDS
# (default 60), starting from the HLO modules of the repository. A crash,
# a sanitizer report or a hang (over 30 s on one input) keeps the input in
# build-fuzz/findings/ and makes the script fail.
#
#   bash deploy/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
out=build-fuzz
fuzzers=(hlo_text_fuzzer module_proto_fuzzer host_execute_fuzzer service_fuzzer)

mkdir -p "$out"
echo "[fuzz] configuring $out with clang-14"
# -O1 with line tables: the instrumented build is the slow part of a short run.
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKILN_OPT_FLAGS="-O1 -g1" \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DKILN_FUZZ=ON \
  -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCHMARKS=OFF -DKILN_BUILD_EXAMPLES=OFF \
  -DKILN_WITH_CUDA=OFF > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
echo "[fuzz] building ${fuzzers[*]}"
ninja -C "$out" -j2 "${fuzzers[@]}" > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }

# The seed corpus: every module in the tree; the fuzzers add what they find.
mkdir -p "$out/corpus/text" "$out/corpus/proto" "$out/corpus/service" "$out/findings"
cp tests/data/hlo/*.hlo examples/hlo/*.hlo "$out/corpus/text/"

failed=0
for f in "${fuzzers[@]}"; do
  corpus="$out/corpus/text"
  [[ $f == module_proto_fuzzer ]] && corpus="$out/corpus/proto"
  [[ $f == service_fuzzer ]] && corpus="$out/corpus/service"
  echo "[fuzz] $f for ${seconds}s"
  # The wire-form fuzzer starts from the same modules as ModuleProtos.
  seeds=""
  [[ $f == module_proto_fuzzer ]] && seeds="$out/corpus/text:$out/corpus/proto"
  if ! KILN_PROTO_SEEDS="$seeds" "$out/bin/$f" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
      -max_len=16384 -print_final_stats=1 -artifact_prefix="$out/findings/$f-" \
      "$corpus" > "$out/$f.log" 2>&1; then
    echo "[fuzz] $f FOUND A PROBLEM (input in $out/findings/):"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written|deadly signal|timeout" "$out/$f.log" | head -20
    failed=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$out/$f.log" | tail -2 | sed "s/^/[fuzz]   /"
  fi
done
exit "$failed"
