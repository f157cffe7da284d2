// Unit tests of the tokenizer on the demo tokenizer.json: round trips over random
// strings, special tokens, lookups, errors on bad input, and concurrent encoding.
#include "model/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/utf8.h"
#include "tests/model/tokenizer_test_support.h"

namespace specpipe {
namespace {

using test::demo_tokenizer;

constexpr int32_t kEndOfText = 0;  // <|endoftext|>, the one added token

std::string nfc(std::string_view text) {
  return tokenizer::normalize_unicode(text, tokenizer::UnicodeForm::nfc);
}

TEST(Tokenizer, DecodeOfEncodeIsTheNfcText) {
  test::RandomText random(20240601);
  for (int i = 0; i < 4000; ++i) {
    const std::string text = random.next();
    const std::vector<int32_t> ids = demo_tokenizer().encode(text);
    ASSERT_EQ(demo_tokenizer().decode(ids), nfc(text)) << "string " << i;
  }
}

TEST(Tokenizer, EncodeIsDeterministicAcrossCacheStates) {
  // The first encode of a piece runs the merges, later ones read the cache.
  test::RandomText random(7);
  const Tokenizer fresh = Tokenizer::from_file(test::demo_tokenizer_path());
  for (int i = 0; i < 300; ++i) {
    const std::string text = random.next();
    ASSERT_EQ(fresh.encode(text), fresh.encode(text));
    ASSERT_EQ(fresh.encode(text), demo_tokenizer().encode(text));
  }
}

TEST(Tokenizer, NormalisesLikeHuggingFace) {
  // Expected values from tokenizers 0.23 (NFC normalizer).
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");
  EXPECT_EQ(nfc("a\u0301\u0316"), "\u00e1\u0316");  // reordered, then composed
  EXPECT_EQ(nfc("\u212b"), "\u00c5");               // a singleton decomposition
  EXPECT_EQ(nfc("a<\u0338b"), "a\u226eb");          // an ASCII base composes too
  // Characters newer than tokenizers' Unicode tables stay as they are there.
  EXPECT_EQ(nfc("a\u0345\u08cf"), "a\u0345\u08cf");
  EXPECT_EQ(nfc("\U00011935\U00011930"), "\U00011935\U00011930");
  EXPECT_EQ(demo_tokenizer().encode("e\u0301"), demo_tokenizer().encode("\u00e9"));
  EXPECT_EQ(demo_tokenizer().encode("\u00e9"), (std::vector<int32_t>{128, 103}));
}

TEST(Tokenizer, KnownEncodings) {
  EXPECT_EQ(demo_tokenizer().encode(""), std::vector<int32_t>{});
  EXPECT_EQ(demo_tokenizer().encode("Hello"), (std::vector<int32_t>{40, 402, 310}));
  EXPECT_EQ(demo_tokenizer().encode(" "), std::vector<int32_t>{221});
  EXPECT_EQ(demo_tokenizer().encode("\U0001F600"), (std::vector<int32_t>{864, 247, 223}));
}

TEST(Tokenizer, SpecialTokensAreMatchedInText) {
  const Tokenizer& tok = demo_tokenizer();
  EXPECT_EQ(tok.encode("a<|endoftext|>b"), (std::vector<int32_t>{65, kEndOfText, 66}));
  EXPECT_EQ(tok.encode("<|endoftext|><|endoftext|>"),
            (std::vector<int32_t>{kEndOfText, kEndOfText}));
  // A near miss is ordinary text.
  const std::vector<int32_t> near_miss = tok.encode("<|endoftext|");
  EXPECT_EQ(std::count(near_miss.begin(), near_miss.end(), kEndOfText), 0);
  EXPECT_EQ(tok.decode(near_miss), "<|endoftext|");
}

TEST(Tokenizer, DecodeKeepsOrSkipsSpecialTokens) {
  const Tokenizer& tok = demo_tokenizer();
  const std::vector<int32_t> ids = tok.encode("a<|endoftext|> b");
  EXPECT_EQ(tok.decode(ids), "a<|endoftext|> b");
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "a b");
  // A character split around a skipped special token still joins up, as in HF.
  const std::vector<int32_t> split_smiley = {864, kEndOfText, 247, 223};
  EXPECT_EQ(tok.decode(split_smiley, true), "\U0001F600");
  EXPECT_EQ(tok.decode(split_smiley, false), "\uFFFD<|endoftext|>\uFFFD\uFFFD");
}

TEST(Tokenizer, DecodeReplacesInvalidUtf8LikeHuggingFace) {
  const Tokenizer& tok = demo_tokenizer();
  // Expected values from tokenizers 0.23: one U+FFFD per maximal invalid subpart.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{128}), "\uFFFD");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{65, 128, 66}), "a\uFFFDb");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{240, 159}), "\uFFFD\uFFFD");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{173, 254}), "\uFFFD");  // F0 9F: one unfinished
}

TEST(Tokenizer, Utf8RepairFollowsMaximalSubparts) {
  using tokenizer::utf8::repair;
  EXPECT_EQ(repair("ok"), "ok");
  EXPECT_EQ(repair("\xF0\x9F\x98"), "\uFFFD");  // unfinished 4-byte sequence
  EXPECT_EQ(repair("\xF0\x9F\x98"
                   "a"),
            "\uFFFDa");                                     // broken by 'a'
  EXPECT_EQ(repair("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // a surrogate: 3 subparts
  EXPECT_EQ(repair("\xE0\x80"), "\uFFFD\uFFFD");            // overlong lead
  EXPECT_EQ(repair("\xC0\xAF"), "\uFFFD\uFFFD");
  EXPECT_EQ(repair("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");  // above U+10FFFF
  EXPECT_EQ(repair(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Tokenizer, Lookups) {
  const Tokenizer& tok = demo_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 8192);
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), kEndOfText);
  EXPECT_EQ(tok.token_to_id("\u0120"), 221);  // "Ġ", the space
  EXPECT_EQ(tok.token_to_id("\u010a"), 199);  // "Ċ", the newline
  EXPECT_EQ(tok.token_to_id("no such token"), std::nullopt);
  EXPECT_TRUE(tok.is_special(kEndOfText));
  EXPECT_FALSE(tok.is_special(65));
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(tok.vocab_size()));
  EXPECT_EQ(tok.token_bytes(221), " ");
  EXPECT_EQ(tok.token_bytes(kEndOfText), "<|endoftext|>");
}

void expect_invalid_id(int32_t id) {
  try {
    (void)demo_tokenizer().decode(std::vector<int32_t>{65, id});
    FAIL() << "decode accepted id " << id;
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(error.what()).find(std::to_string(id)), std::string::npos)
        << error.what();
  }
}

TEST(Tokenizer, DecodeRefusesIdsOutOfRange) {
  expect_invalid_id(8192);
  expect_invalid_id(-1);
  expect_invalid_id(1 << 30);
}

TEST(Tokenizer, EncodeRefusesInvalidUtf8) {
  for (const std::string bad : {"abc\xFF", "\xC3", "x\xED\xA0\x80y"}) {
    try {
      (void)demo_tokenizer().encode(bad);
      FAIL() << "encode accepted invalid UTF-8";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(error.what()).find("UTF-8"), std::string::npos);
    }
  }
}

TEST(Tokenizer, LongRunsAreHandled) {
  // Long single pieces: a run of spaces, of punctuation, of one letter.
  for (const char c : {' ', '=', 'a', '\n'}) {
    const std::string text(20000, c);
    EXPECT_EQ(demo_tokenizer().decode(demo_tokenizer().encode(text)), text);
  }
}

TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
  const Tokenizer fresh = Tokenizer::from_file(test::demo_tokenizer_path());
  std::vector<std::string> texts;
  test::RandomText random(99);
  for (int i = 0; i < 400; ++i) texts.push_back(random.next());
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& text : texts) expected.push_back(demo_tokenizer().encode(text));

  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t round = 0; round < 3; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * (t + 1) + round) % texts.size();  // different orders
          if (fresh.encode(texts[k]) != expected[k]) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace specpipe
