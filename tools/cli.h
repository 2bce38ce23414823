// Command-line parsing shared by the `tessera` subcommands: options are
// declared with their help text, so --help and the "unknown option" errors
// come from the same table.
#pragma once

#include <map>
#include <utility>
#include <string>
#include <vector>

#include "tessera/runtime.h"
#include "tessera/status.h"

namespace tessera::cli {

struct OptionSpec {
  std::string name;        // "--iters"
  std::string value_name;  // "N"; empty for a flag
  std::string help;
  bool repeatable = false;
};

// Short forms, valid in every command that has the long option.
inline constexpr std::pair<const char*, const char*> kShortOptions[] = {{"-o", "--output"}};

struct Command {
  std::string name;      // "run"
  std::string usage;     // "tessera run MODEL.onnx [options]"
  std::string summary;   // one line
  std::vector<OptionSpec> options;
  std::string epilog;    // examples
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> values;  // option -> values (flags: {""})
  bool help = false;

  bool has(const std::string& opt) const { return values.count(opt) != 0; }
  std::string get(const std::string& opt, const std::string& def = "") const;
  Result<int64_t> get_int(const std::string& opt, int64_t def, int64_t min, int64_t max) const;
};

// Parses argv (after the subcommand name). Accepts "--opt value" and
// "--opt=value".
Result<Args> parse(const Command& cmd, int argc, char** argv);
std::string help_text(const Command& cmd);

// The common start of a subcommand: parses argv, prints --help, checks the
// number of positional arguments. Returns -1 to go on (with *args filled),
// else the exit code to return.
int start(const Command& cmd, int argc, char** argv, size_t positional, const char* what, Args* args);

// Collects every --shape NAME=DIMS into `out`; errors name the bad flag.
Status parse_shape_flags(const Args& args, std::map<std::string, std::vector<int64_t>>* out);

// The options of every command that compiles a model: --no-profile,
// --no-variants, --no-fuse, --block-fusion, --no-in-place, --no-lower-recurrent,
// --recurrent-chunk, --no-recurrent-carry, --host-map, --no-measure.
std::vector<OptionSpec> compile_option_specs();
// `options` followed by compile_option_specs().
std::vector<OptionSpec> with_compile_options(std::vector<OptionSpec> options);
// Applies those options to `co` (errors name the bad flag), with progress
// on stderr (measuring the host, profiling rTasks) when it is a terminal.
Status apply_compile_flags(const Args& args, CompileOptions* co);
// The first of those options given, or "": they have no effect on a
// compiled Executable.
std::string first_compile_flag(const Args& args);

// Prints "tessera: error: <message>" to stderr and returns 1 (2 for usage).
int fail(const Status& st);
int usage_error(const Command& cmd, const std::string& message);

}  // namespace tessera::cli
