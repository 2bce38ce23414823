#include "runtime/backends.h"

#include "base/strings.h"
#include "devices/cpu/cpu_device.h"
#include "devices/null/null_device.h"

namespace tessera {

std::vector<Backend*> backends() { return {cpu_backend(), null_backend()}; }

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
