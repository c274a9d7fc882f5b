// English number-word parsing for ITN: cardinals ("two hundred and fifty
// four", "twenty one crore ..."), ordinals ("twenty third"), digit strings
// ("double oh three"), two-digit-group readings ("nineteen oh five",
// "one fifty five") and decimals ("point o five", "four point eight five
// billion"). All parsers are pure functions over a word sequence.
#pragma once

#include "en_tokens.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qasr::itn::en {

// Read-only view of a run, optionally with the word at `sub_pos` replaced
// (used to read "twenty third" as the cardinal "twenty three").
struct Seq {
    const Run* run = nullptr;
    size_t sub_pos = static_cast<size_t>(-1);
    std::string_view sub;
    explicit Seq(const Run* r, size_t pos = static_cast<size_t>(-1), std::string_view s = {})
        : run(r), sub_pos(pos), sub(s) {}
    size_t size() const { return run->size(); }
    std::string_view at(size_t k) const {
        if (k >= run->size()) return {};
        return k == sub_pos ? sub : std::string_view((*run)[k].lower);
    }
    bool hyph(size_t k) const { return k < run->size() && (*run)[k].hyphen_before; }
};

int unit_value(std::string_view w);   // "one".."nine" -> 1..9, else -1
int teen_value(std::string_view w);   // "ten".."nineteen" -> 10..19, else -1
int tens_value(std::string_view w);   // "twenty".."ninety" -> 20..90, else -1
uint64_t scale_value(std::string_view w); // thousand, lakh, million, crore, billion... else 0
bool is_number_word(std::string_view w);  // any word a cardinal can contain
int digit_word(std::string_view w);   // zero/oh/o/one..nine -> 0..9, else -1

// "first" -> "one", "twelfth" -> "twelve", "hundredth" -> "hundred"; else "".
std::string_view ordinal_base(std::string_view w);
std::string ordinal_suffix(uint64_t v); // "st", "nd", "rd", "th"

struct Cardinal {
    uint64_t value = 0;
    bool negative = false;
    size_t end = 0;          // one past the last word used
    size_t words = 0;        // number of words (excluding "minus")
    bool head_form = false;  // exactly <block> <million|billion|...> (kept as "5 million")
    uint64_t head = 0;
    size_t scale_pos = 0;    // index of the scale word when head_form
    std::string digits() const; // "-25037"
};

// Longest cardinal starting at k (optionally "minus"/"negative" first).
std::optional<Cardinal> parse_cardinal(const Seq& s, size_t k, bool allow_minus = true);

// Ordinal whose last word is an ordinal word ("one hundred twenty first").
struct Ordinal { uint64_t value = 0; size_t end = 0; size_t words = 0; };
std::optional<Ordinal> parse_ordinal(const Run& r, size_t k);

// Sequence of digit words with "double"/"triple": returns digits and end.
struct DigitString { std::string digits; size_t end = 0; size_t real_digits = 0; };
std::optional<DigitString> parse_digit_string(const Seq& s, size_t k);

// Two-digit-group reading: "nineteen oh five" -> "1905", "three eighty six" -> "386".
struct Groups { std::string digits; size_t end = 0; int groups = 0; int first = 0; bool last_hundred = false; };
std::optional<Groups> parse_groups(const Seq& s, size_t k, int max_groups);

// Year reading: "nineteen ninety four", "twenty twelve", "fifteen o six", "nineteen hundred".
std::optional<Groups> parse_year_pairs(const Seq& s, size_t k);

struct Decimal {
    std::string text;       // "-60.2400", ".02", "5.2"
    size_t end = 0;
    bool has_point = false;
    std::string scale_word; // original spelling of a trailing scale word, "" if none
    bool is_one = false;    // the amount is exactly 1 (for singular/plural checks)
    size_t words = 0;
};
// Decimal or integer amount, optionally followed by a scale word
// ("two point five billion", "fifty billion", "point five o six").
std::optional<Decimal> parse_amount(const Seq& s, size_t k, bool allow_scale_suffix = true);

} // namespace qasr::itn::en
