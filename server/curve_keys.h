#pragma once
/// CURVE keys for the ZeroMQ endpoint (docs/PROTOCOL.md, "Security"): making a key pair,
/// writing and reading key files, and setting a client socket's keys. Keys are libzmq's
/// Z85 text, 40 characters for 32 bytes, as zmq_curve_keypair gives them.
///
/// A key file holds one key on one line; lines starting with '#' are comments (a secret
/// file names its public key in one). `specpipe keygen` writes NAME.key (the secret,
/// mode 0600) and NAME.pub (the public key). Wherever a key is configured, the value is
/// either the key itself (40 Z85 characters) or the path of such a file.
#include <string>
#include <string_view>
#include <zmq.hpp>

namespace specpipe::server {

constexpr size_t kZ85KeyChars = 40;

/// Whether this libzmq can do CURVE (zmq_has("curve"): built with libsodium/tweetnacl).
bool curve_available();

/// True when `text` is 40 characters of the Z85 alphabet that decode to 32 bytes.
bool is_z85_key(std::string_view text);

struct CurveKeyPair {
  std::string public_key;  ///< Z85
  std::string secret_key;  ///< Z85
};

/// A fresh pair from libzmq (libsodium's random source). Throws Error(unsupported)
/// without CURVE.
CurveKeyPair make_curve_key_pair();

/// The public key of a Z85 secret key.
std::string curve_public_of(const std::string& secret_z85);

/// Writes `prefix`.key (secret, created 0600) and `prefix`.pub. Refuses to overwrite
/// either file unless `overwrite`. Returns the pair written.
CurveKeyPair write_curve_key_pair(const std::string& prefix, bool overwrite);

enum class KeyKind { public_key, secret_key };

/// `value` as a Z85 key: the key itself, or a key file's contents. A secret key file
/// must not be readable by group or others (like ssh's private keys). Errors name `what`
/// (e.g. "server.curve.secret_key") and the file: Error(invalid_argument / not_found).
std::string load_curve_key(const std::string& value, KeyKind kind, std::string_view what);

/// A client's CURVE settings: all empty = a plain (NULL mechanism) connection.
struct ClientCurve {
  std::string server_public_key;  ///< the server's public key, or its file
  std::string secret_key;         ///< this client's secret key, or its file
  bool enabled() const { return !server_public_key.empty() || !secret_key.empty(); }
};

/// Sets `socket`'s CURVE keys before it connects; nothing when !curve.enabled(). Both
/// keys are needed once one is given (Error(invalid_argument) naming the missing one).
void apply_client_curve(zmq::socket_t& socket, const ClientCurve& curve);

}  // namespace specpipe::server
