#include "pipeline/output_stream.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace specpipe {
namespace {

/// Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). A stop string
/// must be valid so that a byte-wise match in (valid) decoded text always starts and
/// ends on character boundaries; the tokenizer's own validator is internal to it.
bool is_valid_utf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    unsigned char second_min = 0x80;
    unsigned char second_max = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) second_min = 0xA0;  // overlong
      if (lead == 0xED) second_max = 0x9F;  // surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) second_min = 0x90;  // overlong
      if (lead == 0xF4) second_max = 0x8F;  // past U+10FFFF
    } else {
      return false;
    }
    if (bytes.size() - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      const auto byte = static_cast<unsigned char>(bytes[i + k]);
      if (byte < (k == 1 ? second_min : 0x80) || byte > (k == 1 ? second_max : 0xBF)) return false;
    }
    i += length;
  }
  return true;
}

/// Where the winning stop string starts in `text`, if any occurs: the occurrence that
/// ends first, the longest among those ending at the same byte. Cost: one find() per
/// stop string over `text`, which is short (held-back text plus one token's worth).
std::optional<size_t> find_stop(std::string_view text, const std::vector<std::string>& stops) {
  std::optional<std::pair<size_t, size_t>> best;  // (end, start)
  for (const std::string& stop : stops) {
    const size_t start = text.find(stop);  // the first occurrence also ends first
    if (start == std::string_view::npos) continue;
    const std::pair<size_t, size_t> candidate{start + stop.size(), start};
    if (!best || candidate < *best) best = candidate;
  }
  if (!best) return std::nullopt;
  return best->second;
}

/// The length of the longest suffix of `text` that is a proper prefix of some stop
/// string: the bytes that may still turn into a stop string with later tokens.
/// Cost: O(sum of stop lengths squared) in the worst case, tiny for real stop strings.
size_t held_back_length(std::string_view text, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& stop : stops) {
    const std::string_view prefix_source(stop);
    for (size_t k = std::min(text.size(), stop.size() - 1); k > held; --k) {
      if (text.ends_with(prefix_source.substr(0, k))) {
        held = k;
        break;
      }
    }
  }
  return held;
}

}  // namespace

OutputStream::OutputStream(const Tokenizer& tokenizer, StopConditions conditions)
    : tokenizer_(tokenizer),
      conditions_(std::move(conditions)),
      decoder_(tokenizer, conditions_.skip_special_tokens) {
  if (conditions_.max_tokens < 0) {
    fail(ErrorCode::invalid_argument, "OutputStream: max_tokens is {}, must be >= 0",
         conditions_.max_tokens);
  }
  for (size_t i = 0; i < conditions_.stop_strings.size(); ++i) {
    const std::string& stop = conditions_.stop_strings[i];
    if (stop.empty()) fail(ErrorCode::invalid_argument, "OutputStream: stop string {} is empty", i);
    if (!is_valid_utf8(stop)) {
      fail(ErrorCode::invalid_argument, "OutputStream: stop string {} is not valid UTF-8", i);
    }
  }
  // Nothing may be generated: the stream is over before it starts, as in plain decoding.
  if (conditions_.max_tokens == 0) finished_ = true;
}

OutputStream::Step OutputStream::push(int32_t token) {
  if (finished_) {
    fail(ErrorCode::invalid_argument, "OutputStream::push: token {} after the stream finished ({})",
         token, to_string(reason_));
  }
  if (is_eos(token)) {
    (void)tokenizer_.token_bytes(token);  // refuses an unknown id before any change
    tokens_.push_back(token);
    return release_and_finish(FinishReason::eos);
  }
  pending_ += decoder_.push(token);  // throws for an unknown id before any change
  tokens_.push_back(token);

  // Every occurrence lies in pending_: whatever was emitted before could not start one.
  if (const std::optional<size_t> stop_start = find_stop(pending_, conditions_.stop_strings)) {
    Step step = emit(*stop_start);
    pending_.clear();  // the stop string and what followed it in this token
    finished_ = true;
    reason_ = FinishReason::stop;
    step.finished = true;
    step.reason = reason_;
    return step;
  }
  if (tokens_.size() >= static_cast<size_t>(conditions_.max_tokens)) {
    return release_and_finish(FinishReason::length);
  }
  return emit(pending_.size() - held_back_length(pending_, conditions_.stop_strings));
}

OutputStream::Step OutputStream::finish(FinishReason reason) {
  if (finished_) {
    fail(ErrorCode::invalid_argument, "OutputStream::finish({}): the stream already finished ({})",
         to_string(reason), to_string(reason_));
  }
  return release_and_finish(reason);
}

bool OutputStream::is_eos(int32_t token) const {
  return conditions_.stop_at_eos &&
         std::find(conditions_.eos_ids.begin(), conditions_.eos_ids.end(), token) !=
             conditions_.eos_ids.end();
}

OutputStream::Step OutputStream::emit(size_t length) {
  Step step;
  step.text = pending_.substr(0, length);
  pending_.erase(0, length);
  text_ += step.text;
  return step;
}

OutputStream::Step OutputStream::release_and_finish(FinishReason reason) {
  pending_ += decoder_.flush();
  Step step = emit(pending_.size());
  finished_ = true;
  reason_ = reason;
  step.finished = true;
  step.reason = reason;
  return step;
}

}  // namespace specpipe
