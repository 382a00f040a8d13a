#!/bin/bash
# The journal's cost on the training step: train_mlp under revenant-run with
# the journal on and off, PAIRS interleaved pairs of runs (the order alternates
# per pair so that drifting load favours neither side). Each run times its own
# steady state (train_mlp --time_after WARM: iterations WARM..ITERS-1, start-up
# and teardown excluded). Prints every pair, the median step time per arm, the
# ratio of the medians and the median of the per-pair ratios (goal <= 1.02).
#
#   bash bench/journal_step.sh PAIRS ITERS WARM REVENANT_RUN [FLAGS...] -- APP [ARGS...]
#
# REVENANT_RUN and FLAGS: the revenant-run command without --journal (this
# script adds --journal=true / --journal=false); boundary snapshots should be
# off in FLAGS (--snapshots=off) so that the ratio is the journal's alone.
# NATIVE=1: a third arm runs APP without Revenant (ratio to native printed;
# with ALTERNATE, every other arm's bursts are also compared with native's).
# EXTRA_ARM="NAME WORD...": further arms, separated by ';' (revenant-run with
# the journal on plus these words: --flags go to revenant-run, VAR=VALUE to its
# environment; a later --journal=false wins), e.g.
# EXTRA_ARM="inline --journal_thread=off; spin200 REVENANT_SPIN_US=200".
# ALTERNATE=B: each pair is one round in which every arm runs at once, the
# arms taking turns in bursts of B iterations (train_mlp --alternate): bursts
# J of all arms ran next to each other in time, so load drifting on the
# machine (which moves a whole run's step time by +-15 % on the H200 VM)
# hits them alike. Each arm's step time is then the mean of its bursts, and
# the burst pairs give a second, finer estimate: the geometric mean of the
# per-burst ratios with its standard error (over all rounds). The bursts of
# one round share the arms' placement on CPUs, so rounds, not bursts, are the
# independent samples: the per-pair line is the estimate to quote. CPUS=LIST
# runs every arm under taskset -c LIST (the same CPUs for all arms).
# Output lines a script can use: "RESULT journal_step_ratio <median ratio>",
# "RESULT journal_step_us_on <us>", "RESULT journal_step_us_off <us>".
set -uo pipefail
if [ $# -lt 6 ]; then
  sed -n '2,19p' "$0"; exit 2
fi
pairs=$1 iters=$2 warm=$3; shift 3
revrun=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do revrun+=("$1"); shift; done
[ "${1:-}" = -- ] || { echo "journal_step.sh: missing -- before the application" >&2; exit 2; }
shift
app=("$@")
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
declare -A extra_words=()
extra_names=""
IFS=';' read -r -a extra_specs <<<"${EXTRA_ARM:-}"
for spec in "${extra_specs[@]}"; do
  read -r name rest <<<"$spec"
  [ -n "$name" ] || continue
  case " on off native $extra_names " in *" $name "*) echo "journal_step.sh: arm $name twice" >&2; exit 2;; esac
  extra_words[$name]="$rest"; extra_names="$extra_names $name"
done

pin=()
[ -n "${CPUS:-}" ] && pin=(taskset -c "$CPUS")
launch() {  # ARM LOG [APP ARGS...]: one run of ARM, output to LOG; its status
  local arm=$1 log=$2; shift 2
  case $arm in
    native) RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
          MASTER_PORT=$((20000 + RANDOM % 20000)) timeout 600 "${pin[@]}" "${app[@]}" --iters "$iters" --time_after "$warm" "$@" >"$log" 2>&1 ;;
    on) timeout 600 "${pin[@]}" "${revrun[0]}" --journal=true "${revrun[@]:1}" -- "${app[@]}" \
          --iters "$iters" --time_after "$warm" "$@" >"$log" 2>&1 ;;
    off) timeout 600 "${pin[@]}" "${revrun[0]}" --journal=false "${revrun[@]:1}" -- "${app[@]}" \
          --iters "$iters" --time_after "$warm" "$@" >"$log" 2>&1 ;;
    *) local envs=() flags=() w
       for w in ${extra_words[$arm]}; do
         case $w in -*) flags+=("$w");; *=*) envs+=("$w");; *) flags+=("$w");; esac
       done
       timeout 600 "${pin[@]}" env "${envs[@]}" "${revrun[0]}" --journal=true "${revrun[@]:1}" "${flags[@]}" -- \
          "${app[@]}" --iters "$iters" --time_after "$warm" "$@" >"$log" 2>&1 ;;
  esac
}

step_us() {  # ARM LOG RC: prints the run's step time in us (or fails)
  local arm=$1 log=$2 rc=$3 us
  us=$(sed -n 's/.*RESULT train_step_us \([0-9.]*\).*/\1/p' "$log" | head -1)
  if [ "$rc" -ne 0 ] || [ -z "$us" ]; then
    echo "journal_step.sh: $arm run failed (rc=$rc):" >&2; tail -20 "$log" >&2; return 1
  fi
  cp "$log" "$tmp/last.$arm.log"
  echo "$us"
}

one() {  # ARM -> prints the step time in us (or fails)
  local log="$tmp/run.log" rc
  launch "$1" "$log"; rc=$?
  step_us "$1" "$log" "$rc"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

arms="on off$extra_names"
[ "${NATIVE:-0}" = 1 ] && arms="$arms native"
echo "journal step benchmark: $pairs pairs, $iters iterations, timed from $warm; arms: $arms"
echo "  revenant-run: ${revrun[*]}"
echo "  application: ${app[*]}"
for arm in $arms; do : >"$tmp/$arm"; done
: >"$tmp/ratio"
n_arms=$(echo $arms | wc -w)
for p in $(seq "$pairs"); do
  if (( p % 2 )); then order="$arms"; else order="$(echo $arms | tr ' ' '\n' | tac | tr '\n' ' ')"; fi
  line="  pair $p:"
  if [ -n "${ALTERNATE:-}" ]; then
    # One round: every arm at once, in turns (the order alternates per round).
    line="  round $p:"
    name="revenant-jstep-$$-$p"; rm -f "/dev/shm/$name"
    k=0; declare -A pid=()
    for arm in $order; do
      launch "$arm" "$tmp/alt.$arm.log" --alternate "$name" --arm "$k" --arms "$n_arms" \
        --burst "$ALTERNATE" &
      pid[$arm]=$!; k=$((k + 1))
    done
    for arm in $order; do
      wait "${pid[$arm]}"; rc=$?
      us=$(step_us "$arm" "$tmp/alt.$arm.log" "$rc") || { rm -f "/dev/shm/$name"; exit 1; }
      echo "$us" >>"$tmp/$arm"
      line="$line $arm $us us"
      sed -n 's/.*RESULT train_step_burst_us \([0-9]*\) \([0-9.]*\).*/\1 \2/p' "$tmp/alt.$arm.log" \
        | sort -k1,1 >"$tmp/bursts.$arm"
    done
    rm -f "/dev/shm/$name"
    for arm in $arms; do
      [ "$arm" = off ] || join "$tmp/bursts.$arm" "$tmp/bursts.off" | awk '{ print $2 / $3 }' >>"$tmp/bratio.$arm"
      # With the native arm: every other arm's bursts against native's too.
      [ "${NATIVE:-0}" = 1 ] && [ "$arm" != native ] &&
        join "$tmp/bursts.$arm" "$tmp/bursts.native" | awk '{ print $2 / $3 }' >>"$tmp/nratio.$arm"
    done
  else
    for arm in $order; do
      us=$(one "$arm") || exit 1
      echo "$us" >>"$tmp/$arm"
      line="$line $arm $us us"
    done
  fi
  r=$(awk -v a="$(tail -1 "$tmp/on")" -v b="$(tail -1 "$tmp/off")" 'BEGIN { printf "%.4f", a / b }')
  echo "$r" >>"$tmp/ratio"
  echo "$line; on/off $r"
done
m_on=$(median <"$tmp/on"); m_off=$(median <"$tmp/off"); m_r=$(median <"$tmp/ratio")
grep -h "journal time at exit\|journal thread" "$tmp/last.on.log" 2>/dev/null | sed 's/^/  last on run: /'
echo "step time, median of $pairs: journal on $m_on us, off $m_off us"
for arm in $arms; do
  case $arm in on|off) ;; *) echo "step time, median of $pairs: $arm $(median <"$tmp/$arm") us";; esac
done
printf 'ratio of medians on/off %.4f; median of per-pair ratios %.4f (min %s, max %s) (goal <= 1.02)\n' \
  "$(awk -v a="$m_on" -v b="$m_off" 'BEGIN { print a / b }')" "$m_r" \
  "$(sort -g "$tmp/ratio" | head -1)" "$(sort -g "$tmp/ratio" | tail -1)"
# The benchmark's resolution: the geometric mean of the pair ratios with
# the standard error of its log (one run's pairs spread +-15 % on the H200
# VM, so a run resolves a few percent at best).
awk '{ l = log($1); s += l; q += l * l; n++ } END {
  if (n < 2) exit; m = s / n; sd = sqrt((q - n * m * m) / (n - 1)); se = sd / sqrt(n);
  printf "geometric mean of per-pair ratios %.4f, standard error %.1f %% (95 %% interval %.4f-%.4f)\n",
    exp(m), 100 * se, exp(m - 1.96 * se), exp(m + 1.96 * se) }' "$tmp/ratio"
if [ -n "${ALTERNATE:-}" ]; then
  # Burst pairs: arm burst J / off burst J of the same round (with the native
  # arm, also arm burst J / native burst J).
  burst_ratios() {  # ARM BASE FILE
    awk -v arm="$1" -v base="$2" '{ l = log($1); s += l; q += l * l; n++ } END {
      if (n < 2) exit; m = s / n; sd = sqrt((q - n * m * m) / (n - 1)); se = sd / sqrt(n);
      printf "bursts %s/%s: geometric mean of %d burst ratios %.4f, standard error %.2f %% (95 %% interval %.4f-%.4f)\n",
        arm, base, n, exp(m), 100 * se, exp(m - 1.96 * se), exp(m + 1.96 * se)
      printf "RESULT journal_step_burst_ratio_%s_%s %.4f\n", arm, base, exp(m) }' "$3"
  }
  for arm in $arms; do
    [ "$arm" = off ] || burst_ratios "$arm" off "$tmp/bratio.$arm"
    [ "${NATIVE:-0}" = 1 ] && [ "$arm" != native ] && burst_ratios "$arm" native "$tmp/nratio.$arm"
  done
fi
echo "RESULT journal_step_ratio $m_r"
echo "RESULT journal_step_us_on $m_on"
echo "RESULT journal_step_us_off $m_off"
for name in $extra_names; do
  echo "RESULT journal_step_ratio_${name}_off $(awk -v a="$(median <"$tmp/$name")" -v b="$m_off" 'BEGIN { printf "%.4f", a / b }')"
done
if [ "${NATIVE:-0}" = 1 ]; then
  echo "RESULT journal_step_ratio_on_native $(awk -v a="$m_on" -v b="$(median <"$tmp/native")" 'BEGIN { printf "%.4f", a / b }')"
fi
