#include "pipeline/pipeline_config.h"

#include "core/error.h"

namespace specpipe {

DrafterKind parse_drafter_kind(const std::string& text) {
  if (text == "model") return DrafterKind::model;
  if (text == "ngram") return DrafterKind::ngram;
  if (text == "none") return DrafterKind::none;
  fail(ErrorCode::invalid_argument, "unknown drafter '{}' (model, ngram or none)", text);
}

const char* to_string(DrafterKind kind) {
  switch (kind) {
    case DrafterKind::model: return "model";
    case DrafterKind::ngram: return "ngram";
    case DrafterKind::none: return "none";
  }
  return "?";
}

DraftAhead parse_draft_ahead(const std::string& text) {
  if (text == "auto") return DraftAhead::automatic;
  if (text == "on") return DraftAhead::on;
  if (text == "off") return DraftAhead::off;
  fail(ErrorCode::invalid_argument, "unknown draft_ahead '{}' (auto, on or off)", text);
}

const char* to_string(DraftAhead mode) {
  switch (mode) {
    case DraftAhead::automatic: return "auto";
    case DraftAhead::on: return "on";
    case DraftAhead::off: return "off";
  }
  return "?";
}

}  // namespace specpipe
