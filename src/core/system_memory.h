// How much memory this process may use: the machine's RAM, the memory limit of its cgroup (a
// container's or a systemd unit's), and what is available now. Used to refuse a KV cache that
// cannot be allocated before it is zero-filled (a process over its cgroup limit is killed by the
// OOM killer, not given std::bad_alloc).
//
// Sources: Linux's cgroup v2 interface (Documentation/admin-guide/cgroup-v2.rst: memory.max,
// memory.current; "max" means none) and cgroup v1 (memory.limit_in_bytes, memory.usage_in_bytes;
// an unlimited group reads as a page-rounded 2^63 - 1), /proc/self/cgroup and /proc/meminfo
// (MemAvailable) as proc(5) describes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm {

struct MemoryLimit {
  int64_t bytes = 0;   // >= 0
  std::string source;  // what bytes is, for a message ("this machine's memory", ...); "": unknown
};

// The smallest of the machine's RAM (sysconf) and the memory limits of this process's cgroup and
// its ancestors, v2 or v1. Never throws; files that cannot be read are skipped.
MemoryLimit memory_limit();

// What this process could allocate now without swapping or the OOM killer: MemAvailable, or
// where less, a cgroup's limit minus its usage plus its page cache (active and inactive file
// pages: the kernel reclaims them before it kills, as MemAvailable also counts them). bytes 0
// and source "" when neither can be read.
MemoryLimit available_memory();

// The first of memory_limit() and available_memory() that allocating `bytes` more would exceed;
// nullopt when it fits both (or neither is known).
std::optional<MemoryLimit> memory_bound_exceeded(int64_t bytes);

// "254.0 MiB": bytes / 2^20 with one decimal, for the messages of the checks above.
std::string format_mib(int64_t bytes);

// ---- the parsing, exposed for tests -----------------------------------------------------------

// A memory.max / memory.limit_in_bytes value: bytes, or nullopt for "max", unreadable text, or
// a value >= 2^62 (v1's "unlimited").
std::optional<int64_t> parse_cgroup_memory_value(std::string_view text);

// The cgroup directories holding this process's memory limits, relative to the cgroup mount,
// leaf first, up to the root "": from /proc/self/cgroup's text, the v2 line "0::/a/b" gives
// v2 = {"a/b", "a", ""}; the v1 line "N:...memory...:/a/b" gives v1 the same. A hybrid system
// has both lines; a missing line leaves its list empty.
struct CgroupPaths {
  std::vector<std::string> v2, v1;
};
CgroupPaths parse_proc_self_cgroup(std::string_view text);

// The value of `key` in a cgroup memory.stat file ("key value" lines); nullopt when missing.
std::optional<int64_t> parse_memory_stat(std::string_view text, std::string_view key);

// /proc/meminfo's MemAvailable, bytes; nullopt when the line is missing or malformed.
std::optional<int64_t> parse_meminfo_available(std::string_view text);

}  // namespace pagellm
