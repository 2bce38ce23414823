// Writing an Executable (docs/formats/executable.md).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <type_traits>
#include <unordered_map>

#include "base/paths.h"
#include "base/strings.h"
#include "compiler/executable.h"
#include "compiler/executable_format.h"

namespace tessera {
namespace {

using namespace exe_format;  // NOLINT: the format's own names

class Writer {
 public:
  std::string bytes;
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void u8(uint8_t v) { pod(v); }
  void u32(uint32_t v) { pod(v); }
  void i32(int32_t v) { pod(v); }
  void u64(uint64_t v) { pod(v); }
  void i64(int64_t v) { pod(v); }
  void f32(float v) { pod(v); }
  void f64(double v) { pod(v); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes.append(s);
  }
  void shape(const Shape& s) {
    u32(static_cast<uint32_t>(s.rank()));
    for (int64_t d : s.dims) i64(d);
  }
};

void write_attribute(Writer& w, const std::string& key, const Attribute& a) {
  w.str(key);
  w.u8(static_cast<uint8_t>(a.kind));
  switch (a.kind) {
    case Attribute::Kind::kInt: w.i64(a.i); break;
    case Attribute::Kind::kFloat: w.f32(a.f); break;
    case Attribute::Kind::kString: w.str(a.s); break;
    case Attribute::Kind::kInts:
      w.u32(static_cast<uint32_t>(a.ints.size()));
      for (int64_t v : a.ints) w.i64(v);
      break;
    case Attribute::Kind::kFloats:
      w.u32(static_cast<uint32_t>(a.floats.size()));
      for (float v : a.floats) w.f32(v);
      break;
    case Attribute::Kind::kStrings:
      w.u32(static_cast<uint32_t>(a.strings.size()));
      for (const std::string& v : a.strings) w.str(v);
      break;
    case Attribute::Kind::kTensor:
      w.u8(static_cast<uint8_t>(a.t.dtype()));
      w.shape(a.t.shape());
      w.u64(a.t.nbytes());
      w.bytes.append(static_cast<const char*>(a.t.raw()), a.t.nbytes());
      break;
  }
}

}  // namespace

Status write_executable(const Program& p, const std::string& path) {
  if (!p.plan) return failed_precondition("only a Program compiled with a Plan can be written as an Executable");
  const Plan& plan = *p.plan;
  std::unordered_map<const Value*, uint32_t> id;
  std::vector<const Value*> values;
  for (const auto& v : p.graph->values()) {
    id[v.get()] = static_cast<uint32_t>(values.size());
    values.push_back(v.get());
  }
  // Weights: each constant at a 64-byte aligned offset of the weights
  // section, which starts a page: first the small ones in the order of
  // the values, as a compiled Program holds them (pack_constants), then
  // the others.
  std::vector<uint64_t> weight_offset(values.size(), 0);
  uint64_t weights_bytes = 0;
  for (bool small : {true, false})
    for (size_t i = 0; i < values.size(); ++i) {
      if (!values[i]->is_constant() || (values[i]->constant->nbytes() < kPackedConstantMax) != small) continue;
      weight_offset[i] = weights_bytes;
      weights_bytes += (values[i]->constant->nbytes() + 63) / 64 * 64;
    }
  Writer w;
  w.str(str_cat("tessera ", PROJECT_VERSION_STRING));
  w.str(kExecutableDevice);
  w.str(p.source);
  w.str(p.graph->name);
  w.i64(p.graph->opset);
  w.u32(static_cast<uint32_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    const Value* v = values[i];
    Role role = v->is_constant() ? Role::kConstant : v->is_input ? Role::kInput : Role::kRuntime;
    w.str(v->name);
    w.u8(static_cast<uint8_t>(v->dtype));
    w.u8(static_cast<uint8_t>(role));
    w.u8(v->is_output ? 1 : 0);
    w.u8(0);
    w.shape(v->shape);
    if (role == Role::kConstant) {
      w.u64(weight_offset[i]);
      w.u64(v->constant->nbytes());
    } else {
      auto it = p.memory.offset.find(v);
      w.u64(it == p.memory.offset.end() ? UINT64_MAX : it->second);  // unused values have no place
    }
  }
  w.u32(static_cast<uint32_t>(p.graph->inputs().size()));
  for (const Value* v : p.graph->inputs()) w.u32(id.at(v));
  w.u32(static_cast<uint32_t>(p.graph->outputs().size()));
  for (const Value* v : p.graph->outputs()) w.u32(id.at(v));
  w.u32(static_cast<uint32_t>(p.steps.size()));
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step& st = p.steps[s];
    const Node& n = *st.node;
    w.str(n.op_type);
    w.str(n.name);
    w.i64(n.opset);
    w.u32(static_cast<uint32_t>(n.inputs.size()));
    for (const Value* v : n.inputs) w.i32(v == nullptr ? -1 : static_cast<int32_t>(id.at(v)));
    w.u32(static_cast<uint32_t>(n.outputs.size()));
    for (const Value* v : n.outputs) w.u32(id.at(v));
    w.u32(static_cast<uint32_t>(n.attrs.size()));
    for (const auto& [k, a] : n.attrs) write_attribute(w, k, a);
    w.str(std::string(st.kernel->name));
    w.i64(st.params.tasks);
    w.i64(st.op->tasks());
    w.f64(s < p.task_cost_us.size() ? p.task_cost_us[s] : 0.0);
  }
  w.u64(p.memory.arena_bytes);
  w.u64(p.max_scratch_bytes);
  w.u8(p.costs_measured ? 1 : 0);
  w.u32(static_cast<uint32_t>(plan.veus));
  w.u8(static_cast<uint8_t>(plan.policy));
  w.f64(plan.predicted_us);
  for (const auto& prog : plan.program) {
    w.u64(prog.size());
    for (const Instr& in : prog) {
      w.u8(static_cast<uint8_t>(in.kind));
      w.i32(in.a);
      w.i64(in.b);
    }
  }
  w.u64(plan.placements.size());
  for (const TaskPlacement& t : plan.placements) {
    w.i32(t.step);
    w.i64(t.task);
    w.i32(t.veu);
    w.i32(t.index);
    w.f64(t.start_us);
    w.f64(t.end_us);
  }
  // How the Plan was chosen (compiler/plan_choice.h).
  w.u32(static_cast<uint32_t>(plan.requested_veus > 0 ? plan.requested_veus : plan.veus));
  w.f64(plan.measured_us);
  w.u32(static_cast<uint32_t>(plan.candidates.size()));
  for (const Plan::Candidate& c : plan.candidates) {
    w.u32(static_cast<uint32_t>(c.veus));
    w.u8(static_cast<uint8_t>(c.policy));
    w.f64(c.predicted_us);
    w.f64(c.measured_us);
  }
  w.u8(plan.alone_first ? 1 : 0);
  w.f64(plan.alone_predicted_us);
  const std::string& meta = w.bytes;
  const uint64_t meta_offset = kExecutableHeaderBytes;
  constexpr uint64_t kPage = 4096;  // the mapping starts a page, and so does the section in it
  const uint64_t weights_offset = (meta_offset + meta.size() + kPage - 1) / kPage * kPage;
  const uint64_t file_bytes = weights_offset + weights_bytes;

  std::string weights(weights_bytes, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i]->is_constant() && values[i]->constant->nbytes() > 0)
      std::memcpy(weights.data() + weight_offset[i], values[i]->constant->raw(), values[i]->constant->nbytes());

  Writer h;
  h.bytes.append(kExecutableMagic, sizeof kExecutableMagic);
  h.u32(kExecutableVersion);
  h.u32(kExecutableHeaderBytes);
  h.u64(file_bytes);
  h.u64(meta_offset);
  h.u64(meta.size());
  h.u64(weights_offset);
  h.u64(weights_bytes);
  h.u32(crc32_of(meta.data(), meta.size()));
  h.u32(crc32_of(weights.data(), weights.size()));
  if (h.bytes.size() != kExecutableHeaderBytes) return internal_error("executable header size");

  std::string tmp = str_cat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return not_found(str_cat("cannot write '", tmp, "': ", std::strerror(errno)));
    out.write(h.bytes.data(), static_cast<std::streamsize>(h.bytes.size()));
    out.write(meta.data(), static_cast<std::streamsize>(meta.size()));
    std::string pad(weights_offset - meta_offset - meta.size(), '\0');
    out.write(pad.data(), static_cast<std::streamsize>(pad.size()));
    out.write(weights.data(), static_cast<std::streamsize>(weights.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return resource_exhausted(str_cat("writing '", path, "' failed (disk full?)"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    return not_found(str_cat("cannot write '", path, "': ", std::strerror(err)));
  }
  return Status();
}

}  // namespace tessera
