#include "cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "commands.h"
#include "text.h"

namespace tessera::cli {

using tools::cat;

std::string Args::get(const std::string& opt, const std::string& def) const {
  auto it = values.find(opt);
  return it == values.end() || it->second.empty() ? def : it->second.back();
}

Result<int64_t> Args::get_int(const std::string& opt, int64_t def, int64_t min, int64_t max) const {
  if (!has(opt)) return def;
  int64_t v;
  std::string s = get(opt);
  if (!tools::parse_int(s, &v)) return invalid_argument(cat(opt, " expects an integer, got '", s, "'"));
  if (v < min || v > max) return invalid_argument(cat(opt, " must be between ", min, " and ", max, ", got ", v));
  return v;
}

Result<Args> parse(const Command& cmd, int argc, char** argv) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    std::string tok = argv[i];
    if (tok == "--help" || tok == "-h") {
      a.help = true;
      continue;
    }
    for (const auto& [short_name, long_name] : kShortOptions)
      if (tok == short_name) tok = long_name;
    if (tok.size() < 2 || tok.rfind("--", 0) != 0) {
      a.positional.push_back(tok);
      continue;
    }
    std::string name = tok, value;
    bool inline_value = false;
    if (size_t eq = tok.find('='); eq != std::string::npos) {
      name = tok.substr(0, eq);
      value = tok.substr(eq + 1);
      inline_value = true;
    }
    const OptionSpec* spec = nullptr;
    for (const auto& o : cmd.options)
      if (o.name == name) spec = &o;
    if (spec == nullptr)
      return invalid_argument(cat("unknown option '", name, "'"));
    if (spec->value_name.empty()) {
      if (inline_value) return invalid_argument(cat(name, " takes no value"));
      a.values[name].push_back("");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) return invalid_argument(cat(name, " needs a value (", spec->value_name, ")"));
      value = argv[++i];
    }
    if (!spec->repeatable && a.values.count(name))
      return invalid_argument(cat(name, " is given more than once"));
    a.values[name].push_back(value);
  }
  return a;
}

std::string help_text(const Command& cmd) {
  std::ostringstream os;
  os << "usage: " << cmd.usage << "\n\n" << cmd.summary << "\n";
  if (!cmd.options.empty()) {
    os << "\noptions:\n";
    for (const auto& o : cmd.options) {
      std::string left = o.name + (o.value_name.empty() ? "" : " " + o.value_name);
      for (const auto& [short_name, long_name] : kShortOptions)
        if (o.name == long_name) left = std::string(short_name) + ", " + left;
      os << "  " << left;
      if (left.size() < 24) os << std::string(24 - left.size(), ' ');
      else os << "\n  " << std::string(24, ' ');
      os << o.help << (o.repeatable ? " (repeatable)" : "") << "\n";
    }
    os << "  --help, -h              show this help\n";
  }
  if (!cmd.epilog.empty()) os << "\n" << cmd.epilog;
  return os.str();
}

int start(const Command& cmd, int argc, char** argv, size_t positional, const char* what, Args* args) {
  auto parsed = parse(cmd, argc, argv);
  if (!parsed.ok()) return usage_error(cmd, parsed.status().message());
  *args = std::move(*parsed);
  if (args->help) {
    std::fputs(help_text(cmd).c_str(), stdout);
    return 0;
  }
  if (args->positional.size() != positional) return usage_error(cmd, what);
  return -1;
}

Status parse_shape_flags(const Args& args, std::map<std::string, std::vector<int64_t>>* out) {
  if (!args.has("--shape")) return Status();
  for (const std::string& spec : args.values.at("--shape")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return invalid_argument(cat("--shape expects NAME=DIMS, got '", spec, "'"));
    auto dims = tools::parse_dims(spec.substr(eq + 1));
    if (!dims.ok()) return invalid_argument(cat("--shape ", spec, ": ", dims.status().message()));
    (*out)[spec.substr(0, eq)] = *dims;
  }
  return Status();
}

std::vector<OptionSpec> compile_option_specs() {
  return {
      {"--no-profile", "", "cost rTasks with the analytic model instead of measuring them (profile cache)"},
      {"--no-variants", "", "every op in its rKernel's own tiling (no choice among variants)"},
      {"--no-fuse", "", "no fusion: Conv/Gemm/MatMul epilogues, attention and elementwise chains stay separate ops"},
      {"--block-fusion", "", "fuse inverted residual blocks (1x1, depthwise, 1x1 conv) into one op (default off)"},
      {"--no-in-place", "", "every Concat copies its inputs instead of their producers writing into its output"},
      {"--no-channel-blocks", "",
       "keep every conv on NCHW planes instead of running chains of 1x1 and depthwise convs on\n"
       "                          blocks of 8 channels (default on where the kernels exist: AVX2)"},
      {"--no-lower-recurrent", "", "keep forward LSTMs and GRUs whole instead of one rOperator per time step"},
      {"--recurrent-chunk", "N",
       "project a stacked recurrent layer's input every N steps so layers overlap as a wavefront\n"
       "                          (default 0: the whole sequence at once, after the layer below)"},
      {"--no-recurrent-carry", "",
       "project a stacked LSTM layer's input separately instead of inside the steps of the layer below\n"
       "                          (the cpu carries it only where its kernels are AVX-512, which run the two fused)"},
      {"--host-map", "FILE",
       "plan for the host this map describes (tessera topo --json; docs/formats/host-map.md)\n"
       "                          instead of this one's (default: $TESSERA_HOST_MAP, else measured and cached)"},
      {"--no-measure", "",
       "policy auto: keep the Plan with the lowest predicted makespan instead of timing the best\n"
       "                          candidates (fewer vEUs and the 1-vEU Plan among them) in real runs"},
  };
}

std::vector<OptionSpec> with_compile_options(std::vector<OptionSpec> options) {
  for (OptionSpec& o : compile_option_specs()) options.push_back(std::move(o));
  return options;
}

Status apply_compile_flags(const Args& args, CompileOptions* co) {
  co->profile = !args.has("--no-profile");
  co->variants = !args.has("--no-variants");
  co->fuse = !args.has("--no-fuse");
  co->block_fusion = args.has("--block-fusion");
  co->concat_in_place = !args.has("--no-in-place");
  co->channel_blocks = !args.has("--no-channel-blocks");
  co->lower_recurrent = !args.has("--no-lower-recurrent");
  TESSERA_ASSIGN_OR_RETURN(co->recurrent_chunk, args.get_int("--recurrent-chunk", 0, 0, 1 << 20));
  if (args.has("--recurrent-chunk") && !co->lower_recurrent)
    return invalid_argument("--recurrent-chunk needs the recurrent lowering (drop --no-lower-recurrent)");
  co->recurrent_carry = !args.has("--no-recurrent-carry");
  co->host_map = args.get("--host-map");
  co->measure = !args.has("--no-measure");
  co->progress = tools::print_progress;
  return Status();
}

std::string first_compile_flag(const Args& args) {
  for (const OptionSpec& o : compile_option_specs())
    if (args.has(o.name)) return o.name;
  return "";
}

int fail(const Status& st) {
  std::fprintf(stderr, "tessera: error: %s\n", st.message().c_str());
  return 1;
}

int usage_error(const Command& cmd, const std::string& message) {
  std::fprintf(stderr, "tessera %s: error: %s (see tessera %s --help)\n", cmd.name.c_str(), message.c_str(),
               cmd.name.c_str());
  return 2;
}

}  // namespace tessera::cli

namespace tessera::tools {

void print_progress(std::string_view what, size_t done, size_t total) {
  if (!isatty(STDERR_FILENO) || log_level() > LogLevel::kInfo) return;
  const int width = 30;
  const int filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
  std::fprintf(stderr, "\r%-36.36s [%s%s] %zu/%zu", std::string(what).c_str(), std::string(filled, '=').c_str(),
               std::string(width - filled, ' ').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\r%*s\r", width + 60, "");
}

}  // namespace tessera::tools
