// Cost of the journal on the agent's hot path, in one process (no shim, no
// transport): what RequestJournal does per launch request (a small entry in
// the minibatch log, and in the setup log before the first boundary), per
// launch request of a training step (32 entries, then a minibatch boundary)
// and per 256 MiB pinned host-to-device copy (an out-of-line payload); and
// a setup log's compaction with large live payloads, the payload file kept
// against copied.
//
//   bazel run //journal:journal_bench -- [--launches] [--write] [dir]   # default /dev/shm/...
//
// --launches measures the small entries only (for profiling them); --write
// writes the log files with write(2) instead of through a mapping (the
// format's other writer, JournalOptions::mapped_logs = false) to compare.
//
// Prints "RESULT <metric> <value> <unit>" lines like bench/shim_bench.cu.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "journal/journal.h"

namespace {

using Clock = std::chrono::steady_clock;
using revenant::journal::Journal;
using revenant::journal::JournalEntry;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

void Result(const char* metric, double value, const char* unit) {
  std::printf("RESULT %s %.4f %s\n", metric, value, unit);
  std::fflush(stdout);
}

int Fail(const absl::Status& s) {
  std::printf("FAIL %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  bool launches_only = false;
  bool write_logs = false;
  std::string dir = "/dev/shm/revenant-journal-bench-" + std::to_string(getpid());
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--launches") == 0) {
      launches_only = true;
    } else if (std::strcmp(argv[i], "--write") == 0) {
      write_logs = true;
    } else {
      dir = argv[i];
    }
  }
  std::filesystem::remove_all(dir);
  revenant::journal::JournalOptions options;
  options.mapped_logs = !write_logs;
  std::printf("log files written %s\n", write_logs ? "with write(2)" : "through a mapping");
  auto j = Journal::Open(dir, "bench", 0, options);
  if (!j.ok()) return Fail(j.status());
  // A launch request body: handle, grid, block, shared bytes, stream, 32
  // bytes of packed kernel arguments (what cudaLaunchKernel puts on the wire).
  std::string args(96, '\x5a');
  uint64_t seq = 0;
  // One entry reused for every record, as the agent does.
  JournalEntry e;
  auto append = [&](bool setup, int n) -> absl::Status {
    for (int i = 0; i < n; ++i) {
      e.Clear();
      e.set_seq(++seq * 2);
      e.set_api_id(200);
      e.set_args(args);
      e.set_flags(0);
      e.set_minibatch(setup ? 0 : 1);
      absl::Status s = setup ? (*j)->AppendSetup(&e) : (*j)->AppendMinibatch(&e);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
  for (bool setup : {true, false}) {
    std::vector<double> per;
    for (int r = 0; r < 5; ++r) {
      if (!setup) {
        if (absl::Status s = (*j)->MarkBoundary(r + 1); !s.ok()) return Fail(s);
      }
      const int n = 20000;
      auto t0 = Clock::now();
      if (absl::Status s = append(setup, n); !s.ok()) return Fail(s);
      per.push_back(Us(t0, Clock::now()) / n);
    }
    std::sort(per.begin(), per.end());
    Result(setup ? "append_launch_setup" : "append_launch_minibatch", per[per.size() / 2], "us");
  }
  // A training step: 32 launch entries in the minibatch log, then a boundary
  // (what the agent does per step; the cost per entry includes the
  // boundary's share).
  {
    std::vector<double> per;
    uint64_t minibatch = 1000;
    for (int r = 0; r < 5; ++r) {
      const int steps = 1000;
      auto t0 = Clock::now();
      for (int i = 0; i < steps; ++i) {
        if (absl::Status s = (*j)->MarkBoundary(++minibatch); !s.ok()) return Fail(s);
        if (absl::Status s = append(false, 32); !s.ok()) return Fail(s);
      }
      per.push_back(Us(t0, Clock::now()) / (steps * 32));
    }
    std::sort(per.begin(), per.end());
    Result("append_launch_step32", per[per.size() / 2], "us");
  }
  // A training step with an input upload: a boundary, the upload entry with
  // its payload by reference (inline in a mapped log up to 256 KiB), then 15
  // launch entries. Printed per step, and the boundary plus upload alone.
  // 8 KiB is train_mlp's batch of 32, 256 KiB its batch of 1024. With
  // `other_core`, another thread writes the input before each step (as the
  // application does: the journal then reads bytes from another core's cache).
  auto step_bench = [&](size_t input_bytes, bool other_core, const char* step_metric,
                        const char* head_metric) -> int {
    std::vector<char> input(input_bytes, 3);
    std::atomic<int> want{0}, filled{0};
    std::thread filler;
    if (other_core) {
      filler = std::thread([&] {
        for (int k = 1;; ++k) {
          for (;;) {
            const int w = want.load(std::memory_order_acquire);
            if (w < 0) return;
            if (w >= k) break;
          }
          std::memset(input.data(), k & 0xff, input.size());
          filled.store(k, std::memory_order_release);
        }
      });
    }
    std::vector<double> step, head;
    uint64_t minibatch = 100000;
    int k = 0;
    for (int r = 0; r < 5; ++r) {
      const int steps = input_bytes > (64 << 10) ? 200 : 1000;
      double head_us = 0, fill_us = 0;
      auto t0 = Clock::now();
      for (int i = 0; i < steps; ++i) {
        if (other_core) {
          auto f0 = Clock::now();
          want.store(++k, std::memory_order_release);
          while (filled.load(std::memory_order_acquire) < k) {
          }
          fill_us += Us(f0, Clock::now());
        } else {
          input[i % input.size()] = static_cast<char>(i);
        }
        auto h0 = Clock::now();
        if (absl::Status s = (*j)->MarkBoundary(++minibatch); !s.ok()) return Fail(s);
        e.Clear();
        e.set_seq(++seq * 2);
        e.set_api_id(201);
        e.set_args(args.data(), 37);
        e.set_minibatch(minibatch);
        absl::Status s =
            (*j)->AppendMinibatch(&e, absl::string_view(input.data(), input.size()));
        if (!s.ok()) return Fail(s);
        head_us += Us(h0, Clock::now());
        if (absl::Status s2 = append(false, 15); !s2.ok()) return Fail(s2);
      }
      step.push_back((Us(t0, Clock::now()) - fill_us) / steps);
      head.push_back(head_us / steps);
    }
    if (other_core) {
      want.store(-1);
      filler.join();
    }
    std::sort(step.begin(), step.end());
    std::sort(head.begin(), head.end());
    if (step_metric != nullptr) Result(step_metric, step[step.size() / 2], "us");
    Result(head_metric, head[head.size() / 2], "us");
    return 0;
  };
  if (int rc = step_bench(8 << 10, false, "append_step_8kib_input", "append_boundary_and_8kib_input"))
    return rc;
  if (int rc = step_bench(8 << 10, true, nullptr, "append_boundary_and_8kib_input_other_core"))
    return rc;
  if (int rc = step_bench(256 << 10, false, "append_step_256kib_input",
                          "append_boundary_and_256kib_input"))
    return rc;
  if (int rc = step_bench(256 << 10, true, nullptr, "append_boundary_and_256kib_input_other_core"))
    return rc;
  // 256 MiB pinned H2D copy: the payload comes from memory shared with the
  // application (here: a page-aligned, touched buffer).
  if (launches_only) {
    std::filesystem::remove_all(dir);
    return 0;
  }
  const size_t bytes = size_t{256} << 20;
  std::vector<char> src(bytes, 1);
  std::vector<double> per;
  for (int r = 0; r < 4; ++r) {
    if (absl::Status s = (*j)->MarkBoundary(100 + r); !s.ok()) return Fail(s);
    src[r] = static_cast<char>(r);
    auto t0 = Clock::now();
    JournalEntry e;
    e.set_seq(++seq * 2);
    e.set_api_id(100);
    e.set_args(args);
    e.set_minibatch(100 + r);
    absl::Status s = (*j)->AppendMinibatch(std::move(e), absl::string_view(src.data(), bytes));
    if (!s.ok()) return Fail(s);
    per.push_back(Us(t0, Clock::now()) / 1000.0);
  }
  std::sort(per.begin(), per.end());
  Result("append_256mib_payload", per[per.size() / 2], "ms");
  // Compaction of a setup log like a one-rank PyTorch job's: ~84 MiB of
  // live payloads (a model's weights uploaded from pageable memory before
  // the first step), 6000 live records, and per round 2000 records made and
  // dropped (descriptors). Keeping the payload file (the default) against
  // copying the live payloads (what compaction did before, and does where
  // hard links are refused).
  double ms_by_mode[2] = {0, 0};
  for (const bool links : {true, false}) {
    const std::string cdir = dir + (links ? "/compact-link" : "/compact-copy");
    revenant::journal::JournalOptions co = options;
    co.compaction_links_payloads = links;
    co.compaction_enabled = false;  // explicit Compact() calls only
    auto c = Journal::Open(cdir, "bench", 0, co);
    if (!c.ok()) return Fail(c.status());
    uint64_t cseq = 0;
    std::string weights(size_t{84} << 20, '\x11');
    for (int w = 0; w < 4; ++w) {
      JournalEntry we;
      we.set_seq(++cseq * 2);
      we.set_api_id(100);
      we.set_args(args);
      we.add_creates(0x100000 + w);
      weights[w] = static_cast<char>(w);
      absl::Status s = (*c)->AppendSetup(&we, absl::string_view(weights.data(), weights.size() / 4));
      if (!s.ok()) return Fail(s);
    }
    auto records = [&](int n, uint64_t key_base, bool drop) -> absl::Status {
      for (int i = 0; i < n; ++i) {
        JournalEntry r;
        r.set_seq(++cseq * 2);
        r.set_api_id(200);
        r.set_args(args);
        r.add_creates(key_base + i);
        if (absl::Status s = (*c)->AppendSetup(&r); !s.ok()) return s;
        if (!drop) continue;
        JournalEntry d;
        d.set_seq(++cseq * 2);
        d.set_api_id(201);
        d.add_destroys(key_base + i);
        if (absl::Status s = (*c)->AppendSetup(&d); !s.ok()) return s;
      }
      return absl::OkStatus();
    };
    if (absl::Status s = records(6000, 0x200000, false); !s.ok()) return Fail(s);
    std::vector<double> cms;
    for (int r = 0; r < 5; ++r) {
      if (absl::Status s = records(2000, 0x1000000 + (uint64_t{r} << 16), true); !s.ok()) {
        return Fail(s);
      }
      auto t0 = Clock::now();
      if (absl::Status s = (*c)->Compact(); !s.ok()) return Fail(s);
      cms.push_back(Us(t0, Clock::now()) / 1000.0);
    }
    std::sort(cms.begin(), cms.end());
    ms_by_mode[links ? 0 : 1] = cms[cms.size() / 2];
    Result(links ? "compaction_84mib_payload_6000_records_kept" :
                   "compaction_84mib_payload_6000_records_copied",
           cms[cms.size() / 2], "ms");
    c->reset();
    std::filesystem::remove_all(cdir);
  }
  Result("compaction_kept_over_copied", ms_by_mode[0] / ms_by_mode[1], "ratio");
  // A one-rank PyTorch job's journal boundary that keeps the minibatch log in
  // its first chunk (mlp_ddp: ~1 MiB of input and ~100 small records per
  // step, its payloads released behind an asynchronous snapshot every ~155
  // steps): the boundary comes with a payload file hundreds of MiB long,
  // mostly freed pages, and (a) ~90 MiB journaled since the last release
  // (the H100's case: 78 steps, freed by the boundary's unlink in 10.7 ms;
  // the boundary's synchronous snapshot releases nothing, the boundary drops
  // the whole log), or (b) a release right before the boundary (an
  // asynchronous snapshot reaped just before it), its pages still being
  // freed. Timed: the MarkBoundary call
  // alone, the request's share of the agent's executor.
  for (const bool release_last : {false, true}) {
    const std::string bdir = dir + "/boundary";
    auto b = Journal::Open(bdir, "bench", 0, options);
    if (!b.ok()) return Fail(b.status());
    uint64_t bseq = 0;
    std::vector<char> input(size_t{1} << 20, 5);
    const uint64_t chunk = (*b)->minibatch_first_chunk();
    std::vector<double> bms;
    uint64_t minibatch = 1;
    if (absl::Status s = (*b)->MarkBoundary(minibatch); !s.ok()) return Fail(s);
    for (int round = 0; round < 3; ++round) {
      int step = 0;
      // Steps until the log reaches half its first chunk (where the agent
      // places such a boundary, ~708 steps here), releasing every 155.
      while (chunk == 0 ? step < 700 : (*b)->minibatch_log_bytes() < chunk / 2) {
        ++step;
        input[step % input.size()] = static_cast<char>(step);
        JournalEntry up;
        up.set_seq(++bseq * 2);
        up.set_api_id(201);
        up.set_args(args.data(), 37);
        up.set_minibatch(minibatch);
        absl::Status s = (*b)->AppendMinibatch(&up, absl::string_view(input.data(), input.size()));
        if (!s.ok()) return Fail(s);
        for (int i = 0; i < 100; ++i) {
          e.Clear();
          e.set_seq(++bseq * 2);
          e.set_api_id(200);
          e.set_args(args);
          e.set_minibatch(minibatch);
          if (absl::Status s2 = (*b)->AppendMinibatch(&e); !s2.ok()) return Fail(s2);
        }
        if (step % 155 == 0) {
          if (absl::StatusOr<uint64_t> r = (*b)->ReleasePayloadsBefore(bseq * 2); !r.ok()) {
            return Fail(r.status());
          }
          // The job's next steps take ~60 ms (at ~3 ms a step) in which the
          // helper frees those pages; here the steps take microseconds.
          std::this_thread::sleep_for(std::chrono::milliseconds(60));
        }
      }
      if (release_last) {
        if (absl::StatusOr<uint64_t> r = (*b)->ReleasePayloadsBefore(bseq * 2); !r.ok()) {
          return Fail(r.status());
        }
      }
      auto t0 = Clock::now();
      if (absl::Status s = (*b)->MarkBoundary(++minibatch, bseq * 2 + 2); !s.ok()) return Fail(s);
      bms.push_back(Us(t0, Clock::now()) / 1000.0);
      std::printf("boundary after %d steps%s: %.3f ms\n", step,
                  release_last ? ", a release right before it" : "", bms.back());
      // The helper's frees done before the next round's steps (as a real
      // job's next steps would give it time to).
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::sort(bms.begin(), bms.end());
    Result(release_last ? "boundary_log_chunk_release_right_before" : "boundary_log_chunk_88mib_unreleased",
           bms[bms.size() / 2], "ms");
    b->reset();
    std::filesystem::remove_all(bdir);
  }
  j->reset();
  std::filesystem::remove_all(dir);
  std::printf("PASS journal_bench\n");
  return 0;
}
