#include "server/http/chat_template.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace specpipe::server::http {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The Jinja source from tokenizer_config.json's `chat_template`: a string, or a list of
/// {name, template} of which "default" is the one used without a tool set.
std::string template_source(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array())
    for (const auto& t : value)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
        return t["template"].get<std::string>();
  return {};
}

}  // namespace

ChatTemplate ChatTemplate::chatml() { return ChatTemplate{}; }

ChatTemplate ChatTemplate::load(const fs::path& model_dir) {
  ChatTemplate t;
  std::string source;
  std::string where;
  try {
    const fs::path jinja = model_dir / "chat_template.jinja";
    const fs::path config = model_dir / "tokenizer_config.json";
    if (fs::exists(jinja)) {
      source = read_text(jinja);
      where = jinja.string();
    } else if (fs::exists(config)) {
      const auto j = nlohmann::json::parse(read_text(config));
      if (j.is_object() && j.contains("chat_template")) source = template_source(j["chat_template"]);
      where = config.string();
    }
  } catch (const std::exception& e) {
    t.unavailable_reason_ = fmt::format("the model's chat template could not be read: {}", e.what());
    return t;
  }
  if (source.empty())
    t.unavailable_reason_ = fmt::format(
        "the model {} has no chat template (tokenizer_config.json has no chat_template); use /v1/completions",
        model_dir.filename().string());
  else if (source.find("<|im_start|>") == std::string::npos || source.find("<|im_end|>") == std::string::npos)
    t.unavailable_reason_ = fmt::format(
        "the chat template in {} is not of the ChatML family (<|im_start|> ... <|im_end|>), the only one this "
        "server renders (it has no Jinja engine); use /v1/completions with the prompt formatted by the client",
        where);
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  std::string out;
  for (const ChatMessage& m : messages) out += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
  out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace specpipe::server::http
