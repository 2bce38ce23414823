// NumPy .npy and .npz files: how inputs come in and outputs go out.
//
// Reads .npy (format 1.0-3.0, little-endian, C order) of float32/float16/
// float64/int64/int32/int8/uint8/bool; floats become float32 (float64 is
// narrowed). Reads .npz archives, stored or deflated. Writes .npy 1.0.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/tensor.h"
#include "tessera/status.h"

namespace tessera {

Result<Tensor> npy_read(const std::string& path);
// Parses .npy bytes; `name` is used in messages.
Result<Tensor> npy_parse(const std::string& bytes, const std::string& name);
Status npy_write(const std::string& path, const Tensor& t);
// Every array in an .npz, by name (without the .npy suffix).
Result<std::map<std::string, Tensor>> npz_read(const std::string& path);
// The same in the archive's order.
Result<std::vector<std::pair<std::string, Tensor>>> npz_read_entries(const std::string& path);
// The .npy file's bytes for `t`.
Result<std::string> npy_bytes(const Tensor& t);
// Writes the arrays, in order, as an .npz (stored, as numpy.savez).
Status npz_write(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays);

}  // namespace tessera
