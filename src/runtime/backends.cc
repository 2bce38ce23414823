#include "runtime/backends.h"

#include "base/strings.h"
#include "devices/cpu/cpu_device.h"
#include "devices/null/null_device.h"
#if defined(TESSERA_HAVE_CUDA)
#include "devices/cuda/cuda_device.h"
#endif

namespace tessera {

std::vector<Backend*> backends() {
#if defined(TESSERA_HAVE_CUDA)
  return {cpu_backend(), null_backend(), cuda_backend()};
#else
  return {cpu_backend(), null_backend()};
#endif
}

Result<std::shared_ptr<Device>> find_device(const std::string& name) {
  std::vector<std::string> names;
  for (Backend* b : backends())
    for (std::shared_ptr<Device>& d : b->discover()) {
      const std::string n = d->info().name;
      if (n == name) return d;
      names.push_back(n);
    }
  return not_found(str_cat("no device '", name, "' (devices: ", str_join(names, ", "), ")"));
}

}  // namespace tessera
