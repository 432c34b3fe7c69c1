#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"

namespace pagellm {

namespace kc = kernels;

kc::WeightView LlamaModel::bind(const GgufFile& f, const std::string& name, int64_t rows, int64_t cols,
                                bool for_matmul) {
  const GgufTensorInfo& t = f.tensor(name);
  if (t.ne.size() != 2 || t.ne[0] != cols || t.ne[1] != rows) {
    std::string shape;
    for (int64_t d : t.ne) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw Error("model '" + f.path() + "': tensor '" + name + "' has shape [" + shape + "], expected [" +
                std::to_string(cols) + ", " + std::to_string(rows) + "]");
  }
  if (!kc::matmul_supports(t.type)) {
    throw Error("model '" + f.path() + "': tensor '" + name + "' has type " + type_name(t.type) +
                ", which pagellm cannot compute with yet (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                "q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs)");
  }
  weight_bytes_ += static_cast<int64_t>(t.size_bytes);
  kc::WeightView view{t.type, rows, cols, t.data};
  view.isa = isa_;
  if (!for_matmul || !kc::repack_pays(view)) return view;
  repacked_.push_back(allocate_huge_page_buffer(t.size_bytes));
  const kc::WeightView packed = kc::repack_weight(view, repacked_.back().get(), pool_);
  f.drop_pages(t.data, t.size_bytes);
  return packed;
}

const float* LlamaModel::bind_norm(const GgufFile& f, const std::string& name, int64_t n) {
  const GgufTensorInfo& t = f.tensor(name);
  if (n == 0) n = config_.hidden_size;
  if (t.ne.size() != 1 || t.ne[0] != n || t.type != GgmlType::F32) {
    throw Error("model '" + f.path() + "': tensor '" + name + "' must be f32 of [" + std::to_string(n) + "]");
  }
  if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0) {
    throw Error("model '" + f.path() + "': tensor '" + name + "' is not 4-byte aligned");
  }
  weight_bytes_ += static_cast<int64_t>(t.size_bytes);
  return reinterpret_cast<const float*>(t.data);
}

LlamaModel::LlamaModel(const GgufFile& f, ThreadPool* pool, kernels::Isa isa)
    : config_(LlamaConfig::from_gguf(f)), pool_(pool), isa_(isa) {
  PAGELLM_CHECK(isa <= kc::cpu_isa(), std::string("LlamaModel: isa ") + kc::isa_name(isa) + " is not on this CPU");
  // The AMX probe swaps the process's SIGILL handler for a moment: here, on the loading thread,
  // not in the first prompt's matmul workers.
  if (isa >= kc::Isa::kAvx512Vnni) kc::amx_int8_usable();
  const LlamaConfig& c = config_;
  // Row lookups (kc::get_row, either layout); also the LM head when the embeddings are tied.
  token_embd_ = bind(f, "token_embd.weight", c.vocab_size, c.hidden_size, /*for_matmul=*/c.tie_word_embeddings);
  output_norm_ = bind_norm(f, "output_norm.weight");
  output_ = c.tie_word_embeddings ? token_embd_ : bind(f, "output.weight", c.vocab_size, c.hidden_size);
  if (c.rope_freqs) {
    rope_freqs_ = bind_norm(f, "rope_freqs.weight", c.rope_dim / 2);
    auto factor = [&](int64_t i) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", static_cast<double>(rope_freqs_[i]));
      return std::string(b);
    };
    // Each divides a RoPE angle (Llama 3.1's scaling factors, >= 1 as the converter writes them):
    // a zero, negative or non-finite one would give NaN logits at the first token.
    for (int64_t i = 0; i < c.rope_dim / 2; ++i) {
      if (!(std::isfinite(rope_freqs_[i]) && rope_freqs_[i] > 0.0f)) {
        throw Error("model '" + f.path() + "': rope_freqs.weight[" + std::to_string(i) + "] is " + factor(i) +
                    "; RoPE frequency factors must be finite and positive");
      }
    }
    // ... and leave every angle finite up to the last position (the angle grows with it): a tiny
    // factor (1e-38) divides one past FLT_MAX, whose cos and sin are NaN.
    std::vector<float> cos_sin(static_cast<size_t>(c.rope_dim));
    const int64_t last = c.max_position_embeddings - 1;
    for (const float base : {c.rope_theta, c.rope_theta_swa}) {
      if (base <= 0.0f) continue;  // no sliding-window base
      kc::rope_cos_sin_scaled(c.rope_dim, last, base, rope_freqs_, cos_sin.data());
      for (int64_t i = 0; i < c.rope_dim; ++i) {
        if (!std::isfinite(cos_sin[i])) {
          throw Error("model '" + f.path() + "': rope_freqs.weight[" + std::to_string(i / 2) + "] is " + factor(i / 2) +
                      "; at position " + std::to_string(last) + " the RoPE angle it divides is not " + "finite");
        }
      }
    }
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) bind_layer(f, i);
}

// The tensors of layer i that the config's options call for (ggml names).
void LlamaModel::bind_layer(const GgufFile& f, int64_t i) {
  const LlamaConfig& c = config_;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  const int64_t h = c.hidden_size, ffn = c.intermediate_size;
  const std::string p = "blk." + std::to_string(i) + ".";
  Layer l;
  l.attn_norm = bind_norm(f, p + "attn_norm.weight");
  if (c.fused_qkv) {
    l.w_qkv = bind(f, p + "attn_qkv.weight", q_dim + 2 * kv_dim, h);
  } else {
    l.wq = bind(f, p + "attn_q.weight", q_dim, h);
    l.wk = bind(f, p + "attn_k.weight", kv_dim, h);
    l.wv = bind(f, p + "attn_v.weight", kv_dim, h);
  }
  if (c.attention_bias) {
    l.bq = bind_norm(f, p + "attn_q.bias", q_dim);
    l.bk = bind_norm(f, p + "attn_k.bias", kv_dim);
    l.bv = bind_norm(f, p + "attn_v.bias", kv_dim);
  }
  if (c.qk_norm) {
    l.q_norm = bind_norm(f, p + "attn_q_norm.weight", c.head_dim);
    l.k_norm = bind_norm(f, p + "attn_k_norm.weight", c.head_dim);
  }
  l.wo = bind(f, p + "attn_output.weight", h, q_dim);
  if (c.post_norms) l.post_attn_norm = bind_norm(f, p + "post_attention_norm.weight");
  l.ffn_norm = bind_norm(f, p + "ffn_norm.weight");
  if (c.fused_gate_up) {
    l.w_gate_up = bind(f, p + "ffn_up.weight", 2 * ffn, h);
  } else {
    l.w_gate = bind(f, p + "ffn_gate.weight", ffn, h);
    l.w_up = bind(f, p + "ffn_up.weight", ffn, h);
  }
  l.w_down = bind(f, p + "ffn_down.weight", h, ffn);
  if (c.post_norms) l.post_ffn_norm = bind_norm(f, p + "post_ffw_norm.weight");
  layers_.push_back(l);
}

KvCacheShape LlamaModel::kv_shape(GgmlType dtype) const { return kv_cache_shape(config_, dtype); }

void LlamaModel::check_batch(const ForwardBatch& b, const KvCache& kv) const {
  const int64_t n = b.num_tokens();
  const KvCacheLayout& layout = kv.layout();
  PAGELLM_CHECK(static_cast<int64_t>(b.positions.size()) == n, "ForwardBatch arrays disagree on num_tokens");
  PAGELLM_CHECK(layout.num_layers() == config_.num_hidden_layers, "KV cache made for another model");
  PAGELLM_CHECK(static_cast<int32_t>(b.kv_groups.size()) == layout.num_groups(),
                "ForwardBatch has " + std::to_string(b.kv_groups.size()) + " KV cache groups, the cache " +
                    std::to_string(layout.num_groups()));
  PAGELLM_CHECK(b.num_seqs() >= 1 && b.query_start_loc.front() == 0 && b.query_start_loc.back() == n,
                "query_start_loc must span [0, num_tokens]");
  const int64_t num_slots = int64_t{kv.num_blocks()} * kv.block_size();
  for (int32_t g = 0; g < layout.num_groups(); ++g) {
    const KvGroupBatch& kg = b.kv_groups[g];
    const int64_t window = layout.group_sliding_window[g];
    PAGELLM_CHECK(static_cast<int64_t>(kg.slot_mapping.size()) == n, "ForwardBatch arrays disagree on num_tokens");
    PAGELLM_CHECK(static_cast<int64_t>(kg.block_tables.size()) == b.num_seqs() * kg.max_blocks_per_seq,
                  "block_tables is not [num_seqs, max_blocks_per_seq]");
    for (int64_t s = 0; s < b.num_seqs(); ++s) {
      PAGELLM_CHECK(b.query_start_loc[s] <= b.query_start_loc[s + 1], "query_start_loc not monotone");
      for (int64_t i = b.query_start_loc[s]; i < b.query_start_loc[s + 1]; ++i) {
        PAGELLM_CHECK(b.token_ids[i] >= 0 && b.token_ids[i] < config_.vocab_size,
                      "token id " + std::to_string(b.token_ids[i]) + " outside the vocabulary");
        PAGELLM_CHECK(b.positions[i] >= 0 && b.positions[i] < config_.max_position_embeddings,
                      "position " + std::to_string(b.positions[i]));
        PAGELLM_CHECK(kg.slot_mapping[i] >= 0 && kg.slot_mapping[i] < num_slots, "slot outside the KV cache");
        const int64_t last_block = b.positions[i] / kv.block_size();
        PAGELLM_CHECK(last_block < kg.max_blocks_per_seq, "position beyond the block table");
        // Every key the token attends to needs its block: from the window's start on.
        const int64_t first = window > 0 ? std::max<int64_t>(0, b.positions[i] - window + 1) : 0;
        for (int64_t j = first / kv.block_size(); j <= last_block; ++j) {
          const int32_t blk = kg.block_tables[s * kg.max_blocks_per_seq + j];
          PAGELLM_CHECK(blk >= 0 && blk < kv.num_blocks(), "block table entry outside the pool");
        }
      }
    }
  }
  for (int64_t idx : b.logits_indices) PAGELLM_CHECK(idx >= 0 && idx < n, "logits index");
}

const BlockQ8_0* LlamaModel::norm_for(std::initializer_list<const kc::WeightView*> ws, const float* weight,
                                      const int64_t* rows, int64_t num_rows) {
  const LlamaConfig& c = config_;
  const int64_t h = c.hidden_size;
  bool quantized = false;  // some weight multiplies q8_0 activations (the kernel table says which)
  for (const kc::WeightView* w : ws) quantized |= kc::vec_dot_type(w->type) == GgmlType::Q8_0;
  if (quantized) xq_.resize(static_cast<size_t>(num_rows * (h / kQK8_0)));
  for_tokens(num_rows, [&](int64_t j0, int64_t j1) {
    const float* x = rows != nullptr ? x_.data() : &x_[j0 * h];  // row indices are of x_
    kc::rms_norm_rows(x, rows != nullptr ? rows + j0 : nullptr, j1 - j0, weight, h, c.rms_norm_eps, &xn_[j0 * h],
                      quantized ? &xq_[j0 * (h / kQK8_0)] : nullptr, isa_);
  });
  return quantized ? xq_.data() : nullptr;
}

void LlamaModel::for_tokens(int64_t num_tokens, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kMinParallelTokens = 16;  // below: the dispatch costs more than it saves
  if (pool_ != nullptr && pool_->num_threads() > 1 && num_tokens >= kMinParallelTokens) {
    pool_->parallel_for(num_tokens, fn);
  } else {
    fn(0, num_tokens);
  }
}

void LlamaModel::attention_block(const Layer& l, int32_t layer, const ForwardBatch& b, KvCache& kv_cache,
                                 kc::Workspace& ws, const std::vector<int64_t>* keep) {
  const LlamaConfig& c = config_;
  const int64_t n = b.num_tokens();
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  // Queries: every token, or (keep) only the rows keep[j] (ascending), as q_ row j.
  const int64_t m = keep != nullptr ? static_cast<int64_t>(keep->size()) : n;
  auto q_row = [&](int64_t j) { return keep != nullptr ? (*keep)[j] : j; };  // token of q_ row j
  if (c.fused_qkv) {
    const BlockQ8_0* xq = norm_for({&l.w_qkv}, l.attn_norm, nullptr, n);
    const int64_t row = q_dim + 2 * kv_dim;  // [q | k | v] per token
    kc::matmul(l.w_qkv, xn_.data(), n, fused_.data(), pool_, ws, xq);
    for (int64_t t = 0; t < n; ++t) {
      const float* r = &fused_[t * row];
      std::copy(r + q_dim, r + q_dim + kv_dim, &k_[t * kv_dim]);
      std::copy(r + q_dim + kv_dim, r + row, &v_[t * kv_dim]);
    }
    for (int64_t j = 0; j < m; ++j) std::copy_n(&fused_[q_row(j) * row], q_dim, &q_[j * q_dim]);
  } else {
    const BlockQ8_0* xq = norm_for({&l.wq, &l.wk, &l.wv}, l.attn_norm, nullptr, n);
    if (keep == nullptr) {  // one parallel region for the three
      const kc::MatmulOut outs[] = {{&l.wk, k_.data()}, {&l.wv, v_.data()}, {&l.wq, q_.data()}};
      kc::matmul_many(outs, xn_.data(), n, pool_, ws, xq);
    } else {
      const kc::MatmulOut outs[] = {{&l.wk, k_.data()}, {&l.wv, v_.data()}};
      kc::matmul_many(outs, xn_.data(), n, pool_, ws, xq);
      // (the kept rows normed again into rows 0 .. m - 1: the same bits, rms_norm is per row)
      xq = norm_for({&l.wq}, l.attn_norm, keep->data(), m);
      kc::matmul(l.wq, xn_.data(), m, q_.data(), pool_, ws, xq);
    }
  }
  const bool sliding = c.is_sliding(layer);
  const std::vector<float>& cos_sin = sliding ? rope_cos_sin_swa_ : rope_cos_sin_;
  for_tokens(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {  // keys and values
      float* kt = &k_[t * kv_dim];
      if (l.bq != nullptr) {
        for (int64_t i = 0; i < kv_dim; ++i) kt[i] += l.bk[i];
        for (int64_t i = 0; i < kv_dim; ++i) v_[t * kv_dim + i] += l.bv[i];
      }
      if (l.k_norm != nullptr) {  // RMSNorm of each head
        for (int64_t h = 0; h < c.num_key_value_heads; ++h)
          kc::rms_norm(kt + h * c.head_dim, l.k_norm, c.head_dim, c.rms_norm_eps, kt + h * c.head_dim);
      }
      const float* cs = &cos_sin[t * c.rope_dim];
      if (c.rope_type == RopeType::kNeox) {
        kc::rope_neox(kt, c.num_key_value_heads, c.head_dim, c.rope_dim, cs);
      } else {
        kc::rope(kt, c.num_key_value_heads, c.head_dim, c.rope_dim, cs);
      }
    }
  });
  for_tokens(m, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {  // queries
      float* qt = &q_[j * q_dim];
      if (l.bq != nullptr) {
        for (int64_t i = 0; i < q_dim; ++i) qt[i] += l.bq[i];
      }
      if (l.q_norm != nullptr) {
        for (int64_t h = 0; h < c.num_attention_heads; ++h)
          kc::rms_norm(qt + h * c.head_dim, l.q_norm, c.head_dim, c.rms_norm_eps, qt + h * c.head_dim);
      }
      const float* cs = &cos_sin[q_row(j) * c.rope_dim];
      if (c.rope_type == RopeType::kNeox) {
        kc::rope_neox(qt, c.num_attention_heads, c.head_dim, c.rope_dim, cs);
      } else {
        kc::rope(qt, c.num_attention_heads, c.head_dim, c.rope_dim, cs);
      }
    }
  });
  kc::KvLayerView view = kv_cache.layer(layer);
  view.isa = isa_;
  const KvGroupBatch& kg = b.kv_groups[kv_cache.layout().layer_group[layer]];
  kc::write_kv(view, k_.data(), v_.data(), kg.slot_mapping.data(), n);
  kc::AttentionBatch ab;
  ab.query_start_loc = b.query_start_loc.data();
  ab.positions = b.positions.data();
  ab.block_tables = kg.block_tables.data();
  ab.num_seqs = b.num_seqs();
  ab.max_blocks_per_seq = kg.max_blocks_per_seq;
  ab.sliding_window = sliding ? c.sliding_window : 0;
  std::vector<int64_t> kept_start, kept_positions;  // the batch of the kept queries
  if (keep != nullptr) {
    kept_start.assign(b.num_seqs() + 1, 0);
    kept_positions.resize(m);
    int64_t j = 0;
    for (int64_t s = 0; s < b.num_seqs(); ++s) {
      for (; j < m && (*keep)[j] < b.query_start_loc[s + 1]; ++j) kept_positions[j] = b.positions[(*keep)[j]];
      kept_start[s + 1] = j;
    }
    ab.query_start_loc = kept_start.data();
    ab.positions = kept_positions.data();
  }
  float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.scale_q) {  // q scaled before attention, as the reference graph does (gemma3, phi3)
    for (int64_t i = 0; i < m * q_dim; ++i) q_[i] *= scale;
    scale = 1.0f;
  }
  kc::paged_attention(q_.data(), view, ab, c.num_attention_heads, scale, attn_.data(), pool_, ws);
  if (keep != nullptr) {
    // Rows keep[j] (ascending, so keep[j] >= j and no row is overwritten before it is read) of
    // x_ move to row j.
    const int64_t h = c.hidden_size;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t r = (*keep)[j];
      if (r != j) std::copy(&x_[r * h], &x_[(r + 1) * h], &x_[j * h]);
    }
  }
  kc::matmul(l.wo, attn_.data(), m, out_.data(), pool_, ws);
  residual_add(l.post_attn_norm, m);
}

void LlamaModel::residual_add(const float* post_norm, int64_t n) {
  const int64_t h = config_.hidden_size;
  for_tokens(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = &out_[t * h];
      if (post_norm != nullptr) kc::rms_norm(o, post_norm, h, config_.rms_norm_eps, o);
      float* x = &x_[t * h];
      for (int64_t i = 0; i < h; ++i) x[i] += o[i];
    }
  });
}

void LlamaModel::mlp_block(const Layer& l, int64_t n, kc::Workspace& ws) {
  const LlamaConfig& c = config_;
  const int64_t ffn = c.intermediate_size;
  if (c.fused_gate_up) {
    const BlockQ8_0* xq = norm_for({&l.w_gate_up}, l.ffn_norm, nullptr, n);
    kc::matmul(l.w_gate_up, xn_.data(), n, fused_.data(), pool_, ws, xq);
    for (int64_t t = 0; t < n; ++t) {  // [gate | up] per token
      const float* r = &fused_[t * 2 * ffn];
      std::copy(r, r + ffn, &gate_[t * ffn]);
      std::copy(r + ffn, r + 2 * ffn, &up_[t * ffn]);
    }
  } else {
    const BlockQ8_0* xq = norm_for({&l.w_gate, &l.w_up}, l.ffn_norm, nullptr, n);
    const kc::MatmulOut outs[] = {{&l.w_gate, gate_.data()}, {&l.w_up, up_.data()}};
    kc::matmul_many(outs, xn_.data(), n, pool_, ws, xq);
  }
  for_tokens(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* g = &gate_[t * ffn];
      if (c.hidden_act == HiddenAct::kGeluTanh) {
        kc::gelu_tanh_mul(g, &up_[t * ffn], ffn, g);
      } else {
        kc::silu_mul(g, &up_[t * ffn], ffn, g, isa_);
      }
    }
  });
  kc::matmul(l.w_down, gate_.data(), n, out_.data(), pool_, ws);
  residual_add(l.post_ffn_norm, n);
}

void LlamaModel::forward(const ForwardBatch& b, KvCache& kv_cache, kc::Workspace& ws, std::vector<float>& logits) {
  check_batch(b, kv_cache);
  const LlamaConfig& c = config_;
  const int64_t n = b.num_tokens();
  x_.resize(n * c.hidden_size);
  xn_.resize(n * c.hidden_size);
  out_.resize(n * c.hidden_size);
  q_.resize(n * c.num_attention_heads * c.head_dim);
  attn_.resize(q_.size());
  k_.resize(n * c.num_key_value_heads * c.head_dim);
  v_.resize(k_.size());
  gate_.resize(n * c.intermediate_size);
  up_.resize(gate_.size());
  fused_.resize(n * std::max(c.fused_qkv ? (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim : 0,
                             c.fused_gate_up ? 2 * c.intermediate_size : 0));
  // One table per position (and RoPE base), for q and k of every layer.
  rope_cos_sin_.resize(n * c.rope_dim);
  rope_cos_sin_swa_.resize(c.sliding_window > 0 ? n * c.rope_dim : 0);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t pos = b.positions[t];
    kc::rope_cos_sin_scaled(c.rope_dim, pos, c.rope_theta, rope_freqs_, &rope_cos_sin_[t * c.rope_dim]);
    if (c.sliding_window > 0) {
      kc::rope_cos_sin_scaled(c.rope_dim, pos, c.rope_theta_swa, rope_freqs_, &rope_cos_sin_swa_[t * c.rope_dim]);
    }
  }

  for (int64_t t = 0; t < n; ++t) {
    float* xt = &x_[t * c.hidden_size];
    kc::get_row(token_embd_, b.token_ids[t], xt, ws);
    if (c.embedding_scale != 1.0f) {
      for (int64_t i = 0; i < c.hidden_size; ++i) xt[i] *= c.embedding_scale;
    }
  }
  const auto num_layers = static_cast<int32_t>(layers_.size());
  PAGELLM_CHECK(b.num_layers >= 0 && b.num_layers <= num_layers, "num_layers outside [0, num_hidden_layers]");
  // The last layer run needs every token's K/V (written there, read by later steps), but its
  // queries, attention, output projection, MLP and the final norm only for the rows whose logits
  // are wanted (a prompt's last token; none for a chunk in the middle of a prompt). When those
  // rows ascend, only they are computed, at the front of the buffers. Each row's arithmetic does
  // not depend on the batch (kernels::matmul, paged_attention), so the logits keep their bits.
  const int64_t num_logits = static_cast<int64_t>(b.logits_indices.size());
  bool trim = num_logits < n;
  for (int64_t j = 1; trim && j < num_logits; ++j) trim = b.logits_indices[j - 1] < b.logits_indices[j];
  const int32_t run = b.num_layers > 0 ? b.num_layers : num_layers;
  for (int32_t i = 0; i < run; ++i) {
    const bool last = trim && i == run - 1;
    attention_block(layers_[i], i, b, kv_cache, ws, last ? &b.logits_indices : nullptr);
    mlp_block(layers_[i], last ? num_logits : n, ws);
  }
  // Final norm only for the rows whose logits are wanted (rows 0 .. num_logits - 1 when trimmed).
  const int64_t* rows = trim && run > 0 ? nullptr : b.logits_indices.data();
  const BlockQ8_0* xq = norm_for({&output_}, output_norm_, rows, num_logits);
  logits.resize(num_logits * c.vocab_size);
  kc::matmul(output_, xn_.data(), num_logits, logits.data(), pool_, ws, xq);
}

}  // namespace pagellm
