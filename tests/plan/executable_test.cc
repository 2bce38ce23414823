// The Executable file: a compiled Program written and loaded back runs
// bitwise like the original on the whole zoo; the loader's derived
// happens-before clocks equal the scheduler's; and every kind of forged or
// damaged file (each built by corrupting a Program before writing it, so
// checksums still match, or by flipping bytes with checksums off) is
// refused with an error naming what is wrong, or loads into something that
// runs without a fault.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "base/strings.h"
#include "compiler/executable.h"
#include "tests/common/zoo_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing_util::compile_zoo;
using testing_util::expect_bitwise;
using testing_util::run_outputs;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("tessera_tsx_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

CompileConfig plan_options(int veus, Policy policy) {
  CompileConfig co;
  co.build_plan = true;
  co.schedule.veus = veus;
  co.schedule.policy = policy;
  co.schedule.seed = 17;
  return co;
}

const std::vector<std::string>& kModels = testing_util::kZooModels;

class ExecutableZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(ExecutableZoo, WrittenAndLoadedRunsBitwiseLikeTheCompiledProgram) {
  const std::string model = GetParam();
  TempDir tmp;
  for (auto [veus, policy] : {std::pair{2, Policy::kAuto}, std::pair{3, Policy::kRandom}}) {
    std::map<std::string, Tensor> inputs;
    auto p = compile_zoo(model, plan_options(veus, policy), &inputs);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    const std::string path = tmp.file(model + ".tsx");
    ASSERT_TRUE(write_executable(**p, path).ok());
    auto loaded = load_executable(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const Program& a = **p;
    const Program& b = **loaded;
    EXPECT_EQ(b.steps.size(), a.steps.size());
    EXPECT_EQ(b.memory.arena_bytes, a.memory.arena_bytes);
    EXPECT_EQ(b.plan->veus, a.plan->veus);
    EXPECT_EQ(b.plan->done, a.plan->done);  // derived from the instructions alone
    EXPECT_EQ(b.plan->seen, a.plan->seen);
    EXPECT_EQ(b.plan->waits, a.plan->waits);
    // Constants are mapped from the file, not copied.
    const char* lo = nullptr;
    for (const Slot& s : b.slots)
      if (s.constant && s.bytes > 0) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data) % 64, 0u);
        lo = lo == nullptr ? static_cast<const char*>(s.data) : std::min(lo, static_cast<const char*>(s.data));
      }
    auto want = run_outputs(std::move(*p), Executor::kPlan, inputs);
    auto got = run_outputs(std::move(*loaded), Executor::kPlan, inputs);
    expect_bitwise(got, want, model + " veus=" + std::to_string(veus));
  }
}

// The small constants lie together, in the order of the values, from the
// start of a page, in a compiled Program and in a loaded Executable alike;
// the large ones keep their own places.
TEST_P(ExecutableZoo, SmallConstantsLieTogetherFromAPageAsWhenLoaded) {
  const std::string model = GetParam();
  TempDir tmp;
  std::map<std::string, Tensor> inputs;
  auto p = compile_zoo(model, plan_options(2, Policy::kAuto), &inputs);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const std::string path = tmp.file(model + ".tsx");
  ASSERT_TRUE(write_executable(**p, path).ok());
  auto loaded = load_executable(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  // Each small constant's offset from the first, by name; checks the
  // block's layout on the way.
  auto small_offsets = [&](const Program& prog, const char* what) {
    std::map<std::string, ptrdiff_t> at;
    const char* first = nullptr;
    const char* next = nullptr;
    int large = 0;
    for (const auto& v : prog.graph->values()) {
      if (!v->is_constant()) continue;
      const char* d = static_cast<const char*>(v->constant->raw());
      const size_t n = v->constant->nbytes();
      if (n >= kPackedConstantMax) {
        ++large;
        if (first != nullptr) {
          EXPECT_FALSE(d >= first && d < next) << what << ": " << v->name << " inside the block";
        }
        continue;
      }
      if (first == nullptr) {
        first = next = d;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 4096, 0u) << what << ": " << v->name;
      }
      EXPECT_EQ(d, next) << what << ": " << v->name << " is not where the block's previous constant ends";
      at[v->name] = d - first;
      next = d + (n + 63) / 64 * 64;
    }
    return std::pair{at, large};
  };
  auto [compiled, large] = small_offsets(**p, "compiled");
  auto [mapped, large_loaded] = small_offsets(**loaded, "loaded");
  EXPECT_FALSE(compiled.empty());
  EXPECT_EQ(mapped, compiled);
  EXPECT_EQ(large_loaded, large);
}

INSTANTIATE_TEST_SUITE_P(Zoo, ExecutableZoo, ::testing::ValuesIn(kModels),
                         [](const auto& param_info) { return param_info.param; });

// A forged file: a Program corrupted in one way before writing, so the
// checksums are right and only the loader's structural checks stand.
class Forged : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = compile_zoo("nasnet_like", plan_options(2, Policy::kCriticalPath), &inputs_);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    p_ = std::move(*p);
  }
  void expect_refused(const std::string& needle) {
    const std::string path = tmp_.file("forged.tsx");
    ASSERT_TRUE(write_executable(*p_, path).ok());
    auto l = load_executable(path);
    ASSERT_FALSE(l.ok()) << "forgery accepted; wanted '" << needle << "'";
    EXPECT_NE(l.status().message().find(needle), std::string::npos) << l.status().message();
    EXPECT_NE(l.status().message().find(path), std::string::npos) << l.status().message();
  }
  Plan& plan() { return *p_->plan; }
  int first_veu_with(Instr::Kind k) {
    for (int u = 0; u < plan().veus; ++u)
      for (const Instr& in : plan().program[u])
        if (in.kind == k) return u;
    return -1;
  }

  TempDir tmp_;
  std::map<std::string, Tensor> inputs_;
  std::unique_ptr<Program> p_;
};

TEST_F(Forged, UnmodifiedLoads) {
  const std::string path = tmp_.file("ok.tsx");
  ASSERT_TRUE(write_executable(*p_, path).ok());
  auto l = load_executable(path);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
}

TEST_F(Forged, MissingWait) {
  int u = first_veu_with(Instr::Kind::kWait);
  ASSERT_GE(u, 0);
  auto& prog = plan().program[u];
  for (size_t i = 0; i < prog.size(); ++i)
    if (prog[i].kind == Instr::Kind::kWait) {
      prog.erase(prog.begin() + static_cast<long>(i));
      break;
    }
  expect_refused("a wait is missing");
}

TEST_F(Forged, WaitCycleDeadlocks) {
  auto& p0 = plan().program[0];
  auto& p1 = plan().program[1];
  p0.insert(p0.begin(), Instr{Instr::Kind::kWait, 1, plan().tasks_per_veu[1]});
  p1.insert(p1.begin(), Instr{Instr::Kind::kWait, 0, plan().tasks_per_veu[0]});
  expect_refused("deadlocks");
}

TEST_F(Forged, TaskThatDoesNotExist) {
  for (Instr& in : plan().program[0])
    if (in.kind == Instr::Kind::kRun) {
      in.b = p_->steps[in.a].op->tasks();
      break;
    }
  expect_refused("does not exist");
}

TEST_F(Forged, ValuesSharingBytesWhileLive) {
  // A graph input and output live through the whole run: never shareable.
  const Value* in = p_->graph->inputs()[0];
  const Value* out = p_->graph->outputs()[0];
  p_->memory.offset[out] = p_->memory.offset[in];
  expect_refused("share arena bytes");
}

// NASNet-like's Concats have parts their producers write in place: each
// must lie exactly at its slice, and the flags must be ones the compiler
// could have set.
TEST_F(Forged, InPlacePartAwayFromItsSlice) {
  ASSERT_FALSE(p_->aliases.empty());
  const auto& [part, alias] = *p_->aliases.begin();
  p_->memory.offset[part] = p_->memory.offset[alias.base] + alias.offset + 64;
  expect_refused("is written in place into");
}

TEST_F(Forged, InPlaceFlagOnAPartThatCannotBe) {
  for (auto& n : p_->graph->nodes())
    if (n->op_type == "TesseraConcat") {
      n->attrs["in_place"].ints[0] = 2;
      break;
    }
  expect_refused("cannot be written in place");
}

TEST_F(Forged, InPlaceFlagsOfTheWrongLength) {
  for (auto& n : p_->graph->nodes())
    if (n->op_type == "TesseraConcat") {
      n->attrs["in_place"].ints.pop_back();
      break;
    }
  expect_refused("one entry per input");
}

TEST_F(Forged, ValueOutsideTheArena) {
  const Value* out = p_->graph->outputs()[0];
  p_->memory.offset[out] = p_->memory.arena_bytes;
  expect_refused("outside the arena");
}

TEST_F(Forged, StoredShapeDisagreesWithInference) {
  Value* v = p_->graph->nodes()[0]->outputs[0];
  v->shape.dims.back() += 1;
  expect_refused("but the graph gives");
}

// Found by fuzz_executable_load: pads near 2^62 overflowed int64 in the
// window arithmetic (UBSan); now a clear error.
TEST_F(Forged, HugePadsAreAnErrorNotAnOverflow) {
  Node* conv = nullptr;
  for (auto& n : p_->graph->nodes())
    if (n->has_attr("pads")) conv = n.get();
  ASSERT_NE(conv, nullptr);
  for (int64_t& v : conv->attrs["pads"].ints) v = int64_t{7022836102411059206};
  expect_refused("above");
}

TEST_F(Forged, UnknownOpType) {
  p_->graph->nodes()[0]->op_type = "Frobnicate";
  expect_refused("unknown op type");
}

TEST_F(Forged, RKernelThisBuildLacks) {
  static const RKernel bogus = {p_->steps[0].kernel->op, "bogus.kernel", "", p_->steps[0].kernel->make};
  p_->steps[0].kernel = &bogus;
  expect_refused("is not one this build has");
}

TEST_F(Forged, RTaskCountTheKernelDoesNotReproduce) {
  for (Step& s : p_->steps)
    if (s.op->tasks() > 1) {
      s.params.tasks = 1;
      break;
    }
  expect_refused("rTasks, but its rKernel makes");
}

// Found by fuzz_executable_load: a requested rTask count of 2^63 - 1
// overflowed int64 in the conv kernel's tiling (UBSan); now a clear error.
TEST_F(Forged, HugeRequestedRTaskCountIsAnError) {
  p_->steps[0].params.tasks = std::numeric_limits<int64_t>::max();
  expect_refused("rTasks requested, above the limit");
}

TEST_F(Forged, VeuCountOutOfRange) {
  plan().veus = 300;
  plan().program.resize(300);
  expect_refused("out of range");
}

// How the Plan was chosen travels with it, and is checked.
TEST_F(Forged, ChoiceRecordRoundTripsAndIsChecked) {
  plan().requested_veus = 4;
  plan().measured_us = 812.5;
  plan().candidates = {{1, Policy::kWavefront, 1700, 1750.5}, {2, Policy::kCriticalPath, 905, 812.5}};
  plan().alone_first = true;
  plan().alone_predicted_us = 1690.25;
  const std::string path = tmp_.file("choice.tsx");
  ASSERT_TRUE(write_executable(*p_, path).ok());
  auto l = load_executable(path);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  const Plan& back = *(*l)->plan;
  EXPECT_EQ(back.requested_veus, 4);
  EXPECT_EQ(back.measured_us, 812.5);
  ASSERT_EQ(back.candidates.size(), 2u);
  EXPECT_EQ(back.candidates[1].veus, 2);
  EXPECT_EQ(back.candidates[1].policy, Policy::kCriticalPath);
  EXPECT_EQ(back.candidates[0].measured_us, 1750.5);
  EXPECT_TRUE(back.alone_first);
  EXPECT_EQ(back.alone_predicted_us, 1690.25);

  plan().alone_predicted_us = -3;
  expect_refused("alone predicted makespan is not a finite time");
  plan().alone_predicted_us = 1690.25;
  plan().requested_veus = 1;  // fewer than the Plan's own 2
  expect_refused("requested vEU count 1 is out of range");
  plan().requested_veus = 4;
  plan().candidates[0].veus = 5;  // more than were asked for
  expect_refused("plan candidate 0 is out of range");
  plan().candidates[0].veus = 1;
  plan().candidates[1].measured_us = -1;
  expect_refused("plan candidate 1 is out of range");
  plan().candidates[1].measured_us = 1;
  plan().measured_us = std::numeric_limits<double>::infinity();
  expect_refused("measured makespan is not a finite time");
}

// Damaged bytes: version, checksums, truncation.
class Damaged : public Forged {
 protected:
  std::string write_ok() {
    const std::string path = tmp_.file("d.tsx");
    EXPECT_TRUE(write_executable(*p_, path).ok());
    return read_bytes(path);
  }
  Status load(const std::string& bytes, bool checksums = true) {
    LoadOptions lo;
    lo.verify_checksums = checksums;
    auto l = load_executable_bytes(bytes.data(), bytes.size(), "mem.tsx", nullptr, lo);
    return l.ok() ? Status() : l.status();
  }
};

TEST_F(Damaged, VersionMagicAndChecksums) {
  std::string b = write_ok();
  ASSERT_TRUE(load(b).ok());
  std::string v = b;
  v[8] = static_cast<char>(kExecutableVersion + 1);
  EXPECT_NE(load(v).message().find(str_cat("format version ", kExecutableVersion + 1)), std::string::npos)
      << load(v).message();
  std::string m = b;
  m[0] = 'X';
  EXPECT_NE(load(m).message().find("bad magic"), std::string::npos);
  std::string meta = b;
  meta[kExecutableHeaderBytes + 5] ^= 0x40;
  EXPECT_NE(load(meta).message().find("metadata checksum"), std::string::npos) << load(meta).message();
  std::string w = b;
  w[w.size() - 3] ^= 0x01;
  EXPECT_NE(load(w).message().find("weights checksum"), std::string::npos) << load(w).message();
  // Another file or version: invalid; corrupt bytes in ours: data loss.
  EXPECT_EQ(load(m).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load(v).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(load(meta).code(), StatusCode::kDataLoss);
  EXPECT_EQ(load(w).code(), StatusCode::kDataLoss);
  EXPECT_EQ(load(b.substr(0, b.size() - 1)).code(), StatusCode::kDataLoss);
}

// The file names the device kind its rKernels and Plan are for (after the
// producer string); another kind is refused, named.
TEST_F(Damaged, DeviceKindIsRecordedAndChecked) {
  std::string b = write_ok();
  const size_t producer = kExecutableHeaderBytes;
  uint32_t n = 0;
  std::memcpy(&n, b.data() + producer, 4);
  const size_t device = producer + 4 + n;
  uint32_t len = 0;
  std::memcpy(&len, b.data() + device, 4);
  ASSERT_EQ(b.substr(device + 4, len), kExecutableDevice);
  std::string g = b;
  g.replace(device + 4, 3, "gpu");
  Status st = load(g, false);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("compiled for the 'gpu' device"), std::string::npos) << st.message();
}

TEST_F(Damaged, EveryTruncationIsRefused) {
  std::string b = write_ok();
  for (size_t n = 0; n < b.size(); n += (n < 8192 ? 1 : 4099)) {
    Status st = load(b.substr(0, n));
    ASSERT_FALSE(st.ok()) << "prefix of " << n << " bytes accepted";
  }
}

// Every metadata byte changed, checksums off: each load is refused or gives
// a Program that runs without a fault (the sanitizer builds watch). The
// fuzzer (tests/fuzz/fuzz_executable_load.cc) goes further.
TEST_F(Damaged, EveryMetadataByteFlippedNeverFaults) {
  std::map<std::string, Tensor> inputs;
  auto p = compile_zoo("mlp", plan_options(2, Policy::kWavefront), &inputs);
  ASSERT_TRUE(p.ok());
  const std::string path = tmp_.file("mlp.tsx");
  ASSERT_TRUE(write_executable(**p, path).ok());
  std::string b = read_bytes(path);
  uint64_t meta_bytes = 0;
  std::memcpy(&meta_bytes, b.data() + 32, 8);
  ASSERT_GT(meta_bytes, 100u);
  int refused = 0, loaded = 0;
  for (size_t i = kExecutableHeaderBytes; i < kExecutableHeaderBytes + meta_bytes; ++i) {
    for (uint8_t x : {0x01, 0xff}) {
      if (x == 0xff && i % 3 != 0) continue;  // low bits everywhere, all bits on a third
      std::string c = b;
      c[i] = static_cast<char>(c[i] ^ x);
      LoadOptions lo;
      lo.verify_checksums = false;
      auto l = load_executable_bytes(c.data(), c.size(), "flip.tsx", nullptr, lo);
      if (!l.ok()) {
        ++refused;
        continue;
      }
      ++loaded;
      if ((*l)->memory.arena_bytes > (64u << 20)) continue;
      auto s = Engine::create(std::move(*l), {Executor::kPlan, 2});
      ASSERT_TRUE(s.ok());
      EXPECT_TRUE((*s)->run().wait().ok());
    }
  }
  EXPECT_GT(refused, 0);
  std::printf("metadata flips: %d refused, %d loaded and ran\n", refused, loaded);
}

}  // namespace
}  // namespace tessera
