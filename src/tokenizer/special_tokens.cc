#include "tokenizer/special_tokens.h"

#include <algorithm>
#include <cctype>
#include <unordered_set>

namespace pagellm {

namespace {
constexpr uint32_t kCandidateAttrs = token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown;
}  // namespace

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) : vocab_(vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.has_attr(id, kCandidateAttrs)) candidates_.push_back(id);
  }
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [&](int32_t a, int32_t b) { return vocab.text(a).size() > vocab.text(b).size(); });

  trie_.emplace_back();
  for (int32_t id : candidates_) {
    int32_t node = 0;
    for (char c : vocab.text(id)) {
      const auto b = static_cast<uint8_t>(c);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(trie_.size());
        auto& kids = trie_[node].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1})), {b, next});
        trie_.emplace_back();  // may reallocate: `kids` is not used after this
      }
      node = next;
    }
    if (trie_[node].token < 0) trie_[node].token = id;
  }
}

int32_t SpecialTokenSplitter::child(int32_t node, uint8_t byte) const {
  const auto& kids = trie_[node].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{-1}));
  return it != kids.end() && it->first == byte ? it->second : -1;
}

std::vector<Fragment> SpecialTokenSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});

  // Which candidate texts occur anywhere (a cut can only happen where a text occurs).
  std::unordered_set<int32_t> present;
  for (size_t i = 0; i < text.size(); ++i) {
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      // Duplicate texts share a node; all of them are equal strings, so the first id suffices.
      if (trie_[node].token >= 0) present.insert(trie_[node].token);
    }
  }
  if (present.empty()) return fragments;

  std::vector<Fragment> next;
  for (int32_t id : candidates_) {
    if (!present.contains(id)) continue;
    const uint32_t attr = vocab_.attr(id);
    if (!parse_special && (attr & (token_attr::kControl | token_attr::kUnknown))) continue;
    const std::string& special = vocab_.text(id);
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.begin;
      const size_t end = f.end;
      while (begin < end) {
        const size_t match = text.substr(0, end).find(special, begin);
        if (match == std::string_view::npos) break;
        size_t left_end = match;
        if (attr & token_attr::kLstrip) {
          while (left_end > begin && std::isspace(static_cast<unsigned char>(text[left_end - 1]))) --left_end;
        }
        if (left_end > begin) next.push_back({-1, begin, left_end});
        next.push_back({id, 0, 0});
        begin = match + special.size();
        if (attr & token_attr::kRstrip) {
          while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
        }
      }
      if (begin < end) next.push_back({-1, begin, end});
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace pagellm
