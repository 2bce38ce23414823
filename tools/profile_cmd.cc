// tessera profile MODEL.onnx: measure every rOperator's rTask cost and
// print a per-op table; results go to the profile cache that compiles use.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "base/strings.h"
#include "compiler/program.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "topology/host_map.h"

namespace tessera::tools {
namespace {

const cli::Command kProfile = {
    "profile",
    "tessera profile MODEL.onnx [options]",
    "Measure the cost of one rTask of every op (per rKernel variant and bound shapes) and print a table:\n"
    "op, node, rKernel, the path it chose for these shapes (e.g. a Conv's winograd, 1x1 packed or depthwise\n"
    "rows), rTasks, us per rTask, total and share. Results are cached under $TESSERA_CACHE (default\n"
    "~/.cache/tessera) and reused by later compiles.",
    {
        {"--shape", "NAME=DIMS", "bind a dynamic input's shape", true},
        {"--no-cache", "", "measure everything again (and refresh the cache)"},
        {"--top", "N", "show only the N most expensive ops (default: all)"},
        {"--no-fuse", "", "profile the ops unfused (as `tessera run --no-fuse` compiles them)"},
        {"--block-fusion", "", "fuse inverted residual blocks into one op (as `tessera run --block-fusion`)"},
        {"--host-map", "FILE", "profile for the host this map describes (as `tessera run --host-map`)"},
    },
    "examples:\n  tessera profile build/zoo/resnet18.onnx\n  tessera profile build/zoo/bert_tiny.onnx --shape input_ids=1x64 "
    "--shape attention_mask=1x64 --top 10\n"};

}  // namespace

void print_progress(size_t done, size_t total) {
  if (!isatty(STDERR_FILENO)) return;
  const int width = 30;
  int filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
  std::fprintf(stderr, "\rprofiling [%s%s] %zu/%zu ops", std::string(filled, '=').c_str(),
               std::string(width - filled, ' ').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\r%*s\r", width + 40, "");
}

int profile_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kProfile, argc, argv, 1, "expected exactly one MODEL.onnx", &a); rc >= 0) return rc;
  auto top = a.get_int("--top", 0, 0, 1000000);
  if (!top.ok()) return cli::usage_error(kProfile, top.status().message());
  CompileConfig co;
  if (Status st = cli::parse_shape_flags(a, &co.input_shapes); !st.ok()) return cli::usage_error(kProfile, st.message());
  co.fuse = !a.has("--no-fuse");
  co.fuse_blocks = co.fuse && a.has("--block-fusion");
  auto program = compile_onnx(a.positional[0], co);
  if (!program.ok()) return cli::fail(program.status());
  const Program& p = **program;
  ProfileOptions po;
  po.refresh = a.has("--no-cache");
  // The same cache as compiles for this host's shape use.
  HostMapOptions ho;
  ho.file = a.get("--host-map");
  auto host = host_map_obtain(ho);
  if (!host.ok()) return cli::fail(host.status());
  po.host_tag = host_profile_tag(*host);
  po.progress = [](size_t done, size_t total, bool) { print_progress(done, total); };
  auto r = profile_program(p, po);
  if (!r.ok()) return cli::fail(r.status());
  struct Row {
    size_t step;
    double total;
  };
  std::vector<Row> rows;
  double sum = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    double total = r->task_cost_us[i] * static_cast<double>(p.steps[i].op->tasks());
    rows.push_back({i, total});
    sum += total;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.total > y.total; });
  size_t shown = *top > 0 ? std::min<size_t>(rows.size(), static_cast<size_t>(*top)) : rows.size();
  // Columns as wide as the widest shown entry; node names keep their last
  // 34 characters.
  constexpr size_t kNodeWidth = 34;
  int op_w = 2, kernel_w = 7, path_w = 4;
  for (size_t k = 0; k < shown; ++k) {
    const Step& st = p.steps[rows[k].step];
    op_w = std::max(op_w, static_cast<int>(st.node->op_type.size()));
    kernel_w = std::max(kernel_w, static_cast<int>(st.kernel->name.size()));
    path_w = std::max(path_w, static_cast<int>(st.op->path().size()));
  }
  std::printf("%-*s %-*s %-*s %-*s %7s %11s %11s %6s\n", op_w, "op", static_cast<int>(kNodeWidth), "node", kernel_w,
              "rKernel", path_w, "path", "rTasks", "us/rTask", "total us", "share");
  for (size_t k = 0; k < shown; ++k) {
    const Step& st = p.steps[rows[k].step];
    const std::string& node = st.node->name;
    std::string name = node.size() > kNodeWidth ? "..." + node.substr(node.size() - (kNodeWidth - 3)) : node;
    std::printf("%-*s %-*s %-*s %-*s %7lld %11.2f %11.1f %5.1f%%%s\n", op_w, st.node->op_type.c_str(),
                static_cast<int>(kNodeWidth), name.c_str(), kernel_w, std::string(st.kernel->name).c_str(), path_w,
                std::string(st.op->path()).c_str(), static_cast<long long>(st.op->tasks()),
                r->task_cost_us[rows[k].step], rows[k].total, sum > 0 ? 100 * rows[k].total / sum : 0.0,
                r->cached[rows[k].step] ? "  (cached)" : "");
  }
  std::printf("\n%zu ops, %.1f us of rTask work per run (%.1f ms); %zu measured, %zu from the cache\ncache: %s\n",
              p.steps.size(), sum, sum / 1e3, r->measured, r->from_cache, r->cache_path.c_str());
  if (r->contended > 0)
    std::printf("note: %zu measured while this core never ran at full speed (another thread on it?): scaled "
                "estimates; rerun with `--no-cache` when the machine is quiet\n",
                r->contended);
  return 0;
}

}  // namespace tessera::tools
