// Chrome trace event files (chrome://tracing, Perfetto): the measured
// timeline of one run of a Plan, one lane per vEU, one slice per rTask, and
// the Plan's predicted timeline in a second set of lanes.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compiler/program.h"
#include "tessera/status.h"

namespace tessera::tools {

// `measured[i]` is (start, end) in ns of plan.placements[i].
Status write_chrome_trace(const std::string& path, const Program& program,
                          const std::vector<std::pair<int64_t, int64_t>>& measured);

}  // namespace tessera::tools
