#!/bin/bash
# Sets up, builds and runs the demo job: CUDA programs, unmodified, executed
# through Revenant's shim and agents on the CPU host backend (no GPU needed).
#   bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bazel build //tools:revenant-run //tests/apps:all_apps //tests/apps:all_host_kernels
B="$(bazel info bazel-bin 2>/dev/null)"
echo
echo "== vector_add on 2 ranks through revenant-run --backend=host"
"$B/tools/revenant-run" -n 2 --backend=host --timeout=120 \
  --host_kernels="$B/tests/apps/libvector_add_host_kernels.so" -- "$B/tests/apps/vector_add.bin"
echo
echo "== streams, events and host callbacks through the shim"
"$B/tools/revenant-run" -n 1 --backend=host --timeout=120 \
  --host_kernels="$B/tests/apps/libcallbacks_host_kernels.so" -- "$B/tests/apps/callbacks.bin"
