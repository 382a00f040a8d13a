#!/bin/bash
# Sets up the machine and runs every test that needs no GPU.
#   bash scripts/test.sh [extra bazel test flags]
# GPU tests are tagged "manual" and run on a GPU machine (scripts/gpu_check.sh).
# Tests tagged "etcd" (jobs spanning nodes) use the etcd named by
# REVENANT_TEST_ETCD_ENDPOINT (.ci/run starts one) or start a private one on
# loopback (scripts/etcd_local.sh); only outside CI (CI unset) on a machine
# without etcd-server are they left out, with a note. In CI they always
# run, and fail if etcd is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
filters=()
if [ "${CI:-}" != true ] && [ -z "${REVENANT_TEST_ETCD_ENDPOINT:-}" ] && ! command -v etcd >/dev/null; then
  echo "test.sh: etcd is not installed: the tests tagged \"etcd\" are left out (apt-get install etcd-server)" >&2
  filters=(--test_tag_filters=-etcd)
fi
exec bazel test //... "${filters[@]}" "$@"
