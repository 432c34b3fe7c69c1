#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "format/gguf.h"
#include "model/random_model.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::cli {

Handler add_make_model(CLI::App& app) {
  struct Args {
    std::string shape, dtype = "f16", vocab, out;
    uint64_t seed = 0;
    int64_t num_layers = 0;
    int64_t context_length = 0;
  };
  auto a = std::make_shared<Args>();
  app.add_option("--shape", a->shape,
                 "Named shape: stories15M, stories42M, stories110M, tinyllama-1.1b, llama-3.2-1b, llama-2-7b, "
                 "tiny-gqa, tiny-gqa-wide, tiny-odd")
      ->required();
  app.add_option("--dtype", a->dtype, "Weight type: f32, f16, bf16, q8_0, q4_0");
  app.add_option("--vocab", a->vocab,
                 "GGUF whose tokenizer is copied (e.g. ../shared/testdata/vocab/ggml-vocab-llama-spm.gguf)")
      ->required();
  app.add_option("--seed", a->seed, "Seed of the weights");
  app.add_option("--layers", a->num_layers, "Override the number of layers (0: the shape's)");
  app.add_option("--context", a->context_length, "Override the context length, tokens (0: the shape's)");
  app.add_option("-o,--output", a->out, "Output GGUF path")->required();
  return [a] {
    RandomModelSpec spec;
    spec.shape = a->shape;
    spec.seed = a->seed;
    spec.vocab_path = a->vocab;
    spec.num_layers = a->num_layers;
    spec.context_length = a->context_length;
    if (a->dtype == "f32")
      spec.dtype = GgmlType::F32;
    else if (a->dtype == "f16")
      spec.dtype = GgmlType::F16;
    else if (a->dtype == "bf16")
      spec.dtype = GgmlType::BF16;
    else if (a->dtype == "q8_0")
      spec.dtype = GgmlType::Q8_0;
    else if (a->dtype == "q4_0")
      spec.dtype = GgmlType::Q4_0;
    else
      throw Error("--dtype must be one of f32, f16, bf16, q8_0, q4_0; got '" + a->dtype + "'");
    // A tokenizer pagellm cannot load (e.g. a BERT vocabulary) would make a model no command runs.
    std::unique_ptr<GgufFile> vocab;
    try {
      vocab = GgufFile::open(a->vocab);
      (void)Tokenizer::from_gguf(*vocab);
    } catch (const Error& e) {
      throw Error("--vocab '" + a->vocab + "': " + e.what());
    }
    write_random_model(spec, a->out);
    std::fprintf(stderr, "wrote %s\n", a->out.c_str());
    return 0;
  };
}

}  // namespace pagellm::cli
