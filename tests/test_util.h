// Shared helpers for tests: where the golden data lives, reading files, running a command.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace pagellm::test {

// ../shared/testdata (override with PAGELLM_TESTDATA_DIR in the environment).
inline std::string testdata_dir() {
  if (const char* e = std::getenv("PAGELLM_TESTDATA_DIR")) return e;
  return PAGELLM_TESTDATA_DIR;
}
inline std::string testdata(const std::string& rel) { return testdata_dir() + "/" + rel; }
inline std::string source_dir() { return PAGELLM_SOURCE_DIR; }

// The whole file; empty when it cannot be read (callers assert on what they expect in it).
inline std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The regular files of source_dir()/rel, sorted; none when the folder is absent.
inline std::vector<std::filesystem::path> files_in(const std::string& rel) {
  const std::filesystem::path dir = std::filesystem::path(source_dir()) / rel;
  std::vector<std::filesystem::path> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs `cmd` through the shell: its stdout and its exit status (pclose's; -1 when it did not start).
inline std::pair<std::string, int> run_command(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {"", -1};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return {out, pclose(p)};
}

}  // namespace pagellm::test
