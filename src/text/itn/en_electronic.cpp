// English ITN electronic class: spoken e-mail addresses and URLs.
// "a dot b c at nvidia dot com" -> "a.bc@nvidia.com", "h t t p colon slash
// slash w w w dot a b dot s m" -> "http://www.ab.sm", "kore dot ai" ->
// "kore.ai". Spelled letters are joined, "dot"/"at"/"dash"/"hyphen"/
// "underscore"/"slash" become symbols. Without "at" or a protocol the last
// part must be a known top-level domain or spelled letters.
#include "en_classes.hpp"

namespace qasr::itn::en {

namespace {

bool is_tld(std::string_view w) {
    static constexpr std::string_view kTld[] = {"com", "org", "net", "edu", "gov", "io", "ai", "co", "uk",
                                                "de", "fr", "jp", "cn", "in", "us", "info", "biz", "me",
                                                "tv", "ly", "app", "dev", "ca", "au", "ru", "es", "it", "nl", "mil"};
    for (auto t : kTld) if (t == w) return true;
    return false;
}

bool is_separator_word(std::string_view w) {
    return w == "dot" || w == "at" || w == "hyphen" || w == "dash" || w == "underscore" || w == "slash" ||
           w == "colon";
}

struct Elem { std::string text; size_t end; bool spelled; bool spelled_tld = false; };

// One address element: spelled letters/digits (optionally + one word, "g mail") or a single word.
std::optional<Elem> parse_elem(const Ctx& c, size_t p) {
    if (p >= c.run.size() || c.hyph(p)) return std::nullopt;
    std::string_view w = c.lw(p);
    if (is_separator_word(w)) return std::nullopt;
    Elem e{"", p, false};
    size_t q = p;
    while (q < c.run.size() && q < p + 64 && !(q > p && c.hyph(q))) { // bounded lookahead
        std::string_view x = c.lw(q);
        if (is_single_letter(x)) { e.text += c.ow(q); ++q; continue; }
        int u = unit_value(x);
        if (u >= 0) { e.text += static_cast<char>('0' + u); ++q; continue; }
        break;
    }
    if (q > p) {
        e.spelled = true;
        e.spelled_tld = q - p >= 2;
        for (char ch : e.text) if (ch >= '0' && ch <= '9') e.spelled_tld = false;
        // "g mail", "n vidia": letters followed by a lower-case word.
        std::string_view nx = c.lw(q);
        if (q < c.run.size() && !c.hyph(q) && !is_separator_word(nx) && !is_function_word(nx) &&
            nx.size() > 1 && unit_value(nx) < 0 && !is_tld(nx) &&
            q - p <= 2 && !(c.lw(q + 1).empty()) && c.lw(q + 1) == "dot") {
            if (c.ow(q) == c.lw(q)) // "N vidia" -> nvidia; "G Mail" keeps its case
                for (char& ch : e.text) if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
            e.text += c.ow(q);
            ++q;
        }
        e.end = q;
        return e;
    }
    e.text = std::string(c.ow(p));
    e.end = p + 1;
    return e;
}

std::string_view sep_symbol(std::string_view w) {
    if (w == "dot") return ".";
    if (w == "hyphen" || w == "dash") return "-";
    if (w == "underscore") return "_";
    return {};
}

} // namespace

std::optional<Match> match_electronic(const Ctx& c, size_t i) {
    std::string out;
    size_t p = i;
    bool protocol = false;
    // Protocol: "h t t p [s] colon slash slash" or "http colon slash slash".
    {
        size_t q = p;
        std::string proto;
        if (c.lw(q) == "http" || c.lw(q) == "https") { proto = c.lw(q); ++q; }
        else if (c.lw(q) == "h" && c.lw(q + 1) == "t" && c.lw(q + 2) == "t" && c.lw(q + 3) == "p") {
            proto = "http"; q += 4;
            if (c.lw(q) == "s" && c.lw(q + 1) == "colon") { proto = "https"; ++q; }
        }
        if (!proto.empty() && c.lw(q) == "colon" && c.lw(q + 1) == "slash" && c.lw(q + 2) == "slash") {
            out = proto + "://";
            p = q + 3;
            protocol = true;
        }
    }
    // Local part / host: elements joined by dot, hyphen, dash, underscore.
    auto first = parse_elem(c, p);
    if (!first) return std::nullopt;
    if (!protocol && !first->spelled && is_function_word(c.lw(p))) return std::nullopt;
    std::string part = first->text;
    size_t q = first->end;
    int dots = 0;
    bool last_spelled = first->spelled_tld;
    std::string_view last_word = c.lw(q - 1);
    for (int guard = 0; guard < 32; ++guard) { // bounded: keeps long inputs linear
        std::string_view sym = sep_symbol(c.lw(q));
        if (sym.empty() || c.hyph(q)) break;
        auto e = parse_elem(c, q + 1);
        if (!e) break;
        part += sym;
        part += e->text;
        if (sym == ".") ++dots;
        q = e->end;
        last_spelled = e->spelled_tld;
        last_word = c.lw(q - 1);
    }
    size_t end = q;
    bool is_email = false;
    if (!protocol && c.lw(q) == "at" && !c.hyph(q)) {
        // Domain after "at".
        auto d = parse_elem(c, q + 1);
        if (d) {
            std::string dom = d->text;
            size_t r = d->end;
            int ddots = 0;
            bool dlast_spelled = d->spelled_tld;
            std::string_view dlast = c.lw(r - 1);
            for (int guard = 0; guard < 32 && c.lw(r) == "dot" && !c.hyph(r); ++guard) {
                auto e = parse_elem(c, r + 1);
                if (!e) break;
                dom += "." + e->text;
                r = e->end;
                ++ddots;
                dlast_spelled = e->spelled_tld;
                dlast = c.lw(r - 1);
            }
            // After "at" any final label is accepted ("dot" is rarely said outside addresses).
            (void)dlast; (void)dlast_spelled;
            if (ddots > 0) {
                part += "@" + dom;
                end = r;
                is_email = true;
            }
        }
        if (!is_email) return std::nullopt;
    }
    if (!is_email) {
        if (!protocol) {
            if (dots == 0) return std::nullopt;
            if (!is_tld(last_word) && !last_spelled) return std::nullopt;
            // One-word host "x dot com" needs a real-looking host, not "the dot".
        }
        // Path: slash element ...
        for (int guard = 0; guard < 32 && c.lw(end) == "slash" && !c.hyph(end); ++guard) {
            auto e = parse_elem(c, end + 1);
            if (!e) break;
            part += "/" + e->text;
            end = e->end;
        }
    }
    return Match{end, out + part};
}

} // namespace qasr::itn::en
