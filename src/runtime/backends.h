// The backends this build has, and finding a device by name.
//
//   for (Backend* b : backends()) for (auto& d : b->discover()) ...
//   Result<std::shared_ptr<Device>> cpu = find_device("cpu");
//
// Thread-safety: both may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "devices/device.h"

namespace tessera {

// cpu, then null.
std::vector<Backend*> backends();
// The device named `name` ("cpu", "null"); not found names the devices
// there are.
Result<std::shared_ptr<Device>> find_device(const std::string& name);

}  // namespace tessera
