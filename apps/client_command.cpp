// `specpipe client`: a command-line client of `specpipe serve` (docs/PROTOCOL.md).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <zmq.hpp>

#include "apps/commands.h"
#include "core/error.h"
#include "server/curve_keys.h"

namespace specpipe::app {
namespace {

struct ClientOptions {
  std::string endpoint = "tcp://127.0.0.1:5555";
  std::string type = "generate";
  std::string prompt = "def fibonacci(n):\n";
  std::string prompt_file;
  std::vector<int32_t> prompt_ids;
  int32_t max_tokens = -1, top_k = -1, gamma = -1;
  double temperature = -1, top_p = -1;
  int64_t seed = -1;
  std::vector<std::string> stop;
  bool no_stream = false, ignore_eos = false, json_out = false;
  int timeout_ms = 120000;
  server::ClientCurve curve;
};

nlohmann::json build_request(const ClientOptions& o) {
  nlohmann::json j = {{"v", 1}, {"id", "cli-1"}, {"type", o.type}};
  if (o.type != "generate") return j;
  if (!o.prompt_ids.empty()) {
    j["prompt_ids"] = o.prompt_ids;
  } else if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) fail(ErrorCode::not_found, "prompt file {} cannot be read", o.prompt_file);
    std::stringstream ss;
    ss << in.rdbuf();
    j["prompt"] = ss.str();
  } else {
    j["prompt"] = o.prompt;
  }
  if (o.max_tokens >= 0) j["max_tokens"] = o.max_tokens;
  if (o.temperature >= 0) j["temperature"] = o.temperature;
  if (o.top_k >= 0) j["top_k"] = o.top_k;
  if (o.top_p >= 0) j["top_p"] = o.top_p;
  if (o.seed >= 0) j["seed"] = o.seed;
  if (o.gamma >= 0) j["gamma"] = o.gamma;
  if (!o.stop.empty()) j["stop"] = o.stop;
  if (o.ignore_eos) j["ignore_eos"] = true;
  j["stream"] = !o.no_stream;
  return j;
}

int run_client(const ClientOptions& o) {
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, o.timeout_ms);
  // libzmq drops a DEALER's pipe for good after a refused handshake: a send after that
  // would wait for ever, so it is bounded like the reply.
  socket.set(zmq::sockopt::sndtimeo, o.timeout_ms);
  server::apply_client_curve(socket, o.curve);
  socket.connect(o.endpoint);
  const std::string hint =
      o.curve.enabled() ? "a CURVE server that does not allow this client's key, or has another server key, "
                          "never answers"
                        : "a CURVE server never answers a client without --curve-server-key/--curve-secret-key";
  if (!socket.send(zmq::buffer(build_request(o).dump()), zmq::send_flags::none))
    fail(ErrorCode::io, "could not send to {} within {} ms: no connection ({})", o.endpoint, o.timeout_ms, hint);
  for (;;) {
    zmq::message_t msg;
    if (!socket.recv(msg))
      fail(ErrorCode::io, "no reply from {} within {} ms (is it serving? {})", o.endpoint, o.timeout_ms, hint);
    const auto reply = nlohmann::json::parse(msg.to_string());
    const std::string type = reply.value("type", "");
    if (o.json_out) std::printf("%s\n", reply.dump().c_str());
    if (type == "delta") {
      if (!o.json_out) std::fputs(reply["text"].get<std::string>().c_str(), stdout);
      std::fflush(stdout);
      continue;
    }
    if (type == "error") {
      std::fprintf(stderr, "specpipe client: error [%s]: %s\n", reply["code"].get<std::string>().c_str(),
                   reply["message"].get<std::string>().c_str());
      return 1;
    }
    if (o.json_out) return 0;
    if (type == "final") {
      if (o.no_stream) std::fputs(reply["text"].get<std::string>().c_str(), stdout);
      const auto& s = reply["stats"];
      std::printf("\n---\nfinish: %s | tokens: %zu | rounds: %lld | accepted: %lld/%lld | tokens per target step: %.2f\n",
                  reply["finish_reason"].get<std::string>().c_str(), reply["tokens"].size(),
                  s["rounds"].get<long long>(), s["accepted"].get<long long>(), s["proposed"].get<long long>(),
                  s["tokens_per_target_step"].get<double>());
    } else {
      std::printf("%s\n", reply.dump(2).c_str());
    }
    return 0;
  }
}

}  // namespace

Runner add_client_command(CLI::App& app) {
  auto o = std::make_shared<ClientOptions>();
  CLI::App* cmd = app.add_subcommand("client", "send one request to a specpipe server and print the reply");
  cmd->add_option("--endpoint", o->endpoint, "server address")->capture_default_str();
  cmd->add_option("--type", o->type, "generate, stats or health")->capture_default_str()->check(CLI::IsMember({"generate", "stats", "health"}));
  cmd->add_option("--prompt", o->prompt, "prompt text")->capture_default_str();
  cmd->add_option("--prompt-file", o->prompt_file, "read the prompt from a file");
  cmd->add_option("--prompt-ids", o->prompt_ids, "prompt as token ids")->delimiter(',');
  cmd->add_option("--max-tokens", o->max_tokens, "tokens to generate (default: the server's)");
  cmd->add_option("--temperature", o->temperature, "0 = greedy (default: the server's)");
  cmd->add_option("--top-k", o->top_k, "0 = off");
  cmd->add_option("--top-p", o->top_p, "1 = off");
  cmd->add_option("--seed", o->seed, "sampling seed");
  cmd->add_option("--gamma", o->gamma, "drafts per round for this request");
  cmd->add_option("--stop", o->stop, "stop string (repeatable)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating after EOS");
  cmd->add_flag("--no-stream", o->no_stream, "wait for the final message instead of streaming");
  cmd->add_flag("--json", o->json_out, "print every reply as JSON");
  cmd->add_option("--timeout-ms", o->timeout_ms, "give up after this long without a reply")->capture_default_str();
  cmd->add_option("--curve-server-key", o->curve.server_public_key,
                  "CURVE: the server's public key, a .pub file or a Z85 key");
  cmd->add_option("--curve-secret-key", o->curve.secret_key,
                  "CURVE: this client's secret key, a .key file from `specpipe keygen` or a Z85 key");
  return [o] { return run_client(*o); };
}

}  // namespace specpipe::app
