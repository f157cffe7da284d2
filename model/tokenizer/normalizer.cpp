#include "model/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>

#include "core/error.h"
#include "model/tokenizer/utf8.h"

namespace specpipe::tokenizer {
namespace {

constexpr std::string_view kSupported = "NFC, NFD, NFKC, NFKD, Sequence";

/// Code points on which Hugging Face's normaliser and utf8proc disagree. tokenizers
/// normalises with the unicode-normalization-alignments crate, whose tables predate
/// Unicode 10: characters assigned since then are, to it, inert (combining class 0, no
/// decomposition, no composition), while utf8proc knows them. These are the ones
/// where that matters: marks with a non-zero combining class, characters with a
/// (compatibility) decomposition, and the parts of new canonical compositions.
/// Found by comparing both on every code point (tokenizers 0.23, utf8proc 2.8).
struct CodePointRange {
  char32_t first, last;
};
constexpr CodePointRange kInertForHuggingFace[] = {
    {0x7FD, 0x7FD},     {0x898, 0x89F},     {0x8CA, 0x8D3},     {0x9FE, 0x9FE},
    {0xC3C, 0xC3C},     {0xD3B, 0xD3C},     {0xEBA, 0xEBA},     {0x1715, 0x1715},
    {0x1ABF, 0x1ACE},   {0x1DF6, 0x1DFA},   {0x32FF, 0x32FF},   {0xA7F2, 0xA7F4},
    {0xA82C, 0xA82C},   {0xAB69, 0xAB69},   {0x10781, 0x10785}, {0x10787, 0x107B0},
    {0x107B2, 0x107BA}, {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF},
    {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x1133B, 0x1133B},
    {0x1145E, 0x1145E}, {0x11839, 0x1183A}, {0x11930, 0x11930}, {0x11935, 0x11935},
    {0x11938, 0x11938}, {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0},
    {0x11A34, 0x11A34}, {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42},
    {0x11D44, 0x11D45}, {0x11D97, 0x11D97}, {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1},
    {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE},
    {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF}, {0x1F16C, 0x1F16C}, {0x1FBF0, 0x1FBF9},
};

bool is_inert_for_hugging_face(char32_t cp) {
  if (cp < kInertForHuggingFace[0].first) return false;
  const auto* it = std::upper_bound(
      std::begin(kInertForHuggingFace), std::end(kInertForHuggingFace), cp,
      [](char32_t value, const CodePointRange& range) { return value < range.first; });
  return it != std::begin(kInertForHuggingFace) && cp <= std::prev(it)->last;
}

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

utf8proc_option_t options_of(UnicodeForm form) {
  switch (form) {
    case UnicodeForm::nfc:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case UnicodeForm::nfd:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case UnicodeForm::nfkc:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case UnicodeForm::nfkd:
      return static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  SPECPIPE_CHECK(false);
}

/// utf8proc's normalisation of `text` (valid UTF-8), appended to `out`.
void append_utf8proc_normalized(std::string_view text, UnicodeForm form, std::string& out) {
  if (is_ascii(text)) {  // ASCII is invariant under every form
    out.append(text);
    return;
  }
  utf8proc_uint8_t* result = nullptr;
  // An explicit length (no UTF8PROC_NULLTERM) keeps embedded NUL characters.
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &result, options_of(form));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  if (length < 0) {
    fail(ErrorCode::invalid_argument, "Unicode normalisation failed: {}", utf8proc_errmsg(length));
  }
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
}

/// Hugging Face's normalisation of `text` (valid UTF-8), appended to `out`. A
/// character inert to Hugging Face blocks reordering and composition across it and
/// is itself left alone, so the stretches between such characters go to utf8proc
/// separately and those characters are copied through.
void append_hugging_face_normalized(std::string_view text, UnicodeForm form, std::string& out) {
  size_t stretch_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t char_begin = pos;
    if (!is_inert_for_hugging_face(utf8::decode_next(text, pos))) continue;
    append_utf8proc_normalized(text.substr(stretch_begin, char_begin - stretch_begin), form, out);
    out.append(text.substr(char_begin, pos - char_begin));
    stretch_begin = pos;
  }
  append_utf8proc_normalized(text.substr(stretch_begin), form, out);
}

}  // namespace

std::string normalize_unicode(std::string_view text, UnicodeForm form) {
  // Normalisation never reaches across the start of an ASCII character: ASCII
  // characters have combining class 0, no decomposition, and are never the second
  // half of a composition. So only runs of non-ASCII characters, each with the ASCII
  // character just before it (a base that may compose with a following mark), need
  // utf8proc; source code is mostly ASCII.
  std::string out;
  out.reserve(text.size());
  size_t copied_until = 0;  // text before this offset is in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t run_begin = pos > copied_until ? pos - 1 : pos;
    out.append(text.substr(copied_until, run_begin - copied_until));
    while (pos < text.size() && static_cast<unsigned char>(text[pos]) >= 0x80) {
      (void)utf8::decode_next(text, pos);
    }
    append_hugging_face_normalized(text.substr(run_begin, pos - run_begin), form, out);
    copied_until = pos;
  }
  out.append(text.substr(copied_until));
  return out;
}

Normalizer Normalizer::from_json(const Json& node, std::string_view path) {
  Normalizer normalizer;
  if (!node.is_null()) normalizer.append_steps(node, std::string(path));
  return normalizer;
}

void Normalizer::append_steps(const Json& node, const std::string& path) {
  require_object(node, path);
  const std::string type = require_string(node, "type", path);
  if (type == "NFC") {
    forms_.push_back(UnicodeForm::nfc);
  } else if (type == "NFD") {
    forms_.push_back(UnicodeForm::nfd);
  } else if (type == "NFKC") {
    forms_.push_back(UnicodeForm::nfkc);
  } else if (type == "NFKD") {
    forms_.push_back(UnicodeForm::nfkd);
  } else if (type == "Sequence") {
    const std::string steps_path = member_path(path, "normalizers");
    const Json* steps = find_member(node, "normalizers");
    if (steps == nullptr || !steps->is_array()) fail_malformed(steps_path, "must be a list");
    for (size_t i = 0; i < steps->size(); ++i) {
      append_steps((*steps)[i], element_path(steps_path, i));
    }
  } else {
    fail_unsupported(member_path(path, "type"), type, kSupported);
  }
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string result(text);
  for (const UnicodeForm form : forms_) result = normalize_unicode(result, form);
  return result;
}

}  // namespace specpipe::tokenizer
