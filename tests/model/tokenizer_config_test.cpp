// Loading tokenizer.json variants: every component this engine does not implement
// is refused with Error(unsupported) naming the JSON path and value; the options it
// does implement encode as Hugging Face tokenizers 0.23 does (expected ids from it).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/model/tokenizer_test_support.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

using nlohmann::json;

const json kSplit = json::parse(
    R"({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false})");

/// Loads the variant and expects Error(code) whose message contains each of `words`.
void expect_refused(const char* tag, const std::function<void(json&)>& edit, ErrorCode code,
                    std::initializer_list<const char*> words) {
  const std::filesystem::path path = test::write_tokenizer_variant(tag, edit);
  try {
    (void)Tokenizer::from_file(path);
    FAIL() << tag << ": the variant loaded";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.code(), code) << tag << ": " << message;
    EXPECT_NE(message.find(path.string()), std::string::npos) << tag << ": " << message;
    for (const char* word : words) {
      EXPECT_NE(message.find(word), std::string::npos) << tag << ": " << message;
    }
  }
}

void expect_unsupported(const char* tag, const std::function<void(json&)>& edit,
                        std::initializer_list<const char*> words) {
  expect_refused(tag, edit, ErrorCode::unsupported, words);
}

TEST(TokenizerConfig, RefusesUnsupportedNormalizers) {
  expect_unsupported("norm", [](json& t) { t["normalizer"] = {{"type", "Lowercase"}}; },
                     {"normalizer.type", "'Lowercase'", "NFC"});
  expect_unsupported("norm-seq", [](json& t) {
    t["normalizer"] = json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "_"}]})");
  }, {"normalizer.normalizers[1].type", "'Replace'"});
}

TEST(TokenizerConfig, RefusesUnsupportedPreTokenizers) {
  expect_unsupported("pre-type", [](json& t) { t["pre_tokenizer"] = {{"type", "Whitespace"}}; },
                     {"pre_tokenizer.type", "'Whitespace'"});
  expect_unsupported("pre-null", [](json& t) { t["pre_tokenizer"] = nullptr; },
                     {"pre_tokenizer", "ByteLevel"});
  expect_unsupported("behavior", [](json& t) {
    t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  }, {"pre_tokenizer.pretokenizers[0].behavior", "'Removed'", "Isolated"});
  expect_unsupported("invert", [](json& t) {
    t["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  }, {"pre_tokenizer.pretokenizers[0].invert", "'true'"});
  expect_unsupported("no-byte-level", [](json& t) {
    t["pre_tokenizer"]["pretokenizers"].erase(1);
  }, {"pre_tokenizer", "no ByteLevel"});
  expect_unsupported("after-byte-level", [](json& t) {
    t["pre_tokenizer"]["pretokenizers"].push_back(kSplit);
  }, {"pre_tokenizer.pretokenizers[2]", "Split step after ByteLevel"});
  expect_unsupported("bad-regex", [](json& t) {
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?<name";
  }, {"pre_tokenizer.pretokenizers[0].pattern.Regex", "'(?<name'"});
}

TEST(TokenizerConfig, RefusesUnsupportedModels) {
  expect_unsupported("model-type", [](json& t) { t["model"]["type"] = "WordPiece"; },
                     {"model.type", "'WordPiece'", "BPE"});
  expect_unsupported("dropout", [](json& t) { t["model"]["dropout"] = 0.1; },
                     {"model.dropout", "0.1"});
  expect_unsupported("byte-fallback", [](json& t) { t["model"]["byte_fallback"] = true; },
                     {"model.byte_fallback", "'true'"});
  expect_unsupported("prefix", [](json& t) { t["model"]["continuing_subword_prefix"] = "##"; },
                     {"model.continuing_subword_prefix", "'##'"});
  expect_unsupported("suffix", [](json& t) { t["model"]["end_of_word_suffix"] = "</w>"; },
                     {"model.end_of_word_suffix", "'</w>'"});
  expect_unsupported("fuse-unk", [](json& t) { t["model"]["fuse_unk"] = true; },
                     {"model.fuse_unk", "'true'"});
  expect_unsupported("missing-byte", [](json& t) { t["model"]["vocab"].erase("\u0120"); },
                     {"model.vocab", "0x20"});
}

TEST(TokenizerConfig, RefusesOtherUnsupportedParts) {
  expect_unsupported("decoder", [](json& t) { t["decoder"] = {{"type", "WordPiece"}}; },
                     {"decoder.type", "'WordPiece'", "ByteLevel"});
  expect_unsupported("decoder-null", [](json& t) { t["decoder"] = nullptr; }, {"decoder"});
  expect_unsupported("post", [](json& t) {
    t["post_processor"] = {{"type", "TemplateProcessing"}};
  }, {"post_processor.type", "'TemplateProcessing'"});
  expect_unsupported("truncation", [](json& t) { t["truncation"] = {{"max_length", 8}}; },
                     {"truncation"});
  expect_unsupported("padding", [](json& t) { t["padding"] = {{"strategy", "BatchLongest"}}; },
                     {"padding"});
  expect_unsupported("single-word", [](json& t) { t["added_tokens"][0]["single_word"] = true; },
                     {"added_tokens[0].single_word"});
}

TEST(TokenizerConfig, RefusesInconsistentFiles) {
  expect_refused("merge", [](json& t) { t["model"]["merges"][3] = json::array({"x", "nope"}); },
                 ErrorCode::corrupt_file, {"model.merges[3]", "'nope'"});
  expect_refused("merge-shape", [](json& t) { t["model"]["merges"][2] = "a b c"; },
                 ErrorCode::corrupt_file, {"model.merges[2]"});
  expect_refused("added-id", [](json& t) { t["added_tokens"][0]["id"] = 5; },
                 ErrorCode::corrupt_file, {"added_tokens[0].id", "<|endoftext|>"});
  expect_refused("no-model", [](json& t) { t.erase("model"); }, ErrorCode::corrupt_file,
                 {"model", "missing"});
}

TEST(TokenizerConfig, MissingFileIsNotFound) {
  const std::filesystem::path path = test::scratch_dir("missing") / "tokenizer.json";
  try {
    (void)Tokenizer::from_file(path);
    FAIL() << "loaded a missing file";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::not_found);
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
  }
}

TEST(TokenizerConfig, MalformedJsonNamesTheFile) {
  const std::filesystem::path path = test::scratch_dir("malformed") / "tokenizer.json";
  std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {"a": 0,)";
  try {
    (void)Tokenizer::from_file(path);
    FAIL() << "loaded malformed JSON";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::corrupt_file);
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
  }
}

std::vector<int32_t> encode_with(const char* tag, const std::function<void(json&)>& edit,
                                 std::string_view text) {
  return Tokenizer::from_file(test::write_tokenizer_variant(tag, edit)).encode(text);
}

TEST(TokenizerConfig, MergesWrittenAsStringsEncodeTheSame) {
  const auto as_strings = [](json& t) {
    for (json& merge : t["model"]["merges"]) {
      merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
    }
  };
  const std::string text = "def tokenize(self, text):\n    return [w for w in text.split()]\n";
  EXPECT_EQ(encode_with("merge-strings", as_strings, text), test::demo_tokenizer().encode(text));
}

TEST(TokenizerConfig, ByteLevelRegexAndPrefixSpace) {
  // Expected ids from tokenizers 0.23 on the same variants.
  const auto byte_level_only = [](bool add_prefix_space) {
    return [add_prefix_space](json& t) {
      t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space},
                            {"trim_offsets", true}, {"use_regex", true}};
    };
  };
  EXPECT_EQ(encode_with("gpt2", byte_level_only(false), "Hello world's 123  foo\n\tbar"),
            (std::vector<int32_t>{40, 402, 310, 326, 4476, 1261, 221, 17, 18, 19, 221, 5552,
                                  199, 198, 2506}));
  EXPECT_EQ(encode_with("gpt2-prefix", byte_level_only(true), "x<|endoftext|>y  z"),
            (std::vector<int32_t>{452, 0, 560, 221, 883}));
  EXPECT_EQ(encode_with("split-prefix", [](json& t) {
    t["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  }, "def f(x):\n  return x"), (std::vector<int32_t>{369, 284, 322, 88, 1575, 221, 365, 452}));
}

TEST(TokenizerConfig, AddedTokenOptions) {
  const auto add_tokens = [](json& t) {
    t["added_tokens"].push_back(json::parse(R"({"id": 8192, "content": "<|im_start|>",
        "single_word": false, "lstrip": true, "rstrip": false, "normalized": false,
        "special": true})"));
    t["added_tokens"].push_back(json::parse(R"({"id": 8193, "content": "<|im_end|>",
        "single_word": false, "lstrip": false, "rstrip": true, "normalized": false,
        "special": true})"));
    t["added_tokens"].push_back(json::parse(R"({"id": 8194, "content": "hello",
        "single_word": false, "lstrip": false, "rstrip": false, "normalized": true,
        "special": false})"));
    t["added_tokens"].push_back(json::parse(R"({"id": 8195, "content": "e\u0301",
        "single_word": false, "lstrip": false, "rstrip": false, "normalized": true,
        "special": false})"));
    t["added_tokens"].push_back(json::parse(R"({"id": 8196, "content": "<|endo",
        "single_word": false, "lstrip": false, "rstrip": false, "normalized": false,
        "special": true})"));
  };
  const Tokenizer tok = Tokenizer::from_file(test::write_tokenizer_variant("added", add_tokens));
  const std::vector<int32_t> ids =
      tok.encode("a  <|im_start|>  b<|im_end|>  \n c hello e\u0301 <|endo x");
  EXPECT_EQ(ids, (std::vector<int32_t>{65, 8192, 221, 312, 8193, 67, 221, 8194, 221, 8195, 221,
                                       8196, 452}));
  EXPECT_EQ(tok.vocab_size(), 8197);
  EXPECT_TRUE(tok.is_special(8192));
  EXPECT_FALSE(tok.is_special(8194));
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), 8193);
  // As in HF, a normalized added token decodes through the ByteLevel alphabet from its
  // normalised content ("é" is the alphabet's spelling of byte 0xE9).
  EXPECT_EQ(tok.decode(ids), "a<|im_start|>  b<|im_end|>c hello \uFFFD <|endo x");
  EXPECT_EQ(tok.decode(ids, true), "a  bc hello \uFFFD  x");
}

}  // namespace
}  // namespace specpipe
