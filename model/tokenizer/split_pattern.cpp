#include "model/tokenizer/split_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <string>

#include "core/error.h"
#include "model/tokenizer/onig_compat.h"

namespace specpipe::tokenizer {

struct SplitPattern::Compiled {
  pcre2_code* code = nullptr;
  explicit Compiled(pcre2_code* compiled_code) : code(compiled_code) {}
  ~Compiled() { pcre2_code_free(code); }
  Compiled(const Compiled&) = delete;
  Compiled& operator=(const Compiled&) = delete;
};

namespace {

std::string pcre2_message(int error_code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  const int length = pcre2_get_error_message(error_code, buffer.data(), buffer.size());
  if (length < 0) return fmt::format("PCRE2 error {}", error_code);
  return std::string(reinterpret_cast<const char*>(buffer.data()), static_cast<size_t>(length));
}

/// `as_written` is the pattern as tokenizer.json has it, for the error message.
pcre2_code* compile(std::string_view pattern, uint32_t options, std::string_view path,
                    std::string_view as_written) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;  // into the translated pattern: not worth reporting
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    fail(ErrorCode::unsupported, "{} '{}' is not supported: PCRE2 cannot compile it ({})", path,
         as_written, pcre2_message(error_code));
  }
  // Without JIT support pcre2_match falls back to the interpreter by itself.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return code;
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

size_t utf8_char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

}  // namespace

SplitPattern::SplitPattern(std::shared_ptr<const Compiled> compiled)
    : compiled_(std::move(compiled)) {}

SplitPattern SplitPattern::regex(std::string_view pattern, std::string_view path) {
  const std::string translated = translate_onig_pattern(pattern);
  return SplitPattern(
      std::make_shared<const Compiled>(compile(translated, PCRE2_UTF | PCRE2_UCP, path, pattern)));
}

SplitPattern SplitPattern::literal(std::string_view text, std::string_view path) {
  return SplitPattern(
      std::make_shared<const Compiled>(compile(text, PCRE2_UTF | PCRE2_LITERAL, path, text)));
}

void SplitPattern::split_isolated(std::string_view text,
                                  std::vector<std::string_view>& pieces) const {
  const std::unique_ptr<pcre2_match_data, MatchDataDeleter> match_data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr));
  if (!match_data) fail(ErrorCode::out_of_capacity, "pre-tokenizer: out of memory for PCRE2");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // The tokenizer validated the text once; PCRE2 would otherwise re-check the whole
  // subject on every call, which is quadratic over a long text.
  constexpr uint32_t kOptions = PCRE2_NO_UTF_CHECK;

  size_t search_from = 0;
  size_t gap_begin = 0;
  while (search_from <= text.size()) {
    int rc = pcre2_match(compiled_->code, subject, text.size(), search_from, kOptions,
                         match_data.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's 32 KiB stack is too small for this subject; the interpreter keeps
      // its backtracking state on the heap.
      rc = pcre2_match(compiled_->code, subject, text.size(), search_from, kOptions | PCRE2_NO_JIT,
                       match_data.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      fail(ErrorCode::out_of_capacity, "pre-tokenizer: the Split regex failed on the input: {}",
           pcre2_message(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.get());
    const size_t match_begin = ovector[0];
    const size_t match_end = ovector[1];
    if (match_begin < gap_begin || match_end < match_begin) {  // only \K can do this
      fail(ErrorCode::unsupported,
           "pre-tokenizer: a Split regex match that ends before it starts (\\K) is not supported");
    }
    if (match_begin > gap_begin) pieces.push_back(text.substr(gap_begin, match_begin - gap_begin));
    if (match_end > match_begin) {
      pieces.push_back(text.substr(match_begin, match_end - match_begin));
      search_from = match_end;
    } else {
      // An empty match: resume one character later so the loop always advances.
      if (match_end == text.size()) break;
      search_from = match_end + utf8_char_length(static_cast<unsigned char>(text[match_end]));
    }
    gap_begin = match_end;
  }
  if (gap_begin < text.size()) pieces.push_back(text.substr(gap_begin));
}

}  // namespace specpipe::tokenizer
