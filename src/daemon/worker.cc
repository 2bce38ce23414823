#include "daemon/worker.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <csignal>
#include <filesystem>

#include "base/log.h"
#include "base/strings.h"
#include "daemon/sandbox.h"
#include "daemon/wire.h"
#include "tessera/tessera.h"

namespace tessera::daemon {
namespace {

void fill(TensorDesc* d, const TensorInfo& t) {
  d->set_name(t.name);
  d->set_dtype(static_cast<int32_t>(t.dtype));
  for (int64_t x : t.shape) d->add_shape(x);
}

size_t bytes_of(DType t, const std::vector<int64_t>& shape) {
  size_t n = dtype_size(t);
  for (int64_t x : shape) n *= static_cast<size_t>(x);
  return n;
}

int reply_error(int fd, uint64_t id, const Status& st) {
  Reply r;
  r.set_id(id);
  r.set_code(static_cast<int32_t>(st.code()));
  r.set_message(st.message());
  (void)write_frame(fd, r);
  return 1;
}

std::map<std::string, std::vector<int64_t>> shapes_of(const SessionOpen& o) {
  std::map<std::string, std::vector<int64_t>> m;
  for (const TensorDesc& d : o.shapes()) m[d.name()] = {d.shape().begin(), d.shape().end()};
  return m;
}

// The Executable for `veus` vEUs next to the model in the cache, compiled
// once (written whole, then renamed) and shared by every session of any
// tenant that loads the same bytes.
Result<Model> executable_for(Runtime& rt, const SessionOpen& o) {
  std::string exe = str_cat(o.model_path(), ".", o.veus(), "veu");
  for (const TensorDesc& d : o.shapes()) exe += str_cat(".", d.name().size(), "-", str_join(d.shape(), "x"));
  exe += ".tsx";
  if (!std::filesystem::exists(exe)) {
    CompileOptions co;
    co.shapes = shapes_of(o);
    TESSERA_ASSIGN_OR_RETURN(Model m, rt.compile(o.model_path(), co));
    SessionOptions so;
    so.veus = static_cast<int>(o.veus());
    so.cores = {o.cores().begin(), o.cores().end()};
    const std::string tmp = str_cat(exe, ".tmp", ::getpid());
    TESSERA_RETURN_IF_ERROR(m.save(tmp, so));
    std::error_code ec;
    std::filesystem::rename(tmp, exe, ec);
    if (ec) return internal_error(str_cat("cannot put ", exe, " in the model cache: ", ec.message()));
  }
  return rt.compile(exe);
}

}  // namespace

int worker_main(int fd) {
  if (Status st = sandbox_for_loading(); !st.ok()) return reply_error(fd, 0, st);
  Request first;
  if (Status st = read_frame(fd, &first); !st.ok() || first.body_case() != Request::kOpen) return 1;
  const SessionOpen& o = first.open();
  Reply reply;
  reply.set_id(first.id());
  if (o.cores().empty()) {  // inspect only
    InspectOptions io;
    io.shapes = shapes_of(o);
    Result<ModelSummary> s = inspect(o.model_path(), io);
    if (!s.ok()) return reply_error(fd, first.id(), s.status());
    if (!s->shapes_bound.ok()) return reply_error(fd, first.id(), s->shapes_bound);
    for (const TensorInfo& t : s->inputs) fill(reply.mutable_loaded()->add_inputs(), t);
    for (const TensorInfo& t : s->outputs) fill(reply.mutable_loaded()->add_outputs(), t);
    return write_frame(fd, reply).ok() ? 0 : 1;
  }
  Result<Runtime> rt = connect();
  if (!rt.ok()) return reply_error(fd, first.id(), rt.status());
  Result<Model> model = executable_for(*rt, o);
  if (!model.ok()) return reply_error(fd, first.id(), model.status());
  SessionOptions so;
  so.cores = {o.cores().begin(), o.cores().end()};
  so.veus = static_cast<int>(o.cores().size());
  Result<Session> session = model->session(so);
  if (!session.ok()) return reply_error(fd, first.id(), session.status());
  Opened* op = reply.mutable_opened();
  for (int c : session->cores()) op->add_cores(c);
  op->set_veus(session->veus());
  for (const TensorInfo& t : session->inputs()) fill(op->add_inputs(), t);
  for (const TensorInfo& t : session->outputs()) fill(op->add_outputs(), t);
  // One run before the gate closes: whatever a first run sets up (pinning,
  // thread-local state) is done while it may still be.
  {
    NamedTensors warm;
    std::vector<std::vector<char>> zeros;
    for (const TensorInfo& t : session->inputs()) {
      zeros.emplace_back(Tensor(t.dtype, t.shape).nbytes());
      warm.set(t.name, Tensor::wrap(t.dtype, t.shape, zeros.back().data()));
    }
    if (Result<NamedTensors> r = session->run(warm); !r.ok()) return reply_error(fd, first.id(), r.status());
  }
  if (Status st = sandbox_for_running(); !st.ok()) return reply_error(fd, first.id(), st);
  if (!write_frame(fd, reply).ok()) return 1;

  // Serving. The daemon checked every request; the bytes are checked again
  // here against the session, so that a confused daemon cannot make a
  // worker read past a buffer.
  const std::vector<TensorInfo>& ins = session->inputs();
  for (;;) {
    Request req;
    if (!read_frame(fd, &req).ok()) return 0;  // the daemon closed: done
    Reply out;
    out.set_id(req.id());
    if (req.body_case() == Request::kClose) return 0;
    if (req.body_case() == Request::kCrash) {
      log_warning("worker: crashing on request (fault injection)");
      if (req.crash().how() == 1) (void)!::open("/etc/hostname", O_RDONLY);  // SIGSYS under the sandbox
      std::raise(SIGSEGV);
    }
    if (req.body_case() != Request::kRun) {
      reply_error(fd, req.id(), invalid_argument("a worker serves Run, SessionClose and Crash only"));
      continue;
    }
    NamedTensors inputs;
    Status bad;
    for (const TensorData& d : req.run().inputs()) {
      const TensorInfo* info = nullptr;
      for (const TensorInfo& t : ins)
        if (t.name == d.name()) info = &t;
      const std::vector<int64_t> shape(d.shape().begin(), d.shape().end());
      if (info == nullptr || static_cast<int32_t>(info->dtype) != d.dtype() || info->shape != shape ||
          d.data().size() != bytes_of(info->dtype, shape)) {
        bad = invalid_argument(str_cat("input '", d.name(), "' does not match the session"));
        break;
      }
      inputs.set(d.name(), Tensor::wrap(info->dtype, shape, const_cast<char*>(d.data().data())));
    }
    if (!bad.ok()) {
      reply_error(fd, req.id(), bad);
      continue;
    }
    Result<NamedTensors> r = session->run(inputs);
    if (!r.ok()) {
      reply_error(fd, req.id(), r.status());
      continue;
    }
    RunResult* res = out.mutable_result();
    res->set_compute_ms(session->last_breakdown().compute_ms);
    for (const auto& [name, t] : *r) {
      TensorData* d = res->add_outputs();
      d->set_name(name);
      d->set_dtype(static_cast<int32_t>(t.dtype()));
      for (int64_t x : t.shape()) d->add_shape(x);
      d->set_data(static_cast<const char*>(t.raw()), t.nbytes());
    }
    if (!write_frame(fd, out).ok()) return 0;
  }
}

}  // namespace tessera::daemon
