#include "tokenizer/unicode.h"

namespace pagellm::unicode {

void append_utf8(uint32_t cpt, std::string& out) {
  if (cpt < 0x80) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

namespace {

bool is_cont(std::string_view text, size_t i) {
  return i < text.size() && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80;
}

uint8_t byte_at(std::string_view text, size_t i) { return static_cast<uint8_t>(text[i]); }

}  // namespace

uint32_t decode_utf8(std::string_view text, size_t* offset) {
  const size_t i = *offset;
  const uint8_t b0 = byte_at(text, i);
  if (b0 < 0x80) {
    *offset += 1;
    return b0;
  }
  if ((b0 & 0xE0) == 0xC0 && is_cont(text, i + 1)) {
    *offset += 2;
    return ((b0 & 0x1Fu) << 6) | (byte_at(text, i + 1) & 0x3Fu);
  }
  if ((b0 & 0xF0) == 0xE0 && is_cont(text, i + 1) && is_cont(text, i + 2)) {
    *offset += 3;
    return ((b0 & 0x0Fu) << 12) | ((byte_at(text, i + 1) & 0x3Fu) << 6) | (byte_at(text, i + 2) & 0x3Fu);
  }
  if ((b0 & 0xF8) == 0xF0 && is_cont(text, i + 1) && is_cont(text, i + 2) && is_cont(text, i + 3)) {
    *offset += 4;
    return ((b0 & 0x07u) << 18) | ((byte_at(text, i + 1) & 0x3Fu) << 12) | ((byte_at(text, i + 2) & 0x3Fu) << 6) |
           (byte_at(text, i + 3) & 0x3Fu);
  }
  *offset += 1;  // continuation byte, truncated sequence or 0xF8..0xFF
  return kReplacementChar;
}

bool is_valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t b0 = byte_at(text, i);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t min_cpt = 0;
    if ((b0 & 0xE0) == 0xC0) {
      n = 2, min_cpt = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      n = 3, min_cpt = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      n = 4, min_cpt = 0x10000;
    } else {
      return false;
    }
    for (size_t k = 1; k < n; ++k) {
      if (!is_cont(text, i + k)) return false;
    }
    size_t off = i;
    const uint32_t cpt = decode_utf8(text, &off);
    if (cpt < min_cpt || cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

std::string sanitize_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  size_t off = 0;
  while (off < text.size()) {
    uint32_t cpt = decode_utf8(text, &off);
    if (cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) cpt = kReplacementChar;
    append_utf8(cpt, out);
  }
  return out;
}

namespace {

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> to_byte;  // code points used by the alphabet are all < 0x144
};

ByteTables make_byte_tables() {
  ByteTables t;
  t.to_byte.fill(-1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cpt = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
    append_utf8(cpt, t.to_unicode[b]);
    t.to_byte[cpt] = static_cast<int16_t>(b);
  }
  return t;
}

const ByteTables& byte_tables() {
  static const ByteTables tables = make_byte_tables();
  return tables;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return byte_tables().to_unicode; }

int unicode_to_byte(uint32_t cpt) { return cpt < byte_tables().to_byte.size() ? byte_tables().to_byte[cpt] : -1; }

}  // namespace pagellm::unicode
