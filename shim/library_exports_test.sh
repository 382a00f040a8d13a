#!/bin/bash
# Every function the CUDA libraries export (api:library_exports: "<soname>
# <name>" lines from the toolkit's libraries) is exported by the shim, under
# the library's version node (NCCL's and the driver's unversioned names
# under libcudart.so.13's), so an application's references to any of them bind to
# the shim and never to a real library in its own process.
set -u
shim="$1"; exports="$2"
got="$(mktemp)"; trap 'rm -f "$got"' EXIT
nm -D --defined-only "$shim" | awk '$2 == "T" || $2 == "W" { print $3 }' | sort -u >"$got"
total=0; missing=0
while read -r lib name; do
  case "$name" in _Z*) continue ;; esac
  total=$((total + 1))
  node="$lib"; case "$lib" in libnccl.so.2 | libcuda.so.1) node=libcudart.so.13 ;; esac
  # The first library that exports a name gives its version.
  if ! grep -qxF "$name@@$node" "$got" && ! grep -q "^$name@@" "$got"; then
    echo "missing: $name ($lib)"; missing=$((missing + 1))
  fi
done < <(awk '!seen[$2]++' "$exports")
echo "$total library functions, $missing not exported by the shim"
[ "$total" -gt 1000 ] || { echo "FAIL: only $total library functions listed (the check would be vacuous)"; exit 1; }
[ "$missing" -eq 0 ] || { echo "FAIL"; exit 1; }
# A refused function answers its library's "not supported" status and logs
# once per process.
out="$(python3 - "$shim" 2>&1 <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.cudnnGetErrorString.restype = ctypes.c_char_p
lib.cusparseGetErrorString.restype = ctypes.c_char_p
print("cudnnSoftmaxForward", lib.cudnnSoftmaxForward(), lib.cudnnSoftmaxForward())
print("cublasLtMatrixTransform", lib.cublasLtMatrixTransform())
print("cusolverDnCreate", lib.cusolverDnCreate(None))
print("cudaGetExportTable", lib.cudaGetExportTable(None, None))
print("cuTexRefCreate", lib.cuTexRefCreate(None))
print("cusparseGetErrorString", lib.cusparseGetErrorString(0).decode())
print("cudnnGetErrorString", lib.cudnnGetErrorString(2000).decode())
PY
)"
echo "$out"
for want in "cudnnSoftmaxForward 3000 3000" "cublasLtMatrixTransform 15" "cusolverDnCreate 15" \
            "cudaGetExportTable 801" "cuTexRefCreate 801" "cusparseGetErrorString cusparseGetErrorString is not supported" \
            "cudnnGetErrorString CUDNN_STATUS_BAD_PARAM"; do
  grep -qF "$want" <<<"$out" || { echo "FAIL: no '$want'"; exit 1; }
done
n=$(grep -c "cudnnSoftmaxForward (libcudnn.so.9) is not supported under Revenant" <<<"$out")
[ "$n" -eq 1 ] || { echo "FAIL: $n log lines for two refused calls, want 1"; exit 1; }
echo "ok"
