// IncrementalDecoder: pushed one id at a time, every piece of output is valid UTF-8
// and the pieces add up to Tokenizer::decode of the whole sequence.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/tokenizer/incremental_decoder.h"
#include "model/tokenizer/utf8.h"
#include "tests/model/tokenizer_test_support.h"

namespace specpipe {
namespace {

using test::demo_tokenizer;

/// Streams `ids` through a decoder; checks each step and returns the total.
std::string stream(const std::vector<int32_t>& ids, bool skip_special_tokens) {
  IncrementalDecoder decoder(demo_tokenizer(), skip_special_tokens);
  std::string total;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = decoder.push(ids[i]);
    EXPECT_TRUE(tokenizer::utf8::is_valid(piece)) << "after id " << i;
    EXPECT_LE(decoder.pending_bytes(), 3u);
    total += piece;
  }
  const std::string rest = decoder.flush();
  EXPECT_TRUE(tokenizer::utf8::is_valid(rest));
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  return total + rest;
}

TEST(TokenizerStream, RandomTextsStreamToTheirDecode) {
  test::RandomText random(31337);
  for (int i = 0; i < 3000; ++i) {
    const std::vector<int32_t> ids = demo_tokenizer().encode(random.next());
    for (const bool skip : {true, false}) {
      ASSERT_EQ(stream(ids, skip), demo_tokenizer().decode(ids, skip))
          << "string " << i << (skip ? " skipping" : " keeping") << " special tokens";
    }
  }
}

TEST(TokenizerStream, RandomIdSequencesStreamToTheirDecode) {
  // Arbitrary ids, mostly single bytes >= 0x80, make broken UTF-8 of every kind;
  // the stream must repair it exactly as decode does.
  std::mt19937 engine(4242);
  const auto vocab = static_cast<uint32_t>(demo_tokenizer().vocab_size());
  for (int i = 0; i < 3000; ++i) {
    std::vector<int32_t> ids(engine() % 12);
    for (int32_t& id : ids) {
      id = engine() % 2 == 0 ? static_cast<int32_t>(96 + engine() % 160)  // byte tokens
                             : static_cast<int32_t>(engine() % vocab);
    }
    for (const bool skip : {true, false}) {
      ASSERT_EQ(stream(ids, skip), demo_tokenizer().decode(ids, skip)) << "sequence " << i;
    }
  }
}

TEST(TokenizerStream, HoldsASplitCharacterUntilComplete) {
  IncrementalDecoder decoder(demo_tokenizer());
  EXPECT_EQ(decoder.push(864), "");  // F0 9F of U+1F600
  EXPECT_EQ(decoder.push(247), "");  // 98
  EXPECT_EQ(decoder.push(223), "\U0001F600");
  EXPECT_EQ(decoder.flush(), "");
}

TEST(TokenizerStream, FlushTurnsAnUnfinishedCharacterIntoReplacement) {
  IncrementalDecoder decoder(demo_tokenizer());
  EXPECT_EQ(decoder.push(864), "");
  EXPECT_EQ(decoder.flush(), "\uFFFD");
  EXPECT_EQ(decoder.push(65), "a");  // a fresh stream after flush
}

TEST(TokenizerStream, SpecialTokensFollowTheSkipFlag) {
  const std::vector<int32_t> ids = demo_tokenizer().encode("a<|endoftext|>b");
  EXPECT_EQ(stream(ids, true), "ab");
  EXPECT_EQ(stream(ids, false), "a<|endoftext|>b");
}

TEST(TokenizerStream, RefusesUnknownIds) {
  IncrementalDecoder decoder(demo_tokenizer());
  EXPECT_THROW((void)decoder.push(demo_tokenizer().vocab_size()), Error);
  EXPECT_THROW((void)decoder.push(-5), Error);
}

}  // namespace
}  // namespace specpipe
