// Two error channels (see docs/design.md):
//  - pagellm::Error: untrusted input (model files, prompts, parameters) is wrong. The message names
//    the file / field / value. Caught at the boundary (CLI, HTTP) and turned into a clean error.
//  - PAGELLM_CHECK: a broken internal invariant. Prints file:line and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace pagellm {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: internal invariant failed: %s %s\n", file, line, cond, msg.c_str());
  std::abort();
}

}  // namespace pagellm

// Internal invariant; always on (cheap conditions only on hot paths).
#define PAGELLM_CHECK(cond, ...)                                                               \
  do {                                                                                         \
    if (!(cond)) ::pagellm::check_failed(__FILE__, __LINE__, #cond, std::string{__VA_ARGS__}); \
  } while (0)
