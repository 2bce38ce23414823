// tessera profile MODEL.onnx: measure every rOperator's rTask cost and
// print a per-op table; results go to the profile cache that compiles use.
#include <algorithm>
#include <cstdio>

#include "tessera/tessera.h"
#include "cli.h"
#include "commands.h"
#include "text.h"

namespace tessera::tools {
namespace {

const cli::Command kProfile = {
    "profile",
    "tessera profile MODEL.onnx [options]",
    "Measure the cost of one rTask of every op (per rKernel variant and bound shapes) and print a table:\n"
    "op, node, rKernel, the path it chose for these shapes (e.g. a Conv's winograd, 1x1 packed or depthwise\n"
    "rows), rTasks, us per rTask, total and share. Results are cached under $TESSERA_CACHE (default\n"
    "~/.cache/tessera) and reused by later compiles. A model whose weights and activations exceed what\n"
    "the caches keep between runs (measured, tessera topo) is timed with each op's weights evicted from\n"
    "the caches first, as a run reads them from memory; a line after the table says which.",
    {
        {"--shape", "NAME=DIMS", "bind a dynamic input's shape", true},
        {"--no-cache", "", "measure everything again (and refresh the cache)"},
        {"--top", "N", "show only the N most expensive ops (default: all)"},
        {"--no-fuse", "", "profile the ops unfused (as `tessera run --no-fuse` compiles them)"},
        {"--block-fusion", "", "fuse inverted residual blocks into one op (as `tessera run --block-fusion`)"},
        {"--no-channel-blocks", "", "profile the convs on NCHW planes (as `tessera run --no-channel-blocks`)"},
        {"--host-map", "FILE", "profile for the host this map describes (as `tessera run --host-map`)"},
    },
    "examples:\n  tessera profile build/zoo/resnet18.onnx\n  tessera profile build/zoo/bert_tiny.onnx --shape input_ids=1x64 "
    "--shape attention_mask=1x64 --top 10\n"};

}  // namespace

int profile_main(int argc, char** argv) {
  cli::Args a;
  if (int rc = cli::start(kProfile, argc, argv, 1, "expected exactly one MODEL.onnx", &a); rc >= 0) return rc;
  auto top = a.get_int("--top", 0, 0, 1000000);
  if (!top.ok()) return cli::usage_error(kProfile, top.status().message());
  CompileOptions co;
  if (Status st = cli::parse_shape_flags(a, &co.shapes); !st.ok()) return cli::usage_error(kProfile, st.message());
  co.fuse = !a.has("--no-fuse");
  co.block_fusion = a.has("--block-fusion");
  co.channel_blocks = !a.has("--no-channel-blocks");
  co.host_map = a.get("--host-map");
  co.progress = print_progress;
  auto rt = connect();
  if (!rt.ok()) return cli::fail(rt.status());
  auto m = rt->compile(a.positional[0], co);
  if (!m.ok()) return cli::fail(m.status());
  auto r = m->profile(a.has("--no-cache"));
  if (!r.ok()) return cli::fail(r.status());
  struct Row {
    size_t step;
    double total;
  };
  std::vector<Row> rows;
  double sum = 0;
  for (size_t i = 0; i < r->rows.size(); ++i) {
    double total = r->rows[i].us_per_rtask * static_cast<double>(r->rows[i].rtasks);
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
    const ProfileRow& st = r->rows[rows[k].step];
    op_w = std::max(op_w, static_cast<int>(st.op.size()));
    kernel_w = std::max(kernel_w, static_cast<int>(st.kernel.size()));
    path_w = std::max(path_w, static_cast<int>(st.path.size()));
  }
  std::printf("%-*s %-*s %-*s %-*s %7s %11s %11s %6s\n", op_w, "op", static_cast<int>(kNodeWidth), "node", kernel_w,
              "rKernel", path_w, "path", "rTasks", "us/rTask", "total us", "share");
  for (size_t k = 0; k < shown; ++k) {
    const ProfileRow& st = r->rows[rows[k].step];
    const std::string& node = st.node;
    std::string name = node.size() > kNodeWidth ? "..." + node.substr(node.size() - (kNodeWidth - 3)) : node;
    std::printf("%-*s %-*s %-*s %-*s %7lld %11.2f %11.1f %5.1f%%%s\n", op_w, st.op.c_str(),
                static_cast<int>(kNodeWidth), name.c_str(), kernel_w, st.kernel.c_str(), path_w, st.path.c_str(),
                static_cast<long long>(st.rtasks), st.us_per_rtask, rows[k].total,
                sum > 0 ? 100 * rows[k].total / sum : 0.0, st.cached ? "  (cached)" : "");
  }
  std::printf("\n%zu ops, %.1f us of rTask work per run (%.1f ms); %zu measured, %zu from the cache\ncache: %s\n",
              r->rows.size(), sum, sum / 1e3, r->measured, r->from_cache, r->cache_path.c_str());
  const std::string kept =
      r->cache_kept_kb <= 0 ? "last-level cache unknown"
      : r->cache_kept_kb < r->llc_kb
          ? cat("the caches keep ", fixed(r->cache_kept_kb / 1024, 1), " MiB between runs (last-level cache ",
                fixed(r->llc_kb / 1024, 1), " MiB)")
          : cat("last-level cache ", fixed(r->llc_kb / 1024, 1), " MiB");
  std::printf("weights %s MiB and activations %s MiB, %s: %s\n",
              fixed(static_cast<double>(r->weight_bytes) / (1 << 20), 1).c_str(),
              fixed(static_cast<double>(r->activation_bytes) / (1 << 20), 1).c_str(), kept.c_str(),
              r->weights_cold ? "more than it holds, so each rTask was timed with its weights evicted first, as a run "
                                "reads them from memory"
                              : "each rTask timed with its weights in cache");
  if (r->contended > 0)
    std::printf("note: %zu measured while this core never ran at full speed (another thread on it?): scaled "
                "estimates; rerun with `--no-cache` when the machine is quiet\n",
                r->contended);
  return 0;
}

}  // namespace tessera::tools
