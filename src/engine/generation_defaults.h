// The model's own sampling defaults: the general.sampling.* keys of a GGUF file (llama.cpp's
// names; written from generation_config.json by the Hugging Face directory loader and by
// convert_hf_to_gguf.py). A request field left out takes the model's value, as vLLM's
// --generation-config auto; fields the model does not set keep SamplingParams' defaults.
#pragma once

#include "format/gguf.h"
#include "sample/sampling_params.h"

namespace pagellm {

// Reads general.sampling.{temp, top_k, top_p, min_p, penalty_repeat}. Throws pagellm::Error
// naming the key when a value has the wrong type or is out of the range SamplingParams accepts
// (top_k of -1 or 0 means off, as in a request).
SamplingParams generation_defaults(const GgufFile& file);

}  // namespace pagellm
