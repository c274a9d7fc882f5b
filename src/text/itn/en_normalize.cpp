// English ITN driver: tokenizes a line into runs, and at each word position
// asks every class matcher for a match; the longest match wins (ties go to
// the earlier class in kMatchers), whitelist phrases win outright. Matched
// word spans are replaced by their written form; every other byte of the
// input (spacing, punctuation, non-ASCII text) is copied unchanged.
#include "en_normalize.hpp"

#include "en_classes.hpp"

namespace qasr::itn::en {

namespace {

using Matcher = std::optional<Match> (*)(const Ctx&, size_t);

constexpr Matcher kMatchers[] = {
    match_electronic, match_time, match_date, match_money, match_measure,
    match_telephone, match_alnum, match_fraction, match_ordinal, match_number,
};

} // namespace

std::string normalize_line(std::string_view line) {
    std::vector<Run> runs = tokenize(line);
    std::string out;
    out.reserve(line.size() + 8);
    size_t copied = 0; // bytes of `line` already emitted
    size_t cb = 0, ce = line.size();
    while (cb < line.size() && (line[cb] == ' ' || line[cb] == '\t')) ++cb;
    while (ce > cb) {
        char ch = line[ce - 1];
        if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '.' && ch != '!' && ch != '?') break;
        --ce;
    }
    for (const Run& run : runs) {
        Ctx ctx{run, line, cb, ce};
        size_t i = 0;
        while (i < run.size()) {
            std::optional<Match> best = match_whitelist(ctx, i);
            if (best) { // a longer e-mail/URL may contain a whitelisted spelling
                if (auto e = match_electronic(ctx, i); e && e->end > best->end) best = std::move(e);
            } else {
                for (Matcher m : kMatchers) {
                    auto r = m(ctx, i);
                    if (r && r->end > i && (!best || r->end > best->end)) best = std::move(r);
                }
            }
            if (!best) { ++i; continue; }
            out.append(line.substr(copied, run[i].begin - copied));
            out += best->out;
            copied = run[best->end - 1].end;
            i = best->end;
        }
    }
    out.append(line.substr(copied));
    return out;
}

} // namespace qasr::itn::en
