// tessera-onnx-check: runs ONNX's checker and shape inference on the model
// read from standard input, in a process of its own.
//
// The importer starts it (posix_spawn) for every model: libonnx is not
// hardened against malformed models (1.12's convPoolShapeInference reads
// past the dims of a low-rank input), and a crash here must not take the
// importing process down. A fresh process, unlike a fork of a program with
// threads, inherits no lock another thread held.
//
//   tessera-onnx-check [--checker] [--shape-inference] [--model-dir DIR] < model.onnx
//
// Exit status: 0 the model passed; 3 ONNX rejected it, with the reason on
// standard output; 2 bad usage or unreadable input. Anything else (a
// signal) is a crash inside libonnx.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

namespace {

constexpr int kRejected = 3;
constexpr int kUsage = 2;

bool read_all(int fd, std::string* out) {
  char buf[1 << 16];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) return false;
    out->append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A fault must just end this process with its signal: drop the handlers
  // that sanitizers install, so the importer sees the crash as a crash.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, SIG_DFL);
  bool checker = false, infer = false;
  std::string model_dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--checker") checker = true;
    else if (a == "--shape-inference") infer = true;
    else if (a == "--model-dir" && i + 1 < argc) model_dir = argv[++i];
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: tessera-onnx-check [--checker] [--shape-inference] [--model-dir DIR] < MODEL.onnx\n"
          "Runs ONNX's checker and shape inference on the model on standard input.\n"
          "Started by Tessera's importer; exit 0 passed, 3 rejected (reason on stdout), 2 bad usage.\n");
      return 0;
    } else {
      std::fprintf(stderr, "tessera-onnx-check: unknown argument '%s' (see --help)\n", argv[i]);
      return kUsage;
    }
  }
  // A file on standard input (the importer passes the model file or a
  // memfd) is mapped, not copied: page faults dominate on large models.
  std::string bytes;
  const void* data = nullptr;
  size_t size = 0;
  struct stat st {};
  if (fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    size = static_cast<size_t>(st.st_size);
    data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, STDIN_FILENO, 0);
    if (data == MAP_FAILED) data = nullptr;
  }
  if (data == nullptr) {
    if (!read_all(STDIN_FILENO, &bytes)) {
      std::fprintf(stderr, "tessera-onnx-check: cannot read the model: %s\n", std::strerror(errno));
      return kUsage;
    }
    data = bytes.data();
    size = bytes.size();
  }
  onnx::ModelProto model;
  if (size > static_cast<size_t>(INT32_MAX) || !model.ParseFromArray(data, static_cast<int>(size))) {
    std::printf("not an ONNX model (protobuf parse failed)");
    return kRejected;
  }
  // The in-memory checker resolves external data files against the
  // working directory.
  if (!model_dir.empty() && chdir(model_dir.c_str()) != 0) {
    std::printf("cannot enter the model's folder '%s': %s", model_dir.c_str(), std::strerror(errno));
    return kRejected;
  }
  try {
    if (checker) onnx::checker::check_model(model);
    if (infer) onnx::shape_inference::InferShapes(model);
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::printf("%s", what.empty() ? "unknown error" : what.c_str());
    return kRejected;
  }
  return 0;
}
