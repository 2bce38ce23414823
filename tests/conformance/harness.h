// Conformance harness: builds a one-node graph, compiles and runs it through
// the whole pipeline (bind, fold, kernels, memory plan, session) under each
// executor and several tilings, and compares every output with a naive
// reference computed on the same fresh random inputs.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/program.h"
#include "devices/cpu/engine.h"

namespace tessera::testing {

// One input of the node: a runtime graph input (random data) or a constant.
struct In {
  Tensor t;
  bool constant = false;
};

struct OpCase {
  OpCase(std::string op_type, std::vector<In> ins, std::map<std::string, Attribute> attributes = {}, int outs = 1)
      : op(std::move(op_type)), inputs(std::move(ins)), attrs(std::move(attributes)), outputs(outs) {}
  std::string op;
  std::vector<In> inputs;  // undefined Tensor = absent optional input
  std::map<std::string, Attribute> attrs;
  int outputs = 1;
  int64_t opset = 17;
  bool lower_recurrent = false;  // lower LSTM/GRU to per-step cells (checked to happen)
  // Every tiling gives the same bits (the kernel's reduction order does not
  // depend on its rTasks). False where a library sgemm does the sums: its
  // blocking follows the tile's shape.
  bool exact_tiling = true;
  // The rKernel to run the op with (it must fit the node); "" = the
  // compiler's default, the first that fits.
  std::string kernel = {};
};

// Random tensors, from one generator per test so runs are reproducible given
// --gtest_random_seed, but fresh across seeds.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  Tensor floats(Shape s, float lo = -1.f, float hi = 1.f);
  Tensor ints(Shape s, int64_t lo, int64_t hi, DType dt = DType::kInt64);
  Tensor bools(Shape s);
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

Attribute attr_i(int64_t v);
Attribute attr_f(float v);
Attribute attr_s(std::string v);
Attribute attr_ints(std::vector<int64_t> v);
Attribute attr_t(Tensor t);

// Runs the case; returns the outputs (or a failed Status for errors).
Result<std::vector<Tensor>> run_case(const OpCase& c, Executor executor, int64_t tasks_per_op);

// Runs under sequential/two-layer and tasks 1, 3 and default; expects every
// output to match `reference` (rel-L2 <= tol, exact for non-floats) and to
// hold no NaN unless the reference does.
void expect_matches(const OpCase& c, const std::vector<Tensor>& reference, double tol = 1e-5);

// The fixture of the op suites split across matmul_test.cc, conv_test.cc
// and nn_test.cc (one fixture class for the one `Nn` suite): a generator
// seeded from --gtest_random_seed.
class Nn : public ::testing::Test {
 protected:
  Rng rng{static_cast<uint64_t>(::testing::UnitTest::GetInstance()->random_seed()) * 13 + 5};
};

// The float at a full multi-index of a row-major tensor.
float at(const Tensor& t, std::initializer_list<int64_t> idx);

// Numpy-style multi-index helpers for references.
std::vector<int64_t> unravel(int64_t flat, const Shape& s);
int64_t ravel_broadcast(const std::vector<int64_t>& out_idx, const Shape& in);

}  // namespace tessera::testing
