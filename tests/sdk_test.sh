#!/usr/bin/env bash
# End to end: a program outside the tree (examples/sdk) builds against Kiln
# three ways and trains through a real kiln-server with each:
#   1. the installed SDK, with find_package(Kiln);
#   2. the installed SDK, with pkg-config (kiln.pc);
#   3. the source tree, with add_subdirectory.
# Usage: sdk_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

step() { echo "[sdk] $*"; }

# Checks the fit: the program prints "w W b B" with W near 3 and B near -2.
check_fit() {
  local out=$1
  cat "$out"
  python3 - "$out" <<'PY'
import sys
last = open(sys.argv[1]).read().split()
w, b = float(last[-3]), float(last[-1])
assert last[-4] == "w" and last[-2] == "b", last
assert abs(w - 3) < 0.01 and abs(b + 2) < 0.01, (w, b)
PY
}

step "installing into $work/prefix"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
for f in lib/cmake/Kiln/KilnConfig.cmake lib/pkgconfig/kiln.pc include/kiln/client/client.h \
         include/kiln/kiln/v1/service.pb.h include/kiln/embedded/embedded.h bin/kiln-server; do
  [[ -e "$work/prefix/$f" ]] || { echo "missing from the install: $f"; exit 1; }
done

step "starting kiln-server"
"$build/bin/kiln-server" --listen=127.0.0.1:0 > "$work/server.out" 2> "$work/server.err" &
server_pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/server.out" && break
  sleep 0.1
done
address=$(sed -n 's/^listening on //p' "$work/server.out")
[[ -n "$address" ]] || { echo "kiln-server did not start"; cat "$work/server.err"; exit 1; }

step "1. find_package(Kiln) against the installed prefix"
cmake -S "$src/examples/sdk" -B "$work/find_package" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/fp.log"
ninja -C "$work/find_package" > "$work/fp_build.log" || { cat "$work/fp_build.log"; exit 1; }
"$work/find_package/fit_line" "$address" > "$work/fp.out"
check_fit "$work/fp.out"

step "2. pkg-config kiln"
flags=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs kiln)
g++ -O1 "$src/examples/sdk/fit_line.cc" -o "$work/fit_line_pc" $flags
"$work/fit_line_pc" "$address" > "$work/pc.out"
check_fit "$work/pc.out"

step "3. add_subdirectory of the source tree"
cmake -S "$src/examples/sdk" -B "$work/subdir" -G Ninja -DKILN_SOURCE_DIR="$src" \
  -DCMAKE_BUILD_TYPE=Release > "$work/sub.log"
ninja -C "$work/subdir" -j2 fit_line > "$work/sub_build.log" || { tail -50 "$work/sub_build.log"; exit 1; }
"$work/subdir/fit_line" "$address" > "$work/sub.out"
check_fit "$work/sub.out"
step "all three builds trained through kiln-server"
