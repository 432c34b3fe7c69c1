// What this binary is: version, source commit, compiler and build type, for `pagellm --version`,
// the server's /version, /v1/models and /metrics (pagellm:build_info).
#pragma once

#include <string>

namespace pagellm {

struct BuildInfo {
  const char* version;     // the CMake project version, e.g. "0.1.0"
  const char* commit;      // git commit (12 hex digits) at configure time; "unknown" outside git
  const char* compiler;    // e.g. "GNU 12.2.0"
  const char* build_type;  // CMAKE_BUILD_TYPE, e.g. "Release"
};

const BuildInfo& build_info();

// "pagellm 0.1.0\ncommit ...\ncompiler ...\nbuild type ...\n": what `pagellm --version` prints.
std::string build_info_text();

}  // namespace pagellm
