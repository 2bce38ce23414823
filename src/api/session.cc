// Session and Event (tessera/runtime.h): running a placed model, at once
// or asynchronously.
#include <cstring>

#include "api/state.h"
#include "base/clock.h"
#include "base/strings.h"
#include "runtime/trace.h"

namespace tessera {

using detail::EventState;
using detail::SessionState;
using detail::Turns;

namespace detail {

void EventState::finish(Status st, NamedTensors out) {
  std::vector<std::function<void(const Status&)>> cbs;
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    status = std::move(st);
    outputs = std::move(out);
    cbs.swap(callbacks);
  }
  cv.notify_all();
  for (auto& f : cbs) f(status);
}

uint64_t Turns::take() {
  std::lock_guard<std::mutex> lock(mu);
  return next_ticket++;
}

void Turns::await(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return serving == ticket; });
}

void Turns::end() {
  {
    std::lock_guard<std::mutex> lock(mu);
    ++serving;
  }
  cv.notify_all();
}

SessionState::~SessionState() {
  {
    std::lock_guard<std::mutex> lock(turns->mu);
    turns->stopping = true;
  }
  turns->cv.notify_all();
  // On the worker's own thread (a callback dropped the last handle) it
  // cannot be joined: it finds the session gone and ends by itself.
  if (worker.joinable()) {
    if (worker.get_id() == std::this_thread::get_id()) worker.detach();
    else worker.join();
  }
  loaded.reset();
  if (remote != 0) close_remote(*this);
  else if (runtime && lease != 0) {
    {
      std::lock_guard<std::mutex> lock(runtime->mu);
      runtime->leased.erase(lease);
    }
    runtime->end_lease(lease);
  }
  else if (runtime) runtime->release(slots);
}

void SessionState::worker_main(std::shared_ptr<Turns> t, std::weak_ptr<SessionState> session) {
  for (;;) {
    Turns::Request r;
    {
      std::unique_lock<std::mutex> lock(t->mu);
      t->cv.wait(lock, [&] { return (!t->queue.empty() && t->serving == t->queue.front().ticket) || t->stopping; });
      if (t->queue.empty()) return;  // the session is gone, nothing left
      r = std::move(t->queue.front());
      t->queue.pop_front();
    }
    {
      std::shared_ptr<SessionState> self = session.lock();
      if (self == nullptr) {
        r.event->finish(failed_precondition("the session was closed before this request ran"), {});
      } else {
        const double queued = static_cast<double>(now_ns() - r.made_ns) / 1e6;
        Result<NamedTensors> out = self->execute(r.inputs, queued);
        // Finished (its callbacks called) before the next request starts.
        if (out.ok()) r.event->finish(Status(), std::move(*out));
        else r.event->finish(out.status(), {});
      }
    }  // the last handle may go here, on this thread
    t->end();
  }
}

Result<NamedTensors> SessionState::execute(const NamedTensors& given, double queue_ms) {
  NamedTensors out;
  TESSERA_RETURN_IF_ERROR(execute(given, queue_ms, out));
  return out;
}

Tensor* SessionState::output_into(size_t i, NamedTensors& out) {
  const TensorInfo& o = outputs[i];
  if (Tensor* given = out.find(o.name)) return given;
  out.set(o.name, bound[i].defined() ? bound[i] : Tensor(o.dtype, o.shape));
  return out.find(o.name);
}

void SessionState::record(int64_t t0, int64_t t1, int64_t t2, int64_t t3, double queue_ms, uint64_t in_bytes,
                          uint64_t out_bytes) {
  last.copy_in_ms = static_cast<double>(t1 - t0) / 1e6;
  last.queue_ms = queue_ms;
  last.compute_ms = static_cast<double>(t2 - t1) / 1e6;
  last.copy_out_ms = static_cast<double>(t3 - t2) / 1e6;
  last.copy_in_bytes = in_bytes;
  last.copy_out_bytes = out_bytes;
}

Status SessionState::execute(const NamedTensors& given, double queue_ms, NamedTensors& out) {
  // Every output given is one of the model's, of its dtype and shape, with
  // memory; checked before anything runs.
  for (const auto& [name, t] : out) {
    const TensorInfo* o = nullptr;
    for (const TensorInfo& info : outputs)
      if (info.name == name) o = &info;
    if (o == nullptr) {
      std::vector<std::string> names;
      for (const TensorInfo& info : outputs) names.push_back(info.name);
      return not_found(str_cat("'", name, "' is not an output of ", model->path, " (outputs: ", str_join(names, ", "), ")"));
    }
    if (t.dtype() != o->dtype || t.shape() != o->shape)
      return invalid_argument(str_cat("output '", name, "' is ", dtype_name(o->dtype), " ", shape_string(o->shape),
                                      "; the memory given is ", dtype_name(t.dtype()), " ", shape_string(t.shape())));
    if (t.raw() == nullptr && t.nbytes() > 0)
      return invalid_argument(str_cat("output '", name, "': the memory given has no bytes"));
  }
  if (remote != 0) return execute_remote(given, queue_ms, out);
  // Every input given, by name, of its dtype and shape; nothing else.
  for (const auto& [name, t] : given) {
    bool known = false;
    for (const TensorInfo& in : inputs) known = known || in.name == name;
    if (!known) {
      std::vector<std::string> names;
      for (const TensorInfo& in : inputs) names.push_back(in.name);
      return not_found(str_cat("'", name, "' is not an input of ", model->path, " (inputs: ", str_join(names, ", "), ")"));
    }
  }
  const int64_t t0 = now_ns();
  uint64_t copied_in = 0, copied_out = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorInfo& in = inputs[i];
    const Tensor* t = given.find(in.name);
    if (t == nullptr) return invalid_argument(str_cat("input '", in.name, "' of ", model->path, " is not given"));
    if (t->dtype() != in.dtype)
      return invalid_argument(str_cat("input '", in.name, "' is ", dtype_name(in.dtype), ", got ", dtype_name(t->dtype())));
    if (t->shape() != in.shape)
      return invalid_argument(str_cat("input '", in.name, "' has shape ", shape_string(in.shape), ", got ",
                                      shape_string(t->shape())));
    // Read where it lies when the device can (no copy); else copied in.
    const void* at = t->raw();
    if (at != bound_inputs[i]) {
      bound_inputs[i] = loaded->bind_input(i, at).ok() ? at : nullptr;
      if (bound_inputs[i] == nullptr) (void)loaded->bind_input(i, nullptr);
    }
    if (bound_inputs[i] == nullptr) {
      TESSERA_RETURN_IF_ERROR(loaded->set_input(in.name, *t));
      copied_in += t->nbytes();
    }
  }
  // Where each output goes: the memory given for this run, else the
  // memory bound, else the session's own. The Plan writes it there itself
  // where the device can (rebound only when it changes); else it is copied.
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor* given_out = out.find(outputs[i].name);
    void* dst = given_out != nullptr ? given_out->raw() : bound[i].defined() ? bound[i].raw() : nullptr;
    if (dst != bound_outputs[i]) {
      bound_outputs[i] = loaded->bind_output(i, dst).ok() ? dst : nullptr;
      if (bound_outputs[i] == nullptr) (void)loaded->bind_output(i, nullptr);
    }
  }
  const int64_t t1 = now_ns();
  std::vector<std::pair<int64_t, int64_t>> spans;
  const bool tracing = !trace_path.empty() && loaded->program().plan;
  if (tracing) {
    spans.resize(loaded->program().plan->placements.size());
    TESSERA_RETURN_IF_ERROR(loaded->set_trace(&spans));
  }
  TESSERA_RETURN_IF_ERROR(loaded->run().wait());
  if (tracing) {
    (void)loaded->set_trace(nullptr);
    const std::string path = std::move(trace_path);
    trace_path.clear();
    TESSERA_RETURN_IF_ERROR(write_chrome_trace(path, loaded->program(), spans));
  }
  const int64_t t2 = now_ns();
  loaded->ran(t1, t2);  // the device's choosers take these times (devices/device.h)
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor* into = output_into(i, out);
    const void* src = loaded->output_data(i);
    if (src != into->raw() && into->nbytes() > 0) {
      std::memcpy(into->raw(), src, into->nbytes());
      copied_out += into->nbytes();
    }
  }
  const int64_t t3 = now_ns();
  record(t0, t1, t2, t3, queue_ms, copied_in, copied_out);
  loaded->wait_ms(last.wait_ms);  // into the vector it had: no allocation
  last.device_ms = loaded->device_ms();
  last.alone = loaded->ran_alone();
  last.exchanged = loaded->ran_exchanged();
  last.taken = loaded->rtasks_taken();
  counters->runs.fetch_add(1, std::memory_order_relaxed);
  counters->busy_ns.fetch_add(t2 - t1, std::memory_order_relaxed);
  counters->wall_ns.fetch_add(t3 - t0 + static_cast<int64_t>(queue_ms * 1e6), std::memory_order_relaxed);
  return Status();
}

}  // namespace detail

// ------------------------------------------------------------------ Event ---

bool Event::poll() const {
  if (!s_) return true;
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->done;
}

Status Event::wait() const {
  if (!s_) return failed_precondition("Event: empty (use Session::submit)");
  std::unique_lock<std::mutex> lock(s_->mu);
  s_->cv.wait(lock, [&] { return s_->done; });
  return s_->status;
}

Result<NamedTensors> Event::outputs() const {
  TESSERA_RETURN_IF_ERROR(wait());
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->outputs;
}

void Event::then(std::function<void(const Status&)> f) const {
  if (!s_) {
    f(failed_precondition("Event: empty (use Session::submit)"));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (!s_->done) {
      s_->callbacks.push_back(std::move(f));
      return;
    }
  }
  f(s_->status);
}

// ---------------------------------------------------------------- Session ---

namespace {
const std::vector<TensorInfo> kNone;
Status empty_session() { return failed_precondition("Session: empty (use Model::session)"); }
}  // namespace

const std::vector<TensorInfo>& Session::inputs() const { return s_ ? s_->inputs : kNone; }
const std::vector<TensorInfo>& Session::outputs() const { return s_ ? s_->outputs : kNone; }
std::string Session::device() const { return s_ ? s_->device : ""; }
int Session::veus() const { return s_ ? s_->veus : 0; }
std::vector<int> Session::cores() const { return s_ ? s_->slots : std::vector<int>{}; }
Executor Session::executor() const { return s_ ? s_->options.executor : Executor::kPlan; }

Result<NamedTensors> Session::run(const NamedTensors& inputs) {
  if (!s_) return empty_session();
  const int64_t made = now_ns();
  const uint64_t ticket = s_->turns->take();
  s_->turns->await(ticket);
  Result<NamedTensors> out = s_->execute(inputs, static_cast<double>(now_ns() - made) / 1e6);
  s_->turns->end();
  return out;
}

Status Session::run(const NamedTensors& inputs, NamedTensors& outputs) {
  if (!s_) return empty_session();
  const int64_t made = now_ns();
  const uint64_t ticket = s_->turns->take();
  s_->turns->await(ticket);
  Status st = s_->execute(inputs, static_cast<double>(now_ns() - made) / 1e6, outputs);
  s_->turns->end();
  return st;
}

Event Session::submit(const NamedTensors& inputs) {
  auto ev = std::make_shared<EventState>();
  if (!s_) {
    ev->finish(empty_session(), {});
    return Event(ev);
  }
  Turns& t = *s_->turns;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    t.queue.push_back({t.next_ticket++, inputs, ev, now_ns()});
    if (!s_->worker.joinable()) s_->worker = std::thread(&SessionState::worker_main, s_->turns, std::weak_ptr(s_));
  }
  t.cv.notify_all();
  return Event(ev);
}

Status Session::bind_output(const std::string& name, Tensor dst) {
  if (!s_) return empty_session();
  for (size_t i = 0; i < s_->outputs.size(); ++i) {
    const TensorInfo& o = s_->outputs[i];
    if (o.name != name) continue;
    if (dst.defined() && (dst.dtype() != o.dtype || dst.shape() != o.shape))
      return invalid_argument(str_cat("output '", name, "' is ", dtype_name(o.dtype), " ", shape_string(o.shape),
                                      "; the memory bound is ", dtype_name(dst.dtype()), " ", shape_string(dst.shape())));
    if (dst.defined() && dst.raw() == nullptr && dst.nbytes() > 0)
      return invalid_argument(str_cat("output '", name, "': the memory bound has no bytes"));
    // Between requests, so that no run sees half a binding.
    const uint64_t ticket = s_->turns->take();
    s_->turns->await(ticket);
    s_->bound[i] = dst;  // bound on the device by the next run
    s_->turns->end();
    return Status();
  }
  std::vector<std::string> names;
  for (const TensorInfo& o : s_->outputs) names.push_back(o.name);
  return not_found(str_cat("'", name, "' is not an output (outputs: ", str_join(names, ", "), ")"));
}

RunBreakdown Session::last_breakdown() const {
  if (!s_) return {};
  const uint64_t ticket = s_->turns->take();
  s_->turns->await(ticket);
  RunBreakdown b = s_->last;
  s_->turns->end();
  return b;
}

Status Session::trace_next_run(const std::string& path) {
  if (!s_) return empty_session();
  if (!s_->loaded) return detail::not_in_cloud("a trace");
  if (!s_->loaded->program().plan || s_->options.executor != Executor::kPlan || s_->device != "cpu")
    return failed_precondition("a trace needs the plan executor on the cpu device");
  const uint64_t ticket = s_->turns->take();
  s_->turns->await(ticket);
  s_->trace_path = path;
  s_->turns->end();
  return Status();
}

}  // namespace tessera
