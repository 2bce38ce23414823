// What an rKernel prepares from a node's constant input once (Winograd's
// transformed weights, packed panels), shared by every ROp made from the
// same input in the same form while a PreparedScope is open.
//
// A compile makes each heavy op many times: one ROp per tiling and per
// rKernel that fits (compiler/variants.h), again for each vEU count that
// plan choice tries. The tiling does not change what is prepared, so a
// compile opens one scope and each form is made once; the ROps hold it
// by shared_ptr and it lives as long as the last of them.
//
//   PreparedScope scope;  // the compiler, around one compile's makes
//   std::shared_ptr<const std::vector<float>> u =
//       prepared<float>(w, key, [&] { return winograd_weights(c, w, g, 4); });
//
// `source` is the constant input's data and `key` says the form (the
// transform and every shape it depends on): within a scope, the same
// (source, key) is the same data, so a scope must not outlive the inputs
// it saw (the compiler's graph does not change while it makes ops).
// Outside a scope every call prepares its own.
//
// Thread-safety: a scope belongs to the thread that opened it and serves
// that thread's makes; prepared data is immutable once made and may be
// read from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

class PreparedScope {
 public:
  // Opens this thread's scope; where one is open already, that one
  // stays current (a nested compile shares the outer one).
  PreparedScope();
  ~PreparedScope();
  PreparedScope(const PreparedScope&) = delete;
  PreparedScope& operator=(const PreparedScope&) = delete;

  // This thread's open scope, or nullptr.
  static PreparedScope* current();

  // The data for (source, key), made by `make` on first use.
  std::shared_ptr<const void> get(const void* source, const std::string& key,
                                  const std::function<std::shared_ptr<const void>()>& make);
  // How many forms were made and how many makes found one (for tests).
  size_t made() const { return made_; }
  size_t reused() const { return reused_; }

 private:
  bool owner_ = true;
  std::map<std::pair<const void*, std::string>, std::shared_ptr<const void>> forms_;
  size_t made_ = 0, reused_ = 0;
};

template <typename T, typename Make>
std::shared_ptr<const std::vector<T>> prepared(const void* source, const std::string& key, Make&& make) {
  PreparedScope* scope = PreparedScope::current();
  if (scope == nullptr) return std::make_shared<const std::vector<T>>(make());
  return std::static_pointer_cast<const std::vector<T>>(
      scope->get(source, key, [&] { return std::shared_ptr<const void>(std::make_shared<const std::vector<T>>(make())); }));
}

}  // namespace tessera
