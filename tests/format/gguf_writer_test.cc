#include "format/gguf_writer.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "core/error.h"
#include "format/gguf.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + salt);
  return v;
}

// Streams `data` in pieces of `chunk` bytes (the last one shorter).
TensorDataFn chunked(std::vector<uint8_t> data, size_t chunk, int* calls = nullptr) {
  return [data = std::move(data), chunk, calls](GgufDataSink& out) {
    if (calls != nullptr) ++*calls;
    for (size_t i = 0; i < data.size(); i += chunk) out.write(data.data() + i, std::min(chunk, data.size() - i));
  };
}

fs::path temp_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("pagellm_gguf_writer_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

TEST(GgufWriter, StreamedTensorsEqualInMemoryOnes) {
  // Sizes 40, 34 and 6 bytes: none a multiple of the alignment, so every tensor is padded.
  const auto a = pattern(10 * 4, 1), b = pattern(34, 2), c = pattern(3 * 2, 3);
  GgufWriter mem, streamed;
  for (GgufWriter* w : {&mem, &streamed}) {
    w->set("general.architecture", GgufValue::str("llama"));
    w->set("n", GgufValue::u32(7));
  }
  mem.add_tensor("a", GgmlType::F32, {10}, a);
  mem.add_tensor("b", GgmlType::Q8_0, {32, 1}, b);
  mem.add_tensor("c", GgmlType::F16, {1, 3}, c);
  int calls = 0;
  streamed.add_tensor("a", GgmlType::F32, {10}, chunked(a, 7, &calls));
  streamed.add_tensor("b", GgmlType::Q8_0, {32, 1}, chunked(b, 1, &calls));
  streamed.add_tensor("c", GgmlType::F16, {1, 3}, chunked(c, 100, &calls));
  const std::vector<uint8_t> bytes = streamed.to_bytes();
  EXPECT_EQ(calls, 3);  // each producer once
  EXPECT_EQ(bytes, mem.to_bytes());

  auto f = GgufFile::parse(bytes, "mem");
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_u64("n"), 7u);
  ASSERT_EQ(f->tensors().size(), 3u);
  const std::vector<uint8_t>* want[] = {&a, &b, &c};
  for (size_t i = 0; i < 3; ++i) {
    const GgufTensorInfo& t = f->tensors()[i];
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    ASSERT_EQ(t.size_bytes, want[i]->size()) << t.name;
    EXPECT_EQ(std::memcmp(t.data, want[i]->data(), t.size_bytes), 0) << t.name;
  }
  EXPECT_EQ(f->tensor("c").ne, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(f->tensor("b").type, GgmlType::Q8_0);
  EXPECT_EQ(bytes.size() % 32, 0u);  // the last tensor is padded too
}

TEST(GgufWriter, AlignmentKeyAndPadding) {
  GgufWriter w;
  w.set("general.alignment", GgufValue::u32(128));
  w.add_tensor("x", GgmlType::F32, {3}, chunked(pattern(12, 0), 5));
  w.add_tensor("y", GgmlType::F32, {1}, chunked(pattern(4, 9), 4));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = GgufFile::parse(bytes, "mem");
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->get_u64("general.alignment"), 128u);
  EXPECT_EQ(f->metadata().size(), 1u);  // written once
  EXPECT_EQ(f->data_offset() % 128, 0u);
  EXPECT_EQ(f->tensor("y").offset, 128u);
  for (size_t i = f->data_offset() + 12; i < f->data_offset() + 128; ++i) EXPECT_EQ(bytes[i], 0) << i;
}

TEST(GgufWriter, WritesThroughATemporaryFile) {
  const fs::path dir = temp_dir("file");
  const std::string path = (dir / "m.gguf").string();
  GgufWriter w;
  w.set("k", GgufValue::str("v"));
  bool tmp_seen = false;
  w.add_tensor("x", GgmlType::F32, {4}, [&](GgufDataSink& out) {
    tmp_seen = fs::exists(path + ".tmp") && !fs::exists(path);
    const auto d = pattern(16, 5);
    out.write(d.data(), d.size());
  });
  w.write(path);
  EXPECT_TRUE(tmp_seen);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> on_disk{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_EQ(on_disk, w.to_bytes());
  fs::remove_all(dir);
}

TEST(GgufWriter, AFailedProducerLeavesNoFile) {
  const fs::path dir = temp_dir("fail");
  const std::string path = (dir / "m.gguf").string();
  GgufWriter w;
  w.add_tensor("x", GgmlType::F32, {4}, [](GgufDataSink& out) {
    const auto d = pattern(8, 0);
    out.write(d.data(), d.size());
    throw Error("producer failed");
  });
  EXPECT_THROW(w.write(path), Error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_THROW(GgufWriter().write((dir / "no_such_dir" / "m.gguf").string()), Error);
  fs::remove_all(dir);
}

TEST(GgufWriterDeathTest, AProducerOfTheWrongSizeIsABrokenInvariant) {
  GgufWriter w;
  w.add_tensor("x", GgmlType::F32, {4}, chunked(pattern(12, 0), 4));  // 12 bytes, not 16
  EXPECT_DEATH(w.to_bytes(), "tensor x: produced 12 bytes, expected 16");
}

}  // namespace
}  // namespace pagellm
