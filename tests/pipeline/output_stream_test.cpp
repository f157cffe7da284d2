// OutputStream: stop strings across token boundaries, minimal holdback, EOS, max_tokens,
// special tokens and misuse, with the demo tokenizer; then a seeded property test that
// pushing a text's ids one by one ends exactly at the first stop-string occurrence.
#include "pipeline/output_stream.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "model/tokenizer/utf8.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

constexpr int32_t kEos = 0;  // <|endoftext|>, the demo model's only special token
const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

const Tokenizer& tok() {
  static const Tokenizer tokenizer =
      Tokenizer::from_file(test::model_dir("demo-target") / "tokenizer.json");
  return tokenizer;
}

/// The id of a piece of text that the tokenizer encodes as one token.
int32_t id(std::string_view piece) {
  const std::vector<int32_t> ids = tok().encode(piece);
  if (ids.size() != 1) throw std::runtime_error("test setup: '" + std::string(piece) + "' is not one token");
  return ids[0];
}

std::vector<int32_t> ids(std::initializer_list<std::string_view> pieces) {
  std::vector<int32_t> out;
  for (std::string_view piece : pieces) out.push_back(id(piece));
  return out;
}

/// The byte tokens of a character that the tokenizer splits (non-ASCII characters are
/// not in the demo vocabulary, so each byte is its own token).
std::vector<int32_t> byte_tokens(std::string_view character) {
  const std::vector<int32_t> out = tok().encode(character);
  if (out.size() != character.size()) throw std::runtime_error("test setup: not split into bytes");
  return out;
}

StopConditions stops(std::vector<std::string> stop_strings, int32_t max_tokens = 64) {
  StopConditions conditions;
  conditions.max_tokens = max_tokens;
  conditions.eos_ids = {kEos};
  conditions.stop_strings = std::move(stop_strings);
  return conditions;
}

/// Pushes `tokens` until the stream finishes; returns each step's text. Checks that
/// every piece is valid UTF-8 and that the pieces add up to text().
std::vector<std::string> push_all(OutputStream& stream, const std::vector<int32_t>& tokens) {
  std::vector<std::string> pieces;
  std::string total = stream.text();
  for (int32_t token : tokens) {
    if (stream.finished()) break;
    const OutputStream::Step step = stream.push(token);
    EXPECT_TRUE(tokenizer::utf8::is_valid(step.text));
    EXPECT_EQ(step.finished, stream.finished());
    if (step.finished) {
      EXPECT_EQ(step.reason, stream.reason());
    }
    total += step.text;
    pieces.push_back(step.text);
  }
  EXPECT_EQ(total, stream.text());
  return pieces;
}

using Pieces = std::vector<std::string>;

TEST(OutputStream, WithoutStopStringsTextStreamsAtOnceAndEndsAtLength) {
  const std::vector<int32_t> tokens = tok().encode("def f(x):\n    return x + 1");
  OutputStream stream(tok(), stops({}, static_cast<int32_t>(tokens.size())));
  IncrementalDecoder decoder(tok());
  for (int32_t token : tokens) {
    EXPECT_EQ(stream.push(token).text, decoder.push(token));  // nothing is held back
  }
  EXPECT_TRUE(stream.finished());
  EXPECT_EQ(stream.reason(), FinishReason::length);
  EXPECT_EQ(stream.text(), tok().decode(tokens, true));
  EXPECT_EQ(stream.tokens(), tokens);
}

TEST(OutputStream, StopStringAtTheVeryStart) {
  OutputStream stream(tok(), stops({"def"}));
  EXPECT_EQ(push_all(stream, ids({"def", " x"})), Pieces{""});
  EXPECT_EQ(stream.reason(), FinishReason::stop);
  EXPECT_EQ(stream.tokens(), ids({"def"}));

  // A stop string that is only the start of the first token's text.
  OutputStream partial(tok(), stops({"de"}));
  push_all(partial, ids({"def", " x"}));
  EXPECT_EQ(partial.text(), "");
  EXPECT_EQ(partial.tokens(), ids({"def"}));
}

TEST(OutputStream, StopStringEqualToAWholeToken) {
  OutputStream stream(tok(), stops({" return"}));
  EXPECT_EQ(push_all(stream, ids({"x", " return", " y"})), (Pieces{"x", ""}));
  EXPECT_EQ(stream.reason(), FinishReason::stop);
  EXPECT_EQ(stream.tokens(), ids({"x", " return"}));
}

TEST(OutputStream, StopStringSplitAcrossThreeTokens) {
  OutputStream stream(tok(), stops({"abc"}));
  EXPECT_EQ(push_all(stream, ids({"x", "a", "b", "c", "y"})), (Pieces{"x", "", "", ""}));
  EXPECT_EQ(stream.text(), "x");
  EXPECT_EQ(stream.reason(), FinishReason::stop);
  EXPECT_EQ(stream.tokens(), ids({"x", "a", "b", "c"}));

  // The same start that does not complete is released as soon as it cannot.
  OutputStream broken(tok(), stops({"abc"}));
  EXPECT_EQ(push_all(broken, ids({"a", "b", "x", "a"})), (Pieces{"", "", "abx", ""}));
  EXPECT_FALSE(broken.finished());
}

TEST(OutputStream, HoldbackIsTheLongestSuffixThatStartsAStopString) {
  OutputStream stream(tok(), stops({"ab", "xyz"}));
  // "ba": only the trailing "a" may start "ab".
  EXPECT_EQ(stream.push(id("ba")).text, "b");
  // "a" + "x": neither "ax" nor "a" can start a stop string any more; "x" can.
  EXPECT_EQ(stream.push(id("x")).text, "a");
  EXPECT_EQ(stream.push(id("y")).text, "");
  EXPECT_EQ(stream.push(id("d")).text, "xyd");
  EXPECT_EQ(stream.text(), "baxyd");

  // A suffix can be a prefix of a stop string in several ways: the longest is held.
  OutputStream nested(tok(), stops({"abab"}));
  EXPECT_EQ(push_all(nested, ids({"ab", "a"})), (Pieces{"", ""}));
  EXPECT_EQ(nested.push(id("a")).text, "aba");  // "abaa": only the last "a" may start "abab"
  EXPECT_EQ(nested.push(id("b")).text, "");
  EXPECT_EQ(nested.push(id("ab")).text, "");
  EXPECT_EQ(nested.reason(), FinishReason::stop);
  EXPECT_EQ(nested.text(), "aba");  // "abaabab" stops at its "abab" from byte 3
}

TEST(OutputStream, OverlappingStopStringsTheOneThatEndsFirstWins) {
  {  // "bc" completes first
    OutputStream stream(tok(), stops({"ab", "bc"}));
    push_all(stream, ids({"x", "b", "c", "a", "b"}));
    EXPECT_EQ(stream.text(), "x");
    EXPECT_EQ(stream.tokens(), ids({"x", "b", "c"}));
  }
  {  // "ab" completes first, although "bc" follows in the same text
    OutputStream stream(tok(), stops({"bc", "ab"}));
    push_all(stream, ids({"a", "b", "c"}));
    EXPECT_EQ(stream.text(), "");
    EXPECT_EQ(stream.tokens(), ids({"a", "b"}));
  }
  {  // both inside one token: the list order does not matter
    for (const auto& order : {std::vector<std::string>{"ab", "bc"}, std::vector<std::string>{"bc", "ab"}}) {
      OutputStream stream(tok(), stops(order));
      push_all(stream, ids({"x", "abc"}));
      EXPECT_EQ(stream.text(), "x");
      EXPECT_EQ(stream.tokens(), ids({"x", "abc"}));
    }
  }
  {  // a stop string inside a longer one ends first, even within one token
    OutputStream stream(tok(), stops({"abc", "b"}));
    push_all(stream, ids({"abc"}));
    EXPECT_EQ(stream.text(), "a");
  }
  {  // ending at the same character, the longer one wins
    OutputStream stream(tok(), stops({"bc", "abc"}));
    push_all(stream, ids({"x", "a", "b", "c"}));
    EXPECT_EQ(stream.text(), "x");
    EXPECT_EQ(stream.tokens(), ids({"x", "a", "b", "c"}));
  }
}

TEST(OutputStream, MultiByteCharacterSplitAcrossTokensNextToAStopString) {
  const std::vector<int32_t> e_acute = byte_tokens("\xC3\xA9");  // é, 2 byte tokens
  const std::vector<int32_t> zhong = byte_tokens("\xE4\xB8\xAD");  // 中, 3 byte tokens
  {  // the stop string follows the split character: the character is emitted whole
    OutputStream stream(tok(), stops({"x"}));
    const Pieces pieces = push_all(stream, {e_acute[0], e_acute[1], id("x")});
    EXPECT_EQ(pieces, (Pieces{"", "\xC3\xA9", ""}));
    EXPECT_EQ(stream.reason(), FinishReason::stop);
  }
  {  // the stop string is the split character itself
    OutputStream stream(tok(), stops({"\xE4\xB8\xAD"}));
    EXPECT_EQ(push_all(stream, {id("a"), zhong[0], zhong[1], zhong[2], id("b")}),
              (Pieces{"a", "", "", ""}));
    EXPECT_EQ(stream.tokens(), (std::vector<int32_t>{id("a"), zhong[0], zhong[1], zhong[2]}));
  }
  {  // the stop string starts with the split character: held whole, then released whole
    OutputStream stream(tok(), stops({"\xC3\xA9" "a"}));
    EXPECT_EQ(push_all(stream, {e_acute[0], e_acute[1], id("b")}), (Pieces{"", "", "\xC3\xA9" "b"}));
    OutputStream hit(tok(), stops({"\xC3\xA9" "a"}));
    push_all(hit, {id("x"), e_acute[0], e_acute[1], id("a")});
    EXPECT_EQ(hit.text(), "x");
    EXPECT_EQ(hit.reason(), FinishReason::stop);
  }
  {  // the stop string ends with the split character
    OutputStream stream(tok(), stops({"a\xC3\xA9"}));
    EXPECT_EQ(push_all(stream, {id("x"), id("a"), e_acute[0], e_acute[1]}), (Pieces{"x", "", "", ""}));
    EXPECT_EQ(stream.reason(), FinishReason::stop);
  }
  {  // a character broken off by the stop string's token becomes U+FFFD, as decode does
    OutputStream stream(tok(), stops({"a"}));
    push_all(stream, {zhong[0], zhong[1], id("a")});
    EXPECT_EQ(stream.text(), kReplacement);
    EXPECT_EQ(stream.reason(), FinishReason::stop);
  }
}

TEST(OutputStream, EosInsideARunFinishesAndKeepsTheToken) {
  OutputStream stream(tok(), stops({"abc"}));
  const std::vector<int32_t> run = {id("x"), id("a"), id("b"), kEos, id("c")};
  EXPECT_EQ(push_all(stream, run), (Pieces{"x", "", "", "ab"}));  // held text released
  EXPECT_EQ(stream.reason(), FinishReason::eos);
  EXPECT_EQ(stream.tokens(), (std::vector<int32_t>{id("x"), id("a"), id("b"), kEos}));
  EXPECT_EQ(stream.text(), "xab");

  // The EOS token adds no text even when special tokens are kept; an unfinished
  // character before it is released as U+FFFD.
  StopConditions keep = stops({});
  keep.skip_special_tokens = false;
  OutputStream kept(tok(), keep);
  push_all(kept, {id("x"), byte_tokens("\xC3\xA9")[0], kEos});
  EXPECT_EQ(kept.text(), "x" + kReplacement);
  EXPECT_EQ(kept.reason(), FinishReason::eos);

  // Not stopping at EOS: it is an ordinary (special) token.
  StopConditions ignore = stops({});
  ignore.stop_at_eos = false;
  OutputStream ignored(tok(), ignore);
  push_all(ignored, {id("x"), kEos, id("y")});
  EXPECT_FALSE(ignored.finished());
  EXPECT_EQ(ignored.text(), "xy");
}

TEST(OutputStream, MaxTokensReleasesHeldBackText) {
  OutputStream stream(tok(), stops({"abc"}, 3));
  EXPECT_EQ(push_all(stream, ids({"x", "a", "b", "c"})), (Pieces{"x", "", "ab"}));
  EXPECT_EQ(stream.reason(), FinishReason::length);
  EXPECT_EQ(stream.tokens(), ids({"x", "a", "b"}));

  // The last allowed token completing a stop string is a stop, and EOS stays EOS.
  OutputStream stop_last(tok(), stops({"ab"}, 2));
  push_all(stop_last, ids({"a", "b"}));
  EXPECT_EQ(stop_last.reason(), FinishReason::stop);
  EXPECT_EQ(stop_last.text(), "");
  OutputStream eos_last(tok(), stops({}, 2));
  push_all(eos_last, {id("a"), kEos});
  EXPECT_EQ(eos_last.reason(), FinishReason::eos);
}

TEST(OutputStream, MaxTokensOneAndZero) {
  OutputStream one(tok(), stops({"abc"}, 1));
  const OutputStream::Step step = one.push(id("ab"));
  EXPECT_TRUE(step.finished);
  EXPECT_EQ(step.reason, FinishReason::length);
  EXPECT_EQ(step.text, "ab");
  EXPECT_EQ(one.tokens().size(), 1u);

  OutputStream zero(tok(), stops({}, 0));
  EXPECT_TRUE(zero.finished());
  EXPECT_EQ(zero.reason(), FinishReason::length);
  EXPECT_THROW(zero.push(id("a")), Error);
}

TEST(OutputStream, SpecialTokensKeptOrSkipped) {
  StopConditions conditions = stops({});
  conditions.stop_at_eos = false;
  OutputStream skipped(tok(), conditions);
  push_all(skipped, {id("x"), kEos, id("y")});
  EXPECT_EQ(skipped.text(), "xy");

  conditions.skip_special_tokens = false;
  OutputStream kept(tok(), conditions);
  push_all(kept, {id("x"), kEos, id("y")});
  EXPECT_EQ(kept.text(), "x<|endoftext|>y");

  // Kept special text can hold back and match stop strings like any other text.
  conditions.stop_strings = {"|>y"};
  OutputStream stop_in_special(tok(), conditions);
  EXPECT_EQ(push_all(stop_in_special, {id("x"), kEos, id("y")}), (Pieces{"x", "<|endoftext", ""}));
  EXPECT_EQ(stop_in_special.text(), "x<|endoftext");
  conditions.skip_special_tokens = true;
  OutputStream stop_skipped(tok(), conditions);
  push_all(stop_skipped, {id("x"), kEos, id("y")});
  EXPECT_FALSE(stop_skipped.finished());
  EXPECT_EQ(stop_skipped.text(), "xy");
}

TEST(OutputStream, FinishFromOutsideReleasesHeldTextAndRecordsTheReason) {
  OutputStream stream(tok(), stops({"abc"}));
  push_all(stream, {id("x"), id("a"), byte_tokens("\xC3\xA9")[0]});
  const OutputStream::Step step = stream.finish(FinishReason::cancelled);
  EXPECT_EQ(step.text, "a" + kReplacement);
  EXPECT_TRUE(step.finished);
  EXPECT_EQ(step.reason, FinishReason::cancelled);
  EXPECT_EQ(stream.reason(), FinishReason::cancelled);
  EXPECT_EQ(stream.text(), "xa" + kReplacement);
  EXPECT_EQ(stream.tokens().size(), 3u);
}

TEST(OutputStream, MisuseIsRefused) {
  const auto code_of = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::internal;  // nothing thrown
  };
  OutputStream stream(tok(), stops({"ab"}));
  push_all(stream, ids({"ab"}));
  ASSERT_TRUE(stream.finished());
  EXPECT_EQ(code_of([&] { stream.push(id("x")); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { stream.push(kEos); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { stream.finish(FinishReason::cancelled); }), ErrorCode::invalid_argument);
  EXPECT_EQ(stream.tokens().size(), 1u);

  OutputStream fresh(tok(), stops({"abc"}, 4));
  fresh.push(id("a"));
  EXPECT_EQ(code_of([&] { fresh.push(tok().vocab_size()); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { fresh.push(-1); }), ErrorCode::invalid_argument);
  EXPECT_EQ(fresh.tokens().size(), 1u);  // unchanged by the refused ids
  EXPECT_EQ(fresh.push(id("b")).text, "");
  EXPECT_EQ(fresh.push(id("x")).text, "abx");

  EXPECT_EQ(code_of([] { OutputStream s(tok(), stops({"a", ""})); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([] { OutputStream s(tok(), stops({"\xC3"})); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([] { OutputStream s(tok(), stops({"\xED\xA0\x80"})); }),  // a surrogate
            ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([] { OutputStream s(tok(), stops({}, -1)); }), ErrorCode::invalid_argument);
}

// ---- property tests --------------------------------------------------------------

/// Random code-like text with multi-byte characters, from a seeded engine (raw
/// mt19937 outputs only, so the texts are the same on every platform).
std::string random_text(std::mt19937& engine) {
  static const std::vector<std::string> fragments = {
      "def ", "return ", "x", "y", " = ", "(", ")", ":", "\n", "    ", "for i in range(10):",
      "ab", "abc", "ba", "!", "..", " ", "#", "\"", "'", "0", "42", "if x == y:", "pass",
      "\xC3\xA9", "\xC3\x9F", "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80", "a\xC3\xA9" "b"};
  std::string text;
  const uint32_t count = 1 + engine() % 30;
  for (uint32_t i = 0; i < count; ++i) text += fragments[engine() % fragments.size()];
  return text;
}

bool is_char_boundary(const std::string& text, size_t pos) {
  return pos == text.size() || (static_cast<unsigned char>(text[pos]) & 0xC0) != 0x80;
}

/// The longest suffix of `text` that is a proper prefix of `stop`.
size_t reference_holdback(std::string_view text, std::string_view stop) {
  for (size_t k = std::min(text.size(), stop.size() - 1); k > 0; --k) {
    if (text.ends_with(stop.substr(0, k))) return k;
  }
  return 0;
}

TEST(OutputStream, PropertyTextEndsAtTheFirstOccurrenceOfARandomStopString) {
  std::mt19937 engine(20240611);
  int checked = 0;
  for (int round = 0; round < 600; ++round) {
    const std::vector<int32_t> tokens = tok().encode(random_text(engine));
    const std::string decoded = tok().decode(tokens, true);
    // A stop string of 1 to 8 characters starting at a random character of the text.
    std::vector<size_t> starts;
    for (size_t pos = 0; pos < decoded.size(); ++pos) {
      if (is_char_boundary(decoded, pos)) starts.push_back(pos);
    }
    const size_t start = starts[engine() % starts.size()];
    size_t end = start + 1;
    for (uint32_t chars = 1 + engine() % 8; end < decoded.size(); ++end) {
      if (is_char_boundary(decoded, end) && --chars == 0) break;
    }
    while (!is_char_boundary(decoded, end)) ++end;
    const std::string stop = decoded.substr(start, end - start);

    const size_t first = decoded.find(stop);
    const std::string expected_text = decoded.substr(0, first);
    // The completing token is the first whose bytes reach the occurrence's last byte.
    size_t covered = 0;
    size_t expected_count = 0;
    while (covered < first + stop.size()) covered += tok().token_bytes(tokens[expected_count++]).size();

    OutputStream stream(tok(), stops({stop}, static_cast<int32_t>(tokens.size()) + 1));
    covered = 0;
    for (int32_t token : tokens) {
      if (stream.finished()) break;
      const OutputStream::Step step = stream.push(token);
      ASSERT_TRUE(tokenizer::utf8::is_valid(step.text));
      // Emitted text is never taken back, and what is held back is exactly the
      // longest possible start of the stop string within the settled text.
      ASSERT_TRUE(std::string_view(expected_text).starts_with(stream.text()))
          << "round " << round << " stop '" << stop << "'";
      covered += tok().token_bytes(token).size();
      if (!stream.finished()) {
        size_t settled = covered;
        while (!is_char_boundary(decoded, settled)) --settled;
        ASSERT_EQ(settled - stream.text().size(),
                  reference_holdback(std::string_view(decoded).substr(0, settled), stop))
            << "round " << round;
      }
    }
    ASSERT_TRUE(stream.finished()) << "round " << round;
    EXPECT_EQ(stream.reason(), FinishReason::stop);
    EXPECT_EQ(stream.text(), expected_text) << "round " << round << " stop '" << stop << "'";
    EXPECT_EQ(stream.tokens(), std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(expected_count)))
        << "round " << round << " stop '" << stop << "'";
    ++checked;
  }
  EXPECT_EQ(checked, 600);
}

TEST(OutputStream, PropertySeveralStopStringsMatchACharacterByCharacterReference) {
  // Reference: walk the decoded text byte by byte; the first position where some stop
  // string ends (the longest if several) is where a character stream would stop.
  std::mt19937 engine(777);
  const std::vector<std::string> pool = {"ab", "bc", "abc", "x =", "):", "\n    ", "\xC3\xA9",
                                         "0\n", "y", "b", "c", "range(1", "\xE4\xB8\xAD", "!.", "42"};
  for (int round = 0; round < 2000; ++round) {
    const std::vector<int32_t> tokens = tok().encode(random_text(engine));
    const std::string decoded = tok().decode(tokens, true);
    std::vector<std::string> stop_strings;
    for (uint32_t n = 1 + engine() % 4; n > 0; --n) stop_strings.push_back(pool[engine() % pool.size()]);

    std::string expected_text = decoded;
    size_t stop_end = std::string::npos;
    for (size_t end = 1; end <= decoded.size() && stop_end == std::string::npos; ++end) {
      size_t longest = 0;
      for (const std::string& stop : stop_strings) {
        if (stop.size() <= end && stop.size() > longest && decoded.compare(end - stop.size(), stop.size(), stop) == 0) {
          longest = stop.size();
        }
      }
      if (longest > 0) {
        stop_end = end;
        expected_text = decoded.substr(0, end - longest);
      }
    }
    size_t expected_count = tokens.size();
    if (stop_end != std::string::npos) {
      size_t covered = 0;
      expected_count = 0;
      while (covered < stop_end) covered += tok().token_bytes(tokens[expected_count++]).size();
    }

    OutputStream stream(tok(), stops(stop_strings, static_cast<int32_t>(tokens.size())));
    push_all(stream, tokens);
    ASSERT_TRUE(stream.finished());
    EXPECT_EQ(stream.reason(), stop_end == std::string::npos ? FinishReason::length : FinishReason::stop)
        << "round " << round;
    EXPECT_EQ(stream.text(), expected_text) << "round " << round;
    EXPECT_EQ(stream.tokens().size(), expected_count) << "round " << round;
  }
}

}  // namespace
}  // namespace specpipe
