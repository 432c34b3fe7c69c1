// Copies of GGUF models with an F32 tensor set to NaN (the bundled stories260K's output.weight: every
// logit NaN): what a corrupt or overflowing weight file produces. For the tests that the engine and the
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

// Writes a copy of the GGUF file `src` to `path` (overwriting it) whose F32 tensor `tensor` is all
// NaN, and returns `path`. Throws std::runtime_error.
inline std::string write_nan_tensor_model(const std::string& src, const std::string& tensor, const std::string& path) {
  std::filesystem::copy_file(src, path, std::filesystem::copy_options::overwrite_existing);
  uint64_t at = 0, n = 0;
  {
    auto f = GgufFile::open(src);
    for (const GgufTensorInfo& t : f->tensors()) {
      if (t.name == tensor) {
        if (t.type != GgmlType::F32) throw std::runtime_error(tensor + " is not f32 in " + src);
        at = f->data_offset() + t.offset;
        n = static_cast<uint64_t>(t.num_elements());
      }
    }
  }
  if (n == 0) throw std::runtime_error("no " + tensor + " in " + src);
  const std::vector<float> nans(n, std::numeric_limits<float>::quiet_NaN());
  std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
  out.seekp(static_cast<std::streamoff>(at));
  out.write(reinterpret_cast<const char*>(nans.data()), static_cast<std::streamsize>(n * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + path);
  return path;
}

// The bundled stories260K with output.weight all NaN, written to `path`.
inline std::string write_nan_logits_model(const std::string& path) {
  return write_nan_tensor_model(source_dir() + "/models/stories260K-f32.gguf", "output.weight", path);
}

}  // namespace pagellm::test
