#!/usr/bin/env bash
# Every benchmark of docs/benchmarks.md, each repeated and printed with the
# range over its runs, the date, the machine and the thread settings. Run on
# an otherwise idle machine after deploy/build.sh; needs Debian's
# python3-numpy and python3-torch (installed here when missing).
#   bash benchmarks/run_all.sh [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
for p in python3-numpy python3-torch; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
    echo "[kiln] installing $p"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p"
  }
done
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
repeat() { /usr/bin/python3 benchmarks/repeat.py --runs "$runs" -- "$@"; echo; }
echo "== RPC costs"; repeat build/bin/rpc_benchmark
echo "== Infeed throughput"; repeat build/bin/infeed_benchmark
echo "== Training against PyTorch (through kiln-server, 1 and 2 threads)"
/usr/bin/python3 benchmarks/fashion_mnist_vs_torch.py --threads 1,2 --runs "$runs"; echo
echo "== Loop mode against step mode (Kiln against Kiln)"; repeat bash benchmarks/loop_vs_step.sh
echo "== TPU simulator (Kiln against Kiln)"; repeat build/bin/tpusim_benchmark
