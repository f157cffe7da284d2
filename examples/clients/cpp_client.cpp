// A minimal C++ client for `specpipe serve` (docs/PROTOCOL.md): one streaming generate
// request over a ZeroMQ DEALER socket, with cppzmq and nlohmann::json only.
//
//   example_cpp_client tcp://127.0.0.1:5555 "def fib(n):" 64
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <zmq.hpp>

int main(int argc, char** argv) {
  const std::string endpoint = argc > 1 ? argv[1] : "tcp://127.0.0.1:5555";
  const std::string prompt = argc > 2 ? argv[2] : "def fibonacci(n):\n";
  const int max_tokens = argc > 3 ? std::stoi(argv[3]) : 64;

  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, 120000);
  socket.connect(endpoint);

  const nlohmann::json request = {{"v", 1},          {"id", "cpp-1"},          {"type", "generate"},
                                  {"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", true}};
  socket.send(zmq::buffer(request.dump()), zmq::send_flags::none);

  for (;;) {
    zmq::message_t message;
    if (!socket.recv(message)) {
      std::fprintf(stderr, "no reply from %s\n", endpoint.c_str());
      return 1;
    }
    const auto reply = nlohmann::json::parse(message.to_string());
    const std::string type = reply["type"];
    if (type == "delta") {
      std::fputs(reply["text"].get<std::string>().c_str(), stdout);
      std::fflush(stdout);
    } else if (type == "final") {
      const auto& stats = reply["stats"];
      std::printf("\n---\nfinish: %s | tokens: %zu | accepted %lld of %lld drafts\n",
                  reply["finish_reason"].get<std::string>().c_str(), reply["tokens"].size(),
                  stats["accepted"].get<long long>(), stats["proposed"].get<long long>());
      return 0;
    } else if (type == "error") {
      std::fprintf(stderr, "error %s: %s\n", reply["code"].get<std::string>().c_str(),
                   reply["message"].get<std::string>().c_str());
      return 1;
    }
  }
}
