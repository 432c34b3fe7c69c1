#include "core/system_memory.h"

#include <gtest/gtest.h>

namespace pagellm {
namespace {

TEST(SystemMemory, CgroupValues) {
  EXPECT_EQ(parse_cgroup_memory_value("1073741824\n"), 1073741824);
  EXPECT_EQ(parse_cgroup_memory_value("0"), 0);
  EXPECT_EQ(parse_cgroup_memory_value("max\n"), std::nullopt);                  // v2: no limit
  EXPECT_EQ(parse_cgroup_memory_value("9223372036854771712\n"), std::nullopt);  // v1: no limit
  EXPECT_EQ(parse_cgroup_memory_value("4611686018427387904"), std::nullopt);    // 2^62
  EXPECT_EQ(parse_cgroup_memory_value("4611686018427387903"), 4611686018427387903);
  EXPECT_EQ(parse_cgroup_memory_value(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_value("-1"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_value("12 kB"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_value("99999999999999999999999"), std::nullopt);
}

TEST(SystemMemory, ProcSelfCgroupV2) {
  const CgroupPaths p = parse_proc_self_cgroup("0::/system.slice/pagellm.service\n");
  EXPECT_EQ(p.v2, (std::vector<std::string>{"system.slice/pagellm.service", "system.slice", ""}));
  EXPECT_TRUE(p.v1.empty());
  // A container with its own cgroup namespace sees its group as the root.
  EXPECT_EQ(parse_proc_self_cgroup("0::/\n").v2, (std::vector<std::string>{""}));
}

TEST(SystemMemory, ProcSelfCgroupV1AndHybrid) {
  const CgroupPaths p = parse_proc_self_cgroup(
      "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/2a7f\n3:cpu,cpuacct:/\n0::/user.slice\n");
  EXPECT_EQ(p.v1, (std::vector<std::string>{"process_api/2a7f", "process_api", ""}));
  EXPECT_EQ(p.v2, (std::vector<std::string>{"user.slice", ""}));
  // memory inside a controller list; a path with ':' in it; lines without a path are skipped.
  const CgroupPaths q = parse_proc_self_cgroup("5:cpuset,memory:/a:b/c/\n6:blkio\n7:devices:relative\n");
  EXPECT_EQ(q.v1, (std::vector<std::string>{"a:b/c", "a:b", ""}));
  EXPECT_TRUE(q.v2.empty());
  EXPECT_TRUE(parse_proc_self_cgroup("").v1.empty());
  EXPECT_TRUE(parse_proc_self_cgroup("garbage").v2.empty());
}

TEST(SystemMemory, MeminfoAvailable) {
  EXPECT_EQ(parse_meminfo_available("MemTotal:       24567420 kB\nMemFree:  100 kB\nMemAvailable:   24071160 kB\n"),
            int64_t{24071160} * 1024);
  EXPECT_EQ(parse_meminfo_available("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(parse_meminfo_available("MemAvailable: lots kB\n"), std::nullopt);
  EXPECT_EQ(parse_meminfo_available("MemAvailable: 5\n"), std::nullopt);
  EXPECT_EQ(parse_meminfo_available("MemAvailable: 99999999999999999999 kB\n"), std::nullopt);
}

TEST(SystemMemory, MemoryStat) {
  const char* stat = "cache 100\nactive_file 5\ninactive_file 8192\ntotal_inactive_file 688246784\n";
  EXPECT_EQ(parse_memory_stat(stat, "inactive_file"), 8192);
  EXPECT_EQ(parse_memory_stat(stat, "total_inactive_file"), 688246784);
  EXPECT_EQ(parse_memory_stat(stat, "file"), std::nullopt);  // a key, not a suffix
  EXPECT_EQ(parse_memory_stat("inactive_file x\n", "inactive_file"), std::nullopt);
  EXPECT_EQ(parse_memory_stat("", "inactive_file"), std::nullopt);
}

// On the machine running the test: a limit is found (at least the RAM), and what is available
// now is within it.
TEST(SystemMemory, ThisMachine) {
  const MemoryLimit m = memory_limit();
  ASSERT_GT(m.bytes, 0);
  EXPECT_FALSE(m.source.empty());
  const MemoryLimit avail = available_memory();
  ASSERT_FALSE(avail.source.empty());
  EXPECT_GT(avail.bytes, 0);
  EXPECT_LE(avail.bytes, m.bytes);
}

}  // namespace
}  // namespace pagellm
