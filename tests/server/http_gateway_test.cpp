// The HTTP gateway over real loopback sockets: greedy output over HTTP equals the golden
// data (Hugging Face's greedy tokens) and Engine::generate, streamed and whole; chat
// through a ChatML template and its refusal without one; /v1/models, /health, /metrics;
// keep-alive; and a shutdown that still ends open streams.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/server/http_fixture.h"
#include "tests/support/golden.h"
#include "tests/support/sanitizer.h"

namespace specpipe {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::vector<int32_t> streamed_tokens(const std::vector<json>& events) {
  std::vector<int32_t> tokens;
  for (const json& e : events)
    if (e.contains("specpipe") && e["specpipe"].contains("tokens"))
      for (int32_t t : e["specpipe"]["tokens"]) tokens.push_back(t);
  return tokens;
}

TEST(HttpGateway, GreedyOutputEqualsTheGoldenTokensWholeAndStreamed) {
  test::LoopbackGateway server;
  const auto& cases = test::golden_public()["cases"];
  const size_t n = test::under_sanitizer() ? 4 : cases.size();
  std::vector<std::thread> clients;
  std::vector<std::string> failures(n);
  for (size_t i = 0; i < n; ++i)
    clients.emplace_back([&, i] {
      const bool stream = i % 2 == 1;
      const json body = {{"model", "demo-target"}, {"prompt", cases[i]["prompt_ids"]}, {"max_tokens", 96},
                         {"temperature", 0}, {"ignore_eos", true}, {"stream", stream}};
      const test::HttpResponse r = test::http_call(server.address(), "POST", "/v1/completions", body.dump());
      const auto want = test::ids(cases[i]["target_greedy_96"]);
      std::vector<int32_t> got;
      if (stream) {
        bool done = false;
        const auto events = test::sse_events(r.body, &done);
        got = streamed_tokens(events);
        if (!done || events.empty() || events.back()["choices"][0]["finish_reason"] != "length")
          failures[i] = "stream did not end with finish_reason length and [DONE]: " + r.body.substr(0, 400);
      } else {
        got = r.json()["specpipe"]["tokens"].get<std::vector<int32_t>>();
        if (r.json()["usage"]["completion_tokens"] != 96) failures[i] = "usage.completion_tokens != 96";
      }
      if (r.status != 200) failures[i] = fmt::format("status {}: {}", r.status, r.body.substr(0, 400));
      else if (got != want) failures[i] = fmt::format("case {}: tokens differ from target_greedy_96", i);
    });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(failures[i], "") << "case " << i;
  EXPECT_TRUE(server.kv_back_to_empty());
}

TEST(HttpGateway, TextPromptStreamedEqualsWholeEqualsEngineGenerate) {
  test::LoopbackGateway server;
  const std::string prompt = test::golden_public()["cases"][3]["prompt"];
  json body = {{"prompt", prompt}, {"max_tokens", 40}, {"ignore_eos", true}};
  const test::HttpResponse whole = test::http_call(server.address(), "POST", "/v1/completions", body.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.header("content-type"), "application/json");
  const json w = whole.json();
  EXPECT_EQ(w["object"], "text_completion");
  EXPECT_EQ(w["choices"][0]["finish_reason"], "length");
  EXPECT_GT(w["specpipe"]["stats"]["rounds"].get<int64_t>(), 0);
  EXPECT_EQ(w["usage"]["prompt_tokens"].get<int64_t>() + 40, w["usage"]["total_tokens"].get<int64_t>());

  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const test::HttpResponse streamed = test::http_call(server.address(), "POST", "/v1/completions", body.dump());
  ASSERT_EQ(streamed.status, 200);
  EXPECT_EQ(streamed.header("content-type"), "text/event-stream");
  bool done = false;
  const auto events = test::sse_events(streamed.body, &done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_TRUE(done);
  std::string text;
  for (const json& e : events)
    if (!e["choices"].empty()) text += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, w["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(events.back()["usage"], w["usage"]);  // include_usage: the last chunk, no choices
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events[events.size() - 2]["specpipe"]["stats"]["generated"], 40);

  const actors::Completion want =
      server.engine().generate(test::greedy_request(server.engine().tokenizer().encode(prompt), 40));
  EXPECT_EQ(w["specpipe"]["tokens"].get<std::vector<int32_t>>(), want.tokens);
  EXPECT_EQ(w["choices"][0]["text"].get<std::string>(), want.text);
}

TEST(HttpGateway, StopStringsAndSeededSamplingAreMapped) {
  test::LoopbackGateway server;
  const std::string prompt = "def fib(n):";
  const json greedy = {{"prompt", prompt}, {"max_tokens", 32}, {"ignore_eos", true}};
  const std::string text = test::http_call(server.address(), "POST", "/v1/completions", greedy.dump()).json()["choices"][0]["text"];
  ASSERT_GT(text.size(), 8u);
  const std::string stop = text.substr(4, 3);
  json stopped = greedy;
  stopped["stop"] = stop;  // a bare string, as OpenAI allows
  const json s = test::http_call(server.address(), "POST", "/v1/completions", stopped.dump()).json();
  EXPECT_EQ(s["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(s["choices"][0]["text"], text.substr(0, text.find(stop)));

  const json sampled = {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0.9}, {"top_p", 0.95}, {"top_k", 50},
                        {"seed", 7}, {"ignore_eos", true}};
  const json a = test::http_call(server.address(), "POST", "/v1/completions", sampled.dump()).json();
  const json b = test::http_call(server.address(), "POST", "/v1/completions", sampled.dump()).json();
  EXPECT_EQ(a["specpipe"]["tokens"], b["specpipe"]["tokens"]);  // same seed, same output
  actors::RequestSpec spec = test::greedy_request(server.engine().tokenizer().encode(prompt), 24);
  spec.params.sampling.temperature = 0.9f;
  spec.params.sampling.top_p = 0.95f;
  spec.params.sampling.top_k = 50;
  spec.params.seed = 7;
  EXPECT_EQ(a["specpipe"]["tokens"].get<std::vector<int32_t>>(), server.engine().generate(spec).tokens);
}

TEST(HttpGateway, ChatUsesAChatMLTemplateAndIsRefusedWithoutOne) {
  {
    test::LoopbackGateway plain;  // the demo model has no chat template
    const json body = {{"model", "demo-target"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    const test::HttpResponse r = test::http_call(plain.address(), "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("no chat template"), std::string::npos) << r.body;
  }
  // The demo target with a ChatML template in its tokenizer_config.json.
  const fs::path dir = fs::temp_directory_path() / fmt::format("specpipe-chatml-{}", ::getpid());
  fs::create_directories(dir);
  PipelineConfig config = test::http_config();
  for (const auto& f : fs::directory_iterator(config.models.target))
    if (f.path().filename() != "tokenizer_config.json") fs::create_symlink(fs::absolute(f.path()), dir / f.path().filename());
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"})";
  config.models.target = dir.string();
  {
    test::LoopbackGateway server(config);
    const json messages = {{{"role", "system"}, {"content", "You write Python."}},
                           {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "def add(a, b):"}}}}}};
    const json body = {{"model", dir.filename().string()}, {"messages", messages}, {"max_tokens", 16}, {"ignore_eos", true}};
    const test::HttpResponse r = test::http_call(server.address(), "POST", "/v1/chat/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["object"], "chat.completion");
    EXPECT_EQ(r.json()["choices"][0]["message"]["role"], "assistant");
    const std::string rendered =
        "<|im_start|>system\nYou write Python.<|im_end|>\n<|im_start|>user\ndef add(a, b):<|im_end|>\n<|im_start|>assistant\n";
    const json plain = {{"prompt", rendered}, {"max_tokens", 16}, {"ignore_eos", true}, {"stop", "<|im_end|>"}};
    const json want = test::http_call(server.address(), "POST", "/v1/completions", plain.dump()).json();
    EXPECT_EQ(r.json()["choices"][0]["message"]["content"], want["choices"][0]["text"]);

    json streamed = body;
    streamed["stream"] = true;
    const test::HttpResponse s = test::http_call(server.address(), "POST", "/v1/chat/completions", streamed.dump());
    const auto events = test::sse_events(s.body);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.front()["object"], "chat.completion.chunk");
    EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
    std::string text;
    for (const json& e : events) text += e["choices"][0]["delta"].value("content", "");
    EXPECT_EQ(text, want["choices"][0]["text"]);
  }
  fs::remove_all(dir);
}

TEST(HttpGateway, ModelsHealthAndPrometheusMetrics) {
  test::LoopbackGateway server;
  const json models = test::http_call(server.address(), "GET", "/v1/models").json();
  EXPECT_EQ(models["data"][0]["id"], "demo-target");
  const test::HttpResponse health = test::http_call(server.address(), "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json()["status"], "ok");
  test::http_call(server.address(), "POST", "/v1/completions", json{{"prompt", "import os"}, {"max_tokens", 8}}.dump());
  test::http_call(server.address(), "POST", "/v1/completions", "{");
  const test::HttpResponse m = test::http_call(server.address(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.header("content-type").rfind("text/plain; version=0.0.4", 0), 0u);
  for (const char* line : {"specpipe_http_requests_total{route=\"/v1/completions\",code=\"200\"} 1",
                           "specpipe_http_requests_total{route=\"/v1/completions\",code=\"400\"} 1",
                           "# TYPE specpipe_http_request_duration_seconds histogram",
                           "specpipe_http_request_duration_seconds_bucket{route=\"/v1/completions\",le=\"+Inf\"} 2",
                           "specpipe_http_time_to_first_token_seconds_count 1", "specpipe_requests_total 1",
                           "specpipe_generated_tokens_total 8", "# TYPE specpipe_rounds_total counter",
                           "specpipe_draft_tokens_accepted_total", "specpipe_acceptance_rate", "specpipe_kv_blocks{state=\"used\"} 0",
                           "specpipe_kv_usage_ratio 0", "# TYPE specpipe_plugin_fallbacks_total counter",
                           "specpipe_http_inflight_requests 0"})
    EXPECT_NE(m.body.find(line), std::string::npos) << line << "\n" << m.body;
}

TEST(HttpGateway, KeepAliveServesSeveralRequestsOnOneConnection) {
  test::LoopbackGateway server;
  test::HttpConnection c(server.address());
  for (int i = 0; i < 3; ++i) {
    const json body = {{"prompt", "x = "}, {"max_tokens", 4}, {"stream", i == 1}};
    c.send("POST", "/v1/completions", body.dump());
    const test::HttpResponse r = c.read_response(60000);
    ASSERT_EQ(r.status, 200) << "request " << i;
    EXPECT_EQ(r.headers.count("connection"), 0u);
  }
  c.send("GET", "/health");
  EXPECT_EQ(c.read_response(5000).status, 200);
}

TEST(HttpGateway, ShutdownEndsOpenStreamsWithTheirLastEvents) {
  test::LoopbackGateway server;
  test::HttpConnection c(server.address());
  c.send("POST", "/v1/completions",
         json{{"prompt", "def f():"}, {"max_tokens", 8000}, {"ignore_eos", true}, {"stream", true}}.dump());
  ASSERT_TRUE(c.read_until("data: ", 60000));
  server.gateway().shutdown(std::chrono::milliseconds(100));
  const test::HttpResponse r = c.read_response(10000);
  bool done = false;
  const auto events = test::sse_events(r.body, &done);
  EXPECT_TRUE(done) << r.body.substr(r.body.size() > 500 ? r.body.size() - 500 : 0);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "abort");
  EXPECT_EQ(events.back()["specpipe"]["finish_reason"], "cancelled");
  EXPECT_TRUE(server.kv_back_to_empty());
}

}  // namespace
}  // namespace specpipe
