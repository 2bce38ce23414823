#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/sha256.h"
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

// FIPS 180-4's examples, and lengths either side of the padding's
// block boundaries (55, 56, 64, 119 bytes; digests from sha256sum).
TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(sha256_hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  EXPECT_EQ(sha256_hex(std::string(119, 'a')), "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb");
  EXPECT_TRUE(equal_constant_time("abc", "abc"));
  EXPECT_FALSE(equal_constant_time("abc", "abd"));
  EXPECT_FALSE(equal_constant_time("abc", "abcd"));
}

}  // namespace
}  // namespace tessera
