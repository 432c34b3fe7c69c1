// tokenizer.json + tokenizer_config.json -> GGUF tokenizer.* metadata, as llama.cpp's
// convert_hf_to_gguf.py (_set_vocab_gpt2 / _set_vocab_llama_hf) and gguf-py's SpecialVocab do,
// with one difference: a SentencePiece-style BPE vocabulary keeps its merges
// (tokenizer.ggml.merges), because the converter's scores (-1000 for every token) do not give
// Hugging Face's merge order (../shared/testdata/tinystories-656k/README.md).
// Format: Hugging Face tokenizers' serialization (tokenizers/src/tokenizer/serialization.rs,
// models/bpe/serialization.rs).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "format/hf_json.h"

namespace pagellm::hf {
namespace {

// GGUF token types (llama.cpp's llama_token_type).
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;
const std::string kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// The Split regexes of byte-level tokenizer.json files and the tokenizer.ggml.pre name of each.
struct SplitPre {
  const char* regex;
  const char* pre;
};
constexpr SplitPre kSplits[] = {
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "llama-bpe"},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "qwen2"},
};

std::string type_of(const Json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

// The list of a Sequence (its `key` member), or the one element.
std::vector<Json> flatten(const Json& j, const char* key) {
  if (j.is_null()) return {};
  if (type_of(j) == "Sequence" && j.contains(key) && j[key].is_array()) return j[key].get<std::vector<Json>>();
  return {j};
}

struct Style {
  bool spm = false;
  bool add_space_prefix = false;
  std::string pre;  // byte-level only
};

Style detect_style(const JsonFile& tok) {
  Style st;
  const Json null;
  const Json& norm = tok.json.contains("normalizer") ? tok.json["normalizer"] : null;
  const Json& pre = tok.json.contains("pre_tokenizer") ? tok.json["pre_tokenizer"] : null;
  for (const Json& n : flatten(norm, "normalizers")) {
    const std::string t = type_of(n);
    if (t == "Prepend" && n.value("prepend", "") == kSpmSpace) {
      st.add_space_prefix = true;
    } else if (t == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
               n["pattern"].value("String", "") == " " && n.value("content", "") == kSpmSpace) {
      st.spm = true;
    } else {  // NFC, Lowercase, other Replace / Prepend forms, or a type we have never heard of
      tok.fail("normalizer",
               "has a " + (t.empty() ? std::string("typeless") : t) + " normalizer, which is not supported");
    }
  }
  const std::vector<Json> pres = flatten(pre, "pretokenizers");
  if (st.spm) {
    if (!pres.empty())
      tok.fail("pre_tokenizer", "must be null for a SentencePiece-style (Replace \" \" -> \"▁\") tokenizer");
    return st;
  }
  if (pres.size() == 1 && type_of(pres[0]) == "Metaspace") {
    const Json& m = pres[0];
    if (m.value("replacement", kSpmSpace) != kSpmSpace) tok.fail("pre_tokenizer.replacement", "must be \"▁\"");
    if (m.value("split", false))
      tok.fail("pre_tokenizer.split", "= true is not supported (SentencePiece-style BPE merges the whole text)");
    st.spm = true;
    const std::string scheme = m.value("prepend_scheme", m.value("add_prefix_space", true) ? "always" : "never");
    st.add_space_prefix = scheme != "never";
    return st;
  }
  // Byte-level: [Split(regex), ByteLevel(use_regex false)], ByteLevel alone (GPT-2's regex), or
  // [Digits(individual), ByteLevel] (SmolLM).
  auto byte_level = [&](const Json& j, bool regex) {
    if (type_of(j) != "ByteLevel") return false;
    if (j.value("use_regex", true) != regex) return false;
    st.add_space_prefix = j.value("add_prefix_space", false);
    return true;
  };
  if (pres.size() == 1 && byte_level(pres[0], true)) {
    st.pre = "gpt-2";
  } else if (pres.size() == 2 && type_of(pres[0]) == "Digits" && pres[0].value("individual_digits", false) &&
             byte_level(pres[1], true)) {
    st.pre = "smollm";
  } else if (pres.size() == 2 && type_of(pres[0]) == "Split" && byte_level(pres[1], false)) {
    const Json& split = pres[0];
    const std::string regex =
        split.contains("pattern") && split["pattern"].is_object() ? split["pattern"].value("Regex", "") : "";
    for (const SplitPre& s : kSplits) {
      if (regex == s.regex) st.pre = s.pre;
    }
    if (st.pre.empty() || split.value("behavior", "") != "Isolated" || split.value("invert", false)) {
      tok.fail("pre_tokenizer", "splits with a regex this engine has no pre-tokenizer for: " + regex.substr(0, 120));
    }
  } else {
    tok.fail("pre_tokenizer",
             "is not a supported one (SentencePiece-style, or byte-level with the GPT-2, Llama 3, "
             "Qwen2 or SmolLM split): " +
                 shown(pre, 160));
  }
  return st;
}

// A special token of tokenizer_config.json: "text" or {"content": "text", ...}.
std::optional<std::string> special_text(const JsonFile& f, const char* field) {
  const Json* v = f.find(field);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object() && v->contains("content") && (*v)["content"].is_string())
    return (*v)["content"].get<std::string>();
  f.fail(field, "must be a string or an object with \"content\"");
}

// Token ids of an integer-or-list field (eos_token_id of config / generation_config).
std::vector<int64_t> id_list(const JsonFile& f, const char* field, int64_t n) {
  const Json* v = f.find(field);
  if (v == nullptr) return {};
  std::vector<int64_t> ids;
  for (const Json& x : v->is_array() ? *v : Json::array({*v})) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= n) {
      f.fail(field, "must be token ids in [0, " + std::to_string(n) + "), got " + shown(*v));
    }
    ids.push_back(x.get<int64_t>());
  }
  return ids;
}

std::string chat_template(const std::string& dir, const JsonFile& tc) {
  if (const Json* t = tc.find("chat_template")) {
    if (t->is_string()) return t->get<std::string>();
    if (t->is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
      for (const Json& e : *t) {
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string()) {
          return e["template"].get<std::string>();
        }
      }
    }
    tc.fail("chat_template", "must be a string or a list holding a \"default\" template");
  }
  // transformers >= 4.43 writes it apart.
  return read_text_file(dir, "chat_template.jinja").value_or("");
}

GgufValue str_array(std::vector<std::string> v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (auto& s : v) items.push_back(GgufValue::str(std::move(s)));
  return GgufValue::array(GgufValueType::STRING, std::move(items));
}

}  // namespace

void tokenizer_metadata(const std::string& dir, const JsonFile& config, const JsonFile& generation, int64_t vocab_size,
                        Metadata& kv) {
  const JsonFile tok = read_json(dir, "tokenizer.json", true);
  const JsonFile tc = read_json(dir, "tokenizer_config.json", false);
  const Json* model = tok.find("model");
  if (model == nullptr || !model->is_object()) tok.fail("model", "is missing");
  const JsonFile m{tok.path + " model", *model};
  const std::string type = m.string_opt("type").value_or("");
  if (type != "BPE") tok.fail("model.type", "= \"" + type + "\" is not supported (expected \"BPE\")");
  const Json* vocab = m.find("vocab");
  if (vocab == nullptr || !vocab->is_object()) tok.fail("model.vocab", "is missing or not an object");

  // Tokens by id: the model's vocab, then added_tokens (which may repeat or extend it).
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), kUnused);
  auto place = [&](const std::string& text, const Json& id, int32_t token_type, const std::string& field) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      tok.fail(field, "id " + shown(id) + " of token '" + text.substr(0, 40) + "' is outside [0, vocab_size " +
                          std::to_string(vocab_size) + " of config.json)");
    }
    tokens[id.get<size_t>()] = text;
    types[id.get<size_t>()] = token_type;
  };
  for (const auto& [text, id] : vocab->items()) {
    // Two texts for one id: the file is corrupt (which one would the id decode to?).
    if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size &&
        types[id.get<size_t>()] != kUnused) {
      tok.fail("model.vocab", "id " + shown(id) + " is given to both '" + tokens[id.get<size_t>()].substr(0, 40) +
                                  "' and '" + text.substr(0, 40) + "'");
    }
    place(text, id, kNormal, "model.vocab");
  }
  if (const Json* added = tok.find("added_tokens")) {
    if (!added->is_array()) tok.fail("added_tokens", "must be a list");
    for (const Json& a : *added) {
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id")) {
        tok.fail("added_tokens", "entries must have \"id\" and \"content\"");
      }
      place(a["content"].get<std::string>(), a["id"], a.value("special", false) ? kControl : kUserDefined,
            "added_tokens");
    }
  }
  std::map<std::string, int64_t> id_of;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == kUnused) tokens[i] = "[PAD" + std::to_string(i) + "]";  // the converter's filler
    id_of.emplace(tokens[i], static_cast<int64_t>(i));
  }

  // Every merge joins two tokens of model.vocab into a third, as the tokenizers library requires
  // when it loads the file (MergeTokenOutOfVocabulary); a merge of other strings would never
  // apply, and the text would be tokenized otherwise than transformers does, without a word.
  auto in_vocab = [&](std::string_view s) { return vocab->contains(std::string(s)); };
  auto joins = [&](std::string_view a, std::string_view b) {
    return in_vocab(a) && in_vocab(b) && in_vocab(std::string(a) + std::string(b));
  };
  // "a b": the space that splits it into such a pair (as the BPE tokenizer reads it, bpe.cc).
  auto string_merge_joins = [&](const std::string& s) {
    for (size_t sp = s.size() > 1 ? s.find(' ', 1) : std::string::npos; sp != std::string::npos;
         sp = s.find(' ', sp + 1)) {
      if (joins(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1))) return true;
    }
    return false;
  };
  std::vector<std::string> merges;
  if (const Json* ms = m.find("merges")) {
    if (!ms->is_array()) tok.fail("model.merges", "must be a list");
    merges.reserve(ms->size());
    for (const Json& x : *ms) {
      bool ok = false;
      if (x.is_string()) {
        merges.push_back(x.get<std::string>());
        ok = string_merge_joins(merges.back());
      } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
        merges.push_back(x[0].get<std::string>() + " " + x[1].get<std::string>());  // tokenizers >= 0.20
        ok = joins(x[0].get<std::string>(), x[1].get<std::string>());
      } else {
        tok.fail("model.merges", "entries must be \"a b\" or [\"a\", \"b\"], got " + shown(x));
      }
      if (!ok) {
        tok.fail("model.merges", "entry " + std::to_string(merges.size() - 1) + " " + shown(x) +
                                     " does not join two tokens of model.vocab into a third");
      }
    }
  }
  const Style st = detect_style(tok);
  if (st.spm) {
    if (!m.boolean_opt("byte_fallback").value_or(false)) {
      tok.fail("model.byte_fallback", "must be true for a SentencePiece-style tokenizer");
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      if (types[i] == kNormal && t.size() == 6 && t.starts_with("<0x") && t.back() == '>') types[i] = kByte;
    }
  }
  if (auto unk = m.string_opt("unk_token")) {
    auto it = id_of.find(*unk);
    if (it == id_of.end()) tok.fail("model.unk_token", "\"" + *unk + "\" is not a token");
    types[static_cast<size_t>(it->second)] = kUnknown;
    kv.emplace_back("tokenizer.ggml.unknown_token_id", GgufValue::u32(static_cast<uint32_t>(it->second)));
  }
  kv.emplace_back("tokenizer.ggml.model", GgufValue::str(st.spm ? "llama" : "gpt2"));
  if (!st.spm) kv.emplace_back("tokenizer.ggml.pre", GgufValue::str(st.pre));
  std::vector<GgufValue> type_values;
  type_values.reserve(types.size());
  for (int32_t t : types) type_values.push_back(GgufValue::i32(t));
  kv.emplace_back("tokenizer.ggml.tokens", str_array(tokens));
  kv.emplace_back("tokenizer.ggml.token_type", GgufValue::array(GgufValueType::INT32, std::move(type_values)));
  kv.emplace_back("tokenizer.ggml.merges", str_array(std::move(merges)));
  kv.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::boolean(st.add_space_prefix));

  // Special tokens: tokenizer_config.json's texts first, then config / generation_config ids.
  auto text_id = [&](const char* field) -> std::optional<int64_t> {
    auto t = special_text(tc, field);
    if (!t) return std::nullopt;
    auto it = id_of.find(*t);
    if (it == id_of.end()) tc.fail(field, "\"" + *t + "\" is not a token");
    return it->second;
  };
  auto first = [](const std::vector<int64_t>& v) { return v.empty() ? std::nullopt : std::optional<int64_t>(v[0]); };
  std::optional<int64_t> bos = text_id("bos_token");
  if (!bos) bos = first(id_list(generation, "bos_token_id", vocab_size));
  if (!bos) bos = first(id_list(config, "bos_token_id", vocab_size));
  std::vector<int64_t> eos;
  if (auto e = text_id("eos_token")) eos.push_back(*e);
  for (const JsonFile* f : {&generation, &config}) {
    for (int64_t id : id_list(*f, "eos_token_id", vocab_size)) {
      if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
    }
  }
  if (bos) kv.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(*bos)));
  // GGUF has three end-of-generation ids; further ones are left to the tokenizer's EOG texts.
  const char* eos_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                            "tokenizer.ggml.eom_token_id"};
  for (size_t i = 0; i < eos.size() && i < 3; ++i) {
    kv.emplace_back(eos_keys[i], GgufValue::u32(static_cast<uint32_t>(eos[i])));
  }
  if (auto pad = text_id("pad_token"))
    kv.emplace_back("tokenizer.ggml.padding_token_id", GgufValue::u32(static_cast<uint32_t>(*pad)));

  // add_bos: tokenizer_config.json's flag, else whether the post-processor's template opens
  // with a special token (Llama 3's tokenizer.json says so only there).
  std::optional<bool> add_bos = tc.boolean_opt("add_bos_token");
  const std::optional<bool> add_eos = tc.boolean_opt("add_eos_token");
  if (!add_bos) {
    add_bos = false;
    const Json* post = tok.find("post_processor");
    for (const Json& p : post ? flatten(*post, "processors") : std::vector<Json>{}) {
      if (type_of(p) == "TemplateProcessing" && p.contains("single") && p["single"].is_array() &&
          !p["single"].empty() && p["single"][0].contains("SpecialToken")) {
        add_bos = true;
      }
    }
  }
  kv.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(*add_bos));
  kv.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::boolean(add_eos.value_or(false)));
  if (std::string t = chat_template(dir, tc); !t.empty()) kv.emplace_back("tokenizer.chat_template", GgufValue::str(t));
}

}  // namespace pagellm::hf
