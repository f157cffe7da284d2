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

}  // namespace specpipe
