# GPU section: conformance programs (features public CUDA and NCCL programs
# use; sourced by .gpu/run_gpu.sh with MODE, G, RUN, LOGS, record, native,
# revrun, checksum; runs for MODE "all" or "conformance"; MODE "answered":
# idle_answers and answered_calls only).
#
# Each program natively and under `revenant-run -n 1 --backend=cuda`; both
# must print "PASS <name>", and where the program prints a final checksum
# (nccl_mem, mapped_host) or the flags of its host memory (mapped_host
# "hostflags" lines) the two runs must print the same. Then each under the
# cuda backend with its agent killed (a chaos kill where the program has
# state): it must recover ("recovered: replayed") and pass, with the native
# checksum.
#   nccl_mem     ncclMemAlloc/ncclMemFree buffers, all-reduce, broadcast
#   mapped_host  cudaHostAlloc(mapped), cudaHostRegister(mapped),
#                cudaHostGetDevicePointer/GetFlags, zero-copy kernels
#   func_stubs   per-function calls on overloaded/templated kernels' stubs
#   rdc_link     nvcc -rdc=true: cross-unit device code and variables
#   graph_nodes  graph memcpy nodes from cudaMemcpy3DParms, cudaGraphAddNode
#                memcpy, memset node, cudaMallocAsync/cudaFreeAsync in capture;
#                child graph nodes, event record/wait nodes, a while-loop
#                conditional node (cudaGraphSetConditional in a kernel; the
#                "conditional nodes: a while loop" line must be printed)
#   vector_add_static  -cudart static: passes natively, refused under the
#                shim with a message naming the static runtime
#   pinned_async killed between journaling a copy into pinned memory and
#                running it: the replacement must run it
#   idle_answers, answered_calls  calls the shim answers or sends without
#                waiting (synchronizations of idle streams, events, NCCL
#                async errors, stream capture modes) against native
if [ "$MODE" = all ] || [ "$MODE" = conformance ] || [ "$MODE" = answered ]; then
  echo
  echo "=== conformance (ncclMemAlloc, mapped host memory, kernel stubs, -rdc, graph nodes, -cudart static)"
  conform_pair() {  # NAME [ARGS...]: native and cuda backend, compared
    local name=$1 nlog="$LOGS/conform.$1.native.log" rlog="$LOGS/conform.$1.cuda.log" s rc a b
    shift
    native 1 "$nlog" "$G/apps/$name.bin" "$@"; rc=$?
    if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS $name" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "$name native" "$s" "$nlog"
    revrun 1 "$rlog" "$G/apps/$name.bin" "$@"; rc=$?
    if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS $name" "$rlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "$name revenant --backend=cuda" "$s" "$rlog"
    if [ "$s" != PASS ]; then
      grep -E "not supported|refused| E\]| W\]|FAIL" "$rlog" | head -n 8 | sed 's/^/   | /'
    fi
    for key in "final checksum" "hostflags" "props checksum"; do
      a=$(grep "^\[r0\] $key" "$nlog" | sed 's/^\[r0\] //')
      b=$(grep "^\[r0\] $key" "$rlog" | sed 's/^\[r0\] //')
      [ -z "$a" ] && continue
      if [ "$a" = "$b" ]; then s=PASS; else s="FAIL (native: $(echo $a), revenant: $(echo $b))"; fi
      record "$name $key equal native" "$s" "$rlog"
    done
  }
  conform_kill() {  # NAME SPEC [ARGS...]: cuda backend, agent killed, recovered
    local name=$1 spec=$2 log="$LOGS/conform.$1.cuda.kill.log" s rc ref got
    shift 2
    timeout 200 $RUN --chaos="$spec" -n 1 --backend=cuda --timeout=180 -- "$G/apps/$name.bin" "$@" \
      >"$log" 2>&1; rc=$?
    ref=$(checksum "$LOGS/conform.$name.native.log")
    got=$(checksum "$log")
    if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS $name" "$log" && grep -q "recovered: replayed" "$log" &&
       [ "$ref" = "$got" ]; then s=PASS; else s="FAIL (rc=$rc, checksum ${got:-none} vs ${ref:-none})"; fi
    record "$name cuda, agent killed ($spec)" "$s" "$log"
    grep -E "chaos: killing|recovered: replayed" "$log" | head -n 2 | sed 's/^/   | /'
  }
  if [ "$MODE" = answered ]; then
    conform_pair idle_answers
    conform_pair answered_calls
  else
    # What the program learns about its device: every cudaDeviceProp field and
    # device attribute equal to the native run's (the differing lines shown).
    conform_pair device_props
    diff <(grep -E "^\[r0\] (prop|attr|runtime|driver|device)" "$LOGS/conform.device_props.native.log") \
         <(grep -E "^\[r0\] (prop|attr|runtime|driver|device)" "$LOGS/conform.device_props.cuda.log") |
      head -n 20 | sed 's/^/   | /'
    conform_pair nccl_mem
    conform_kill nccl_mem "rank=0,minibatch=6,calls=3"
    conform_kill nccl_mem "rank=0,calls=20"
    conform_pair mapped_host
    conform_pair idle_answers
    conform_pair answered_calls
    conform_kill mapped_host "rank=0,calls=13"
    conform_kill mapped_host "rank=0,minibatch=5,calls=2"
    conform_pair func_stubs
    conform_kill func_stubs "rank=0,calls=44,point=after_execute"
    conform_pair rdc_link
    conform_kill rdc_link "rank=0,calls=6"
    conform_pair graph_nodes
    # The conditional node's loop must have run natively and under the shim.
    for log in "$LOGS/conform.graph_nodes.native.log" "$LOGS/conform.graph_nodes.cuda.log"; do
      if grep -q "^\[r0\] conditional nodes: a while loop" "$log"; then s=PASS; else s=FAIL; fi
      record "graph_nodes while-loop conditional node ran ($(basename "$log" .log))" "$s" "$log"
    done
    conform_kill graph_nodes "rank=0,calls=25"
    conform_kill graph_nodes "rank=0,minibatch=4,calls=3"
    # Killed while the second loop's graphs are built (event record node,
    # child graph node, the conditional node run but not journaled, the body's
    # cudaGraphSetConditional kernel node) and at the while loop's launches
    # (the same requests as //tests/integration:graph_nodes_recovery_test on
    # the host backend). The replacement gets the conditional handle from the
    # runtime again: a value other than the journaled one shows as a replay
    # divergence and, in the loop's kernels, as a wrong checksum.
    conform_kill graph_nodes "rank=0,calls=129"
    conform_kill graph_nodes "rank=0,calls=131,point=after_execute"
    conform_kill graph_nodes "rank=0,calls=138,point=after_execute"
    conform_kill graph_nodes "rank=0,calls=142"
    conform_kill graph_nodes "rank=0,calls=153,point=after_execute"
    conform_kill graph_nodes "rank=0,calls=167"

    log="$LOGS/conform.vector_add_static.native.log"
    timeout 120 "$G/apps/vector_add_static.bin" >"$log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "^PASS vector_add" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "vector_add_static native" "$s" "$log"
    log="$LOGS/conform.vector_add_static.cuda.log"
    revrun 1 "$log" "$G/apps/vector_add_static.bin"; rc=$?
    if [ $rc -ne 0 ] && grep -q "is linked with the static CUDA runtime" "$log" &&
       ! grep -q "PASS vector_add" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "vector_add_static refused under the shim" "$s" "$log"
    grep -o "linked with the static CUDA runtime[^.]*" "$log" | head -n 1 | sed 's/^/   | /'

    log="$LOGS/conform.pinned_async.cuda.kill8.log"
    timeout 200 $RUN --chaos="rank=0,calls=8" -n 1 --backend=cuda --timeout=180 -- \
      "$G/apps/pinned_async.bin" >"$log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS pinned_async" "$log" && grep -q "recovered: replayed" "$log"
    then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "pinned_async cuda, killed before a journaled copy ran" "$s" "$log"
  fi
fi
