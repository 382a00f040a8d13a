# GPU section: cuBLAS and cuBLASLt through the cuda backend (sourced by
# .gpu/run_gpu.sh with MODE, G, RUN, LOGS and record; runs for MODE "all",
# "cublas", or "cublaslt" for the cuBLASLt part alone).
#
# tests/apps/cublas_ops natively and under revenant-run --backend=cuda (the
# agent runs the real libcublas.so.13):
#   1. every case passes against the program's CPU reference both ways, and
#      the RESULT checksums under the shim equal the native ones bitwise;
#   2. the training-like loop (--iters) ends with the native final checksum
#      under the shim;
#   3. agent kills mid-GEMM and after the dot's reply, recovered by a
#      replacement agent, end with the same final checksum.
# tests/apps/cublaslt_ops alike (the agent runs the real libcublasLt.so.13):
# its cases bitwise native = cuda, cuBLASLt's error codes both ways, its loop
# (descriptors made and dropped at every matmul) with the native final
# checksum, and agent kills mid-matmul and after the heuristic's reply
# recovered to it.
if [ "$MODE" = all ] || [ "$MODE" = cublas ] || [ "$MODE" = cublaslt ]; then
  if ! ldconfig -p | grep -q "libcublasLt.so.13" && [ ! -e /usr/local/cuda/lib64/libcublasLt.so.13 ]; then
    d=$(dirname "$(find / -xdev -name 'libcublasLt.so.13' 2>/dev/null | head -1)")
    echo "libcublasLt.so.13 not on the library path; using $d"
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  fi
fi
if [ "$MODE" = all ] || [ "$MODE" = cublas ]; then
  echo
  echo "=== cuBLAS on the cuda backend"
  if ! ldconfig -p | grep -q "libcublas.so.13" && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
    d=$(dirname "$(find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -1)")
    echo "libcublas.so.13 not on the library path; using $d"
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  fi
  nlog="$LOGS/cublas_ops.native.log"; clog="$LOGS/cublas_ops.cuda.log"
  timeout 120 "$G/apps/cublas_ops.bin" >"$nlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS cublas_ops" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cublas_ops native" "$s" "$nlog"
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/apps/cublas_ops.bin" >"$clog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS cublas_ops" "$clog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cublas_ops revenant --backend=cuda" "$s" "$clog"
  grep "^RESULT " "$nlog" >"$LOGS/cublas_ops.native.results"
  sed -n 's/^\[r0\] \(RESULT .*\)$/\1/p' "$clog" >"$LOGS/cublas_ops.cuda.results"
  n=$(wc -l <"$LOGS/cublas_ops.native.results")
  if [ "$n" -eq 61 ] && diff -q "$LOGS/cublas_ops.native.results" "$LOGS/cublas_ops.cuda.results" >/dev/null
  then s=PASS; else s="FAIL ($n native results; diff below)"; fi
  diff "$LOGS/cublas_ops.native.results" "$LOGS/cublas_ops.cuda.results" >"$LOGS/cublas_ops.diff"
  record "cublas_ops results bitwise native = cuda" "$s" "$LOGS/cublas_ops.diff"

  nlog="$LOGS/cublas_loop.native.log"; clog="$LOGS/cublas_loop.cuda.log"
  timeout 120 "$G/apps/cublas_ops.bin" --iters 8 >"$nlog" 2>&1
  ref=$(sed -n 's/^final checksum \([0-9a-f]*\)$/\1/p' "$nlog")
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/apps/cublas_ops.bin" --iters 8 >"$clog" 2>&1
  got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$clog")
  if [ -n "$ref" ] && [ "$got" = "$ref" ]; then s=PASS; else s="FAIL (native '$ref', cuda '$got')"; fi
  record "cublas_ops loop final checksum native = cuda" "$s" "$clog"
  for spec in "rank=0,minibatch=3,calls=4,point=after_execute" "rank=0,minibatch=4,calls=10,point=after_reply"; do
    log="$LOGS/cublas_loop.cuda.chaos.${spec//[^a-z0-9]/_}.log"
    timeout 150 $RUN -n 1 --backend=cuda --timeout=120 --chaos="$spec" -- \
      "$G/apps/cublas_ops.bin" --iters 8 >"$log" 2>&1
    got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$log")
    if [ -n "$ref" ] && [ "$got" = "$ref" ] && grep -q "replacement agent for rank" "$log"
    then s=PASS; else s="FAIL (native '$ref', recovered '$got')"; fi
    record "cublas_ops loop cuda, agent killed [$spec]" "$s" "$log"
  done
fi

if [ "$MODE" = all ] || [ "$MODE" = cublas ] || [ "$MODE" = cublaslt ]; then
  echo
  echo "=== cuBLASLt on the cuda backend"
  nlog="$LOGS/cublaslt_ops.native.log"; clog="$LOGS/cublaslt_ops.cuda.log"
  timeout 120 "$G/apps/cublaslt_ops.bin" >"$nlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS cublaslt_ops" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cublaslt_ops native" "$s" "$nlog"
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/apps/cublaslt_ops.bin" >"$clog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS cublaslt_ops" "$clog" &&
     grep -q "^\[r0\] revenant-only error cases ok" "$clog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cublaslt_ops revenant --backend=cuda" "$s" "$clog"
  grep "^RESULT " "$nlog" >"$LOGS/cublaslt_ops.native.results"
  sed -n 's/^\[r0\] \(RESULT .*\)$/\1/p' "$clog" >"$LOGS/cublaslt_ops.cuda.results"
  n=$(wc -l <"$LOGS/cublaslt_ops.native.results")
  if [ "$n" -eq 24 ] && diff -q "$LOGS/cublaslt_ops.native.results" "$LOGS/cublaslt_ops.cuda.results" >/dev/null
  then s=PASS; else s="FAIL ($n native results; diff below)"; fi
  diff "$LOGS/cublaslt_ops.native.results" "$LOGS/cublaslt_ops.cuda.results" >"$LOGS/cublaslt_ops.diff"
  record "cublaslt_ops results bitwise native = cuda" "$s" "$LOGS/cublaslt_ops.diff"
  # The too-small-workspace case runs where the heuristic offers an
  # algorithm that needs a workspace (on the H200 it does).
  if grep -q "^workspace case: " "$nlog" && grep -q "^\[r0\] workspace case: " "$clog"
  then s=PASS; else s="FAIL (the too-small workspace case did not run both ways)"; fi
  record "cublaslt_ops too-small workspace refused both ways" "$s" "$clog"

  nlog="$LOGS/cublaslt_loop.native.log"; clog="$LOGS/cublaslt_loop.cuda.log"
  timeout 120 "$G/apps/cublaslt_ops.bin" --iters 8 >"$nlog" 2>&1
  ref=$(sed -n 's/^final checksum \([0-9a-f]*\)$/\1/p' "$nlog")
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/apps/cublaslt_ops.bin" --iters 8 >"$clog" 2>&1
  got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$clog")
  if [ -n "$ref" ] && [ "$got" = "$ref" ]; then s=PASS; else s="FAIL (native '$ref', cuda '$got')"; fi
  record "cublaslt_ops loop final checksum native = cuda" "$s" "$clog"
  # Calls of an iteration: tests/integration/cublaslt_ops_test.sh lists them
  # (14: the forward matmul, 12: its heuristic, 31: the update matmul).
  for spec in "rank=0,minibatch=3,calls=14,point=after_execute" "rank=0,minibatch=4,calls=12,point=after_reply" \
              "rank=0,minibatch=5,calls=31,point=after_execute"; do
    log="$LOGS/cublaslt_loop.cuda.chaos.${spec//[^a-z0-9]/_}.log"
    timeout 150 $RUN -n 1 --backend=cuda --timeout=120 --chaos="$spec" -- \
      "$G/apps/cublaslt_ops.bin" --iters 8 >"$log" 2>&1
    got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$log")
    if [ -n "$ref" ] && [ "$got" = "$ref" ] && grep -q "replacement agent for rank" "$log"
    then s=PASS; else s="FAIL (native '$ref', recovered '$got')"; fi
    record "cublaslt_ops loop cuda, agent killed [$spec]" "$s" "$log"
  done
fi
