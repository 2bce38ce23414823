#include "daemon/faults.h"

#include <sys/stat.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/strings.h"

namespace tessera::daemon {
namespace {

nlohmann::json to_json(const FaultRecord& f) {
  return {{"id", f.id}, {"time", f.time}, {"tenant", f.tenant}, {"device", f.device}, {"kind", f.kind}, {"message", f.message}};
}

}  // namespace

std::string utc_now_iso8601() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

Status FaultLog::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return failed_precondition(str_cat("cannot create the state directory '", dir, "': ", ec.message()));
  path_ = (std::filesystem::path(dir) / "faults.jsonl").string();
  records_.clear();
  std::ifstream f(path_);
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("id") || !j["id"].is_number_unsigned()) {
      log_warning(path_, ":", lineno, ": not a fault record; skipped");
      continue;
    }
    FaultRecord r;
    r.id = j["id"].get<uint64_t>();
    r.time = j.value("time", "");
    r.tenant = j.value("tenant", "");
    r.device = j.value("device", "");
    r.kind = j.value("kind", "");
    r.message = j.value("message", "");
    next_id_ = std::max(next_id_, r.id + 1);
    records_.push_back(std::move(r));
  }
  return Status();
}

const FaultRecord& FaultLog::add(std::string tenant, std::string device, std::string kind, std::string message) {
  FaultRecord r{next_id_++, utc_now_iso8601(), std::move(tenant), std::move(device), std::move(kind), std::move(message)};
  log_warning("fault ", r.id, ": ", r.kind, ": tenant '", r.tenant, "': ", r.message);
  if (!path_.empty()) {
    std::ofstream f(path_, std::ios::app);
    f << to_json(r).dump() << "\n";
    f.flush();
    if (!f) log_warning("cannot append to ", path_, ": ", std::strerror(errno));
  }
  records_.push_back(std::move(r));
  if (records_.size() > 2 * kKept) {
    records_.erase(records_.begin(), records_.end() - static_cast<std::ptrdiff_t>(kKept));
    if (Status st = rewrite(); !st.ok()) log_warning(st.message());
  }
  return records_.back();
}

Status FaultLog::clear(uint64_t id) {
  auto it = std::find_if(records_.begin(), records_.end(), [&](const FaultRecord& r) { return r.id == id; });
  if (it == records_.end()) return not_found(str_cat("no fault ", id));
  records_.erase(it);
  return rewrite();
}

Status FaultLog::rewrite() {
  if (path_.empty()) return Status();
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    for (const FaultRecord& r : records_) f << to_json(r).dump() << "\n";
    f.flush();
    if (!f) return internal_error(str_cat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0)
    return internal_error(str_cat("cannot replace ", path_, ": ", std::strerror(errno)));
  return Status();
}

}  // namespace tessera::daemon
