// Loading an Executable: a reader that trusts nothing in the file
// (docs/formats/executable.md, "What the loader checks").
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "base/clock.h"
#include "base/strings.h"
#include "compiler/executable.h"
#include "compiler/executable_format.h"
#include "ir/ops/op_registry.h"
#include "onnx/importer.h"

namespace tessera {

using namespace exe_format;  // NOLINT: the format's own names

namespace {

// Bounds-checked little-endian reader over the metadata section. Every read
// fails cleanly past the end; counts are checked against what is left
// before anything is allocated for them.
class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  bool ok() const { return ok_; }
  const std::string& what() const { return what_; }
  size_t offset(const char* base) const { return static_cast<size_t>(p_ - base); }

  template <typename T>
  T pod(const char* field) {
    T v{};
    if (!ok_) return v;
    if (left() < sizeof(T)) return fail<T>(str_cat("truncated at ", field));
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return v;
  }
  uint8_t u8(const char* f) { return pod<uint8_t>(f); }
  uint32_t u32(const char* f) { return pod<uint32_t>(f); }
  int32_t i32(const char* f) { return pod<int32_t>(f); }
  uint64_t u64(const char* f) { return pod<uint64_t>(f); }
  int64_t i64(const char* f) { return pod<int64_t>(f); }
  float f32(const char* f) { return pod<float>(f); }
  double f64(const char* f) { return pod<double>(f); }
  std::string str(const char* field) {
    uint32_t n = u32(field);
    if (!ok_) return {};
    if (n > kMaxStringBytes || n > left()) return fail<std::string>(str_cat(field, ": string of ", n, " bytes runs past the end"));
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  // A u32 count, then that many u32 (i32) values.
  std::vector<uint32_t> u32s(const char* count_field, const char* field) {
    std::vector<uint32_t> v(count(count_field, u32(count_field), 4));
    for (uint32_t& x : v) x = u32(field);
    return v;
  }
  std::vector<int32_t> i32s(const char* count_field, const char* field) {
    std::vector<int32_t> v(count(count_field, u32(count_field), 4));
    for (int32_t& x : v) x = i32(field);
    return v;
  }
  // A count of records at least `min_bytes` each.
  uint64_t count(const char* field, uint64_t n, size_t min_bytes) {
    if (!ok_) return 0;
    if (min_bytes > 0 && n > left() / min_bytes) return fail<uint64_t>(str_cat(field, ": count ", n, " exceeds the file"));
    return n;
  }
  Shape shape(const char* field) {
    uint32_t rank = u32(field);
    if (!ok_) return {};
    if (rank > kMaxRankInFile) return fail<Shape>(str_cat(field, ": rank ", rank, " is out of range"));
    count(field, rank, 8);
    std::vector<int64_t> dims(ok_ ? rank : 0);
    for (int64_t& d : dims) {
      d = i64(field);
      if (ok_ && d < 0) return fail<Shape>(str_cat(field, ": negative dimension ", d));
    }
    return Shape(dims);
  }
  template <typename T>
  T fail(std::string what) {
    if (ok_) {
      ok_ = false;
      what_ = std::move(what);
    }
    return T{};
  }

 private:
  const char* p_;
  const char* end_;
  bool ok_ = true;
  std::string what_;
};

bool valid_dtype(uint8_t d) { return d >= static_cast<uint8_t>(DType::kFloat32) && d <= static_cast<uint8_t>(DType::kBool); }

// Bytes of numel(shape) elements of dtype, or -1 past kMaxValueBytes.
int64_t checked_bytes(const Shape& s, DType dt) {
  int64_t n = static_cast<int64_t>(dtype_size(dt));
  for (int64_t d : s.dims) {
    if (d != 0 && n > kMaxValueBytes / d) return -1;
    n *= d;
  }
  return n > kMaxValueBytes ? -1 : n;
}

struct StoredValue {
  std::string name;
  DType dtype = DType::kUndefined;
  Role role = Role::kRuntime;
  bool is_output = false;
  Shape shape;
  uint64_t a = 0, b = 0;  // constant: weights offset, bytes; else arena offset
};

class Loader {
 public:
  Loader(const char* base, size_t size, std::string name, std::shared_ptr<void> owner, const LoadOptions& options)
      : base_(base), size_(size), name_(std::move(name)), owner_(std::move(owner)), options_(options) {}

  // The steps below, in order; each checks what it reads.
  Result<std::unique_ptr<Program>> run();

 private:
  // What the file says, before it is trusted.
  struct StoredStep {
    std::string kernel;
    int64_t requested = 0, tasks = 0;
    double cost = 0;
  };

  // A file that is not an Executable at all, or of another version.
  Status not_ours(const std::string& what) const { return invalid_argument(str_cat(name_, ": ", what)); }
  // Bytes that contradict the format or each other: corruption.
  Status err(const std::string& what) const { return data_loss(str_cat(name_, ": ", what)); }
  Status bad(const Reader& r) const { return err(str_cat("corrupt executable: ", r.what())); }

  Status read_header();
  Status read_values(Reader& r);
  Status read_inputs_outputs(Reader& r);
  Status read_steps(Reader& r);
  Status read_step(Reader& r, uint64_t s);
  Status infer_again();
  Status make_ops();
  Status read_plan(Reader& r, Plan* plan);
  Status read_timeline(Reader& r, Plan* plan);
  Status read_choice(Reader& r, Plan* plan);
  Status read_attribute(Reader& r, std::string* key, Attribute* a);
  Status check_memory(const Plan& plan);
  Result<Value*> value_at(uint64_t idx, const std::string& what) const {
    if (idx >= vals_.size()) return err(str_cat(what, " names value ", idx, " of ", vals_.size()));
    return vals_[idx];
  }

  const char* base_;
  size_t size_;
  std::string name_;
  std::shared_ptr<void> owner_;
  LoadOptions options_;

  const char* meta_ = nullptr;
  uint64_t meta_bytes_ = 0;
  const char* weights_ = nullptr;
  uint64_t weights_bytes_ = 0;
  std::unique_ptr<Program> p_;
  std::vector<StoredValue> sv_;
  std::vector<Value*> vals_;
  std::vector<bool> produced_;
  std::vector<StoredStep> ss_;
  int64_t total_tasks_ = 0;
  uint64_t arena_bytes_ = 0;
};

Status Loader::read_choice(Reader& r, Plan* plan) {
  const uint32_t requested = r.u32("requested vEUs");
  const double measured = r.f64("measured makespan");
  const uint64_t n = r.count("plan candidates", r.u32("candidate count"), 21);
  if (!r.ok()) return bad(r);
  if (requested < static_cast<uint32_t>(plan->veus) || requested > kMaxVeus)
    return err(str_cat("requested vEU count ", requested, " is out of range (", plan->veus, " to ", kMaxVeus, ")"));
  if (!std::isfinite(measured) || measured < 0) return err("measured makespan is not a finite time");
  plan->requested_veus = static_cast<int>(requested);
  plan->measured_us = measured;
  for (uint64_t i = 0; i < n; ++i) {
    Plan::Candidate c;
    const uint32_t veus = r.u32("candidate");
    const uint8_t policy = r.u8("candidate");
    c.predicted_us = r.f64("candidate");
    c.measured_us = r.f64("candidate");
    if (!r.ok()) return bad(r);
    if (veus < 1 || veus > requested || (policy != static_cast<uint8_t>(Policy::kWavefront) &&
                                         policy != static_cast<uint8_t>(Policy::kCriticalPath)) ||
        !std::isfinite(c.predicted_us) || c.predicted_us < 0 || !std::isfinite(c.measured_us) || c.measured_us < 0)
      return err(str_cat("plan candidate ", i, " is out of range"));
    c.veus = static_cast<int>(veus);
    c.policy = static_cast<Policy>(policy);
    plan->candidates.push_back(c);
  }
  const uint8_t alone_first = r.u8("alone first");
  const double alone_predicted = r.f64("alone predicted makespan");
  if (!r.ok()) return bad(r);
  if (alone_first > 1 || (alone_first == 1 && plan->veus < 2))
    return err(str_cat("alone_first ", static_cast<int>(alone_first), " is out of range for a Plan on ", plan->veus,
                       " vEU(s)"));
  if (!std::isfinite(alone_predicted) || alone_predicted < 0)
    return err("alone predicted makespan is not a finite time");
  plan->alone_first = alone_first == 1;
  plan->alone_predicted_us = alone_predicted;
  return Status();
}

Status Loader::read_attribute(Reader& r, std::string* key, Attribute* a) {
  *key = r.str("attribute name");
  uint8_t kind = r.u8("attribute kind");
  if (!r.ok()) return bad(r);
  if (kind > static_cast<uint8_t>(Attribute::Kind::kTensor))
    return err(str_cat("attribute '", *key, "' has unknown kind ", int(kind)));
  a->kind = static_cast<Attribute::Kind>(kind);
  switch (a->kind) {
    case Attribute::Kind::kInt: a->i = r.i64("attribute"); break;
    case Attribute::Kind::kFloat: a->f = r.f32("attribute"); break;
    case Attribute::Kind::kString: a->s = r.str("attribute"); break;
    case Attribute::Kind::kInts: {
      uint64_t n = r.count("attribute ints", r.u32("attribute"), 8);
      a->ints.resize(n);
      for (int64_t& v : a->ints) v = r.i64("attribute");
      break;
    }
    case Attribute::Kind::kFloats: {
      uint64_t n = r.count("attribute floats", r.u32("attribute"), 4);
      a->floats.resize(n);
      for (float& v : a->floats) v = r.f32("attribute");
      break;
    }
    case Attribute::Kind::kStrings: {
      uint64_t n = r.count("attribute strings", r.u32("attribute"), 4);
      a->strings.resize(n);
      for (std::string& v : a->strings) v = r.str("attribute");
      break;
    }
    case Attribute::Kind::kTensor: {
      uint8_t dt = r.u8("attribute tensor");
      Shape s = r.shape("attribute tensor");
      uint64_t nbytes = r.u64("attribute tensor");
      if (!r.ok()) return bad(r);
      if (!valid_dtype(dt)) return err(str_cat("attribute '", *key, "' has an unknown dtype"));
      int64_t want = checked_bytes(s, static_cast<DType>(dt));
      if (want < 0 || static_cast<uint64_t>(want) != nbytes || nbytes > r.left())
        return err(str_cat("attribute '", *key, "': tensor size does not match its shape or the file"));
      Tensor t(static_cast<DType>(dt), s);
      std::string raw(nbytes, '\0');
      for (uint64_t i = 0; i < nbytes; ++i) raw[i] = static_cast<char>(r.u8("attribute tensor"));
      if (nbytes > 0) std::memcpy(t.raw(), raw.data(), nbytes);
      a->t = std::move(t);
      break;
    }
  }
  return r.ok() ? Status() : bad(r);
}

Status Loader::read_header() {
  if (size_ < kExecutableHeaderBytes) return not_ours("not a Tessera executable (shorter than its 64-byte header)");
  if (std::memcmp(base_, kExecutableMagic, sizeof kExecutableMagic) != 0)
    return not_ours("not a Tessera executable (bad magic)");
  Reader h(base_ + 8, kExecutableHeaderBytes - 8);
  uint32_t version = h.u32("version");
  uint32_t header_bytes = h.u32("header size");
  uint64_t file_bytes = h.u64("file size");
  uint64_t meta_offset = h.u64("metadata offset");
  meta_bytes_ = h.u64("metadata size");
  uint64_t weights_offset = h.u64("weights offset");
  weights_bytes_ = h.u64("weights size");
  uint32_t meta_crc = h.u32("metadata crc"), weights_crc = h.u32("weights crc");
  if (version != kExecutableVersion)
    return not_ours(str_cat("executable format version ", version, "; this Tessera reads version ", kExecutableVersion,
                            " (compile the model again)"));
  if (header_bytes != kExecutableHeaderBytes) return err(str_cat("header size ", header_bytes, ", expected 64"));
  if (file_bytes != size_)
    return err(str_cat("file is ", size_, " bytes but its header says ", file_bytes, " (truncated or extended)"));
  if (meta_offset != kExecutableHeaderBytes || meta_bytes_ > size_ - meta_offset)
    return err("metadata section lies outside the file");
  if (weights_offset % 64 != 0 || weights_offset < meta_offset + meta_bytes_ || weights_offset > size_ ||
      weights_bytes_ != size_ - weights_offset)
    return err("weights section is misaligned or lies outside the file");
  meta_ = base_ + meta_offset;
  weights_ = base_ + weights_offset;
  if (options_.verify_checksums) {
    if (crc32_of(meta_, meta_bytes_) != meta_crc) return err("metadata checksum mismatch (the file is corrupt)");
    if (crc32_of(weights_, weights_bytes_) != weights_crc) return err("weights checksum mismatch (the file is corrupt)");
  }
  return Status();
}

// Values, then the graph's values made from them (constants borrowing the
// weights section).
Status Loader::read_values(Reader& r) {
  Graph& g = *p_->graph;
  uint64_t nv = r.count("values", r.u32("value count"), 16);
  if (!r.ok()) return bad(r);
  sv_.resize(nv);
  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < nv; ++i) {
    StoredValue& v = sv_[i];
    v.name = r.str("value name");
    uint8_t dt = r.u8("value dtype"), role = r.u8("value role"), out = r.u8("value flags");
    r.u8("value reserved");
    v.shape = r.shape("value shape");
    v.a = r.u64("value offset");
    if (role == static_cast<uint8_t>(Role::kConstant)) v.b = r.u64("value bytes");
    if (!r.ok()) return bad(r);
    if (v.name.empty() || !names.insert(v.name).second)
      return err(str_cat("value ", i, " has an empty or duplicate name '", v.name, "'"));
    if (!valid_dtype(dt)) return err(str_cat("value '", v.name, "' has unknown dtype ", int(dt)));
    if (role > static_cast<uint8_t>(Role::kConstant) || out > 1)
      return err(str_cat("value '", v.name, "' has an unknown role"));
    v.dtype = static_cast<DType>(dt);
    v.role = static_cast<Role>(role);
    v.is_output = out != 0;
    int64_t bytes = checked_bytes(v.shape, v.dtype);
    if (bytes < 0) return err(str_cat("value '", v.name, "' is larger than 4 GiB"));
    if (v.role == Role::kConstant &&
        (v.a % 64 != 0 || v.a > weights_bytes_ || v.b > weights_bytes_ - v.a || v.b != static_cast<uint64_t>(bytes)))
      return err(str_cat("constant '", v.name, "': its data lies outside the weights section or does not match ",
                         "its shape"));
  }
  vals_.assign(nv, nullptr);
  produced_.assign(nv, false);
  for (uint64_t i = 0; i < nv; ++i) {
    const StoredValue& v = sv_[i];
    if (v.role == Role::kConstant) {
      vals_[i] = g.add_constant(v.name, Tensor::view(v.dtype, v.shape, weights_ + v.a, owner_));
    } else if (v.role == Role::kInput) {
      vals_[i] = g.add_input(v.name, v.dtype, v.shape);
      vals_[i]->shape_known = true;
    } else {
      vals_[i] = g.add_value(v.name, v.dtype, v.shape);
    }
  }
  return Status();
}

Status Loader::read_inputs_outputs(Reader& r) {
  Graph& g = *p_->graph;
  const std::vector<uint32_t> input_ids = r.u32s("input count", "input");
  const std::vector<uint32_t> output_ids = r.u32s("output count", "output");
  if (!r.ok()) return bad(r);
  const size_t ni = input_ids.size();
  size_t role_inputs = 0;
  for (const StoredValue& v : sv_) role_inputs += v.role == Role::kInput;
  if (role_inputs != ni) return err("the input list does not match the values marked as inputs");
  for (size_t k = 0; k < ni; ++k) {
    TESSERA_ASSIGN_OR_RETURN(Value * v, value_at(input_ids[k], "an input"));
    if (g.inputs()[k] != v) return err(str_cat("input ", k, " is listed out of order or twice"));
  }
  for (uint32_t x : output_ids) {
    TESSERA_ASSIGN_OR_RETURN(Value * v, value_at(x, "an output"));
    if (!sv_[x].is_output || v->is_output) return err(str_cat("output '", v->name, "' is not marked or listed twice"));
    g.mark_output(v);
  }
  for (size_t i = 0; i < sv_.size(); ++i)
    if (sv_[i].is_output && !vals_[i]->is_output)
      return err(str_cat("value '", sv_[i].name, "' is marked as an output but not listed"));
  return Status();
}

// Steps: nodes, their kernels and tilings.
Status Loader::read_steps(Reader& r) {
  uint64_t ns = r.count("steps", r.u32("step count"), 40);
  if (!r.ok()) return bad(r);
  ss_.resize(ns);
  for (uint64_t s = 0; s < ns; ++s) TESSERA_RETURN_IF_ERROR(read_step(r, s));
  Graph& g = *p_->graph;
  for (size_t i = 0; i < sv_.size(); ++i)
    if (sv_[i].role == Role::kRuntime && !produced_[i] && (sv_[i].is_output || g.use_count(vals_[i]) > 0))
      return err(str_cat("value '", sv_[i].name, "' is read but never produced"));
  Status st = verify_graph(g);
  return st.ok() ? st : err(st.message());
}

Status Loader::read_step(Reader& r, uint64_t s) {
  std::string op = r.str("op type");
  std::string nname = r.str("node name");
  int64_t opset = r.i64("node opset");
  const std::vector<int32_t> ins = r.i32s("node input count", "node input");
  const std::vector<uint32_t> outs = r.u32s("node output count", "node output");
  uint64_t na = r.count("attributes", r.u32("attribute count"), 5);
  if (!r.ok()) return bad(r);
  std::string where = str_cat("step ", s, " (", op, " '", nname, "')");
  if (op_find(op) == nullptr) return err(str_cat(where, ": unknown op type"));
  if (opset < kMinOpset || opset > kMaxOpset) return err(str_cat(where, ": opset ", opset, " is out of range"));
  std::vector<Value*> in_vals;
  for (int32_t x : ins) {
    if (x == -1) {
      in_vals.push_back(nullptr);
      continue;
    }
    if (x < 0) return err(str_cat(where, ": input index ", x, " is invalid"));
    TESSERA_ASSIGN_OR_RETURN(Value * v, value_at(static_cast<uint64_t>(x), where));
    in_vals.push_back(v);
  }
  std::vector<Value*> out_vals;
  for (uint32_t x : outs) {
    TESSERA_ASSIGN_OR_RETURN(Value * v, value_at(x, where));
    if (sv_[x].role != Role::kRuntime || produced_[x])
      return err(str_cat(where, ": output '", v->name, "' is an input, a constant or produced twice"));
    produced_[x] = true;
    out_vals.push_back(v);
  }
  Node* n = p_->graph->add_node_producing(op, nname, in_vals, out_vals);
  n->opset = opset;
  for (uint64_t k = 0; k < na; ++k) {
    std::string key;
    Attribute a;
    TESSERA_RETURN_IF_ERROR(read_attribute(r, &key, &a));
    if (!n->attrs.emplace(key, std::move(a)).second) return err(str_cat(where, ": attribute '", key, "' is repeated"));
  }
  ss_[s].kernel = r.str("kernel name");
  ss_[s].requested = r.i64("kernel tasks requested");
  ss_[s].tasks = r.i64("kernel tasks");
  ss_[s].cost = r.f64("task cost");
  if (!r.ok()) return bad(r);
  if (!std::isfinite(ss_[s].cost) || ss_[s].cost < 0) return err(str_cat(where, ": task cost is not a finite time"));
  return Status();
}

// Shapes and dtypes: inferred again from the graph, never trusted.
Status Loader::infer_again() {
  for (auto& np : p_->graph->nodes()) {
    Node& n = *np;
    std::vector<std::pair<DType, Shape>> stored;
    for (Value* o : n.outputs) {
      stored.emplace_back(o->dtype, o->shape);
      o->shape_known = false;
    }
    Status st = op_infer(n);
    if (!st.ok()) return err(str_cat(n.label(), ": ", st.message()));
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const Value* o = n.outputs[k];
      if (o->dtype != stored[k].first || !(o->shape == stored[k].second))
        return err(str_cat(n.label(), ": output '", o->name, "' is stored as ", dtype_name(stored[k].first), " ",
                           stored[k].second.to_string(), " but the graph gives ", dtype_name(o->dtype), " ",
                           o->shape.to_string()));
    }
  }
  return Status();
}

// Kernels: only this build's, with the rTask counts they reproduce.
Status Loader::make_ops() {
  Program& p = *p_;
  p.task_cost_us.resize(ss_.size());
  for (size_t s = 0; s < ss_.size(); ++s) {
    const Node& n = *p.graph->nodes()[s];
    const RKernel* k = nullptr;
    for (const RKernel& c : kernels_or_cpu(options_.kernels))
      if (c.name == ss_[s].kernel && c.op == n.op_type) k = &c;
    if (k == nullptr)
      return err(str_cat(n.label(), ": rKernel '", ss_[s].kernel, "' is not one this build has for ", n.op_type));
    Step st;
    st.node = &n;
    st.kernel = k;
    st.params.tasks = ss_[s].requested;
    if (ss_[s].requested < 0) return err(str_cat(n.label(), ": negative rTask count requested"));
    if (ss_[s].requested > kMaxRequestedTasks)
      return err(str_cat(n.label(), ": ", ss_[s].requested, " rTasks requested, above the limit of ", kMaxRequestedTasks));
    auto op = k->make(n, st.params);
    if (!op.ok()) return err(str_cat(n.label(), ": ", op.status().message()));
    st.op = std::move(*op);
    if (st.op->tasks() != ss_[s].tasks)
      return err(str_cat(n.label(), ": stored with ", ss_[s].tasks, " rTasks, but its rKernel makes ", st.op->tasks()));
    total_tasks_ += st.op->tasks();
    p.max_scratch_bytes = std::max(p.max_scratch_bytes, st.op->scratch_bytes());
    p.task_cost_us[s] = ss_[s].cost;
    p.steps.push_back(std::move(st));
  }
  p.stats.rtasks = total_tasks_;
  p.stats.nodes_imported = static_cast<int>(ss_.size());
  auto aliases = value_aliases(*p.graph);
  if (!aliases.ok()) return err(aliases.status().message());
  p.aliases = std::move(*aliases);
  return Status();
}

// The memory plan's sizes and the Plan: per vEU its instruction list.
Status Loader::read_plan(Reader& r, Plan* plan) {
  arena_bytes_ = r.u64("arena size");
  uint64_t max_scratch = r.u64("scratch size");
  uint8_t measured = r.u8("costs measured");
  uint32_t veus = r.u32("vEU count");
  uint8_t policy = r.u8("policy");
  double predicted = r.f64("predicted makespan");
  if (!r.ok()) return bad(r);
  if (max_scratch != p_->max_scratch_bytes)
    return err(str_cat("scratch size ", max_scratch, " does not match the rKernels' ", p_->max_scratch_bytes));
  if (measured > 1) return err("bad costs flag");
  p_->costs_measured = measured != 0;
  if (veus < 1 || veus > kMaxVeus) return err(str_cat("vEU count ", veus, " is out of range (1 to ", kMaxVeus, ")"));
  if (policy != static_cast<uint8_t>(Policy::kWavefront) && policy != static_cast<uint8_t>(Policy::kCriticalPath) &&
      policy != static_cast<uint8_t>(Policy::kRandom))
    return err(str_cat("unknown scheduling policy ", int(policy)));
  if (!std::isfinite(predicted) || predicted < 0) return err("predicted makespan is not a finite time");
  plan->veus = static_cast<int>(veus);
  plan->policy = static_cast<Policy>(policy);
  plan->predicted_us = predicted;
  plan->program.resize(veus);
  plan->tasks_per_veu.assign(veus, 0);
  int64_t runs = 0;
  for (uint32_t u = 0; u < veus; ++u) {
    uint64_t n = r.count("instructions", r.u64("instruction count"), 13);
    if (!r.ok()) return bad(r);
    auto& prog = plan->program[u];
    prog.resize(n);
    for (Instr& in : prog) {
      uint8_t kind = r.u8("instruction");
      in.a = r.i32("instruction");
      in.b = r.i64("instruction");
      if (!r.ok()) return bad(r);
      if (kind > static_cast<uint8_t>(Instr::Kind::kWait)) return err(str_cat("vEU ", u, ": unknown instruction ", int(kind)));
      in.kind = static_cast<Instr::Kind>(kind);
      if (in.kind == Instr::Kind::kRun) ++plan->tasks_per_veu[u];
      if (in.kind == Instr::Kind::kWait) ++plan->waits;
      if (in.kind == Instr::Kind::kSignal) ++plan->signals;
    }
    runs += plan->tasks_per_veu[u];
  }
  if (runs != total_tasks_) return err(str_cat("the Plan runs ", runs, " rTasks but the rKernels make ", total_tasks_));
  Status st = plan_derive_clocks(*p_, plan);
  return st.ok() ? st : err(st.message());
}

// The predicted timeline: every rTask once, in range.
Status Loader::read_timeline(Reader& r, Plan* plan) {
  uint64_t np = r.count("placements", r.u64("placement count"), 36);
  if (!r.ok()) return bad(r);
  if (np != static_cast<uint64_t>(total_tasks_)) return err("the predicted timeline does not list every rTask once");
  plan->placements.resize(np);
  const uint64_t ns = p_->steps.size();
  for (TaskPlacement& t : plan->placements) {
    t.step = r.i32("placement");
    t.task = r.i64("placement");
    t.veu = r.i32("placement");
    t.index = r.i32("placement");
    t.start_us = r.f64("placement");
    t.end_us = r.f64("placement");
    if (!r.ok()) return bad(r);
    if (t.step < 0 || static_cast<uint64_t>(t.step) >= ns || t.task < 0 || t.task >= p_->steps[t.step].op->tasks() ||
        t.veu < 0 || t.veu >= plan->veus || t.index < 0 || t.index >= plan->tasks_per_veu[t.veu] ||
        !std::isfinite(t.start_us) || !std::isfinite(t.end_us) || t.start_us > t.end_us)
      return err("a predicted timeline entry is out of range");
  }
  return Status();
}

// Memory plan: every runtime value inside the arena, 64-byte aligned, and
// values that share bytes never live at once under this Plan.
Status Loader::check_memory(const Plan& plan) {
  Program& p = *p_;
  const Graph& g = *p.graph;
  std::unordered_map<const Value*, size_t> offset;
  uint64_t naive = 0;
  for (size_t i = 0; i < sv_.size(); ++i) {
    if (sv_[i].role == Role::kConstant) continue;
    bool used = sv_[i].is_output || sv_[i].role == Role::kInput || g.use_count(vals_[i]) > 0 || produced_[i];
    if (!used) continue;
    uint64_t bytes = value_bytes(vals_[i]);
    naive += value_slot_bytes(vals_[i]);
    if (sv_[i].a % 64 != 0 || sv_[i].a > arena_bytes_ || bytes > arena_bytes_ - sv_[i].a)
      return err(str_cat("value '", sv_[i].name, "' lies outside the arena"));
    offset[vals_[i]] = sv_[i].a;
  }
  if (arena_bytes_ > naive)
    return err(str_cat("arena of ", arena_bytes_, " bytes is larger than all values together (with their page-offset slack)"));
  p.memory.arena_bytes = arena_bytes_;
  p.memory.naive_bytes = naive;
  p.memory.offset = offset;
  // An in-place Concat part lies exactly at its slice of the output: the
  // Concat does not copy it.
  for (const auto& [v, a] : p.aliases) {
    auto pv = offset.find(v), pb = offset.find(a.base);
    if (pv == offset.end() || pb == offset.end() || pv->second != pb->second + a.offset)
      return err(str_cat("value '", v->name, "' is written in place into '", a.base->name, "' but does not lie at byte ",
                         a.offset, " of it"));
  }
  PlanLifetimes life(p, plan);
  const auto& lv = life.values();
  std::vector<size_t> order(lv.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (const Value* v : lv)
    if (!offset.count(v)) return err(str_cat("value '", v->name, "' has no place in the arena"));
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return offset[lv[x]] < offset[lv[y]]; });
  for (size_t i = 0; i < order.size(); ++i) {
    const Value* a = lv[order[i]];
    uint64_t a_end = offset[a] + value_bytes(a);
    for (size_t j = i + 1; j < order.size() && offset[lv[order[j]]] < a_end; ++j)
      if (life.group(order[i]) != life.group(order[j]) && life.conflict(order[i], order[j]))
        return err(str_cat("values '", a->name, "' and '", lv[order[j]]->name,
                           "' share arena bytes but may be live at the same time under the Plan"));
  }
  return Status();
}

Result<std::unique_ptr<Program>> Loader::run() {
  const int64_t t0 = now_ns();
  TESSERA_RETURN_IF_ERROR(read_header());
  Reader r(meta_, meta_bytes_);
  p_ = std::make_unique<Program>();
  p_->graph = std::make_unique<Graph>();
  r.str("producer");  // informational
  const std::string device = r.str("device kind");
  p_->source = r.str("source");
  p_->graph->name = r.str("graph name");
  p_->graph->opset = r.i64("graph opset");
  if (!r.ok()) return bad(r);
  if (device != options_.device)
    return failed_precondition(str_cat(name_, ": compiled for the '", device, "' device, loaded for '",
                                       options_.device, "'"));
  TESSERA_RETURN_IF_ERROR(read_values(r));
  TESSERA_RETURN_IF_ERROR(read_inputs_outputs(r));
  TESSERA_RETURN_IF_ERROR(read_steps(r));
  TESSERA_RETURN_IF_ERROR(infer_again());
  TESSERA_RETURN_IF_ERROR(make_ops());
  Plan plan;
  TESSERA_RETURN_IF_ERROR(read_plan(r, &plan));
  TESSERA_RETURN_IF_ERROR(read_timeline(r, &plan));
  TESSERA_RETURN_IF_ERROR(read_choice(r, &plan));
  if (r.left() != 0) return err(str_cat(r.left(), " unexpected bytes after the Plan"));
  TESSERA_RETURN_IF_ERROR(check_memory(plan));
  p_->plan = std::move(plan);
  assign_slots(*p_);
  p_->stats.compile_ms = static_cast<double>(now_ns() - t0) / 1e6;
  return std::move(p_);
}

}  // namespace

Result<std::unique_ptr<Program>> load_executable_bytes(const void* data, size_t size, const std::string& name,
                                                       std::shared_ptr<void> owner, const LoadOptions& options) {
  if (reinterpret_cast<uintptr_t>(data) % 64 != 0) {
    void* copy = aligned_alloc_pages(size);  // as a mapped file: the weights section starts a page
    if (size > 0) std::memcpy(copy, data, size);
    owner = std::shared_ptr<void>(copy, aligned_free64);
    data = copy;
  }
  Loader l(static_cast<const char*>(data), size, name, std::move(owner), options);
  return l.run();
}

Result<std::unique_ptr<Program>> load_executable(const std::string& path, const LoadOptions& options) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(str_cat("executable '", path, "' does not exist"));
    return not_found(str_cat("cannot open '", path, "': ", std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return invalid_argument(str_cat("'", path, "' is not a regular file"));
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < kExecutableHeaderBytes) {
    close(fd);
    return invalid_argument(str_cat(path, ": not a Tessera executable (shorter than its 64-byte header)"));
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (map == MAP_FAILED) return resource_exhausted(str_cat("cannot map '", path, "': ", std::strerror(err)));
  std::shared_ptr<void> owner(map, [size](void* m) { munmap(m, size); });
  Loader l(static_cast<const char*>(map), size, path, std::move(owner), options);
  return l.run();
}

bool is_executable_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in && std::memcmp(magic, kExecutableMagic, sizeof magic) == 0;
}

}  // namespace tessera
