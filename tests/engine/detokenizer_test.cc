#include "engine/detokenizer.h"

#include <gtest/gtest.h>

#include "engine/utf8_stream.h"

namespace pagellm {
namespace {

std::string run(const std::vector<std::string>& pieces, const std::vector<std::string>& stop, std::string* hit,
                std::vector<std::string>* deltas = nullptr) {
  IncrementalDetokenizer d(stop);
  std::string out;
  for (const std::string& p : pieces) {
    auto r = d.push(p);
    if (deltas) deltas->push_back(r.text);
    out += r.text;
    if (r.stop_hit) {
      *hit = *r.stop_hit;
      return out;
    }
  }
  out += d.flush();
  return out;
}

TEST(Detokenizer, StopStringSpanningTokensIsNeverEmitted) {
  std::string hit;
  std::vector<std::string> deltas;
  EXPECT_EQ(run({"Hello", " wo", "rl", "d and more"}, {"world"}, &hit, &deltas), "Hello ");
  EXPECT_EQ(hit, "world");
  EXPECT_EQ(deltas, (std::vector<std::string>{"Hello", " ", "", ""}));  // "wo", "worl" held back
}

TEST(Detokenizer, StopStringEndingInsideAToken) {
  std::string hit;
  EXPECT_EQ(run({"The end. Bye"}, {"."}, &hit), "The end");
  EXPECT_EQ(hit, ".");
  EXPECT_EQ(run({"ab", "cXYZd"}, {"XY", "c"}, &hit), "ab");  // earliest match wins
  EXPECT_EQ(hit, "c");
}

TEST(Detokenizer, HeldBackPrefixIsReleasedWhenItDoesNotComplete) {
  std::string hit;
  std::vector<std::string> deltas;
  EXPECT_EQ(run({"a wor", "m"}, {"world"}, &hit, &deltas), "a worm");
  EXPECT_TRUE(hit.empty());
  EXPECT_EQ(deltas[0], "a ");
  EXPECT_EQ(run({"a wor"}, {"world"}, &hit), "a wor");  // flushed at the end
}

TEST(Detokenizer, NeverSplitsUtf8AndConcatenationIsExact) {
  const std::string euro = "\xE2\x82\xAC";
  std::vector<std::string> deltas;
  std::string hit;
  const std::string out = run({"x", "\xE2", "\x82", "\xAC", "y"}, {}, &hit, &deltas);
  EXPECT_EQ(out, "x" + euro + "y");
  for (const std::string& d : deltas) EXPECT_EQ(utf8_complete_prefix(d), d.size());
  EXPECT_EQ(deltas, (std::vector<std::string>{"x", "", "", euro, "y"}));
  // A stop string made of a multi-byte character split over byte tokens.
  EXPECT_EQ(run({"a", "\xE2", "\x82", "\xAC", "b"}, {euro}, &hit), "a");
  EXPECT_EQ(hit, euro);
}

}  // namespace
}  // namespace pagellm
