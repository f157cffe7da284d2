#pragma once
/// The vendored models, loaded once per test process.
#include "model/transformer.h"

namespace specpipe::test {

/// "demo-target", "demo-draft" or "llama-tiny-random".
Transformer& model(const char* name);

}  // namespace specpipe::test
