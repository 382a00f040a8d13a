# GPU section: boundary snapshots and spare agents on the cuda backend
# (sourced by .gpu/run_gpu.sh with MODE, G, RUN, LOGS and the helpers record,
# native, revrun, checksum, now, calc; runs for MODE "all" or "snapshots").
#
#   1. a fault-free 1-rank train_mlp (200 iterations) under the cuda backend
#      takes a snapshot at every boundary (auto: 1 rank) and ends with the
#      native checksum; the agent's cost per boundary is printed, also for a
#      larger model (--hidden 4096);
#   1b. hidden 4096 with --snapshot_every=10, asynchronous vs synchronous
#      snapshots: the default (no spare, each file made ahead, 1.00x live at
#      exit), with the spare file kept (--snapshot_keep_spare=true) and with
#      no file made ahead (--snapshot_spare_ahead=false: each made without
#      its pages): equal checksums; per-snapshot cost and memory printed;
#   2. killed past the first boundary (minibatch 6, 8 calls in) with the
#      default collectives (real NCCL), then with --collectives=gloo: the
#      replacement restores the snapshot of minibatch 6, replays, and the
#      final checksum equals the native run's; the timeline is printed;
#   3. killed at the boundary itself (snapshot renamed, journal boundary not
#      recorded): recovered from the previous boundary's snapshot; killed
#      with an asynchronous snapshot in flight / finished but not renamed
#      (in flight also with the spare kept): recovered from the one before;
#   4. a corrupted snapshot: refused with a data-loss error, the application
#      fails cleanly, the job ends well within its bound;
#   5. --spares 1: the same kill, the rank goes to the spare (CUDA context
#      already up); the time from the replacement's start to its taking the
#      connection is printed for both paths;
#   6. 2 ranks on the GPU with Gloo staging, --snapshots=on, both killed at
#      once: each replacement restores its own snapshot, checksums equal.
if [ "$MODE" = all ] || [ "$MODE" = snapshots ]; then
  echo
  echo "=== boundary snapshots and spares (1 rank, cuda backend)"
  export NCCL_NVLS_ENABLE=0
  iters=200
  snlog="$LOGS/snap.native.log"
  native 1 "$snlog" "$G/apps/train_mlp.bin" --iters $iters; rc=$?
  sref=$(checksum "$snlog")
  echo "   native checksum ($iters iterations): ${sref:-none} (rc=$rc)"

  # 1. Fault-free, snapshot cost per boundary.
  for hidden in 128 4096; do
    log="$LOGS/snap.faultfree.h$hidden.log"
    timeout 200 $RUN -n 1 --backend=cuda --timeout=180 -- "$G/apps/train_mlp.bin" \
      --iters $iters --hidden $hidden >"$log" 2>&1; rc=$?
    grep -E "snapshot of minibatch [12]:|snapshots at exit|snapshot memory at exit" "$log" | head -4 | sed 's/^/   | /'
    grep -E "asynchronous snapshot [0-9]+ \(" "$log" | head -3 | sed 's/^/   | /'
    if [ "$hidden" = 128 ]; then
      got=$(checksum "$log")
      if [ $rc -eq 0 ] && [ -n "$sref" ] && [ "$got" = "$sref" ] &&
         grep -q "snapshots at exit" "$log"; then s=PASS; else s="FAIL (rc=$rc, $got vs $sref)"; fi
      record "snapshots: fault-free 1 rank = native" "$s" "$log"
    else
      if [ $rc -eq 0 ] && grep -q "snapshots at exit" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
      record "snapshots: cost, hidden 4096" "$s" "$log"
    fi
  done

  # 1b. Asynchronous snapshots at every 10th step (hidden 4096): the cost of
  # each on the executor (critical path) and to the finished file, the
  # files' reuse and memory; the checksum must equal a run with synchronous
  # snapshots only.
  for arm in async sync spare lean; do
    log="$LOGS/snap.every10.$arm.log"
    flags="--snapshot_every=10"; [ "$arm" = sync ] && flags="$flags --snapshot_async=false"
    [ "$arm" = spare ] && flags="$flags --snapshot_keep_spare=true"
    [ "$arm" = lean ] && flags="$flags --snapshot_spare_ahead=false"
    t0=$(now)
    timeout 200 $RUN -n 1 --backend=cuda --timeout=180 $flags -- "$G/apps/train_mlp.bin" \
      --iters $iters --hidden 4096 >"$log" 2>&1; rc=$?
    el=$(calc "$(now) - $t0")
    printf '   hidden 4096, %s: rc=%s, %.2f s, checksum %s\n' "$flags" "$rc" "$el" "$(checksum "$log")"
    grep -E "snapshots at exit|snapshot memory at exit|snapshot files without the spare|host memory at exit|journal at exit" "$log" | head -5 | sed 's/^/   | /'
    grep -E "asynchronous snapshot [0-9]+ \(|snapshot of minibatch [12]:" "$log" | head -4 | sed 's/^/   | /'
  done
  a=$(checksum "$LOGS/snap.every10.async.log"); b=$(checksum "$LOGS/snap.every10.sync.log")
  if [ -n "$a" ] && [ "$a" = "$b" ] && grep -q "asynchronous snapshot [0-9]* (" "$LOGS/snap.every10.async.log"; then
    s=PASS; else s="FAIL ($a vs $b)"; fi
  record "snapshots: asynchronous = synchronous (hidden 4096)" "$s" "$LOGS/snap.every10.async.log"
  # The default: 1.00x the live bytes at exit, the files made ahead; with
  # the spare: 2.00x, two files; with nothing made ahead: a new file per
  # snapshot made without its pages, 1.00x. The same checksum each.
  c=$(checksum "$LOGS/snap.every10.async.log")
  if [ -n "$c" ] && [ "$c" = "$b" ] &&
     grep -q "snapshot memory at exit.*(1.00x live)" "$LOGS/snap.every10.async.log" &&
     grep -q "snapshot files without the spare.*[( ][1-9][0-9]* next files made ahead" "$LOGS/snap.every10.async.log"; then
    s=PASS; else s="FAIL ($c vs $b)"; fi
  record "snapshots: default 1x live, files made ahead = synchronous (hidden 4096)" "$s" "$LOGS/snap.every10.async.log"
  c=$(checksum "$LOGS/snap.every10.spare.log")
  if [ -n "$c" ] && [ "$c" = "$b" ] &&
     grep -q "snapshot memory at exit.*(2.00x live)" "$LOGS/snap.every10.spare.log"; then
    s=PASS; else s="FAIL ($c vs $b)"; fi
  record "snapshots: the spare kept, 2x live = synchronous (hidden 4096)" "$s" "$LOGS/snap.every10.spare.log"
  c=$(checksum "$LOGS/snap.every10.lean.log")
  if [ -n "$c" ] && [ "$c" = "$b" ] &&
     grep -q "snapshot memory at exit.*(1.00x live).*made without their pages" "$LOGS/snap.every10.lean.log"; then
    s=PASS; else s="FAIL ($c vs $b)"; fi
  record "snapshots: nothing made ahead, 1x live = synchronous (hidden 4096)" "$s" "$LOGS/snap.every10.lean.log"

  # 2.-3. Kills past the first boundary and at the boundary.
  snap_kill() {  # file-tag name extra-flags chaos
    local file=$1 tag=$2 extra=$3 spec=$4 log="$LOGS/snap.$1.log" t0 el got
    t0=$(now)
    REVENANT_COLLECTIVE_TIMEOUT_S=20 timeout 200 $RUN -n 1 --backend=cuda $extra --timeout=180 \
      --chaos="rank=0,$spec" -- "$G/apps/train_mlp.bin" --iters $iters >"$log" 2>&1; rc=$?
    el=$(calc "$(now) - $t0")
    got=$(checksum "$log")
    printf '   %s [%s %s]: rc=%s after %.1f s, checksum %s (native %s)\n' "$tag" "$extra" "$spec" \
      "$rc" "$el" "${got:-none}" "${sref:-none}"
    grep -A14 "recovery timeline" "$log" | grep "revenant-run\]  " | sed 's/^/   | /'
    grep -E "cannot recover|refus|diverged" "$log" | head -4 | sed 's/^/   | /'
    if [ $rc -eq 0 ] && [ -n "$sref" ] && [ "$got" = "$sref" ] &&
       grep -q "replacement_snapshot_loaded" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "snapshots: $tag" "$s" "$log"
  }
  snap_kill kill6_nccl "kill minibatch 6 (nccl)" "" "minibatch=6,calls=8"
  snap_kill kill6_gloo "kill minibatch 6 (gloo)" "--collectives=gloo" "minibatch=6,calls=8"
  snap_kill boundary6 "kill at boundary 6 (after_snapshot)" "" "minibatch=6,point=after_snapshot"
  snap_kill kill6_spare "kill minibatch 6, spare (nccl)" "--spares 1" "minibatch=6,calls=8"
  # Killed while the 3rd asynchronous snapshot's copies are queued, and once
  # they completed but before the file is renamed: recovered from the one
  # before it.
  snap_kill inflight3 "kill, async snapshot 3 in flight" "--snapshot_every=4" "minibatch=3,point=snapshot_inflight"
  snap_kill finish3 "kill, async snapshot 3 not renamed" "--snapshot_every=4" "minibatch=3,point=snapshot_finish"
  snap_kill inflight3_spare "kill, async snapshot 3 in flight, the spare kept" "--snapshot_every=4 --snapshot_keep_spare=true" "minibatch=3,point=snapshot_inflight"
  for tag in kill6_nccl kill6_spare; do
    f="$LOGS/snap.$tag.log"
    st=$(grep -o '+ *[0-9.]*  rank 0  replacement_started' "$f" | head -1 | awk '{print $1}')
    rd=$(grep -o '+ *[0-9.]*  rank 0  replacement_replay_started' "$f" | head -1 | awk '{print $1}')
    path=$(grep -o 'replacement_started *[a-z ]*,' "$f" | head -1 | sed 's/replacement_started *//')
    echo "   $tag: replacement started at ${st:-?} ms, took the connection at ${rd:-?} ms ($path)"
  done

  # 2 ranks on the one GPU (Gloo staging), snapshots on, both killed at once:
  # each replacement restores its own snapshot and they replay together.
  log="$LOGS/snap.both2.log"
  timeout 200 $RUN -n 2 --backend=cuda --collectives=gloo --gpus=1 --timeout=180 \
    -- "$G/apps/train_mlp.bin" --iters 40 >"$LOGS/snap.both2.ref.log" 2>&1
  ref2=$(checksum "$LOGS/snap.both2.ref.log")
  REVENANT_COLLECTIVE_TIMEOUT_S=20 timeout 200 $RUN -n 2 --backend=cuda --collectives=gloo \
    --gpus=1 --snapshots=on --timeout=180 \
    --chaos="rank=0,minibatch=5,calls=8;rank=1,minibatch=5,calls=8" \
    -- "$G/apps/train_mlp.bin" --iters 40 >"$log" 2>&1; rc=$?
  got=$(checksum "$log")
  printf '   2 ranks (gloo, 1 GPU) killed at once, snapshots on: rc=%s, checksum %s (fault-free %s)\n' \
    "$rc" "${got:-none}" "${ref2:-none}"
  grep -A16 "recovery timeline" "$log" | grep "revenant-run\]  " | sed 's/^/   | /'
  if [ $rc -eq 0 ] && [ -n "$ref2" ] && [ "$got" = "$ref2" ] &&
     [ "$(grep -c "^\[r[01]\] final checksum $ref2\$" "$log")" -eq 2 ] &&
     grep -q "every member restored minibatch 5" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "snapshots: 2 ranks killed at once (gloo)" "$s" "$log"

  # 4. A corrupt snapshot is refused.
  log="$LOGS/snap.corrupt.log"
  t0=$(now)
  REVENANT_COLLECTIVE_TIMEOUT_S=20 timeout 200 $RUN -n 1 --backend=cuda --timeout=180 \
    --recovery_timeout=30 --chaos="rank=0,minibatch=6,point=after_boundary,corrupt_snapshot=1" \
    -- "$G/apps/train_mlp.bin" --iters $iters >"$log" 2>&1; rc=$?
  el=$(calc "$(now) - $t0")
  printf '   corrupt snapshot: rc=%s after %.1f s\n' "$rc" "$el"
  grep -E "cannot recover|is corrupt|DevicesUnavailable" "$log" | head -3 | sed 's/^/   | /'
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "DATA_LOSS: .*snapshot .* is corrupt" "$log" &&
     ! grep -q "PASS train_mlp" "$log" && [ "$(calc "($el < 100) ? 1 : 0")" = 1 ]; then
    s=PASS; else s="FAIL (rc=$rc)"; fi
  record "snapshots: corrupt snapshot refused" "$s" "$log"
fi
