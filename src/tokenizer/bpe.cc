#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace pagellm {

BpeTokenizer::BpeTokenizer(const Vocab& vocab, const std::vector<std::string>& merges, bool ignore_merges)
    : vocab_(vocab), ignore_merges_(ignore_merges) {
  ranks_.reserve(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos) {
      throw Error("tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + m + "' has no space separator");
    }
    // "a b" cannot say which space separates when a token holds one (tokenizer.json's
    // [["a b", "c"]] form can, and is joined with a space in the GGUF key): the first space
    // whose split names two tokens that join to a third is the separator. The first space is
    // llama.cpp's split, so wherever that split is a real merge the result is the same.
    for (; sp != std::string::npos; sp = m.find(' ', sp + 1)) {
      const std::string_view left(m.data(), sp);
      const std::string_view right(m.data() + sp + 1, m.size() - sp - 1);
      const int32_t l = vocab_.find(left);
      const int32_t r = vocab_.find(right);
      if (l < 0 || r < 0) continue;
      joined.assign(left);
      joined.append(right);
      const int32_t result = vocab_.find(joined);
      if (result < 0) continue;
      ranks_.emplace(key(l, r), Merge{static_cast<int32_t>(i), result});  // first (lowest) rank wins
      break;
    }
  }
}

namespace {

struct Symbol {
  int prev;
  int next;
  size_t begin;  // byte offset into the word
  size_t n;      // bytes; 0 once merged into its left neighbour
  int32_t id;    // token id of the symbol's text, -1 when it is not a token
};

struct Candidate {
  int left;
  int right;
  int32_t rank;
  int32_t result;  // id of the merged token
  size_t size;     // left.n + right.n when pushed (stale when different on pop)
};

struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);  // min rank, then min left
  }
};

}  // namespace

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>* out,
                               const std::array<int32_t, 256>* byte_tokens) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = vocab_.find(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const size_t n = std::min(unicode::utf8_len(word[off]), word.size() - off);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, off + n == word.size() ? -1 : index + 1, off, n, vocab_.find(word.substr(off, n))});
    off += n;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    auto it = ranks_.find(key(symbols[left].id, symbols[right].id));
    if (it == ranks_.end()) return;
    queue.push({left, right, it->second.rank, it->second.result, symbols[left].n + symbols[right].n});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != top.size) continue;
    left.id = top.result;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }

  for (int i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      out->push_back(s.id);
      continue;
    }
    for (size_t k = 0; k < s.n; ++k) {
      const int32_t b = byte_tokens ? (*byte_tokens)[static_cast<uint8_t>(word[s.begin + k])]
                                    : vocab_.find(word.substr(s.begin + k, 1));
      if (b >= 0) out->push_back(b);
    }
  }
}

}  // namespace pagellm
