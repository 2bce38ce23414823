#include "ir/npy.h"

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "base/strings.h"

namespace tessera {
namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(str_cat("cannot open '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Finds the value text after 'key': in the header dict.
std::string header_field(const std::string& header, const std::string& key) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) return "";
  size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) return "";
  char open = header[start];
  size_t end;
  if (open == '\'') end = header.find('\'', start + 1) + 1;
  else if (open == '(') end = header.find(')', start) + 1;
  else end = header.find_first_of(",}", start);
  if (end == std::string::npos || end == 0) return "";
  return header.substr(start, end - start);
}

uint16_t rd16(const char* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
uint32_t rd32(const char* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

}  // namespace

Result<Tensor> npy_parse(const std::string& bytes, const std::string& name) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    return invalid_argument(str_cat(name, ": not a .npy file"));
  int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = rd16(bytes.data() + 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return data_loss(str_cat(name, ": truncated .npy header"));
    header_len = rd32(bytes.data() + 8);
    offset = 12;
  } else {
    return unimplemented(str_cat(name, ": .npy format version ", major, " is not supported"));
  }
  if (offset + header_len > bytes.size()) return data_loss(str_cat(name, ": truncated .npy header"));
  std::string header = bytes.substr(offset, header_len);
  offset += header_len;
  std::string descr = header_field(header, "descr");
  std::string order = header_field(header, "fortran_order");
  std::string shape_text = header_field(header, "shape");
  if (descr.size() < 4 || shape_text.empty()) return invalid_argument(str_cat(name, ": malformed .npy header"));
  if (order.rfind("True", 0) == 0) return unimplemented(str_cat(name, ": Fortran-order arrays are not supported"));
  descr = descr.substr(1, descr.size() - 2);
  if (descr[0] == '>') return unimplemented(str_cat(name, ": big-endian arrays are not supported"));
  std::string code = descr.substr(1);
  std::vector<int64_t> dims;
  for (const std::string& part : str_split(shape_text.substr(1, shape_text.size() - 2), ',')) {
    std::string t;
    for (char c : part)
      if (c != ' ') t += c;
    if (t.empty()) continue;
    int64_t d;
    if (!parse_int64(t, &d) || d < 0) return invalid_argument(str_cat(name, ": bad shape '", shape_text, "'"));
    dims.push_back(d);
  }
  Shape shape(dims);
  int64_t numel = shape.numel();
  size_t elem;
  DType dt;
  if (code == "f4") { elem = 4; dt = DType::kFloat32; }
  else if (code == "f2") { elem = 2; dt = DType::kFloat32; }
  else if (code == "f8") { elem = 8; dt = DType::kFloat32; }
  else if (code == "i8") { elem = 8; dt = DType::kInt64; }
  else if (code == "i4") { elem = 4; dt = DType::kInt32; }
  else if (code == "i1") { elem = 1; dt = DType::kInt8; }
  else if (code == "u1") { elem = 1; dt = DType::kUInt8; }
  else if (code == "b1") { elem = 1; dt = DType::kBool; }
  else return unimplemented(str_cat(name, ": element type '", descr, "' is not supported"));
  if (numel < 0 || bytes.size() - offset < static_cast<size_t>(numel) * elem)
    return data_loss(str_cat(name, ": holds ", bytes.size() - offset, " data bytes, shape ", shape.to_string(),
                             " needs ", numel * static_cast<int64_t>(elem)));
  Tensor t(dt, shape);
  const char* src = bytes.data() + offset;
  if (code == "f2") {
    for (int64_t i = 0; i < numel; ++i) t.data<float>()[i] = half_to_float(rd16(src + 2 * i));
  } else if (code == "f8") {
    for (int64_t i = 0; i < numel; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      t.data<float>()[i] = static_cast<float>(v);
    }
  } else if (numel > 0) {
    std::memcpy(t.raw(), src, static_cast<size_t>(numel) * elem);
  }
  return t;
}

Result<Tensor> npy_read(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  return npy_parse(bytes, path);
}

Result<std::string> npy_bytes(const Tensor& t) {
  const char* code;
  switch (t.dtype()) {
    case DType::kFloat32: code = "<f4"; break;
    case DType::kInt64: code = "<i8"; break;
    case DType::kInt32: code = "<i4"; break;
    case DType::kInt8: code = "|i1"; break;
    case DType::kUInt8: code = "|u1"; break;
    case DType::kBool: code = "|b1"; break;
    default: return unimplemented(str_cat("cannot write ", dtype_name(t.dtype()), " to .npy"));
  }
  std::string shape = "(";
  for (int64_t d : t.shape()) shape += str_cat(d, ",");
  if (t.rank() > 1) shape.pop_back();
  shape += ")";
  std::string header = str_cat("{'descr': '", code, "', 'fortran_order': False, 'shape': ", shape, ", }");
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.append(reinterpret_cast<const char*>(&len), 2);
  out += header;
  out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

Status npy_write(const std::string& path, const Tensor& t) {
  TESSERA_ASSIGN_OR_RETURN(std::string bytes, npy_bytes(t));
  std::ofstream out(path, std::ios::binary);
  if (!out) return not_found(str_cat("cannot write '", path, "'"));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) return data_loss(str_cat("short write to '", path, "'"));
  return Status();
}

Status npz_write(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays) {
  // A ZIP archive of stored (uncompressed) .npy entries, as numpy.savez
  // writes; entries and the archive stay under 4 GiB (no ZIP64).
  std::string zip, central;
  auto put16 = [](std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); };
  auto put32 = [](std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); };
  for (const auto& [name, t] : arrays) {
    TESSERA_ASSIGN_OR_RETURN(std::string data, npy_bytes(t));
    const std::string entry = name + ".npy";
    if (data.size() >= 0xffffffffu || zip.size() + data.size() + entry.size() + 30 >= 0xffffffffu || entry.size() > 0xffff)
      return unimplemented(str_cat(path, ": arrays over 4 GiB in an .npz ('", name, "')"));
    const uint32_t crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(data.data()),
                                                     static_cast<uInt>(data.size())));
    const uint32_t offset = static_cast<uint32_t>(zip.size());
    put32(zip, 0x04034b50);
    put16(zip, 20), put16(zip, 0), put16(zip, 0), put16(zip, 0), put16(zip, 0x21);  // version, flags, stored, time, date
    put32(zip, crc), put32(zip, static_cast<uint32_t>(data.size())), put32(zip, static_cast<uint32_t>(data.size()));
    put16(zip, static_cast<uint16_t>(entry.size())), put16(zip, 0);
    zip += entry;
    zip += data;
    put32(central, 0x02014b50);
    put16(central, 20), put16(central, 20), put16(central, 0), put16(central, 0), put16(central, 0), put16(central, 0x21);
    put32(central, crc), put32(central, static_cast<uint32_t>(data.size())), put32(central, static_cast<uint32_t>(data.size()));
    put16(central, static_cast<uint16_t>(entry.size())), put16(central, 0), put16(central, 0);
    put16(central, 0), put16(central, 0), put32(central, 0), put32(central, offset);
    central += entry;
  }
  const uint32_t central_at = static_cast<uint32_t>(zip.size());
  zip += central;
  put32(zip, 0x06054b50);
  put16(zip, 0), put16(zip, 0), put16(zip, static_cast<uint16_t>(arrays.size())), put16(zip, static_cast<uint16_t>(arrays.size()));
  put32(zip, static_cast<uint32_t>(central.size())), put32(zip, central_at), put16(zip, 0);
  std::ofstream out(path, std::ios::binary);
  if (!out) return not_found(str_cat("cannot write '", path, "'"));
  out.write(zip.data(), static_cast<std::streamsize>(zip.size()));
  if (!out) return data_loss(str_cat("short write to '", path, "'"));
  return Status();
}

Result<std::map<std::string, Tensor>> npz_read(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(auto entries, npz_read_entries(path));
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : entries) out[name] = std::move(t);
  return out;
}

Result<std::vector<std::pair<std::string, Tensor>>> npz_read_entries(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string zip, read_file(path));
  std::vector<std::pair<std::string, Tensor>> out;
  // Walk local file headers (numpy writes no data descriptors).
  size_t pos = 0;
  while (pos + 30 <= zip.size() && rd32(zip.data() + pos) == 0x04034b50) {
    const char* h = zip.data() + pos;
    uint16_t method = rd16(h + 8), flags = rd16(h + 6);
    uint32_t csize = rd32(h + 18), usize = rd32(h + 22);
    uint16_t name_len = rd16(h + 26), extra_len = rd16(h + 28);
    size_t data_pos = pos + 30 + name_len + extra_len;
    if (data_pos > zip.size()) return data_loss(str_cat(path, ": truncated .npz"));
    std::string name = zip.substr(pos + 30, name_len);
    // ZIP64 sizes live in the extra field.
    if (csize == 0xffffffffu || usize == 0xffffffffu) {
      const char* e = zip.data() + pos + 30 + name_len;
      size_t k = 0;
      while (k + 4 <= extra_len) {
        uint16_t id = rd16(e + k), sz = rd16(e + k + 2);
        if (id == 1 && sz >= 16 && k + 4 + 16 <= extra_len) {
          uint64_t u, c;
          std::memcpy(&u, e + k + 4, 8);
          std::memcpy(&c, e + k + 12, 8);
          usize = static_cast<uint32_t>(u);
          csize = static_cast<uint32_t>(c);
          if (u > 0xffffffffu || c > 0xffffffffu) return unimplemented(str_cat(path, ": arrays over 4 GiB"));
        }
        k += 4 + sz;
      }
    }
    if (flags & 8) return unimplemented(str_cat(path, ": .npz entries with data descriptors are not supported"));
    if (data_pos + csize > zip.size()) return data_loss(str_cat(path, ": truncated .npz entry '", name, "'"));
    std::string data;
    if (method == 0) {
      data = zip.substr(data_pos, csize);
    } else if (method == 8) {
      data.resize(usize);
      z_stream zs{};
      if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return internal_error("zlib init failed");
      zs.next_in = reinterpret_cast<Bytef*>(zip.data() + data_pos);
      zs.avail_in = csize;
      zs.next_out = reinterpret_cast<Bytef*>(data.data());
      zs.avail_out = usize;
      int rc = inflate(&zs, Z_FINISH);
      inflateEnd(&zs);
      if (rc != Z_STREAM_END) return data_loss(str_cat(path, ": corrupt deflate data in '", name, "'"));
    } else {
      return unimplemented(str_cat(path, ": .npz compression method ", method, " is not supported"));
    }
    std::string key = name;
    if (key.size() > 4 && key.substr(key.size() - 4) == ".npy") key.resize(key.size() - 4);
    TESSERA_ASSIGN_OR_RETURN(Tensor t, npy_parse(data, str_cat(path, ":", name)));
    bool replaced = false;  // a name twice: the later entry wins, as in numpy
    for (auto& [k, v] : out)
      if (k == key) v = std::move(t), replaced = true;
    if (!replaced) out.emplace_back(key, std::move(t));
    pos = data_pos + csize;
  }
  if (out.empty()) return invalid_argument(str_cat(path, ": not an .npz archive (no arrays found)"));
  return out;
}

}  // namespace tessera

namespace tessera {

Result<Tensor> Tensor::load_npy(const std::string& path) { return npy_read(path); }
Status Tensor::save_npy(const std::string& path) const { return npy_write(path, *this); }

}  // namespace tessera
