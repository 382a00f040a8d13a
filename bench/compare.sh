#!/bin/bash
# Ratio table of two shim_bench runs: compare.sh NATIVE_OUTPUT SHIM_OUTPUT
# (RESULT lines, optionally behind a "[r0] " prefix). Ratio = shim / native;
# the goal column says which way is good. Exit status 0 always: goals are
# reported, not asserted. The first line says whether the agent of the shim
# run journaled (an agent with a journal logs "journal at exit"), so a round
# meant to run without the journal cannot silently measure with it.
set -u
native="$1"; shim="$2"
if grep -q "journal at exit" "$shim"; then
  echo "agent journal in the revenant run: on"
else
  echo "agent journal in the revenant run: off (the agent reported no journal)"
fi
awk '
  FNR == 1 { file++ }
  { sub(/^\[r[0-9]+\] /, "") }
  $1 == "RESULT" { val[file, $2] = $3; unit[$2] = $4; if (file == 1) order[++n] = $2 }
  END {
    # The goals of docs/performance.md "Where each goal stands".
    goal["launch_cost"] = "<= 0.10"; goal["launch_throughput"] = ">= 0.95"
    goal["d2h_4b_latency"] = "<= 1.05"; goal["h2d_256mib_bandwidth"] = ">= 0.95"
    goal["d2h_256mib_bandwidth"] = ">= 0.95"; goal["train_step_2000_launches"] = "<= 1.02"
    goal["empty_stream_sync"] = "<= 1.5"; goal["event_record_query"] = "<= 1.5"
    # nccl_bench: all-reduce bandwidth from 1 MiB (algbw at one rank, busbw at several).
    goal["allreduce_1mib_algbw"] = ">= 0.98"; goal["allreduce_16mib_algbw"] = ">= 0.98"
    goal["allreduce_256mib_algbw"] = ">= 0.98"; goal["allreduce_1mib_busbw"] = ">= 0.98"
    goal["allreduce_16mib_busbw"] = ">= 0.98"; goal["allreduce_256mib_busbw"] = ">= 0.98"
    printf "%-26s %14s %14s %-11s %8s %8s %s\n", "metric", "native", "revenant", "unit", "ratio", "goal", "met"
    for (i = 1; i <= n; i++) {
      m = order[i]
      if (!((2, m) in val)) { printf "%-26s %14s %14s %-11s %8s\n", m, val[1, m], "missing", unit[m], "-"; continue }
      r = (val[1, m] > 0) ? val[2, m] / val[1, m] : 0
      g = (m in goal) ? goal[m] : "-"
      met = "-"
      if (g != "-") {
        split(g, p, " ")
        met = ((p[1] == "<=" && r <= p[2]) || (p[1] == ">=" && r >= p[2])) ? "yes" : "NO"
      }
      printf "%-26s %14.4f %14.4f %-11s %8.3f %8s %s\n", m, val[1, m], val[2, m], unit[m], r, g, met
    }
  }' "$native" "$shim"
