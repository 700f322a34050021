#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs the example program
# through kiln on the CPU device, printing each output.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install_deps.sh
bash deploy/build.sh
echo "[kiln] checking examples/hlo/mlp_step.hlo"
build/bin/kiln check examples/hlo/mlp_step.hlo | tail -n 1
echo "[kiln] running one training step of a 784-128-10 MLP on a random batch"
build/bin/kiln run examples/hlo/mlp_step.hlo --random_inputs=1 --repeat=5 --output_dir=build/example_out
echo "[kiln] outputs written to build/example_out"
