#include "tools/gpu/check_support.h"

#include <algorithm>
#include <cmath>

namespace specpipe::gpu_check {

bool Report::compare(const std::string& name, const std::vector<float>& got, const std::vector<float>& ref,
                     double tolerance) {
  double max_abs = 0, scale = 0;
  bool finite = got.size() == ref.size();
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    if (!std::isfinite(got[i])) finite = false;
    max_abs = std::max(max_abs, std::abs(double{got[i]} - double{ref[i]}));
    scale = std::max(scale, std::abs(double{ref[i]}));
  }
  const double max_rel = scale > 0 ? max_abs / scale : max_abs;
  const bool pass = finite && max_rel <= tolerance;
  checks_.push_back({{"name", name}, {"max_abs", max_abs}, {"max_rel", max_rel}, {"tolerance", tolerance},
                     {"pass", pass}});
  if (!pass) ++failures_;
  return pass;
}

bool Report::bitwise(const std::string& name, const float* a, const float* b, size_t n) {
  double max_abs = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    max_abs = std::max(max_abs, std::abs(double{a[i]} - double{b[i]}));
    scale = std::max(scale, std::abs(double{b[i]}));
  }
  const bool pass = std::memcmp(a, b, n * sizeof(float)) == 0;
  checks_.push_back({{"name", name}, {"max_abs", max_abs}, {"max_rel", scale > 0 ? max_abs / scale : max_abs},
                     {"tolerance", "bitwise"}, {"pass", pass}});
  if (!pass) ++failures_;
  return pass;
}

bool Report::exact_count(const std::string& name, int64_t mismatches, const std::string& note) {
  const bool pass = mismatches == 0;
  nlohmann::json c = {{"name", name}, {"max_abs", mismatches}, {"max_rel", mismatches}, {"tolerance", "exact"},
                      {"pass", pass}};
  if (!note.empty()) c["note"] = note;
  checks_.push_back(c);
  if (!pass) ++failures_;
  return pass;
}

void Report::fail(const std::string& name, const std::string& why) {
  checks_.push_back({{"name", name}, {"max_abs", nullptr}, {"max_rel", nullptr}, {"pass", false}, {"error", why}});
  ++failures_;
}

nlohmann::json Report::to_json() const {
  int passed = 0;
  for (const auto& c : checks_) passed += c["pass"].get<bool>() ? 1 : 0;
  return {{"info", info_},
          {"summary", {{"checks", checks_.size()}, {"passed", passed}, {"failed", failures_}}},
          {"checks", checks_},
          {"timings", timings_}};
}

}  // namespace specpipe::gpu_check
