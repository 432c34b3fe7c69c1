// libFuzzer target for the safetensors reader (src/format/safetensors.cc).
//
// Contract under test: SafetensorsFile::parse on arbitrary bytes either succeeds or throws
// pagellm::Error naming the file. Anything else -- a crash, an ASan/UBSan report, another exception
// type, a hang, an outsized allocation -- is a bug. On success the target also checks what the
// header promised and the reader claims to have verified:
//   * every tensor's dtype is a known one, its shape has at most 8 dimensions and
//     data_offsets span exactly shape x element size bytes;
//   * reads the first and last byte of every tensor's data, so ASan flags a data pointer that
//     reaches outside the input buffer;
//   * no two non-empty tensors overlap, and find() returns each tensor by its name.
//
// Build: see tests/fuzz/README.md (cmake -DPAGELLM_FUZZ=ON, target safetensors_fuzzer).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/safetensors.h"

namespace {

using pagellm::Error;
using pagellm::SafetensorsFile;
using pagellm::SafetensorsTensor;

volatile uint64_t g_sink = 0;

[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "safetensors_fuzzer: %s\n", what.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

void check_file(const SafetensorsFile& f, const uint8_t* base, size_t size) {
  std::vector<const SafetensorsTensor*> live;
  for (const SafetensorsTensor& t : f.tensors()) {
    const int elem = SafetensorsFile::dtype_bytes(t.dtype);
    if (elem == 0) bug("accepted an unknown dtype: " + t.name);
    if (t.shape.size() > 8) bug("accepted more than 8 dimensions: " + t.name);
    for (int64_t d : t.shape) {
      if (d < 0) bug("accepted a negative dimension: " + t.name);
    }
    if (t.begin > t.end) bug("accepted reversed data_offsets: " + t.name);
    const uint64_t want = static_cast<uint64_t>(t.num_elements()) * static_cast<uint64_t>(elem);
    if (t.end - t.begin != want) bug("data_offsets do not match shape x dtype: " + t.name);
    if (t.end > t.begin) {
      if (t.data < base || t.data + (t.end - t.begin) > base + size) bug("tensor data outside the input: " + t.name);
      g_sink = g_sink + t.data[0];
      g_sink = g_sink + t.data[t.end - t.begin - 1];
      live.push_back(&t);
    }
    if (f.find(t.name) != &t) bug("find() does not return the stored tensor " + t.name);
  }
  std::sort(live.begin(), live.end(),
            [](const SafetensorsTensor* a, const SafetensorsTensor* b) { return a->data < b->data; });
  for (size_t i = 1; i < live.size(); ++i) {
    if (live[i]->data < live[i - 1]->data + (live[i - 1]->end - live[i - 1]->begin)) {
      bug("accepted overlapping tensors: " + live[i - 1]->name + ", " + live[i]->name);
    }
  }
  for (const auto& [k, v] : f.metadata()) g_sink = g_sink + k.size() + v.size();
  g_sink = g_sink + (f.find("no.such.tensor") == nullptr ? 1 : 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<SafetensorsFile> f;
  try {
    f = SafetensorsFile::parse(std::span<const uint8_t>(data, size), "fuzz-input");
  } catch (const Error& e) {
    // The documented contract (safetensors.h) is that the message names the file.
    if (std::strstr(e.what(), "fuzz-input") == nullptr)
      bug(std::string("error message does not name the file: ") + e.what());
    return 0;
  }
  if (!f) bug("parse returned null");
  check_file(*f, data, size);
  return 0;
}
