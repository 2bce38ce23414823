#include "devices/device.h"

#include "base/strings.h"
#include "ir/tensor.h"

namespace tessera {

DeviceEvent DeviceEvent::pending() {
  DeviceEvent e;
  e.s_ = std::make_shared<State>();
  return e;
}

void DeviceEvent::complete(Status st) const {
  if (!s_) return;
  std::vector<std::function<void(const Status&)>> cbs;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->done = true;
    s_->status = std::move(st);
    cbs.swap(s_->callbacks);
  }
  s_->cv.notify_all();
  for (auto& f : cbs) f(s_->status);
}

bool DeviceEvent::poll() const {
  if (!s_) return true;
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->done;
}

Status DeviceEvent::wait() const {
  if (!s_) return ready_;
  std::unique_lock<std::mutex> lock(s_->mu);
  s_->cv.wait(lock, [&] { return s_->done; });
  return s_->status;
}

void DeviceEvent::then(std::function<void(const Status&)> f) const {
  if (s_) {
    std::unique_lock<std::mutex> lock(s_->mu);
    if (!s_->done) {
      s_->callbacks.push_back(std::move(f));
      return;
    }
  }
  f(wait());
}

Status LoadedProgram::bind_input(size_t i, const void*) {
  return unimplemented(str_cat("input ", i, ": this device reads inputs from its own memory only"));
}

Status LoadedProgram::bind_output(size_t i, void*) {
  return unimplemented(str_cat("output ", i, ": this device writes outputs to its own memory only"));
}

Status LoadedProgram::set_trace(std::vector<std::pair<int64_t, int64_t>>*) {
  return unimplemented("this device does not trace its runs");
}

VeuCosts Device::costs(const HostMap*, const std::vector<int>& slots) const {
  return VeuCosts::uniform(std::max<int>(1, static_cast<int>(slots.size())));
}

Result<Buffer> Device::allocate(size_t bytes) {
  Buffer b;
  b.data = aligned_alloc64(bytes);
  b.bytes = bytes;
  b.owner = std::shared_ptr<void>(b.data, aligned_free64);
  return b;
}

}  // namespace tessera
