#include "server/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace specpipe::server {
namespace {

/// Creates `path` with `mode` (exclusively unless `overwrite`) and writes `text`. The mode
/// is set at creation, so a secret is never readable by others, not even for a moment.
void write_new_file(const std::string& path, const std::string& text, mode_t mode, bool overwrite) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    if (errno == EEXIST) fail(ErrorCode::invalid_argument, "keygen: {} exists (--force overwrites it)", path);
    fail(ErrorCode::io, "keygen: cannot create {}: {}", path, std::strerror(errno));
  }
  // An overwritten file keeps its old mode otherwise.
  const bool ok = ::fchmod(fd, mode) == 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  if (!ok) fail(ErrorCode::io, "keygen: cannot write {}: {}", path, std::strerror(saved));
}

/// The one key line of a key file: comments ('#') and blank lines skipped, spaces trimmed.
std::string key_line_of(const std::string& path, std::string_view what) {
  std::ifstream in(path);
  if (!in) fail(ErrorCode::not_found, "{}: cannot read key file {}", what, path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    lines.push_back(line.substr(b, line.find_last_not_of(" \t\r") - b + 1));
  }
  if (lines.size() != 1)
    fail(ErrorCode::invalid_argument, "{}: key file {} holds {} key lines, expected one", what, path, lines.size());
  return lines[0];
}

}  // namespace

bool curve_available() { return zmq_has("curve") != 0; }

bool is_z85_key(std::string_view text) {
  if (text.size() != kZ85KeyChars) return false;
  const std::string z(text);  // zmq_z85_decode wants a terminated string
  uint8_t bytes[32];
  return zmq_z85_decode(bytes, z.c_str()) != nullptr;
}

CurveKeyPair make_curve_key_pair() {
  if (!curve_available()) fail(ErrorCode::unsupported, "this libzmq was built without CURVE (zmq_has(\"curve\") is 0)");
  char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
  if (zmq_curve_keypair(pub, sec) != 0) fail(ErrorCode::internal, "zmq_curve_keypair failed: {}", zmq_strerror(zmq_errno()));
  return {pub, sec};
}

std::string curve_public_of(const std::string& secret_z85) {
  char pub[kZ85KeyChars + 1];
  if (!is_z85_key(secret_z85) || zmq_curve_public(pub, secret_z85.c_str()) != 0)
    fail(ErrorCode::invalid_argument, "not a Z85 CURVE secret key");
  return pub;
}

CurveKeyPair write_curve_key_pair(const std::string& prefix, bool overwrite) {
  const CurveKeyPair pair = make_curve_key_pair();
  write_new_file(prefix + ".key",
                 "# specpipe CURVE secret key (Z85). Keep it private: mode 0600, never in a shared config.\n"
                 "# public key: " + pair.public_key + "\n" + pair.secret_key + "\n",
                 0600, overwrite);
  write_new_file(prefix + ".pub", "# specpipe CURVE public key (Z85)\n" + pair.public_key + "\n", 0644, overwrite);
  return pair;
}

std::string load_curve_key(const std::string& value, KeyKind kind, std::string_view what) {
  if (is_z85_key(value)) return value;
  struct stat st {};
  if (value.empty() || ::stat(value.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    fail(ErrorCode::not_found, "{}: \"{}\" is neither a {}-character Z85 key nor a key file", what, value, kZ85KeyChars);
  if (kind == KeyKind::secret_key && (st.st_mode & 077) != 0)
    fail(ErrorCode::invalid_argument, "{}: secret key file {} is readable by others (mode {:04o}); chmod 600 it", what,
         value, st.st_mode & 07777);
  std::string key = key_line_of(value, what);
  if (!is_z85_key(key))
    fail(ErrorCode::invalid_argument, "{}: key file {} does not hold a {}-character Z85 key", what, value, kZ85KeyChars);
  return key;
}

void apply_client_curve(zmq::socket_t& socket, const ClientCurve& curve) {
  if (!curve.enabled()) return;
  if (curve.server_public_key.empty())
    fail(ErrorCode::invalid_argument, "CURVE: a client key needs the server's public key as well");
  if (curve.secret_key.empty()) fail(ErrorCode::invalid_argument, "CURVE: the server's public key needs a client secret key as well");
  const std::string server = load_curve_key(curve.server_public_key, KeyKind::public_key, "server public key");
  const std::string secret = load_curve_key(curve.secret_key, KeyKind::secret_key, "client secret key");
  socket.set(zmq::sockopt::curve_serverkey, server);
  socket.set(zmq::sockopt::curve_secretkey, secret);
  socket.set(zmq::sockopt::curve_publickey, curve_public_of(secret));
}

}  // namespace specpipe::server
