// Chinese number parsing for ITN: numerals written with 一二三...十百千万亿
// (simplified, traditional and financial forms: 萬 億 壹 贰 拾 佰 ...),
// 两 before a multiplier, 零 fillers, colloquial tails (一百一 = 110), and
// plain digit sequences (一九九四 -> "1994"). Works on a decoded code-point
// array; the parsers are pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qasr::itn::zh {

using Text = std::vector<char32_t>;

int digit_of(char32_t c);      // 零〇 -> 0, 一壹幺 -> 1, 二贰两兩 -> 2, ... else -1
int64_t mult_of(char32_t c);   // 十拾 10, 百佰 100, 千仟 1000, 万萬 1e4, 亿億 1e8, else 0
bool is_numeral(char32_t c);   // digit or multiplier

struct Number {
    uint64_t value = 0;
    size_t begin = 0, end = 0;  // code-point range of the numeral run
    bool has_mult = false;      // contains 十百千万亿
    bool digit_seq = false;     // plain digits only ("一九九四")
    std::string digits;         // for digit_seq: the digit string (keeps leading zeros)
    bool unit_form = false;     // exactly <head><万|亿> with head < 10000 ("一千万")
    uint64_t head = 0;
    char32_t unit_char = 0;
    size_t chars() const { return end - begin; }
};

// Longest valid numeral run starting at i ("两" only before a multiplier).
// Returns nullopt when there is no numeral at i or the maximal run is not a
// well-formed number (e.g. approximations like 三四十, idioms like 一五一十).
std::optional<Number> parse_number(const Text& t, size_t i);

// Run of plain digits (零〇一..九, 幺) starting at i, for decimals/years.
std::string parse_digits(const Text& t, size_t i, size_t& end);

std::string with_commas(uint64_t v);

// Written forms: cardinal style keeps "<head>万" for round numbers and uses
// thousands separators ("1,000万", "11,119,000"); plain style has no separators
// ("1000万", "11119000").
std::string cardinal_text(const Number& n, const Text& t);
std::string plain_text(const Number& n, const Text& t);

void append_utf8(std::string& out, char32_t c);

} // namespace qasr::itn::zh
