// Security of the ZeroMQ endpoint over real loopback sockets (docs/PROTOCOL.md,
// "Security"): a CURVE server serves an allowed key and never serves a client without
// keys, one with an unknown key or one holding the wrong server key, and counts each
// refusal; a non-loopback bind without CURVE is refused (ZeroMQ and HTTP); one client
// at its in-flight limit is refused while others are served; key files.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/error.h"
#include "pipeline/pipeline_config_yaml.h"
#include "server/bind_policy.h"
#include "server/curve_keys.h"
#include "server/http/gateway.h"
#include "tests/server/server_fixture.h"
#include "tests/support/engine.h"

namespace specpipe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using server::ClientCurve;
using server::CurveKeyPair;

const json kHealth = {{"v", 1}, {"id", "h"}, {"type", "health"}};

/// The Error `f` throws; fails the test if none.
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::internal, "");
}

json security_of(test::Client& client) {
  client.send({{"v", 1}, {"id", "sec"}, {"type", "stats"}});
  return client.wait_for("sec", 10000).last["security"];
}

/// Polls `observer`'s stats until `done(security)` holds (handshake events arrive through
/// the monitor asynchronously); returns the last block seen.
template <typename Done>
json wait_for_security(test::Client& observer, Done done) {
  json s;
  for (int i = 0; i < 200; ++i) {
    s = security_of(observer);
    if (done(s)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return s;
}

class CurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server::curve_available()) GTEST_SKIP() << "libzmq without CURVE";
  }
  PipelineConfig curve_config(std::vector<std::string> allowed) const {
    PipelineConfig c = test::demo_engine_config();
    c.server.curve.secret_key = server_keys.secret_key;
    c.server.curve.allowed_clients = std::move(allowed);
    return c;
  }
  ClientCurve as(const CurveKeyPair& client) const { return {server_keys.public_key, client.secret_key}; }

  zmq::context_t context{1};
  CurveKeyPair server_keys = server::make_curve_key_pair();
  CurveKeyPair alice = server::make_curve_key_pair();
  CurveKeyPair bob = server::make_curve_key_pair();
};

TEST_F(CurveTest, ServesAnAllowedKeyAndNeverAClientWithoutKeysOrWithAnUnknownKey) {
  test::LoopbackServer server(curve_config({alice.public_key, bob.public_key}));
  test::Client allowed(context, server.address(), zmq::socket_type::dealer, as(alice));
  allowed.send(test::generate_request("g", {{"prompt", "def f(x):"}, {"max_tokens", 4}}));
  EXPECT_EQ(allowed.wait_for("g", 30000).last["type"], "final");

  const CurveKeyPair mallory = server::make_curve_key_pair();
  const CurveKeyPair impostor = server::make_curve_key_pair();  // alice's key, a fake server key
  test::Client plain(context, server.address());
  test::Client unknown(context, server.address(), zmq::socket_type::dealer, as(mallory));
  test::Client wrong_server(context, server.address(), zmq::socket_type::dealer,
                            {impostor.public_key, alice.secret_key});
  for (test::Client* c : {&plain, &unknown, &wrong_server}) c->send(kHealth);
  // The refusals are counted: the unknown key by the ZAP handler, the plain client (wrong
  // mechanism) and the wrong server key (its HELLO does not decrypt) by the handshake.
  const json s = wait_for_security(allowed, [](const json& now) {
    return now["refused_keys"].get<int64_t>() >= 1 && now["failed_handshakes"].get<int64_t>() >= 2;
  });
  EXPECT_EQ(s["curve"], true);
  EXPECT_GE(s["refused_keys"].get<int64_t>(), 1) << s.dump();
  EXPECT_GE(s["failed_handshakes"].get<int64_t>(), 2) << s.dump();
  EXPECT_EQ(s["handshakes_succeeded"].get<int64_t>(), 1) << s.dump();
  // ...and none of them is ever served.
  for (test::Client* c : {&plain, &unknown, &wrong_server}) EXPECT_FALSE(c->receive(300));
  // The allowed client is still served, and so is a second allowed key.
  test::Client second(context, server.address(), zmq::socket_type::dealer, as(bob));
  second.send(kHealth);
  const auto health = second.receive(10000);
  ASSERT_TRUE(health);
  EXPECT_EQ((*health)["status"], "ok");
}

TEST_F(CurveTest, OneKeyAtItsLimitIsRefusedOnEveryConnectionWhileOthersAreServed) {
  PipelineConfig config = curve_config({alice.public_key, bob.public_key});
  config.server.max_inflight_per_client = 2;
  test::LoopbackServer server(config);
  test::Client alice1(context, server.address(), zmq::socket_type::dealer, as(alice));
  test::Client alice2(context, server.address(), zmq::socket_type::dealer, as(alice));
  test::Client bob1(context, server.address(), zmq::socket_type::dealer, as(bob));
  for (const char* id : {"a", "b"})
    alice1.send(test::generate_request(id, {{"prompt", "class A:"}, {"max_tokens", 3000}, {"stream", true}, {"ignore_eos", true}}));
  // Both are in flight once each has streamed.
  std::set<std::string> streaming;
  while (streaming.size() < 2) {
    const auto reply = alice1.receive(30000);
    ASSERT_TRUE(reply);
    ASSERT_EQ((*reply)["type"], "delta") << reply->dump();
    streaming.insert((*reply)["id"].get<std::string>());
  }
  // Alice's other connection is over her limit; Bob is served meanwhile.
  alice2.send(test::generate_request("c", {{"prompt", "def g():"}, {"max_tokens", 4}}));
  const json refused = alice2.wait_for("c", 10000).last;
  EXPECT_EQ(refused["code"], "client_limit") << refused.dump();
  EXPECT_NE(refused["message"].get<std::string>().find("max_inflight_per_client"), std::string::npos);
  bob1.send(test::generate_request("d", {{"prompt", "def g():"}, {"max_tokens", 4}}));
  EXPECT_EQ(bob1.wait_for("d", 30000).last["type"], "final");
  EXPECT_EQ(security_of(bob1)["client_limit_refusals"], 1);
  // Nothing of alice's was lost: both end with their final; then she may submit again.
  for (const char* id : {"a", "b"}) alice1.send({{"v", 1}, {"id", std::string("x") + id}, {"type", "cancel"}, {"target", id}});
  for (const char* id : {"a", "b"}) {
    const json last = alice1.wait_for(id, 30000).last;
    EXPECT_EQ(last["type"], "final") << last.dump();
    EXPECT_EQ(last["finish_reason"], "cancelled");
  }
  alice2.send(test::generate_request("e", {{"prompt", "def g():"}, {"max_tokens", 4}}));
  EXPECT_EQ(alice2.wait_for("e", 30000).last["type"], "final");
}

TEST(PerClientLimit, WithoutCurveEachConnectionIsAClient) {
  PipelineConfig config = test::demo_engine_config();
  config.server.max_inflight_per_client = 1;
  test::LoopbackServer server(config);
  zmq::context_t context{1};
  test::Client busy(context, server.address());
  test::Client other(context, server.address());
  busy.send(test::generate_request("a", {{"prompt", "class A:"}, {"max_tokens", 3000}, {"stream", true}, {"ignore_eos", true}}));
  ASSERT_EQ((*busy.receive(30000))["type"], "delta");
  busy.send(test::generate_request("b", {{"prompt", "x"}, {"max_tokens", 2}}));
  EXPECT_EQ(busy.wait_for("b", 10000).last["code"], "client_limit");
  other.send(test::generate_request("c", {{"prompt", "x"}, {"max_tokens", 2}}));
  EXPECT_EQ(other.wait_for("c", 30000).last["type"], "final");
  busy.send({{"v", 1}, {"id", "x"}, {"type", "cancel"}, {"target", "a"}});
  EXPECT_EQ(busy.wait_for("a", 30000).last["finish_reason"], "cancelled");
  const json s = security_of(other);
  EXPECT_EQ(s["curve"], false);
  EXPECT_EQ(s["client_limit_refusals"], 1);
}

TEST(BindPolicy, LoopbackAndLocalAddresses) {
  for (const char* local : {"tcp://127.0.0.1:5555", "tcp://127.1.2.3:1", "tcp://localhost:5555", "tcp://[::1]:5555",
                            "tcp://::1:5555", "ipc:///tmp/specpipe.sock", "inproc://x"})
    EXPECT_TRUE(server::is_local_zmq_address(local)) << local;
  for (const char* open : {"tcp://*:5555", "tcp://0.0.0.0:5555", "tcp://10.0.0.1:5555", "tcp://[::]:5555",
                           "tcp://eth0:5555", "tcp://128.0.0.1:5555", "tcp://127.0.0.1", "pgm://eth0;239.192.1.1:5555"})
    EXPECT_FALSE(server::is_local_zmq_address(open)) << open;
}

TEST(BindPolicy, NonLoopbackBindWithoutCurveIsRefusedUnlessAllowInsecure) {
  PipelineConfig config = test::demo_engine_config();
  actors::Engine engine(config);
  config.server.endpoint = "tcp://0.0.0.0:*";
  const Error e = error_of([&] { server::Endpoint endpoint(engine, config); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("server.endpoint tcp://0.0.0.0:*: not a loopback address"), std::string::npos)
      << e.what();
  EXPECT_NE(std::string(e.what()).find("allow_insecure"), std::string::npos) << e.what();
  config.server.allow_insecure = true;
  EXPECT_NO_THROW(server::Endpoint endpoint(engine, config));
  if (server::curve_available()) {  // CURVE makes the same address acceptable
    config.server.allow_insecure = false;
    const CurveKeyPair keys = server::make_curve_key_pair();
    config.server.curve = {keys.secret_key, {keys.public_key}};
    EXPECT_NO_THROW(server::Endpoint endpoint(engine, config));
  }
  // The HTTP gateway has no authentication at all: only allow_insecure opens it.
  config.server.http = "0.0.0.0:0";
  config.server.allow_insecure = false;
  const Error h = error_of([&] { server::http::Gateway gateway(engine, config); });
  EXPECT_NE(std::string(h.what()).find("server.http 0.0.0.0:0: not a loopback address"), std::string::npos) << h.what();
  config.server.allow_insecure = true;
  EXPECT_NO_THROW(server::http::Gateway gateway(engine, config));
}

class KeyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!server::curve_available()) GTEST_SKIP() << "libzmq without CURVE";
    dir = fs::temp_directory_path() / fmt::format("specpipe-keys-{}", ::getpid());
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

TEST_F(KeyFiles, KeygenWritesAPairThatLoadsBack) {
  const std::string prefix = (dir / "alice").string();
  const CurveKeyPair pair = server::write_curve_key_pair(prefix, false);
  struct stat st {};
  ASSERT_EQ(::stat((prefix + ".key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(server::load_curve_key(prefix + ".key", server::KeyKind::secret_key, "k"), pair.secret_key);
  EXPECT_EQ(server::load_curve_key(prefix + ".pub", server::KeyKind::public_key, "k"), pair.public_key);
  EXPECT_EQ(server::curve_public_of(pair.secret_key), pair.public_key);
  EXPECT_EQ(server::load_curve_key(pair.public_key, server::KeyKind::public_key, "k"), pair.public_key);  // inline
  // Never overwritten by accident.
  const Error again = error_of([&] { server::write_curve_key_pair(prefix, false); });
  EXPECT_NE(std::string(again.what()).find("exists"), std::string::npos) << again.what();
  EXPECT_EQ(server::load_curve_key(prefix + ".key", server::KeyKind::secret_key, "k"), pair.secret_key);
}

TEST_F(KeyFiles, BadKeysAreRefusedNamingTheKeyAndFile) {
  const std::string prefix = (dir / "bob").string();
  server::write_curve_key_pair(prefix, false);
  fs::permissions(prefix + ".key", fs::perms::group_read | fs::perms::others_read, fs::perm_options::add);
  const Error open = error_of([&] { server::load_curve_key(prefix + ".key", server::KeyKind::secret_key, "server.curve.secret_key"); });
  EXPECT_NE(std::string(open.what()).find("server.curve.secret_key: secret key file " + prefix + ".key is readable by others (mode 0644)"),
            std::string::npos) << open.what();
  const std::string garbage = (dir / "garbage.pub").string();
  std::ofstream(garbage) << "# a comment\nnot a key\n";
  const Error bad = error_of([&] { server::load_curve_key(garbage, server::KeyKind::public_key, "allowed[0]"); });
  EXPECT_NE(std::string(bad.what()).find("allowed[0]: key file " + garbage + " does not hold"), std::string::npos) << bad.what();
  const Error none = error_of([&] { server::load_curve_key("nowhere.pub", server::KeyKind::public_key, "allowed[1]"); });
  EXPECT_EQ(none.code(), ErrorCode::not_found);
  // A client given one key without the other is told which is missing.
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  const Error half = error_of([&] { server::apply_client_curve(socket, {"", prefix + ".pub"}); });
  EXPECT_NE(std::string(half.what()).find("server's public key"), std::string::npos) << half.what();
}

TEST_F(KeyFiles, ConfigResolvesKeyFilesBesideItAndKeepsInlineSecretsOutOfItsPrintout) {
  server::write_curve_key_pair((dir / "server").string(), false);
  const CurveKeyPair carol = server::make_curve_key_pair();
  std::ofstream(dir / "pipeline.yaml") << "server:\n  curve:\n    secret_key: server.key\n    allowed_clients: [server.pub, \""
                                        << carol.public_key << "\"]\n";
  const PipelineConfig c = load_pipeline_config(dir / "pipeline.yaml");
  EXPECT_EQ(c.server.curve.secret_key, (dir / "server.key").string());
  EXPECT_EQ(c.server.curve.allowed_clients, (std::vector<std::string>{(dir / "server.pub").string(), carol.public_key}));
  EXPECT_EQ(parse_pipeline_config(pipeline_config_to_yaml(c), "emitted").server.curve.allowed_clients,
            c.server.curve.allowed_clients);
  PipelineConfig inline_secret = c;
  inline_secret.server.curve.secret_key = carol.secret_key;
  EXPECT_EQ(pipeline_config_to_yaml(inline_secret).find(carol.secret_key), std::string::npos);
}

}  // namespace
}  // namespace specpipe
