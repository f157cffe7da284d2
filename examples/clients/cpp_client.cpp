// A minimal C++ client for `specpipe serve` (docs/PROTOCOL.md): one streaming generate
// request over a ZeroMQ DEALER socket, with cppzmq and nlohmann::json only.
//
//   example_cpp_client tcp://127.0.0.1:5555 "def fib(n):" 64
//
// A server with CURVE (docs/PROTOCOL.md, "Security") answers only keys it allows: give
// the server's public key and this client's secret key, as files from `specpipe keygen`
// or as the Z85 keys themselves:
//
//   example_cpp_client tcp://10.0.0.5:5555 "def fib(n):" 64 server.pub client.key
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <zmq.hpp>

// A Z85 key (40 characters) as given, or the one key line of a key file ('#' comments).
static std::string key_of(const std::string& value) {
  if (value.size() == 40) return value;
  std::ifstream in(value);
  std::string line, key;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') key = line;
  return key;
}

int main(int argc, char** argv) {
  const std::string endpoint = argc > 1 ? argv[1] : "tcp://127.0.0.1:5555";
  const std::string prompt = argc > 2 ? argv[2] : "def fibonacci(n):\n";
  const int max_tokens = argc > 3 ? std::stoi(argv[3]) : 64;

  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  // Bounded waits, sends included: libzmq does not retry a refused handshake (an unknown
  // CURVE key), and a send on the connection it gave up on would block for ever.
  socket.set(zmq::sockopt::sndtimeo, 120000);
  socket.set(zmq::sockopt::rcvtimeo, 120000);
  if (argc > 5) {
    // libzmq checks the keys it is given (40 Z85 characters) and throws for a bad one.
    const std::string secret = key_of(argv[5]);
    char public_key[41];
    if (secret.size() != 40 || zmq_curve_public(public_key, secret.c_str()) != 0) {
      std::fprintf(stderr, "%s: not a CURVE secret key\n", argv[5]);
      return 1;
    }
    socket.set(zmq::sockopt::curve_serverkey, key_of(argv[4]));
    socket.set(zmq::sockopt::curve_secretkey, secret);
    socket.set(zmq::sockopt::curve_publickey, std::string(public_key));
  }
  socket.connect(endpoint);

  const nlohmann::json request = {{"v", 1},          {"id", "cpp-1"},          {"type", "generate"},
                                  {"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", true}};
  if (!socket.send(zmq::buffer(request.dump()), zmq::send_flags::none)) {
    std::fprintf(stderr, "could not send to %s: no connection\n", endpoint.c_str());
    return 1;
  }

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
