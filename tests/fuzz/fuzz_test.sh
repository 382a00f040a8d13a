#!/bin/bash
# CI run of every fuzz target (scripts/fuzz.sh): each for a short, bounded
# time on its seed corpus (which holds the inputs of every bug found so far).
# Fails when a target crashes, hangs or trips ASan/UBSan, and when clang or
# libFuzzer is missing (scripts/setup.sh installs them).
#   fuzz_test.sh <seconds per target>
# Runs the source tree's scripts/fuzz.sh (the tree found through this
# script's runfile symlink) and builds in its .fuzz/ (git-ignored); the
# generated sources come from the workspace's bazel-bin, which this test's
# data (the agent) brings up to date.
set -u
seconds="$1"
root=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
[ -f "$root/WORKSPACE" ] && [ -f "$root/scripts/fuzz.sh" ] ||
  { echo "FAIL: cannot find the source tree from $0 (got $root)"; exit 1; }
if ! command -v clang++ >/dev/null; then
  echo "FAIL: clang++ is not installed; libFuzzer targets need clang (run scripts/setup.sh:" \
    "apt-get install -y clang libclang-rt-14-dev)"
  exit 1
fi
export ROOT="$root" GEN_DIR="$root/bazel-bin" FUZZ_SEED="${FUZZ_SEED:-20261129}"
echo "fuzz_test: source tree $root, $seconds s per target, libFuzzer seed $FUZZ_SEED"
# Bounded: the build (minutes, cached in .fuzz/) and 6 targets of $seconds.
timeout 1500 bash "$root/scripts/fuzz.sh" "$seconds"
rc=$?
[ $rc -eq 124 ] && echo "FAIL: scripts/fuzz.sh did not finish within 1500 s"
[ $rc -eq 0 ] || exit 1
echo "ok: every fuzz target ran ${seconds}s without a crash"
