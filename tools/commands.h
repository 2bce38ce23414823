// The `tessera` subcommands, one file each.
#pragma once

#include <cstddef>
#include <string_view>

#include "tessera/runtime.h"
#include "cli.h"

namespace tessera::tools {

int run_main(int argc, char** argv);
int compile_main(int argc, char** argv);
int inspect_main(int argc, char** argv);
int ops_main(int argc, char** argv);
int plan_main(int argc, char** argv);
int profile_main(int argc, char** argv);
int topo_main(int argc, char** argv);
int devices_main(int argc, char** argv);
int token_main(int argc, char** argv);
int status_main(int argc, char** argv);
int faults_main(int argc, char** argv);
int daemon_main(int argc, char** argv);
int top_main(int argc, char** argv);
// --connect URI (else $TESSERA_CONNECT, else "local"), --token,
// --token-file: the Runtime a command talks to (daemon_cmds.cc).
std::string connect_uri(const cli::Args& a);
Result<Runtime> connect_from(const cli::Args& a);
// A progress bar on stderr, when it is a terminal and the log level lets
// info through: "measuring the host", "profiling rTasks", ...
void print_progress(std::string_view what, size_t done, size_t total);

}  // namespace tessera::tools
