#pragma once
/// The chat template of a model directory, for /v1/chat/completions.
///
/// Hugging Face stores it as a Jinja template in tokenizer_config.json (`chat_template`,
/// a string or a list of named templates) or in chat_template.jinja. This server has no
/// Jinja engine: it recognises the ChatML family (templates that frame turns with
/// <|im_start|> and <|im_end|>: Qwen, many fine-tunes) and renders that framing itself.
/// Any other template, or none, makes chat requests fail with a message that says why.
#include <filesystem>
#include <string>
#include <vector>

namespace specpipe::server::http {

struct ChatMessage {
  std::string role;  ///< system, user or assistant
  std::string content;
};

class ChatTemplate {
 public:
  /// Reads the template of `model_dir`. Never throws: a missing or unreadable file, or an
  /// unsupported template, leaves the template unavailable with the reason.
  static ChatTemplate load(const std::filesystem::path& model_dir);
  /// A ChatML template (tests, and models whose files lack one).
  static ChatTemplate chatml();

  bool available() const { return unavailable_reason_.empty(); }
  /// Why chat requests are refused; empty when they are served.
  const std::string& unavailable_reason() const { return unavailable_reason_; }
  /// The conversation as the prompt text, ending with the assistant's turn opened
  /// (add_generation_prompt). Only when available().
  std::string render(const std::vector<ChatMessage>& messages) const;
  /// Strings that end an assistant turn, to add to a chat request's stop strings.
  std::vector<std::string> turn_stops() const { return {"<|im_end|>"}; }

 private:
  std::string unavailable_reason_;
};

}  // namespace specpipe::server::http
