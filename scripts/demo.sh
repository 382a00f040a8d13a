#!/bin/bash
# Sets up, builds and runs the demo: a 4-rank data-parallel training job,
# unmodified CUDA + NCCL code, executed through Revenant on the CPU host
# backend (no GPU needed). It runs once without failure, then again while
# the agent of rank 2 is killed in the middle of a backward pass; the job
# recovers and ends with the same final parameters, bit for bit.
#   bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bazel build //tools:revenant-run //tests/apps:train_mlp //tests/apps:train_mlp_host_kernels
B="$(bazel info bazel-bin 2>/dev/null)"
RUN=("$B/tools/revenant-run" -n 4 --backend=host --timeout=300
     --host_kernels="$B/tests/apps/libtrain_mlp_host_kernels.so")
APP=("$B/tests/apps/train_mlp.bin" --iters 12)
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

echo "== 1. the training job on 4 ranks, no failure"
"${RUN[@]}" -- "${APP[@]}" 2>&1 | tee "$log" | grep -E "loss|checksum|finished"
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$log")

echo
echo "== 2. the same job; the agent of rank 2 is killed (SIGKILL) mid-backward in minibatch 4"
"${RUN[@]}" --chaos="rank=2,minibatch=4,calls=8" -- "${APP[@]}" 2>&1 | tee "$log" |
  grep -E "revenant-run|loss|checksum"
same=$(grep -c "^\[r[0-9]\] final checksum $ref\$" "$log" || true)
echo
if [ "$same" -eq 4 ]; then
  echo "final state identical to a run without failure (checksum $ref on all 4 ranks)"
else
  echo "final state DIFFERS from the run without failure" >&2
  exit 1
fi
