#include "kernels/prepared.h"

namespace tessera {

namespace {
thread_local PreparedScope* t_scope = nullptr;
}  // namespace

PreparedScope::PreparedScope() {
  if (t_scope != nullptr) owner_ = false;
  else t_scope = this;
}

PreparedScope::~PreparedScope() {
  if (owner_) t_scope = nullptr;
}

PreparedScope* PreparedScope::current() { return t_scope; }

std::shared_ptr<const void> PreparedScope::get(const void* source, const std::string& key,
                                               const std::function<std::shared_ptr<const void>()>& make) {
  auto key_of = std::make_pair(source, key);
  if (auto it = forms_.find(key_of); it != forms_.end()) {
    ++reused_;
    return it->second;
  }
  std::shared_ptr<const void> form = make();
  forms_.emplace(std::move(key_of), form);
  ++made_;
  return form;
}

}  // namespace tessera
