#include "cli/cli.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/build_info.h"
#include "core/error.h"
#include "server/serve.h"

namespace pagellm::cli {

void add_kv_cache_memory_option(CLI::App& app, std::string& text, const std::string& default_text) {
  app.add_option("--kv-cache-memory", text,
                 "KV cache size: bytes (1073741824, 64MiB, 1.5GiB) or blocks (200blocks); default: " + default_text)
      ->check([](const std::string& value) {
        // "" is the unset value apply_kv_cache_memory() leaves to the default: refuse it when given.
        return value.empty() ? std::string("expected bytes or a block count, got ''") : std::string();
      });
}

void apply_kv_cache_memory(const std::string& text, EngineConfig& e) {
  if (text.empty()) return;
  const server::KvCacheMemory m = server::parse_kv_cache_memory(text);
  e.kv_cache_bytes = m.bytes;
  e.kv_cache_blocks = m.blocks;
}

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    if (b >= 0x20 && b != 0x7f) {
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", b);
      out += hex;
    }
  }
  return out;
}

void add_speculative_options(CLI::App& app, EngineConfig& e) {
  app.add_flag("--speculative-ngram", e.speculative_ngram,
               "Speculative decoding with n-gram (prompt lookup) drafts: the tokens that followed the last n "
               "tokens' earlier occurrence in the request's prompt and output, verified in one forward pass; "
               "outputs are unchanged");
  app.add_option("--speculative-self-layers", e.speculative_self_layers,
                 "Self-speculative decoding: the draft is the model's first L layers with its final norm and LM "
                 "head (greedy), sharing its KV cache; L < the model's layers (instead of --speculative-ngram)");
  app.add_option("--speculative-model", e.speculative_model,
                 "Speculative decoding with a draft model: a GGUF file or Hugging Face directory with the same "
                 "vocabulary (a smaller model, or this one in a cheaper quantization) whose greedy tokens are "
                 "verified in one forward pass; its KV cache uses the same blocks (instead of the other proposers)");
  app.add_option("--ngram-min", e.ngram_min, "Shortest n-gram looked up")->capture_default_str();
  app.add_option("--ngram-max", e.ngram_max, "Longest n-gram looked up (the longest match wins)")
      ->capture_default_str();
  app.add_option("--num-speculative-tokens", e.num_speculative_tokens,
                 "Most draft tokens per request and step (a request's speculative.num_speculative_tokens may "
                 "lower it)")
      ->capture_default_str();
  app.add_flag(
      "--no-speculative-adaptive", [&e](int64_t n) { e.speculative_adaptive = n <= 0; },
      "Draft --num-speculative-tokens every step, as far as the token and step-time budgets allow (default: "
      "each step's k maximises the predicted tokens per second from the measured acceptance and step cost, 0 "
      "when speculation would lose)");
}

std::string default_model_path() {
  namespace fs = std::filesystem;
  const fs::path rel = fs::path("models") / "stories260K-f32.gguf";
  if (fs::exists(rel)) return rel.string();
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& dir : {exe.parent_path(), exe.parent_path().parent_path()}) {
      if (fs::exists(dir / rel)) return (dir / rel).string();
    }
  }
  return rel.string();  // the open error will name it
}

namespace {

int run(int argc, char** argv) {
  CLI::App app{"pagellm: a lean LLM inference engine (Llama-family GGUF models and Hugging Face directories on CPU)"};
  app.require_subcommand(1);
  std::string version = build_info_text();
  version.pop_back();  // CLI11 ends the line
  app.set_version_flag("--version", version, "Print the version and build info, then exit");
  std::vector<std::pair<CLI::App*, Handler>> subs;
  auto add = [&](const char* name, const char* help, Handler (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    subs.emplace_back(sub, fn(*sub));
  };
  add("generate", "Generate text from a prompt", &add_generate);
  add("tokenize", "Print the token ids of a text as a JSON array", &add_tokenize);
  add("info", "Print a model's metadata, tensors, sizes and KV bytes per token; exit 1 if generate would refuse it",
      &add_info);
  add("make-model", "Write a random-weight GGUF of a named real shape (test and benchmark models)", &add_make_model);
  add("serve", "OpenAI-compatible HTTP server with continuous batching", &add_serve);
  add("bench", "Benchmarks: `bench latency` (single-stream speed, memory bandwidth), `bench serve` (serving load test)",
      &add_bench);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version (exit code 0) print as CLI11 prints them. A usage error gets the
    // "error: " of every other error, and exit status 2 (the usage-error status of getopt-style
    // tools) instead of CLI11's own codes (105, 109, 114, ...).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", one_line(e.what()).c_str());
    return 2;
  }
  try {
    for (auto& [sub, handler] : subs) {
      if (sub->parsed()) return handler();
    }
  } catch (const Error& e) {
    std::fflush(stdout);  // what was printed comes first, whole, when both go to one file (info)
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // building the command line itself failed (out of memory)
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
  } catch (...) {
    std::fprintf(stderr, "error: unknown exception\n");
  }
  return 1;
}

}  // namespace pagellm::cli
