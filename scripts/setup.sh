#!/bin/bash
# Installs what Revenant's build and tests need on Debian 12, idempotently.
#   bash scripts/setup.sh
# Needs root (or sudo) for apt-get; does nothing when everything is present.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap      # Bazel 4.2.3, works offline
  bazel-rules-java     # @rules_java for Bazel's built-in WORKSPACE suffix
  libabsl-dev          # abseil
  protobuf-compiler libprotobuf-dev
  libgtest-dev libgmock-dev
  libgloo-dev          # collectives on the host backend
  libisal-dev          # CRC32C for the journal
  libopenblas-dev      # the cuBLAS rows on the host backend
  libcurl4-openssl-dev # the etcd client (jobs spanning nodes, recovery/etcd_client.h)
  etcd-server          # etcd 3.4 for the tests tagged "etcd" (scripts/etcd_local.sh)
  g++ make
  python3              # tests of revenant-run's torchrun command line (*.py programs)
  clang libclang-rt-14-dev  # libFuzzer + sanitizers: scripts/fuzz.sh, //tests/fuzz:fuzz_test
)

cuda=/usr/local/cuda
if [ ! -x "$cuda/bin/nvcc" ] || [ ! -f "$cuda/include/cuda_runtime_api.h" ] ||
   [ ! -f "$cuda/include/nccl.h" ] || [ ! -f "$cuda/include/cublas_api.h" ] ||
   ! ls "$cuda"/lib*/libcublas.so >/dev/null 2>&1; then
  echo "setup: the CUDA 13 toolkit with NCCL and cuBLAS is required under $cuda (nvcc, cuda_runtime_api.h, nccl.h, cublas_api.h, libcublas.so)." >&2
  echo "setup: install the CUDA toolkit and NCCL there first; a GPU is not needed to build or test." >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all build packages present"
fi
