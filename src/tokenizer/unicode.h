// UTF-8 helpers and the GPT-2 byte <-> unicode mapping used by the tokenizers.
//
// Decoding follows llama.cpp src/unicode.cpp (unicode_cpts_from_utf8): lenient, an invalid or
// truncated sequence yields U+FFFD and consumes one byte, so tokenization never fails on bad
// input. The byte mapping is the one in OpenAI's GPT-2 encoder.py (bytes_to_unicode) and
// HF tokenizers' ByteLevel pre-tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm::unicode {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length in bytes of the UTF-8 sequence announced by `lead` (1 for continuation / invalid
// bytes, as llama.cpp's unicode_len_utf8: 0xxx/10xx -> 1, 110x -> 2, 1110 -> 3, 1111 -> 4).
inline size_t utf8_len(char lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<uint8_t>(lead) >> 4];
}

// Appends the UTF-8 encoding of `cpt` (cpt <= 0x10FFFF) to `out`.
void append_utf8(uint32_t cpt, std::string& out);

// Decodes one code point at `*offset` (advanced past it); lenient as described above.
uint32_t decode_utf8(std::string_view text, size_t* offset);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or code points > 0x10FFFF).
bool is_valid_utf8(std::string_view text);

// Returns well-formed UTF-8 with the code points llama.cpp would see for `text`: decoded
// leniently, then re-encoded; surrogates and values > 0x10FFFF also become U+FFFD.
std::string sanitize_utf8(std::string_view text);

// GPT-2 byte-level alphabet: byte b -> UTF-8 text of one printable code point.
// Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to themselves, the other 68 bytes
// map to U+0100 + n in byte order (so ' ' -> U+0120 "Ġ", '\n' -> U+010A "Ċ").
const std::array<std::string, 256>& byte_to_unicode();

// Inverse of byte_to_unicode on code points: returns the byte, or -1 when `cpt` is not in the
// alphabet.
int unicode_to_byte(uint32_t cpt);

}  // namespace pagellm::unicode
