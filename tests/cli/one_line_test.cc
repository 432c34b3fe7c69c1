// one_line(): errors and warnings that quote names from a model file stay one printable line.
#include <gtest/gtest.h>

#include <string>

#include "cli/commands.h"

namespace pagellm::cli {
namespace {

TEST(OneLine, EscapesControlBytesAndKeepsUtf8) {
  EXPECT_EQ(one_line("tensor 'a\nb': bad"), "tensor 'a\\nb': bad");
  EXPECT_EQ(one_line(std::string("\r\t\x01\x1f\x7f", 5)), "\\r\\t\\x01\\x1F\\x7F");
  EXPECT_EQ(one_line(std::string("nul\0end", 7)), "nul\\x00end");
  EXPECT_EQ(one_line("caf\xc3\xa9 \xe2\x96\x81x"), "caf\xc3\xa9 \xe2\x96\x81x");  // é, U+2581
  EXPECT_EQ(one_line(""), "");
}

}  // namespace
}  // namespace pagellm::cli
