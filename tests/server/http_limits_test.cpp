// The HTTP gateway's limits over real loopback sockets: every bad input is answered with
// a 4xx JSON error naming its code, the server keeps serving and its KV pool ends empty;
// slow clients get 408, a client that disconnects mid-stream has its request cancelled
// (KV freed), and more than server.max_inflight requests get 429.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <thread>

#include "tests/server/http_fixture.h"

namespace specpipe {
namespace {

using nlohmann::json;

struct BadCase {
  const char* name;
  std::string raw;  ///< the whole request as sent
  int status;
  const char* code;
};

std::string post(const std::string& path, const std::string& body, const std::string& extra_headers = {}) {
  return fmt::format("POST {} HTTP/1.1\r\nHost: x\r\n{}Content-Length: {}\r\n\r\n{}", path, extra_headers, body.size(), body);
}

std::vector<BadCase> bad_cases() {
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  return {
      {"malformed json", post(c, "{\"prompt\": "), 400, "malformed_json"},
      {"not an object", post(c, "[1, 2]"), 400, "malformed_json"},
      {"empty body", post(c, ""), 400, "malformed_json"},
      {"prompt missing", post(c, R"({"max_tokens": 4})"), 400, "bad_request"},
      {"prompt a number", post(c, R"({"prompt": 5})"), 400, "bad_request"},
      {"prompt empty", post(c, R"({"prompt": ""})"), 400, "bad_request"},
      {"two prompts", post(c, R"({"prompt": ["a", "b"]})"), 400, "bad_request"},
      {"negative token id", post(c, R"({"prompt": [1, -2]})"), 400, "bad_request"},
      {"token id past the vocabulary", post(c, R"({"prompt": [1, 2000000]})"), 400, "bad_request"},
      {"max_tokens a string", post(c, R"({"prompt": "a", "max_tokens": "5"})"), 400, "bad_request"},
      {"max_tokens negative", post(c, R"({"prompt": "a", "max_tokens": -1})"), 400, "bad_request"},
      {"temperature negative", post(c, R"({"prompt": "a", "temperature": -0.5})"), 400, "bad_request"},
      {"top_p zero", post(c, R"({"prompt": "a", "top_p": 0})"), 400, "bad_request"},
      {"top_k a float", post(c, R"({"prompt": "a", "top_k": 1.5})"), 400, "bad_request"},
      {"seed negative", post(c, R"({"prompt": "a", "seed": -3})"), 400, "bad_request"},
      {"stop a number", post(c, R"({"prompt": "a", "stop": 5})"), 400, "bad_request"},
      {"stop an empty string", post(c, R"({"prompt": "a", "stop": [""]})"), 400, "bad_request"},
      {"stream a string", post(c, R"({"prompt": "a", "stream": "yes"})"), 400, "bad_request"},
      {"n = 2", post(c, R"({"prompt": "a", "n": 2})"), 400, "bad_request"},
      {"logprobs", post(c, R"({"prompt": "a", "logprobs": 3})"), 400, "bad_request"},
      {"presence_penalty", post(c, R"({"prompt": "a", "presence_penalty": 0.5})"), 400, "bad_request"},
      {"unknown field", post(c, R"({"prompt": "a", "foo": 1})"), 400, "bad_request"},
      {"huge integer", post(c, R"({"prompt": "a", "max_tokens": 99999999999999999999})"), 400, "bad_request"},
      {"prompt + max_tokens past the KV store", post(c, R"({"prompt": "a", "max_tokens": 40000})"), 400, "out_of_capacity"},
      {"unknown model", post(c, R"({"prompt": "a", "model": "gpt-4"})"), 404, "model_not_found"},
      {"chat without messages", post(chat, R"({"model": "demo-target"})"), 400, "bad_request"},
      {"chat with a bad role", post(chat, R"({"messages": [{"role": "robot", "content": "x"}]})"), 400, "bad_request"},
      {"chat content a number", post(chat, R"({"messages": [{"role": "user", "content": 3}]})"), 400, "bad_request"},
      {"chat without a template", post(chat, R"({"messages": [{"role": "user", "content": "x"}]})"), 400, "bad_request"},
      {"body over the limit", post(c, std::string(70 * 1024, ' ')), 413, "too_large"},
      {"head over the limit", "GET /health HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n", 431, "too_large"},
      {"not HTTP", "HELLO WORLD\r\n\r\n", 400, "malformed_http"},
      {"bad content length", "POST /v1/completions HTTP/1.1\r\nContent-Length: zz\r\n\r\n", 400, "malformed_http"},
      {"GET on completions", "GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method_not_allowed"},
      {"unknown path", "GET /v2/anything HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not_found"},
  };
}

TEST(HttpLimits, EveryBadInputGetsA4xxJsonErrorAndTheServerKeepsServing) {
  test::LoopbackGateway server;
  for (const BadCase& bad : bad_cases()) {
    test::HttpConnection c(server.address());
    c.send_raw(bad.raw);
    const test::HttpResponse r = c.read_response(10000);
    EXPECT_EQ(r.status, bad.status) << bad.name << ": " << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json") << bad.name;
    json error;
    ASSERT_NO_THROW(error = r.json()) << bad.name << ": " << r.body;
    EXPECT_EQ(error["error"]["code"], bad.code) << bad.name << ": " << r.body;
    EXPECT_FALSE(error["error"]["message"].get<std::string>().empty()) << bad.name;
  }
  // Still serving: a good request on a fresh connection, and nothing left in the KV pool.
  const test::HttpResponse ok =
      test::http_call(server.address(), "POST", "/v1/completions", R"({"prompt": "import sys", "max_tokens": 6})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_TRUE(server.kv_back_to_empty());
}

TEST(HttpLimits, ABadRequestOnAKeepAliveConnectionLeavesItUsable) {
  test::LoopbackGateway server;
  test::HttpConnection c(server.address());
  c.send("POST", "/v1/completions", R"({"prompt": 5})");
  EXPECT_EQ(c.read_response(10000).status, 400);
  c.send("POST", "/v1/completions", R"({"prompt": "a = ", "max_tokens": 3})");
  EXPECT_EQ(c.read_response(60000).status, 200);
}

TEST(HttpLimits, ASlowClientGets408AndAnIdleOneIsClosed) {
  PipelineConfig config = test::http_config();
  config.server.http_timeout_ms = 300;
  test::LoopbackGateway server(config);
  test::HttpConnection slow(server.address());
  slow.send_raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{\"prompt\"");  // and then nothing
  const test::HttpResponse r = slow.read_response(5000);
  EXPECT_EQ(r.status, 408) << r.body;
  EXPECT_EQ(r.json()["error"]["code"], "timeout");
  test::HttpConnection idle(server.address());
  EXPECT_TRUE(idle.closed_by_peer(5000));
  EXPECT_EQ(test::http_call(server.address(), "GET", "/health").status, 200);
}

TEST(HttpLimits, DisconnectMidStreamCancelsTheRequestAndFreesItsKv) {
  test::LoopbackGateway server;
  for (const bool stream : {true, false}) {
    test::HttpConnection c(server.address());
    c.send("POST", "/v1/completions",
           json{{"prompt", "def f():"}, {"max_tokens", 8000}, {"ignore_eos", true}, {"stream", stream}}.dump());
    if (stream) {
      ASSERT_TRUE(c.read_until("data: ", 60000));
    } else {  // wait until the engine holds the request's KV
      for (int i = 0; i < 500 && server.engine().kv_occupancy().sequences == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(server.gateway().inflight(), 1);
    c.close();
    EXPECT_TRUE(server.kv_back_to_empty(30000)) << (stream ? "stream" : "whole");
  }
  const SpecStats stats = server.engine().stats();
  EXPECT_EQ(stats.requests, 2);
  EXPECT_LT(stats.generated, 8000);  // cancelled, not run to max_tokens
  const std::string metrics = test::http_call(server.address(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("specpipe_http_client_disconnects_total 2"), std::string::npos) << metrics;
}

TEST(HttpLimits, MoreThanMaxInflightRequestsGet429) {
  PipelineConfig config = test::http_config();
  config.server.max_inflight = 2;
  test::LoopbackGateway server(config);
  const std::string long_stream =
      json{{"prompt", "def f():"}, {"max_tokens", 8000}, {"ignore_eos", true}, {"stream", true}}.dump();
  test::HttpConnection a(server.address()), b(server.address());
  a.send("POST", "/v1/completions", long_stream);
  b.send("POST", "/v1/completions", long_stream);
  ASSERT_TRUE(a.read_until("data: ", 60000));
  ASSERT_TRUE(b.read_until("data: ", 60000));
  const test::HttpResponse r = test::http_call(server.address(), "POST", "/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.json()["error"]["code"], "overloaded");
  EXPECT_EQ(r.header("retry-after"), "1");
  a.close();
  b.close();
  ASSERT_TRUE(server.kv_back_to_empty(30000));
  EXPECT_EQ(test::http_call(server.address(), "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2})").status, 200);
}

}  // namespace
}  // namespace specpipe
