#include "tests/conformance/harness.h"

#include <cmath>
#include <cstring>

#include "base/strings.h"
#include "kernels/cpu/kernel.h"

namespace tessera::testing {

Tensor Rng::floats(Shape s, float lo, float hi) {
  Tensor t(DType::kFloat32, std::move(s));
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(gen_);
  return t;
}

Tensor Rng::ints(Shape s, int64_t lo, int64_t hi, DType dt) {
  Tensor t(dt, std::move(s));
  std::uniform_int_distribution<int64_t> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = u(gen_);
    if (dt == DType::kInt64) t.data<int64_t>()[i] = v;
    else if (dt == DType::kInt32) t.data<int32_t>()[i] = static_cast<int32_t>(v);
    else t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
  }
  return t;
}

Tensor Rng::bools(Shape s) { return ints(std::move(s), 0, 1, DType::kBool); }

Attribute attr_i(int64_t v) { Attribute a; a.kind = Attribute::Kind::kInt; a.i = v; return a; }
Attribute attr_f(float v) { Attribute a; a.kind = Attribute::Kind::kFloat; a.f = v; return a; }
Attribute attr_s(std::string v) { Attribute a; a.kind = Attribute::Kind::kString; a.s = std::move(v); return a; }
Attribute attr_ints(std::vector<int64_t> v) { Attribute a; a.kind = Attribute::Kind::kInts; a.ints = std::move(v); return a; }
Attribute attr_t(Tensor t) { Attribute a; a.kind = Attribute::Kind::kTensor; a.t = std::move(t); return a; }

Result<std::vector<Tensor>> run_case(const OpCase& c, Executor executor, int64_t tasks_per_op) {
  auto g = std::make_unique<Graph>();
  g->opset = c.opset;
  std::vector<Value*> ins;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    if (!in.t.defined()) {
      ins.push_back(nullptr);
      continue;
    }
    std::string name = str_cat("in", i);
    if (in.constant) {
      ins.push_back(g->add_constant(name, in.t));
    } else {
      ins.push_back(g->add_input(name, in.t.dtype(), in.t.shape()));
      feeds[name] = in.t;
    }
  }
  Node* n = g->add_node(c.op, "node", ins, c.outputs);
  n->attrs = c.attrs;
  n->opset = c.opset;
  for (Value* o : n->outputs) g->mark_output(o);
  CompileConfig co;
  co.tasks_per_op = tasks_per_op;
  co.lower_recurrent = c.lower_recurrent;
  // A table in which the named rKernel is the op's only one (alive while
  // the Program is).
  std::vector<RKernel> table;
  if (!c.kernel.empty()) {
    bool found = false;
    for (const RKernel& k : cpu_kernels()) {
      if (k.op == c.op && k.name != c.kernel) continue;
      found = found || k.name == c.kernel;
      table.push_back(k);
    }
    if (!found) return not_found(str_cat("no rKernel '", c.kernel, "' for ", c.op));
    co.kernels = table;
  }
  TESSERA_ASSIGN_OR_RETURN(auto program, compile_graph(std::move(g), co));
  if (program->stats.recurrent_lowered != (c.lower_recurrent ? 1 : 0))
    return internal_error(str_cat(c.op, ": ", program->stats.recurrent_lowered, " layers lowered, expected ",
                                  c.lower_recurrent ? 1 : 0));
  EngineOptions so;
  so.executor = executor;
  so.threads = 2;
  TESSERA_ASSIGN_OR_RETURN(auto session, Engine::create(std::move(program), so));
  session->poison_arena();
  for (auto& [name, t] : feeds) TESSERA_RETURN_IF_ERROR(session->set_input(name, t));
  TESSERA_RETURN_IF_ERROR(session->run().wait());
  std::vector<Tensor> outs;
  for (size_t i = 0; i < session->outputs().size(); ++i) outs.push_back(session->output(i));
  return outs;
}

void expect_matches(const OpCase& c, const std::vector<Tensor>& reference, double tol) {
  SCOPED_TRACE(str_cat("inputs from random seed ", ::testing::UnitTest::GetInstance()->random_seed(),
                       " (rerun with --gtest_random_seed=<seed>)"));
  std::vector<Tensor> first;  // the first run's outputs: every tiling must give their bits
  for (Executor ex : {Executor::kSequential, Executor::kTwoLayer}) {
    for (int64_t tasks : {int64_t{1}, int64_t{3}, int64_t{0}}) {
      SCOPED_TRACE(str_cat(c.op, " executor=", executor_name(ex), " tasks=", tasks));
      auto outs = run_case(c, ex, tasks);
      ASSERT_TRUE(outs.ok()) << outs.status().to_string();
      ASSERT_EQ(outs->size(), reference.size());
      if (first.empty()) first = *outs;
      for (size_t k = 0; k < first.size() && c.exact_tiling; ++k)
        EXPECT_EQ(std::memcmp((*outs)[k].raw(), first[k].raw(), first[k].nbytes()), 0)
            << "output " << k << " differs from the first run's (1 rTask, sequential)";
      for (size_t k = 0; k < reference.size(); ++k) {
        const Tensor& got = (*outs)[k];
        const Tensor& want = reference[k];
        ASSERT_EQ(dtype_name(got.dtype()), dtype_name(want.dtype())) << "output " << k;
        ASSERT_EQ(got.shape(), want.shape()) << "output " << k;
        if (got.dtype() != DType::kFloat32) {
          for (int64_t i = 0; i < got.numel(); ++i)
            ASSERT_EQ(got.value_as_int64(i), want.value_as_int64(i)) << "output " << k << " element " << i;
          continue;
        }
        double err = 0, norm = 0;
        for (int64_t i = 0; i < got.numel(); ++i) {
          double g = got.data<float>()[i], w = want.data<float>()[i];
          if (std::isnan(w)) {
            ASSERT_TRUE(std::isnan(g)) << "output " << k << " element " << i;
            continue;
          }
          ASSERT_FALSE(std::isnan(g)) << "output " << k << " element " << i << " is NaN (unwritten?)";
          if (std::isinf(w)) {
            ASSERT_EQ(g, w) << "element " << i;
            continue;
          }
          err += (g - w) * (g - w);
          norm += w * w;
        }
        double rel = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
        EXPECT_LE(rel, tol) << "output " << k << " rel-L2 error";
      }
    }
  }
}

std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.rank());
  for (int d = s.rank() - 1; d >= 0; --d) {
    idx[d] = flat % s.dims[d];
    flat /= s.dims[d];
  }
  return idx;
}

int64_t ravel_broadcast(const std::vector<int64_t>& out_idx, const Shape& in) {
  int64_t off = 0;
  int shift = static_cast<int>(out_idx.size()) - in.rank();
  for (int d = 0; d < in.rank(); ++d) off = off * in.dims[d] + (in.dims[d] == 1 ? 0 : out_idx[d + shift]);
  return off;
}

float at(const Tensor& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, d = 0;
  for (int64_t i : idx) off = off * t.shape()[d++] + i;
  return t.data<float>()[off];
}

}  // namespace tessera::testing
