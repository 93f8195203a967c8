#pragma once
// Small text helpers for what users type and what messages print.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zs {

/// `text` safe to print: bytes that are not printable are written as \xNN — control bytes
/// (newline and tab stay), DEL, and bytes that are not part of well-formed UTF-8. So a damaged
/// file's contents quoted in a message never reach a terminal (or a JSON event) raw.
std::string printable(std::string_view text);

/// A path without trailing separators, as shell completion writes folders ("runs/x/" ->
/// "runs/x"); "/" stays "/", and "" stays "".
std::string without_trailing_slash(std::string_view path);

/// A byte count for people: "13.1 GiB", "512.0 MiB", "0 B" (binary units, one decimal).
std::string format_bytes(std::int64_t bytes);

/// Items as a sentence lists them: "a", "a or b", "a, b or c".
std::string or_list(const std::vector<std::string>& items);

/// A number as Python's str(float) writes it (sd-scripts' metadata): "16.0", "0.5", "0.1" — the
/// shortest text that reads back as the same double.
std::string python_float(double v);

}  // namespace zs
