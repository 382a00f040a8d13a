// The address layout an agent runs with (agent/agent_main.cc,
// PlaceMappingsAwayFromTheApplication; docs/design.md, "Host memory shared
// with the agent"): bottom-up mappings (ADDR_COMPAT_LAYOUT), far below the
// application's top-down ones, and randomization on. revenant-run sets it in
// an agent's process before the exec; an agent started otherwise re-executes
// itself once to take it.
#ifndef REVENANT_COMMON_AGENT_LAYOUT_H_
#define REVENANT_COMMON_AGENT_LAYOUT_H_

#include <sys/personality.h>

namespace revenant {

// The personality an agent wants, from the one it has (personality(0xffffffff)).
inline unsigned long AgentPersonality(unsigned long current) {
  return (current | ADDR_COMPAT_LAYOUT) & ~static_cast<unsigned long>(ADDR_NO_RANDOMIZE);
}

// In a child between fork and exec (async-signal-safe: system calls only):
// the exec'd agent then starts with its layout and does not re-execute.
inline void SetAgentPersonality() {
  const int current = personality(0xffffffff);
  if (current != -1) personality(AgentPersonality(static_cast<unsigned long>(current)));
}

// The exit status of a spare agent that was handed a rank and could not take
// it (the rank's backend or socket failed; EX_TEMPFAIL): revenant-run then
// starts a new process for the rank instead of leaving it without an agent.
inline constexpr int kAgentExitTakeoverFailed = 75;

}  // namespace revenant

#endif  // REVENANT_COMMON_AGENT_LAYOUT_H_
