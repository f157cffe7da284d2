#include "kvstore/kv_tensors.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace specpipe {
namespace {

TEST(KvTensors, ShapeAndZeroInitialisation) {
  KvTensors tensors(/*num_layers=*/3, /*num_blocks=*/4, /*block_size=*/2, /*kv_heads=*/2,
                    /*head_dim=*/5);
  EXPECT_EQ(tensors.num_layers(), 3);
  EXPECT_EQ(tensors.slot_stride(), 10);
  const int64_t floats = 4 * 2 * 10;
  EXPECT_EQ(tensors.bytes(), size_t{2 * 3 * floats * sizeof(float)});
  for (int32_t layer = 0; layer < 3; ++layer) {
    for (int64_t i = 0; i < floats; ++i) {
      ASSERT_EQ(tensors.k(layer)[i], 0.0f);
      ASSERT_EQ(tensors.v(layer)[i], 0.0f);
    }
  }
}

TEST(KvTensors, CopyBlockCopiesEveryLayerAndNothingElse) {
  KvTensors tensors(2, 3, 4, 1, 2);
  const int64_t floats = 3 * 4 * 2, block_floats = 4 * 2;
  for (int32_t layer = 0; layer < 2; ++layer) {
    for (int64_t i = 0; i < floats; ++i) {
      tensors.k(layer)[i] = static_cast<float>(1000 * layer + i);
      tensors.v(layer)[i] = static_cast<float>(-1000 * layer - i);
    }
  }
  tensors.copy_block(0, 2);
  for (int32_t layer = 0; layer < 2; ++layer) {
    for (int64_t i = 0; i < floats; ++i) {
      const int64_t source = i >= 2 * block_floats ? i - 2 * block_floats : i;
      EXPECT_EQ(tensors.k(layer)[i], static_cast<float>(1000 * layer + source));
      EXPECT_EQ(tensors.v(layer)[i], static_cast<float>(-1000 * layer - source));
    }
  }
  EXPECT_THROW(tensors.copy_block(0, 3), Error);
  EXPECT_THROW(tensors.copy_block(-1, 1), Error);
}

TEST(KvTensors, RejectsEmptyShapes) {
  EXPECT_THROW(KvTensors(0, 1, 1, 1, 1), Error);
  EXPECT_THROW(KvTensors(1, 1, 1, 1, 0), Error);
  try {
    KvTensors(1, 1, 0, 1, 1);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("block_size"), std::string::npos);
  }
}

}  // namespace
}  // namespace specpipe
