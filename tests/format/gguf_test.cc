#include "format/gguf.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <random>

#include "core/error.h"
#include "format/gguf_writer.h"
#include "test_util.h"

namespace pagellm {
namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

TEST(Gguf, ReadsStories260KMetadataAndTensors) {
  auto f = GgufFile::open(test::testdata("stories260K/stories260K-f32.gguf"));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_u64("llama.embedding_length"), 64u);
  EXPECT_EQ(f->get_u64("llama.block_count"), 5u);
  EXPECT_EQ(f->get_u64("llama.attention.head_count"), 8u);
  EXPECT_EQ(f->get_u64("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f->get_u64("llama.context_length"), 512u);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").size(), 512u);
  const GgufTensorInfo& emb = f->tensor("token_embd.weight");
  EXPECT_EQ(emb.type, GgmlType::F32);
  ASSERT_EQ(emb.ne.size(), 2u);
  EXPECT_EQ(emb.ne[0], 64);
  EXPECT_EQ(emb.ne[1], 512);
  EXPECT_EQ(emb.size_bytes, 64u * 512u * 4u);
  EXPECT_NE(f->find_tensor("output.weight"), nullptr);  // the llama2c converter writes it out
  EXPECT_THROW(f->tensor("nope.weight"), Error);
  EXPECT_THROW(f->get_string("llama.block_count"), Error);  // wrong type
}

TEST(Gguf, MixedTypesInQuantizedFile) {
  auto f = GgufFile::open(test::testdata("stories260K/stories260K-q4_0.gguf"));
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight").type, GgmlType::F16);
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight").type, GgmlType::Q4_0);
  EXPECT_EQ(f->tensor("blk.0.attn_norm.weight").type, GgmlType::F32);
  auto g = GgufFile::open(test::testdata("stories260K/stories260K-q8_0.gguf"));
  EXPECT_EQ(g->tensor("token_embd.weight").type, GgmlType::Q8_0);
}

TEST(Gguf, WriterRoundTripsEveryValueType) {
  GgufWriter w(64);
  w.set("u8", {GgufValueType::UINT8, uint64_t{200}});
  w.set("i8", {GgufValueType::INT8, int64_t{-100}});
  w.set("u16", {GgufValueType::UINT16, uint64_t{60000}});
  w.set("i16", {GgufValueType::INT16, int64_t{-30000}});
  w.set("u32", GgufValue::u32(4000000000u));
  w.set("i32", GgufValue::i32(-2000000000));
  w.set("u64", GgufValue::u64(uint64_t{1} << 40));
  w.set("i64", {GgufValueType::INT64, int64_t{-(int64_t{1} << 40)}});
  w.set("f32", GgufValue::f32(1.5f));
  w.set("f64", {GgufValueType::FLOAT64, 2.25});
  w.set("b", GgufValue::boolean(true));
  w.set("s", GgufValue::str("héllo"));
  w.set("arr", GgufValue::array(GgufValueType::STRING, {GgufValue::str("a"), GgufValue::str("")}));
  w.set("nested",
        GgufValue::array(GgufValueType::ARRAY, {GgufValue::array(GgufValueType::INT32, {GgufValue::i32(7)})}));
  std::vector<uint8_t> t0(3 * 4 * 4);
  for (size_t i = 0; i < t0.size(); ++i) t0[i] = static_cast<uint8_t>(i);
  w.add_tensor("t0", GgmlType::F32, {4, 3}, t0);
  w.add_tensor("t1", GgmlType::Q8_0, {32}, std::vector<uint8_t>(34, 7));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes, "mem");
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->get_u64("u8"), 200u);
  EXPECT_EQ(f->get_i64("i8"), -100);
  EXPECT_EQ(f->get_u64("u16"), 60000u);
  EXPECT_EQ(f->get_i64("i16"), -30000);
  EXPECT_EQ(f->get_u64("u32"), 4000000000u);
  EXPECT_EQ(f->get_i64("i32"), -2000000000);
  EXPECT_EQ(f->get_u64("u64"), uint64_t{1} << 40);
  EXPECT_EQ(f->get_i64("i64"), -(int64_t{1} << 40));
  EXPECT_EQ(f->get_f32("f32"), 1.5f);
  EXPECT_EQ(f->get_f32("f64"), 2.25f);
  EXPECT_TRUE(f->get_bool("b"));
  EXPECT_EQ(f->get_string("s"), "héllo");
  EXPECT_EQ(f->get_string_array("arr"), (std::vector<std::string>{"a", ""}));
  EXPECT_THROW(f->get_u64("i8"), Error);  // negative as unsigned
  const auto& t = f->tensor("t0");
  EXPECT_EQ(t.data - bytes.data(), static_cast<ptrdiff_t>(f->data_offset()));
  EXPECT_EQ(std::memcmp(t.data, t0.data(), t0.size()), 0);
  EXPECT_EQ(f->tensor("t1").data[2], 7);
  EXPECT_EQ(f->tensor("t1").offset % 64, 0u);
}

// Every truncation of a real file is rejected with an Error (never a crash or an OOB read: the
// sanitizer build checks the latter).
TEST(Gguf, EveryTruncationIsAnError) {
  const std::vector<uint8_t> full = read_file(test::testdata("stories260K/stories260K-q4_0.gguf"));
  ASSERT_GT(full.size(), 1000u);
  auto ok = GgufFile::parse(full, "full");
  const uint64_t header = ok->data_offset();
  for (size_t n = 0; n < full.size(); n += (n < header + 64 ? 1 : 997)) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_THROW(GgufFile::parse(cut, "cut"), Error) << "length " << n;
  }
}

// A K-quant file cut inside its last tensor names the file and that tensor (the sizes of every
// block type come from core/dtype.h's table).
TEST(Gguf, TruncatedKquantTensorNamesTheTensor) {
  const std::vector<uint8_t> full = read_file(test::testdata("kquant/llama-kq-s7-q4_k_m.gguf"));
  auto ok = GgufFile::parse(full, "full");
  const GgufTensorInfo* last = &ok->tensors().front();
  for (const GgufTensorInfo& t : ok->tensors()) {
    if (t.offset > last->offset) last = &t;
  }
  ASSERT_TRUE(last->type == GgmlType::Q4_K || last->type == GgmlType::Q6_K) << type_name(last->type);
  std::vector<uint8_t> cut(full.begin(), full.end() - static_cast<ptrdiff_t>(last->size_bytes / 2));
  try {
    GgufFile::parse(cut, "cut-q4_k_m.gguf");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut-q4_k_m.gguf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'" + last->name + "'"), std::string::npos) << e.what();
  }
}

TEST(Gguf, CorruptHeadersGiveNamedErrors) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.add_tensor("tok", GgmlType::F32, {2, 2}, std::vector<uint8_t>(16));
  const std::vector<uint8_t> good = w.to_bytes();
  auto expect_error = [&](std::vector<uint8_t> b, const std::string& needle) {
    try {
      GgufFile::parse(b, "bad.gguf");
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.gguf"), std::string::npos) << e.what();
    }
  };
  auto b = good;
  b[0] = 'X';
  expect_error(b, "magic");
  b = good;
  b[4] = 9;
  expect_error(b, "version 9");
  b = good;
  b[8] = 0xff;  // tensor count low byte
  b[15] = 0x7f;
  expect_error(b, "tensor count");
  // Locate the tensor info: after the kv. Find the tensor name "tok" and corrupt fields after it.
  auto pos = std::search(good.begin(), good.end(), std::begin("tok"), std::begin("tok") + 3) - good.begin();
  const size_t dims_at = pos + 3, ne0_at = dims_at + 4, type_at = ne0_at + 16, off_at = type_at + 4;
  b = good;
  b[dims_at] = 9;
  expect_error(b, "n_dims");
  b = good;
  b[type_at] = 99;
  expect_error(b, "unknown ggml type id 99");
  b = good;
  b[type_at] = 2;  // q4_0 with a row of 2 elements
  expect_error(b, "block size");
  b = good;
  b[off_at] = 32;  // aligned, but past the end
  expect_error(b, "past the end");
  b = good;
  b[off_at] = 3;
  expect_error(b, "alignment");
  b = good;
  for (int i = 0; i < 8; ++i) b[ne0_at + i] = 0xff;  // ne0 = 2^64-1
  expect_error(b, "tok");
  b = good;
  b[ne0_at + 7] = 0x40;  // ne0 * ne1 overflows the byte count
  b[ne0_at + 15] = 0x40;
  expect_error(b, "tok");
  // Key type corrupted.
  auto kpos = std::search(good.begin(), good.end(), std::begin("general.architecture"),
                          std::begin("general.architecture") + 20) -
              good.begin();
  b = good;
  b[kpos + 20] = 77;
  expect_error(b, "general.architecture");
}

// Tensors whose bytes overlap (an offset or a type id flipped so that one reads another's data)
// are refused, naming both; so is a real K-quant tensor retyped to f32 (4x more bytes).
TEST(Gguf, OverlappingTensorDataIsAnError) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.add_tensor("first", GgmlType::F32, {8, 2}, std::vector<uint8_t>(64));
  w.add_tensor("second", GgmlType::F32, {8, 2}, std::vector<uint8_t>(64));
  const std::vector<uint8_t> good = w.to_bytes();
  ASSERT_NO_THROW(GgufFile::parse(good, "good.gguf"));
  const auto name_at = std::search(good.begin(), good.end(), std::begin("second"), std::begin("second") + 6);
  const size_t off_at = (name_at - good.begin()) + 6 + 4 + 2 * 8 + 4;  // name, n_dims, ne, type
  for (uint8_t offset : {0, 32}) {                                     // same start; inside the first tensor
    std::vector<uint8_t> b = good;
    for (int i = 0; i < 8; ++i) b[off_at + i] = 0;
    b[off_at] = offset;
    try {
      GgufFile::parse(b, "overlap.gguf");
      ADD_FAILURE() << "no error at offset " << int{offset};
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("overlap.gguf"), std::string::npos) << what;
      EXPECT_NE(what.find("overlaps tensor"), std::string::npos) << what;
      EXPECT_NE(what.find("'first'"), std::string::npos) << what;
      EXPECT_NE(what.find("'second'"), std::string::npos) << what;
    }
  }

  std::vector<uint8_t> real = read_file(test::testdata("kquant/llama-kq-s7-q4_k_m.gguf"));
  const auto parsed = GgufFile::parse(real, "real");
  const GgufTensorInfo* q = parsed->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(q->type, GgmlType::Q4_K);
  const size_t q_dims = q->ne.size();
  const std::string name = "blk.0.attn_q.weight";
  const auto at = std::search(real.begin(), real.end(), name.begin(), name.end()) - real.begin();
  const size_t type_at = at + name.size() + 4 + q_dims * 8;
  ASSERT_EQ(real[type_at], static_cast<uint8_t>(GgmlType::Q4_K));
  real[type_at] = static_cast<uint8_t>(GgmlType::F32);
  EXPECT_THROW(GgufFile::parse(real, "retyped.gguf"), Error);
}

TEST(Gguf, RandomByteFlipsNeverCrash) {
  const std::vector<uint8_t> full = read_file(test::testdata("stories260K/stories260K-f16.gguf"));
  auto ok = GgufFile::parse(full, "x");
  const size_t header = ok->data_offset();
  std::mt19937 rng(1234);
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b(full.begin(), full.begin() + static_cast<ptrdiff_t>(header) + 256);
    for (int k = 0; k < 3; ++k) b[rng() % header] = static_cast<uint8_t>(rng());
    try {
      auto f = GgufFile::parse(b, "flip");
      for (const auto& t : f->tensors()) {
        ASSERT_LE(t.data + t.size_bytes, b.data() + b.size());
      }
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100);
}

TEST(Gguf, OpenMissingFileNamesIt) {
  try {
    GgufFile::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos);
  }
}

// A FIFO (or any file that is not regular) is refused without blocking in open(): the error
// names the path and what it is. (open() used to wait for a writer forever.)
TEST(Gguf, OpenRefusesFifoAndDirectoryWithoutBlocking) {
  const std::string fifo = ::testing::TempDir() + "/gguf_open_fifo_" + std::to_string(::getpid()) + ".gguf";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto opened = std::async(std::launch::async, [&]() -> std::string {
    try {
      GgufFile::open(fifo);
      return "opened";
    } catch (const Error& e) {
      return e.what();
    }
  });
  if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // let it through to end the test
    if (w >= 0) ::close(w);
    ADD_FAILURE() << "GgufFile::open blocked on a FIFO";
  }
  const std::string msg = opened.get();
  EXPECT_NE(msg.find("'" + fifo + "' is a FIFO"), std::string::npos) << msg;
  ::unlink(fifo.c_str());
  try {
    GgufFile::open(::testing::TempDir());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagellm
