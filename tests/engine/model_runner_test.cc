#include "engine/model_runner.h"

#include <gtest/gtest.h>

#include <cstring>

#include "engine/utf8_stream.h"
#include "format/gguf.h"
#include "kv/kv_cache_manager.h"
#include "test_util.h"

namespace pagellm {
namespace {

// The worked example in model/forward_batch.h.
TEST(ModelRunner, BuildsTheDocumentedExample) {
  const std::vector<std::vector<int32_t>> table_a{{5}}, table_b{{1, 0, 3}};
  const std::vector<int32_t> a{10, 11, 12}, b{99};
  const ScheduledSeq seqs[] = {{table_a, a, 0, true}, {table_b, b, 9, true}};
  const ForwardBatch fb = build_forward_batch(seqs, 4);
  EXPECT_EQ(fb.token_ids, (std::vector<int32_t>{10, 11, 12, 99}));
  EXPECT_EQ(fb.positions, (std::vector<int64_t>{0, 1, 2, 9}));
  ASSERT_EQ(fb.kv_groups.size(), 1u);
  EXPECT_EQ(fb.kv_groups[0].slot_mapping, (std::vector<int64_t>{20, 21, 22, 13}));
  EXPECT_EQ(fb.query_start_loc, (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(fb.kv_groups[0].max_blocks_per_seq, 3);
  EXPECT_EQ(fb.kv_groups[0].block_tables, (std::vector<int32_t>{5, -1, -1, 1, 0, 3}));
  EXPECT_EQ(fb.logits_indices, (std::vector<int64_t>{2, 3}));
}

TEST(ModelRunner, PrefillChunkWithoutLogits) {
  const std::vector<std::vector<int32_t>> table{{2, 7}};
  const std::vector<int32_t> toks{1, 2, 3};
  const ScheduledSeq s{table, toks, 3, false};
  const ForwardBatch fb = build_forward_batch(std::span<const ScheduledSeq>(&s, 1), 4);
  EXPECT_EQ(fb.kv_groups[0].slot_mapping, (std::vector<int64_t>{11, 28, 29}));
  EXPECT_TRUE(fb.logits_indices.empty());
}

TEST(ModelRunner, SeveralLogitsRowsAreTheLastTokens) {
  const std::vector<std::vector<int32_t>> table_a{{0}}, table_b{{1, 2}};
  const std::vector<int32_t> a{1, 2, 3}, b{4, 5};
  const ScheduledSeq seqs[] = {{table_a, a, 0, 3}, {table_b, b, 4, 0}, {table_b, b, 6, 2}};
  const ForwardBatch fb = build_forward_batch(seqs, 4);
  EXPECT_EQ(fb.logits_indices, (std::vector<int64_t>{0, 1, 2, 5, 6}));
  const ScheduledSeq too_many{table_a, a, 0, 4};
  EXPECT_DEATH(build_forward_batch(std::span<const ScheduledSeq>(&too_many, 1), 4), "more logits rows");
}

// execute: sequence i owns rows [row_offset[i], + num_rows[i]); a k-row request (speculative
// verification shape) gets, in its last row, the bits a one-row request gets for the same token.
TEST(ModelRunner, ExecuteReturnsRowsPerSequence) {
  auto file = GgufFile::open(test::source_dir() + "/models/stories260K-f32.gguf");
  ThreadPool pool(2);
  LlamaModel model(*file, &pool);
  ModelRunner runner(model, KvCacheGeometry{8, 16, GgmlType::F32});
  KvCacheManager kv(8, 16);
  const std::vector<int32_t> prompt{1, 403, 407, 152, 133};
  ASSERT_TRUE(kv.allocate_slots("a", 5));
  ASSERT_TRUE(kv.allocate_slots("b", 5));
  const ScheduledSeq seqs[] = {{kv.block_tables("a"), prompt, 0, 3}, {kv.block_tables("b"), prompt, 0, 1}};
  const ModelRunnerOutput& mo = runner.execute(seqs);
  const int64_t vocab = model.config().vocab_size;
  ASSERT_EQ(mo.vocab_size, vocab);
  EXPECT_EQ(mo.row_offset, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(mo.num_rows, (std::vector<int32_t>{3, 1}));
  ASSERT_EQ(mo.logits.size(), static_cast<size_t>(4 * vocab));
  EXPECT_EQ(std::memcmp(mo.row(0, 2).data(), mo.row(1).data(), vocab * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(mo.row(0, 1).data(), mo.row(1).data(), vocab * sizeof(float)), 0);
}

TEST(Utf8Stream, NeverSplitsACharacter) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";  // a é € 😀 z
  for (size_t split = 0; split <= text.size(); ++split) {
    Utf8Stream s;
    std::string out;
    for (char c : text) {
      const std::string d = s.push(std::string_view(&c, 1));
      // Every delta is whole characters: it never ends on a lead or continuation byte that is
      // missing its tail.
      EXPECT_EQ(utf8_complete_prefix(d), d.size());
      out += d;
    }
    out += s.flush();
    EXPECT_EQ(out, text);
  }
  Utf8Stream s;
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.push("\x98"), "");
  EXPECT_EQ(s.push("\x80!"), "\xF0\x9F\x98\x80!");
  EXPECT_EQ(s.push("\xE2"), "");
  EXPECT_EQ(s.flush(), "\xE2");  // an unfinished tail is still delivered at the end
}

}  // namespace
}  // namespace pagellm
