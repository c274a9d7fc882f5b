// English ITN semiotic-class matchers. Each matcher looks at the run of
// words starting at index i and, if the words there form an instance of its
// class, returns how many words it consumes and the written form. The driver
// (en_normalize.cpp) picks the longest match at each position.
#pragma once

#include "en_numbers.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace qasr::itn::en {

struct Ctx {
    const Run& run;
    std::string_view line;
    size_t content_begin = 0; // first non-blank byte of the line
    size_t content_end = 0;   // one past the last byte that is not blank or final . ! ?
    Seq seq() const { return Seq{&run}; }
    std::string_view lw(size_t k) const { return k < run.size() ? std::string_view(run[k].lower) : std::string_view(); }
    std::string_view ow(size_t k) const { return k < run.size() ? run[k].orig : std::string_view(); }
    bool hyph(size_t k) const { return k < run.size() && run[k].hyphen_before; }
    // Words [i, end) are the whole line (apart from blanks and final . ! ?).
    bool whole(size_t i, size_t end) const;
};

struct Match {
    size_t end = 0;     // one past the last consumed word
    std::string out;    // written form
};

std::optional<Match> match_whitelist(const Ctx& c, size_t i);
std::optional<Match> match_time(const Ctx& c, size_t i);
std::optional<Match> match_date(const Ctx& c, size_t i);
std::optional<Match> match_money(const Ctx& c, size_t i);
std::optional<Match> match_measure(const Ctx& c, size_t i);
std::optional<Match> match_electronic(const Ctx& c, size_t i);
std::optional<Match> match_telephone(const Ctx& c, size_t i);
std::optional<Match> match_alnum(const Ctx& c, size_t i);
std::optional<Match> match_ordinal(const Ctx& c, size_t i);
std::optional<Match> match_fraction(const Ctx& c, size_t i);
std::optional<Match> match_number(const Ctx& c, size_t i); // cardinal + decimal

// Shared helpers.
bool is_single_letter(std::string_view lower_word);
bool is_function_word(std::string_view lower_word); // the, of, and, ...

} // namespace qasr::itn::en
