#include "tools/cli.h"

#include <cstdio>
#include <sstream>

#include "base/strings.h"
#include "compiler/program.h"

namespace tessera::cli {

std::string Args::get(const std::string& opt, const std::string& def) const {
  auto it = values.find(opt);
  return it == values.end() || it->second.empty() ? def : it->second.back();
}

Result<int64_t> Args::get_int(const std::string& opt, int64_t def, int64_t min, int64_t max) const {
  if (!has(opt)) return def;
  int64_t v;
  std::string s = get(opt);
  if (!parse_int64(s, &v)) return invalid_argument(str_cat(opt, " expects an integer, got '", s, "'"));
  if (v < min || v > max) return invalid_argument(str_cat(opt, " must be between ", min, " and ", max, ", got ", v));
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
      return invalid_argument(str_cat("unknown option '", name, "'"));
    if (spec->value_name.empty()) {
      if (inline_value) return invalid_argument(str_cat(name, " takes no value"));
      a.values[name].push_back("");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) return invalid_argument(str_cat(name, " needs a value (", spec->value_name, ")"));
      value = argv[++i];
    }
    if (!spec->repeatable && a.values.count(name))
      return invalid_argument(str_cat(name, " is given more than once"));
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

Status parse_shape_flags(const Args& args, std::map<std::string, Shape>* out) {
  if (!args.has("--shape")) return Status();
  for (const std::string& spec : args.values.at("--shape")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return invalid_argument(str_cat("--shape expects NAME=DIMS, got '", spec, "'"));
    auto dims = parse_dims(spec.substr(eq + 1));
    if (!dims.ok()) return invalid_argument(str_cat("--shape ", spec, ": ", dims.status().message()));
    (*out)[spec.substr(0, eq)] = *dims;
  }
  return Status();
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
