#!/usr/bin/env bash
# Packs Kiln's binaries and every shared library they need beyond glibc into a
# relocatable folder, kiln-bundle/, and a tarball of it, so that kiln-server
# and the tools run on a host that has only the NVIDIA driver. Binaries find
# their libraries through RUNPATH ($ORIGIN/../lib), so no wrapper scripts.
#
# Usage: deploy/bundle.sh [--build DIR] [--out FILE.tar.xz] [--system-cuda]
#                         [--with-tests] [--data DIR]... [BINARY...]
#   --build DIR     build tree whose bin/ holds the binaries (default: build/ here)
#   --out FILE      tarball, .tar.xz or .tar.zst (default: BUILD/kiln-bundle.tar.xz);
#                   the unpacked folder is written beside it as kiln-bundle/
#   --system-cuda   leave the CUDA toolkit's libraries out; the host provides them
#   --with-tests    add the test binaries (BUILD/bin/*_test, or only the tests named
#                   among BINARY...), the helpers they start and tests/data
#   --data DIR      copy a dataset folder to share/datasets/<name of DIR>
#   BINARY...       binaries of BUILD/bin (default: kiln-server kiln fashion_mnist
#                   infeed_training feed_producer, those that exist)
# Runs as root on Debian 12; installs patchelf with apt-get when it is missing.
set -euo pipefail
shopt -s inherit_errexit

readonly kDefaultBinaries=(kiln-server kiln fashion_mnist infeed_training feed_producer)
# Processes that the end-to-end tests start beside kiln-server.
readonly kTestHelpers=(lease_client feed_producer)
# Source files that the tests read, kept at the same relative paths under
# share/kiln so that the bundle can stand in for the source tree.
readonly kTestSources=(tests/data deploy/tpu_v3_8.cfg)
# Libraries that Kiln's GPU backend loads with dlopen (runtime/gpu: nvrtc.cc,
# blas.cc), which ldd cannot see; tests/bundle_test.sh checks this list
# against those sources.
readonly kGpuDlopened=(libnvrtc libcublasLt)

src=$(cd "$(dirname "$0")/.." && pwd)
build="$src/build"
out=
system_cuda=false
with_tests=false
datasets=()
binaries=()
selected=()
work=
bundle=
# Files whose libraries are still to be looked at, the libraries seen, and
# those that --system-cuda leaves to the host.
queue=()
declare -A seen=()
cuda_from_host=()

log() { echo "[bundle] $*"; }
die() { echo "[bundle] error: $*" >&2; exit 1; }
human() { numfmt --to=iec-i --suffix=B "$1"; }
size_of() { du -sb "$1" | cut -f1; }
cleanup() { if [[ -n "$work" ]]; then rm -rf "$work"; fi; }

usage() {
  sed -n '/^# Usage:/,/^# Runs as root/{/^# Runs as root/d; s/^# \{0,1\}//; p}' "$0" >&2
  exit 2
}

parse_args() {
  while (($#)); do
    case $1 in
      --build) build=$(cd "${2:?--build needs a directory}" && pwd) || die "no build directory $2"; shift ;;
      --out) out=${2:?--out needs a file name}; shift ;;
      --system-cuda) system_cuda=true ;;
      --with-tests) with_tests=true ;;
      --data) [[ -d ${2:?--data needs a directory} ]] || die "no dataset directory $2"; datasets+=("$2"); shift ;;
      -h | --help) usage ;;
      -*) echo "unknown option $1" >&2; usage ;;
      *) binaries+=("$1") ;;
    esac
    shift
  done
  out=${out:-$build/kiln-bundle.tar.xz}
  case $out in
    *.tar.xz | *.tar.zst) ;;
    *) die "--out must end in .tar.xz or .tar.zst: $out" ;;
  esac
}

ensure_patchelf() {
  command -v patchelf > /dev/null && return
  log "installing patchelf: apt-get install -y patchelf"
  local apt_log
  apt_log=$(mktemp)
  if ! { apt-get install -y -q patchelf || { apt-get update -q && apt-get install -y -q patchelf; }; } \
    > "$apt_log" 2>&1; then
    cat "$apt_log" >&2
    rm -f "$apt_log"
    die "could not install patchelf (run as root, or install it yourself)"
  fi
  rm -f "$apt_log"
  log "installed $(patchelf --version)"
}

# Prints the paths of the binaries to bundle: the ones named, or the default
# set (those present); with --with-tests, also the tests and their helpers.
select_binaries() {
  local name
  if ((${#binaries[@]})); then
    for name in "${binaries[@]}"; do
      [[ -x "$build/bin/$name" ]] || die "no binary $name in $build/bin (build it first: ninja -C $build $name)"
      echo "$build/bin/$name"
    done
  else
    for name in "${kDefaultBinaries[@]}"; do
      if [[ -x "$build/bin/$name" ]]; then echo "$build/bin/$name"; else log "skipping $name: not built" >&2; fi
    done
  fi
  if $with_tests; then
    # Named binaries that are tests replace the whole set of tests.
    if ! printf '%s\n' "${binaries[@]}" | grep -q '_test$'; then
      compgen -G "$build/bin/*_test" || die "--with-tests: no test binaries (*_test) in $build/bin"
    fi
    for name in "${kTestHelpers[@]}"; do
      [[ -x "$build/bin/$name" ]] || die "--with-tests: no $name in $build/bin (the tests start it)"
      echo "$build/bin/$name"
    done
  fi
}

# The C library and the dynamic loader come from the host, like the driver.
is_glibc() {
  case $1 in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libmvec.so.* | libdl.so.* | libpthread.so.* | \
      librt.so.* | libresolv.so.* | libutil.so.* | libnsl.so.* | libanl.so.*) return 0 ;;
  esac
  return 1
}

# The driver's user-space libraries must match the host's kernel module.
is_driver() {
  case $1 in
    libcuda.so* | libnvidia-*) return 0 ;;
  esac
  return 1
}

# A CUDA toolkit library: by name, or by resolving under /usr/local/cuda*
# (ldconfig may reach them through links elsewhere, e.g. /usr/local/lib).
is_cuda_toolkit() {
  local name=$1 path=$2
  case $name in
    libcudart.so* | libcublas*.so* | libcudnn*.so* | libnccl.so* | libnvrtc*.so* | libnvJitLink.so* | \
      libcufft*.so* | libcurand.so* | libcusolver*.so* | libcusparse.so* | libnvvm.so* | libcupti.so* | \
      libnvToolsExt.so* | libnvtx3interop.so* | libnpp*.so* | libnvjpeg.so*) return 0 ;;
  esac
  [[ $(readlink -f "$path") == /usr/local/cuda* ]]
}

# Libraries that a bundled library dlopens by name, which ldd cannot see: nvrtc
# loads its builtins, and libcudnn is a shim that loads its sub-libraries.
dlopened_by() {
  local name=$1 dir
  dir=$(dirname "$(readlink -f "$2")")
  case $name in
    libnvrtc.so.*) compgen -G "$dir/libnvrtc-builtins.so.*" || true ;;
    libcudnn.so.*) compgen -G "$dir/libcudnn_*.so.${name##*.so.}" || true ;;
  esac
}

# The toolkit the build used: CMake caches its bin/, the libraries sit beside.
cuda_library_dir() {
  local bin_dir
  bin_dir=$(sed -n 's/^CUDAToolkit_BIN_DIR:PATH=//p' "$build/CMakeCache.txt" 2> /dev/null || true)
  echo "${bin_dir:+$(dirname "$bin_dir")/lib64}"
}

# Prints "name path" for each library that the GPU backend in $1 (found by its
# loader, kiln::gpu::OpenCudaLibrary) would dlopen; nothing without it.
gpu_dlopened() {
  local file=$1 symbols dir name path
  symbols=$(nm -C --defined-only "$file" 2> /dev/null || true)
  grep -q 'kiln::gpu::OpenCudaLibrary' <<< "$symbols" || return 0
  dir=$(cuda_library_dir)
  dir=${dir:-/usr/local/cuda/lib64}
  for name in "${kGpuDlopened[@]}"; do
    path=$(compgen -G "$dir/$name.so.[0-9]*" | grep -m1 -E "/$name\.so\.[0-9]+$") ||
      die "$(basename "$file") has the GPU backend, which loads $name, but $dir has no $name.so.N"
    echo "$(basename "$path") $path"
  done
}

# Prints "name path" for each library that $1 loads directly or indirectly.
# Fails on a library that cannot be found, unless it is one the host provides.
ldd_deps() {
  local file=$1 listing line name path
  listing=$(ldd "$file" 2>&1) || die "ldd failed on $file: $listing"
  while read -r line; do
    case $line in
      *" => not found"*)
        name=${line%% =>*}
        is_glibc "$name" || is_driver "$name" || die "$(basename "$file") needs $name, which ldd cannot find"
        ;;
      *" => /"*)
        name=${line%% =>*}
        path=${line#* => }
        echo "$name ${path%% (0x*}"
        ;;
    esac
  done <<< "$listing"
}

# Copies $1 to $2, strips the copy, and points its RUNPATH at $3.
install_elf() {
  local from=$1 to=$2 rpath=$3
  cp -L "$from" "$to"
  chmod u+w "$to"
  strip --strip-unneeded "$to" || die "strip failed on $to (from $from)"
  patchelf --set-rpath "$rpath" "$to" || die "patchelf failed on $to (from $from)"
  printf '[bundle]   %-56s %8s  <- %s\n' "${to#"$bundle"/}" "$(human "$(size_of "$to")")" "$from"
}

# shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell.
rpath_of() {
  local rpath='$ORIGIN'
  if [[ $1 == bin ]]; then rpath='$ORIGIN/../lib'; fi
  if $system_cuda; then rpath+=:/usr/local/cuda/lib64; fi
  echo "$rpath"
}

# Bundles library $1 (found at $2), unless the host provides it, and queues it.
add_library() {
  local name=$1 path=$2 companion
  [[ -z "${seen[$name]:-}" ]] || return 0
  seen[$name]=1
  if is_glibc "$name" || is_driver "$name"; then return; fi
  if $system_cuda && is_cuda_toolkit "$name" "$path"; then
    cuda_from_host+=("$name")
    return
  fi
  install_elf "$path" "$bundle/lib/$name" "$(rpath_of lib)"
  queue+=("$path")
  for companion in $(dlopened_by "$name" "$path"); do
    add_library "$(basename "$companion")" "$companion"
  done
}

# Adds the libraries of $1, lines of "name path".
add_libraries() {
  local name path
  while read -r name path; do
    if [[ -n "$name" ]]; then add_library "$name" "$path"; fi
  done <<< "$1"
}

# Copies the binaries into bin/ and the closure of their libraries into lib/,
# running ldd on every library added too, which covers the dependencies of
# the dlopened ones.
copy_elves() {
  local file deps
  log "binaries:"
  for file in "${selected[@]}"; do
    install_elf "$file" "$bundle/bin/$(basename "$file")" "$(rpath_of bin)"
    queue+=("$file")
  done
  log "libraries:"
  for file in "${selected[@]}"; do
    deps=$(gpu_dlopened "$file")
    add_libraries "$deps"
  done
  while ((${#queue[@]})); do
    file=${queue[0]}
    queue=("${queue[@]:1}")
    deps=$(ldd_deps "$file")
    add_libraries "$deps"
  done
}

copy_share() {
  local dir rel
  # What deploy/Containerfile and deploy/kiln-server.service expect.
  mkdir -p "$bundle/share/kiln/deploy"
  cp "$src/deploy/kiln-server.flags" "$src/deploy/kiln-server.service" \
    "$src/deploy/tpu_v3_8.cfg" "$bundle/share/kiln/deploy/"
  if $with_tests; then
    # The test binaries read the source tree and start the binaries at the
    # paths they were built with; deploy/gpu_check.sh points these at the
    # bundle on a host that has neither.
    printf 'source_dir=%s\nbin_dir=%s\n' "$src" "$build/bin" > "$bundle/share/kiln/test-paths.txt"
    for rel in "${kTestSources[@]}"; do
      mkdir -p "$bundle/share/kiln/$(dirname "$rel")"
      cp -r "$src/$rel" "$bundle/share/kiln/$rel"
      log "  share/kiln/$rel $(human "$(size_of "$bundle/share/kiln/$rel")")"
    done
  fi
  for dir in "${datasets[@]}"; do
    mkdir -p "$bundle/share/datasets"
    cp -rL "$dir" "$bundle/share/datasets/$(basename "$dir")"
    log "  share/datasets/$(basename "$dir") $(human "$(size_of "$dir")") <- $dir"
  done
  if $system_cuda; then
    if ((${#cuda_from_host[@]})); then
      printf '%s\n' "${cuda_from_host[@]}" > "$bundle/share/cuda-libraries.txt"
      log "the host must provide these CUDA libraries (in /usr/local/cuda/lib64 or the loader's path): ${cuda_from_host[*]}"
    else
      : > "$bundle/share/cuda-libraries.txt"
      log "the host must provide no CUDA libraries: the binaries link none"
    fi
  fi
}

compress() {
  local tarball=$1
  local compressor='xz -T2 -6'
  if [[ $tarball == *.tar.zst ]]; then compressor='zstd -T2 -19'; fi
  tar -C "$work" -I "$compressor" --owner=0 --group=0 --numeric-owner -cf "$tarball" kiln-bundle
}

main() {
  parse_args "$@"
  ensure_patchelf
  local listing
  listing=$(select_binaries | awk '!seen[$0]++')
  mapfile -t selected <<< "$listing"
  [[ -n "$listing" ]] || die "nothing to bundle: none of ${kDefaultBinaries[*]} is in $build/bin"

  local out_dir
  mkdir -p "$(dirname "$out")"
  out_dir=$(cd "$(dirname "$out")" && pwd)
  out="$out_dir/$(basename "$out")"
  # Staged beside the output and moved into place at the end, so a failure
  # leaves no half-made bundle.
  work=$(mktemp -d "$out_dir/.kiln-bundle.XXXXXX")
  trap cleanup EXIT
  bundle="$work/kiln-bundle"
  mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/share"

  log "bundling from $build/bin: ${selected[*]##*/}"
  copy_elves
  copy_share
  log "compressing"
  compress "$work/$(basename "$out")"

  rm -rf "$out_dir/kiln-bundle"
  mv "$bundle" "$out_dir/kiln-bundle"
  mv "$work/$(basename "$out")" "$out"
  log "bundle: $out_dir/kiln-bundle, $(human "$(size_of "$out_dir/kiln-bundle")") unpacked" \
    "($(find "$out_dir/kiln-bundle/bin" -type f | wc -l) binaries, $(find "$out_dir/kiln-bundle/lib" -type f | wc -l) libraries)"
  log "tarball: $out, $(human "$(size_of "$out")")"
}

main "$@"
