// Recovery events: one JSON line per event, appended to <job>/events.jsonl
// by every process of a job (revenant-run, agents, shims), so a recovery's
// timeline can be read back in one place:
//
//   {"t_us":1764403200123456,"event":"replay_done","rank":1,"epoch":1,"detail":"53 requests"}
//
// Appends are single write(2) calls with O_APPEND (atomic for lines this
// short); failures are ignored (events are diagnostics, never control).
#ifndef REVENANT_COMMON_EVENTS_H_
#define REVENANT_COMMON_EVENTS_H_

#include <string>

namespace revenant {

// The job directory that holds events.jsonl for a rank directory
// (/dev/shm/revenant-<job>/rank<r> -> /dev/shm/revenant-<job>).
std::string JobRootOf(const std::string& rank_dir);

void RecordEvent(const std::string& job_root, const std::string& event, int rank, int epoch,
                 const std::string& detail = "");

// The job's current recovery epoch: the number in <job_root>/epoch, which
// revenant-run replaces (rename) when it declares one; 0 when there is none
// (no file, unreadable, or an empty job_root).
int ReadRecoveryEpoch(const std::string& job_root);

}  // namespace revenant

#endif  // REVENANT_COMMON_EVENTS_H_
