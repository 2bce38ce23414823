// Elementwise rKernels: unary math and activations, binary arithmetic and
// comparisons with numpy broadcasting, Where, Cast, Clip and copies. An rTask
// is a contiguous range of output elements.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/strings.h"
#include "ir/dtype.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/kernel.h"

namespace tessera {
namespace {

constexpr int64_t kGrain = 16384;  // elements per rTask by default

// ---------------------------------------------------------------- unary ---

enum class Unary {
  kAbs, kNeg, kSqrt, kReciprocal, kExp, kLog, kErf, kTanh, kSigmoid, kRelu, kLeakyRelu, kElu,
  kHardSigmoid, kHardSwish, kSoftplus, kNot,
};

struct UnaryAttrs {
  float alpha = 0, beta = 0;
};

template <typename T>
void unary_loop(Unary op, const T* x, T* y, int64_t n, const UnaryAttrs& a) {
  switch (op) {
    case Unary::kAbs: for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? static_cast<T>(-x[i]) : x[i]; return;
    case Unary::kNeg: for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(-x[i]); return;
    case Unary::kRelu: for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : T(0); return;
    default: break;
  }
  if constexpr (std::is_same_v<T, float>) {
    const float alpha = a.alpha, beta = a.beta;  // locals: loads through `a` could alias y
    switch (op) {
      case Unary::kSqrt: for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]); return;
      case Unary::kReciprocal: for (int64_t i = 0; i < n; ++i) y[i] = 1.f / x[i]; return;
      case Unary::kExp: for (int64_t i = 0; i < n; ++i) y[i] = fast_exp(x[i]); return;
      case Unary::kLog: for (int64_t i = 0; i < n; ++i) y[i] = std::log(x[i]); return;
      case Unary::kErf: erf_n(x, y, n); return;
      case Unary::kTanh: for (int64_t i = 0; i < n; ++i) y[i] = fast_tanh(x[i]); return;
      case Unary::kSigmoid: sigmoid_n(x, y, n); return;
      case Unary::kLeakyRelu: for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= 0 ? x[i] : alpha * x[i]; return;
      case Unary::kElu:
        // expm1: exp(x) - 1 cancels to a few ulps for x just below 0.
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= 0 ? x[i] : alpha * std::expm1(x[i]);
        return;
      case Unary::kHardSigmoid:
        for (int64_t i = 0; i < n; ++i) y[i] = hard_sigmoid(x[i], alpha, beta);
        return;
      case Unary::kHardSwish:
        for (int64_t i = 0; i < n; ++i) y[i] = hard_swish(x[i]);
        return;
      case Unary::kSoftplus:
        // log(1 + e^x), computed without overflow for large x.
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] + std::log1p(std::exp(-x[i])) : std::log1p(std::exp(x[i]));
        return;
      default: break;
    }
  }
}

class UnaryOp : public ROp {
 public:
  UnaryOp(Unary op, DType dt, int64_t n, UnaryAttrs a, const KernelParams& p) : op_(op), dt_(dt), n_(n), a_(a) {
    tasks_ = choose_tasks(n, kGrain, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(n_, tasks_, task, &b, &e);
    switch (dt_) {
      case DType::kFloat32:
        unary_loop(op_, static_cast<const float*>(args.in[0]) + b, static_cast<float*>(args.out[0]) + b, e - b, a_);
        break;
      case DType::kInt64:
        unary_loop(op_, static_cast<const int64_t*>(args.in[0]) + b, static_cast<int64_t*>(args.out[0]) + b, e - b, a_);
        break;
      case DType::kInt32:
        unary_loop(op_, static_cast<const int32_t*>(args.in[0]) + b, static_cast<int32_t*>(args.out[0]) + b, e - b, a_);
        break;
      case DType::kBool: {  // Not
        auto* x = static_cast<const uint8_t*>(args.in[0]);
        auto* y = static_cast<uint8_t*>(args.out[0]);
        for (int64_t i = b; i < e; ++i) y[i] = !x[i];
        break;
      }
      default: break;
    }
  }

 private:
  Unary op_;
  DType dt_;
  int64_t n_;
  UnaryAttrs a_;
};

template <Unary kOp>
Result<std::unique_ptr<ROp>> make_unary(const Node& n, const KernelParams& p) {
  DType dt = n.inputs[0]->dtype;
  bool int_ok = kOp == Unary::kAbs || kOp == Unary::kNeg || kOp == Unary::kRelu;
  bool ok = kOp == Unary::kNot ? dt == DType::kBool
                               : dt == DType::kFloat32 || (int_ok && (dt == DType::kInt64 || dt == DType::kInt32));
  if (!ok) return unimplemented(str_cat(n.label(), ": ", n.op_type, " on ", dtype_name(dt), " is not supported"));
  UnaryAttrs a;
  switch (kOp) {
    case Unary::kLeakyRelu: a.alpha = n.attr_float("alpha", 0.01f); break;
    case Unary::kElu: a.alpha = n.attr_float("alpha", 1.0f); break;
    case Unary::kHardSigmoid:
      a.alpha = n.attr_float("alpha", 0.2f);
      a.beta = n.attr_float("beta", 0.5f);
      break;
    default: break;
  }
  return std::unique_ptr<ROp>(new UnaryOp(kOp, dt, n.outputs[0]->shape.numel(), a, p));
}

// --------------------------------------------------------------- binary ---

enum class Binary { kAdd, kSub, kMul, kDiv, kPow, kMin, kMax, kEqual, kLess, kGreater, kAnd, kMod, kFmod };

template <Binary kOp, typename T>
inline auto binary_apply(T a, T b) {
  if constexpr (kOp == Binary::kAdd) return static_cast<T>(a + b);
  else if constexpr (kOp == Binary::kSub) return static_cast<T>(a - b);
  else if constexpr (kOp == Binary::kMul) return static_cast<T>(a * b);
  else if constexpr (kOp == Binary::kDiv) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(b == 0 ? 0 : a / b);
    else return static_cast<T>(a / b);
  } else if constexpr (kOp == Binary::kMin) return a < b ? a : b;
  else if constexpr (kOp == Binary::kMax) return a > b ? a : b;
  else if constexpr (kOp == Binary::kEqual) return static_cast<uint8_t>(a == b);
  else if constexpr (kOp == Binary::kLess) return static_cast<uint8_t>(a < b);
  else if constexpr (kOp == Binary::kGreater) return static_cast<uint8_t>(a > b);
  else if constexpr (kOp == Binary::kAnd) return static_cast<uint8_t>(a && b);
  else if constexpr (kOp == Binary::kFmod) {  // C fmod: sign of the dividend
    if constexpr (std::is_integral_v<T>) return static_cast<T>(b == 0 ? 0 : a % b);
    else return static_cast<T>(std::fmod(a, b));
  } else if constexpr (kOp == Binary::kMod) {  // Python %: sign of the divisor
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return T(0);
      T r = static_cast<T>(a % b);
      return static_cast<T>((r != 0 && ((r < 0) != (b < 0))) ? r + b : r);
    } else {
      T r = std::fmod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
  }
  else return static_cast<T>(std::pow(a, b));
}

// o[i] = f(a[i*sa], b[i*sb]) with sa, sb in {0, 1}: four loops the compiler
// vectorizes.
template <Binary kOp, typename T, typename R>
void binary_run(const T* a, int64_t sa, const T* b, int64_t sb, R* o, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = binary_apply<kOp>(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = binary_apply<kOp>(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = binary_apply<kOp>(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = binary_apply<kOp>(a[i * sa], b[i * sb]);
  }
}

template <Binary kOp, typename T>
class BinaryOp : public ROp {
  static constexpr bool kCompare = kOp == Binary::kEqual || kOp == Binary::kLess || kOp == Binary::kGreater ||
                                   kOp == Binary::kAnd;
  using R = std::conditional_t<kCompare, uint8_t, T>;

 public:
  BinaryOp(BroadcastPlan plan, const KernelParams& p) : plan_(std::move(plan)) {
    tasks_ = choose_tasks(plan_.numel, kGrain, p);
    if (plan_.rank == 1 && plan_.inputs == 2) {
      flat_ = true;
      numel_ = plan_.numel;
      stride_[0] = plan_.stride[0][0];
      stride_[1] = plan_.stride[1][0];
    }
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    auto* out = static_cast<R*>(args.out[0]);
    if (flat_) {
      // One run (merged dims, two inputs): no broadcast walk (a division
      // per dim), nothing read beyond this object's first cache line: a
      // third of the walk's cost per one-float rTask.
      task_range(numel_, tasks_, task, &b, &e);
      binary_run<kOp>(static_cast<const T*>(args.in[0]) + b * stride_[0], stride_[0],
                      static_cast<const T*>(args.in[1]) + b * stride_[1], stride_[1], out + b, e - b);
      return;
    }
    task_range(plan_.numel, tasks_, task, &b, &e);
    const int k = plan_.inputs;
    for_each_run(plan_, b, e, [&](int64_t o, const int64_t* offs, int64_t len, const int64_t* st) {
      binary_run<kOp>(static_cast<const T*>(args.in[0]) + offs[0], st[0], static_cast<const T*>(args.in[1]) + offs[1],
                      st[1], out + o, len);
      if constexpr (!kCompare) {  // variadic Min/Max: fold the rest in
        for (int i = 2; i < k; ++i)
          binary_run<kOp>(out + o, 1, static_cast<const T*>(args.in[i]) + offs[i], st[i], out + o, len);
      }
    });
  }

 private:
  // The flat case, in the object's first cache line (after the vtable and
  // ROp's fields).
  bool flat_ = false;
  int64_t numel_ = 0;
  int64_t stride_[2] = {};
  BroadcastPlan plan_;
};

// Single-input Min/Max: a copy.
class CopyOp : public ROp {
 public:
  CopyOp(size_t bytes, const KernelParams& p) : bytes_(bytes) {
    tasks_ = choose_tasks(static_cast<int64_t>(bytes), kGrain * 4, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(static_cast<int64_t>(bytes_), tasks_, task, &b, &e);
    if (e > b) std::memcpy(static_cast<char*>(args.out[0]) + b, static_cast<const char*>(args.in[0]) + b, e - b);
  }

 private:
  size_t bytes_;
};

BroadcastPlan plan_for(const Node& n) {
  std::vector<Shape> shapes;
  for (Value* v : n.inputs) shapes.push_back(v->shape);
  return make_broadcast(n.outputs[0]->shape, shapes);
}

template <Binary kOp>
Result<std::unique_ptr<ROp>> make_binary(const Node& n, const KernelParams& p) {
  if (n.inputs.size() > static_cast<size_t>(kMaxBroadcastInputs))
    return unimplemented(str_cat(n.label(), ": more than ", kMaxBroadcastInputs, " inputs"));
  DType dt = n.inputs[0]->dtype;
  if (n.inputs.size() == 1) {
    return std::unique_ptr<ROp>(new CopyOp(static_cast<size_t>(n.outputs[0]->shape.numel()) * dtype_size(dt), p));
  }
  if constexpr (kOp == Binary::kPow) {
    if (n.inputs[1]->dtype != dt) return unimplemented(str_cat(n.label(), ": Pow with mixed types"));
  }
  if constexpr (kOp == Binary::kAnd) {
    return std::unique_ptr<ROp>(new BinaryOp<kOp, uint8_t>(plan_for(n), p));
  } else {
    switch (dt) {
      case DType::kFloat32: return std::unique_ptr<ROp>(new BinaryOp<kOp, float>(plan_for(n), p));
      case DType::kInt64: return std::unique_ptr<ROp>(new BinaryOp<kOp, int64_t>(plan_for(n), p));
      case DType::kInt32: return std::unique_ptr<ROp>(new BinaryOp<kOp, int32_t>(plan_for(n), p));
      case DType::kBool:
        if (kOp == Binary::kEqual) return std::unique_ptr<ROp>(new BinaryOp<kOp, uint8_t>(plan_for(n), p));
        break;
      default: break;
    }
  }
  return unimplemented(str_cat(n.label(), ": ", n.op_type, " on ", dtype_name(dt), " is not supported"));
}

// Mod: fmod=1 is C's fmod (required for floats by ONNX), fmod=0 Python's %.
Result<std::unique_ptr<ROp>> make_mod(const Node& n, const KernelParams& p) {
  if (n.attr_int("fmod", 0) != 0) return make_binary<Binary::kFmod>(n, p);
  if (n.inputs[0]->dtype == DType::kFloat32)
    return invalid_argument(str_cat(n.label(), ": Mod on floats requires fmod=1"));
  return make_binary<Binary::kMod>(n, p);
}

// ---------------------------------------------------------------- Where ---

template <typename T>
class WhereOp : public ROp {
 public:
  WhereOp(BroadcastPlan plan, const KernelParams& p) : plan_(std::move(plan)) {
    tasks_ = choose_tasks(plan_.numel, kGrain, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(plan_.numel, tasks_, task, &b, &e);
    auto* c = static_cast<const uint8_t*>(args.in[0]);
    auto* x = static_cast<const T*>(args.in[1]);
    auto* y = static_cast<const T*>(args.in[2]);
    auto* out = static_cast<T*>(args.out[0]);
    for_each_run(plan_, b, e, [&](int64_t o, const int64_t* offs, int64_t len, const int64_t* st) {
      for (int64_t i = 0; i < len; ++i)
        out[o + i] = c[offs[0] + i * st[0]] ? x[offs[1] + i * st[1]] : y[offs[2] + i * st[2]];
    });
  }

 private:
  BroadcastPlan plan_;
};

Result<std::unique_ptr<ROp>> make_where(const Node& n, const KernelParams& p) {
  switch (dtype_size(n.inputs[1]->dtype)) {
    case 1: return std::unique_ptr<ROp>(new WhereOp<uint8_t>(plan_for(n), p));
    case 4: return std::unique_ptr<ROp>(new WhereOp<uint32_t>(plan_for(n), p));
    case 8: return std::unique_ptr<ROp>(new WhereOp<uint64_t>(plan_for(n), p));
    default: return unimplemented(str_cat(n.label(), ": element type"));
  }
}

// ----------------------------------------------------------------- Cast ---

// Float results of a Cast to float16/bfloat16 are rounded to that type and
// kept as float32 (storage types compute as float32).
enum class Round { kNone, kHalf, kBFloat16 };

class CastOp : public ROp {
 public:
  CastOp(DType from, DType to, Round round, int64_t n, const KernelParams& p)
      : from_(from), to_(to), round_(round), n_(n) {
    tasks_ = choose_tasks(n, kGrain, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(n_, tasks_, task, &b, &e);
    const void* in = args.in[0];
    void* out = args.out[0];
    for (int64_t i = b; i < e; ++i) {
      if (from_ == DType::kFloat32) store_float(out, i, static_cast<const float*>(in)[i]);
      else store_int(out, i, load_int(in, i));
    }
  }

 private:
  int64_t load_int(const void* p, int64_t i) const {
    switch (from_) {
      case DType::kInt64: return static_cast<const int64_t*>(p)[i];
      case DType::kInt32: return static_cast<const int32_t*>(p)[i];
      case DType::kInt8: return static_cast<const int8_t*>(p)[i];
      case DType::kUInt8: case DType::kBool: return static_cast<const uint8_t*>(p)[i];
      default: return 0;
    }
  }
  void store_float(void* p, int64_t i, float v) const {
    switch (to_) {
      case DType::kFloat32:
        if (round_ == Round::kHalf) v = half_to_float(float_to_half(v));
        else if (round_ == Round::kBFloat16) v = bfloat16_to_float(float_to_bfloat16(v));
        static_cast<float*>(p)[i] = v;
        return;
      case DType::kBool: static_cast<uint8_t*>(p)[i] = v != 0; return;
      default: break;
    }
    // Float to integer: truncate toward zero; NaN and out-of-range give the
    // integer minimum, as x86 conversions do.
    int64_t x = std::isfinite(v) && std::fabs(v) < 9.2e18f ? static_cast<int64_t>(v)
                                                           : std::numeric_limits<int64_t>::min();
    store_int_raw(p, i, x);
  }
  void store_int(void* p, int64_t i, int64_t v) const {
    if (to_ == DType::kFloat32) {
      store_float(p, i, static_cast<float>(v));
      return;
    }
    if (to_ == DType::kBool) {
      static_cast<uint8_t*>(p)[i] = v != 0;
      return;
    }
    store_int_raw(p, i, v);
  }
  void store_int_raw(void* p, int64_t i, int64_t v) const {
    switch (to_) {
      case DType::kInt64: static_cast<int64_t*>(p)[i] = v; break;
      case DType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
      case DType::kInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
      case DType::kUInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
      case DType::kBool: static_cast<uint8_t*>(p)[i] = v != 0; break;
      default: break;
    }
  }

  DType from_, to_;
  Round round_;
  int64_t n_;
};

Result<std::unique_ptr<ROp>> make_cast(const Node& n, const KernelParams& p) {
  int64_t to = n.attr_int("to", 1);
  Round r = to == 10 ? Round::kHalf : to == 16 ? Round::kBFloat16 : Round::kNone;
  return std::unique_ptr<ROp>(new CastOp(n.inputs[0]->dtype, n.outputs[0]->dtype, r, n.outputs[0]->shape.numel(), p));
}

// ----------------------------------------------------------------- Clip ---

template <typename T>
class ClipOp : public ROp {
 public:
  ClipOp(int64_t n, bool has_min, bool has_max, const KernelParams& p) : n_(n), has_min_(has_min), has_max_(has_max) {
    tasks_ = choose_tasks(n, kGrain, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(n_, tasks_, task, &b, &e);
    T lo = has_min_ ? *static_cast<const T*>(args.in[1]) : std::numeric_limits<T>::lowest();
    T hi = has_max_ ? *static_cast<const T*>(args.in[2]) : std::numeric_limits<T>::max();
    auto* x = static_cast<const T*>(args.in[0]);
    auto* y = static_cast<T*>(args.out[0]);
    for (int64_t i = b; i < e; ++i) y[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
  }

 private:
  int64_t n_;
  bool has_min_, has_max_;
};

Result<std::unique_ptr<ROp>> make_clip(const Node& n, const KernelParams& p) {
  bool lo = n.input(1) != nullptr, hi = n.input(2) != nullptr;
  for (size_t i = 1; i < 3; ++i)
    if (n.input(i) && n.input(i)->shape.numel() != 1)
      return invalid_argument(str_cat(n.label(), ": min and max must be scalars"));
  int64_t count = n.outputs[0]->shape.numel();
  switch (n.inputs[0]->dtype) {
    case DType::kFloat32: return std::unique_ptr<ROp>(new ClipOp<float>(count, lo, hi, p));
    case DType::kInt64: return std::unique_ptr<ROp>(new ClipOp<int64_t>(count, lo, hi, p));
    case DType::kInt32: return std::unique_ptr<ROp>(new ClipOp<int32_t>(count, lo, hi, p));
    default: return unimplemented(str_cat(n.label(), ": Clip on ", dtype_name(n.inputs[0]->dtype)));
  }
}

// Identity, Dropout (inference): copy input 0; Dropout's mask is all true.
class PassthroughOp : public ROp {
 public:
  PassthroughOp(size_t bytes, int64_t mask, const KernelParams& p) : bytes_(bytes), mask_(mask) {
    tasks_ = choose_tasks(static_cast<int64_t>(bytes), kGrain * 4, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(static_cast<int64_t>(bytes_), tasks_, task, &b, &e);
    if (e > b) std::memcpy(static_cast<char*>(args.out[0]) + b, static_cast<const char*>(args.in[0]) + b, e - b);
    if (mask_ >= 0 && args.out[1] != nullptr) {
      int64_t mb, me;
      task_range(mask_, tasks_, task, &mb, &me);
      if (me > mb) std::memset(static_cast<uint8_t*>(args.out[1]) + mb, 1, me - mb);
    }
  }

 private:
  size_t bytes_;
  int64_t mask_;
};

Result<std::unique_ptr<ROp>> make_passthrough(const Node& n, const KernelParams& p) {
  const Value* in = n.inputs[0];
  int64_t mask = n.outputs.size() > 1 ? n.outputs[1]->shape.numel() : -1;
  return std::unique_ptr<ROp>(new PassthroughOp(static_cast<size_t>(in->shape.numel()) * dtype_size(in->dtype), mask, p));
}

// ---------------------------------------------- fused elementwise chain ---

// TesseraFusedElementwise (made by the compiler's fusion pass): a chain of
// float elementwise ops applied to a block of output elements held in a
// local buffer, so intermediate tensors never go to memory. Input 0 starts
// the chain; step i applies ops[i] to the running value and, for binary
// ops, input sides[i] (-1: none), as the left operand when left[i] is 1.
// Every input broadcasts to the output. Each op is the unfused rKernel's
// own arithmetic, so results are bitwise those of the unfused chain.
struct FusedStep {
  bool unary = true;
  Unary u = Unary::kRelu;
  Binary b = Binary::kAdd;
  bool clip = false;
  int side = -1;
  bool left = false;
  UnaryAttrs a;
};

template <Binary kOp>
void fused_binary(float* r, const float* s, int64_t ss, bool left, int64_t n) {
  if (left) binary_run<kOp>(s, ss, r, int64_t{1}, r, n);
  else binary_run<kOp>(r, int64_t{1}, s, ss, r, n);
}

class FusedElementwiseOp : public ROp {
 public:
  static constexpr int64_t kBlock = 512;
  FusedElementwiseOp(BroadcastPlan plan, std::vector<FusedStep> steps, const KernelParams& p)
      : plan_(std::move(plan)), steps_(std::move(steps)) {
    tasks_ = choose_tasks(plan_.numel, kGrain, p);
  }
  void run(int64_t task, const TaskArgs& args) const override {
    int64_t b, e;
    task_range(plan_.numel, tasks_, task, &b, &e);
    float* out = static_cast<float*>(args.out[0]);
    for_each_run(plan_, b, e, [&](int64_t o, const int64_t* offs, int64_t len, const int64_t* st) {
      for (int64_t j = 0; j < len; j += kBlock) {
        const int64_t n = std::min(kBlock, len - j);
        float r[kBlock];
        const float* in0 = static_cast<const float*>(args.in[0]) + offs[0] + j * st[0];
        if (st[0] == 1) std::memcpy(r, in0, static_cast<size_t>(n) * sizeof(float));
        else std::fill(r, r + n, *in0);
        for (const FusedStep& f : steps_) {
          if (f.clip) {
            const float lo = f.a.alpha, hi = f.a.beta;
            for (int64_t i = 0; i < n; ++i) r[i] = r[i] < lo ? lo : (r[i] > hi ? hi : r[i]);
          } else if (f.unary) {
            unary_loop(f.u, r, r, n, f.a);
          } else {
            const float* s = static_cast<const float*>(args.in[f.side]) + offs[f.side] + j * st[f.side];
            switch (f.b) {
              case Binary::kAdd: fused_binary<Binary::kAdd>(r, s, st[f.side], f.left, n); break;
              case Binary::kSub: fused_binary<Binary::kSub>(r, s, st[f.side], f.left, n); break;
              case Binary::kMul: fused_binary<Binary::kMul>(r, s, st[f.side], f.left, n); break;
              case Binary::kDiv: fused_binary<Binary::kDiv>(r, s, st[f.side], f.left, n); break;
              case Binary::kMin: fused_binary<Binary::kMin>(r, s, st[f.side], f.left, n); break;
              case Binary::kMax: fused_binary<Binary::kMax>(r, s, st[f.side], f.left, n); break;
              default: break;
            }
          }
        }
        std::memcpy(out + o + j, r, static_cast<size_t>(n) * sizeof(float));
      }
    });
  }

 private:
  BroadcastPlan plan_;
  std::vector<FusedStep> steps_;
};

// The ops a fused chain may hold, by ONNX name.
bool fused_op_parse(const std::string& name, FusedStep* f) {
  static const std::pair<const char*, Unary> kUnary[] = {
      {"Abs", Unary::kAbs}, {"Neg", Unary::kNeg}, {"Sqrt", Unary::kSqrt}, {"Reciprocal", Unary::kReciprocal},
      {"Exp", Unary::kExp}, {"Log", Unary::kLog}, {"Erf", Unary::kErf}, {"Tanh", Unary::kTanh},
      {"Sigmoid", Unary::kSigmoid}, {"Relu", Unary::kRelu}, {"LeakyRelu", Unary::kLeakyRelu}, {"Elu", Unary::kElu},
      {"HardSigmoid", Unary::kHardSigmoid}, {"HardSwish", Unary::kHardSwish}, {"Softplus", Unary::kSoftplus}};
  static const std::pair<const char*, Binary> kBinary[] = {{"Add", Binary::kAdd}, {"Sub", Binary::kSub},
                                                           {"Mul", Binary::kMul}, {"Div", Binary::kDiv},
                                                           {"Min", Binary::kMin}, {"Max", Binary::kMax}};
  for (const auto& [n, u] : kUnary)
    if (name == n) {
      f->unary = true;
      f->u = u;
      return true;
    }
  for (const auto& [n, b] : kBinary)
    if (name == n) {
      f->unary = false;
      f->b = b;
      return true;
    }
  if (name == "Clip") {
    f->clip = true;
    return true;
  }
  return false;
}

Result<std::unique_ptr<ROp>> make_fused_elementwise(const Node& n, const KernelParams& p) {
  if (n.inputs.size() > static_cast<size_t>(kMaxBroadcastInputs))
    return invalid_argument(str_cat(n.label(), ": more than ", kMaxBroadcastInputs, " inputs"));
  for (const Value* v : n.inputs)
    if (v == nullptr || v->dtype != DType::kFloat32)
      return invalid_argument(str_cat(n.label(), ": fused elementwise inputs must be float32"));
  const Attribute* ops = n.has_attr("ops") ? &n.attrs.at("ops") : nullptr;
  std::vector<int64_t> sides = n.attr_ints("sides"), left = n.attr_ints("left");
  std::vector<float> alphas = n.attr_floats("alphas"), betas = n.attr_floats("betas");
  const size_t k = ops ? ops->strings.size() : 0;
  if (k == 0 || sides.size() != k || left.size() != k || alphas.size() != k || betas.size() != k)
    return invalid_argument(str_cat(n.label(), ": malformed fused program"));
  std::vector<FusedStep> steps(k);
  for (size_t i = 0; i < k; ++i) {
    FusedStep& f = steps[i];
    if (!fused_op_parse(ops->strings[i], &f))
      return invalid_argument(str_cat(n.label(), ": op '", ops->strings[i], "' cannot be fused"));
    f.side = static_cast<int>(sides[i]);
    f.left = left[i] != 0;
    f.a.alpha = alphas[i];
    f.a.beta = betas[i];
    const bool binary = !f.unary && !f.clip;
    if (binary != (f.side >= 0) || f.side >= static_cast<int>(n.inputs.size()) || f.side < -1)
      return invalid_argument(str_cat(n.label(), ": fused step ", i, " names input ", f.side));
  }
  return std::unique_ptr<ROp>(new FusedElementwiseOp(plan_for(n), std::move(steps), p));
}

// Every rTask here computes the t-th of n flat ranges of its output.
template <Result<std::unique_ptr<ROp>> (*kMake)(const Node&, const KernelParams&)>
Result<std::unique_ptr<ROp>> by_ranges(const Node& n, const KernelParams& p) {
  Result<std::unique_ptr<ROp>> op = kMake(n, p);
  if (op.ok()) (*op)->set_access_by_ranges(n);
  return op;
}

const RKernel kKernels[] = {
    {"Abs", "abs", "|x|", by_ranges<make_unary<Unary::kAbs>>},
    {"Neg", "neg", "-x", by_ranges<make_unary<Unary::kNeg>>},
    {"Sqrt", "sqrt", "", by_ranges<make_unary<Unary::kSqrt>>},
    {"Reciprocal", "reciprocal", "", by_ranges<make_unary<Unary::kReciprocal>>},
    {"Exp", "exp", "", by_ranges<make_unary<Unary::kExp>>},
    {"Log", "log", "", by_ranges<make_unary<Unary::kLog>>},
    {"Erf", "erf", "", by_ranges<make_unary<Unary::kErf>>},
    {"Tanh", "tanh", "", by_ranges<make_unary<Unary::kTanh>>},
    {"Sigmoid", "sigmoid", "", by_ranges<make_unary<Unary::kSigmoid>>},
    {"Relu", "relu", "", by_ranges<make_unary<Unary::kRelu>>},
    {"LeakyRelu", "leaky_relu", "", by_ranges<make_unary<Unary::kLeakyRelu>>},
    {"Elu", "elu", "", by_ranges<make_unary<Unary::kElu>>},
    {"HardSigmoid", "hard_sigmoid", "", by_ranges<make_unary<Unary::kHardSigmoid>>},
    {"HardSwish", "hard_swish", "", by_ranges<make_unary<Unary::kHardSwish>>},
    {"Softplus", "softplus", "", by_ranges<make_unary<Unary::kSoftplus>>},
    {"Not", "not", "", by_ranges<make_unary<Unary::kNot>>},
    {"Add", "add", "broadcasting", by_ranges<make_binary<Binary::kAdd>>},
    {"Sub", "sub", "broadcasting", by_ranges<make_binary<Binary::kSub>>},
    {"Mul", "mul", "broadcasting", by_ranges<make_binary<Binary::kMul>>},
    {"Div", "div", "broadcasting", by_ranges<make_binary<Binary::kDiv>>},
    {"Pow", "pow", "broadcasting", by_ranges<make_binary<Binary::kPow>>},
    {"Min", "min", "variadic, broadcasting", by_ranges<make_binary<Binary::kMin>>},
    {"Max", "max", "variadic, broadcasting", by_ranges<make_binary<Binary::kMax>>},
    {"Equal", "equal", "broadcasting", by_ranges<make_binary<Binary::kEqual>>},
    {"Less", "less", "broadcasting", by_ranges<make_binary<Binary::kLess>>},
    {"Greater", "greater", "broadcasting", by_ranges<make_binary<Binary::kGreater>>},
    {"And", "and", "broadcasting", by_ranges<make_binary<Binary::kAnd>>},
    {"Mod", "mod", "broadcasting; fmod=0 (Python) or 1 (C)", by_ranges<make_mod>},
    {"Where", "where", "broadcasting select", by_ranges<make_where>},
    {"Cast", "cast", "", by_ranges<make_cast>},
    {"Clip", "clip", "", by_ranges<make_clip>},
    {"Identity", "copy", "", by_ranges<make_passthrough>},
    {"Dropout", "copy", "inference: identity", by_ranges<make_passthrough>},
    {"TesseraFusedElementwise", "fused_elementwise", "a chain of elementwise ops per block of outputs in cache",
     by_ranges<make_fused_elementwise>},
};

}  // namespace

std::span<const RKernel> elementwise_kernels() { return kKernels; }

}  // namespace tessera
