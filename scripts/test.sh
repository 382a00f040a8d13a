#!/bin/bash
# Sets up the machine and runs every test that needs no GPU.
#   bash scripts/test.sh [extra bazel test flags]
# GPU tests are tagged "manual" and run on a GPU machine (scripts/gpu_check.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
exec bazel test //... "$@"
