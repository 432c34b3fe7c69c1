// Hugging Face directory -> the GGUF model description (see hf_dir.h). The tensor names, the
// metadata keys and the q/k permutation follow llama.cpp's convert_hf_to_gguf.py (LlamaModel,
// Qwen2Model, Qwen3Model) and gguf-py's tensor_mapping.py; Llama 3's rope_freqs follows
// Hugging Face's _compute_llama3_parameters (modeling_rope_utils.py).
#include "format/hf_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "format/hf_json.h"
#include "format/safetensors.h"

namespace pagellm {
namespace {

using hf::Json;
using hf::JsonFile;

struct ArchMap {
  const char* hf_name;  // config.json architectures[0]
  const char* arch;     // general.architecture
  bool permute_qk;      // Hugging Face rotate-half rows -> GGUF's interleaved pairs (NORM RoPE)
};
constexpr ArchMap kArchs[] = {{"LlamaForCausalLM", "llama", true},
                              {"MistralForCausalLM", "llama", true},
                              {"Qwen2ForCausalLM", "qwen2", false},
                              {"Qwen3ForCausalLM", "qwen3", false}};

// Per-layer Hugging Face tensor suffix -> GGUF name (after "blk.N.").
constexpr std::pair<const char*, const char*> kLayerTensors[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The GGUF name of a Hugging Face tensor, or "" when the converter drops it (rotary caches).
// Throws for a tensor it does not know.
std::string gguf_name(const std::string& name, const std::string& file) {
  if (name == "model.embed_tokens.weight") return "token_embd.weight";
  if (name == "model.norm.weight") return "output_norm.weight";
  if (name == "lm_head.weight") return "output.weight";
  constexpr std::string_view kLayers = "model.layers.";
  if (name.rfind(kLayers, 0) == 0) {
    const size_t dot = name.find('.', kLayers.size());
    const std::string idx = name.substr(kLayers.size(), dot - kLayers.size());
    if (dot != std::string::npos && !idx.empty() && idx.size() < 6 &&
        std::all_of(idx.begin(), idx.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const std::string rest = name.substr(dot + 1);
      if (rest == "self_attn.rotary_emb.inv_freq") return "";
      for (const auto& [from, to] : kLayerTensors) {
        if (rest == from) return "blk." + std::to_string(std::stoi(idx)) + "." + to;
      }
    }
  }
  throw Error("safetensors file '" + file + "': tensor '" + name + "' is not a tensor of this architecture");
}

class Loader {
 public:
  explicit Loader(std::string dir) : dir_(std::move(dir)) {}

  std::unique_ptr<GgufFile> load() {
    config_ = hf::read_json(dir_, "config.json", true);
    generation_ = hf::read_json(dir_, "generation_config.json", false);
    read_config();
    open_weights();
    bind_tensors();
    hf::tokenizer_metadata(dir_, config_, generation_, vocab_size_, kv_);
    sampling_defaults();
    for (auto& shard : shards_) mappings_.push_back(shard->take_mapping());  // the data stays mapped
    return GgufFile::assemble(dir_, std::move(kv_), std::move(tensors_), std::move(mappings_), std::move(owned_));
  }

 private:
  void put(const std::string& key, GgufValue v) { kv_.emplace_back(key, std::move(v)); }
  void put_arch(const std::string& key, GgufValue v) { put(arch_ + "." + key, std::move(v)); }

  void read_config() {
    const Json* archs = config_.find("architectures");
    if (archs == nullptr || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      config_.fail("architectures", "is missing or not a list of names");
    }
    const std::string hf_arch = (*archs)[0].get<std::string>();
    const auto* m =
        std::find_if(std::begin(kArchs), std::end(kArchs), [&](const ArchMap& a) { return hf_arch == a.hf_name; });
    if (m == std::end(kArchs)) {
      std::string list;
      for (const auto& a : kArchs) list += (list.empty() ? "" : ", ") + std::string(a.hf_name);
      config_.fail("architectures", "= \"" + hf_arch +
                                        "\" is not supported from a Hugging Face directory (supported: " + list +
                                        "; other models: convert to GGUF)");
    }
    arch_ = m->arch;
    permute_qk_ = m->permute_qk;
    const auto act = config_.string_opt("hidden_act").value_or("silu");
    if (act != "silu") config_.fail("hidden_act", "= \"" + act + "\" is not supported (expected \"silu\")");
    if (config_.boolean_opt("mlp_bias").value_or(false)) config_.fail("mlp_bias", "= true is not supported");
    if (arch_ == "llama" && config_.boolean_opt("attention_bias").value_or(false)) {
      config_.fail("attention_bias", "= true is not supported for " + hf_arch);
    }
    if (config_.find("sliding_window") &&
        (hf_arch == "MistralForCausalLM" || config_.boolean_opt("use_sliding_window").value_or(false))) {
      config_.fail("sliding_window", "is set: sliding-window attention is not supported for " + hf_arch);
    }
    hidden_ = config_.integer("hidden_size", 1, 1 << 16);
    heads_ = config_.integer("num_attention_heads", 1, 1024);
    kv_heads_ = config_.integer_opt("num_key_value_heads", 1, 1024).value_or(heads_);
    layers_ = config_.integer("num_hidden_layers", 1, 1024);
    vocab_size_ = config_.integer("vocab_size", 1, int64_t{1} << 24);
    head_dim_ = config_.integer_opt("head_dim", 1, 4096).value_or(0);
    if (head_dim_ == 0) {
      if (hidden_ % heads_ != 0) config_.fail("hidden_size", "is not a multiple of num_attention_heads");
      head_dim_ = hidden_ / heads_;
    }
    put("general.architecture", GgufValue::str(arch_));
    std::string name = dir_;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    put("general.name", GgufValue::str(name.substr(name.find_last_of('/') + 1)));
    put_arch("context_length",
             GgufValue::u64(static_cast<uint64_t>(config_.integer("max_position_embeddings", 1, int64_t{1} << 24))));
    put_arch("embedding_length", GgufValue::u64(static_cast<uint64_t>(hidden_)));
    put_arch("feed_forward_length",
             GgufValue::u64(static_cast<uint64_t>(config_.integer("intermediate_size", 1, 1 << 18))));
    put_arch("block_count", GgufValue::u64(static_cast<uint64_t>(layers_)));
    put_arch("attention.head_count", GgufValue::u64(static_cast<uint64_t>(heads_)));
    put_arch("attention.head_count_kv", GgufValue::u64(static_cast<uint64_t>(kv_heads_)));
    if (config_.find("head_dim")) {
      put_arch("attention.key_length", GgufValue::u64(static_cast<uint64_t>(head_dim_)));
      put_arch("attention.value_length", GgufValue::u64(static_cast<uint64_t>(head_dim_)));
    }
    const double eps = config_.number_opt("rms_norm_eps").value_or(1e-6);
    if (!(eps > 0) || eps > 1) config_.fail("rms_norm_eps", "must be in (0, 1]");
    put_arch("attention.layer_norm_rms_epsilon", GgufValue::f32(static_cast<float>(eps)));
    rope_theta_ = config_.number_opt("rope_theta").value_or(10000.0);
    if (!(rope_theta_ > 0) || !std::isfinite(rope_theta_)) config_.fail("rope_theta", "must be positive");
    put_arch("rope.freq_base", GgufValue::f32(static_cast<float>(rope_theta_)));
    read_rope_scaling();
  }

  // rope_scaling: null / "default", or Llama 3's "llama3" (-> rope_freqs.weight [head_dim / 2]).
  void read_rope_scaling() {
    const Json* rs = config_.find("rope_scaling");
    if (rs == nullptr) return;
    if (!rs->is_object()) config_.fail("rope_scaling", "must be an object or null");
    JsonFile s{config_.path + " rope_scaling", *rs};
    const std::string type = s.string_opt("rope_type").value_or(s.string_opt("type").value_or("default"));
    if (type == "default") return;
    if (type != "llama3" || arch_ != "llama") {
      config_.fail("rope_scaling.rope_type", "= \"" + type + "\" is not supported (supported: \"llama3\" for Llama)");
    }
    auto num = [&](const char* k, std::optional<double> dflt) {
      const auto v = s.number_opt(k);
      if (!v && !dflt) config_.fail(std::string("rope_scaling.") + k, "is missing");
      const double x = v ? *v : *dflt;
      if (!(x > 0) || !std::isfinite(x)) config_.fail(std::string("rope_scaling.") + k, "must be positive");
      return x;
    };
    const double factor = num("factor", std::nullopt), low = num("low_freq_factor", 1.0),
                 high = num("high_freq_factor", 4.0), old_ctx = num("original_max_position_embeddings", 8192.0);
    if (!(high > low)) config_.fail("rope_scaling.high_freq_factor", "must exceed low_freq_factor");
    const int64_t n = head_dim_ / 2;
    auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(n) * sizeof(float));
    auto* out = reinterpret_cast<float*>(buf.get());
    const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
    for (int64_t i = 0; i < n; ++i) {
      const double freq = 1.0 / std::pow(rope_theta_, static_cast<double>(2 * i) / static_cast<double>(head_dim_));
      const double wavelen = 2 * std::numbers::pi / freq;
      double f = 1.0;
      if (wavelen > low_wavelen) {
        f = factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_ctx / wavelen - low) / (high - low);
        f = 1.0 / ((1 - smooth) / factor + smooth);
      }
      out[i] = static_cast<float>(f);
    }
    add_tensor("rope_freqs.weight", GgmlType::F32, {n}, buf.get());
    owned_.push_back(std::move(buf));
  }

  // model.safetensors, or the shards that model.safetensors.index.json's weight_map names.
  void open_weights() {
    std::vector<std::string> files;
    const JsonFile index = hf::read_json(dir_, "model.safetensors.index.json", false);
    std::map<std::string, std::string> weight_map;
    if (index.present()) {
      const Json* wm = index.find("weight_map");
      if (wm == nullptr || !wm->is_object()) index.fail("weight_map", "is missing or not an object");
      std::set<std::string> seen;
      for (const auto& [tensor, file] : wm->items()) {
        if (!file.is_string()) index.fail("weight_map." + tensor, "must be a file name");
        const auto f = file.get<std::string>();
        if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
          index.fail("weight_map." + tensor, "= \"" + f + "\" is not a file name inside the directory");
        }
        weight_map[tensor] = f;
        if (seen.insert(f).second) files.push_back(f);
      }
    } else {
      files.push_back("model.safetensors");
    }
    for (const std::string& name : files) {
      auto st = SafetensorsFile::open(dir_ + "/" + name);
      for (const SafetensorsTensor& t : st->tensors()) {
        if (!by_name_.emplace(t.name, Source{&t, st->path()}).second) {
          throw Error("safetensors file '" + st->path() + "': tensor '" + t.name + "' is also in another shard");
        }
      }
      for (const auto& [alias, target] : st->metadata()) aliases_[alias] = target;
      shards_.push_back(std::move(st));
    }
    for (const auto& [tensor, file] : weight_map) {
      auto it = by_name_.find(tensor);
      if (it == by_name_.end() || it->second.file != dir_ + "/" + file) {
        index.fail("weight_map." + tensor, "names '" + file + "', which does not hold that tensor");
      }
    }
  }

  struct Source {
    const SafetensorsTensor* t;
    std::string file;
  };

  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, const uint8_t* data) {
    GgufTensorInfo info;
    info.name = name;
    info.ne = std::move(ne);
    info.type = type;
    info.size_bytes = static_cast<uint64_t>(row_size_bytes(type, info.ne[0]) * (info.ne.size() > 1 ? info.ne[1] : 1));
    info.data = data;
    tensors_.push_back(std::move(info));
  }

  static GgmlType ggml_type(const SafetensorsTensor& t, const std::string& file) {
    if (t.dtype == "F32") return GgmlType::F32;
    if (t.dtype == "F16") return GgmlType::F16;
    if (t.dtype == "BF16") return GgmlType::BF16;
    throw Error("safetensors file '" + file + "': tensor '" + t.name + "' has dtype " + t.dtype +
                " (supported: F32, F16, BF16)");
  }

  // One Hugging Face tensor -> its GGUF tensor: 1-D ones converted to F32, Llama's q/k rows
  // permuted, the rest in place.
  void bind(const std::string& hf_name, const Source& src, const std::string& name) {
    const SafetensorsTensor& t = *src.t;
    const GgmlType type = ggml_type(t, src.file);
    if (t.shape.empty() || t.shape.size() > 2) {
      throw Error("safetensors file '" + src.file + "': tensor '" + hf_name + "' must be 1-D or 2-D");
    }
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    if (t.shape.size() == 1) {
      auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(t.shape[0]) * sizeof(float));
      auto* out = reinterpret_cast<float*>(buf.get());
      for (int64_t i = 0; i < t.shape[0]; ++i) {
        if (type == GgmlType::F32) {
          std::memcpy(&out[i], t.data + 4 * i, 4);
        } else {
          uint16_t h = 0;
          std::memcpy(&h, t.data + 2 * i, 2);
          out[i] = type == GgmlType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
        }
      }
      add_tensor(name, GgmlType::F32, ne, buf.get());
      owned_.push_back(std::move(buf));
      return;
    }
    const bool is_q = name.ends_with(".attn_q.weight"), is_k = name.ends_with(".attn_k.weight");
    if (permute_qk_ && (is_q || is_k)) {
      const int64_t n_head = is_q ? heads_ : kv_heads_, rows = t.shape[0];
      if (rows % (2 * n_head) != 0) {
        throw Error("safetensors file '" + src.file + "': tensor '" + hf_name + "' has " + std::to_string(rows) +
                    " rows, not a multiple of 2 x " + std::to_string(n_head) + " heads");
      }
      // Row (h, j, i) of [heads, 2, half] moves to (h, i, j): pairs (i, i + half) of each head
      // become adjacent, which NORM RoPE rotates together.
      const int64_t half = rows / n_head / 2;
      const size_t row_bytes = static_cast<size_t>(t.shape[1]) * static_cast<size_t>(row_size_bytes(type, 1));
      auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(rows) * row_bytes);
      for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t j = 0; j < 2; ++j) {
          for (int64_t i = 0; i < half; ++i) {
            const int64_t from = (h * 2 + j) * half + i, to = (h * half + i) * 2 + j;
            std::memcpy(buf.get() + to * row_bytes, t.data + from * row_bytes, row_bytes);
          }
        }
      }
      add_tensor(name, type, ne, buf.get());
      owned_.push_back(std::move(buf));
      return;
    }
    if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(row_size_bytes(type, 1)) != 0) {
      // data_offsets that are not a multiple of the element size (legal, never written by the
      // safetensors library): copied, as the kernels read whole elements.
      auto buf = std::make_unique<uint8_t[]>(t.end - t.begin);
      std::memcpy(buf.get(), t.data, t.end - t.begin);
      add_tensor(name, type, ne, buf.get());
      owned_.push_back(std::move(buf));
      return;
    }
    add_tensor(name, type, ne, t.data);
  }

  void bind_tensors() {
    for (const auto& [hf_name, src] : by_name_) {
      const std::string name = gguf_name(hf_name, src.file);
      if (name.empty()) continue;
      if (name == "output.weight" && tied()) continue;
      bind(hf_name, src, name);
    }
    // A tied embedding saved once: __metadata__ maps the missing name to the stored one.
    if (!by_name_.contains("model.embed_tokens.weight")) {
      auto alias = aliases_.find("model.embed_tokens.weight");
      auto it = alias == aliases_.end() ? by_name_.end() : by_name_.find(alias->second);
      if (it == by_name_.end()) {
        throw Error("Hugging Face directory '" + dir_ + "': no tensor 'model.embed_tokens.weight' in its safetensors");
      }
      bind(it->first, it->second, "token_embd.weight");
    }
    if (!tied() && !by_name_.contains("lm_head.weight")) {
      config_.fail("tie_word_embeddings", "is false, but the safetensors hold no 'lm_head.weight'");
    }
    // vocab_size sizes the token table built next: checked against the matrices first, so that
    // a small model's config cannot make the loader allocate 2^24 token strings.
    for (const GgufTensorInfo& t : tensors_) {
      if ((t.name == "token_embd.weight" || t.name == "output.weight") &&
          (t.ne.size() != 2 || t.ne[1] != vocab_size_)) {
        config_.fail("vocab_size", "= " + std::to_string(vocab_size_) + ", but '" + t.name + "' has " +
                                       (t.ne.size() == 2 ? std::to_string(t.ne[1]) : std::string("no")) + " rows");
      }
    }
  }

  // Whether the output matrix is the embedding. config.json's tie_word_embeddings decides when
  // present; when absent, a missing lm_head.weight means tied (as llama.cpp's converter reads
  // it). An explicit false with no lm_head.weight is refused in bind_tensors(): transformers
  // would initialise a random head there, and tying instead would hide a broken checkpoint.
  bool tied() const {
    if (auto t = config_.boolean_opt("tie_word_embeddings")) return *t;
    return !by_name_.contains("lm_head.weight");
  }

  // generation_config.json's sampling fields -> general.sampling.* (llama.cpp's keys), the
  // defaults of requests that leave them out (as vLLM's generation_config="auto").
  void sampling_defaults() {
    if (!generation_.present()) return;
    if (auto t = generation_.number_opt("temperature")) {
      if (!(*t >= 0) || *t > std::numeric_limits<float>::max()) {
        generation_.fail("temperature", "must be in [0, 3.4e38]");
      }
      put("general.sampling.temp", GgufValue::f32(static_cast<float>(*t)));
    }
    if (auto p = generation_.number_opt("top_p")) {
      if (!(*p > 0) || *p > 1) generation_.fail("top_p", "must be in (0, 1]");
      put("general.sampling.top_p", GgufValue::f32(static_cast<float>(*p)));
    }
    if (auto k = generation_.integer_opt("top_k", 0, INT32_MAX)) {
      put("general.sampling.top_k", GgufValue::i32(static_cast<int32_t>(*k)));
    }
    if (auto p = generation_.number_opt("min_p")) {
      if (*p < 0 || *p > 1) generation_.fail("min_p", "must be in [0, 1]");
      put("general.sampling.min_p", GgufValue::f32(static_cast<float>(*p)));
    }
    if (auto r = generation_.number_opt("repetition_penalty")) {
      if (!(*r >= 0.01 && *r <= 100)) generation_.fail("repetition_penalty", "must be in [0.01, 100]");
      put("general.sampling.penalty_repeat", GgufValue::f32(static_cast<float>(*r)));
    }
  }

  std::string dir_;
  JsonFile config_, generation_;
  std::string arch_;
  bool permute_qk_ = false;
  int64_t hidden_ = 0, heads_ = 0, kv_heads_ = 0, layers_ = 0, head_dim_ = 0, vocab_size_ = 0;
  double rope_theta_ = 10000.0;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, Source> by_name_;
  std::map<std::string, std::string> aliases_;
  hf::Metadata kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::vector<std::unique_ptr<MappedFile>> mappings_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
};

}  // namespace

std::unique_ptr<GgufFile> open_hf_directory(const std::string& dir) {
  try {
    return Loader(dir).load();
  } catch (const Json::exception& e) {
    // A field of the wrong type read through Json::value() (e.g. "special": "yes"): still an
    // error naming the directory, never a foreign exception.
    throw Error("Hugging Face directory '" + dir + "': a JSON field has the wrong type: " + e.what());
  }
}

std::string hf_names_in(const std::string& message) {
  // The <arch>.* keys read_config writes, and the config.json field each comes from.
  constexpr std::pair<const char*, const char*> kKeys[] = {
      {".context_length", "max_position_embeddings"},
      {".embedding_length", "hidden_size"},
      {".feed_forward_length", "intermediate_size"},
      {".block_count", "num_hidden_layers"},
      {".attention.head_count_kv", "num_key_value_heads"},
      {".attention.head_count", "num_attention_heads"},
      {".attention.key_length", "head_dim"},
      {".attention.value_length", "head_dim"},
      {".attention.layer_norm_rms_epsilon", "rms_norm_eps"},
      {".rope.freq_base", "rope_theta"},
  };
  std::vector<std::string> names;
  auto add = [&](std::string s) {
    if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(std::move(s));
  };
  for (const ArchMap& a : kArchs) {
    for (const auto& [key, field] : kKeys) {
      const std::string k = std::string(a.arch) + key;
      for (size_t at = message.find(k); at != std::string::npos; at = message.find(k, at + 1)) {
        const size_t end = at + k.size();  // whole key only (head_count is a prefix of head_count_kv)
        if (end == message.size() ||
            !(std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '_' || message[end] == '.')) {
          add(k + " is config.json's \"" + field + "\"");
          break;
        }
      }
    }
  }
  constexpr std::pair<const char*, const char*> kGlobal[] = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                             {"output_norm.weight", "model.norm.weight"},
                                                             {"output.weight", "lm_head.weight"}};
  for (size_t q = message.find('\''); q != std::string::npos; q = message.find('\'', q + 1)) {
    const size_t end = message.find('\'', q + 1);
    if (end == std::string::npos) break;
    const std::string name = message.substr(q + 1, end - q - 1);
    q = end;
    for (const auto& [gguf, hf] : kGlobal) {
      if (name == gguf) add("'" + name + "' is the safetensors tensor '" + hf + "'");
    }
    int layer = -1, consumed = 0;
    if (std::sscanf(name.c_str(), "blk.%d.%n", &layer, &consumed) != 1 || consumed == 0) continue;
    for (const auto& [from, to] : kLayerTensors) {
      if (name.substr(static_cast<size_t>(consumed)) == to) {
        add("'" + name + "' is the safetensors tensor 'model.layers." + std::to_string(layer) + "." + from + "'");
      }
    }
  }
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? " (in Hugging Face terms: " : "; ") + n;
  return out.empty() ? out : out + ")";
}

std::unique_ptr<GgufFile> open_model_file(const std::string& path) {
  return is_dir(path) ? open_hf_directory(path) : GgufFile::open(path);
}

}  // namespace pagellm
