// `specpipe keygen NAME`: a CURVE key pair for the ZeroMQ endpoint (docs/PROTOCOL.md,
// "Security"): NAME.key (secret, mode 0600) and NAME.pub, one Z85 key each.
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "server/curve_keys.h"

namespace specpipe::app {

Runner add_keygen_command(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "keygen", "write a CURVE key pair for the ZeroMQ endpoint: NAME.key (secret, mode 0600) and NAME.pub");
  cmd->add_option("name", *name, "path and name of the pair, e.g. keys/server")->required();
  cmd->add_flag("--force", *force, "overwrite existing NAME.key / NAME.pub");
  return [name, force] {
    const server::CurveKeyPair pair = server::write_curve_key_pair(*name, *force);
    std::printf("%s.key: secret key (mode 0600; give it to no one)\n%s.pub: public key %s\n", name->c_str(),
                name->c_str(), pair.public_key.c_str());
    return 0;
  };
}

}  // namespace specpipe::app
