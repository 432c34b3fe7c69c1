#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "format/hf_dir.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::cli {

Handler add_tokenize(CLI::App& app) {
  struct Args {
    std::string model, text;
    bool no_bos = false, parse_special = false;
  };
  auto a = std::make_shared<Args>();
  app.add_option("-m,--model", a->model,
                 "GGUF model or vocab file, or Hugging Face directory (default: models/stories260K-f32.gguf)");
  app.add_flag("--no-bos", a->no_bos, "Do not add BOS/EOS special tokens");
  app.add_flag("--parse-special", a->parse_special, "Turn special-token text (e.g. <s>) into control tokens");
  app.add_option("text", a->text, "Text to tokenize (use -- before text that begins with '-')")->required();
  return [a] {
    auto file = open_model_file(a->model.empty() ? default_model_path() : a->model);
    std::unique_ptr<Tokenizer> tok;
    try {
      tok = Tokenizer::from_gguf(*file);
    } catch (const Error& e) {
      throw Error("model '" + file->path() + "': " + e.what());
    }
    for (const std::string& w : tok->load_warnings()) std::fprintf(stderr, "warning: %s\n", one_line(w).c_str());
    const std::vector<int32_t> ids = tok->encode(a->text, !a->no_bos, a->parse_special);
    std::puts(nlohmann::json(ids).dump().c_str());
    return 0;
  };
}

}  // namespace pagellm::cli
