// Command-line entry point: `pagellm <subcommand> ...`.
#pragma once

namespace pagellm::cli {
int main(int argc, char** argv);
}
