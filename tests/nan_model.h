// A copy of the bundled stories260K model whose output.weight is all NaN, so every logit is NaN:
// what a corrupt or overflowing weight file produces. For the tests that the engine and the
// server fail such a request cleanly (HTTP 500, finish_reason "error") and keep serving.
#pragma once

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "test_util.h"

namespace pagellm::test {

// Writes the model to `path` (overwriting it) and returns `path`. Throws std::runtime_error.
inline std::string write_nan_logits_model(const std::string& path) {
  const std::string src = source_dir() + "/models/stories260K-f32.gguf";
  std::filesystem::copy_file(src, path, std::filesystem::copy_options::overwrite_existing);
  uint64_t at = 0, n = 0;
  {
    auto f = GgufFile::open(src);
    for (const GgufTensorInfo& t : f->tensors()) {
      if (t.name == "output.weight") {
        if (t.type != GgmlType::F32) throw std::runtime_error("output.weight is not f32");
        at = f->data_offset() + t.offset;
        n = static_cast<uint64_t>(t.num_elements());
      }
    }
  }
  if (n == 0) throw std::runtime_error("no output.weight in " + src);
  const std::vector<float> nans(n, std::numeric_limits<float>::quiet_NaN());
  std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
  out.seekp(static_cast<std::streamoff>(at));
  out.write(reinterpret_cast<const char*>(nans.data()), static_cast<std::streamsize>(n * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + path);
  return path;
}

}  // namespace pagellm::test
