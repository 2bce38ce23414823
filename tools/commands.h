// The `tessera` subcommands, one file each.
#pragma once

namespace tessera::tools {

int run_main(int argc, char** argv);
int inspect_main(int argc, char** argv);
int ops_main(int argc, char** argv);
int plan_main(int argc, char** argv);

}  // namespace tessera::tools
