#include "runtime/trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "base/strings.h"

namespace tessera {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) o += str_cat("\\u00", "0123456789abcdef"[(c >> 4) & 0xf], "0123456789abcdef"[c & 0xf]);
    else o += c;
  }
  return o;
}

std::string plan_summary_json(const Plan& plan, const std::vector<double>& wait_ms) {
  std::string s = str_cat("{\"policy\":\"", policy_name(plan.policy), "\",\"veus\":", plan.veus,
                          ",\"requested_veus\":", plan.requested_veus > 0 ? plan.requested_veus : plan.veus,
                          ",\"chosen_by\":\"", plan.measured_us > 0 ? "measured" : "predicted", "\",\"predicted_ms\":",
                          str_fixed(plan.predicted_us / 1e3, 6), ",\"measured_ms\":", str_fixed(plan.measured_us / 1e3, 6),
                          ",\"alone_first\":", plan.alone_first ? "true" : "false",
                          ",\"alone_predicted_ms\":", str_fixed(plan.alone_predicted_us / 1e3, 6),
                          ",\"waits\":", plan.waits, ",\"candidates\":[");
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const Plan::Candidate& c = plan.candidates[i];
    s += str_cat(i ? "," : "", "{\"veus\":", c.veus, ",\"policy\":\"", policy_name(c.policy), "\",\"predicted_ms\":",
                 str_fixed(c.predicted_us / 1e3, 6), ",\"measured_ms\":", str_fixed(c.measured_us / 1e3, 6), "}");
  }
  s += "],\"per_veu\":[";
  for (int u = 0; u < plan.veus; ++u) {
    double busy = 0, end = 0;
    for (const TaskPlacement& t : plan.placements)
      if (t.veu == u) {
        busy += t.end_us - t.start_us;
        end = std::max(end, t.end_us);
      }
    s += str_cat(u ? "," : "", "{\"predicted_busy_ms\":", str_fixed(busy / 1e3, 6), ",\"predicted_end_ms\":",
                 str_fixed(end / 1e3, 6), ",\"measured_wait_ms\":",
                 str_fixed(static_cast<size_t>(u) < wait_ms.size() ? wait_ms[static_cast<size_t>(u)] : 0.0, 6), "}");
  }
  return s + "]}";
}


Status write_chrome_trace(const std::string& path, const Program& program,
                          const std::vector<std::pair<int64_t, int64_t>>& measured) {
  if (!program.plan) return failed_precondition("a trace needs the plan executor");
  const Plan& plan = *program.plan;
  std::ofstream out(path);
  if (!out) return not_found(str_cat("cannot write trace file '", path, "'"));
  int64_t t0 = INT64_MAX;
  for (const auto& [s, e] : measured) t0 = std::min(t0, s);
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  // Lane names: pid 1 measured, pid 2 predicted.
  out << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"args\":{\"name\":\"measured\"}},\n";
  out << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":2,\"args\":{\"name\":\"predicted (" << policy_name(plan.policy)
      << ")\"}},\n";
  for (int u = 0; u < plan.veus; ++u)
    for (int pid : {1, 2})
      out << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << pid << ",\"tid\":" << u
          << ",\"args\":{\"name\":\"vEU " << u << "\"}},\n";
  for (size_t i = 0; i < plan.placements.size(); ++i) {
    const TaskPlacement& t = plan.placements[i];
    const Step& st = program.steps[static_cast<size_t>(t.step)];
    const std::string_view kernel_path = st.op->path();
    std::string args = str_cat("{\"node\":\"", json_escape(st.node->name), "\",\"rKernel\":\"", st.kernel->name, "\"",
                               kernel_path.empty() ? "" : str_cat(",\"path\":\"", kernel_path, "\""),
                               ",\"task\":", t.task, ",\"of\":", st.op->tasks(), "}");
    std::string name = json_escape(st.node->op_type);
    char buf[128];
    std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(measured[i].first - t0) / 1e3);
    std::string ts = buf;
    std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(measured[i].second - measured[i].first) / 1e3);
    out << "{\"ph\":\"X\",\"pid\":1,\"tid\":" << t.veu << ",\"name\":\"" << name << "\",\"ts\":" << ts
        << ",\"dur\":" << buf << ",\"args\":" << args << "},\n";
    std::snprintf(buf, sizeof buf, "\"ts\":%.3f,\"dur\":%.3f", t.start_us, t.end_us - t.start_us);
    out << "{\"ph\":\"X\",\"pid\":2,\"tid\":" << t.veu << ",\"name\":\"" << name << "\"," << buf
        << ",\"args\":" << args << "}" << (i + 1 < plan.placements.size() ? ",\n" : "\n");
  }
  out << "]}\n";
  if (!out) return data_loss(str_cat("short write to trace file '", path, "'"));
  return Status();
}

}  // namespace tessera
