#include "cli/cli.h"

int main(int argc, char** argv) { return pagellm::cli::main(argc, argv); }
