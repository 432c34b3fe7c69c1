// Subcommands of the `pagellm` binary. Each registers its options on a CLI11 sub-app and returns
// the handler to run when that subcommand is chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>

#include "engine/engine_config.h"

namespace pagellm::cli {

using Handler = std::function<int()>;

Handler add_generate(CLI::App& app);
Handler add_tokenize(CLI::App& app);
Handler add_info(CLI::App& app);
Handler add_make_model(CLI::App& app);
Handler add_bench(CLI::App& app);
Handler add_serve(CLI::App& app);

// --speculative-ngram, --ngram-min, --ngram-max, --num-speculative-tokens,
// --no-speculative-adaptive (serve, generate, bench): speculative decoding settings of `e`.
void add_speculative_options(CLI::App& app, EngineConfig& e);

// --kv-cache-memory TEXT (serve, generate, bench): the KV pool's size, bytes or blocks
// (server::parse_kv_cache_memory), into e's kv_cache_bytes / kv_cache_blocks; "" leaves the
// default (plan_kv_cache). Throws pagellm::Error naming the flag.
void add_kv_cache_memory_option(CLI::App& app, std::string& text, const std::string& default_text);
void apply_kv_cache_memory(const std::string& text, EngineConfig& e);

// `text` (an error or warning that may quote names or token texts from a model file) as one
// printable line: control bytes become \n, \r, \t or \xNN; UTF-8 is kept.
std::string one_line(std::string_view text);

// The model used when -m is not given: models/stories260K-f32.gguf, looked up in the current
// directory, then beside the binary (../models when the binary is build/pagellm).
std::string default_model_path();

}  // namespace pagellm::cli
