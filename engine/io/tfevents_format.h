#pragma once
// The TensorBoard event-file format, as constants: TFRecord's CRC mask, the file version, and
// the protobuf field numbers and wire types of the messages ZeroStudio writes
// (tensorflow/core/util/event.proto, core/framework/summary.proto, tensor.proto, types.proto;
// ../shared/REFERENCE.md "TensorBoard event files"). Used by io/tfevents.cpp only; the tests
// decode with their own numbers.

#include <cstdint>

namespace zs::io::tfevents {

inline constexpr std::uint32_t kCrcMaskDelta = 0xA282EAD8u;  ///< masked = ((c >> 15 | c << 17) + delta)
inline constexpr std::uint32_t kCrc32cPolynomial = 0x82F63B78u;  ///< reflected Castagnoli
inline constexpr const char* kFileVersion = "brain.Event:2";

// Field numbers (tensorflow/core/util/event.proto, framework/summary.proto, tensor.proto).
inline constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
inline constexpr int kSummaryValue = 1;
inline constexpr int kValueTag = 1, kValueSimpleValue = 2, kValueImage = 4, kValueTensor = 8, kValueMetadata = 9;
inline constexpr int kImageHeight = 1, kImageWidth = 2, kImageColorspace = 3, kImageEncoded = 4;
inline constexpr int kMetadataPluginData = 1, kPluginName = 1;
inline constexpr int kTensorDtype = 1, kTensorStringVal = 8;
inline constexpr int kDtString = 7;
// Wire types.
inline constexpr int kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5;

}  // namespace zs::io::tfevents
