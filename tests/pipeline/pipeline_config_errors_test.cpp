// Pipeline YAML files that must be refused: each error carries its code, the source
// name and the key path at fault.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "pipeline/pipeline_config.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

namespace fs = std::filesystem;

/// The Error that parsing `yaml` (named "x.yaml") throws; fails the test if none.
Error parse_error(const std::string& yaml) {
  try {
    parse_pipeline_config(yaml, "x.yaml");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return Error(ErrorCode::internal, "");
}

/// The Error that loading `file` throws; fails the test if none.
Error load_error(const fs::path& file) {
  try {
    load_pipeline_config(file);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << file;
  return Error(ErrorCode::internal, "");
}

struct BadConfig {
  const char* name;
  const char* yaml;
  const char* key;     ///< the key path the message must name ("" for none)
  const char* reason;  ///< a part of the message after the key path
};

void PrintTo(const BadConfig& c, std::ostream* os) { *os << c.name; }

class PipelineConfigRejects : public testing::TestWithParam<BadConfig> {};

TEST_P(PipelineConfigRejects, NamingSourceAndKey) {
  const BadConfig& c = GetParam();
  const Error e = parse_error(c.yaml);
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  const std::string prefix = *c.key ? std::string("x.yaml: ") + c.key + ": " : "x.yaml: ";
  const std::string message = e.what();
  EXPECT_EQ(message.rfind(prefix, 0), 0u) << message;
  EXPECT_NE(message.find(c.reason), std::string::npos) << message;
}

// clang-format off
const BadConfig kBadConfigs[] = {
  // Unknown keys, at every level.
  {"UnknownTopLevelKey", "modles: {target: x}", "modles",
   "unknown key (known: version, models, device, threads, kv, offload, slots, scheduler, server, defaults, logging, "
   "plugins)"},
  {"UnknownOffloadKey", "offload: {host: 4}", "offload.host", "known: enable, host_bytes, ring_slots, overlap, policy"},
  {"OffloadRingSlotsBelowTwo", "offload: {enable: true, ring_slots: 1}", "offload.ring_slots",
   "1 is out of range [2, 64]"},
  {"OffloadHostBytesZero", "offload: {host_bytes: 0}", "offload.host_bytes", "0 is out of range [1, "},
  {"OffloadUnknownPolicy", "offload: {policy: lru}", "offload.policy", "unknown value \"lru\" (known: longest)"},
  {"OffloadEnableNotABool", "offload: {enable: yes}", "offload.enable", ""},
  {"UnknownNestedKey", "slots: {drafter: {gama: 4}}", "slots.drafter.gama",
   "unknown key (known: type, gamma, max_gamma, ngram, draft_ahead)"},
  {"UnknownDeepKey", "slots: {drafter: {ngram: {max: 4}}}", "slots.drafter.ngram.max", "known: max_n, min_n"},
  {"UnknownSlot", "slots: {verifier: {type: fixed}}", "slots.verifier", "unknown key"},
  {"KeyGivenTwice", "kv:\n  tokens: 64\n  tokens: 128\n", "kv.tokens", "given twice"},
  {"NonStringKey", "kv: {[a, b]: 1}", "kv", "keys must be plain strings, got a list"},
  // Wrong value types.
  {"IntegerGivenText", "kv: {tokens: lots}", "kv.tokens", "expected an integer, got \"lots\""},
  {"IntegerGivenReal", "kv: {block_size: 4.5}", "kv.block_size", "expected an integer, got \"4.5\""},
  {"IntegerGivenHex", "threads: 0x10", "threads", "expected an integer, got \"0x10\""},
  {"IntegerGivenQuoted", "scheduler: {max_batch: \"8\"}", "scheduler.max_batch", "(quoted, so a string)"},
  {"IntegerGivenList", "scheduler: {max_batch: [8]}", "scheduler.max_batch", "expected an integer, got a list"},
  {"IntegerGivenNull", "threads: ~", "threads", "expected an integer, got nothing (null)"},
  {"RealGivenText", "defaults: {temperature: hot}", "defaults.temperature", "expected a number, got \"hot\""},
  {"RealGivenMap", "defaults: {top_p: {a: 1}}", "defaults.top_p", "expected a number, got a map"},
  {"BoolGivenYes", "kv: {prefix_cache: yes}", "kv.prefix_cache", "expected true or false, got \"yes\""},
  {"FusedStepGivenANumber", "models: {draft_fused_step: 1}", "models.draft_fused_step", "expected true or false, got \"1\""},
  {"FusedBlocksNegative", "models: {draft_fused_blocks: -1}", "models.draft_fused_blocks", "-1 is out of range [0, 1024]"},
  {"DraftAheadGivenABool", "slots: {drafter: {draft_ahead: true}}", "slots.drafter.draft_ahead", "unknown value \"true\""},
  {"BoolGivenOne", "defaults: {stop_at_eos: 1}", "defaults.stop_at_eos", "expected true or false, got \"1\""},
  {"BoolGivenCapitalised", "defaults: {stop_at_eos: True}", "defaults.stop_at_eos", "got \"True\""},
  {"StringGivenList", "server: {endpoint: [tcp://a]}", "server.endpoint", "expected a string, got a list"},
  {"StringGivenNull", "models: {target: }", "models.target", "expected a string, got nothing (null)"},
  {"StringEmpty", "device: \"\"", "device", "must not be empty"},
  {"MapGivenList", "kv: [1, 2]", "kv", "expected a map of settings, got a list"},
  {"MapGivenScalar", "slots: {drafter: model}", "slots.drafter", "expected a map of settings, got \"model\""},
  {"TopLevelList", "- a\n- b\n", "", "expected a map of settings, got a list"},
  // Out of range: below, above, int64 overflow, open bounds, bounds set by another key.
  {"BelowMinimum", "scheduler: {max_batch: 0}", "scheduler.max_batch", "0 is out of range [1, 4096]"},
  {"AboveMaximum", "scheduler: {max_queue: 1000001}", "scheduler.max_queue", "is out of range [1, 1000000]"},
  {"Negative", "threads: -1", "threads", "-1 is out of range [0, 4096]"},
  {"Int64Overflow", "kv: {tokens: 99999999999999999999999}", "kv.tokens",
   "99999999999999999999999 is out of range [1, 2147483648]"},
  {"BlockSizeTooLarge", "kv: {block_size: 2048}", "kv.block_size", "out of range [1, 1024]"},
  {"MessageBytesTooSmall", "server: {max_message_bytes: 255}", "server.max_message_bytes",
   "out of range [256, 1073741824]"},
  {"GraceTooLong", "server: {shutdown_grace_ms: 600001}", "server.shutdown_grace_ms", "out of range [0, 600000]"},
  {"HeartbeatTooShort", "server: {heartbeat_timeout_ms: 99}", "server.heartbeat_timeout_ms",
   "out of range [100, 600000]"},
  {"ActorThreadsTooMany", "scheduler: {actor_threads: 65}", "scheduler.actor_threads", "out of range [1, 64]"},
  {"MicroBatchesZero", "scheduler: {micro_batches: 0}", "scheduler.micro_batches", "out of range [1, 16]"},
  {"PrefillChunkTooLarge", "scheduler: {prefill_chunk: 65537}", "scheduler.prefill_chunk", "out of range"},
  {"InflightZero", "server: {max_inflight: 0}", "server.max_inflight", "out of range [1, 1000000]"},
  {"PerClientInflightZero", "server: {max_inflight_per_client: 0}", "server.max_inflight_per_client",
   "out of range [1, 1000000]"},
  {"CurveWithoutAllowedClients", "server: {curve: {secret_key: \"JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\"}}",
   "server.curve.allowed_clients", "expected a non-empty list of client public keys"},
  {"CurveEmptyAllowedClients",
   "server: {curve: {secret_key: \"JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\", allowed_clients: []}}",
   "server.curve.allowed_clients", "expected a non-empty list"},
  {"CurveWithoutSecretKey", "server: {curve: {allowed_clients: [\"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"]}}",
   "server.curve.secret_key", "CURVE needs the server's secret key"},
  {"CurveKeyNeitherKeyNorFile", "server: {curve: {secret_key: no-such-file.key, allowed_clients: [x]}}",
   "server.curve.secret_key", "is neither a 40-character Z85 key nor a key file"},
  {"CurveClientKeyTooShort",
   "server: {curve: {secret_key: \"JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\", allowed_clients: [\"rq:rM>}U?@Lns47\"]}}",
   "server.curve.allowed_clients", "is neither a 40-character Z85 key nor a key file"},
  {"CurveUnknownKey", "server: {curve: {secret: x}}", "server.curve.secret", "unknown key"},
  {"AllowInsecureNotBoolean", "server: {allow_insecure: yes}", "server.allow_insecure", ""},
  {"MaxTokensTooMany", "defaults: {max_tokens: 1000001}", "defaults.max_tokens", "out of range [0, 1000000]"},
  {"TopKNegative", "defaults: {top_k: -1}", "defaults.top_k", "out of range [0, 2147483647]"},
  // The models' own limit is checked when they are opened (pipeline_device_test).
  {"MaxGammaTooLarge", "slots: {drafter: {max_gamma: 2147483648}}", "slots.drafter.max_gamma",
   "out of range [0, 2147483647]"},
  {"NgramTooLong", "slots: {drafter: {ngram: {max_n: 17}}}", "slots.drafter.ngram.max_n", "out of range [1, 16]"},
  {"TemperatureNegative", "defaults: {temperature: -0.1}", "defaults.temperature", "-0.1 is out of range [0, inf)"},
  {"TopPZero", "defaults: {top_p: 0}", "defaults.top_p", "0 is out of range (0, 1]"},
  {"TopPAboveOne", "defaults: {top_p: 1.01}", "defaults.top_p", "1.01 is out of range (0, 1]"},
  {"RealTwoSigns", "defaults: {temperature: +-1}", "defaults.temperature", "expected a number, got \"+-1\""},
  {"IntegerTwoSigns", "threads: +-1", "threads", "expected an integer, got \"+-1\""},
  {"RealBeyondFloat", "defaults: {temperature: 1e300}", "defaults.temperature", "out of range [0, inf)"},
  {"RealOverflow", "defaults: {temperature: 1e999}", "defaults.temperature", "out of range [0, inf)"},
  {"GammaAboveMaxGamma", "slots: {drafter: {gamma: 9, max_gamma: 8}}", "slots.drafter.gamma",
   "9 is out of range [0, 8] (max_gamma)"},
  {"MinNAboveMaxN", "slots: {drafter: {ngram: {max_n: 2, min_n: 3}}}", "slots.drafter.ngram.min_n",
   "3 is greater than max_n (2)"},
  {"KvSmallerThanABlock", "kv: {tokens: 8}", "kv.tokens", "8 is less than kv.block_size (16)"},
  {"KvTokensNotAuto", "kv: {tokens: automatic}", "kv.tokens", "expected an integer, got \"automatic\""},
  {"KvMemoryFractionZero", "kv: {memory_fraction: 0}", "kv.memory_fraction", "0 is out of range (0, 1]"},
  {"KvMemoryFractionAboveOne", "kv: {memory_fraction: 1.5}", "kv.memory_fraction", "out of range (0, 1]"},
  {"KvDtypeUnknown", "kv: {dtype: fp16}", "kv.dtype", "unknown value \"fp16\" (known: fp32, bf16)"},
  // Not finite.
  {"NaN", "defaults: {temperature: .nan}", "defaults.temperature", ".nan is not a finite number"},
  {"NaNCapitalised", "defaults: {top_p: .NaN}", "defaults.top_p", ".NaN is not a finite number"},
  {"Infinity", "defaults: {temperature: .inf}", "defaults.temperature", ".inf is not a finite number"},
  {"MinusInfinity", "defaults: {temperature: -.Inf}", "defaults.temperature", "-.Inf is not a finite number"},
  {"BareNan", "defaults: {top_p: nan}", "defaults.top_p", "nan is not a finite number"},
  {"BareInf", "defaults: {temperature: inf}", "defaults.temperature", "inf is not a finite number"},
  // Choices: slot strategies, drafter kinds, log levels, devices, endpoints, version.
  {"UndeclaredVerifyPlanPlugin", "slots: {verify_plan: {type: scv}}", "slots.verify_plan.type",
   "unknown value \"scv\" (known: fixed; a plugin must be declared under plugins)"},
  {"UndeclaredKvWritePlugin", "slots: {kv_write: {type: nwor}}", "slots.kv_write.type", "(known: direct;"},
  {"PluginFileMissing", "plugins: {nwor: {path: /no/such/libnwor.so}}", "plugins.nwor.path", "not found"},
  // a path component past NAME_MAX (ENAMETOOLONG): not found, not a filesystem_error
  {"PluginPathTooLong",
   "plugins: {nwor: {path: /tmp/"
   "ppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp"
   "ppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp"
   "ppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp"
   "ppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp"
   ".so}}",
   "plugins.nwor.path", "not found"},
  {"PluginConfigNotAMap", "plugins: {nwor: {path: /no/such.so, config: [1, 2]}}", "plugins.nwor.config",
   "expected a map"},
  {"PluginUnknownKey", "plugins: {nwor: {file: x.so}}", "plugins.nwor.file", "unknown key"},
  {"PluginBuiltinName", "plugins: {direct: {path: x.so}}", "plugins", "is a built-in strategy's name"},
  {"UnsupportedAcceptance", "slots: {acceptance: {type: typical}}", "slots.acceptance.type", "(known: standard)"},
  {"UnknownDrafter", "slots: {drafter: {type: medusa}}", "slots.drafter.type", "(known: model, ngram, none)"},
  {"UnknownLogLevel", "logging: {level: verbose}", "logging.level", "(known: trace, debug, info, warn, error, off)"},
  {"UnknownGemm", "models: {gemm: fastest}", "models.gemm", "(known: auto, cublaslt, rows, mma)"},
  {"UnknownDevice", "device: gpu", "device", "expected cpu or cuda:N, got \"gpu\""},
  {"BadCudaIndex", "device: cuda:x", "device", "expected cpu or cuda:N"},
  {"HttpEndpoint", "server: {endpoint: \"http://127.0.0.1:5555\"}", "server.endpoint", "is not a ZeroMQ address"},
  {"SchemeOnlyEndpoint", "server: {endpoint: \"tcp://\"}", "server.endpoint", "is not a ZeroMQ address"},
  {"HttpWithoutPort", "server: {http: \"127.0.0.1\"}", "server.http", "is not HOST:PORT"},
  {"HttpPortTooLarge", "server: {http: \"127.0.0.1:65536\"}", "server.http", "is not HOST:PORT"},
  {"HttpTimeoutTooShort", "server: {http_timeout_ms: 99}", "server.http_timeout_ms", "out of range [100, 600000]"},
  {"VersionTwo", "version: 2", "version", "version 2 is not supported (this build reads 1)"},
  {"VersionQuoted", "version: \"1\"", "version", "(quoted, so a string)"},
  // Document level. Column 23 is the "}" that closes a list.
  {"MalformedYaml", "kv:\n  tokens: 64\nslots: {drafter: [1, 2}\n", "line 3, column 23", "malformed YAML: "},
  {"TwoDocuments", "threads: 1\n---\nthreads: 2\n", "", "holds more than one YAML document, expected one"},
  // yaml-cpp reads ",K" as endless empty documents (fuzz/pipeline_yaml_fuzz.cpp): a quick
  // refusal, not YAML::LoadAll filling memory.
  {"EndlessDocuments", ",K", "", "holds more than one YAML document, expected one"},
};
// clang-format on

INSTANTIATE_TEST_SUITE_P(Table, PipelineConfigRejects, testing::ValuesIn(kBadConfigs),
                         [](const testing::TestParamInfo<BadConfig>& param) { return param.param.name; });

TEST(PipelineConfigErrors, MissingFileIsNotFound) {
  const fs::path dir = test::scratch_dir("config-missing");
  const Error e = load_error(dir / "nope.yaml");
  EXPECT_EQ(e.code(), ErrorCode::not_found);
  EXPECT_EQ(std::string(e.what()), (dir / "nope.yaml").string() + ": no such pipeline config file");
  fs::remove_all(dir);
}

TEST(PipelineConfigErrors, FileErrorsNameTheFile) {
  const fs::path dir = test::scratch_dir("config-file");
  std::ofstream(dir / "pipeline.yaml") << "kv:\n  tokens: lots\n";
  const Error e = load_error(dir / "pipeline.yaml");
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(std::string(e.what()), (dir / "pipeline.yaml").string() + ": kv.tokens: expected an integer, got \"lots\"");
  fs::remove_all(dir);
}

TEST(PipelineConfigErrors, MissingModelNamesTheKey) {
  const Error target = parse_error("models: {target: no-such-model-anywhere}");
  EXPECT_EQ(target.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(target.what()).find("x.yaml: models.target: model 'no-such-model-anywhere' not found"),
            std::string::npos)
      << target.what();

  const Error draft = parse_error("models: {draft: /no/such/dir}");
  EXPECT_EQ(draft.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(draft.what()).find("x.yaml: models.draft: "), std::string::npos) << draft.what();

  // A name the file system refuses (a component past NAME_MAX: ENAMETOOLONG) is a model
  // not found like any other, not a std::filesystem_error (found by the pipeline_yaml
  // fuzzer: an unterminated quote made the rest of the file the name).
  const std::string long_name(300, 'm');
  const Error too_long = parse_error("models: {target: " + long_name + "}");
  EXPECT_EQ(too_long.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(too_long.what()).find("models.target: model '" + long_name + "' not found"), std::string::npos)
      << too_long.what();

  // The draft model is only looked up for the model drafter.
  for (const char* type : {"ngram", "none"}) {
    const std::string yaml = std::string("models: {draft: /no/such/dir}\nslots: {drafter: {type: ") + type + "}}";
    EXPECT_EQ(parse_pipeline_config(yaml, "x.yaml").models.draft, "/no/such/dir");
  }
}

TEST(PipelineConfigErrors, MissingModelBesideAFileSaysWhereItLooked) {
  const fs::path dir = test::scratch_dir("config-model");
  std::ofstream(dir / "p.yaml") << "models: {target: ./weights}\n";
  const Error e = load_error(dir / "p.yaml");
  const std::string message = e.what();
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(message.rfind((dir / "p.yaml").string() + ": models.target: ", 0), 0u) << message;
  EXPECT_NE(message.find("nor beside the config file (" + (dir / "weights").string() + ")"), std::string::npos)
      << message;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace specpipe
