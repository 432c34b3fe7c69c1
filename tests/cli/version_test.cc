// `pagellm --version`: the project version of CMakeLists.txt, then the build info.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace pagellm
