// Reports of a Plan's runs.
//
// Chrome trace event files (chrome://tracing, Perfetto): the measured
// timeline of one run of a Plan, one lane per vEU, one slice per rTask, and
// the Plan's predicted timeline in a second set of lanes. And the "plan"
// object of `tessera run --json` and Session::plan_json().
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compiler/program.h"
#include "tessera/status.h"

namespace tessera {

// `measured[i]` is (start, end) in ns of plan.placements[i].
Status write_chrome_trace(const std::string& path, const Program& program,
                          const std::vector<std::pair<int64_t, int64_t>>& measured);

// {"policy":..., "veus":..., "requested_veus":..., "chosen_by":
// "measured"|"predicted", "predicted_ms":..., "measured_ms":...,
// "alone_first":..., "alone_predicted_ms":..., "waits":...,
// "candidates":[...], "per_veu":[{"predicted_busy_ms", "predicted_end_ms",
// "measured_wait_ms"}]}: how the Plan was chosen, what it predicts, and
// per vEU the median wait the runs measured (`wait_ms`, may be empty).
std::string plan_summary_json(const Plan& plan, const std::vector<double>& wait_ms);
// `s` as the inside of a JSON string.
std::string json_escape(const std::string& s);

}  // namespace tessera
