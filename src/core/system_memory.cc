#include "core/system_memory.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace pagellm {
namespace {

// Limits from 2^62 up are "none" (v1 writes 2^63 - 1 rounded down to a page).
constexpr int64_t kUnlimited = int64_t{1} << 62;

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::optional<int64_t> parse_int(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// "/a/b" -> {"a/b", "a", ""}.
std::vector<std::string> leaf_to_root(std::string_view path) {
  std::string p(path);
  while (!p.empty() && p.front() == '/') p.erase(p.begin());
  while (!p.empty() && p.back() == '/') p.pop_back();
  std::vector<std::string> dirs;
  while (!p.empty()) {
    dirs.push_back(p);
    const size_t slash = p.rfind('/');
    p = slash == std::string::npos ? std::string() : p.substr(0, slash);
  }
  dirs.emplace_back();
  return dirs;
}

struct Group {
  std::string mount, limit_file, usage_file;
  std::string file_keys[2];  // memory.stat's page cache: active and inactive file pages
};

}  // namespace

std::optional<int64_t> parse_cgroup_memory_value(std::string_view text) {
  const std::optional<int64_t> v = parse_int(trim(text));
  if (!v || *v >= kUnlimited) return std::nullopt;
  return v;
}

CgroupPaths parse_proc_self_cgroup(std::string_view text) {
  CgroupPaths out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    // hierarchy-ID:controller-list:cgroup-path (the path may itself hold ':')
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view path = line.substr(c2 + 1);
    if (path.empty() || path.front() != '/') continue;
    if (id == "0" && controllers.empty()) {
      out.v2 = leaf_to_root(path);
      continue;
    }
    std::string_view list = controllers;  // comma-separated
    while (!list.empty()) {
      const size_t comma = list.find(',');
      if (list.substr(0, comma) == "memory") out.v1 = leaf_to_root(path);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
  }
  return out;
}

std::optional<int64_t> parse_memory_stat(std::string_view text, std::string_view key) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    const std::string_view line = text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    at = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ') {
      return parse_cgroup_memory_value(line.substr(key.size() + 1));
    }
  }
  return std::nullopt;
}

std::optional<int64_t> parse_meminfo_available(std::string_view text) {
  constexpr std::string_view kKey = "MemAvailable:";
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    const std::string_view line = text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    at = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    std::string_view rest = trim(line.substr(kKey.size()));
    if (rest.size() < 3 || rest.substr(rest.size() - 3) != " kB") return std::nullopt;
    const std::optional<int64_t> kib = parse_int(trim(rest.substr(0, rest.size() - 3)));
    if (!kib || *kib > (kUnlimited >> 10)) return std::nullopt;
    return *kib * 1024;
  }
  return std::nullopt;
}

namespace {

// Each readable cgroup limit along this process's hierarchy, with usage where known.
struct CgroupLimit {
  std::string dir;
  int64_t limit = 0;
  std::optional<int64_t> usage;  // what the group holds now
  int64_t file = 0;              // of which page cache (reclaimable)
};

std::vector<CgroupLimit> cgroup_limits() {
  std::vector<CgroupLimit> out;
  const std::optional<std::string> self = read_text("/proc/self/cgroup");
  if (!self) return out;
  const CgroupPaths paths = parse_proc_self_cgroup(*self);
  const Group v2[] = {{"/sys/fs/cgroup", "memory.max", "memory.current", {"active_file", "inactive_file"}},
                      {"/sys/fs/cgroup/unified", "memory.max", "memory.current", {"active_file", "inactive_file"}}};
  const Group v1[] = {{"/sys/fs/cgroup/memory",
                       "memory.limit_in_bytes",
                       "memory.usage_in_bytes",
                       {"total_active_file", "total_inactive_file"}}};
  auto scan = [&](const std::vector<std::string>& dirs, const Group& g) {
    for (const std::string& dir : dirs) {
      const std::string base = g.mount + (dir.empty() ? "" : "/" + dir) + "/";
      const std::optional<std::string> text = read_text(base + g.limit_file);
      if (!text) continue;
      const std::optional<int64_t> limit = parse_cgroup_memory_value(*text);
      if (!limit) continue;
      CgroupLimit l{"/" + dir, *limit, std::nullopt, 0};
      if (const std::optional<std::string> u = read_text(base + g.usage_file)) l.usage = parse_cgroup_memory_value(*u);
      if (const std::optional<std::string> stat = read_text(base + "memory.stat")) {
        for (const std::string& key : g.file_keys) l.file += parse_memory_stat(*stat, key).value_or(0);
      }
      out.push_back(l);
    }
  };
  for (const Group& g : v2) scan(paths.v2, g);
  for (const Group& g : v1) scan(paths.v1, g);
  return out;
}

}  // namespace

MemoryLimit memory_limit() {
  MemoryLimit m;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) m = {static_cast<int64_t>(pages) * page, "this machine's memory"};
  for (const CgroupLimit& c : cgroup_limits()) {
    if (m.bytes == 0 || c.limit < m.bytes) m = {c.limit, "the memory limit of cgroup " + c.dir};
  }
  return m;
}

MemoryLimit available_memory() {
  MemoryLimit m;
  if (const std::optional<std::string> meminfo = read_text("/proc/meminfo")) {
    if (const std::optional<int64_t> avail = parse_meminfo_available(*meminfo)) {
      m = {*avail, "the memory available now (MemAvailable)"};
    }
  }
  for (const CgroupLimit& c : cgroup_limits()) {
    if (!c.usage) continue;
    const int64_t headroom = std::max<int64_t>(0, c.limit - *c.usage + std::min(c.file, *c.usage));
    if (m.source.empty() || headroom < m.bytes) m = {headroom, "the memory left under the limit of cgroup " + c.dir};
  }
  return m;
}

std::optional<MemoryLimit> memory_bound_exceeded(int64_t bytes) {
  for (const MemoryLimit& m : {memory_limit(), available_memory()}) {
    if (!m.source.empty() && bytes > m.bytes) return m;
  }
  return std::nullopt;
}

std::string format_mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return text;
}

}  // namespace pagellm
