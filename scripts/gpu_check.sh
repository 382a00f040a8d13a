#!/bin/bash
# Builds everything a GPU run needs and packs it into .gpu/ (git-ignored) with
# its runner, .gpu/run_gpu.sh, which runs THERE (no Bazel):
#
#   scripts/gpu_check.sh            # here: build + pack
#   bash .gpu/run_gpu.sh            # on the GPU machine (carry .gpu, or
#                                   # .gpu.tar.gz: tar -xzf .gpu.tar.gz first)
#   bash .gpu/run_gpu.sh nccl       # only the NCCL section (below)
#   bash .gpu/run_gpu.sh bench      # only the shim_bench rounds
#   bash .gpu/run_gpu.sh hostmem    # only bench/host_memory_bench (native facts)
#   bash .gpu/run_gpu.sh backend    # only the cuda backend's GPU test and figures
#   bash .gpu/run_gpu.sh launchpath # only bench/launch_path_bench, then train_mlp's
#                                   # time per call natively and under the shim
#   bash .gpu/run_gpu.sh MODE       # only the sections of scripts/gpu/ that run for MODE
#   GPU_LOGS_TGZ=$OUT/logs.tgz bash .gpu/run_gpu.sh MODE
#                                   # the logs packed into one file at the end
#   bash .gpu/run_gpu.sh cublas     # e.g. only cuBLAS (scripts/gpu/cublas.sh)
#   bash .gpu/run_gpu.sh cudnn      # only cuDNN (scripts/gpu/cudnn.sh)
#
# The runner executes every tests/apps program natively and under
# `revenant-run --backend=cuda`, the integration programs under the cuda
# backend, the cuda backend's GPU test (a second agent gets the same device
# addresses), and the benchmarks natively and under the shim with a ratio
# table; it prints PASS/FAIL per item and a summary.
#
# NCCL section (real NCCL through the cuda backend; NCCL_NVLS_ENABLE=0):
# train_mlp with 1 rank natively and under revenant-run (final checksums
# equal), collectives_all, nccl_bench (all-reduce bandwidth/latency) and the
# train_mlp step time, native vs revenant in the same run; with 2 GPUs the
# same with 2 ranks plus a chaos kill (the job must end, bounded, not hang).
# Several ranks over real NCCL on the one GPU (an NCCL_HOSTID each) and
# their recovery: scripts/gpu/nccl_multi.sh (bash .gpu/run_gpu.sh nccl_multi).
# The performance table of docs/performance.md in three device calls:
# bash .gpu/run_gpu.sh perf1, perf2, perf3 (scripts/gpu/perf.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

APPS="vector_add streams_events pinned_async callbacks graphs multithread errors mempool runtime_names"
PROGRAMS="async_launch agent_death maps_probe replay_unsafe symbol_loop upload_loop"

targets=(
  //tools:revenant-run //agent:revenant-agent //agent:revenant-agent-testing //shim:librevenant_shim.so
  //tests/apps:all_apps
  //tests/integration:async_launch //tests/integration:agent_death //tests/integration:maps_probe
  //tests/integration:replay_unsafe //tests/integration:symbol_loop //tests/integration:upload_loop
  //agent/backends/cuda:cuda_backend_gpu_test //agent/backends/cuda:gpu_test_kernels
  //agent/backends/cuda:cuda_backend_test
  //bench:shim_bench //bench:nccl_bench //bench:cpu_pairs //bench:host_memory_bench //bench:launch_path_bench
  //bench:map_piece_bench
  //tests/apps:train_mlp //tests/apps:collectives_all //tests/apps:collectives_bad
  //tests/apps:cublas_ops //tests/apps:driver_api //tools:librevenant_probe.so
  //tests/apps:cublaslt_ops //tests/apps:nccl_group_sim //tests/apps:cudnn_conv
  //tests/apps:cudnn_legacy //tests/apps:conform_apps //tests/apps:vector_add_static
  //tests/apps:answered_calls
)
bazel build "${targets[@]}"
bin="$(bazel info bazel-bin 2>/dev/null)"

out="$root/.gpu"
rm -rf "$out"
mkdir -p "$out/apps" "$out/lib" "$out/bench"
# Both agents: revenant-run starts the testing variant for a job with --chaos
# or a measurement or test knob set, the product agent otherwise (both next to
# it; docs/design.md, "The testing variant").
cp "$bin/tools/revenant-run" "$bin/agent/revenant-agent" "$bin/agent/revenant-agent-testing" \
  "$bin/shim/librevenant_shim.so" "$out/"
for a in $APPS; do cp "$bin/tests/apps/$a.bin" "$out/apps/"; done
for p in $PROGRAMS; do cp "$bin/tests/integration/$p.bin" "$out/apps/"; done
cp "$root/tests/integration/agent_death_test.sh" "$root/tests/integration/recovery_train_test.sh" \
  "$root/tests/integration/recovery_hold_changed_test.sh" "$out/"
cp "$bin/agent/backends/cuda/cuda_backend_gpu_test" "$bin/agent/backends/cuda/gpu_test_kernels.fatbin" "$out/"
cp "$bin/agent/backends/cuda/cuda_backend_test" "$out/"
cp "$bin/bench/shim_bench.bin" "$bin/bench/nccl_bench.bin" "$bin/bench/cpu_pairs" "$bin/bench/map_piece_bench" \
  "$bin/bench/host_memory_bench.bin" "$bin/bench/launch_path_bench.bin" "$root/bench/compare.sh" \
  "$root/bench/journal_step.sh" "$out/bench/"
cp "$bin/tests/apps/train_mlp.bin" "$bin/tests/apps/collectives_all.bin" \
  "$bin/tests/apps/collectives_bad.bin" "$bin/tests/apps/cublas_ops.bin" \
  "$bin/tests/apps/driver_api.bin" "$bin/tests/apps/cublaslt_ops.bin" \
  "$bin/tests/apps/nccl_group_sim.bin" "$bin/tests/apps/cudnn_conv.bin" \
  "$bin/tests/apps/cudnn_legacy.bin" "$out/apps/"
# Conformance programs (scripts/gpu/conformance.sh).
for a in nccl_mem mapped_host func_stubs rdc_link graph_nodes vector_add_static device_props \
         idle_answers answered_calls; do
  cp "$bin/tests/apps/$a.bin" "$out/apps/"
done
mkdir -p "$out/sections" "$out/torch"
cp "$root"/tests/torch/*.py "$out/torch/"
cp "$bin/tools/librevenant_probe.so" "$out/"
cp "$root"/scripts/gpu/*.sh "$out/sections/" 2>/dev/null || true
chmod -R u+w "$out"

# Shared libraries the GPU machine may lack: everything our binaries import
# except glibc itself and the CUDA runtime (the GPU machine has its own).
for f in "$out/revenant-run" "$out/revenant-agent" "$out/revenant-agent-testing" "$out/librevenant_shim.so" \
         "$out/cuda_backend_gpu_test" "$out/cuda_backend_test"; do
  ldd "$f" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    # libnccl (over 200 MB) too: the GPU machines have NCCL 2.28.
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcudart.so*|libnccl.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done

# The agent under the cuda backend, for scripts that start agents themselves.
cat > "$out/agent_cuda.sh" <<'WRAP'
#!/bin/bash
exec "$(dirname "$0")/revenant-agent" --backend=cuda "$@"
WRAP
chmod +x "$out/agent_cuda.sh"

cat > "$out/run_gpu.sh" <<'RUNNER'
#!/bin/bash
# Runs on the GPU machine: bash .gpu/run_gpu.sh
set -u
G="$(cd "$(dirname "$0")" && pwd)"
export LD_LIBRARY_PATH="$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LOGS="${OUT:-/tmp}/gpu_logs"
mkdir -p "$LOGS"
APPS="__APPS__"
# The agents next to revenant-run: revenant-agent, or revenant-agent-testing
# for the chaos kills and the measurement knobs (revenant-run picks it).
RUN="$G/revenant-run --shim=$G/librevenant_shim.so"
results=()
record() {  # name status log
  results+=("$(printf '%-40s %s' "$1" "$2")")
  echo "== $1: $2"
  if [ "$2" != PASS ]; then tail -n 25 "$3" | sed 's/^/   | /'; fi
}
MODE="${1:-all}"
echo "machine: $(hostname) $(date -u +%Y-%m-%dT%H:%M:%SZ) mode $MODE"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -8
ldd "$G/revenant-agent" | grep -E "not found|cudart|nccl" | sed 's/^/ldd: /'
if [ "$MODE" = all ]; then

for app in $APPS; do
  log="$LOGS/$app.native.log"
  timeout 120 "$G/apps/$app.bin" >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS $app" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "$app native" "$s" "$log"
  log="$LOGS/$app.cuda.log"
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/apps/$app.bin" >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS $app" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "$app revenant --backend=cuda" "$s" "$log"
done

log="$LOGS/async_launch.cuda.log"
timeout 120 $RUN -n 1 --backend=cuda --timeout=90 -- "$G/apps/async_launch.bin" >"$log" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "PASS async_launch" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
record "async_launch revenant --backend=cuda" "$s" "$log"
log="$LOGS/maps_probe.cuda.log"
timeout 120 $RUN -n 1 --backend=cuda --timeout=90 -- "$G/apps/maps_probe.bin" >"$log" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "libcuda mapped: no" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
record "maps_probe (no libcuda in app) cuda" "$s" "$log"
log="$LOGS/agent_death.cuda.log"
timeout 120 bash "$G/agent_death_test.sh" "$G/agent_cuda.sh" "$G/librevenant_shim.so" \
  "$G/apps/agent_death.bin" /nonexistent >"$log" 2>&1; rc=$?
if [ $rc -eq 0 ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
record "agent_death (cuda agent killed)" "$s" "$log"

fi  # MODE = all

# The cuda backend's own GPU checks (also alone: bash .gpu/run_gpu.sh
# backend; perf1 runs them first).
if [ "$MODE" = all ] || [ "$MODE" = backend ]; then
log="$LOGS/cuda_backend_gpu_test.log"
timeout 240 "$G/cuda_backend_gpu_test" --fatbin="$G/gpu_test_kernels.fatbin" >"$log" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^PASS cuda_backend_gpu_test" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
record "cuda_backend_gpu_test (same addresses)" "$s" "$log"
grep -E "^ADDR|same device|CREATE_FAILED" "$log" | head -20 | sed 's/^/   | /'
log="$LOGS/cuda_backend_measure.log"
timeout 120 "$G/cuda_backend_gpu_test" --measure --fatbin="$G/gpu_test_kernels.fatbin" >"$log" 2>&1; rc=$?
if [ $rc -eq 0 ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
record "backend-only figures (no shim)" "$s" "$log"
sed 's/^/   | /' "$log"

fi  # MODE = all or backend

# The benchmark rounds (also alone: bash .gpu/run_gpu.sh bench).
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
# Two rounds (native, then under the shim), to show run-to-run spread.
for round in 1 2; do
  nlog="$LOGS/bench.native.$round.log"; slog="$LOGS/bench.cuda.$round.log"
  timeout 200 "$G/bench/shim_bench.bin" >"$nlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS shim_bench" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "bench native (round $round)" "$s" "$nlog"
  timeout 260 $RUN -n 1 --backend=cuda --timeout=240 -- "$G/bench/shim_bench.bin" >"$slog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "PASS shim_bench" "$slog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "bench revenant --backend=cuda (round $round)" "$s" "$slog"
  echo
  echo "=== benchmark round $round (ratio = revenant / native, same machine, same run)"
  bash "$G/bench/compare.sh" "$nlog" "$slog" | tee "$LOGS/bench_table.$round.txt"
done
# Rounds 3 and 4 against the round-2 native run, with other revenant-run
# options: bench_round N TAG TITLE OPTIONS...
bench_round() {
  local n=$1 tag=$2 title=$3; shift 3
  local slog="$LOGS/bench.cuda.$tag.log" rc s
  timeout 260 $RUN "$@" -n 1 --backend=cuda --timeout=240 -- "$G/bench/shim_bench.bin" >"$slog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "PASS shim_bench" "$slog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "bench revenant --backend=cuda $*" "$s" "$slog"
  echo
  echo "=== benchmark round $n: $title (ratio against round 2 native)"
  bash "$G/bench/compare.sh" "$LOGS/bench.native.2.log" "$slog" | tee "$LOGS/bench_table.$n.txt"
}
# Round 3: agent journal off (no recovery possible in this mode; for
# attributing costs only). revenant-run passes --journal to every agent it
# starts (a wrapper adding --journal=false to the agent's flags is overridden).
bench_round 3 nojournal "agent --journal=false" --journal=false
# Round 4: journal on, boundary snapshots off (the one-rank default keeps
# every upload since the last snapshot, so each 256 MiB upload needs new
# capture memory; with a boundary per step, as in any job of several ranks,
# the capture files are reused: docs/journal_format.md, "Captured uploads").
bench_round 4 nosnap "journal on, --snapshots=off" --snapshots=off
# Round 5: a longer upload loop (BENCH_H2D_ITERS, default 24) natively and
# under the shim with the default snapshots: the first uploads make the
# capture files that the later ones fill again (round 2's median of 8 lands
# on one that made a file); every iteration is printed.
h2d_iters=${BENCH_H2D_ITERS:-24}
nlog="$LOGS/bench.native.h2d.log"; slog="$LOGS/bench.cuda.h2d.log"
timeout 200 "$G/bench/shim_bench.bin" --h2d_iters "$h2d_iters" >"$nlog" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^PASS shim_bench" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
record "bench native --h2d_iters $h2d_iters" "$s" "$nlog"
timeout 260 $RUN -n 1 --backend=cuda --timeout=240 -- "$G/bench/shim_bench.bin" --h2d_iters "$h2d_iters" \
  >"$slog" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "PASS shim_bench" "$slog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
record "bench revenant --backend=cuda --h2d_iters $h2d_iters" "$s" "$slog"
echo
echo "=== benchmark round 5: $h2d_iters uploads of 256 MiB, default snapshots (GB/s per iteration: native, revenant)"
paste <(grep -o "h2d iteration [0-9]*: [0-9.]*" "$nlog") <(grep -o "h2d iteration [0-9]*: [0-9.]*" "$slog" | sed 's/.*: //') |
  sed 's/^/   /' | fold -w 200
bash "$G/bench/compare.sh" "$nlog" "$slog" | grep -E "^metric|h2d_256" | tee "$LOGS/bench_table.5.txt"
grep -h "captured uploads at exit\|capture file" "$LOGS"/bench.cuda.*.log | sed 's/^/   /'
fi  # MODE = all or bench

# Native facts about pinned host memory the capture and snapshot files depend
# on (bench/host_memory_bench.cu; also alone: bash .gpu/run_gpu.sh hostmem).
if [ "$MODE" = all ] || [ "$MODE" = hostmem ]; then
  log="$LOGS/host_memory_bench.log"
  # HOSTMEM_ARGS="--only_snapshot": only section 6 (a snapshot's copies, three ways);
  # "--only_split": only section 7 (a capture split between the link and the CPU);
  # "--only_uffd": only section 8 (holding an upload's source by userfaultfd).
  timeout 200 "$G/bench/host_memory_bench.bin" ${HOSTMEM_ARGS:-} >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS host_memory_bench" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "host_memory_bench (native)" "$s" "$log"
  sed 's/^/   /' "$log"
fi  # MODE = all or hostmem

# What a small step's calls cost natively on each path (bench/launch_path_bench.cu),
# then train_mlp's time per call natively and under the shim (journal off and
# on, --snapshots=off) with the agent's time per request (REVENANT_CALL_STATS).
if [ "$MODE" = launchpath ]; then
  log="$LOGS/launch_path_bench.log"
  timeout 300 "$G/bench/launch_path_bench.bin" --steps 20000 --rounds 5 >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS launch_path_bench" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "launch_path_bench (native)" "$s" "$log"
  grep RESULT "$log" | sed 's/^/   /'
  export NCCL_NVLS_ENABLE=0
  for r in $(seq 1 "${LAUNCHPATH_ROUNDS:-2}"); do
    log="$LOGS/call_times.native.$r.log"
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$((20000 + RANDOM % 20000)) timeout 200 "$G/apps/train_mlp.bin" \
      --iters 20000 --time_after 2000 --call_times >"$log" 2>&1
    echo "   round $r native: $(grep RESULT "$log" | tr '\n' ' ')"
    for j in false true; do
      log="$LOGS/call_times.journal_$j.$r.log"
      REVENANT_CALL_STATS=1 timeout 260 $RUN -n 1 --backend=cuda --journal=$j --snapshots=off \
        --timeout=240 -- "$G/apps/train_mlp.bin" --iters 20000 --time_after 2000 --call_times \
        >"$log" 2>&1
      echo "   round $r journal $j: $(grep RESULT "$log" | tr '\n' ' ')"
      grep -A8 "requests at exit" "$log" | grep -E "Launch|Memcpy|AllReduce|Synchronize" | sed 's/^/   | /'
    done
  done
fi  # MODE = launchpath

# ---- NCCL: real NCCL through the cuda backend ----------------------------------------
export NCCL_NVLS_ENABLE=0
if ldd "$G/revenant-agent" | grep -q "libnccl.*not found"; then
  d=$(dirname "$(find / -xdev -name 'libnccl.so.2' 2>/dev/null | head -1)")
  echo "libnccl.so.2 not on the rpath; using $d"
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
fi
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "NCCL section: $NGPU GPU(s); NCCL env: $(env | grep '^NCCL_' | tr '\n' ' ')"
# native N LOG CMD...: N processes with the launcher environment, one per GPU.
# NATIVE_HOSTIDS=1: each also gets an NCCL_HOSTID of its own (several ranks on
# one GPU, as the agents set it) and NCCL_SOCKET_IFNAME=lo.
native() {
  local n=$1 log=$2; shift 2
  local port=$((20000 + RANDOM % 20000)) pids=() r rc=0 ids
  for r in $(seq 0 $((n - 1))); do
    ids=()
    [ -n "${NATIVE_HOSTIDS:-}" ] && ids=(NCCL_HOSTID="$(hostname)-native-rank$r" NCCL_SOCKET_IFNAME=lo)
    env "${ids[@]}" RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port timeout 150 "$@" >"$log.r$r" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=$?; done
  : >"$log"
  for r in $(seq 0 $((n - 1))); do sed "s/^/[r$r] /" "$log.r$r" >>"$log"; done
  return $rc
}
checksum() { grep -m1 "^\[r0\] final checksum" "$1" | awk '{print $4}'; }
# The median of the numbers on stdin (blank lines ignored), "-" if none.
median() {
  grep . | sort -g | awk '{ v[NR] = $1 } END { print NR ? ((NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : "-" }'
}
now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }
# Runs of native/shim pairs grouped by time-slice level (ranks sharing the
# GPU land run by run on one of a few levels, 1.2x-2x apart): reads lines
# "native V" and "shim V" (one run each) on stdin, sorts the values, starts
# a level wherever a value is more than 10 % above the level's smallest, and
# prints each level's runs and, where both sides reached a level, the ratio
# of their means (shim / native); then the mean of those ratios.
levels() {
  sort -k2,2g | awk '
    { v = $2; if (!k || v > lo[k] * 1.1) { k++; lo[k] = v }
      if ($1 == "native") { ns[k] += v; nn[k]++ } else { rs[k] += v; rn[k]++ } }
    END {
      for (i = 1; i <= k; i++) {
        line = sprintf("level %d: native %d run(s)", i, nn[i]) (nn[i] ? sprintf(" mean %.6g", ns[i] / nn[i]) : "") \
               sprintf(", revenant %d run(s)", rn[i]) (rn[i] ? sprintf(" mean %.6g", rs[i] / rn[i]) : "")
        if (nn[i] && rn[i]) { r = (rs[i] / rn[i]) / (ns[i] / nn[i]); line = line sprintf(": ratio %.3f", r); q += r; qn++ }
        print "     " line
      }
      printf "     levels both sides reached: %d, mean of their ratios %s\n", qn, qn ? sprintf("%.3f", q / qn) : "-"
    }'
}
# train_mlp step time: (time of --iters 20020 - time of --iters 20) / 20000,
# whole-job wall clock (start-up cancels out), the fastest of 3 runs each,
# native then revenant.
walltime() {  # the fastest of 3 runs of "$@", in seconds
  local best="" t0 t1 d i
  for i in 1 2 3; do
    t0=$(now); "$@"; t1=$(now)
    d=$(calc "$t1 - $t0")
    echo "   wall $d s: ${*:3}" >&2
    if [ -z "$best" ] || [ "$(calc "($d < $best) ? 1 : 0")" = 1 ]; then best=$d; fi
  done
  echo "$best"
}
revrun() {  # N LOG CMD...: under revenant-run, cuda backend
  local n=$1 log=$2; shift 2
  timeout 200 $RUN -n "$n" --backend=cuda --timeout=180 ${REVRUN_FLAGS:-} -- "$@" >"$log" 2>&1
}
steptime() {  # N TAG
  local n=$1 tag=$2 a b nat rev
  a=$(walltime native "$n" "$LOGS/step.n$n.20.log" "$G/apps/train_mlp.bin" --iters 20)
  b=$(walltime native "$n" "$LOGS/step.n$n.20020.log" "$G/apps/train_mlp.bin" --iters 20020)
  nat=$(calc "($b - $a) * 1e6 / 20000")
  # The NCCL path alone: boundary snapshots (on by default for a lone rank,
  # docs/recovery.md) are measured separately below.
  a=$(REVRUN_FLAGS=--snapshots=off walltime revrun "$n" "$LOGS/step.rev.n$n.20.log" "$G/apps/train_mlp.bin" --iters 20)
  b=$(REVRUN_FLAGS=--snapshots=off walltime revrun "$n" "$LOGS/step.rev.n$n.20020.log" "$G/apps/train_mlp.bin" --iters 20020)
  rev=$(calc "($b - $a) * 1e6 / 20000")
  a=$(walltime revrun "$n" "$LOGS/step.revsnap.n$n.20.log" "$G/apps/train_mlp.bin" --iters 20)
  b=$(walltime revrun "$n" "$LOGS/step.revsnap.n$n.20020.log" "$G/apps/train_mlp.bin" --iters 20020)
  snap=$(calc "($b - $a) * 1e6 / 20000")
  printf 'RESULT train_mlp_step_%s %.4f us\n' "$tag" "$nat" >"$LOGS/step.native.$tag.txt"
  printf 'RESULT train_mlp_step_%s_default_snapshots %.4f us\n' "$tag" "$nat" >>"$LOGS/step.native.$tag.txt"
  printf 'RESULT train_mlp_step_%s %.4f us\n' "$tag" "$rev" >"$LOGS/step.rev.$tag.txt"
  printf 'RESULT train_mlp_step_%s_default_snapshots %.4f us\n' "$tag" "$snap" >>"$LOGS/step.rev.$tag.txt"
  if grep -q "PASS train_mlp" "$LOGS/step.n$n.20020.log" && grep -q "PASS train_mlp" "$LOGS/step.rev.n$n.20020.log"; then
    s=PASS; else s=FAIL; fi
  record "train_mlp step time, $n rank(s)" "$s" "$LOGS/step.rev.n$n.20020.log"
}
if [ "$MODE" = all ] || [ "$MODE" = nccl ]; then
# One block per world size: train_mlp checksums, collectives_all, benchmarks.
for n in 1 2; do
  if [ "$n" -gt "$NGPU" ]; then
    results+=("$(printf '%-40s %s' "NCCL $n ranks" "NOT RUN ($NGPU GPU)")"); continue
  fi
  echo; echo "=== NCCL, $n rank(s)"
  nlog="$LOGS/train_mlp.n$n.native.log"; rlog="$LOGS/train_mlp.n$n.cuda.log"
  native "$n" "$nlog" "$G/apps/train_mlp.bin" --iters 40; rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c 'PASS train_mlp' "$nlog")" -eq "$n" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "train_mlp native, $n rank(s)" "$s" "$nlog"
  timeout 200 $RUN -n "$n" --backend=cuda --timeout=180 -- "$G/apps/train_mlp.bin" --iters 40 >"$rlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c 'PASS train_mlp' "$rlog")" -eq "$n" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "train_mlp revenant cuda, $n rank(s)" "$s" "$rlog"
  a=$(checksum "$nlog"); b=$(checksum "$rlog")
  echo "   checksums: native ${a:-none}, revenant ${b:-none}"
  if [ -n "$a" ] && [ "$a" = "$b" ]; then s=PASS; else s=FAIL; fi
  record "train_mlp checksums equal, $n rank(s)" "$s" "$rlog"
  nlog="$LOGS/collectives_all.n$n.native.log"; rlog="$LOGS/collectives_all.n$n.cuda.log"
  native "$n" "$nlog" "$G/apps/collectives_all.bin"; rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c 'PASS collectives_all' "$nlog")" -eq "$n" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "collectives_all native, $n rank(s)" "$s" "$nlog"
  timeout 200 $RUN -n "$n" --backend=cuda --timeout=180 -- "$G/apps/collectives_all.bin" >"$rlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c 'PASS collectives_all' "$rlog")" -eq "$n" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "collectives_all revenant cuda, $n rank(s)" "$s" "$rlog"
  nlog="$LOGS/nccl_bench.n$n.native.log"; rlog="$LOGS/nccl_bench.n$n.cuda.log"
  native "$n" "$nlog" "$G/bench/nccl_bench.bin"; rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c 'PASS nccl_bench' "$nlog")" -eq "$n" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "nccl_bench native, $n rank(s)" "$s" "$nlog"
  timeout 200 $RUN -n "$n" --backend=cuda --timeout=180 -- "$G/bench/nccl_bench.bin" >"$rlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c 'PASS nccl_bench' "$rlog")" -eq "$n" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "nccl_bench revenant cuda, $n rank(s)" "$s" "$rlog"
  steptime "$n" "${n}rank"
  echo; echo "=== NCCL figures, $n rank(s) (ratio = revenant / native, same machine, same run)"
  cat "$nlog" "$LOGS/step.native.${n}rank.txt" >"$LOGS/nccl_native.n$n.txt"
  cat "$rlog" "$LOGS/step.rev.${n}rank.txt" >"$LOGS/nccl_rev.n$n.txt"
  bash "$G/bench/compare.sh" "$LOGS/nccl_native.n$n.txt" "$LOGS/nccl_rev.n$n.txt" | tee "$LOGS/nccl_table.n$n.txt"
done
# A chaos kill with real NCCL (rank N-1's agent dies in minibatch 4): the job
# must end, bounded, never hang. One rank: the replacement re-creates its
# communicator and recovers (scripts/gpu/nccl_async.sh also compares the
# checksum with native); several ranks (2 GPUs): the job must end, bounded
# (scripts/gpu/nccl_multi.sh checks recovery with several ranks on one GPU).
chaos_bounded() {  # N
  local n=$1 log="$LOGS/chaos.n$1.cuda.log" t0 t1 el rc
  t0=$(now)
  REVENANT_COLLECTIVE_TIMEOUT_S=20 timeout 170 $RUN -n "$n" --backend=cuda --timeout=150 \
    --chaos="rank=$((n - 1)),minibatch=4,calls=8" -- "$G/apps/train_mlp.bin" --iters 200 >"$log" 2>&1
  rc=$?
  t1=$(now)
  el=$(calc "$t1 - $t0")
  printf '   chaos job: rc=%s after %.1f s\n' "$rc" "$el"
  grep -iE "chaos|recover|epoch|abort|refused|FAIL|PASS|timeout|cannot|replay|job " "$log" | head -40 | sed 's/^/   | /'
  if [ $rc -ne 124 ] && [ $rc -ne 137 ] && ! grep -q "timeout after" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "chaos kill, $n rank(s): ended, bounded (rc=$rc, ${el%.*} s)" "$s" "$log"
}
if [ "$NGPU" -eq 1 ]; then chaos_bounded 1; fi
if [ "$NGPU" -ge 2 ]; then chaos_bounded 2; fi
fi  # MODE = all or nccl
# Sections of their own (scripts/gpu/*.sh, packed into sections/): each is
# sourced here with MODE, G, RUN, LOGS and the helpers above (record, native,
# revrun, checksum, median, levels, walltime, now, calc) and decides from MODE
# whether it runs.
for section in "$G"/sections/*.sh; do
  [ -e "$section" ] || continue
  # shellcheck disable=SC1090
  . "$section"
done
echo
echo "=== summary"
pass=0; fail=0
for r in "${results[@]}"; do
  echo "$r"
  case "$r" in *PASS) pass=$((pass + 1));; *) fail=$((fail + 1));; esac
done
echo "passed $pass, failed $fail"
# A device call brings back only a few files: GPU_LOGS_TGZ=PATH packs the
# logs (without the journals' *.bin) into that one compressed tar instead.
if [ -n "${GPU_LOGS_TGZ:-}" ]; then
  tar -C "$(dirname "$LOGS")" --exclude='*.bin' -czf "$GPU_LOGS_TGZ" "$(basename "$LOGS")" &&
    rm -rf "$LOGS" && echo "logs packed into $GPU_LOGS_TGZ ($(du -h "$GPU_LOGS_TGZ" | cut -f1))"
fi
RUNNER
sed -i "s/__APPS__/$APPS/" "$out/run_gpu.sh"
chmod +x "$out/run_gpu.sh"
du -sh "$out"
# The same, compressed (the libraries the agent links, OpenBLAS above all,
# make the folder larger than what a device call may carry).
tar -C "$root" -czf "$root/.gpu.tar.gz" .gpu
du -sh "$root/.gpu.tar.gz"
echo "packed $out: run there with: bash .gpu/run_gpu.sh (carry .gpu, or carry .gpu.tar.gz and"
echo "  first: tar -xzf .gpu.tar.gz)"
