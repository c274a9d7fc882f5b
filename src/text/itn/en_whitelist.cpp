// English ITN whitelist: fixed spoken phrases with a conventional written
// form ("mister" -> "mr.", "saint george" -> "st. george", "for example" ->
// "e.g.", "s and p five hundred" -> "S&P 500", "c u d n n" -> "cuDNN").
// Titles only fire before a following word, and "misses" only where it
// cannot be the verb ("she misses him" stays).
#include "en_classes.hpp"

namespace qasr::itn::en {

namespace {

struct Entry { std::string_view words[5]; std::string_view out; int kind; }; // 1 title, 2 "misses", 3 "doctor"

constexpr Entry kEntries[] = {
    {{"mister"}, "mr.", 1},       {{"missus"}, "mrs.", 1},       {{"misses"}, "mrs.", 2},
    {{"saint"}, "st.", 1},        {{"doctor"}, "dr.", 3},        {{"for", "example"}, "e.g.", 0}, {{"et", "cetera"}, "etc.", 0},
    {{"s", "and", "p", "five", "hundred"}, "S&P 500", 0}, {{"s", "and", "p"}, "S&P", 0},
    {{"c", "u", "d", "n", "n"}, "cuDNN", 0}, {{"p", "c", "i", "e"}, "PCIe", 0},
    {{"l", "g", "a"}, "LGA", 0}, {{"r", "t", "x"}, "RTX", 0}, {{"g", "t", "x"}, "GTX", 0},
};

// Spelled tech acronyms ("c p u" -> CPU). Matched only as a whole spelled
// sequence: not next to another single letter (so e-mail spellings and
// "a b c" stay untouched). Protocol letters (h t t p, w w w) are left to
// the electronic class.
struct Acronym { std::string_view letters, out; };
constexpr Acronym kAcronyms[] = {
    {"cpu", "CPU"}, {"gpu", "GPU"}, {"api", "API"}, {"sdk", "SDK"}, {"usb", "USB"}, {"ssd", "SSD"},
    {"hdmi", "HDMI"}, {"dns", "DNS"}, {"tcp", "TCP"}, {"udp", "UDP"}, {"sql", "SQL"}, {"xml", "XML"},
    {"css", "CSS"}, {"pdf", "PDF"}, {"ceo", "CEO"}, {"cfo", "CFO"}, {"bbc", "BBC"}, {"cnn", "CNN"},
    {"dna", "DNA"}, {"vpn", "VPN"}, {"ssh", "SSH"}, {"ssl", "SSL"}, {"ftp", "FTP"}, {"iot", "IoT"},
    {"oem", "OEM"}, {"llm", "LLM"}, {"nlp", "NLP"}, {"asr", "ASR"}, {"tts", "TTS"}, {"dgx", "DGX"},
    {"fps", "FPS"}, {"atm", "ATM"}, {"amd", "AMD"}, {"aws", "AWS"}, {"ibm", "IBM"}, {"nvme", "NVMe"},
    {"cli", "CLI"}, {"gui", "GUI"}, {"dhcp", "DHCP"}, {"ieee", "IEEE"}, {"rnn", "RNN"}, {"lstm", "LSTM"},
    {"seo", "SEO"}, {"suv", "SUV"}, {"gcc", "GCC"}, {"mit", "MIT"}, {"dnn", "DNN"}, {"hpc", "HPC"},
};

std::optional<Match> match_acronym(const Ctx& c, size_t i) {
    if (i > 0 && !c.hyph(i) && is_single_letter(c.lw(i - 1))) return std::nullopt;
    for (const auto& a : kAcronyms) {
        size_t n = a.letters.size();
        bool ok = true;
        for (size_t k = 0; k < n && ok; ++k)
            ok = c.lw(i + k).size() == 1 && c.lw(i + k)[0] == a.letters[k] && !(k > 0 && c.hyph(i + k));
        if (!ok) continue;
        if (i + n < c.run.size() && !c.hyph(i + n) && is_single_letter(c.lw(i + n))) return std::nullopt;
        return Match{i + n, std::string(a.out)};
    }
    return std::nullopt;
}

bool misses_can_be_title(const Ctx& c, size_t i) {
    if (i == 0) return true;
    static constexpr std::string_view kBefore[] = {"to", "with", "and", "or", "dear", "for", "by", "from", "of",
                                                   "hi", "hello", "thank", "thanks", "as", "like", "is", "was",
                                                   "called", "met", "meet", "ask", "tell", "told", "see", "saw"};
    for (auto w : kBefore) if (c.lw(i - 1) == w) return true;
    return false;
}

} // namespace

std::optional<Match> match_whitelist(const Ctx& c, size_t i) {
    for (const auto& e : kEntries) {
        size_t n = 0;
        bool ok = true;
        for (; n < 5 && !e.words[n].empty(); ++n) {
            if (c.lw(i + n) != e.words[n] || (n > 0 && c.hyph(i + n))) { ok = false; break; }
        }
        if (!ok) continue;
        size_t end = i + n;
        if (e.kind != 0) {
            // Needs a following name-like word.
            if (end >= c.run.size() || c.hyph(end) || is_function_word(c.lw(end)) || is_number_word(c.lw(end)))
                return std::nullopt;
            if (e.kind == 2 && !misses_can_be_title(c, i)) return std::nullopt;
            // "doctor": only before a capitalized name, or opening the line ("doctor smith").
            if (e.kind == 3 && !c.run[end].capitalized() && !(i == 0 && c.run[0].begin == c.content_begin))
                return std::nullopt;
        }
        std::string out(e.out);
        if (e.kind != 0 && c.run[i].capitalized()) out[0] = static_cast<char>(out[0] - 'a' + 'A');
        return Match{end, out};
    }
    return match_acronym(c, i);
}

} // namespace qasr::itn::en
