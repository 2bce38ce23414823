// NamedTensors and .npz files (tessera/runtime.h).
#include "ir/npy.h"
#include "tessera/runtime.h"

namespace tessera {

NamedTensors::NamedTensors(std::initializer_list<value_type> items) {
  for (const value_type& it : items) set(it.first, it.second);
}

void NamedTensors::set(const std::string& name, Tensor t) {
  if (Tensor* have = find(name)) {
    *have = std::move(t);
    return;
  }
  items_.emplace_back(name, std::move(t));
}

const Tensor* NamedTensors::find(const std::string& name) const {
  for (const value_type& it : items_)
    if (it.first == name) return &it.second;
  return nullptr;
}

Tensor* NamedTensors::find(const std::string& name) {
  for (value_type& it : items_)
    if (it.first == name) return &it.second;
  return nullptr;
}

Result<NamedTensors> load_npz(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(auto entries, npz_read_entries(path));
  NamedTensors out;
  for (auto& [name, t] : entries) out.set(name, std::move(t));
  return out;
}

Status save_npz(const std::string& path, const NamedTensors& tensors) {
  return npz_write(path, std::vector<std::pair<std::string, Tensor>>(tensors.begin(), tensors.end()));
}

}  // namespace tessera
