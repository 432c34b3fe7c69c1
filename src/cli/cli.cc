#include "cli/cli.h"

#include <cstdio>

namespace pagellm::cli {
int main(int argc, char** argv) {
  std::fprintf(stderr, "pagellm: not implemented yet\n");
  return 1;
}
}  // namespace pagellm::cli
