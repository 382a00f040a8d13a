# GPU section: cuDNN through the cuda backend (sourced by .gpu/run_gpu.sh with
# MODE, G, RUN, LOGS and record; runs for MODE "all" or "cudnn").
#
# tests/apps/cudnn_conv natively and under revenant-run --backend=cuda (the
# agent runs the real libcudnn.so.9; the forward convolution is built with
# the backend API: tensors, convolution, operation, operation graph, engine
# heuristics into engine configs, execution plan, variant pack, execute):
#   1. the convolution passes its CPU reference both ways, and the RESULT lines
#      (the engine chosen, the output's checksum) are bitwise equal;
#   2. --errors: lifecycle and bad input answer the same codes and values
#      (CODE and VALUES lines) natively and under the shim; --errors --after-destroy (destroyed and
#      made-up handles, only defined under Revenant) passes under the shim;
#   3. --legacy (tensor, filter, convolution, activation descriptors): the
#      same codes and values natively and under the shim;
#   4. the --iters loop (input copy, execute, output copy on a stream of the
#      handle) ends with the native final checksum, also when the agent is
#      killed mid-loop and a replacement rebuilds the handle, descriptors,
#      heuristics and plan from the setup log.
#
# tests/apps/cudnn_legacy (the legacy API as PyTorch uses it) likewise:
#   5. --iters 6 (convolution forward, backward data, backward filter, bias +
#      activation forward, batch norm forward training Ex / backward Ex /
#      inference, max pooling, dropout forward, a two-layer LSTM forward in
#      training mode with dropout) passes natively and under the shim, and
#      every RESULT line (each output's checksum over the iterations) and
#      QUERY line (workspace sizes, v7 heuristics, searches' status, RNN
#      weight layout) is bitwise equal;
#   6. --descriptors (pooling, dropout, RNN, RNN data, CTC loss, spatial
#      transformer: create, set, get, destroy, bad input): the same CODE and
#      VALUES lines natively and under the shim; --after-destroy's destroyed
#      and wrong-kind handles answer CUDNN_STATUS_BAD_PARAM;
#   7. the loop killed mid-iteration (in the batch norm, after the LSTM) ends
#      with the native final checksum: the replacement replays the
#      descriptors, the dropout states' initialization and the RNN setup,
#      the snapshot restores the running statistics and both dropout
#      states, and the iteration's computations replay.
if [ "$MODE" = all ] || [ "$MODE" = cudnn ]; then
  echo
  echo "=== cuDNN on the cuda backend"
  if ! ldconfig -p | grep -q "libcudnn.so.9" && [ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ]; then
    d=$(dirname "$(find / -xdev -name 'libcudnn.so.9' 2>/dev/null | head -1)")
    echo "libcudnn.so.9 not on the library path; using $d"
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  fi
  app="$G/apps/cudnn_conv.bin"
  nlog="$LOGS/cudnn_conv.native.log"; clog="$LOGS/cudnn_conv.cuda.log"
  timeout 120 "$app" >"$nlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS cudnn_conv" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cudnn_conv native" "$s" "$nlog"
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$app" >"$clog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS cudnn_conv" "$clog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cudnn_conv revenant --backend=cuda" "$s" "$clog"
  grep "^RESULT " "$nlog" >"$LOGS/cudnn_conv.native.results"
  sed -n 's/^\[r0\] \(RESULT .*\)$/\1/p' "$clog" >"$LOGS/cudnn_conv.cuda.results"
  n=$(wc -l <"$LOGS/cudnn_conv.native.results")
  if [ "$n" -eq 2 ] && diff -q "$LOGS/cudnn_conv.native.results" "$LOGS/cudnn_conv.cuda.results" >/dev/null
  then s=PASS; else s="FAIL ($n native results; diff below)"; fi
  diff "$LOGS/cudnn_conv.native.results" "$LOGS/cudnn_conv.cuda.results" >"$LOGS/cudnn_conv.diff"
  record "cudnn_conv output bitwise native = cuda" "$s" "$LOGS/cudnn_conv.diff"

  nlog="$LOGS/cudnn_errors.native.log"; clog="$LOGS/cudnn_errors.cuda.log"
  timeout 120 "$app" --errors >"$nlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS cudnn_conv errors" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cudnn_conv --errors native" "$s" "$nlog"
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$app" --errors >"$clog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS cudnn_conv errors" "$clog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cudnn_conv --errors revenant --backend=cuda" "$s" "$clog"
  grep "^CODE \|^VALUES " "$nlog" >"$LOGS/cudnn_errors.native.codes"
  sed -n 's/^\[r0\] \(\(CODE\|VALUES\) .*\)$/\1/p' "$clog" >"$LOGS/cudnn_errors.cuda.codes"
  n=$(grep -c "^CODE " "$LOGS/cudnn_errors.native.codes")
  if [ "$n" -eq 30 ] && diff -q "$LOGS/cudnn_errors.native.codes" "$LOGS/cudnn_errors.cuda.codes" >/dev/null
  then s=PASS; else s="FAIL ($n native codes; diff below)"; fi
  diff "$LOGS/cudnn_errors.native.codes" "$LOGS/cudnn_errors.cuda.codes" >"$LOGS/cudnn_errors.diff"
  record "cudnn_conv bad-input codes native = cuda" "$s" "$LOGS/cudnn_errors.diff"
  clog="$LOGS/cudnn_after_destroy.cuda.log"
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$app" --errors --after-destroy >"$clog" 2>&1; rc=$?
  sed -n 's/^\[r0\] CODE \(create_descriptor_null_out\|get_stream_null_out\|destroy_twice\|set_destroyed\|get_destroyed\|finalize_destroyed\|set_destroyed_element\|set_made_up_descriptor\|get_made_up_element\|set_stream_destroyed_handle\|destroy_handle_twice\|execute_destroyed_plan\|set_handle_made_up_element\) \(.*\)$/\1 \2/p' \
    "$clog" >"$LOGS/cudnn_after_destroy.codes"
  # CUDNN_STATUS_BAD_PARAM for each, BAD_PARAM_NULL_POINTER for a null
  # descriptor out-pointer (which cuDNN 9.19 itself dereferences).
  n=$(wc -l <"$LOGS/cudnn_after_destroy.codes")
  bad=$(grep -v '^create_descriptor_null_out 2002$' "$LOGS/cudnn_after_destroy.codes" | grep -vc ' 2000$')
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS cudnn_conv errors" "$clog" && [ "$n" -eq 13 ] && [ "$bad" -eq 0 ]
  then s=PASS; else s="FAIL (rc=$rc, $n cases, $bad unexpected answers)"; fi
  record "cudnn_conv destroyed/made-up handles cuda" "$s" "$clog"

  nlog="$LOGS/cudnn_legacy.native.log"; clog="$LOGS/cudnn_legacy.cuda.log"
  timeout 120 "$app" --legacy >"$nlog" 2>&1
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$app" --legacy >"$clog" 2>&1; rc=$?
  grep "^CODE \|^VALUES " "$nlog" >"$LOGS/cudnn_legacy.native.codes"
  sed -n 's/^\[r0\] \(\(CODE\|VALUES\) .*\)$/\1/p' "$clog" >"$LOGS/cudnn_legacy.cuda.codes"
  n=$(grep -c "^CODE " "$LOGS/cudnn_legacy.native.codes")
  if [ $rc -eq 0 ] && [ "$n" -eq 25 ] && diff -q "$LOGS/cudnn_legacy.native.codes" "$LOGS/cudnn_legacy.cuda.codes" >/dev/null
  then s=PASS; else s="FAIL (rc=$rc, $n native codes; diff below)"; fi
  diff "$LOGS/cudnn_legacy.native.codes" "$LOGS/cudnn_legacy.cuda.codes" >"$LOGS/cudnn_legacy.diff"
  record "cudnn_conv legacy descriptors native = cuda" "$s" "$LOGS/cudnn_legacy.diff"

  nlog="$LOGS/cudnn_loop.native.log"; clog="$LOGS/cudnn_loop.cuda.log"
  timeout 120 "$app" --iters 8 >"$nlog" 2>&1
  ref=$(sed -n 's/^final checksum \([0-9a-f]*\)$/\1/p' "$nlog")
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$app" --iters 8 >"$clog" 2>&1
  got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$clog")
  if [ -n "$ref" ] && [ "$got" = "$ref" ]; then s=PASS; else s="FAIL (native '$ref', cuda '$got')"; fi
  record "cudnn_conv loop final checksum native = cuda" "$s" "$clog"
  # Calls of an iteration: 1 input copy, 2 execute, 3 output copy, 4 synchronize.
  for spec in "rank=0,minibatch=3,calls=2,point=after_execute" "rank=0,minibatch=5,calls=4,point=after_reply"; do
    log="$LOGS/cudnn_loop.cuda.chaos.${spec//[^a-z0-9]/_}.log"
    timeout 150 $RUN -n 1 --backend=cuda --timeout=120 --chaos="$spec" -- "$app" --iters 8 >"$log" 2>&1
    got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$log")
    if [ -n "$ref" ] && [ "$got" = "$ref" ] && grep -q "replacement agent for rank" "$log"
    then s=PASS; else s="FAIL (native '$ref', recovered '$got')"; fi
    record "cudnn_conv loop cuda, agent killed [$spec]" "$s" "$log"
  done

  app="$G/apps/cudnn_legacy.bin"
  nlog="$LOGS/cudnn_legacy_loop.native.log"; clog="$LOGS/cudnn_legacy_loop.cuda.log"
  timeout 180 "$app" --iters 6 >"$nlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS cudnn_legacy$" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cudnn_legacy loop native" "$s" "$nlog"
  timeout 240 $RUN -n 1 --backend=cuda --timeout=200 -- "$app" --iters 6 >"$clog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS cudnn_legacy$" "$clog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "cudnn_legacy loop revenant --backend=cuda" "$s" "$clog"
  grep "^RESULT \|^QUERY " "$nlog" >"$LOGS/cudnn_legacy_loop.native.results"
  sed -n 's/^\[r0\] \(\(RESULT\|QUERY\) .*\)$/\1/p' "$clog" >"$LOGS/cudnn_legacy_loop.cuda.results"
  n=$(grep -c "^RESULT " "$LOGS/cudnn_legacy_loop.native.results")
  if [ "$n" -eq 14 ] && diff -q "$LOGS/cudnn_legacy_loop.native.results" "$LOGS/cudnn_legacy_loop.cuda.results" >/dev/null
  then s=PASS; else s="FAIL ($n native results; diff below)"; fi
  diff "$LOGS/cudnn_legacy_loop.native.results" "$LOGS/cudnn_legacy_loop.cuda.results" >"$LOGS/cudnn_legacy_loop.diff"
  record "cudnn_legacy outputs and queries bitwise native = cuda" "$s" "$LOGS/cudnn_legacy_loop.diff"

  nlog="$LOGS/cudnn_legacy_desc.native.log"; clog="$LOGS/cudnn_legacy_desc.cuda.log"
  timeout 120 "$app" --descriptors >"$nlog" 2>&1
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$app" --descriptors >"$clog" 2>&1; rc=$?
  grep "^CODE \|^VALUES " "$nlog" >"$LOGS/cudnn_legacy_desc.native.codes"
  sed -n 's/^\[r0\] \(\(CODE\|VALUES\) .*\)$/\1/p' "$clog" >"$LOGS/cudnn_legacy_desc.cuda.codes"
  n=$(grep -c "^CODE " "$LOGS/cudnn_legacy_desc.native.codes")
  if [ $rc -eq 0 ] && [ "$n" -eq 36 ] && diff -q "$LOGS/cudnn_legacy_desc.native.codes" "$LOGS/cudnn_legacy_desc.cuda.codes" >/dev/null
  then s=PASS; else s="FAIL (rc=$rc, $n native codes; diff below)"; fi
  diff "$LOGS/cudnn_legacy_desc.native.codes" "$LOGS/cudnn_legacy_desc.cuda.codes" >"$LOGS/cudnn_legacy_desc.diff"
  record "cudnn_legacy descriptors native = cuda" "$s" "$LOGS/cudnn_legacy_desc.diff"
  clog="$LOGS/cudnn_legacy_after_destroy.cuda.log"
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$app" --descriptors --after-destroy >"$clog" 2>&1; rc=$?
  n=$(sed -n 's/^\[r0\] CODE \(pooling_destroy_twice\|pooling_set_destroyed\|rnn_data_set_destroyed\|rnn_set_pooling_as_dropout\|ctc_destroy_spatial\|pooling_get_null_out\) 2000$/x/p' "$clog" | wc -l)
  if [ $rc -eq 0 ] && [ "$n" -eq 6 ]; then s=PASS; else s="FAIL (rc=$rc, $n of 6 answered CUDNN_STATUS_BAD_PARAM)"; fi
  record "cudnn_legacy destroyed/wrong-kind handles cuda" "$s" "$clog"

  ref=$(sed -n 's/^final checksum \([0-9a-f]*\)$/\1/p' "$LOGS/cudnn_legacy_loop.native.log")
  got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$LOGS/cudnn_legacy_loop.cuda.log")
  if [ -n "$ref" ] && [ "$got" = "$ref" ]; then s=PASS; else s="FAIL (native '$ref', cuda '$got')"; fi
  record "cudnn_legacy loop final checksum native = cuda" "$s" "$LOGS/cudnn_legacy_loop.cuda.log"
  # Calls of an iteration: 1 input copy, 2-4 the convolutions, 5 bias +
  # activation, 6 batch norm training, 7 backward, 8 inference, 9 pooling,
  # 10 dropout, 11 the LSTM's input copy, 12 the LSTM, then a copy and a
  # synchronize per output.
  for spec in "rank=0,minibatch=2,calls=6,point=after_execute" "rank=0,minibatch=4,calls=12,point=after_reply"; do
    log="$LOGS/cudnn_legacy_loop.cuda.chaos.${spec//[^a-z0-9]/_}.log"
    timeout 240 $RUN -n 1 --backend=cuda --timeout=200 --chaos="$spec" -- "$app" --iters 6 >"$log" 2>&1
    got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$log")
    if [ -n "$ref" ] && [ "$got" = "$ref" ] && grep -q "replacement agent for rank" "$log"
    then s=PASS; else s="FAIL (native '$ref', recovered '$got')"; fi
    record "cudnn_legacy loop cuda, agent killed [$spec]" "$s" "$log"
  done
fi
