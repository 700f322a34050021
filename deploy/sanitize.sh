#!/usr/bin/env bash
# Builds Kiln with one of GCC's sanitizers into its own tree and runs the
# tests there; a sanitizer report fails the test that triggered it.
#
#   bash deploy/sanitize.sh           AddressSanitizer + UndefinedBehaviorSanitizer
#                                     into build-asan/, every test but the
#                                     bundle, SDK and fuzz ones (they build
#                                     trees of their own) and the GPU ones
#                                     (deploy/test.sh runs this)
#   bash deploy/sanitize.sh thread    ThreadSanitizer into build-tsan/, the
#                                     server, client and feed tests
#
# Needs what deploy/install_deps.sh installs (GCC's libasan, libubsan and
# libtsan come with g++).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-address}"
case "$mode" in
  address)
    dir=build-asan
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    select=(-LE "bundle|sdk|fuzz|gpu")
    export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    ;;
  thread)
    dir=build-tsan
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    select=(-R "Service|Server|Session|Client|DirectPath|Feed|Infeed|Outfeed|Tensor|Loop" -LE "bundle|sdk|fuzz|gpu")
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/deploy/tsan.supp"
    ;;
  *)
    echo "usage: bash deploy/sanitize.sh [address|thread]" >&2
    exit 2
    ;;
esac
echo "[kiln] configuring $dir ($mode sanitizer)"
# Line tables only (-g1): the reports name files and lines. -O1 compiles the
# instrumented tree in about two thirds of -O2's time, and the tests take
# about as long. The benchmarks are left out: no test runs them.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WITH_CUDA=OFF \
  -DKILN_BUILD_BENCHMARKS=OFF \
  -DKILN_OPT_FLAGS="-O1 -g1" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" > /dev/null
# GCC 12's ThreadSanitizer cannot map its shadow memory under the address
# randomization of current kernels (its binaries crash at start, test
# discovery included): build and run without it.
run=()
if [ "$mode" = thread ]; then run=(setarch "$(uname -m)" -R); fi
echo "[kiln] building $dir with 2 jobs"
"${run[@]}" ninja -C "$dir" -j2
echo "[kiln] running the tests under the $mode sanitizer"
"${run[@]}" ctest --test-dir "$dir" --output-on-failure -j2 --timeout 600 "${select[@]}"
