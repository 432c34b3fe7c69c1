// `pagellm --version`: the project version of CMakeLists.txt, then the build info; and how the
// command line's usage errors are reported.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "core/build_info.h"
#include "test_util.h"

namespace pagellm {
namespace {

using test::run_command;

// The x.y.z of `project(pagellm VERSION x.y.z ...)`.
std::string cmake_project_version() {
  std::ifstream in(test::source_dir() + "/CMakeLists.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  std::smatch m;
  const std::string text = ss.str();
  EXPECT_TRUE(std::regex_search(text, m, std::regex(R"(project\(pagellm VERSION ([0-9.]+))")));
  return m[1];
}

TEST(Version, PrintsTheProjectVersionAndBuildInfo) {
  const auto [out, status] = run_command(std::string(PAGELLM_BINARY) + " --version");
  EXPECT_EQ(status, 0);
  const std::string version = cmake_project_version();
  ASSERT_FALSE(version.empty());
  EXPECT_EQ(build_info().version, version);
  EXPECT_EQ(out.substr(0, out.find('\n')), "pagellm " + version) << out;
  EXPECT_EQ(out, build_info_text());
  EXPECT_TRUE(std::regex_search(out, std::regex("\ncommit ([0-9a-f]{12}|unknown)\n"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\ncompiler (GNU|Clang) [0-9.]+\n"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\nbuild type [A-Za-z]+\n"))) << out;
}

TEST(Version, NeedsNoSubcommand) {
  // --version is answered before the "a subcommand is required" check, and on stdout.
  const auto [out, status] = run_command(std::string(PAGELLM_BINARY) + " --version 2>/dev/null");
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out.rfind("pagellm ", 0), 0u) << out;
}

// A usage error reads like every other error ("error: " first, on stderr) and exits with 2, the
// usage-error status, whatever CLI11's own code for it is; help still exits 0.
TEST(Cli, UsageErrorsSayErrorAndExitWithTwo) {
  const std::string gen =
      std::string(PAGELLM_BINARY) + " generate -m " + test::source_dir() + "/models/stories260K-f32.gguf -p hi ";
  for (const std::string& args :
       {std::string("--bogus"), std::string("-n"), std::string("-n abc"), std::string("--threads 1 --threads")}) {
    SCOPED_TRACE(args);
    const auto [err, status] = run_command(gen + args + " 2>&1 >/dev/null");
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 2) << err;
    EXPECT_EQ(err.rfind("error: ", 0), 0u) << err;
    EXPECT_NE(err.find("\nRun with --help for more information.\n"), std::string::npos) << err;
  }
  const auto [none, none_status] = run_command(std::string(PAGELLM_BINARY) + " 2>&1 >/dev/null");
  EXPECT_EQ(WEXITSTATUS(none_status), 2) << none;
  EXPECT_EQ(none.rfind("error: ", 0), 0u) << none;
  const auto [help, help_status] = run_command(gen + "--help 2>/dev/null");
  EXPECT_EQ(help_status, 0);
  EXPECT_NE(help.find("--kv-cache-memory"), std::string::npos) << help;
}

}  // namespace
}  // namespace pagellm
