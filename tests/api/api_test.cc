// The public API (include/tessera/) as a program uses it: connecting,
// compiling, sessions on disjoint cores, run and submit, outputs into
// caller memory, inputs read where they lie, the null device, and the
// errors that name the input, output, file or URI at fault.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <chrono>
#include <thread>

#include "base/strings.h"
#include "tessera/tessera.h"
#include "tests/common/zoo_util.h"
#include "topology/cpu_topology.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// Everything the tests measure (the host map) goes to a directory of
// their own; rTask costs are estimated, Plans not timed: nothing depends
// on this host's speed.
class Api : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / str_cat("tessera_api_", ::getpid())).string();
    fs::create_directories(dir_);
    ::setenv("TESSERA_CACHE", dir_.c_str(), 1);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static CompileOptions quick() {
    CompileOptions o;
    o.profile = false;
    o.measure = false;
    return o;
  }
  static Model compile(const std::string& name, CompileOptions o = quick()) {
    Result<Runtime> rt = connect();
    EXPECT_TRUE(rt.ok());
    Result<Model> m = rt->compile(testing_util::zoo(name + ".onnx"), o);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? *m : Model();
  }
  static NamedTensors inputs(const std::string& name) {
    Result<NamedTensors> in = load_npz(testing_util::zoo(name + ".inputs.npz"));
    EXPECT_TRUE(in.ok()) << in.status().to_string();
    return in.ok() ? *in : NamedTensors();
  }
  static double rel_l2(const Tensor& a, const Tensor& b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double d = a.value_as_double(i) - b.value_as_double(i);
      num += d * d;
      den += b.value_as_double(i) * b.value_as_double(i);
    }
    return std::sqrt(num / std::max(den, 1e-30));
  }
  static bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  }
  static std::string dir_;
};
std::string Api::dir_;

TEST_F(Api, ConnectLocalAndRefuseOthersByName) {
  Result<Runtime> a = connect(), b = connect("local");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->uri(), "local");
  // A daemon's URI where none listens: Unavailable, naming the socket.
  const std::string nowhere = str_cat(dir_, "/none.sock");
  Result<Runtime> d = connect("unix://" + nowhere);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(d.status().message().find(nowhere), std::string::npos);
  Result<Runtime> remote = connect("tcp://10.0.0.1:7000");
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(remote.status().message().find("tcp://10.0.0.1:7000"), std::string::npos);
  // The local Runtime is no daemon: no status, no faults.
  EXPECT_EQ(a->status().status().code(), StatusCode::kFailedPrecondition);
  Result<Runtime> bad = connect("gpu0");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("gpu0"), std::string::npos);
}

TEST_F(Api, DevicesListTheCpuByCoreAndTheNullDevice) {
  std::vector<DeviceInfo> ds = connect()->devices();
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].kind, "cpu");
  EXPECT_EQ(ds[0].veus, std::max(1, cpu_topology().cores));
  EXPECT_GT(ds[0].memory_bytes, 0u);
  EXPECT_EQ(ds[1].kind, "null");
}

TEST_F(Api, RunMatchesTheReferenceInModelOrder) {
  Model m = compile("mlp");
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].name, "input");
  EXPECT_EQ(m.inputs()[0].shape, std::vector<int64_t>({16, 784}));
  Result<Session> s = m.session({.veus = 2});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  Result<NamedTensors> out = s->run(inputs("mlp"));
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  Result<NamedTensors> want = load_npz(testing_util::zoo("mlp.outputs.npz"));
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(out->size(), m.outputs().size());
  size_t k = 0;
  for (const auto& [name, t] : *out) {
    EXPECT_EQ(name, m.outputs()[k++].name);
    ASSERT_NE(want->find(name), nullptr) << name;
    EXPECT_LE(rel_l2(t, *want->find(name)), 1e-4) << name;
  }
  RunBreakdown b = s->last_breakdown();
  EXPECT_GT(b.compute_ms, 0);
  EXPECT_GE(b.copy_in_ms, 0);
}

TEST_F(Api, ExecutorsAgree) {
  Model m = compile("resnet18");
  NamedTensors in = inputs("resnet18");
  Result<NamedTensors> ref = m.session({.veus = 1, .executor = Executor::kSequential})->run(in);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  for (Executor e : {Executor::kTwoLayer, Executor::kPlan}) {
    Result<Session> s = m.session({.veus = 2, .executor = e});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    Result<NamedTensors> out = s->run(in);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    for (const auto& [name, t] : *out) EXPECT_LE(rel_l2(t, *ref->find(name)), 1e-5) << executor_name(e);
  }
}

TEST_F(Api, BadInputsAreNamed) {
  Model m = compile("mlp");
  Result<Session> s = m.session({.veus = 1});
  ASSERT_TRUE(s.ok());
  NamedTensors good = inputs("mlp");
  auto fails = [&](const NamedTensors& in, const std::vector<std::string>& needles) {
    Result<NamedTensors> out = s->run(in);
    ASSERT_FALSE(out.ok());
    for (const std::string& n : needles)
      EXPECT_NE(out.status().message().find(n), std::string::npos) << out.status().message() << " lacks " << n;
  };
  fails({}, {"input 'input'", "not given"});
  NamedTensors extra = good;
  extra.set("bogus", Tensor(DType::kFloat32, {1}));
  fails(extra, {"'bogus'", "not an input", "inputs: input"});
  fails({{"input", Tensor(DType::kInt64, {16, 784})}}, {"input 'input'", "float32", "int64"});
  fails({{"input", Tensor(DType::kFloat32, {8, 784})}}, {"input 'input'", "16x784", "8x784"});
  // The session still runs after the errors.
  EXPECT_TRUE(s->run(good).ok());
}

TEST_F(Api, CompileErrorsNameTheFileAndTheInput) {
  Result<Runtime> rt = connect();
  Result<Model> missing = rt->compile("/nonexistent/model.onnx", quick());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/model.onnx"), std::string::npos);
  // bert_tiny's inputs have dynamic dims: unbound, the error names the
  // input and shows how to bind it; bound, it compiles.
  Result<Model> dynamic = rt->compile(testing_util::zoo("bert_tiny.onnx"), quick());
  ASSERT_FALSE(dynamic.ok());
  EXPECT_NE(dynamic.status().message().find("input 'input_ids'"), std::string::npos) << dynamic.status().message();
  EXPECT_EQ(dynamic.status().message().find("--shape"), std::string::npos) << "library errors name no CLI flag";
  CompileOptions o = quick();
  o.shapes = {{"input_ids", {1, 16}}, {"attention_mask", {1, 16}}};
  Result<Model> bound = rt->compile(testing_util::zoo("bert_tiny.onnx"), o);
  ASSERT_TRUE(bound.ok()) << bound.status().to_string();
  EXPECT_EQ(bound->inputs()[0].shape, std::vector<int64_t>({1, 16}));
  o.shapes["nope"] = {1};
  Result<Model> wrong = rt->compile(testing_util::zoo("bert_tiny.onnx"), o);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("'nope'"), std::string::npos);
  Result<Session> dev = bound->session({.device = "tpu"});
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.status().message().find("'tpu'"), std::string::npos);
}

// bind_output: the Plan writes the output into the caller's memory itself;
// the Tensor that comes back borrows that memory.
TEST_F(Api, BoundOutputIsWrittenInPlace) {
  Model m = compile("resnet18");
  NamedTensors in = inputs("resnet18");
  Result<Session> s = m.session({.veus = 2});
  ASSERT_TRUE(s.ok());
  Result<NamedTensors> plain = s->run(in);
  ASSERT_TRUE(plain.ok());
  const TensorInfo& o = m.outputs()[0];
  std::vector<float> buf(static_cast<size_t>(Tensor(o.dtype, o.shape).numel()), -7.f);
  ASSERT_TRUE(s->bind_output(o.name, Tensor::wrap(o.dtype, o.shape, buf.data())).ok());
  Result<NamedTensors> out = s->run(in);
  ASSERT_TRUE(out.ok());
  const Tensor* t = out->find(o.name);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->raw(), buf.data());
  EXPECT_TRUE(same_bytes(*t, *plain->find(o.name)));
  EXPECT_EQ(s->last_breakdown().copy_out_bytes, 0u);
  // Wrong shape or name: refused, named.
  Status bad = s->bind_output(o.name, Tensor(o.dtype, {3}));
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find(o.name), std::string::npos);
  EXPECT_EQ(s->bind_output("nope", Tensor()).code(), StatusCode::kNotFound);
  // Unbound: fresh tensors again.
  ASSERT_TRUE(s->bind_output(o.name, Tensor()).ok());
  Result<NamedTensors> again = s->run(in);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->find(o.name)->raw(), buf.data());
  EXPECT_TRUE(same_bytes(*again->find(o.name), *plain->find(o.name)));
}

// An output bound to the caller's memory takes only that output's writes
// there, on every executor: the sequential executors' memory plan lets
// values made before the output share its bytes in the arena, and those
// values stay in the arena (here the stem's 3 MB, once written 3 MB past
// a 4 KB buffer).
TEST_F(Api, BoundOutputTakesOnlyItsOwnWrites) {
  Model m = compile("resnet18");
  NamedTensors in = inputs("resnet18");
  const TensorInfo& o = m.outputs()[0];
  const size_t n = static_cast<size_t>(Tensor(o.dtype, o.shape).numel());
  for (Executor e : {Executor::kSequential, Executor::kTwoLayer, Executor::kPlan}) {
    Result<Session> s = m.session({.veus = 2, .executor = e});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    Result<NamedTensors> plain = s->run(in);
    ASSERT_TRUE(plain.ok());
    // The output in the middle of a larger buffer whose rest must not change.
    const size_t pad = 1 << 20;
    std::vector<float> buf(pad + n + pad, -7.f);
    ASSERT_TRUE(s->bind_output(o.name, Tensor::wrap(o.dtype, o.shape, buf.data() + pad)).ok());
    Result<NamedTensors> out = s->run(in);
    ASSERT_TRUE(out.ok()) << executor_name(e);
    EXPECT_TRUE(same_bytes(*out->find(o.name), *plain->find(o.name))) << executor_name(e);
    EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + pad, [](float v) { return v == -7.f; })) << executor_name(e);
    EXPECT_TRUE(std::all_of(buf.end() - pad, buf.end(), [](float v) { return v == -7.f; })) << executor_name(e);
  }
}

// run(inputs, outputs): an output given is written into its memory by the
// Plan itself, for that run only; a later run() leaves that memory alone;
// a wrong output is refused before anything runs.
TEST_F(Api, RunIntoGivenOutputsWritesThereForThatRunOnly) {
  Model m = compile("resnet18");
  NamedTensors in = inputs("resnet18");
  Result<Session> s = m.session({.veus = 2});
  ASSERT_TRUE(s.ok());
  Result<NamedTensors> plain = s->run(in);
  ASSERT_TRUE(plain.ok());
  const TensorInfo& o = m.outputs()[0];
  std::vector<float> buf(static_cast<size_t>(Tensor(o.dtype, o.shape).numel()), -7.f);
  NamedTensors out{{o.name, Tensor::wrap(o.dtype, o.shape, buf.data())}};
  ASSERT_TRUE(s->run(in, out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out.find(o.name)->raw(), buf.data());
  EXPECT_TRUE(same_bytes(*out.find(o.name), *plain->find(o.name)));
  EXPECT_EQ(s->last_breakdown().copy_out_bytes, 0u);
  // The next plain run writes elsewhere: the caller's memory keeps what
  // the caller put there since.
  std::fill(buf.begin(), buf.end(), -7.f);
  Result<NamedTensors> again = s->run(in);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->find(o.name)->raw(), buf.data());
  EXPECT_TRUE(same_bytes(*again->find(o.name), *plain->find(o.name)));
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](float v) { return v == -7.f; }));
  // An empty `outputs` is filled as run() returns them.
  NamedTensors fresh;
  ASSERT_TRUE(s->run(in, fresh).ok());
  ASSERT_NE(fresh.find(o.name), nullptr);
  EXPECT_TRUE(same_bytes(*fresh.find(o.name), *plain->find(o.name)));
  // Wrong shape, wrong name: refused by name, the memory untouched.
  NamedTensors bad{{o.name, Tensor::wrap(o.dtype, {3}, buf.data())}};
  Status st = s->run(in, bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(o.name), std::string::npos);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](float v) { return v == -7.f; }));
  NamedTensors unknown{{"nope", Tensor::wrap(o.dtype, o.shape, buf.data())}};
  st = s->run(in, unknown);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("'nope'"), std::string::npos);
}

// Inputs are read where they lie: a run after the caller changed its
// buffer in place sees the new values, and a run on another buffer sees
// that one.
TEST_F(Api, InputsAreReadWhereTheyLie) {
  Model m = compile("mlp");
  Result<Session> s = m.session({.veus = 2});
  ASSERT_TRUE(s.ok());
  NamedTensors a = inputs("mlp");
  NamedTensors b;
  b.set("input", a.find("input")->clone());
  for (int64_t i = 0; i < b.find("input")->numel(); ++i) b.find("input")->data<float>()[i] *= 0.5f;
  Result<NamedTensors> ra = s->run(a);
  EXPECT_EQ(s->last_breakdown().copy_in_bytes, 0u);
  EXPECT_EQ(s->last_breakdown().copy_out_bytes, ra->find("output")->nbytes());
  Result<NamedTensors> rb = s->run(b);
  ASSERT_TRUE(ra.ok() && rb.ok());
  Tensor ra_copy = ra->find("output")->clone();
  EXPECT_FALSE(same_bytes(ra_copy, *rb->find("output")));
  std::memcpy(a.find("input")->raw(), b.find("input")->raw(), a.find("input")->nbytes());
  Result<NamedTensors> ra2 = s->run(a);
  ASSERT_TRUE(ra2.ok());
  EXPECT_TRUE(same_bytes(*ra2->find("output"), *rb->find("output")));
  // Memory not aligned to the dtype is copied in, with the same result.
  std::vector<char> raw(b.find("input")->nbytes() + 1);
  std::memcpy(raw.data() + 1, b.find("input")->raw(), b.find("input")->nbytes());
  NamedTensors odd;
  odd.set("input", Tensor::wrap(DType::kFloat32, {16, 784}, raw.data() + 1));
  Result<NamedTensors> ro = s->run(odd);
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(s->last_breakdown().copy_in_bytes, b.find("input")->nbytes());
  EXPECT_TRUE(same_bytes(*ro->find("output"), *rb->find("output")));
}

TEST_F(Api, SubmitRunsInOrderAndCallsBack) {
  Model m = compile("mlp");
  Result<Session> s = m.session({.veus = 2});
  ASSERT_TRUE(s.ok());
  NamedTensors in = inputs("mlp");
  Result<NamedTensors> ref = s->run(in);
  ASSERT_TRUE(ref.ok());
  Tensor want = ref->find("output")->clone();
  std::vector<Event> events;
  std::atomic<int> called{0};
  for (int i = 0; i < 8; ++i) {
    events.push_back(s->submit(in));
    events.back().then([&](const Status& st) { called += st.ok(); });
  }
  Result<NamedTensors> sync = s->run(in);  // served after the eight
  ASSERT_TRUE(sync.ok());
  for (Event& e : events) {
    EXPECT_TRUE(e.poll());  // the run after them has finished
    Result<NamedTensors> out = e.outputs();
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_TRUE(same_bytes(*out->find("output"), want));
  }
  EXPECT_EQ(called.load(), 8);
  // A failing request fails its own Event only.
  Event bad = s->submit({});
  EXPECT_FALSE(bad.wait().ok());
  EXPECT_TRUE(s->submit(in).wait().ok());
  EXPECT_FALSE(Event().wait().ok());
}

// A callback that holds the last handle of its session drops it on the
// session's own thread; requests still queued when the last handle goes
// fail their Events, by name.
TEST_F(Api, LastHandleDroppedInACallbackOrWithRequestsQueued) {
  Model m = compile("resnet18");
  NamedTensors in = inputs("resnet18");
  Event e;
  std::atomic<int> called{0};
  {
    Result<Session> s = m.session({.veus = 1});
    ASSERT_TRUE(s.ok());
    e = s->submit(in);
    e.then([keep = *s, &called](const Status& st) { called += st.ok(); });
  }
  EXPECT_TRUE(e.wait().ok());
  for (int i = 0; i < 200 && called.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(called.load(), 1);
  std::vector<Event> queued;
  {
    Result<Session> s = m.session({.veus = 1});
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 4; ++i) queued.push_back(s->submit(in));
  }
  int served = 0, closed = 0;
  for (Event& q : queued) {
    Status st = q.wait();
    served += st.ok();
    closed += !st.ok() && st.message().find("session was closed") != std::string::npos;
  }
  EXPECT_EQ(served + closed, 4);
}

TEST_F(Api, NullDeviceRunsThePipelineWithoutData) {
  Model m = compile("resnet18");
  Result<Session> s = m.session({.device = "null", .veus = 2});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->device(), "null");
  EXPECT_TRUE(s->cores().empty());
  Result<NamedTensors> out = s->run(inputs("resnet18"));
  ASSERT_TRUE(out.ok());
  for (const auto& [name, t] : *out) {
    EXPECT_EQ(t.shape(), m.outputs()[0].shape);
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], 0.f);
  }
  EXPECT_NE(s->plan_json().find("\"veus\""), std::string::npos);
  EXPECT_FALSE(s->run({}).ok()) << "inputs are still checked";
}

// Sessions of one process get cores of their own while free ones remain;
// two of them run at the same time, each bitwise as alone.
TEST_F(Api, SessionsOnDisjointCoresRunAtOnce) {
  if (cpu_topology().cores < 2) GTEST_SKIP() << "one core: no two disjoint core sets";
  Model m = compile("resnet18");
  Model n = compile("mlp");
  NamedTensors in_m = inputs("resnet18"), in_n = inputs("mlp");
  Tensor alone_m, alone_n;
  {
    Result<Session> s = m.session({.veus = 1});
    ASSERT_TRUE(s.ok());
    alone_m = s->run(in_m)->find("output")->clone();
    Result<Session> t = n.session({.veus = 1});
    alone_n = t->run(in_n)->find("output")->clone();
  }
  Result<Session> a = m.session({.veus = 1});
  Result<Session> b = n.session({.veus = 1});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->cores().size(), 1u);
  ASSERT_EQ(b->cores().size(), 1u);
  EXPECT_NE(a->cores()[0], b->cores()[0]);
  std::vector<DeviceInfo> ds = connect()->devices();
  EXPECT_EQ(ds[0].free_veus, ds[0].veus - 2);
  std::atomic<int> mismatches{0};
  std::thread ta([&] {
    for (int i = 0; i < 5; ++i) mismatches += !same_bytes(*a->run(in_m)->find("output"), alone_m);
  });
  std::thread tb([&] {
    for (int i = 0; i < 50; ++i) mismatches += !same_bytes(*b->run(in_n)->find("output"), alone_n);
  });
  ta.join();
  tb.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(Api, SavedExecutableReloadsAndKeepsItsVeus) {
  Model m = compile("mlp");
  const std::string path = dir_ + "/mlp.tsx";
  ASSERT_TRUE(m.save(path, 2).ok());
  Result<Model> x = connect()->compile(path);
  ASSERT_TRUE(x.ok()) << x.status().to_string();
  EXPECT_TRUE(x->is_executable());
  NamedTensors in = inputs("mlp");
  Result<NamedTensors> a = m.session({.veus = 2})->run(in);
  Result<NamedTensors> b = x->session()->run(in);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(rel_l2(*b->find("output"), *a->find("output")), 1e-6);
  Result<Session> wrong = x->session({.veus = 3});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("compiled for"), std::string::npos);
  Result<Session> two_layer = x->session({.executor = Executor::kTwoLayer});
  EXPECT_FALSE(two_layer.ok());
}

TEST_F(Api, InspectBindsShapesOnlyWhenAsked) {
  const std::string path = testing_util::zoo("bert_tiny.onnx");
  Result<ModelSummary> open = inspect(path);
  ASSERT_TRUE(open.ok()) << open.status().to_string();
  EXPECT_FALSE(open->executable);
  ASSERT_EQ(open->inputs.size(), 2u);
  EXPECT_EQ(open->inputs[0].shape, std::vector<int64_t>({-1, -1}));  // batch x seq
  EXPECT_FALSE(open->shapes_bound.ok());
  EXPECT_NE(open->shapes_bound.message().find(open->inputs[0].name), std::string::npos) << open->shapes_bound.message();
  EXPECT_TRUE(open->outputs[0].shape.empty());
  int counted = 0;
  for (const OpCount& op : open->ops) {
    counted += op.count;
    EXPECT_TRUE(op.supported) << op.op;
  }
  EXPECT_EQ(counted, open->nodes);
  EXPECT_GT(open->parameters, 0);
  EXPECT_GE(open->parameter_bytes, open->parameters);

  InspectOptions o;
  for (const TensorInfo& in : open->inputs) o.shapes[in.name] = {1, 64};
  o.graph_text = true;
  Result<ModelSummary> bound = inspect(path, o);
  ASSERT_TRUE(bound.ok()) << bound.status().to_string();
  ASSERT_TRUE(bound->shapes_bound.ok()) << bound->shapes_bound.to_string();
  EXPECT_EQ(bound->outputs[0].shape, std::vector<int64_t>({1, 64, 128}));
  EXPECT_GT(bound->flops, 1e6);
  EXPECT_NE(bound->graph_text.find("MatMul"), std::string::npos);
  EXPECT_FALSE(bound->plan.has_value());
  EXPECT_EQ(inspect(dir_ + "/none.onnx").status().code(), StatusCode::kNotFound);
}

// Every rTask sits in one vEU's list exactly once, in list order, and the
// Session runs the Plan that Model::plan showed for the same options.
TEST_F(Api, PlanShowsWhatTheSessionRuns) {
  Model m = compile("nasnet_like");
  const SessionOptions so{.veus = 2, .policy = PlanPolicy::kWavefront};
  Result<PlanInfo> p = m.plan(so);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->policy, PlanPolicy::kWavefront);
  ASSERT_GE(p->veus, 1);
  ASSERT_LE(p->veus, 2);
  ASSERT_EQ(p->program.size(), static_cast<size_t>(p->veus));
  int64_t rtasks = 0;
  for (const PlanStep& st : p->steps) rtasks += st.rtasks;
  EXPECT_EQ(static_cast<int64_t>(p->tasks.size()), rtasks);
  std::vector<std::vector<bool>> seen(p->steps.size());
  for (size_t i = 0; i < p->steps.size(); ++i) seen[i].assign(static_cast<size_t>(p->steps[i].rtasks), false);
  for (int u = 0; u < p->veus; ++u) {
    int64_t runs = 0;
    for (const PlanInstr& in : p->program[static_cast<size_t>(u)]) {
      if (in.kind != PlanInstr::Kind::kRun) continue;
      ASSERT_LT(static_cast<size_t>(in.a), p->steps.size());
      ASSERT_LT(in.b, p->steps[static_cast<size_t>(in.a)].rtasks);
      EXPECT_FALSE(seen[static_cast<size_t>(in.a)][static_cast<size_t>(in.b)]) << "rTask placed twice";
      seen[static_cast<size_t>(in.a)][static_cast<size_t>(in.b)] = true;
      ++runs;
    }
    EXPECT_EQ(runs, p->tasks_per_veu[static_cast<size_t>(u)]) << "vEU " << u;
  }
  for (const PlanTask& t : p->tasks) EXPECT_LE(t.end_us, p->predicted_us + 1e-6);
  EXPECT_GT(p->arena_bytes, 0u);
  EXPECT_LE(p->arena_bytes, p->unshared_bytes);

  Result<Session> s = m.session(so);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  Result<PlanInfo> ran = s->plan();
  ASSERT_TRUE(ran.ok()) << ran.status().to_string();
  EXPECT_EQ(ran->veus, p->veus);
  EXPECT_EQ(ran->tasks.size(), p->tasks.size());
  EXPECT_DOUBLE_EQ(ran->predicted_us, p->predicted_us);  // analytic costs: deterministic
  const CompileReport r = s->compile_report();
  EXPECT_EQ(r.ops, static_cast<int>(ran->steps.size()));
  EXPECT_EQ(r.rtasks, static_cast<int64_t>(ran->tasks.size()));
  EXPECT_GT(r.nodes_imported, 0);
  EXPECT_GT(r.compile_ms, 0);
  EXPECT_NE(s->plan_json({0.5, 0.25}).find("0.25"), std::string::npos);

  Result<Session> seq = m.session({.veus = 1, .executor = Executor::kSequential});
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(seq->plan().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.plan({.executor = Executor::kTwoLayer}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(Api, SavedPlanIsTheOneInspectReads) {
  Model m = compile("mlp");
  const std::string path = dir_ + "/mlp_cp.tsx";
  ASSERT_TRUE(m.save(path, {.veus = 2, .policy = PlanPolicy::kCriticalPath}).ok());
  EXPECT_TRUE(is_executable_file(path));
  EXPECT_FALSE(is_executable_file(testing_util::zoo("mlp.onnx")));
  Result<ModelSummary> s = inspect(path);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE(s->plan.has_value());
  EXPECT_EQ(s->plan->policy, PlanPolicy::kCriticalPath);
  EXPECT_EQ(s->plan->source, testing_util::zoo("mlp.onnx"));
  Result<PlanInfo> again = connect()->compile(path)->plan();
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->tasks.size(), s->plan->tasks.size());
  EXPECT_FALSE(inspect(path, {.shapes = {{"input", {1, 784}}}}).ok());
  EXPECT_FALSE(m.save(dir_ + "/x.tsx", {.device = "null"}).ok());
}

TEST_F(Api, OpsListEveryRKernelOfADevice) {
  Result<std::vector<OpSupport>> ops = connect()->ops("cpu");
  ASSERT_TRUE(ops.ok()) << ops.status().to_string();
  bool conv = false;
  for (const OpSupport& op : *ops) {
    EXPECT_FALSE(op.kernels.empty()) << op.op;
    conv = conv || (op.op == "Conv" && !op.kernels[0].description.empty());
  }
  EXPECT_TRUE(conv);
  // Every op of a zoo model is among them.
  Result<ModelSummary> s = inspect(testing_util::zoo("resnet18.onnx"));
  ASSERT_TRUE(s.ok());
  for (const OpCount& c : s->ops)
    EXPECT_TRUE(std::any_of(ops->begin(), ops->end(), [&](const OpSupport& o) { return o.op == c.op; })) << c.op;
  EXPECT_EQ(connect()->ops("tpu").status().code(), StatusCode::kNotFound);
}

// A profile measures each op once, then reads them from the cache.
TEST_F(Api, ProfileMeasuresThenReadsTheCache) {
  CompileOptions o = quick();
  size_t progress = 0;
  o.progress = [&](std::string_view what, size_t, size_t) { progress += what == "profiling rTasks"; };
  Model m = compile("mlp", o);
  Result<ProfileReport> first = m.profile(/*refresh=*/true);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_FALSE(first->rows.empty());
  EXPECT_EQ(first->measured, first->rows.size());
  EXPECT_GT(progress, 0u);
  for (const ProfileRow& r : first->rows) {
    EXPECT_GT(r.us_per_rtask, 0) << r.node;
    EXPECT_GT(r.rtasks, 0) << r.node;
    EXPECT_FALSE(r.cached);
  }
  Result<ProfileReport> second = m.profile();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->from_cache, second->rows.size());
  EXPECT_EQ(second->rows[0].us_per_rtask, first->rows[0].us_per_rtask);
  EXPECT_EQ(second->cache_path, first->cache_path);
}

TEST_F(Api, LogLevelIsOneSetting) {
  const LogLevel was = log_level();
  log_set_level(LogLevel::kQuiet);
  EXPECT_EQ(log_level(), LogLevel::kQuiet);
  log_set_level(was);
  EXPECT_EQ(log_level(), was);
}

TEST_F(Api, NpzRoundTripKeepsOrder) {
  NamedTensors t;
  t.set("z", Tensor::from_floats({1, 2, 3}, {3}));
  t.set("a", Tensor::from_int64s({4, 5}, {2, 1}));
  const std::string path = dir_ + "/t.npz";
  ASSERT_TRUE(save_npz(path, t).ok());
  Result<NamedTensors> back = load_npz(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ(back->begin()->first, "z");
  EXPECT_TRUE(same_bytes(*back->find("a"), *t.find("a")));
  EXPECT_FALSE(load_npz(dir_ + "/none.npz").ok());
}

}  // namespace
}  // namespace tessera
