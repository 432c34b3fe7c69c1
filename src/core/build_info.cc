#include "core/build_info.h"

// Defined for this file only (CMakeLists.txt), so that a new commit recompiles nothing else.
#ifndef PAGELLM_VERSION
#define PAGELLM_VERSION "unknown"
#endif
#ifndef PAGELLM_GIT_COMMIT
#define PAGELLM_GIT_COMMIT "unknown"
#endif
#ifndef PAGELLM_COMPILER
#define PAGELLM_COMPILER "unknown"
#endif
#ifndef PAGELLM_BUILD_TYPE
#define PAGELLM_BUILD_TYPE "unknown"
#endif

namespace pagellm {

const BuildInfo& build_info() {
  static const BuildInfo kInfo{PAGELLM_VERSION, PAGELLM_GIT_COMMIT, PAGELLM_COMPILER, PAGELLM_BUILD_TYPE};
  return kInfo;
}

std::string build_info_text() {
  const BuildInfo& b = build_info();
  return std::string("pagellm ") + b.version + "\ncommit " + b.commit + "\ncompiler " + b.compiler + "\nbuild type " +
         b.build_type + "\n";
}

}  // namespace pagellm
