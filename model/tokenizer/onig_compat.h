#pragma once
/// tokenizer.json regexes are written for Oniguruma, the engine Hugging Face
/// tokenizers runs them with; this engine runs them with PCRE2. The syntax of the
/// patterns real tokenizers use is the same in both, but two classes differ:
///  - PCRE2's \s (and so \S) also matches U+180E MONGOLIAN VOWEL SEPARATOR, which
///    Unicode stopped calling white space in 6.3; Oniguruma follows White_Space.
///  - PCRE2 10.42 (Debian 12) has Unicode 14 tables, Oniguruma in tokenizers 0.2x has
///    Unicode 16: letters (\p{L}) and numbers (\p{N}) assigned in between are unknown
///    to PCRE2.
/// translate_onig_pattern rewrites those escapes into explicit classes so that both
/// engines split text identically. Left as they are (and so still differing on such
/// characters): \P{L} and \P{N} inside a bracketed class, and any other property.
#include <string>
#include <string_view>

namespace specpipe::tokenizer {

/// `pattern` with \s, \S, \p{L}, \pL, \p{N}, \pN (and \P{L}, \P{N} outside brackets)
/// replaced by classes that mean what Oniguruma means by them. Everything else is
/// copied unchanged, including \Q...\E quoted text and POSIX [:classes:].
std::string translate_onig_pattern(std::string_view pattern);

}  // namespace specpipe::tokenizer
