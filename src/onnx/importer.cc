#include "onnx/importer.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/strings.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCheckHelperName = "tessera-onnx-check";
constexpr int kCheckRejected = 3;  // tools/onnx_check.cc's exit status for "rejected"

// ONNX TensorProto.DataType values.
enum OnnxType : int {
  kOnnxFloat = 1, kOnnxUInt8 = 2, kOnnxInt8 = 3, kOnnxUInt16 = 4, kOnnxInt16 = 5, kOnnxInt32 = 6,
  kOnnxInt64 = 7, kOnnxString = 8, kOnnxBool = 9, kOnnxFloat16 = 10, kOnnxDouble = 11,
  kOnnxUInt32 = 12, kOnnxUInt64 = 13, kOnnxBFloat16 = 16,
};

// The dtype a tensor of ONNX type `t` has inside Tessera (storage floats
// become float32), or kUndefined.
DType compute_dtype(int t) {
  switch (t) {
    case kOnnxFloat: case kOnnxFloat16: case kOnnxBFloat16: case kOnnxDouble: return DType::kFloat32;
    case kOnnxInt64: return DType::kInt64;
    case kOnnxInt32: return DType::kInt32;
    case kOnnxInt8: return DType::kInt8;
    case kOnnxUInt8: return DType::kUInt8;
    case kOnnxBool: return DType::kBool;
    default: return DType::kUndefined;
  }
}

std::string onnx_type_name(int t) {
  switch (t) {
    case kOnnxUInt16: return "uint16";
    case kOnnxInt16: return "int16";
    case kOnnxString: return "string";
    case kOnnxUInt32: return "uint32";
    case kOnnxUInt64: return "uint64";
    default: return str_cat("type ", t);
  }
}

// Where tessera-onnx-check lives: $TESSERA_ONNX_CHECK, else beside the
// running program (bin/ holds both), else in the bin/ beside the lib/ of
// an installed libtessera.so, else the build tree's bin/.
std::string find_check_helper() {
  static const std::string path = [] {
    if (const char* e = std::getenv("TESSERA_ONNX_CHECK"); e != nullptr && *e != '\0') return std::string(e);
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      fs::path p = self.parent_path() / kCheckHelperName;
      if (access(p.c_str(), X_OK) == 0) return p.string();
    }
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&find_check_helper), &info) != 0 && info.dli_fname != nullptr) {
      fs::path p = fs::path(info.dli_fname).parent_path().parent_path() / "bin" / kCheckHelperName;
      if (access(p.c_str(), X_OK) == 0) return p.string();
    }
    fs::path p = fs::path(TESSERA_BIN_DIR) / kCheckHelperName;
    if (access(p.c_str(), X_OK) == 0) return p.string();
    return std::string();
  }();
  return path;
}

// Runs ONNX's checker and shape inference in a process of its own
// (tools/onnx_check.cc). libonnx is not hardened against malformed models
// (1.12's convPoolShapeInference reads past the dims of a low-rank input,
// found by our fuzzer), and bad input must never take the process down: a
// crash in the helper becomes an error here. The helper is spawned, not
// forked: a fork of a program with threads can inherit a lock (the
// allocator's, under sanitizers) that some other thread held, and hang.
// The model reaches it as a file on its standard input; its verdict
// comes back through a pipe, waited for at most kCheckTimeoutMs.
constexpr int kCheckTimeoutMs = 120000;

// A running tessera-onnx-check: start() spawns it, finish() collects its
// verdict; the importer converts the model meanwhile. Destroying an
// unfinished one kills and reaps the helper.
class OnnxCheck {
 public:
  OnnxCheck() = default;
  OnnxCheck(const OnnxCheck&) = delete;
  OnnxCheck& operator=(const OnnxCheck&) = delete;
  ~OnnxCheck() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    close(out_);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }

  // `source_path` is the model file, or "" to pass `bytes` instead.
  Status start(const std::string& source_path, std::string_view bytes, const std::string& model_dir,
               const ImportOptions& options);
  Status finish();

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string helper_;
};

Status OnnxCheck::start(const std::string& source_path, std::string_view bytes, const std::string& model_dir,
                        const ImportOptions& options) {
  helper_ = find_check_helper();
  if (helper_.empty())
    return failed_precondition(str_cat("cannot find ", kCheckHelperName, " (looked beside this program and in ",
                                       TESSERA_BIN_DIR, "); set TESSERA_ONNX_CHECK to its path"));
  // The helper's standard input: the model file itself, or a memfd
  // holding the bytes of a model imported from memory.
  int in = -1;
  if (!source_path.empty()) {
    in = open(source_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) return not_found(str_cat("cannot reopen the model file: ", std::strerror(errno)));
  } else {
    in = memfd_create("tessera-onnx-model", MFD_CLOEXEC);
    if (in < 0) return internal_error(str_cat("memfd_create: ", std::strerror(errno)));
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t w = write(in, bytes.data() + off, bytes.size() - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int err = errno;
        close(in);
        return resource_exhausted(str_cat("cannot stage the model for ONNX's checks: ", std::strerror(err)));
      }
      off += static_cast<size_t>(w);
    }
    lseek(in, 0, SEEK_SET);
  }
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in);
    return internal_error(str_cat("pipe: ", std::strerror(errno)));
  }
  std::vector<std::string> args = {helper_};
  if (options.run_onnx_checker) args.push_back("--checker");
  if (options.run_onnx_shape_inference) args.push_back("--shape-inference");
  if (!model_dir.empty()) {
    args.push_back("--model-dir");
    args.push_back(model_dir);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, helper_.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    return resource_exhausted(str_cat("cannot start ", helper_, ": ", std::strerror(rc)));
  }
  pid_ = pid;
  out_ = out[0];
  return Status();
}

Status OnnxCheck::finish() {
  pid_t pid = pid_;
  pid_ = -1;
  std::string text;
  char buf[4096];
  int waited = 0;
  bool timed_out = false;
  while (true) {
    pollfd pfd{out_, POLLIN, 0};
    int r = poll(&pfd, 1, 100);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      waited += 100;
      if (waited >= kCheckTimeoutMs) {
        timed_out = true;
        kill(pid, SIGKILL);
        break;
      }
      continue;
    }
    ssize_t n = read(out_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < 65536) text.append(buf, static_cast<size_t>(n));
  }
  close(out_);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return Status(StatusCode::kInvalidArgument,
                  str_cat("ONNX checks did not finish within ", kCheckTimeoutMs / 1000, " s"));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status();
  if (WIFEXITED(status) && WEXITSTATUS(status) == kCheckRejected) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return Status(StatusCode::kInvalidArgument, str_cat("ONNX checker rejected the model: ", text));
  }
  if (WIFSIGNALED(status))
    return Status(StatusCode::kInvalidArgument,
                  str_cat("ONNX's checker or shape inference crashed on this model (signal ", WTERMSIG(status),
                          "); the model is malformed"));
  return Status(StatusCode::kInternal, str_cat(helper_, " failed (exit status ", WEXITSTATUS(status), ")"));
}

class Importer {
 public:
  // `source_path` is the model file ("" when imported from memory).
  // `bytes` is the serialized model, for ONNX's checks in their own process.
  Importer(std::string display_name, std::string model_dir, std::string source_path, std::string_view bytes)
      : file_(std::move(display_name)), model_dir_(std::move(model_dir)), source_path_(std::move(source_path)),
        bytes_(bytes) {}

  Result<std::unique_ptr<Graph>> run(onnx::ModelProto& model, const ImportOptions& options);

 private:
  Status error(StatusCode code, const std::string& what) const { return Status(code, str_cat(file_, ": ", what)); }
  Status check_opsets(const onnx::ModelProto& model);
  Result<std::unique_ptr<Graph>> convert(const onnx::ModelProto& model);
  Result<Tensor> convert_tensor(const onnx::TensorProto& tp, const std::string& where);
  Status read_external(const onnx::TensorProto& tp, const std::string& where, std::string* bytes);
  Result<Shape> convert_shape(const onnx::TypeProto& type, const std::string& where, DType* dtype);
  Status convert_attribute(const onnx::AttributeProto& ap, const std::string& where, Attribute* out);
  Status convert_constant_node(const onnx::NodeProto& np, const std::string& label);
  Status convert_node(const onnx::NodeProto& np, size_t index);

  std::string file_;
  std::string model_dir_;
  std::string source_path_;
  std::string_view bytes_;
  std::unique_ptr<Graph> g_ = std::make_unique<Graph>();
};

Status Importer::check_opsets(const onnx::ModelProto& model) {
  int64_t opset = -1;
  for (const auto& imp : model.opset_import()) {
    if (imp.domain().empty() || imp.domain() == "ai.onnx") opset = imp.version();
  }
  if (opset < 0) return error(StatusCode::kInvalidArgument, "model imports no opset of the default ONNX domain");
  if (opset < kMinOpset || opset > kMaxOpset)
    return error(StatusCode::kUnimplemented,
                 str_cat("opset ", opset, " is not supported (Tessera reads opsets ", kMinOpset, " to ", kMaxOpset,
                         "); re-export with torch.onnx.export(..., opset_version=17)"));
  g_->opset = opset;
  return Status();
}

Status Importer::read_external(const onnx::TensorProto& tp, const std::string& where, std::string* bytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : tp.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset" && !parse_int64(kv.value(), &offset))
      return error(StatusCode::kInvalidArgument, str_cat(where, ": bad external data offset '", kv.value(), "'"));
    else if (kv.key() == "length" && !parse_int64(kv.value(), &length))
      return error(StatusCode::kInvalidArgument, str_cat(where, ": bad external data length '", kv.value(), "'"));
  }
  if (location.empty()) return error(StatusCode::kInvalidArgument, str_cat(where, ": external data has no location"));
  if (model_dir_.empty())
    return error(StatusCode::kInvalidArgument, str_cat(where, ": external data '", location,
                                                       "' cannot be resolved for a model read from memory"));
  fs::path rel(location);
  if (rel.is_absolute() || location.find("..") != std::string::npos)
    return error(StatusCode::kInvalidArgument,
                 str_cat(where, ": external data location '", location, "' must be a path inside the model's folder"));
  fs::path full = fs::path(model_dir_) / rel;
  std::ifstream in(full, std::ios::binary);
  if (!in) return error(StatusCode::kNotFound, str_cat(where, ": cannot open external data file '", full.string(),
                                                       "': ", std::strerror(errno)));
  in.seekg(0, std::ios::end);
  int64_t file_size = in.tellg();
  if (offset < 0 || offset > file_size) {
    return error(StatusCode::kDataLoss, str_cat(where, ": external data offset ", offset, " is past the end of '",
                                                full.string(), "' (", file_size, " bytes)"));
  }
  if (length < 0) length = file_size - offset;
  if (length > file_size - offset)
    return error(StatusCode::kDataLoss, str_cat(where, ": external data '", full.string(), "' holds ",
                                                file_size - offset, " bytes after offset ", offset, ", need ", length));
  bytes->resize(static_cast<size_t>(length));
  in.seekg(offset);
  in.read(bytes->data(), length);
  if (!in) return error(StatusCode::kDataLoss, str_cat(where, ": short read from '", full.string(), "'"));
  return Status();
}

Result<Tensor> Importer::convert_tensor(const onnx::TensorProto& tp, const std::string& where) {
  DType dt = compute_dtype(tp.data_type());
  if (dt == DType::kUndefined)
    return error(StatusCode::kUnimplemented,
                 str_cat(where, ": element type ", onnx_type_name(tp.data_type()), " is not supported"));
  std::vector<int64_t> dims(tp.dims().begin(), tp.dims().end());
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && numel > std::numeric_limits<int64_t>::max() / 4 / d))
      return error(StatusCode::kInvalidArgument, str_cat(where, ": bad dimension ", d));
    numel *= d;
  }
  Shape shape(dims);
  // Bytes per element as stored in the file.
  size_t stored_size = 0;
  switch (tp.data_type()) {
    case kOnnxFloat: case kOnnxInt32: stored_size = 4; break;
    case kOnnxInt64: case kOnnxDouble: stored_size = 8; break;
    case kOnnxFloat16: case kOnnxBFloat16: stored_size = 2; break;
    default: stored_size = 1; break;
  }
  std::string external;
  const std::string* raw = nullptr;
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    TESSERA_RETURN_IF_ERROR(read_external(tp, where, &external));
    raw = &external;
  } else if (tp.has_raw_data()) {
    raw = &tp.raw_data();
  }
  Tensor t;
  auto store = [&](int64_t i, double v) {
    switch (dt) {
      case DType::kFloat32: t.data<float>()[i] = static_cast<float>(v); break;
      case DType::kInt64: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::kInt8: t.data<int8_t>()[i] = static_cast<int8_t>(v); break;
      case DType::kUInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
      case DType::kBool: t.data<uint8_t>()[i] = v != 0; break;
      default: break;
    }
  };
  if (raw != nullptr) {
    if (raw->size() != static_cast<size_t>(numel) * stored_size)
      return error(StatusCode::kDataLoss, str_cat(where, ": holds ", raw->size(), " bytes, shape ",
                                                  shape.to_string(), " needs ", numel * static_cast<int64_t>(stored_size)));
    t = Tensor(dt, shape);
    const char* p = raw->data();
    if (stored_size == dtype_size(dt) && tp.data_type() != kOnnxFloat16 && tp.data_type() != kOnnxBFloat16 &&
        tp.data_type() != kOnnxBool) {  // same representation: one copy (little-endian hosts)
      if (numel > 0) std::memcpy(t.raw(), p, static_cast<size_t>(numel) * stored_size);
      return t;
    }
    for (int64_t i = 0; i < numel; ++i) {
      const char* e = p + i * stored_size;
      switch (tp.data_type()) {
        case kOnnxFloat: { float v; std::memcpy(&v, e, 4); t.data<float>()[i] = v; break; }
        case kOnnxDouble: { double v; std::memcpy(&v, e, 8); t.data<float>()[i] = static_cast<float>(v); break; }
        case kOnnxFloat16: { uint16_t v; std::memcpy(&v, e, 2); t.data<float>()[i] = half_to_float(v); break; }
        case kOnnxBFloat16: { uint16_t v; std::memcpy(&v, e, 2); t.data<float>()[i] = bfloat16_to_float(v); break; }
        case kOnnxInt64: { int64_t v; std::memcpy(&v, e, 8); t.data<int64_t>()[i] = v; break; }
        case kOnnxInt32: { int32_t v; std::memcpy(&v, e, 4); t.data<int32_t>()[i] = v; break; }
        case kOnnxInt8: t.data<int8_t>()[i] = static_cast<int8_t>(*e); break;
        case kOnnxUInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(*e); break;
        case kOnnxBool: t.data<uint8_t>()[i] = *e != 0; break;
        default: break;
      }
    }
    return t;
  }
  // Typed fields.
  auto check_count = [&](int count) -> Status {
    if (count != numel)
      return error(StatusCode::kDataLoss, str_cat(where, ": holds ", count, " values, shape ", shape.to_string(),
                                                  " needs ", numel));
    t = Tensor(dt, shape);
    return Status();
  };
  switch (tp.data_type()) {
    case kOnnxFloat:
      TESSERA_RETURN_IF_ERROR(check_count(tp.float_data_size()));
      for (int64_t i = 0; i < numel; ++i) store(i, tp.float_data(static_cast<int>(i)));
      break;
    case kOnnxDouble:
      TESSERA_RETURN_IF_ERROR(check_count(tp.double_data_size()));
      for (int64_t i = 0; i < numel; ++i) store(i, tp.double_data(static_cast<int>(i)));
      break;
    case kOnnxInt64:
      TESSERA_RETURN_IF_ERROR(check_count(tp.int64_data_size()));
      for (int64_t i = 0; i < numel; ++i) t.data<int64_t>()[i] = tp.int64_data(static_cast<int>(i));
      break;
    case kOnnxFloat16: case kOnnxBFloat16:
      TESSERA_RETURN_IF_ERROR(check_count(tp.int32_data_size()));
      for (int64_t i = 0; i < numel; ++i) {
        auto bits = static_cast<uint16_t>(tp.int32_data(static_cast<int>(i)));
        t.data<float>()[i] = tp.data_type() == kOnnxFloat16 ? half_to_float(bits) : bfloat16_to_float(bits);
      }
      break;
    default:
      TESSERA_RETURN_IF_ERROR(check_count(tp.int32_data_size()));
      for (int64_t i = 0; i < numel; ++i) store(i, tp.int32_data(static_cast<int>(i)));
      break;
  }
  return t;
}

Result<Shape> Importer::convert_shape(const onnx::TypeProto& type, const std::string& where, DType* dtype) {
  if (!type.has_tensor_type()) return error(StatusCode::kUnimplemented, str_cat(where, " is not a tensor"));
  const auto& tt = type.tensor_type();
  *dtype = compute_dtype(tt.elem_type());
  if (*dtype == DType::kUndefined)
    return error(StatusCode::kUnimplemented,
                 str_cat(where, ": element type ", onnx_type_name(tt.elem_type()), " is not supported"));
  Shape s;
  if (!tt.has_shape()) return s;  // unknown rank; inference fills it in
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) return error(StatusCode::kInvalidArgument, str_cat(where, ": negative dimension"));
      s.dims.push_back(d.dim_value());
      s.symbols.emplace_back();
    } else {
      s.dims.push_back(kDynamic);
      s.symbols.push_back(d.has_dim_param() ? d.dim_param() : "");
    }
  }
  return s;
}

Status Importer::convert_attribute(const onnx::AttributeProto& ap, const std::string& where, Attribute* out) {
  using A = onnx::AttributeProto;
  switch (ap.type()) {
    case A::INT: out->kind = Attribute::Kind::kInt; out->i = ap.i(); break;
    case A::FLOAT: out->kind = Attribute::Kind::kFloat; out->f = ap.f(); break;
    case A::STRING: out->kind = Attribute::Kind::kString; out->s = ap.s(); break;
    case A::INTS: out->kind = Attribute::Kind::kInts; out->ints.assign(ap.ints().begin(), ap.ints().end()); break;
    case A::FLOATS:
      out->kind = Attribute::Kind::kFloats;
      out->floats.assign(ap.floats().begin(), ap.floats().end());
      break;
    case A::STRINGS:
      out->kind = Attribute::Kind::kStrings;
      out->strings.assign(ap.strings().begin(), ap.strings().end());
      break;
    case A::TENSOR: {
      out->kind = Attribute::Kind::kTensor;
      TESSERA_ASSIGN_OR_RETURN(out->t, convert_tensor(ap.t(), str_cat(where, " attribute '", ap.name(), "'")));
      break;
    }
    default:
      return error(StatusCode::kUnimplemented,
                   str_cat(where, ": attribute '", ap.name(), "' has a kind Tessera does not support (subgraphs, "
                                  "sparse tensors and type protos are not supported)"));
  }
  return Status();
}

Status Importer::convert_constant_node(const onnx::NodeProto& np, const std::string& label) {
  if (np.output_size() != 1) return error(StatusCode::kInvalidArgument, str_cat(label, " must have one output"));
  if (np.attribute_size() != 1)
    return error(StatusCode::kInvalidArgument, str_cat(label, " must have exactly one value attribute"));
  Attribute a;
  TESSERA_RETURN_IF_ERROR(convert_attribute(np.attribute(0), label, &a));
  const std::string& key = np.attribute(0).name();
  Tensor t;
  if (key == "value") t = a.t;
  else if (key == "value_float") t = Tensor::from_floats({a.f}, Shape{});
  else if (key == "value_floats") t = Tensor::from_floats(a.floats, Shape{static_cast<int64_t>(a.floats.size())});
  else if (key == "value_int") t = Tensor::from_int64s({a.i}, Shape{});
  else if (key == "value_ints") t = Tensor::from_int64s(a.ints, Shape{static_cast<int64_t>(a.ints.size())});
  else return error(StatusCode::kUnimplemented, str_cat(label, ": attribute '", key, "' is not supported"));
  if (g_->find_value(np.output(0)))
    return error(StatusCode::kInvalidArgument, str_cat(label, ": output '", np.output(0), "' is defined twice"));
  g_->add_constant(np.output(0), std::move(t));
  return Status();
}

Status Importer::convert_node(const onnx::NodeProto& np, size_t index) {
  std::string name = np.name().empty() ? str_cat(np.op_type(), "_", index) : np.name();
  std::string label = str_cat("node ", np.op_type(), " '", name, "'");
  if (!np.domain().empty() && np.domain() != "ai.onnx")
    return error(StatusCode::kUnimplemented,
                 str_cat(label, " is in domain '", np.domain(), "'; Tessera supports only the default ONNX domain"));
  if (np.op_type() == "Constant") return convert_constant_node(np, label);
  std::vector<Value*> inputs;
  for (const auto& in : np.input()) {
    if (in.empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    Value* v = g_->find_value(in);
    if (v == nullptr)
      return error(StatusCode::kInvalidArgument, str_cat(label, " reads '", in, "', which nothing defines"));
    inputs.push_back(v);
  }
  while (!inputs.empty() && inputs.back() == nullptr) inputs.pop_back();
  std::vector<std::string> out_names;
  for (int i = 0; i < np.output_size(); ++i) {
    const std::string& o = np.output(i);
    if (!o.empty() && g_->find_value(o))
      return error(StatusCode::kInvalidArgument, str_cat(label, ": output '", o, "' is defined twice"));
    out_names.push_back(o.empty() ? str_cat(name, ":unused", i) : o);
  }
  Node* n = g_->add_node(np.op_type(), name, std::move(inputs), np.output_size(), out_names);
  n->opset = g_->opset;
  for (const auto& ap : np.attribute()) {
    Attribute a;
    TESSERA_RETURN_IF_ERROR(convert_attribute(ap, label, &a));
    n->attrs[ap.name()] = std::move(a);
  }
  return Status();
}

Result<std::unique_ptr<Graph>> Importer::run(onnx::ModelProto& model, const ImportOptions& options) {
  if (!model.has_graph()) return error(StatusCode::kInvalidArgument, "not an ONNX model (it has no graph)");
  TESSERA_RETURN_IF_ERROR(check_opsets(model));
  bool external = false;
  for (const auto& tp : model.graph().initializer()) {
    if (tp.data_location() != onnx::TensorProto::EXTERNAL) continue;
    external = true;
    // Refuse paths that leave the model's folder before anything opens them.
    for (const auto& kv : tp.external_data()) {
      if (kv.key() != "location") continue;
      if (fs::path(kv.value()).is_absolute() || kv.value().find("..") != std::string::npos)
        return error(StatusCode::kInvalidArgument,
                     str_cat("initializer '", tp.name(), "': external data location '", kv.value(),
                             "' must be a path inside the model's folder"));
    }
  }
  if (external && source_path_.empty())
    return error(StatusCode::kInvalidArgument, "a model read from memory cannot reference external data files");
  // ONNX's verdict comes first: a conversion error is reported only for a
  // model ONNX accepts. The two run side by side.
  OnnxCheck check;
  bool checking = options.run_onnx_checker || options.run_onnx_shape_inference;
  if (checking) {
    Status st = check.start(source_path_, bytes_, external ? model_dir_ : std::string(), options);
    if (!st.ok()) return error(st.code(), st.message());
  }
  auto converted = convert(model);
  if (checking) {
    Status st = check.finish();
    if (!st.ok()) return error(st.code(), st.message());
  }
  return converted;
}

Result<std::unique_ptr<Graph>> Importer::convert(const onnx::ModelProto& model) {
  const auto& gp = model.graph();
  g_->name = gp.name();
  for (int i = 0; i < gp.initializer_size(); ++i) {
    const auto& tp = gp.initializer(i);
    std::string where = str_cat("initializer '", tp.name(), "'");
    if (tp.name().empty()) return error(StatusCode::kInvalidArgument, str_cat("initializer ", i, " has no name"));
    if (g_->find_value(tp.name())) return error(StatusCode::kInvalidArgument, str_cat(where, " is defined twice"));
    TESSERA_ASSIGN_OR_RETURN(Tensor t, convert_tensor(tp, where));
    g_->add_constant(tp.name(), std::move(t));
  }
  for (const auto& vi : gp.input()) {
    if (g_->find_value(vi.name())) continue;  // an initializer listed as input (IR < 4): a constant
    DType dt = DType::kUndefined;
    TESSERA_ASSIGN_OR_RETURN(Shape s, convert_shape(vi.type(), str_cat("input '", vi.name(), "'"), &dt));
    g_->add_input(vi.name(), dt, s);
  }
  for (int i = 0; i < gp.node_size(); ++i) TESSERA_RETURN_IF_ERROR(convert_node(gp.node(i), static_cast<size_t>(i)));
  for (const auto& vi : gp.output()) {
    Value* v = g_->find_value(vi.name());
    if (v == nullptr) return error(StatusCode::kInvalidArgument, str_cat("output '", vi.name(), "' is never produced"));
    if (v->is_output) continue;
    g_->mark_output(v);
  }
  // Types ONNX inferred, where we have no better: dtypes of intermediates.
  for (const auto& vi : gp.value_info()) {
    Value* v = g_->find_value(vi.name());
    if (v == nullptr || v->is_constant() || !vi.type().has_tensor_type()) continue;
    DType dt = compute_dtype(vi.type().tensor_type().elem_type());
    if (dt != DType::kUndefined) v->dtype = dt;
  }
  TESSERA_RETURN_IF_ERROR(g_->sort_topologically().with_context(file_));
  TESSERA_RETURN_IF_ERROR(verify_graph(*g_).with_context(file_));
  return std::move(g_);
}

}  // namespace

Result<std::unique_ptr<Graph>> import_onnx_bytes(const void* data, size_t size, const std::string& model_dir,
                                                 const std::string& display_name, const ImportOptions& options) {
  if (size == 0) return invalid_argument(str_cat(display_name, ": file is empty, not an ONNX model"));
  if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
    return unimplemented(str_cat(display_name, ": models over 2 GiB must keep weights as external data"));
  onnx::ModelProto model;
  if (!model.ParseFromArray(data, static_cast<int>(size)))
    return data_loss(str_cat(display_name, ": not an ONNX model, or the file is truncated (protobuf parse failed)"));
  Importer imp(display_name, model_dir, "", std::string_view(static_cast<const char*>(data), size));
  return imp.run(model, options);
}

namespace {
Result<std::unique_ptr<Graph>> import_file_bytes(const std::string& bytes, const std::string& path,
                                                 const ImportOptions& options) {
  if (bytes.empty()) return invalid_argument(str_cat(path, ": file is empty, not an ONNX model"));
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    return unimplemented(str_cat(path, ": models over 2 GiB must keep weights as external data"));
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return data_loss(str_cat(path, ": not an ONNX model, or the file is truncated (protobuf parse failed)"));
  std::string dir = fs::path(path).parent_path().string();
  Importer imp(path, dir.empty() ? "." : dir, path, bytes);
  return imp.run(model, options);
}
}  // namespace

Result<std::unique_ptr<Graph>> import_onnx_file(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(str_cat("model file '", path, "' does not exist"));
  if (fs::is_directory(path, ec)) return invalid_argument(str_cat("model path '", path, "' is a directory"));
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return not_found(str_cat("cannot open model file '", path, "': ", std::strerror(errno)));
  std::streamoff size = in.tellg();
  if (size < 0) return data_loss(str_cat("cannot read model file '", path, "'"));
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(bytes.data(), size);
  if (!in) return data_loss(str_cat("short read from model file '", path, "'"));
  return import_file_bytes(bytes, path, options);
}

}  // namespace tessera
