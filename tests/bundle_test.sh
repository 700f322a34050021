#!/usr/bin/env bash
# End to end: deploy/bundle.sh packs kiln-server and kiln; the tarball,
# unpacked elsewhere, resolves every library but glibc's, the driver's and
# the CUDA toolkit's inside itself, and its server and CLI work together in a
# clean environment. The toolkit is left to the host (--system-cuda), or the
# GPU backend's libraries would add 650 MB. With a toolkit present, a small
# probe linked against cudart and the driver checks what is bundled with and
# without --system-cuda. Error cases: a missing binary, a library that cannot
# be found.
# Usage: bundle_test.sh BUILD_DIR SOURCE_DIR
set -Eeuo pipefail
shopt -s inherit_errexit nullglob
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
bundle_sh="$src/deploy/bundle.sh"
work=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2> /dev/null || true; wait "$server_pid" 2> /dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "[bundle_test] FAIL: line $LINENO exited with $?" >&2' ERR

step() { echo "[bundle_test] $*"; }
fail() { echo "[bundle_test] FAIL: $*" >&2; exit 1; }
# Nothing from the caller's environment (LD_LIBRARY_PATH above all) leaks in.
clean_env() { env -i PATH=/usr/bin:/bin "$@"; }

# The libraries that the host, not the bundle, may supply: glibc's family and
# the driver's.
host_provided() {
  case $(basename "$1") in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libmvec.so.* | libdl.so.* | libpthread.so.* | \
      librt.so.* | libresolv.so.* | libutil.so.* | libnsl.so.* | libanl.so.* | libcuda.so* | libnvidia-*) return 0 ;;
  esac
  return 1
}

# Prints "name path" for each library ldd resolves for $1, and "name" alone
# for each it cannot find.
ldd_pairs() {
  local listing line path
  listing=$(clean_env ldd "$1") || fail "ldd failed on $1: $listing"
  while read -r line; do
    case $line in
      *" => not found"*) echo "${line%% =>*}" ;;
      *" => /"*) path=${line#* => }; echo "${line%% =>*} ${path%% (0x*}" ;;
    esac
  done <<< "$listing"
}

# Every bundled file's libraries resolve under $1/lib, or are the host's.
check_resolves_inside() {
  local root=$1 file pairs name path checked=0
  for file in "$root"/bin/* "$root"/lib/*; do
    pairs=$(ldd_pairs "$file")
    while read -r name path; do
      [[ -n "$name" ]] || continue
      [[ -n "$path" ]] || host_provided "$name" || fail "$file: $name not found"
      [[ -z "$path" || $(readlink -f "$path") == "$root"/lib/* ]] || host_provided "$name" ||
        fail "$file: $name resolves outside the bundle, to $path"
    done <<< "$pairs"
    checked=$((checked + 1))
  done
  step "  ldd: $checked files resolve inside the bundle"
}

# Every library the build's binary needs (but the host's) is in the bundle.
check_complete() {
  local root=$1 binary=$2 pairs name path
  pairs=$(ldd_pairs "$build/bin/$binary")
  while read -r name path; do
    host_provided "$name" || [[ -f "$root/lib/$name" ]] || fail "$binary needs $name, missing from lib/"
  done <<< "$pairs"
}

check_rpaths() {
  local root=$1 bin_rpath=$2 lib_rpath=$3 file rpath
  for file in "$root"/bin/*; do
    rpath=$(patchelf --print-rpath "$file")
    [[ "$rpath" == "$bin_rpath" ]] || fail "RUNPATH of $file is '$rpath', not '$bin_rpath'"
  done
  for file in "$root"/lib/*; do
    rpath=$(patchelf --print-rpath "$file")
    [[ "$rpath" == "$lib_rpath" ]] || fail "RUNPATH of $file is '$rpath', not '$lib_rpath'"
  done
}

check_stripped() {
  local file sections
  for file in "$1"/bin/* "$1"/lib/*; do
    sections=$(readelf -S "$file")
    if grep -qE '\.(symtab|debug_info)' <<< "$sections"; then fail "$file is not stripped"; fi
  done
}

# The tarball holds one top folder, kiln-bundle/; unpacks it into $2.
unpack() {
  local tarball=$1 dest=$2 tops
  tops=$(tar -tf "$tarball" | cut -d/ -f1 | sort -u)
  [[ "$tops" == kiln-bundle ]] || fail "$tarball has top entries '$tops', not kiln-bundle"
  mkdir -p "$dest"
  tar -C "$dest" -xf "$tarball"
}

start_server() {
  local root=$1
  # Not through clean_env: a function would run in a subshell, and $! would
  # name that shell instead of the server that env execs.
  env -i PATH=/usr/bin:/bin "$root/bin/kiln-server" --listen=127.0.0.1:0 > "$work/server.out" 2> "$work/server.err" &
  server_pid=$!
  for _ in $(seq 100); do
    grep -q "^listening on" "$work/server.out" && break
    sleep 0.1
  done
  address=$(sed -n 's/^listening on //p' "$work/server.out")
  [[ -n "$address" ]] || { cat "$work/server.err" >&2; fail "the bundled kiln-server did not start"; }
}

# The running server maps no shared object from outside the bundle but the
# host's (and the CUDA libraries left to it).
check_server_maps() {
  local root=$1 path
  while read -r path; do
    [[ $(readlink -f "$path") == "$root"/* ]] || host_provided "$path" ||
      grep -qFx "$(basename "$path")" "$root/share/cuda-libraries.txt" || fail "kiln-server maps $path"
  done < <(grep -o '/[^ ]*\.so[^ ]*' "/proc/$server_pid/maps" | sort -u)
}

# With the GPU backend built in, every library its sources dlopen is on the
# list the host must provide (ldd cannot see them; bundle.sh knows them).
check_gpu_dlopened() {
  local root=$1 backends names name
  backends=$(clean_env "$build/bin/kiln-server" --backends)
  if ! grep -q '^gpu:' <<< "$backends"; then
    step "  no GPU backend in this build: no dlopened CUDA libraries to check"
    return
  fi
  names=$(grep -ohE '"lib[A-Za-z0-9_]+\.so\.' "$src"/runtime/gpu/*.cc < /dev/null | tr -d '"' | sort -u)
  [[ -n "$names" ]] || fail "the GPU backend is built, but no \"libX.so.\" is dlopened in $src/runtime/gpu/*.cc"
  for name in $names; do
    grep -qE "^${name//./\\.}[0-9]+$" "$root/share/cuda-libraries.txt" ||
      fail "the GPU backend dlopens ${name}N, missing from share/cuda-libraries.txt"
  done
  step "  the host provides $(paste -sd' ' "$root/share/cuda-libraries.txt")"
}

# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell.
test_kiln_bundle() {
  local sums root out="$work/pack/kiln.tar.zst"
  sums=$(sha256sum "$build/bin/kiln-server" "$build/bin/kiln")
  mkdir -p "$work/pack"
  step "bundling kiln-server and kiln, the CUDA toolkit left to the host"
  bash "$bundle_sh" --build "$build" --out "$out" --system-cuda kiln-server kiln
  [[ "$(sha256sum "$build/bin/kiln-server" "$build/bin/kiln")" == "$sums" ]] || fail "the build's binaries changed"

  step "unpacking elsewhere"
  unpack "$out" "$work/host"
  rm -rf "$work/pack"
  root=$(cd "$work/host/kiln-bundle" && pwd -P)
  check_resolves_inside "$root"
  check_complete "$root" kiln-server
  check_complete "$root" kiln
  check_rpaths "$root" '$ORIGIN/../lib:/usr/local/cuda/lib64' '$ORIGIN:/usr/local/cuda/lib64'
  check_stripped "$root"
  check_gpu_dlopened "$root"

  step "starting the unpacked kiln-server"
  start_server "$root"
  local devices
  devices=$(clean_env "$root/bin/kiln" devices --server="$address") || fail "kiln devices failed"
  echo "$devices"
  grep -q '^cpu:0 ' <<< "$devices" || fail "kiln devices does not list cpu:0"
  check_server_maps "$root"
  step "  kiln devices through $address lists cpu:0; the server maps only bundled libraries"
}

# A program linked against cudart and the driver (its stub), in a build tree
# of its own; prints that tree.
make_cuda_probe() {
  local cuda=$1 tree="$work/cuda_build"
  mkdir -p "$tree/bin"
  printf '%s\n' 'int cudaRuntimeGetVersion(int*);' 'int cuDriverGetVersion(int*);' \
    'int main(void) { int v; return cudaRuntimeGetVersion(&v) + cuDriverGetVersion(&v); }' > "$work/probe.c"
  gcc "$work/probe.c" -o "$tree/bin/cuda_probe" -L"$cuda" -L"$cuda/stubs" -lcudart -lcuda -Wl,-rpath,"$cuda"
  echo "$tree"
}

# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell.
test_cuda_probe() {
  local cuda=/usr/local/cuda/lib64 tree root log
  if [[ ! -e "$cuda/libcudart.so" || ! -e "$cuda/stubs/libcuda.so" ]]; then
    step "no CUDA toolkit in $cuda: skipping the --system-cuda checks"
    return
  fi
  tree=$(make_cuda_probe "$cuda")

  step "bundling a cudart probe with the toolkit's libraries"
  bash "$bundle_sh" --build "$tree" --out "$work/full/probe.tar.xz" cuda_probe > /dev/null
  root="$work/full/kiln-bundle"
  compgen -G "$root/lib/libcudart.so.*" > /dev/null || fail "libcudart is missing from the bundle"
  check_rpaths "$root" '$ORIGIN/../lib' '$ORIGIN'
  if compgen -G "$root/lib/libcuda.so*" > /dev/null; then fail "the driver's libcuda is in the bundle"; fi

  step "bundling it with --system-cuda"
  log=$(bash "$bundle_sh" --build "$tree" --out "$work/sys/probe.tar.xz" --system-cuda cuda_probe)
  root="$work/sys/kiln-bundle"
  if compgen -G "$root/lib/libcuda*" > /dev/null; then fail "--system-cuda bundled $(ls "$root/lib")"; fi
  grep -qx 'libcudart\.so\.[0-9]*' "$root/share/cuda-libraries.txt" || fail "share/cuda-libraries.txt lacks libcudart"
  grep -q 'must provide.*libcudart' <<< "$log" || fail "bundle.sh did not say that the host must provide libcudart"
  check_rpaths "$root" '$ORIGIN/../lib:/usr/local/cuda/lib64' '$ORIGIN:/usr/local/cuda/lib64'
  step "  the host provides $(paste -sd' ' "$root/share/cuda-libraries.txt")"
}

# Runs bundle.sh expecting it to fail with a message matching $1.
expect_failure() {
  local pattern=$1 err
  shift
  if err=$(bash "$bundle_sh" "$@" 2>&1 > /dev/null); then fail "bundle.sh $* succeeded"; fi
  grep -qE "$pattern" <<< "$err" || fail "bundle.sh $* failed without saying '$pattern': $err"
  step "  refused: $(tail -1 <<< "$err")"
}

test_errors() {
  local tree="$work/broken_build"
  step "errors: a missing binary, a library ldd cannot find"
  mkdir -p "$tree/bin" "$work/gone" "$work/e1" "$work/e2"
  expect_failure 'no binary no_such_tool' --build "$build" --out "$work/e1/x.tar.xz" no_such_tool
  echo 'int gone(void) { return 0; }' > "$work/gone.c"
  echo 'int gone(void); int main(void) { return gone(); }' > "$work/needs_gone.c"
  gcc -shared -fPIC "$work/gone.c" -o "$work/gone/libgone.so" -Wl,-soname,libgone.so
  gcc "$work/needs_gone.c" -o "$tree/bin/needs_gone" -L"$work/gone" -lgone
  rm "$work/gone/libgone.so"
  expect_failure 'needs_gone needs libgone\.so' --build "$tree" --out "$work/e2/x.tar.xz" needs_gone
}

test_kiln_bundle
test_cuda_probe
test_errors
step "passed"
