// revenant-run: launches a job under Revenant on one node, or this node's
// part of a job spanning nodes (one revenant-run per node, coordinated
// through etcd: docs/multinode.md).
//
//   revenant-run -n 4 --backend=host --host_kernels=libtrain_host_kernels.so -- ./train --steps 100
//   revenant-run --nnodes=2 --node-rank=K --nproc-per-node=4 --rdzv-endpoint=HOST:2379 \
//       --rdzv-id=job7 --node-addr=ADDR train.py      # on node K of 2
//
// For each rank it starts a revenant-agent, waits until the agent listens,
// then starts the application with librevenant_shim.so preloaded and a
// torchrun-like environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; across nodes, rank
// = node rank * nproc-per-node + local rank). Output lines are prefixed with "[rN]" (the
// application) or "[aN]" (its agent). The exit status is the first failing
// rank's (128 + signal for a signal), or 0. Everything the job made (agents,
// the per-job directory with rings, sockets and journals) is cleaned up on
// exit, on Ctrl-C and when a rank crashes. Across nodes with --max-restarts,
// a node lost or restarted makes every launcher stop its ranks and replace
// its own process (same command line) to start them again in the job's next
// rendezvous round (docs/multinode.md, "A restarted node rejoining").
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/agent_layout.h"
#include "common/events.h"
#include "common/knobs.h"
#include "common/kv.h"
#include "common/random.h"
#include "recovery/coordinator.h"
#include "recovery/etcd_client.h"
#include "recovery/etcd_store.h"

extern char** environ;

ABSL_FLAG(int, n, 1, "number of ranks (application processes, one agent each)");
ABSL_FLAG(int, nproc_per_node, 0, "torchrun's name for -n (also --nproc-per-node)");
ABSL_FLAG(int, nnodes, 1,
          "nodes of the job (torchrun's flag); more than 1 needs --rdzv-endpoint and --rdzv-id");
ABSL_FLAG(int, node_rank, 0, "this node's rank, 0..nnodes-1 (torchrun's flag)");
ABSL_FLAG(std::string, rdzv_endpoint, "",
          "etcd v3 (HOST:PORT) holding the coordination of a job spanning nodes (torchrun's "
          "flag; docs/multinode.md); empty: the embedded coordinator of one node");
ABSL_FLAG(std::string, rdzv_id, "",
          "the job's name in etcd, the same on every node (torchrun's flag; letters, digits, "
          "'.', '_', '-')");
ABSL_FLAG(std::string, rdzv_backend, "etcd",
          "torchrun's flag: only etcd (etcd-v2 is accepted as the same) with --rdzv-endpoint");
ABSL_FLAG(std::string, node_addr, "127.0.0.1",
          "with --rdzv-endpoint: this node's address the other nodes reach (Gloo collectives; "
          "node 0's is MASTER_ADDR)");
ABSL_FLAG(double, rdzv_timeout, 120,
          "with --rdzv-endpoint: seconds to wait for every node to join, and for etcd to answer "
          "before the job ends");
ABSL_FLAG(int, rdzv_lease, 10,
          "with --rdzv-endpoint: seconds of the lease holding this node's membership (a node "
          "whose launcher stopped renewing it for this long is lost)");
ABSL_FLAG(int, max_restarts, 0,
          "with --rdzv-endpoint: times the job may restart every node's ranks for a node that "
          "was lost or rejoins (torchrun's flag; each restart runs the application again from "
          "its start, or from its own checkpoint); 0: a lost node ends the job with an error "
          "naming its ranks, and a restarted node is refused");
ABSL_FLAG(bool, standalone, false, "torchrun's single-node rendezvous: the default here");
ABSL_FLAG(std::string, module, "",
          "run the program as `python3 -m MODULE args` (torchrun's -m/--module)");
ABSL_FLAG(bool, no_python, false,
          "run a *.py program directly instead of through the interpreter (torchrun's "
          "--no-python)");
ABSL_FLAG(std::string, python, "python3",
          "the interpreter for a *.py program or --module (found on PATH)");
ABSL_FLAG(std::string, backend, "host", "agent backend: host (CPU device) or cuda");
ABSL_FLAG(std::string, collectives, "nccl",
          "cuda backend: engine of the NCCL calls, nccl (real NCCL; ranks sharing a GPU get an "
          "NCCL_HOSTID each) or gloo (staged through pinned host memory)");
ABSL_FLAG(int, gpus, 0,
          "cuda backend: GPUs to spread the ranks over (rank r uses GPU r % gpus); 0: GPU r");
ABSL_FLAG(std::string, host_kernels, "",
          "colon-separated host kernel libraries for the host backend");
ABSL_FLAG(std::string, job_root, "/dev/shm", "where the per-job directory is made (tmpfs)");
ABSL_FLAG(std::string, agent, "",
          "the agent binary for every job (default: found next to this one: revenant-agent, or "
          "its testing variant revenant-agent-testing for a job with --chaos or a measurement "
          "or test knob set)");
ABSL_FLAG(std::string, shim, "", "librevenant_shim.so (default: found next to this one)");
ABSL_FLAG(double, timeout, 0, "kill the job after this many seconds (0: no limit)");
ABSL_FLAG(bool, stop_on_failure, true,
          "when an application rank exits with an error, stop the other ranks at once (as "
          "torchrun does: its peers would otherwise wait in their collectives); false: let them "
          "run to their end or --timeout");
ABSL_FLAG(double, agent_start_timeout, 30, "seconds to wait for the agents to listen");
ABSL_FLAG(bool, quiet, false, "no progress lines from revenant-run itself");
ABSL_FLAG(bool, recover, true,
          "replace an agent that dies and let its rank continue (the journal rebuilds it)");
ABSL_FLAG(int, max_recoveries, 16, "give up replacing agents after this many");
ABSL_FLAG(std::string, minibatch, "auto",
          "minibatch boundaries in the agents: auto (detected from the call stream) or manual "
          "(only the application's revenantMarkStep calls)");
ABSL_FLAG(uint64_t, validate_every, 0,
          "agents replay every K-th minibatch from its boundary and report device state that "
          "does not reproduce (docs/recovery.md, \"Validator\"); 0: off");
ABSL_FLAG(int, spares, 0,
          "pre-start this many spare agents (backend and CUDA context initialized); a dead "
          "agent's rank goes to a spare instead of a new process, and a new spare is started");
ABSL_FLAG(bool, warm_replacement, true,
          "without --spares: start a dead agent's replacement process at once, on the rank's "
          "GPU, as a spare (its backend and CUDA context start while the death window runs), "
          "and hand it the rank when the window ends; false: a new process once the window "
          "ended");
ABSL_FLAG(int, death_window_ms, -1,
          "agent deaths within this many milliseconds of the first are replaced in one "
          "recovery epoch (-1: 0 for a job of one rank; 200 with --spares or "
          "--warm_replacement, whose replacements are starting or ready by then; else 800; a "
          "later death is a death during recovery and gets an epoch of its own)");
ABSL_FLAG(std::string, snapshots, "auto",
          "boundary snapshots of each rank's device state (docs/recovery.md): on, off, or auto "
          "(on when the job has one rank, which has no replica to recover from)");
ABSL_FLAG(std::string, snapshot_every, "auto",
          "with boundary snapshots: every N-th step boundary takes one, or auto (the first, then "
          "as often as keeps snapshots under 2 % of the job's time; the steps in between are "
          "replayed from the last snapshot after a failure)");
ABSL_FLAG(uint64_t, snapshot_min_interval_ms, 1000,
          "with --snapshot_every=auto: a timed snapshot comes at least this many milliseconds "
          "after the last one ended (the replay after a failure spans up to this much of the "
          "job); 0: the snapshots' own duration alone sets the pace");
ABSL_FLAG(uint64_t, snapshot_max_log_mib, 256,
          "with --snapshot_every=auto: the minibatch log's bytes a replay may still read "
          "(its records, and the payloads not released behind a one-rank job's finished "
          "snapshots) and the setup log's growth in the journal's minibatch that force a journal "
          "boundary with a synchronous snapshot; from three quarters of it a one-rank job's next "
          "step takes an asynchronous one (once they grew by an eighth of it past what the last "
          "one left)");
ABSL_FLAG(double, snapshot_log_state_ratio, 1.0,
          "with --snapshot_every=auto, one rank: the bound of --snapshot_max_log_mib is at least "
          "this many times the last snapshot's bytes (a large state's snapshots then come no "
          "more often than its bytes are journaled again), at most 4 times "
          "--snapshot_max_log_mib; 0: --snapshot_max_log_mib alone");
ABSL_FLAG(bool, snapshot_async, true,
          "with boundary snapshots in a one-rank job: the snapshots between journal boundaries "
          "are asynchronous (the device copies on a stream of its own, a thread finishes the "
          "file behind; docs/recovery.md); false: every snapshot synchronous");
ABSL_FLAG(bool, upload_hold, true,
          "hold large pinned uploads instead of capturing them: each application process keeps "
          "an upload's source write-protected (userfaultfd) until the journal needs its bytes, "
          "so the upload runs alone on the link, and the device hashes what it received (a "
          "source found changed behind the agent's back turns holding off); needs a userfaultfd "
          "that takes kernel-mode faults (root, access to /dev/userfaultfd, or "
          "vm.unprivileged_userfaultfd=1), else uploads are captured and the agent says why; "
          "false: every upload captured by the device (docs/recovery.md, \"Held uploads\")");
ABSL_FLAG(bool, snapshot_keep_spare, false,
          "keep the snapshot file given up at a journal boundary for the next snapshot (no new "
          "file per snapshot; 2x the live bytes in snapshot files); false (the default): 1x "
          "between snapshots, a new file per snapshot (made ahead once the snapshot comes near "
          "with --snapshot_spare_ahead, else its pages allocated by the copying threads)");
ABSL_FLAG(bool, snapshot_spare_ahead, true,
          "the agent makes snapshot files ahead on a thread of its own: the first one while "
          "the allocations grow; with --snapshot_keep_spare, after the first snapshot, a spare "
          "of its size (registering it holds the driver ~20 ms per 512 MiB); without, the "
          "next snapshot's file once that snapshot comes near (2x the live bytes from then "
          "until it finished)");
ABSL_FLAG(bool, snapshot_staged, true,
          "a synchronous snapshot into a snapshot file not registered yet (the first one's) "
          "copies through the agent's registered staging buffers instead of registering the "
          "file (docs/recovery.md, \"Files\"); false: the file is registered first");
ABSL_FLAG(bool, snapshot_register_behind, true,
          "with --snapshot_spare_ahead and --snapshot_staged: the first snapshot's file (left "
          "unregistered) is registered on the store's thread after it, so that the asynchronous "
          "snapshots that take it copy straight into it; false: they stage through the buffers");
ABSL_FLAG(int, launch_graph_max, 64,
          "cuda backend: the agent holds back plain kernel launches of one stream while it "
          "has further requests in hand and issues up to this many as one CUDA graph "
          "(docs/design.md, \"Launches issued as graphs\"); below 2: every launch on its own");
ABSL_FLAG(std::string, journal_thread, "auto",
          "agents journal plain asynchronous requests on a second thread: behind "
          "(write-behind), ahead, off, or auto (behind with at least 4 CPUs and 3 per rank; "
          "docs/design.md)");
ABSL_FLAG(bool, journal, true, "agents journal calls (needed for recovery; off to measure its cost)");
ABSL_FLAG(std::string, events_file, "",
          "copy the job's recovery events (JSON lines) here before the job directory goes");
ABSL_FLAG(std::string, chaos, "",
          "fault injection for the first agent of one rank, e.g. rank=1,calls=500 or "
          "rank=1,minibatch=3,calls=40,point=after_execute (points: before_append, "
          "after_append, after_execute, after_reply; with snapshots, at the boundary of `minibatch`: "
          "snapshot_partial, after_snapshot, after_boundary, and corrupt_snapshot=1 to damage "
          "the snapshot first; at the `minibatch`-th asynchronous snapshot: snapshot_inflight, "
          "snapshot_finish); the agents are then the testing variant, revenant-agent-testing, "
          "which has these crash points");
ABSL_FLAG(double, recovery_timeout, 120,
          "seconds a rank waits for a replacement agent before its calls fail");

namespace revenant {
namespace run {
namespace {

namespace fs = std::filesystem;

bool g_quiet = false;

void Say(const std::string& line) {
  if (g_quiet) return;
  std::string out = "[revenant-run] " + line + "\n";
  ssize_t ignored = write(STDERR_FILENO, out.data(), out.size());
  (void)ignored;
}

std::string SelfDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : self.parent_path().string();
}

// Finds a Revenant binary: the flag, the environment, then the places Bazel
// puts it relative to this binary (bazel-bin/tools/revenant-run ->
// bazel-bin/agent/revenant-agent) or an install directory (same folder).
std::string Locate(const std::string& flag_value, knobs::Id env, const std::string& rel,
                   const std::string& file) {
  if (!flag_value.empty()) return flag_value;
  if (std::optional<std::string> e = knobs::String(env)) return *e;
  const std::string self = SelfDir();
  for (const std::string& candidate :
       {self + "/" + file, self + "/../" + rel + "/" + file,
        self + "/revenant-run.runfiles/revenant/" + rel + "/" + file}) {
    if (access(candidate.c_str(), R_OK) == 0) return fs::weakly_canonical(candidate).string();
  }
  return "";
}

struct Child {
  pid_t pid = -1;
  std::string label;  // "r0" / "a0" / "s0" (a spare agent)
  bool agent = false;
  int rank = 0;
  bool exited = false;
  int status = 0;
  // A spare agent waiting for an assignment on `assign_fd` (its stdin).
  bool spare = false;
  int assign_fd = -1;
  // A spare started at an agent's death for its rank (--warm_replacement),
  // not one of the --spares pool.
  bool warm = false;
  // A spare that was handed a rank (an agent of the job since).
  bool assigned = false;
};

struct Pipe {
  int fd;
  int target;  // STDOUT_FILENO / STDERR_FILENO
  std::string label;
  std::string partial;
  pid_t pid = -1;  // whose output
};

// fork + exec with stdout/stderr into pipes, a process group of its own and
// a parent-death signal so nothing outlives revenant-run.
// `stdin_write`: when not null, the child's stdin is a pipe whose write end
// is returned there (a spare's assignment channel). `agent`: the child is an
// agent and starts with the agent's address layout (common/agent_layout.h).
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            const std::string& label, std::vector<Pipe>* pipes, int* stdin_write = nullptr,
            bool agent = false) {
  int out[2], err[2], in[2] = {-1, -1};
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return -1;
  if (stdin_write != nullptr && pipe2(in, O_CLOEXEC) != 0) return -1;
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    if (in[0] >= 0) dup2(in[0], STDIN_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (agent) SetAgentPersonality();
    execvpe(args[0], args.data(), envp.data());
    const char* why = strerror(errno);
    ssize_t ignored = write(STDERR_FILENO, "revenant-run: cannot execute ", 29);
    ignored = write(STDERR_FILENO, args[0], strlen(args[0]));
    ignored = write(STDERR_FILENO, ": ", 2);
    ignored = write(STDERR_FILENO, why, strlen(why));
    ignored = write(STDERR_FILENO, "\n", 1);
    (void)ignored;
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  if (in[0] >= 0) close(in[0]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    if (in[1] >= 0) close(in[1]);
    return -1;
  }
  setpgid(pid, pid);
  pipes->push_back({out[0], STDOUT_FILENO, label, "", pid});
  pipes->push_back({err[0], STDERR_FILENO, label, "", pid});
  if (stdin_write != nullptr) *stdin_write = in[1];
  return pid;
}

void Emit(Pipe& p, const char* data, size_t n, bool flush) {
  p.partial.append(data, n);
  size_t start = 0;
  while (true) {
    size_t nl = p.partial.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = "[" + p.label + "] " + p.partial.substr(start, nl - start + 1);
    ssize_t ignored = write(p.target, line.data(), line.size());
    (void)ignored;
    start = nl + 1;
  }
  p.partial.erase(0, start);
  if (flush && !p.partial.empty()) {
    std::string line = "[" + p.label + "] " + p.partial + "\n";
    ssize_t ignored = write(p.target, line.data(), line.size());
    (void)ignored;
    p.partial.clear();
  }
}

int FreePort() {
  // An ephemeral port the OS considers free now (for MASTER_PORT).
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 29500;
  if (s >= 0 && bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (s >= 0) close(s);
  return port;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Prints each recovery's timeline: milliseconds from the agent's death.
void PrintTimeline(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  long long t0 = -1;
  int shown = 0;
  while (std::getline(in, line)) {
    auto field = [&](const std::string& key) -> std::string {
      const std::string k = "\"" + key + "\":";
      size_t p = line.find(k);
      if (p == std::string::npos) return "";
      p += k.size();
      if (line[p] == '"') {
        size_t e = line.find('"', p + 1);
        return line.substr(p + 1, e - p - 1);
      }
      size_t e = line.find_first_of(",}", p);
      return line.substr(p, e - p);
    };
    const long long t = std::atoll(field("t_us").c_str());
    const std::string event = field("event");
    if (event == "agent_died" && (t0 < 0 || shown == 0)) {
      t0 = t;
      Say("recovery timeline (ms after the agent's death):");
    }
    if (t0 < 0) continue;
    Say(absl::StrFormat("  %+8.1f  rank %s  %-28s %s", (t - t0) / 1000.0, field("rank"), event,
                        field("detail")));
    ++shown;
  }
}

// torchrun's command line: `revenant-run --nproc-per-node=4 train.py --lr 1e-3`.
// The launcher's own flags come first, the program and its arguments after
// the first argument that is not a flag (or after `--`); flag names may be
// spelled with '-' or '_' (as torchrun accepts both), and a non-bool flag
// may take its value from the next argument. `-m MODULE` starts the program.
// Returns argv for absl (the launcher's part, names normalized) and puts
// the program's part in *program; *module gets -m's module.
std::vector<std::string> SplitCommandLine(int argc, char** argv,
                                          std::vector<std::string>* program,
                                          std::string* module) {
  std::vector<std::string> own = {argv[0]};
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the program
    if (a == "-m" || a == "--module" || a == "-module") {
      if (i + 1 < argc) *module = argv[++i];
      ++i;
      break;  // the module's arguments follow
    }
    const size_t dashes = a[1] == '-' ? 2 : 1;
    const size_t eq = a.find('=');
    std::string name = a.substr(dashes, eq == std::string::npos ? std::string::npos : eq - dashes);
    std::replace(name.begin(), name.end(), '-', '_');
    if (absl::StartsWith(name, "module=")) name = "module";
    std::string normalized = "--" + name + (eq == std::string::npos ? "" : a.substr(eq));
    own.push_back(normalized);
    if (eq != std::string::npos) continue;
    // `--flag value` for a flag that is not a bool (and not `--noflag`).
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag != nullptr && !flag->IsOfType<bool>() && i + 1 < argc) own.push_back(argv[++i]);
  }
  program->assign(argv + std::min(i, argc), argv + argc);
  return own;
}

int Main(int argc, char** argv) {
  // This very command line, for a restart of this node's ranks in a new
  // rendezvous round (the process replaces itself: see the main loop's end).
  const std::vector<std::string> self_argv(argv, argv + argc);
  absl::SetProgramUsageMessage(absl::StrCat(
      "revenant-run [-n N] [--backend=host|cuda] [--collectives=nccl|gloo] [--gpus=G] "
      "[--host_kernels=a.so:b.so] [--] program args...\n"
      "       revenant-run --nproc-per-node=N [options] train.py args...   (torchrun's form: "
      "a *.py program runs with python3; -m MODULE; --no-python)",
      "\n\nEnvironment (docs/knobs.md lists every variable):\n",
      knobs::Help(knobs::Kind::kProduct)));
  std::vector<std::string> program;
  std::string module;
  std::vector<std::string> own = SplitCommandLine(argc, argv, &program, &module);
  {
    std::vector<char*> own_argv;
    for (std::string& a : own) own_argv.push_back(a.data());
    own_argv.push_back(nullptr);
    std::vector<char*> rest =
        absl::ParseCommandLine(static_cast<int>(own_argv.size()) - 1, own_argv.data());
    if (rest.size() > 1) {
      std::fprintf(stderr, "revenant-run: unexpected argument '%s' among the launcher's flags\n",
                   rest[1]);
      return 2;
    }
  }
  g_quiet = absl::GetFlag(FLAGS_quiet);
  if (module.empty()) module = absl::GetFlag(FLAGS_module);
  if (!module.empty()) {
    program.insert(program.begin(), {absl::GetFlag(FLAGS_python), "-m", module});
  } else if (!program.empty() && absl::EndsWith(program[0], ".py") &&
             !absl::GetFlag(FLAGS_no_python)) {
    program.insert(program.begin(), absl::GetFlag(FLAGS_python));
  }
  if (program.empty()) {
    std::fprintf(stderr, "revenant-run: no program given\n%s\n",
                 absl::ProgramUsageMessage().data());
    return 2;
  }
  const std::string rdzv_endpoint = absl::GetFlag(FLAGS_rdzv_endpoint);
  const std::string rdzv_id = absl::GetFlag(FLAGS_rdzv_id);
  const bool multinode = !rdzv_endpoint.empty();
  const int nnodes = absl::GetFlag(FLAGS_nnodes);
  const int node_rank = absl::GetFlag(FLAGS_node_rank);
  if (!multinode && (nnodes != 1 || node_rank != 0)) {
    std::fprintf(stderr,
                 "revenant-run: --nnodes=%d --node-rank=%d: a job of several nodes needs "
                 "--rdzv-endpoint=HOST:PORT (etcd) and --rdzv-id=JOB (docs/multinode.md)\n",
                 nnodes, node_rank);
    return 2;
  }
  if (multinode) {
    const std::string backend = absl::GetFlag(FLAGS_rdzv_backend);
    if (backend != "etcd" && backend != "etcd-v2") {
      std::fprintf(stderr, "revenant-run: --rdzv-backend=%s: only etcd is supported\n",
                   backend.c_str());
      return 2;
    }
    if (nnodes < 1 || nnodes > 4096 || node_rank < 0 || node_rank >= nnodes) {
      std::fprintf(stderr, "revenant-run: --node-rank=%d must be in 0..%d (--nnodes=%d)\n",
                   node_rank, nnodes - 1, nnodes);
      return 2;
    }
    if (rdzv_id.empty() || rdzv_id.size() > 128 ||
        !std::all_of(rdzv_id.begin(), rdzv_id.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
        })) {
      std::fprintf(stderr,
                   "revenant-run: --rdzv-endpoint needs --rdzv-id=JOB (1-128 letters, digits, "
                   "'.', '_', '-'; the same on every node)\n");
      return 2;
    }
    if (absl::GetFlag(FLAGS_rdzv_lease) < 2 || absl::GetFlag(FLAGS_rdzv_timeout) <= 0) {
      std::fprintf(stderr, "revenant-run: --rdzv_lease must be >= 2 and --rdzv_timeout > 0\n");
      return 2;
    }
    if (absl::GetFlag(FLAGS_max_restarts) < 0 || absl::GetFlag(FLAGS_max_restarts) > 1000) {
      std::fprintf(stderr, "revenant-run: --max-restarts must be in 0..1000\n");
      return 2;
    }
  }
  if (absl::GetFlag(FLAGS_nproc_per_node) != 0 && absl::GetFlag(FLAGS_n) != 1 &&
      absl::GetFlag(FLAGS_nproc_per_node) != absl::GetFlag(FLAGS_n)) {
    std::fprintf(stderr, "revenant-run: -n %d and --nproc-per-node=%d disagree\n",
                 absl::GetFlag(FLAGS_n), absl::GetFlag(FLAGS_nproc_per_node));
    return 2;
  }
  const int n = absl::GetFlag(FLAGS_nproc_per_node) != 0 ? absl::GetFlag(FLAGS_nproc_per_node)
                                                         : absl::GetFlag(FLAGS_n);
  if (absl::GetFlag(FLAGS_minibatch) != "auto" && absl::GetFlag(FLAGS_minibatch) != "manual") {
    std::fprintf(stderr, "revenant-run: --minibatch must be auto or manual\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_collectives) != "nccl" && absl::GetFlag(FLAGS_collectives) != "gloo") {
    std::fprintf(stderr, "revenant-run: --collectives must be nccl or gloo\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_gpus) < 0) {
    std::fprintf(stderr, "revenant-run: --gpus must be >= 0\n");
    return 2;
  }
  const std::string snapshots = absl::GetFlag(FLAGS_snapshots);
  if (snapshots != "auto" && snapshots != "on" && snapshots != "off") {
    std::fprintf(stderr, "revenant-run: --snapshots must be auto, on or off\n");
    return 2;
  }
  {
    const std::string every = absl::GetFlag(FLAGS_snapshot_every);
    int n = 0;
    if (every != "auto" && (!absl::SimpleAtoi(every, &n) || n <= 0)) {
      std::fprintf(stderr, "revenant-run: --snapshot_every must be auto or a positive number\n");
      return 2;
    }
  }
  {
    const std::string mode = absl::GetFlag(FLAGS_journal_thread);
    if (mode != "auto" && mode != "behind" && mode != "ahead" && mode != "off") {
      std::fprintf(stderr, "revenant-run: --journal_thread must be auto, behind, ahead or off\n");
      return 2;
    }
  }
  if (n < 1 || n > 1024) {
    std::fprintf(stderr, "revenant-run: -n must be between 1 and 1024\n");
    return 2;
  }
  // Ranks: this node's are base..base+n-1 of `world` (one node: 0..n-1).
  const int world = multinode ? nnodes * n : n;
  const int base = multinode ? node_rank * n : 0;
  // The testing variant of the agent for a job that uses what only it has
  // (docs/design.md, "The testing variant"): --chaos (its named crash
  // points) or a measurement or test knob in the environment (the agents
  // inherit it). An agent named by --agent or REVENANT_AGENT_BIN serves
  // every job as named.
  std::string testing_why;
  if (!absl::GetFlag(FLAGS_chaos).empty()) {
    testing_why = "--chaos";
  } else if (const std::vector<std::string> set = knobs::TestingKnobsSet(); !set.empty()) {
    testing_why = absl::StrJoin(set, ", ");
  }
  const bool agent_named =
      !absl::GetFlag(FLAGS_agent).empty() || knobs::String(knobs::Id::kAgentBin).has_value();
  const bool testing_agent = !testing_why.empty() && !agent_named;
  const std::string agent_file = testing_agent ? "revenant-agent-testing" : "revenant-agent";
  const std::string agent_bin =
      Locate(absl::GetFlag(FLAGS_agent), knobs::Id::kAgentBin, "agent", agent_file);
  if (agent_bin.empty() && testing_agent) {
    std::fprintf(stderr,
                 "revenant-run: cannot find revenant-agent-testing, the agent's testing variant, "
                 "which this job needs for %s; build //agent:revenant-agent-testing (next to "
                 "revenant-run) or pass --agent\n",
                 testing_why.c_str());
    return 2;
  }
  const std::string shim =
      Locate(absl::GetFlag(FLAGS_shim), knobs::Id::kShim, "shim", "librevenant_shim.so");
  if (agent_bin.empty() || shim.empty()) {
    std::fprintf(stderr,
                 "revenant-run: cannot find %s; pass --agent/--shim or set "
                 "REVENANT_AGENT_BIN/REVENANT_SHIM\n",
                 agent_bin.empty() ? "revenant-agent" : "librevenant_shim.so");
    return 2;
  }
  if (testing_agent) Say("agents: revenant-agent-testing (the testing variant, for " + testing_why + ")");
  std::string host_kernels = absl::GetFlag(FLAGS_host_kernels);
  if (host_kernels.empty()) host_kernels = knobs::String(knobs::Id::kHostKernels).value_or("");
  // Absolute paths: the agents do not share our working directory's meaning.
  {
    std::vector<std::string> abs;
    for (const auto& p : absl::StrSplit(host_kernels, ':', absl::SkipEmpty())) {
      abs.push_back(fs::absolute(std::string(p)).string());
    }
    host_kernels = absl::StrJoin(abs, ":");
  }

  // Signals arrive through a signalfd in the main loop.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  const int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
  signal(SIGPIPE, SIG_IGN);

  // The job's name, and so its directory's, is random: no other user can
  // guess it to create the directory first (mkdir fails on one that exists).
  absl::StatusOr<std::string> job_id = RandomHex(8);
  if (!job_id.ok()) {
    std::fprintf(stderr, "revenant-run: cannot name the job: %s\n",
                 job_id.status().ToString().c_str());
    return 1;
  }
  const std::string job = *job_id;
  const std::string job_dir = absl::GetFlag(FLAGS_job_root) + "/revenant-" + job;
  if (mkdir(job_dir.c_str(), 0700) != 0) {
    std::fprintf(stderr, "revenant-run: cannot create %s: %s\n", job_dir.c_str(),
                 std::strerror(errno));
    return 1;
  }
  std::unique_ptr<recovery::EtcdStore> etcd;
  // Also ends this node's part in etcd when the job ends before the main
  // loop (the others then stop instead of waiting for it).
  auto cleanup_dir = [&] {
    if (etcd) (void)etcd->Finish(false, absl::StrCat("the launcher of node ", node_rank,
                                                      " stopped before its ranks ran"));
    std::error_code ec;
    fs::remove_all(job_dir, ec);
  };
  // A job spanning nodes: this node joins it in etcd (its membership on a
  // lease), every node's launcher waits for the others (bounded), node 0
  // publishes MASTER_ADDR/MASTER_PORT; the coordinator's epochs and events
  // go through etcd.
  std::string master_addr = "127.0.0.1";
  int port = 0;
  if (multinode) {
    const absl::Duration rdzv_timeout = absl::Seconds(absl::GetFlag(FLAGS_rdzv_timeout));
    recovery::EtcdClientOptions co;
    co.unreachable_timeout = std::min(rdzv_timeout, absl::Seconds(30));
    co.request_timeout = std::min(co.unreachable_timeout, absl::Seconds(5));
    absl::StatusOr<std::unique_ptr<recovery::EtcdClient>> client =
        recovery::EtcdClient::Create(rdzv_endpoint, co);
    if (!client.ok()) {
      std::fprintf(stderr, "revenant-run: --rdzv-endpoint: %s\n",
                   std::string(client.status().message()).c_str());
      cleanup_dir();
      return 2;
    }
    recovery::EtcdStoreOptions so;
    so.job_id = rdzv_id;
    so.node_rank = node_rank;
    so.nnodes = nnodes;
    so.job_dir = job_dir;
    so.lease_ttl_s = absl::GetFlag(FLAGS_rdzv_lease);
    so.max_restarts = absl::GetFlag(FLAGS_max_restarts);
    // A node rank held by a launcher that died (restarted at once, before
    // etcd let its lease go): wait out that lease, bounded.
    so.holder_wait = std::min(rdzv_timeout, absl::Seconds(so.lease_ttl_s + 2));
    etcd = std::make_unique<recovery::EtcdStore>(*std::move(client), so);
    const absl::Time t0 = absl::Now();
    absl::Status joined = etcd->Join(n, absl::GetFlag(FLAGS_node_addr));
    // Ctrl-C / SIGTERM while waiting for the other nodes (the signals are
    // blocked, waiting for the main loop's signalfd): stop waiting.
    auto interrupted = [] {
      sigset_t pending;
      return sigpending(&pending) == 0 &&
             (sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1 ||
              sigismember(&pending, SIGHUP) == 1);
    };
    if (joined.ok()) joined = etcd->WaitForNodes(n, rdzv_timeout, interrupted);
    absl::StatusOr<std::string> master = absl::UnknownError("");
    if (joined.ok()) {
      master = node_rank == 0
                   ? etcd->Agree("master", absl::StrCat(absl::GetFlag(FLAGS_node_addr), " ",
                                                        FreePort()))
                   : etcd->AwaitValue("master", rdzv_timeout);
      if (!master.ok()) joined = master.status();
    }
    if (joined.ok()) {
      std::vector<std::string> parts = absl::StrSplit(*master, ' ');
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port)) {
        joined = absl::FailedPreconditionError("bad master entry in etcd: " + *master);
      } else {
        master_addr = parts[0];
      }
    }
    if (!joined.ok()) {
      std::fprintf(stderr, "revenant-run: node %d of job '%s': %s\n", node_rank, rdzv_id.c_str(),
                   std::string(joined.message()).c_str());
      (void)etcd->Finish(false, std::string(joined.message()));
      cleanup_dir();
      etcd.reset();
      return 1;
    }
    etcd->StartWatcher();
    Say(absl::StrCat("node ", node_rank, " of ", nnodes, " joined job '", rdzv_id, "' in etcd at ",
                     rdzv_endpoint, " (ranks ", base, "..", base + n - 1, " of ", world, ")",
                     etcd->round() > 0 ? absl::StrCat(", round ", etcd->round(), " (restart ",
                                                      etcd->round(), " of --max-restarts=",
                                                      absl::GetFlag(FLAGS_max_restarts), ")")
                                       : "",
                     " in ", absl::ToInt64Milliseconds(absl::Now() - t0), " ms; master ",
                     master_addr, ":", port));
  }
  // Replacements started at the death (below) need no window for their
  // start, only for deaths that come together.
  const bool warm_replacement =
      absl::GetFlag(FLAGS_warm_replacement) && absl::GetFlag(FLAGS_spares) <= 0;
  int death_window_ms = absl::GetFlag(FLAGS_death_window_ms);
  if (death_window_ms < 0) {
    // A job of one rank has no other death to wait for.
    const bool replacement_ready = absl::GetFlag(FLAGS_spares) > 0 || warm_replacement;
    death_window_ms = world == 1 ? 0 : replacement_ready ? 200 : 800;
  }
  recovery::Coordinator coordinator({job_dir, absl::GetFlag(FLAGS_recover),
                                     absl::GetFlag(FLAGS_max_recoveries),
                                     absl::Milliseconds(death_window_ms), 3, absl::Seconds(30),
                                     etcd.get()});

  std::vector<Child> children;
  std::vector<Pipe> pipes;
  std::map<int, std::vector<std::string>> agent_args;  // by rank
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) base_env.emplace_back(*e);
  }
  if (multinode) {
    // The agents' collectives rendezvous in etcd and listen on this node's address.
    base_env.push_back("REVENANT_RDZV_ENDPOINT=" + rdzv_endpoint);
    base_env.push_back("REVENANT_RDZV_PREFIX=" + etcd->round_prefix() + "gloo/");
    base_env.push_back("REVENANT_COLLECTIVE_ADDR=" + absl::GetFlag(FLAGS_node_addr));
  }
  // The agents' environment also says how many ranks share this machine
  // (LOCAL_WORLD_SIZE, as the applications get it): how long a waiter of the
  // shared-memory transport spins before it sleeps depends on the CPUs per
  // rank (transport/shm_channel.cc, DefaultSpinNanos).
  std::vector<std::string> agent_env;
  for (const std::string& e : base_env) {
    if (!absl::StartsWith(e, "LOCAL_WORLD_SIZE=")) agent_env.push_back(e);
  }
  agent_env.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", n));

  // --chaos=key=value,...[;key=value,...]: one plan per rank.
  std::map<int, std::map<std::string, std::string>> chaos_plans;
  for (absl::string_view plan : absl::StrSplit(absl::GetFlag(FLAGS_chaos), ';', absl::SkipEmpty())) {
    std::map<std::string, std::string> chaos;
    for (absl::string_view kv : absl::StrSplit(plan, ',', absl::SkipEmpty())) {
      std::vector<std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (p.size() != 2) {
        std::fprintf(stderr, "revenant-run: bad --chaos entry '%s'\n", std::string(kv).c_str());
        return 2;
      }
      chaos[p[0]] = p[1];
    }
    const int rank = chaos.count("rank") ? std::atoi(chaos["rank"].c_str()) : base;
    if (rank < base || rank >= base + n) {
      std::fprintf(stderr, "revenant-run: --chaos names rank %d, not one of this node's (%d..%d)\n",
                   rank, base, base + n - 1);
      cleanup_dir();
      return 2;
    }
    chaos_plans[rank] = chaos;
  }
  if (!chaos_plans.empty()) Say(absl::StrCat("chaos: ", absl::GetFlag(FLAGS_chaos)));

  const absl::Time start = absl::Now();
  for (int l = 0; l < n; ++l) {
    const int r = base + l;  // the rank
    const std::string rank_dir = absl::StrCat(job_dir, "/rank", r);
    mkdir(rank_dir.c_str(), 0700);
    std::vector<std::string> args = {agent_bin,
                                     "--socket=" + rank_dir + "/agent.sock",
                                     "--job_dir=" + rank_dir,
                                     absl::StrCat("--rank=", r),
                                     "--backend=" + absl::GetFlag(FLAGS_backend),
                                     "--host_kernels=" + host_kernels,
                                     "--job=" + job,
                                     absl::StrCat("--journal=", absl::GetFlag(FLAGS_journal)),
                                     "--snapshots=" + snapshots,
                                     "--snapshot_every=" + absl::GetFlag(FLAGS_snapshot_every),
                                     absl::StrCat("--snapshot_max_log_mib=", absl::GetFlag(FLAGS_snapshot_max_log_mib)),
                                     absl::StrCat("--snapshot_log_state_ratio=", absl::GetFlag(FLAGS_snapshot_log_state_ratio)),
                                     absl::StrCat("--snapshot_min_interval_ms=", absl::GetFlag(FLAGS_snapshot_min_interval_ms)),
                                     std::string("--snapshot_async=") + (absl::GetFlag(FLAGS_snapshot_async) ? "true" : "false"),
                                     std::string("--snapshot_keep_spare=") + (absl::GetFlag(FLAGS_snapshot_keep_spare) ? "true" : "false"),
                                     std::string("--upload_hold=") + (absl::GetFlag(FLAGS_upload_hold) ? "true" : "false"),
                                     std::string("--snapshot_spare_ahead=") + (absl::GetFlag(FLAGS_snapshot_spare_ahead) ? "true" : "false"),
                                     std::string("--snapshot_staged=") + (absl::GetFlag(FLAGS_snapshot_staged) ? "true" : "false"),
                                     "--journal_thread=" + absl::GetFlag(FLAGS_journal_thread),
                                     absl::StrCat("--launch_graph_max=", absl::GetFlag(FLAGS_launch_graph_max)),
                                     absl::StrCat("--world_size=", world),
                                     "--die_with_parent"};
    // The agent uses the GPU of its local rank.
    if (absl::GetFlag(FLAGS_backend) == "cuda") {
      const int gpus = absl::GetFlag(FLAGS_gpus);
      args.push_back(absl::StrCat("--device=", gpus > 0 ? l % gpus : l));
      args.push_back("--collectives=" + absl::GetFlag(FLAGS_collectives));
      // More ranks than GPUs: ranks share a GPU on purpose (cuda_nccl.h).
      if (gpus > 0 && gpus < n) args.push_back("--gpu_shared");
    }
    if (absl::GetFlag(FLAGS_validate_every) > 0) {
      args.push_back(absl::StrCat("--validate_every=", absl::GetFlag(FLAGS_validate_every)));
    }
    if (absl::GetFlag(FLAGS_minibatch) != "auto") {
      args.push_back("--minibatch=" + absl::GetFlag(FLAGS_minibatch));
    }
    // Passed only when off (the agent's default is on), so that an agent
    // built before the flag (REVENANT_AGENT_BIN, for a comparison) starts.
    if (!absl::GetFlag(FLAGS_snapshot_register_behind)) {
      args.push_back("--snapshot_register_behind=false");
    }
    if (absl::GetFlag(FLAGS_recover)) {
      args.push_back(absl::StrCat("--recovery_timeout_s=", absl::GetFlag(FLAGS_recovery_timeout)));
    }
    agent_args[r] = args;  // replacements get no chaos
    if (chaos_plans.count(r)) {
      std::map<std::string, std::string>& chaos = chaos_plans[r];
      if (chaos.count("recovery")) args.push_back("--chaos_in_recovery");
      if (chaos.count("minibatch")) {
        args.push_back("--chaos_minibatch=" + chaos["minibatch"]);
        args.push_back("--chaos_calls_into_minibatch=" + (chaos.count("calls") ? chaos["calls"] : "1"));
      } else if (chaos.count("calls")) {
        args.push_back("--chaos_after_calls=" + chaos["calls"]);
      }
      if (chaos.count("point")) args.push_back("--chaos_point=" + chaos["point"]);
      if (chaos.count("corrupt_snapshot")) args.push_back("--chaos_corrupt_snapshot");
    }
    pid_t pid = Spawn(args, agent_env, absl::StrCat("a", r), &pipes, nullptr, /*agent=*/true);
    if (pid < 0) {
      std::fprintf(stderr, "revenant-run: cannot start the agent of rank %d\n", r);
      cleanup_dir();
      return 1;
    }
    children.push_back({pid, absl::StrCat("a", r), true, r});
  }
  // Wait until every agent listens (its socket exists), bounded.
  const absl::Time agents_deadline =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_agent_start_timeout));
  for (int l = 0; l < n; ++l) {
    const int r = base + l;
    const std::string sock = absl::StrCat(job_dir, "/rank", r, "/agent.sock");
    while (access(sock.c_str(), F_OK) != 0) {
      int status = 0;
      if (waitpid(children[l].pid, &status, WNOHANG) == children[l].pid) {
        // Print what it said before giving up.
        for (Pipe& p : pipes) {
          char buf[4096];
          int fl = fcntl(p.fd, F_GETFL);
          fcntl(p.fd, F_SETFL, fl | O_NONBLOCK);
          ssize_t k;
          while ((k = read(p.fd, buf, sizeof(buf))) > 0) Emit(p, buf, k, false);
          Emit(p, "", 0, true);
        }
        std::fprintf(stderr, "revenant-run: the agent of rank %d exited during start (%d)\n", r,
                     ExitCode(status));
        for (auto& c : children) kill(-c.pid, SIGKILL);
        cleanup_dir();
        return 1;
      }
      if (absl::Now() > agents_deadline) {
        std::fprintf(stderr, "revenant-run: the agent of rank %d did not start within %.0f s\n",
                     r, absl::GetFlag(FLAGS_agent_start_timeout));
        for (auto& c : children) kill(-c.pid, SIGKILL);
        cleanup_dir();
        return 1;
      }
      usleep(5000);
    }
  }
  Say(absl::StrCat("job ", job, ": ", n, " rank(s)", multinode ? " on this node" : "", ", ",
                   absl::GetFlag(FLAGS_backend),
                   " backend, agents ready in ",
                   absl::ToInt64Milliseconds(absl::Now() - start), " ms"));

  if (!multinode) port = FreePort();
  const double timeout_s = absl::GetFlag(FLAGS_timeout);
  const double timeout_s_flag = timeout_s;
  for (int l = 0; l < n; ++l) {
    const int r = base + l;
    const std::string rank_dir = absl::StrCat(job_dir, "/rank", r);
    std::vector<std::string> env = base_env;
    env.push_back("LD_PRELOAD=" + shim);
    env.push_back("REVENANT_AGENT_SOCKET=" + rank_dir + "/agent.sock");
    env.push_back("REVENANT_JOB_DIR=" + rank_dir);
    env.push_back(absl::StrCat("REVENANT_RANK=", r));
    env.push_back(absl::StrCat("RANK=", r));
    env.push_back(absl::StrCat("LOCAL_RANK=", l));
    env.push_back(absl::StrCat("WORLD_SIZE=", world));
    env.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", n));
    env.push_back(absl::StrCat("GROUP_RANK=", multinode ? node_rank : 0));
    env.push_back(absl::StrCat("GROUP_WORLD_SIZE=", multinode ? nnodes : 1));
    env.push_back(absl::StrCat("ROLE_RANK=", r));
    env.push_back(absl::StrCat("ROLE_WORLD_SIZE=", world));
    if (multinode) env.push_back("TORCHELASTIC_RUN_ID=" + rdzv_id);
    // torchrun's: how many times the job's ranks started again (the round).
    env.push_back(absl::StrCat("TORCHELASTIC_RESTART_COUNT=", multinode ? etcd->round() : 0));
    env.push_back(absl::StrCat("TORCHELASTIC_MAX_RESTARTS=",
                               multinode ? absl::GetFlag(FLAGS_max_restarts) : 0));
    env.push_back("MASTER_ADDR=" + master_addr);
    env.push_back(absl::StrCat("MASTER_PORT=", port));
    if (absl::GetFlag(FLAGS_recover)) {
      env.push_back(absl::StrCat("REVENANT_RECOVERY_TIMEOUT_S=",
                                 absl::GetFlag(FLAGS_recovery_timeout)));
    }
    pid_t pid = Spawn(program, env, absl::StrCat("r", r), &pipes);
    if (pid < 0) {
      std::fprintf(stderr, "revenant-run: cannot start rank %d\n", r);
      for (auto& c : children) kill(-c.pid, SIGKILL);
      cleanup_dir();
      return 1;
    }
    children.push_back({pid, absl::StrCat("r", r), false, r});
  }

  // Spare agents: the arguments of this node's first agent without its rank,
  // socket, directory and GPU; the warm-up backend uses the range of rank
  // `world` (no rank of the job has it) and, on the cuda backend, GPU (i mod
  // GPUs), or `device` (a warm replacement: the dead rank's GPU, whose
  // primary context the rank's backend then finds made).
  const int spares_wanted = std::max(0, absl::GetFlag(FLAGS_spares));
  int spare_seq = 0;
  const std::string spare_dir = job_dir + "/spares";
  if (spares_wanted > 0 || warm_replacement) mkdir(spare_dir.c_str(), 0700);
  auto device_of = [&](int rank) {
    const int gpus = absl::GetFlag(FLAGS_gpus);
    return gpus > 0 ? (rank - base) % gpus : rank - base;
  };
  auto start_spare = [&](std::vector<Child>* out, int device = -1) {
    const int index = spare_seq++;
    std::vector<std::string> args;
    for (const std::string& a : agent_args.begin()->second) {
      if (absl::StartsWith(a, "--socket=") || absl::StartsWith(a, "--job_dir=") ||
          absl::StartsWith(a, "--rank=") || absl::StartsWith(a, "--device=")) {
        continue;
      }
      args.push_back(a);
    }
    args.push_back("--spare");
    args.push_back("--job_dir=" + spare_dir);
    args.push_back(absl::StrCat("--rank=", world));
    if (absl::GetFlag(FLAGS_backend) == "cuda") {
      const int gpus = absl::GetFlag(FLAGS_gpus);
      args.push_back(
          absl::StrCat("--device=", device >= 0 ? device : index % (gpus > 0 ? gpus : n)));
    }
    args.push_back(absl::StrCat("--spare_wait_s=", timeout_s_flag > 0 ? timeout_s_flag + 10 : 3600));
    int assign_fd = -1;
    const std::string label = absl::StrCat("s", index);
    pid_t pid = Spawn(args, agent_env, label, &pipes, &assign_fd, /*agent=*/true);
    if (pid < 0) {
      Say("cannot start a spare agent");
      return;
    }
    Child c{pid, label, true, -1};
    c.spare = true;
    c.assign_fd = assign_fd;
    c.warm = device >= 0;
    out->push_back(c);
    coordinator.AddSpare(pid);
    const std::string warm_detail =
        c.warm ? absl::StrCat(", warm replacement (device ", device, ")") : std::string();
    RecordEvent(job_dir, "spare_started", -1, coordinator.epoch(),
                absl::StrCat("pid ", pid, warm_detail));
  };
  {
    std::vector<Child> spares;
    for (int i = 0; i < spares_wanted; ++i) start_spare(&spares);
    for (Child& c : spares) children.push_back(c);
    if (spares_wanted > 0) Say(absl::StrCat(spares.size(), " spare agent(s) started"));
  }

  const absl::Time job_deadline =
      timeout_s > 0 ? absl::Now() + absl::Seconds(timeout_s) : absl::InfiniteFuture();
  int result = 0;
  std::string end_reason;  // what set `result` first (recorded in etcd for the other nodes)
  auto note_end = [&](const std::string& why) {
    if (end_reason.empty()) end_reason = why;
  };
  bool first_failure_reported = false;
  bool stopping = false;
  auto apps_running = [&] {
    for (const auto& c : children)
      if (!c.agent && !c.exited) return true;
    return false;
  };
  // The job may start again in a new round (etcd, restarts left).
  auto restart_possible = [&] {
    return etcd && etcd->round() < absl::GetFlag(FLAGS_max_restarts);
  };
  auto stop_all = [&](int sig) {
    for (auto& c : children)
      if (!c.exited) kill(-c.pid, sig);
  };
  absl::Time kill_deadline = absl::InfiniteFuture();
  absl::Time next_health_check = absl::Now();
  std::string node_failure;  // why another node or etcd ended the job
  std::string restart_why;   // why this node's ranks start again in a new round
  absl::Time restart_grace = absl::InfiniteFuture();  // see "ranks failed" below
  auto coordinator_event = [&](const std::string& event, const std::string& detail) {
    RecordEvent(job_dir, event, -1, coordinator.epoch(), detail);
  };

  while (true) {
    std::vector<pollfd> pfds;
    pfds.push_back({sfd, POLLIN, 0});
    for (const Pipe& p : pipes) pfds.push_back({p.fd, POLLIN, 0});
    // At most 100 ms, less when a death window ends sooner (its replacements
    // start on time rather than up to a poll later).
    const absl::Duration until_due =
        std::min(absl::Milliseconds(100),
                 coordinator.replacements_due() - absl::Now() + absl::Milliseconds(1));
    poll(pfds.data(), pfds.size(),
         static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(until_due))));
    for (size_t i = 1; i < pfds.size(); ++i) {
      Pipe& p = pipes[i - 1];
      if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[65536];
        ssize_t k = read(p.fd, buf, sizeof(buf));
        if (k > 0) {
          Emit(p, buf, k, false);
        } else {
          Emit(p, "", 0, true);
          close(p.fd);
          p.fd = -1;
        }
      }
    }
    pipes.erase(std::remove_if(pipes.begin(), pipes.end(), [](const Pipe& p) { return p.fd < 0; }),
                pipes.end());
    if (pfds[0].revents & POLLIN) {
      signalfd_siginfo si;
      while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM || si.ssi_signo == SIGHUP) {
          Say(absl::StrCat("signal ", si.ssi_signo, ": stopping the job"));
          if (result == 0) result = 128 + static_cast<int>(si.ssi_signo);
          note_end(absl::StrCat("its launcher got signal ", si.ssi_signo));
          stopping = true;
          stop_all(SIGTERM);
          kill_deadline = absl::Now() + absl::Seconds(3);
        }
        break;
      }
    }
    // Reap children.
    std::vector<Child> replacements;
    for (auto& c : children) {
      if (c.exited) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.exited = true;
        c.status = status;
        const int code = ExitCode(status);
        if (c.spare) {
          // A spare that left without an assignment (its wait ended): keep K.
          if (c.assign_fd >= 0) close(c.assign_fd);
          c.assign_fd = -1;
          coordinator.RemoveSpare(c.pid);
          if (!stopping) {
            Say(absl::StrCat("spare agent ", c.label, " exited (status ", code, ")"));
            if (WIFEXITED(status) && code == 0 && !c.warm) start_spare(&replacements);
          }
        } else if (c.agent) {
          if (!stopping) {
            Say(absl::StrCat("the agent of rank ", c.rank, " exited (",
                             WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status))
                                                 : absl::StrCat("status ", code),
                             ")"));
            // A replacement comes on the same socket: the rank's shim
            // reconnects and hands it the channel; it replays the journal.
            // A spare that could not take the rank it was handed is
            // replaced too (its exit is no verdict on the rank's requests).
            const bool takeover_failed =
                c.assigned && WIFEXITED(status) && code == kAgentExitTakeoverFailed;
            if (takeover_failed) {
              Say(absl::StrCat("the spare agent handed rank ", c.rank,
                               " could not take it: another replacement"));
              coordinator.ReplacementFailed(c.rank, absl::Now());
            }
            const bool planned =
                !takeover_failed && coordinator.AgentDied(c.rank, status, absl::Now());
            // Its replacement's process starts now, on its GPU, while the
            // death window runs; the window's end hands it the rank.
            if (planned && warm_replacement &&
                coordinator.spares_waiting() < coordinator.replacements_pending_count()) {
              start_spare(&replacements, device_of(c.rank));
            }
            if (coordinator.gave_up() && !stopping) {
              Say("recovery given up: " + coordinator.give_up_reason() + "; stopping the job");
              if (result == 0) result = 1;
              note_end("recovery given up: " + coordinator.give_up_reason());
              stopping = true;
              stop_all(SIGTERM);
              kill_deadline = absl::Now() + absl::Seconds(3);
            }
          }
        } else {
          if (code != 0 && !first_failure_reported && restart_why.empty()) {
            first_failure_reported = true;
            if (result == 0) result = code;
            note_end(absl::StrCat("rank ", c.rank, " failed with status ", code));
            // An application is not recovered (only agents are): its peers
            // would wait for it in their next collective until a timeout.
            // With restarts left on etcd the node waits for its other ranks
            // instead (a lost node may be the cause; see "ranks failed").
            if (!stopping && !restart_possible() && absl::GetFlag(FLAGS_stop_on_failure) &&
                apps_running()) {
              Say(absl::StrCat("rank ", c.rank, " failed with status ", code,
                               ": stopping the other ranks (--stop_on_failure=false lets them "
                               "run on)"));
              stopping = true;
              stop_all(SIGTERM);
              kill_deadline = absl::Now() + absl::Seconds(3);
            } else {
              Say(absl::StrCat("rank ", c.rank, " failed with status ", code));
            }
          }
        }
      }
    }
    for (const recovery::Coordinator::Replacement& rep :
         stopping ? std::vector<recovery::Coordinator::Replacement>()
                  : coordinator.DueReplacements(absl::Now())) {
      const int rank = rep.rank;
      const int epoch = coordinator.epoch();
      Child* spare = nullptr;
      // (A warm replacement started in this pass is still in `replacements`.)
      for (std::vector<Child>* list : {&children, &replacements}) {
        for (Child& c : *list) {
          if (rep.spare && c.pid == *rep.spare && c.spare && !c.exited && c.assign_fd >= 0) {
            spare = &c;
          }
        }
      }
      if (spare != nullptr) {
        const std::string rank_dir = absl::StrCat(job_dir, "/rank", rank);
        const std::string msg = recovery::Coordinator::AssignmentMessage(
            rank, rank_dir + "/agent.sock", rank_dir, device_of(rank));
        const bool sent = write(spare->assign_fd, msg.data(), msg.size()) ==
                          static_cast<ssize_t>(msg.size());
        close(spare->assign_fd);
        spare->assign_fd = -1;  // never offered again
        if (sent) {
          spare->spare = false;  // an agent of the job from now on
          spare->assigned = true;
          spare->rank = rank;
          spare->label = absl::StrCat("a", rank);
          for (Pipe& p : pipes) {
            if (p.pid == spare->pid) p.label = spare->label;
          }
          if (spare->warm) {
            coordinator.ReplacementStarted(
                rank, absl::StrCat("warm process, pid ", spare->pid, " (started at the death)"),
                absl::Now());
            Say(absl::StrCat("recovery epoch ", epoch, ": replacement agent for rank ", rank,
                             " started (pid ", spare->pid, ", warm since the death)"));
          } else {
            coordinator.ReplacementStarted(rank, absl::StrCat("spare, pid ", spare->pid),
                                           absl::Now());
            Say(absl::StrCat("recovery epoch ", epoch, ": spare agent pid ", spare->pid,
                             " takes rank ", rank));
          }
          if (spares_wanted > 0) start_spare(&replacements);
          continue;
        }
        // The spare is gone: a new process instead.
        Say(absl::StrCat("spare agent pid ", spare->pid, " did not take the assignment"));
        kill(-spare->pid, SIGKILL);
      }
      pid_t pid = Spawn(agent_args[rank], agent_env, absl::StrCat("a", rank), &pipes, nullptr,
                        /*agent=*/true);
      if (pid > 0) {
        coordinator.ReplacementStarted(rank, absl::StrCat("new process, pid ", pid), absl::Now());
        replacements.push_back({pid, absl::StrCat("a", rank), true, rank});
        Say(absl::StrCat("recovery epoch ", epoch, ": replacement agent for rank ", rank,
                         " started (pid ", pid, ")"));
      }
    }
    for (Child& c : replacements) children.push_back(c);
    if (coordinator.gave_up() && !stopping) {
      // No epoch could be declared (the store failed past its retries).
      Say("recovery given up: " + coordinator.give_up_reason() + "; stopping the job");
      if (result == 0) result = 1;
      note_end("recovery given up: " + coordinator.give_up_reason());
      stopping = true;
      stop_all(SIGTERM);
      kill_deadline = absl::Now() + absl::Seconds(3);
    }
    if (etcd && !stopping && absl::Now() >= next_health_check) {
      // The other nodes, as the etcd watcher last saw them (never blocks).
      next_health_check = absl::Now() + absl::Milliseconds(200);
      const recovery::EtcdStore::Health h = etcd->health();
      coordinator.ObserveEpoch(etcd->LatestEpoch());
      std::string why;
      auto ranks_of = [&](int k) {
        std::vector<int> ranks;
        for (int l = 0; l < n; ++l) ranks.push_back(k * n + l);
        return absl::StrCat("node ", k, " (rank", n > 1 ? "s " : " ", absl::StrJoin(ranks, ", "),
                            ")");
      };
      const bool restarts_left = etcd->round() < absl::GetFlag(FLAGS_max_restarts);
      std::string restart;
      if (h.status.ok() && h.newer_round > etcd->round()) {
        restart = absl::StrCat("job '", rdzv_id, "' moved to round ", h.newer_round,
                               " (a node rejoined, or another node restarts for a lost one)");
      } else if (!h.lost_nodes.empty()) {
        std::vector<std::string> lost;
        for (int k : h.lost_nodes) lost.push_back(ranks_of(k));
        if (restarts_left) {
          restart = absl::StrCat("lost ", absl::StrJoin(lost, ", "), " of job '", rdzv_id,
                                 "' (its launcher's lease in etcd expired, or it restarted); "
                                 "waiting for it to rejoin");
        } else {
          why = absl::StrCat("lost ", absl::StrJoin(lost, ", "), " of job '", rdzv_id,
                             "': its launcher's lease in etcd expired (the launcher or its "
                             "machine died, or it lost etcd); its ranks cannot be recovered here",
                             absl::GetFlag(FLAGS_max_restarts) > 0
                                 ? absl::StrCat(" and the job has restarted ", etcd->round(),
                                                " time(s) (--max-restarts=",
                                                absl::GetFlag(FLAGS_max_restarts), ")")
                                 : " (--max-restarts=0)");
        }
        coordinator_event("node_lost", restart.empty() ? why : restart);
      } else if (!h.failed_nodes.empty()) {
        why = absl::StrCat(ranks_of(h.failed_nodes[0].first), " of job '", rdzv_id,
                           "' ended with a failure: ", h.failed_nodes[0].second);
      } else if (!h.status.ok()) {
        why = std::string(h.status.message());
      }
      if (!restart.empty()) {
        Say(restart + "; stopping this node's ranks to start them again in the next round");
        coordinator_event("job_restart", restart);
        restart_why = restart;
        stopping = true;
        stop_all(SIGTERM);
        kill_deadline = absl::Now() + absl::Seconds(3);
      } else if (!why.empty()) {
        Say(why + "; stopping the job");
        node_failure = why;
        if (result == 0) result = 1;
        stopping = true;
        stop_all(SIGTERM);
        kill_deadline = absl::Now() + absl::Seconds(3);
      }
    }
    if (!stopping && absl::Now() > job_deadline) {
      Say(absl::StrCat("timeout after ", timeout_s, " s: stopping the job"));
      result = 124;
      note_end(absl::StrCat("timeout after ", timeout_s, " s"));
      stopping = true;
      stop_all(SIGTERM);
      kill_deadline = absl::Now() + absl::Seconds(3);
    }
    if (!apps_running() && !stopping && result != 0 && restart_possible() &&
        restart_grace == absl::InfiniteFuture()) {
      // This node's ranks failed while restarts are left: the cause may be
      // another node lost a moment ago (a rank whose peers or whose
      // MASTER_ADDR store died fails before that node's lease expires).
      // Wait one lease for the watcher to tell before ending the job.
      restart_grace = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_rdzv_lease) + 2);
      Say(absl::StrCat("node ", node_rank, "'s ranks failed; waiting up to ",
                       absl::GetFlag(FLAGS_rdzv_lease) + 2,
                       " s for a lost node (a restart) before ending the job"));
    }
    if (!apps_running() && !stopping &&
        (restart_grace == absl::InfiniteFuture() || absl::Now() >= restart_grace)) {
      // Every rank is done: stop the agents.
      stopping = true;
      stop_all(SIGTERM);
      kill_deadline = absl::Now() + absl::Seconds(3);
    }
    bool all_exited = true;
    for (const auto& c : children) all_exited &= c.exited;
    if (all_exited && pipes.empty()) break;
    if (all_exited && absl::Now() > kill_deadline + absl::Seconds(1)) break;  // orphaned pipes
    if (absl::Now() > kill_deadline) {
      stop_all(SIGKILL);
      kill_deadline = absl::Now() + absl::Seconds(2);
    }
  }
  if (etcd && !restart_why.empty()) {
    // A new round: this node leaves etcd (no end marker: the job goes on),
    // its job directory goes, and this process replaces itself with the same
    // command line; the new one joins the job's next round as a restarted
    // node does, and its ranks start again.
    etcd->Leave();
    etcd.reset();
    std::error_code ec;
    fs::remove_all(job_dir, ec);
    Say(absl::StrCat("node ", node_rank, " restarts its ranks (", restart_why, ")"));
    std::vector<char*> args;
    for (const std::string& a : self_argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    close(sfd);
    execv("/proc/self/exe", args.data());
    std::fprintf(stderr, "revenant-run: cannot restart node %d's ranks: exec: %s\n", node_rank,
                 std::strerror(errno));
    return 1;
  }
  PrintTimeline(job_dir + "/events.jsonl");
  if (etcd) {
    // done/<K> or failed/<K>: the other nodes tell this node's end from a loss.
    absl::Status s = etcd->Finish(
        result == 0, !node_failure.empty() ? node_failure
                     : !end_reason.empty()
                         ? end_reason
                         : absl::StrCat("node ", node_rank, "'s ranks ended with status ", result));
    if (!s.ok()) Say(absl::StrCat("could not record this node's end in etcd: ", s.message()));
  }
  if (!absl::GetFlag(FLAGS_events_file).empty()) {
    std::error_code ec;
    fs::copy_file(job_dir + "/events.jsonl", absl::GetFlag(FLAGS_events_file),
                  fs::copy_options::overwrite_existing, ec);
  }
  cleanup_dir();
  Say(absl::StrCat("job ", job, " finished with status ", result, " after ",
                   absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)))));
  return result;
}

}  // namespace
}  // namespace run
}  // namespace revenant

int main(int argc, char** argv) { return revenant::run::Main(argc, argv); }
