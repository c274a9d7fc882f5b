// Chinese ITN word lists: fixed expressions that must stay as written
// (一会儿, 三心二意, 五十步笑百步 ...), whitelist phrases (全球定位系统 -> GPS),
// currencies (美元 -> US$) and measure units kept after converted numbers.
#pragma once

#include <cstddef>
#include <string_view>

#include "zh_numbers.hpp"

namespace qasr::itn::zh {

// Length (code points) of a fixed expression starting at i, or 0.
size_t idiom_at(const Text& t, size_t i);

// Whitelist phrase at i: returns its length and sets `out`.
size_t whitelist_at(const Text& t, size_t i, std::string_view& out);

// Currency word at i: length, symbol ("" = keep the word after the number).
size_t currency_at(const Text& t, size_t i, std::string_view& symbol);

// Time-duration unit at i (小时, 分钟, 秒, 个小时 ...): length or 0.
size_t duration_at(const Text& t, size_t i);

// Measure unit at i (kept as written after the digits): length or 0.
size_t unit_at(const Text& t, size_t i);

// Does the text at i start with the UTF-32 literal s?
bool starts_with(const Text& t, size_t i, std::u32string_view s);

} // namespace qasr::itn::zh
