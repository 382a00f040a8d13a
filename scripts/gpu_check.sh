#!/bin/bash
# Builds everything a GPU run needs and packs it into .gpu/ (git-ignored) with
# its runner, .gpu/run_gpu.sh, which runs THERE (no Bazel):
#
#   scripts/gpu_check.sh            # here: build + pack
#   bash .gpu/run_gpu.sh            # on the GPU machine (carry .gpu)
#
# The runner executes every tests/apps program natively and under
# `revenant-run --backend=cuda`, the integration programs under the cuda
# backend, the cuda backend's GPU test (a second agent gets the same device
# addresses), and the benchmarks natively and under the shim with a ratio
# table; it prints PASS/FAIL per item and a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

APPS="vector_add streams_events pinned_async callbacks graphs multithread errors mempool"
PROGRAMS="async_launch agent_death maps_probe"

targets=(
  //tools:revenant-run //agent:revenant-agent //shim:librevenant_shim.so
  //tests/apps:all_apps
  //tests/integration:async_launch //tests/integration:agent_death //tests/integration:maps_probe
  //agent/backends/cuda:cuda_backend_gpu_test //agent/backends/cuda:gpu_test_kernels
  //bench:shim_bench
)
bazel build "${targets[@]}"
bin="$(bazel info bazel-bin 2>/dev/null)"

out="$root/.gpu"
rm -rf "$out"
mkdir -p "$out/apps" "$out/lib" "$out/bench"
cp "$bin/tools/revenant-run" "$bin/agent/revenant-agent" "$bin/shim/librevenant_shim.so" "$out/"
for a in $APPS; do cp "$bin/tests/apps/$a.bin" "$out/apps/"; done
for p in $PROGRAMS; do cp "$bin/tests/integration/$p.bin" "$out/apps/"; done
cp "$root/tests/integration/agent_death_test.sh" "$out/"
cp "$bin/agent/backends/cuda/cuda_backend_gpu_test" "$bin/agent/backends/cuda/gpu_test_kernels.fatbin" "$out/"
cp "$bin/bench/shim_bench.bin" "$root/bench/compare.sh" "$out/bench/"
chmod -R u+w "$out"

# Shared libraries the GPU machine may lack: everything our binaries import
# except glibc itself and the CUDA runtime (the GPU machine has its own).
for f in "$out/revenant-run" "$out/revenant-agent" "$out/librevenant_shim.so" \
         "$out/cuda_backend_gpu_test"; do
  ldd "$f" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcudart.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done

# The agent under the cuda backend, for scripts that start agents themselves.
cat > "$out/agent_cuda.sh" <<'WRAP'
#!/bin/bash
exec "$(dirname "$0")/revenant-agent" --backend=cuda "$@"
WRAP
chmod +x "$out/agent_cuda.sh"
# The agent without its recovery journal: splits the journal's share of the
# shim's overhead from the transport's (benchmark round 3).
cat > "$out/agent_nojournal.sh" <<'WRAP'
#!/bin/bash
exec "$(dirname "$0")/revenant-agent" --journal=false "$@"
WRAP
chmod +x "$out/agent_nojournal.sh"

cat > "$out/run_gpu.sh" <<'RUNNER'
#!/bin/bash
# Runs on the GPU machine: bash .gpu/run_gpu.sh
set -u
G="$(cd "$(dirname "$0")" && pwd)"
export LD_LIBRARY_PATH="$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LOGS="${OUT:-/tmp}/gpu_logs"
mkdir -p "$LOGS"
APPS="__APPS__"
RUN="$G/revenant-run --agent=$G/revenant-agent --shim=$G/librevenant_shim.so"
results=()
record() {  # name status log
  results+=("$(printf '%-40s %s' "$1" "$2")")
  echo "== $1: $2"
  if [ "$2" != PASS ]; then tail -n 25 "$3" | sed 's/^/   | /'; fi
}
echo "machine: $(hostname) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
ldd "$G/revenant-agent" | grep -E "not found|cudart" | sed 's/^/ldd: /'

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
# Round 3: the same against the round-2 native run, agent journal off (no
# recovery possible in this mode; for attributing costs only).
slog="$LOGS/bench.cuda.nojournal.log"
timeout 260 "$G/revenant-run" --agent="$G/agent_nojournal.sh" --shim="$G/librevenant_shim.so" \
  -n 1 --backend=cuda --timeout=240 -- "$G/bench/shim_bench.bin" >"$slog" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "PASS shim_bench" "$slog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
record "bench revenant --backend=cuda, agent --journal=false" "$s" "$slog"
echo
echo "=== benchmark round 3: agent --journal=false (ratio against round 2 native)"
bash "$G/bench/compare.sh" "$LOGS/bench.native.2.log" "$slog" | tee "$LOGS/bench_table.3.txt"
echo
echo "=== summary"
pass=0; fail=0
for r in "${results[@]}"; do
  echo "$r"
  case "$r" in *PASS) pass=$((pass + 1));; *) fail=$((fail + 1));; esac
done
echo "passed $pass, failed $fail"
RUNNER
sed -i "s/__APPS__/$APPS/" "$out/run_gpu.sh"
chmod +x "$out/run_gpu.sh"
du -sh "$out"
echo "packed $out: run there with: bash .gpu/run_gpu.sh (carry .gpu)"
