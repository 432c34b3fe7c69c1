// `pagellm info`: every golden model file (each weight type, each architecture) and the Hugging Face
// directory are summarised with their tensor types and file type named, and a model summary.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "core/dtype.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "test_util.h"

namespace pagellm {
namespace {

using test::run_command;

// The type column of every tensor line ("  name  type  [shape] N bytes").
std::set<std::string> tensor_types(const std::string& out) {
  std::set<std::string> types;
  std::istringstream in(out.substr(out.find("\ntensors (")));
  const std::regex line(R"(^  \S+ +(\S+) +\[[0-9, ]+\] [0-9]+ bytes$)");
  std::string l;
  std::smatch m;
  while (std::getline(in, l)) {
    if (std::regex_match(l, m, line)) types.insert(m[1]);
  }
  return types;
}

TEST(Info, NamesEveryTensorTypeAndTheFileType) {
  std::set<std::string> known;
  for (uint32_t t = 0; t < 64; ++t) {
    if (const TypeTraits* tt = type_traits(t)) known.insert(tt->name);
  }
  std::set<std::string> seen;
  int files = 0;
  for (const std::string dir : {"kquant", "archs", "tinystories-656k"}) {
    for (const auto& e : std::filesystem::directory_iterator(test::testdata(dir))) {
      const std::filesystem::path& f = e.path();
      if (f.extension() != ".gguf") continue;
      ++files;
      SCOPED_TRACE(f.string());
      const auto [out, status] = run_command(std::string(PAGELLM_BINARY) + " info '" + f.string() + "'");
      EXPECT_EQ(status, 0) << out;
      const std::set<std::string> types = tensor_types(out);
      ASSERT_FALSE(types.empty()) << out;
      for (const std::string& t : types) EXPECT_TRUE(known.count(t)) << t;
      seen.insert(types.begin(), types.end());
      // general.file_type, where the file has it, is named: "15 (MOSTLY_Q4_K_M)".
      std::smatch m;
      if (std::regex_search(out, m, std::regex(R"(\n  general\.file_type +uint32 +([^\n]*)\n)"))) {
        EXPECT_TRUE(std::regex_match(std::string(m[1]), std::regex(R"([0-9]+ \((ALL|MOSTLY)_[A-Z0-9_]+\))"))) << m[1];
      }
      EXPECT_NE(out.find("\nmodel: "), std::string::npos) << out;
      EXPECT_NE(out.find("\nruns: yes"), std::string::npos) << out;
      EXPECT_EQ(out.find("\nwarning: "), std::string::npos) << out;
    }
  }
  EXPECT_GE(files, 30);
  // The golden files hold every type that issue 14 runs.
  for (const char* t : {"f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K",
                        "iq4_nl", "iq4_xs"}) {
    EXPECT_TRUE(seen.count(t)) << t;
  }
  const auto [out, status] =
      run_command(std::string(PAGELLM_BINARY) + " info '" + test::testdata("kquant/llama-kq-s7-q4_k_m.gguf") + "'");
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\n  general\.file_type +uint32 +15 \(MOSTLY_Q4_K_M\)\n)"))) << out;
}

TEST(Info, SummarisesAHuggingFaceDirectory) {
  const auto [out, status] =
      run_command(std::string(PAGELLM_BINARY) + " info '" + test::testdata("tinystories-656k/hf") + "'");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("Hugging Face directory, shown as its GGUF conversion"), std::string::npos) << out;
  EXPECT_NE(out.find("\nmodel: llama,"), std::string::npos) << out;
  EXPECT_FALSE(tensor_types(out).empty()) << out;
}

// A copy of the stories260K model with metadata key / tensor `drop` left out and `set` applied,
// written to a temporary file; returns its path.
std::string edited_model(const std::string& tag, const std::string& drop, const std::string& set_key = "",
                         const GgufValue& set_value = GgufValue::u32(0)) {
  const auto src = GgufFile::open(test::source_dir() + "/models/stories260K-f32.gguf");
  GgufWriter w;
  for (const auto& [key, value] : src->metadata()) {
    if (key != drop && key != "general.alignment" && key != set_key) w.set(key, value);
  }
  if (!set_key.empty()) w.set(set_key, set_value);
  for (const GgufTensorInfo& t : src->tensors()) {
    if (t.name != drop) w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.size_bytes));
  }
  std::string path =
      (std::filesystem::temp_directory_path() / ("pagellm-info-" + tag + "-" + std::to_string(::getpid()) + ".gguf"))
          .string();
  w.write(path);
  return path;
}

// The exit status says whether generate would run the file: one it refuses is still described
// (metadata, tensors), then the error names the tensor or key, and info exits 1.
TEST(Info, ExitsOneForAFileGenerateRefuses) {
  const std::string missing = edited_model("missing", "blk.2.ffn_down.weight");
  const auto [out, status] = run_command(std::string(PAGELLM_BINARY) + " info '" + missing + "' 2>&1");
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("\nmetadata ("), std::string::npos) << out;
  EXPECT_NE(out.find("\n  blk.2.ffn_up.weight "), std::string::npos) << out;
  EXPECT_EQ(out.find("\nruns: yes"), std::string::npos) << out;
  EXPECT_NE(out.find("error: "), std::string::npos) << out;
  EXPECT_NE(out.find("'blk.2.ffn_down.weight'"), std::string::npos) << out;
  EXPECT_NE(out.find("(pagellm generate and serve refuse this file)"), std::string::npos) << out;
  // The description comes whole, then the error on its own line (stdout is flushed first).
  EXPECT_NE(out.find("\ntensor bytes: "), std::string::npos) << out;
  EXPECT_LT(out.find("\ntensor bytes: "), out.find("error: ")) << out;
  EXPECT_EQ(out[out.find("error: ") - 1], '\n') << out;
  const auto [gen, gen_status] =
      run_command(std::string(PAGELLM_BINARY) + " generate -m '" + missing + "' -p x -n 1 2>&1");
  EXPECT_NE(gen_status, 0) << gen;
  EXPECT_NE(gen.find("'blk.2.ffn_down.weight'"), std::string::npos) << gen;
  std::filesystem::remove(missing);

  // A vocabulary-only GGUF (no weights) is described, and is not a model.
  const auto [vocab, vocab_status] = run_command(std::string(PAGELLM_BINARY) + " info '" +
                                                 test::testdata("vocab/ggml-vocab-llama-spm.gguf") + "' 2>&1");
  EXPECT_NE(vocab_status, 0) << vocab;
  EXPECT_NE(vocab.find("tokenizer.ggml.tokens"), std::string::npos) << vocab;
  EXPECT_NE(vocab.find("'token_embd.weight' is missing"), std::string::npos) << vocab;
}

// What the loader reads past, as llama.cpp does, is printed by info, and on stderr by generate
// and tokenize.
TEST(Info, PrintsTheTokenizersLoadWarnings) {
  const std::string path = edited_model("bos", "", "tokenizer.ggml.bos_token_id", GgufValue::u32(70000));
  const std::string warning =
      "warning: tokenizer.ggml.bos_token_id = 70000 is outside the vocabulary of 512 tokens; ignored (the default 1 "
      "is used)\n";
  const auto [out, status] = run_command(std::string(PAGELLM_BINARY) + " info '" + path + "'");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("\n" + warning + "runs: yes"), std::string::npos) << out;
  const auto [gen, gen_status] = run_command(std::string(PAGELLM_BINARY) + " generate -m '" + path +
                                             "' -p Once -n 2 --temperature 0 2>&1 >/dev/null");
  EXPECT_EQ(gen_status, 0) << gen;
  EXPECT_EQ(gen.find(warning), 0u) << gen;
  const auto [tok, tok_status] =
      run_command(std::string(PAGELLM_BINARY) + " tokenize -m '" + path + "' Once 2>&1 >/dev/null");
  EXPECT_EQ(tok_status, 0) << tok;
  EXPECT_EQ(tok, warning);
  std::filesystem::remove(path);
}

// A chat template that is not a string is ignored with a warning (serve then uses the fallback
// template for chat requests); bad sampling defaults, which only serve reads, are named with what
// serve does about them. Both files run.
TEST(Info, WarnsOfWhatServeIgnoresOrRefuses) {
  const std::string chat = edited_model("chat", "", "tokenizer.chat_template", GgufValue::u32(5));
  const auto [out, status] = run_command(std::string(PAGELLM_BINARY) + " info '" + chat + "'");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("\nwarning: tokenizer.chat_template is a uint32, not a string; ignored (chat requests get the "
                     "fallback ChatML template)\nruns: yes"),
            std::string::npos)
      << out;
  std::filesystem::remove(chat);
  const std::string temp = edited_model("temp", "", "general.sampling.temp", GgufValue::f32(-1.0f));
  const auto [t_out, t_status] = run_command(std::string(PAGELLM_BINARY) + " info '" + temp + "'");
  EXPECT_EQ(t_status, 0) << t_out;
  EXPECT_NE(t_out.find("general.sampling.temp = -1 is outside [0, 3.40282e+38] (serve refuses this with "
                       "--generation-config auto, its default; vllm ignores it)\nruns: yes"),
            std::string::npos)
      << t_out;
  std::filesystem::remove(temp);
}

}  // namespace
}  // namespace pagellm
