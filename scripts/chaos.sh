#!/bin/bash
# Runs more seeded random recovery trials of the 4-rank training job than CI
# does (host backend, no GPU needed):
#   bash scripts/chaos.sh [TRIALS=200] [SEED=$(date +%s)] [RANKS=4] [ITERS=12] [MODE=random]
# MODE random_host_fn: the job ends each iteration with a host function
# (cudaLaunchHostFunc), which must run exactly once per iteration; the kills
# fall anywhere in its minibatches, the host function's request among them.
# Every trial kills one or two agents at a random request and crash point
# (mid collective among them), sometimes a second one during the first one's
# recovery, and checks that the final parameters are bitwise equal to a
# fault-free run. The last line sums it up: trials, hangs, mismatches and the
# median and max recovery time (an agent's death to the last application
# resumed, from revenant-run's events).
set -euo pipefail
cd "$(dirname "$0")/.."
trials="${1:-200}"; seed="${2:-$(date +%s)}"; ranks="${3:-4}"; iters="${4:-12}"
mode="${5:-random}"
case "$mode" in random|random_host_fn) ;; *) echo "chaos.sh: MODE is random or random_host_fn" >&2; exit 2 ;; esac
bazel build //tools:revenant-run //tests/apps:train_mlp //tests/apps:train_mlp_host_kernels
B="$(bazel info bazel-bin 2>/dev/null)"
exec bash tests/integration/recovery_train_test.sh "$B/tools/revenant-run" \
  "$B/tests/apps/train_mlp.bin" "$B/tests/apps/libtrain_mlp_host_kernels.so" \
  "$ranks" "$iters" "$mode" "$trials" "$seed"
