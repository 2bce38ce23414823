// The daemon's transport and config, without a daemon: frames split and
// joined at every byte, lengths over the limit, sizes and config errors.
#include <gtest/gtest.h>

#include <string>

#include <unistd.h>

#include <filesystem>

#include "daemon/config.h"
#include "daemon/faults.h"
#include "daemon/wire.h"

namespace tessera::daemon {
namespace {

std::string frame_of(const Request& r) {
  std::string b = r.SerializeAsString();
  std::string f(4, '\0');
  for (int i = 0; i < 4; ++i) f[static_cast<size_t>(i)] = static_cast<char>((b.size() >> (8 * i)) & 0xFF);
  return f + b;
}

TEST(FrameReader, FramesArriveWholeWhateverTheSplit) {
  std::string stream;
  for (uint64_t id = 1; id <= 3; ++id) {
    Request r;
    r.set_id(id);
    r.mutable_hello()->set_token(std::string(static_cast<size_t>(id * 50), 'x'));
    stream += frame_of(r);
  }
  for (size_t step = 1; step <= stream.size(); step += 7) {
    FrameReader in;
    std::vector<uint64_t> ids;
    for (size_t at = 0; at < stream.size(); at += step) {
      in.append(stream.data() + at, std::min(step, stream.size() - at));
      std::string payload;
      for (;;) {
        Result<bool> got = in.next(&payload);
        ASSERT_TRUE(got.ok());
        if (!*got) break;
        Request r;
        ASSERT_TRUE(r.ParseFromString(payload));
        ids.push_back(r.id());
        EXPECT_EQ(r.hello().token().size(), r.id() * 50);
      }
    }
    EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3})) << "step " << step;
    EXPECT_EQ(in.buffered(), 0u);
  }
}

TEST(FrameReader, LengthOverTheLimitIsDataLoss) {
  FrameReader in;
  const uint32_t n = static_cast<uint32_t>(kMaxFrameBytes + 1);
  const char head[4] = {static_cast<char>(n & 0xFF), static_cast<char>((n >> 8) & 0xFF),
                        static_cast<char>((n >> 16) & 0xFF), static_cast<char>(n >> 24)};
  in.append(head, 4);
  std::string payload;
  Result<bool> got = in.next(&payload);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
}

TEST(Config, SizesAndDefaults) {
  EXPECT_EQ(*parse_bytes("2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(*parse_bytes("512MiB"), uint64_t{512} << 20);
  EXPECT_EQ(*parse_bytes("1000"), 1000u);
  EXPECT_EQ(*parse_bytes("3KB"), 3000u);
  EXPECT_FALSE(parse_bytes("lots").ok());
  EXPECT_FALSE(parse_bytes("-1GiB").ok());
  EXPECT_FALSE(parse_bytes("99999999999TiB").ok());
  Result<DaemonConfig> c = parse_config(
      "[[tenant]]\nname = \"a\"\ntoken_sha256 = \"" + std::string(64, 'a') + "\"\nmode = \"cloud\"\nuids = [7, 8]\n",
      "x.toml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->tenants.size(), 1u);
  EXPECT_EQ(c->tenants[0].mode, Mode::kCloud);
  EXPECT_EQ(c->tenants[0].uids, (std::vector<uint32_t>{7, 8}));
  EXPECT_EQ(c->tenants[0].max_veus, 1);
  EXPECT_EQ(c->lease_timeout_s, 10);
  Result<DaemonConfig> none = parse_config("[daemon]\n", "y.toml");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("y.toml: no [[tenant]]"), std::string::npos);
  Result<DaemonConfig> dup = parse_config("[[tenant]]\nname = \"a\"\ntoken_sha256 = \"" + std::string(64, 'a') +
                                              "\"\n[[tenant]]\nname = \"b\"\ntoken_sha256 = \"" + std::string(64, 'a') +
                                              "\"\n",
                                          "z.toml");
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("z.toml:4"), std::string::npos) << dup.status().message();
  EXPECT_NE(dup.status().message().find("another tenant's token"), std::string::npos);
}

// Records survive reopening; a flood keeps only the newest, in memory and
// on disk.
TEST(FaultLog, KeepsTheNewestAcrossReopening) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("faultlog-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  {
    FaultLog log;
    ASSERT_TRUE(log.open(dir).ok());
    for (size_t i = 0; i <= 2 * FaultLog::kKept; ++i) log.add("t", "cpu", "refused_request", "n" + std::to_string(i));
    EXPECT_EQ(log.records().size(), FaultLog::kKept);
    EXPECT_EQ(log.records().back().message, "n" + std::to_string(2 * FaultLog::kKept));
    EXPECT_TRUE(log.clear(log.records().back().id).ok());
    EXPECT_EQ(log.clear(1).code(), StatusCode::kNotFound);  // long gone
  }
  FaultLog again;
  ASSERT_TRUE(again.open(dir).ok());
  ASSERT_EQ(again.records().size(), FaultLog::kKept - 1);
  EXPECT_EQ(again.records().back().message, "n" + std::to_string(2 * FaultLog::kKept - 1));
  // New ids go on from the newest kept.
  EXPECT_GT(again.add("t", "cpu", "x", "y").id, again.records()[again.records().size() - 2].id);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::daemon
