#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/strings.h"
#include "base/thread_pool.h"
#include "tessera/status.h"

namespace tessera {
namespace {

Result<int> half(int x) {
  if (x % 2) return invalid_argument(str_cat("odd value ", x));
  return x / 2;
}

Status use_half(int x, int* out) {
  TESSERA_ASSIGN_OR_RETURN(*out, half(x));
  return Status();
}

TEST(Status, CarriesCodeAndMessageWithContext) {
  Status st = not_found("model 'a.onnx'").with_context("loading");
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.to_string(), "not found: loading: model 'a.onnx'");
  EXPECT_TRUE(Status().ok());
  int v = 0;
  EXPECT_TRUE(use_half(8, &v).ok());
  EXPECT_EQ(v, 4);
  Status bad = use_half(7, &v);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "odd value 7");
}

TEST(Strings, ParseAndSplit) {
  int64_t v;
  EXPECT_TRUE(parse_int64("-42", &v));
  EXPECT_EQ(v, -42);
  EXPECT_FALSE(parse_int64("4x", &v));
  EXPECT_FALSE(parse_int64("", &v));
  EXPECT_EQ(str_split("1x3x224", 'x'), (std::vector<std::string>{"1", "3", "224"}));
  EXPECT_EQ(human_count(11.7e6), "11.70M");
}

TEST(ThreadPool, RunsEveryTaskExactlyOnceAcrossManyLoops) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(997);
    for (int loop = 0; loop < 200; ++loop) {
      int64_t n = 1 + (loop * 37) % 997;
      pool.parallel_for(n, [&](int64_t t, int thread) {
        ASSERT_GE(thread, 0);
        ASSERT_LT(thread, threads);
        hits[t].fetch_add(1, std::memory_order_relaxed);
      });
      for (int64_t t = 0; t < 997; ++t) {
        ASSERT_EQ(hits[t].load(), t < n ? 1 : 0) << "threads " << threads << " loop " << loop << " task " << t;
        hits[t].store(0);
      }
    }
  }
}

TEST(ThreadPool, WakesParkedWorkers) {
  ThreadPool pool(3);
  std::atomic<int> sum{0};
  for (int round = 0; round < 3; ++round) {
    // Long enough for workers to exhaust their spin budget and park.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    pool.parallel_for(64, [&](int64_t t, int) { sum.fetch_add(static_cast<int>(t)); });
  }
  EXPECT_EQ(sum.load(), 3 * 64 * 63 / 2);
}

}  // namespace
}  // namespace tessera
