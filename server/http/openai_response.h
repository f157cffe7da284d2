#pragma once
/// Writing the engine's replies as OpenAI-style JSON: whole responses, and the chunks of a
/// server-sent-event stream (docs/HTTP.md). Every body carries the engine's own account
/// of the request in the extension field `specpipe` (token ids, finish reason, the
/// speculation statistics of docs/PROTOCOL.md's final.stats).
#include <cstdint>
#include <string>

#include "actors/engine.h"
#include "server/http/openai_request.h"

namespace specpipe::server::http {

/// What every body of one request repeats.
struct ResponseHeader {
  ApiKind kind = ApiKind::completion;
  std::string id;     ///< "cmpl-N" / "chatcmpl-N"
  std::string model;
  int64_t created = 0;  ///< Unix seconds
};

/// OpenAI's finish_reason: "stop" (EOS or a stop string) or "length" (max_tokens, the
/// model's positions); a cancelled request reads "abort", as in vLLM.
const char* openai_finish_reason(FinishReason reason);

/// The non-streaming response: text_completion or chat.completion.
std::string completion_body(const ResponseHeader& h, const actors::Completion& c);
/// One SSE event's JSON: new text (`first` opens a chat reply with the assistant role).
std::string delta_chunk(const ResponseHeader& h, const actors::TokenDelta& d, bool first);
/// The last chunk: empty text, the finish reason and the `specpipe` statistics.
std::string final_chunk(const ResponseHeader& h, const actors::Completion& c);
/// stream_options.include_usage: the chunk after the last, with `usage` and no choices.
std::string usage_chunk(const ResponseHeader& h, const actors::Completion& c);
/// `data: <json>\n\n`
std::string sse_event(const std::string& json);

}  // namespace specpipe::server::http
