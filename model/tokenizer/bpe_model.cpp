#include "model/tokenizer/bpe_model.h"

#include <queue>

#include "core/error.h"
#include "model/tokenizer/byte_level.h"

namespace specpipe::tokenizer {
namespace {

/// Ids at or above this are refused: they would make the id table absurdly large and
/// no real vocabulary comes near it.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;
constexpr size_t kCacheCapacity = 1 << 16;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

/// The two halves of one entry of model.merges: ["a", "b"] or the older "a b".
std::pair<std::string, std::string> merge_halves(const Json& entry, const std::string& path) {
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
    return {entry[0].get<std::string>(), entry[1].get<std::string>()};
  }
  if (entry.is_string()) {
    const std::string& text = entry.get_ref<const std::string&>();
    const size_t space = text.find(' ');
    if (space != std::string::npos && text.find(' ', space + 1) == std::string::npos) {
      return {text.substr(0, space), text.substr(space + 1)};
    }
  }
  fail_malformed(
      path, fmt::format("'{}' must be [\"left\", \"right\"] or \"left right\"", describe(entry)));
}

}  // namespace

BpeModel BpeModel::from_json(const Json& node, std::string_view path_view) {
  const std::string path(path_view);
  require_object(node, path);
  const Json* type = find_member(node, "type");
  // Files written by old versions of tokenizers may leave out the type of a BPE model.
  if (type != nullptr && *type != "BPE") fail_unsupported(member_path(path, "type"), *type, "BPE");
  if (type == nullptr && find_member(node, "merges") == nullptr) {
    fail_malformed(member_path(path, "type"), "is missing");
  }
  refuse_unless(node, "dropout", nullptr, path, "null");
  refuse_unless(node, "byte_fallback", false, path, "false");
  refuse_unless(node, "fuse_unk", false, path, "false");
  refuse_unless(node, "continuing_subword_prefix", "", path, "null");
  refuse_unless(node, "end_of_word_suffix", "", path, "null");
  // unk_token is accepted and never used: every byte has a token (checked below), so
  // no input is unknown.

  BpeModel model;
  model.ignore_merges_ = optional_bool(node, "ignore_merges", false, path);
  const Json* vocab = find_member(node, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    fail_malformed(member_path(path, "vocab"), "must be an object of token -> id");
  }
  model.read_vocab(*vocab, member_path(path, "vocab"));
  const Json* merges = find_member(node, "merges");
  if (merges == nullptr || !merges->is_array()) {
    fail_malformed(member_path(path, "merges"), "must be a list");
  }
  model.read_merges(*merges, member_path(path, "merges"));
  model.cache_ = std::make_unique<PieceCache>(kCacheCapacity);
  return model;
}

void BpeModel::read_vocab(const Json& vocab, const std::string& path) {
  vocab_.reserve(vocab.size());
  for (const auto& [token, id_value] : vocab.items()) {
    if (!id_value.is_number_integer() || id_value.get<int64_t>() < 0 ||
        id_value.get<int64_t>() >= kMaxTokenId) {
      fail_malformed(fmt::format("{}['{}']", path, token),
                     fmt::format("'{}' must be an id in [0, {})", describe(id_value), kMaxTokenId));
    }
    const auto id = static_cast<int32_t>(id_value.get<int64_t>());
    if (static_cast<size_t>(id) >= tokens_by_id_.size()) tokens_by_id_.resize(id + size_t{1});
    if (tokens_by_id_[id]) {
      fail_malformed(
          path, fmt::format("gives id {} to both '{}' and '{}'", id, *tokens_by_id_[id], token));
    }
    tokens_by_id_[id] = token;
    vocab_.emplace(token, id);
  }
  for (unsigned byte = 0; byte < 256; ++byte) {
    const std::string spelt = byte_level::spell(std::string(1, static_cast<char>(byte)));
    const std::optional<int32_t> id = token_to_id(spelt);
    if (!id) {
      fail(ErrorCode::unsupported,
           "{} has no token for byte 0x{:02X} ('{}'); only byte-level BPE covering all 256 "
           "bytes is supported",
           path, byte, spelt);
    }
    byte_ids_[byte] = *id;
  }
}

void BpeModel::read_merges(const Json& merges, const std::string& path) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string entry_path = element_path(path, rank);
    const auto [left, right] = merge_halves(merges[rank], entry_path);
    const auto id_of = [&](const std::string& token) {
      const std::optional<int32_t> id = token_to_id(token);
      if (!id)
        fail_malformed(entry_path, fmt::format("names '{}', which is not in the vocab", token));
      return *id;
    };
    const int32_t left_id = id_of(left);
    const int32_t right_id = id_of(right);
    const int32_t merged_id = id_of(left + right);
    // A repeated pair takes its last rank, as Hugging Face's loader does.
    merges_[pair_key(left_id, right_id)] = MergeResult{static_cast<uint32_t>(rank), merged_id};
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token_of(int32_t id) const {
  if (id < 0 || id >= id_limit() || !tokens_by_id_[id]) return nullptr;
  return &*tokens_by_id_[id];
}

const BpeModel::MergeResult* BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (cache_->append_cached(piece, out)) return;
  std::vector<int32_t> ids;
  if (ignore_merges_) {
    if (const std::optional<int32_t> whole = token_to_id(byte_level::spell(piece))) {
      ids.push_back(*whole);
    }
  }
  if (ids.empty()) ids = merge_bytes(piece);
  cache_->remember(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int32_t> BpeModel::merge_bytes(std::string_view piece) const {
  // The symbols form a linked list over their first byte's index; a merge folds the
  // right symbol into the left one. A min-heap orders candidate merges by (rank,
  // position): the lowest rank first, the leftmost among equals, as Hugging Face does.
  // Entries made stale by earlier merges are recognised by their ids and dropped.
  struct Symbol {
    int32_t id;    ///< -1 once merged into its left neighbour
    int32_t prev;  ///< index of the previous live symbol, -1 at the start
    int32_t next;  ///< index of the next live symbol, -1 at the end
  };
  struct Candidate {
    uint32_t rank;
    int32_t left, right;        ///< symbol indices
    int32_t left_id, right_id;  ///< their ids when the candidate was made
    int32_t merged;
  };
  const auto applies_later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };

  const auto count = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(piece.size());
  for (int32_t i = 0; i < count; ++i) {
    symbols[i] =
        Symbol{byte_ids_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < count ? i + 1 : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(applies_later)> queue(
      applies_later);
  const auto consider_pair_at = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    if (const MergeResult* merge = find_merge(symbols[left].id, symbols[right].id)) {
      queue.push(
          Candidate{merge->rank, left, right, symbols[left].id, symbols[right].id, merge->merged});
    }
  };
  for (int32_t i = 0; i + 1 < count; ++i) consider_pair_at(i);

  while (!queue.empty()) {
    const Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[candidate.left];
    Symbol& right = symbols[candidate.right];
    if (left.id != candidate.left_id || left.next != candidate.right ||
        right.id != candidate.right_id) {
      continue;
    }
    left.id = candidate.merged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = candidate.left;
    right.id = -1;
    if (left.prev >= 0) consider_pair_at(left.prev);
    consider_pair_at(candidate.left);
  }

  std::vector<int32_t> ids;
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  return ids;
}

}  // namespace specpipe::tokenizer
