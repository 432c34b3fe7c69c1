// Shared helpers for tests: where the golden data lives.
#pragma once

#include <cstdlib>
#include <string>

namespace pagellm::test {

// ../shared/testdata (override with PAGELLM_TESTDATA_DIR in the environment).
inline std::string testdata_dir() {
  if (const char* e = std::getenv("PAGELLM_TESTDATA_DIR")) return e;
  return PAGELLM_TESTDATA_DIR;
}
inline std::string testdata(const std::string& rel) { return testdata_dir() + "/" + rel; }
inline std::string source_dir() { return PAGELLM_SOURCE_DIR; }

}  // namespace pagellm::test
