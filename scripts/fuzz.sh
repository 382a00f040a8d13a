#!/bin/bash
# Builds Revenant's libFuzzer targets with clang (ASan + UBSan) and runs each
# for a while on its seed corpus.
#   bash scripts/fuzz.sh            # 10 s per target
#   bash scripts/fuzz.sh 60         # 60 s per target
#   bash scripts/fuzz.sh 60 dispatch journal_reader   # only these targets
#   bash scripts/fuzz.sh 0 build  # build only (and .fuzz/bin/make_seeds)
# Targets (tests/fuzz/<name>_fuzzer.cc): dispatch, session, journal_reader,
# log_reader, handshake, cuda_agreement. Seeds: tests/fuzz/corpus/<name>/. Build and working corpora go to
# .fuzz/ (git-ignored); a crash leaves .fuzz/crash-<name>-* and fails the run.
#
# The project builds with gcc through Bazel; libFuzzer needs clang, so the
# fuzzers are built here with clang++ from the sources listed below. The
# generated headers and sources (api ids, dispatcher, journal proto) come from
# bazel-bin: `bazel build //api:generate //proto:journal_cc_proto` first, or
# pass GEN_DIR=<a folder holding api/ and proto/ generated files>.
# Env: ROOT (the source tree, default: this script's repository), GEN_DIR,
# FUZZ_OUT (default $ROOT/.fuzz), CXX (default clang++), JOBS (default 2),
# FUZZ_SEED (libFuzzer -seed, default 1).
set -euo pipefail

SECONDS_EACH=${1:-10}
shift || true
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
GEN_DIR=${GEN_DIR:-$ROOT/bazel-bin}
OUT=${FUZZ_OUT:-$ROOT/.fuzz}
CXX=${CXX:-clang++}
JOBS=${JOBS:-2}
FUZZ_SEED=${FUZZ_SEED:-1}
ALL_TARGETS=(dispatch session journal_reader log_reader handshake cuda_agreement)
TARGETS=("$@")
# "build": build only, run nothing.
[ "${1:-}" != build ] || { TARGETS=(); BUILD_ONLY=1; }
[ ${#TARGETS[@]} -gt 0 ] || [ -n "${BUILD_ONLY:-}" ] || TARGETS=("${ALL_TARGETS[@]}")

die() { echo "fuzz.sh: $*" >&2; exit 1; }
command -v "$CXX" >/dev/null || die "$CXX not found: install clang (apt-get install -y clang; scripts/setup.sh does)"
for f in api/api_ids.h api/hook_structs.h api/library_rows.h api/dispatch.cc api/backend_api.cc api/api_traits.cc proto/journal.pb.cc; do
  [ -f "$GEN_DIR/$f" ] || die "missing generated $GEN_DIR/$f: run 'bazel build //api:generate //proto:journal_cc_proto'"
done
# libFuzzer ships with clang's runtime (Debian: libclang-rt-<v>-dev, a clang dependency).
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  > "${TMPDIR:-/tmp}/revenant_fuzz_probe.cc"
"$CXX" -fsanitize=fuzzer -o "${TMPDIR:-/tmp}/revenant_fuzz_probe" "${TMPDIR:-/tmp}/revenant_fuzz_probe.cc" 2>/dev/null ||
  die "$CXX cannot link -fsanitize=fuzzer: libFuzzer is missing (Debian: apt-get install -y clang libclang-rt-14-dev)"

COMMON=(common/crc32c.cc common/events.cc common/knobs.cc common/kv.cc common/logging.cc common/populate.cc common/timeline.cc common/upload_hold.cc common/write_guard.cc common/content_hash.cc)
JOURNAL=(journal/api_name.cc journal/file.cc journal/journal.cc
         journal/log_reader.cc journal/log_writer.cc GEN:proto/journal.pb.cc GEN:api/api_traits.cc)
TRANSPORT=(transport/control_socket.cc transport/shm_channel.cc)
AGENT=(agent/handles.cc agent/hooks.cc agent/hooks_cudnn.cc agent/session.cc agent/journaling.cc agent/allocator.cc
       agent/profiler.cc agent/journaling_mode.cc agent/journaling_inline.cc agent/journal_thread.cc
       agent/journaling_ahead.cc agent/journaling_behind.cc
       agent/snapshot.cc agent/upload_capture.cc agent/validator.cc
       recovery/replay_plan.cc
       agent/backends/host/host_backend.cc agent/backends/host/host_blas.cc
       agent/backends/host/host_blaslt.cc agent/backends/host/host_dnn.cc agent/backends/host/host_driver.cc
       agent/backends/host/host_stream.cc hostkernel/loader.cc
       GEN:api/api_traits.cc GEN:api/backend_api.cc GEN:api/dispatch.cc)
declare -A SRCS=(
  [dispatch]="tests/fuzz/dispatch_fuzzer.cc ${AGENT[*]} ${JOURNAL[*]} ${TRANSPORT[*]} ${COMMON[*]}"
  [journal_reader]="tests/fuzz/journal_reader_fuzzer.cc ${JOURNAL[*]} ${COMMON[*]}"
  [log_reader]="tests/fuzz/log_reader_fuzzer.cc common/crc32c.cc common/knobs.cc common/logging.cc common/populate.cc common/timeline.cc journal/file.cc journal/log_reader.cc"
  [handshake]="tests/fuzz/handshake_fuzzer.cc transport/control_socket.cc ${COMMON[*]}"
  [session]="tests/fuzz/session_fuzzer.cc ${AGENT[*]} ${JOURNAL[*]} ${TRANSPORT[*]} ${COMMON[*]}"
  [cuda_agreement]="tests/fuzz/cuda_agreement_fuzzer.cc agent/backends/cuda/cuda_nccl_start.cc
    agent/backends/cuda/cuda_nccl_recovery.cc agent/backends/common/recovery_plan.cc"
)
# As third_party/BUILD links them.
ABSL_LIBS="-labsl_statusor -labsl_status -labsl_strerror -labsl_str_format_internal -labsl_cord
  -labsl_cordz_info -labsl_cord_internal -labsl_cordz_functions -labsl_cordz_handle -labsl_hash
  -labsl_city -labsl_bad_variant_access -labsl_low_level_hash -labsl_raw_hash_set
  -labsl_bad_optional_access -labsl_hashtablez_sampler -labsl_exponential_biased
  -labsl_synchronization -labsl_graphcycles_internal -labsl_stacktrace -labsl_symbolize
  -labsl_debugging_internal -labsl_demangle_internal -labsl_malloc_internal -labsl_time
  -labsl_civil_time -labsl_strings -labsl_strings_internal -latomic -lrt -labsl_base
  -labsl_spinlock_wait -labsl_int128 -labsl_throw_delegate -labsl_raw_logging_internal
  -labsl_log_severity -labsl_time_zone"
LIBS="$ABSL_LIBS -lprotobuf -lisal -lopenblas -ldl -lpthread"
# UBSan includes its enum check: every enum read from the wire is checked
# before it becomes an enum (api/wire_enums.h), so loading one outside its
# values is a bug.
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
CXXFLAGS=(-std=c++17 -O1 -g "${SAN[@]}" -fsanitize=fuzzer-no-link -I"$ROOT" -I"$GEN_DIR"
          -I/usr/local/cuda/include -w)

# A changed header, generated file or flag rebuilds every object; otherwise
# only the objects older than their source.
mkdir -p "$OUT/obj" "$OUT/bin"
stamp=$( { echo "$CXX ${CXXFLAGS[*]}"; "$CXX" --version | head -1;
  cd "$ROOT" && find agent api common journal transport hostkernel shim tests/fuzz -maxdepth 3 \
    -name '*.h' -print0 | sort -z | xargs -0 cat;
  cat "$GEN_DIR"/api/*.h "$GEN_DIR"/api/*.cc "$GEN_DIR"/proto/journal.pb.*; } | sha1sum | cut -c1-16)
if [ "$(cat "$OUT/stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$OUT"/obj/*.o
fi
all=$(for t in "${!SRCS[@]}"; do echo ${SRCS[$t]}; done | tr ' ' '\n' | sort -u)
export ROOT GEN_DIR OUT CXX
export CXXFLAGS_STR="${CXXFLAGS[*]}"
echo "fuzz.sh: building with $("$CXX" --version | head -1) (objects in $OUT/obj)"
echo "$all" | xargs -P "$JOBS" -I{} bash -c '
  s={}; case $s in GEN:*) src=$GEN_DIR/${s#GEN:};; *) src=$ROOT/$s;; esac
  o=$OUT/obj/$(echo "${s#GEN:}" | tr / _).o
  [ -f "$o" ] && [ "$o" -nt "$src" ] && exit 0
  $CXX $CXXFLAGS_STR -c "$src" -o "$o.tmp" && mv "$o.tmp" "$o" ||
    { echo "fuzz.sh: cannot compile $s" >&2; exit 255; }'
for t in "${!SRCS[@]}"; do
  objs=$(for s in ${SRCS[$t]}; do echo "$OUT/obj/$(echo "${s#GEN:}" | tr / _).o"; done | sort -u)
  "$CXX" "${SAN[@]}" -fsanitize=fuzzer -o "$OUT/bin/${t}_fuzzer" $objs $LIBS
done
# The seed writer of the journal corpora (tests/fuzz/make_seeds.cc).
$CXX $CXXFLAGS_STR -c "$ROOT/tests/fuzz/make_seeds.cc" -o "$OUT/obj/make_seeds.o"
objs=$(for s in ${SRCS[journal_reader]}; do echo "$OUT/obj/$(echo "${s#GEN:}" | tr / _).o"; done |
  grep -v fuzzer | sort -u)
"$CXX" "${SAN[@]}" -o "$OUT/bin/make_seeds" "$OUT/obj/make_seeds.o" $objs $LIBS
echo "$stamp" > "$OUT/stamp"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
[ -z "${BUILD_ONLY:-}" ] || { echo "fuzz.sh: built $OUT/bin"; exit 0; }
failed=()
for t in "${TARGETS[@]}"; do
  [ -n "${SRCS[$t]:-}" ] || die "unknown target $t (known: ${ALL_TARGETS[*]})"
  corpus="$OUT/corpus/$t"
  mkdir -p "$corpus" "$ROOT/tests/fuzz/corpus/$t"
  log="$OUT/$t.log"
  echo "fuzz.sh: $t for ${SECONDS_EACH}s (seed $FUZZ_SEED)"
  # -timeout: one input running longer is a hang, reported as a crash.
  if "$OUT/bin/${t}_fuzzer" -seed="$FUZZ_SEED" -max_total_time="$SECONDS_EACH" -timeout=10 \
       -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$OUT/crash-$t-" "$corpus" "$ROOT/tests/fuzz/corpus/$t" >"$log" 2>&1; then
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz.sh: $t ok: $execs executions, $cov"
  else
    echo "fuzz.sh: $t FAILED (log $log); last lines:" >&2
    tail -40 "$log" >&2
    failed+=("$t")
  fi
done
[ ${#failed[@]} -eq 0 ] || die "crashes or hangs in: ${failed[*]} (inputs: $OUT/crash-*)"
echo "fuzz.sh: all targets ran clean"
