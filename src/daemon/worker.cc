#include "daemon/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <csignal>
#include <filesystem>

#include "base/clock.h"
#include "base/log.h"
#include "base/strings.h"
#include "daemon/ring.h"
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

// A request on the socket: SessionClose ends, Crash crashes, Run runs
// (its bytes checked again here against the session, so that a confused
// daemon cannot make a worker read past a buffer). False to end.
bool serve_request(int fd, const Request& req, Session& session) {
  if (req.body_case() == Request::kClose) return false;
  if (req.body_case() == Request::kCrash) {
    log_warning("worker: crashing on request (fault injection)");
    if (req.crash().how() == 1) (void)!::open("/etc/hostname", O_RDONLY);  // SIGSYS under the sandbox
    std::raise(SIGSEGV);
  }
  if (req.body_case() != Request::kRun) {
    reply_error(fd, req.id(), invalid_argument("a worker serves Run, RingSetup, SessionClose and Crash only"));
    return true;
  }
  const std::vector<TensorInfo>& ins = session.inputs();
  NamedTensors inputs;
  for (const TensorData& d : req.run().inputs()) {
    const TensorInfo* info = nullptr;
    for (const TensorInfo& t : ins)
      if (t.name == d.name()) info = &t;
    const std::vector<int64_t> shape(d.shape().begin(), d.shape().end());
    if (info == nullptr || static_cast<int32_t>(info->dtype) != d.dtype() || info->shape != shape ||
        d.data().size() != bytes_of(info->dtype, shape)) {
      reply_error(fd, req.id(), invalid_argument(str_cat("input '", d.name(), "' does not match the session")));
      return true;
    }
    inputs.set(d.name(), Tensor::wrap(info->dtype, shape, const_cast<char*>(d.data().data())));
  }
  Result<NamedTensors> r = session.run(inputs);
  if (!r.ok()) {
    reply_error(fd, req.id(), r.status());
    return true;
  }
  Reply out;
  out.set_id(req.id());
  RunResult* res = out.mutable_result();
  res->set_compute_ms(session.last_breakdown().compute_ms);
  for (const auto& [name, t] : *r) {
    TensorData* d = res->add_outputs();
    d->set_name(name);
    d->set_dtype(static_cast<int32_t>(t.dtype()));
    for (int64_t x : t.shape()) d->add_shape(x);
    d->set_data(static_cast<const char*>(t.raw()), t.nbytes());
  }
  return write_frame(fd, out).ok();
}

// The session's rings, mapped from the client's region (ring.h).
struct Rings {
  RingHeader* header = nullptr;
  char* data = nullptr;
  uint64_t data_bytes = 0;
  WorkerStats stats;  // what ran through them (the daemon asks)

  void count(double latency_s, float compute_ms, bool ok) {
    if (stats.buckets_size() == 0) stats.mutable_buckets()->Resize(static_cast<int>(kLatencyBuckets), 0);
    if (!ok) {
      stats.set_errors(stats.errors() + 1);
      return;
    }
    stats.set_runs(stats.runs() + 1);
    stats.set_busy_s(stats.busy_s() + compute_ms / 1e3);
    stats.set_latency_s(stats.latency_s() + latency_s);
    size_t b = 0;
    while (b + 1 < kLatencyBuckets && latency_s > kLatencyBounds[b]) ++b;
    stats.set_buckets(static_cast<int>(b), stats.buckets(static_cast<int>(b)) + 1);
  }

  Status map(int fd, const Session& session) {
    if (fd < 0) return invalid_argument("RingSetup: no region came with it");
    if (header != nullptr) {
      ::close(fd);
      return failed_precondition("RingSetup: the session has its rings already");
    }
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    const uint64_t size = regular ? static_cast<uint64_t>(st.st_size) : 0;
    void* at = size > kRingDataOffset ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    ::close(fd);
    if (at == MAP_FAILED) return invalid_argument("RingSetup: the region is not a mappable file of its size");
    auto* h = static_cast<RingHeader*>(at);
    uint64_t needed = 0;
    for (const TensorInfo& t : session.inputs()) needed += (bytes_of(t.dtype, t.shape) + 63) / 64 * 64;
    for (const TensorInfo& t : session.outputs()) needed += (bytes_of(t.dtype, t.shape) + 63) / 64 * 64;
    if (h->magic != kRingMagic || h->version != kRingVersion || h->entries != kRingEntries ||
        h->data_offset != kRingDataOffset || h->data_bytes != size - kRingDataOffset || h->data_bytes < needed) {
      ::munmap(at, size);
      return invalid_argument(str_cat("RingSetup: the region's header does not describe it (", needed,
                                      " data bytes needed)"));
    }
    header = h;
    data = static_cast<char*>(at) + kRingDataOffset;
    data_bytes = h->data_bytes;
    return Status();
  }

  // One submission: every span inside the data area, of its tensor's
  // size, aligned to its elements; outputs overlapping nothing else.
  Status run(const RingSqe& e, Session& session, float* compute_ms) {
    const std::vector<TensorInfo>& ins = session.inputs();
    const std::vector<TensorInfo>& outs = session.outputs();
    if (e.inputs != ins.size() || e.outputs != outs.size())
      return invalid_argument(str_cat("the session takes ", ins.size(), " input(s) and gives ", outs.size(),
                                      " output(s); the submission has ", e.inputs, " and ", e.outputs));
    auto check = [&](const RingSpan& s, const TensorInfo& t, const char* what) -> Status {
      const uint64_t want = bytes_of(t.dtype, t.shape);
      const uint64_t align = std::max<uint64_t>(1, dtype_size(t.dtype));
      if (s.bytes != want || s.offset > data_bytes || s.bytes > data_bytes - s.offset || s.offset % align != 0)
        return invalid_argument(str_cat(what, " '", t.name, "' at offset ", s.offset, " for ", s.bytes,
                                        " bytes: it needs ", want, " bytes, aligned to ", align, ", inside the ",
                                        data_bytes, "-byte data area"));
      return Status();
    };
    NamedTensors in, out;
    for (size_t i = 0; i < ins.size(); ++i) {
      TESSERA_RETURN_IF_ERROR(check(e.in[i], ins[i], "input"));
      in.set(ins[i].name, Tensor::wrap(ins[i].dtype, ins[i].shape, data + e.in[i].offset));
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      TESSERA_RETURN_IF_ERROR(check(e.out[i], outs[i], "output"));
      auto overlaps = [&](const RingSpan& o) {
        return e.out[i].offset < o.offset + o.bytes && o.offset < e.out[i].offset + e.out[i].bytes;
      };
      for (size_t j = 0; j < ins.size(); ++j)
        if (overlaps(e.in[j])) return invalid_argument(str_cat("output '", outs[i].name, "' overlaps an input"));
      for (size_t j = 0; j < i; ++j)
        if (overlaps(e.out[j])) return invalid_argument(str_cat("output '", outs[i].name, "' overlaps another"));
      out.set(outs[i].name, Tensor::wrap(outs[i].dtype, outs[i].shape, data + e.out[i].offset));
    }
    TESSERA_RETURN_IF_ERROR(session.run(in, out));
    *compute_ms = static_cast<float>(session.last_breakdown().compute_ms);
    return Status();
  }
};

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
  so.adapt = !o.no_adapt();
  Result<Session> session = model->session(so);
  if (!session.ok()) return reply_error(fd, first.id(), session.status());
  // Admission by schedule: the Plan's predicted latency against the
  // session's objective.
  const Result<PlanInfo> plan = session->plan();
  const double predicted_ms = plan.ok() ? plan->predicted_us / 1e3 : 0;
  if (o.latency_ms() > 0 && !(predicted_ms <= o.latency_ms()))
    return reply_error(fd, first.id(),
                       resource_exhausted(str_cat("the Plan on ", session->veus(), " vEU(s) (cores ",
                                                  str_join(session->cores(), ","), ") is predicted to take ",
                                                  predicted_ms, " ms; the objective is ", o.latency_ms(), " ms")));
  Opened* op = reply.mutable_opened();
  op->set_predicted_ms(predicted_ms);
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

  // Serving: requests on the socket, and runs on the rings once the
  // client has registered them.
  Rings rings;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (rings.header == nullptr || ::poll(&p, 1, 0) > 0) {
      Request req;
      std::vector<int> fds;
      if (!read_frame(fd, &req, &fds).ok()) return 0;  // the daemon closed: done
      const int passed = fds.empty() ? -1 : fds.front();
      for (size_t i = 1; i < fds.size(); ++i) ::close(fds[i]);
      if (req.body_case() == Request::kRing) {
        Status st = rings.map(passed, *session);
        if (!st.ok()) {
          reply_error(fd, req.id(), st);
          continue;
        }
        Reply ok;
        ok.set_id(req.id());
        if (!write_frame(fd, ok).ok()) return 0;
        continue;
      }
      if (passed >= 0) ::close(passed);
      if (req.body_case() == Request::kStats) {
        Reply r;
        r.set_id(req.id());
        *r.mutable_worker_stats() = rings.stats;
        if (!write_frame(fd, r).ok()) return 0;
        continue;
      }
      if (!serve_request(fd, req, *session)) return 0;
      continue;
    }
    RingHeader* h = rings.header;
    const uint32_t head = h->sq_head.load(std::memory_order_relaxed);
    if (h->sq_tail.load(std::memory_order_acquire) == head) {
      ring_wait(h->sq_tail, h->sq_sleeping, head, 200000, 20);
      continue;
    }
    const int64_t taken = now_ns();
    RingSqe e;
    std::memcpy(&e, &h->sq[head % kRingEntries], sizeof e);  // a snapshot: the client may change the original
    RingCqe c{};
    c.user_data = e.user_data;
    Status st = rings.run(e, *session, &c.compute_ms);
    rings.count(static_cast<double>(now_ns() - taken) / 1e9, c.compute_ms, st.ok());
    c.code = static_cast<int32_t>(st.code());
    std::snprintf(c.message, sizeof c.message, "%s", st.message().c_str());
    // Room in the completion queue: a client that does not take its
    // completions waits for them, the socket still served.
    while (h->cq_tail.load(std::memory_order_relaxed) - h->cq_head.load(std::memory_order_acquire) >= kRingEntries) {
      if (::poll(&p, 1, 1) > 0) break;
    }
    const uint32_t tail = h->cq_tail.load(std::memory_order_relaxed);
    h->cq[tail % kRingEntries] = c;
    h->sq_head.store(head + 1, std::memory_order_release);
    ring_post(h->cq_tail, h->cq_sleeping, tail + 1);
  }
}

}  // namespace tessera::daemon
