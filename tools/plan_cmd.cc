// tessera plan MODEL.onnx: compile a model into a Plan and show it: a
// summary, the instruction lists (--list), and a Gantt chart (--svg).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>

#include "tessera/tessera.h"
#include "cli.h"
#include "commands.h"
#include "text.h"

namespace tessera::tools {
namespace {

const cli::Command kPlan = {
    "plan",
    "tessera plan MODEL.onnx|MODEL.tsx [options]",
    "Compile a model into a Plan (rTasks scheduled onto vEUs) and show it.",
    cli::with_compile_options({
        {"--veus", "N", "vEUs to schedule onto (default: one per core, from hwloc)"},
        {"--policy", "NAME", "auto | wavefront | critical-path (default auto)"},
        {"--shape", "NAME=DIMS", "bind a dynamic input's shape", true},
        {"--svg", "FILE", "draw the predicted schedule as a Gantt chart (vEU x time, coloured by op, waits as lines)"},
        {"--list", "", "print every vEU's instruction list"},
    }),
    "examples:\n  tessera plan build/zoo/nasnet_like.onnx --veus 2 --svg plan.svg\n"
    "  tessera plan build/zoo/add_chains8.onnx --policy wavefront --list\n"};

std::string colour_of(const std::string& op) {
  // Stable colour per op type.
  uint32_t h = static_cast<uint32_t>(std::hash<std::string>{}(op));
  int hue = static_cast<int>(h % 360);
  return cat("hsl(", hue, ",65%,60%)");
}

std::string escape_xml(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

Status write_svg(const std::string& path, const PlanInfo& plan) {
  const double width = 1200, lane = 28, left = 60, top = 30;
  const double span = std::max(plan.predicted_us, 1e-3);
  const double scale = (width - left - 20) / span;
  std::ofstream out(path);
  if (!out) return not_found(cat("cannot write '", path, "'"));
  double height = top + lane * plan.veus + 60;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  out << "<text x=\"" << left << "\" y=\"18\">" << escape_xml(plan.source) << " — " << policy_name(plan.policy) << ", "
      << plan.veus << " vEUs, predicted " << cat(std::round(plan.predicted_us * 10) / 10) << " µs, "
      << plan.waits << " waits</text>\n";
  for (int u = 0; u < plan.veus; ++u)
    out << "<text x=\"4\" y=\"" << top + lane * u + lane * 0.65 << "\">vEU " << u << "</text>\n";
  // Where each (vEU, index) ends, to draw waits from.
  std::map<std::pair<int, int>, const PlanTask*> at;
  for (const PlanTask& t : plan.tasks) at[{t.veu, t.index}] = &t;
  for (const PlanTask& t : plan.tasks) {
    const PlanStep& st = plan.steps[static_cast<size_t>(t.step)];
    double x = left + t.start_us * scale, w = std::max((t.end_us - t.start_us) * scale, 0.5);
    out << "<rect x=\"" << x << "\" y=\"" << top + lane * t.veu + 3 << "\" width=\"" << w << "\" height=\""
        << lane - 6 << "\" fill=\"" << colour_of(st.op) << "\" stroke=\"#333\" stroke-width=\"0.3\"><title>"
        << escape_xml(st.op) << " '" << escape_xml(st.node) << "' rTask " << t.rtask << "/" << st.rtasks << " ("
        << st.kernel << "), " << cat(std::round((t.end_us - t.start_us) * 100) / 100)
        << " µs</title></rect>\n";
  }
  // Waits: a line from the producer's end to the waiter's start.
  for (int u = 0; u < plan.veus; ++u) {
    int index = 0;
    for (const PlanInstr& in : plan.program[static_cast<size_t>(u)]) {
      if (in.kind == PlanInstr::Kind::kRun) ++index;
      if (in.kind != PlanInstr::Kind::kWait) continue;
      auto src = at.find({in.a, static_cast<int>(in.b - 1)});
      auto dst = at.find({u, index});
      if (src == at.end() || dst == at.end()) continue;
      out << "<line x1=\"" << left + src->second->end_us * scale << "\" y1=\"" << top + lane * in.a + lane / 2
          << "\" x2=\"" << left + dst->second->start_us * scale << "\" y2=\"" << top + lane * u + lane / 2
          << "\" stroke=\"#c00\" stroke-width=\"0.8\" opacity=\"0.7\"/>\n";
    }
  }
  // Legend.
  std::map<std::string, int> ops;
  for (const PlanStep& st : plan.steps) ++ops[st.op];
  double x = left;
  for (auto& [op, n] : ops) {
    out << "<rect x=\"" << x << "\" y=\"" << height - 25 << "\" width=\"10\" height=\"10\" fill=\"" << colour_of(op)
        << "\"/><text x=\"" << x + 13 << "\" y=\"" << height - 16 << "\">" << escape_xml(op) << "</text>\n";
    x += 24 + 7.5 * static_cast<double>(op.size());
  }
  out << "</svg>\n";
  return out ? Status() : data_loss(cat("short write to '", path, "'"));
}

}  // namespace

int plan_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kPlan, argc, argv, 1, "expected exactly one MODEL.onnx", &a); rc >= 0) return rc;
  const std::string model = a.positional[0];
  SessionOptions so;
  auto veus = a.get_int("--veus", 0, 1, 256);
  if (!veus.ok()) return cli::usage_error(kPlan, veus.status().message());
  so.veus = static_cast<int>(*veus);
  if (a.has("--policy") && !policy_parse(a.get("--policy"), &so.policy))
    return cli::usage_error(kPlan, cat("--policy must be auto, wavefront or critical-path, got '", a.get("--policy"), "'"));
  CompileOptions co;
  if (Status st = cli::parse_shape_flags(a, &co.shapes); !st.ok()) return cli::usage_error(kPlan, st.message());
  if (Status st = cli::apply_compile_flags(a, &co); !st.ok()) return cli::usage_error(kPlan, st.message());
  if (is_executable_file(model)) {
    std::string opt = cli::first_compile_flag(a);
    for (const char* o : {"--veus", "--policy", "--shape"})
      if (a.has(o)) opt = o;
    if (!opt.empty())
      return cli::usage_error(kPlan, cat(opt, " applies when compiling; ", model, " is a compiled Executable"));
  }
  auto rt = connect();
  if (!rt.ok()) return cli::fail(rt.status());
  auto m = rt->compile(model, co);
  if (!m.ok()) return cli::fail(m.status());
  auto planned = m->plan(so);
  if (!planned.ok()) return cli::fail(planned.status());
  const PlanInfo& plan = *planned;
  std::string place;
  for (const DeviceInfo& d : rt->devices())
    if (d.name == so.device) place = d.place;
  std::printf("model      %s\n", plan.source.c_str());
  std::printf("policy     %s\n", std::string(policy_name(plan.policy)).c_str());
  std::printf("vEUs       %d (%s)\n", plan.veus, place.c_str());
  std::printf("ops        %zu, rTasks %lld\n", plan.steps.size(), static_cast<long long>(plan.tasks.size()));
  std::printf("waits      %lld, signals %lld\n", static_cast<long long>(plan.waits), static_cast<long long>(plan.signals));
  std::printf("predicted  %.1f us (costs %s)\n", plan.predicted_us, plan.costs_profiled ? "profiled" : "analytic");
  if (plan.measured_us > 0 && plan.candidates.size() == 1) {
    std::printf("chosen     as the only candidate (the Plans on more vEUs left one idle): %d of %d vEUs, median %.1f us\n",
                plan.veus, plan.requested_veus, plan.measured_us);
  } else if (plan.measured_us > 0) {
    if (plan.alone_first)
      std::printf("chosen     by timing %zu candidate Plans: the 1-vEU Plan ran fastest, and this %d-vEU Plan's rTasks "
                  "on one thread as fast (median %.1f us, predicted %.1f us): runs start alone and move to its vEUs "
                  "once a probe finds them faster\n",
                  plan.candidates.size(), plan.veus, plan.measured_us, plan.alone_predicted_us);
    else
      std::printf("chosen     by timing %zu candidate Plans: %d of %d vEUs ran fastest, median %.1f us\n",
                  plan.candidates.size(), plan.veus, plan.requested_veus, plan.measured_us);
    for (const PlanCandidate& c : plan.candidates)
      std::printf("  %d vEU%s %-14s predicted %9.1f us, measured %9.1f us\n", c.veus, c.veus == 1 ? " " : "s",
                  std::string(policy_name(c.policy)).c_str(), c.predicted_us, c.measured_us);
  } else {
    std::printf("chosen     by predicted makespan (no candidates timed)\n");
  }
  std::printf("arena      %s (%sB if nothing shared)\n", cat(human_count(static_cast<double>(plan.arena_bytes)), "B").c_str(),
              human_count(static_cast<double>(plan.unshared_bytes)).c_str());
  for (int u = 0; u < plan.veus; ++u) {
    double busy = 0;
    for (const PlanTask& t : plan.tasks)
      if (t.veu == u) busy += t.end_us - t.start_us;
    std::printf("  vEU %-3d  %6lld rTasks, busy %5.1f%%\n", u, static_cast<long long>(plan.tasks_per_veu[static_cast<size_t>(u)]),
                plan.predicted_us > 0 ? 100 * busy / plan.predicted_us : 0.0);
  }
  if (a.has("--list")) {
    for (int u = 0; u < plan.veus; ++u) {
      std::printf("\nvEU %d:\n", u);
      for (const PlanInstr& in : plan.program[static_cast<size_t>(u)]) {
        if (in.kind == PlanInstr::Kind::kRun) {
          const PlanStep& st = plan.steps[static_cast<size_t>(in.a)];
          std::printf("  run    %s '%s' rTask %lld/%lld\n", st.op.c_str(), st.node.c_str(), static_cast<long long>(in.b),
                      static_cast<long long>(st.rtasks));
        } else if (in.kind == PlanInstr::Kind::kSignal) {
          std::printf("  signal %lld\n", static_cast<long long>(in.b));
        } else {
          std::printf("  wait   vEU %d >= %lld\n", in.a, static_cast<long long>(in.b));
        }
      }
    }
  }
  std::string svg = a.get("--svg");
  if (!svg.empty()) {
    if (Status st = write_svg(svg, plan); !st.ok()) return cli::fail(st);
    std::printf("svg        %s\n", svg.c_str());
  }
  return 0;
}

}  // namespace tessera::tools
