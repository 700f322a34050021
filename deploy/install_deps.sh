#!/usr/bin/env bash
# Installs the Debian 12 packages Kiln builds and runs with. Run as root.
set -euo pipefail
packages=(
  cmake ninja-build g++ ccache pkg-config
  libabsl-dev libprotobuf-dev protobuf-compiler
  libgrpc++-dev protobuf-compiler-grpc
  libeigen3-dev libopenblas-dev libopenblas-openmp-dev libdnnl-dev ocl-icd-opencl-dev libspdlog-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev dataset-fashion-mnist python3 patchelf xz-utils
  libcivetweb-dev openssl python3-prometheus-client python3-yaml libgloo-dev
  clang-14 libclang-rt-14-dev libomp-14-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[kiln] installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[kiln] build dependencies already installed"
fi
