#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <string>

#include "tokenizer/unicode.h"

namespace pagellm {

SpmTokenizer::SpmTokenizer(const Vocab& vocab, int32_t unk_id) : vocab_(vocab) {
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = vocab_.find(hex);
    if (id < 0) id = vocab_.find(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id >= 0 ? id : unk_id;
  }
}

namespace {

// A run of bytes of the text; merged symbols have n == 0 and are unlinked.
struct Symbol {
  int prev;      // index of the previous live symbol, -1 at the start
  int next;      // index of the next live symbol, -1 at the end
  size_t begin;  // byte offset into the text
  size_t n;      // bytes
};

struct Bigram {
  int left;
  int right;
  float score;
  size_t size;  // left.n + right.n when pushed; a mismatch when popped means it is stale
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);  // max score, then min left
  }
};

}  // namespace

void SpmTokenizer::encode(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(unicode::utf8_len(text[off]), text.size() - off);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, off + n == text.size() ? -1 : index + 1, off, n});
    off += n;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].n + symbols[right].n;
    const int32_t id = vocab_.find(text.substr(symbols[left].begin, size));
    if (id < 0) return;
    queue.push({left, right, vocab_.score(id), size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != top.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }

  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const int32_t id = vocab_.find(text.substr(s.begin, s.n));
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (size_t k = 0; k < s.n; ++k) {
      const int32_t b = byte_tokens_[static_cast<uint8_t>(text[s.begin + k])];
      if (b >= 0) out->push_back(b);
    }
  }
}

}  // namespace pagellm
