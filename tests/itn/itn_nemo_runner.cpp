// ITN accuracy runner over NeMo's development cases (<shared>/itn/nemo/{en,zh}/
// test_cases_<class>[_cased].txt, one "spoken~written" per line). Prints
// exact-match accuracy per language and class, plus idempotence (ITN of every
// expected written form must leave it unchanged). Exit status: 0 when every
// class is >= 95%, `word` (must-not-change) is 100% and idempotence >= 99%;
// 1 otherwise; 77 (ctest SKIP) when the data folder is absent.
// Usage: itn_nemo_runner <shared>/itn [--failures] [--lang en|zh]
#include "itn.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using qasr::itn::Language;

namespace {

std::string trim(std::string s) {
    auto sp = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!s.empty() && sp(s.back())) s.pop_back();
    size_t b = 0;
    while (b < s.size() && sp(s[b])) ++b;
    return s.substr(b);
}

// NeMo's output has single spaces between tokens; compare on that basis.
std::string squeeze(const std::string& s) {
    std::string out;
    bool space = false;
    for (char c : trim(s)) {
        if (c == ' ' || c == '\t') { space = true; continue; }
        if (space && !out.empty()) out += ' ';
        space = false;
        out += c;
    }
    return out;
}

struct Tally { int total = 0, ok = 0; };

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: itn_nemo_runner <shared>/itn [--failures] [--lang en|zh]\n");
        return 2;
    }
    fs::path root = fs::path(argv[1]) / "nemo";
    bool show = false;
    std::string only;
    for (int i = 2; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--failures") show = true;
        else if (a == "--lang" && i + 1 < argc) only = argv[++i];
    }
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
        std::printf("SKIP: ITN development cases not found at %s (expected ../shared/itn next to the repo; "
                    "set -DQASR_SHARED_DIR=...)\n", root.string().c_str());
        return 77;
    }
    bool pass = true;
    for (const char* lang_dir : {"en", "zh"}) {
        if (!only.empty() && only != lang_dir) continue;
        Language lang = qasr::itn::language_from_name(lang_dir);
        fs::path dir = root / lang_dir;
        if (!fs::is_directory(dir, ec)) continue;
        std::vector<fs::path> files;
        for (const auto& e : fs::directory_iterator(dir)) if (e.path().extension() == ".txt") files.push_back(e.path());
        std::sort(files.begin(), files.end());
        std::map<std::string, Tally> per_class;
        Tally idem;
        for (const auto& f : files) {
            std::string name = f.stem().string(); // test_cases_<class>[_cased]
            if (name.rfind("test_cases_", 0) != 0) continue;
            std::string cls = name.substr(11);
            bool cased_file = cls.size() > 6 && cls.substr(cls.size() - 6) == "_cased";
            if (cased_file) cls.resize(cls.size() - 6);
            std::ifstream in(f, std::ios::binary);
            std::string line;
            while (std::getline(in, line)) {
                if (!line.empty() && line.back() == '\r') line.pop_back();
                size_t tilde = line.find('~');
                if (tilde == std::string::npos) continue;
                std::string spoken = line.substr(0, tilde);
                std::string written = trim(line.substr(tilde + 1));
                // NeMo runs the plain files with lower-cased input and with the input as
                // written (its cased normalizer); _cased files only as written. qasr has
                // one case-aware engine, so a plain line counts once when both are equal.
                std::vector<std::string> inputs{spoken};
                if (!cased_file) {
                    std::string lower = spoken;
                    for (char& ch : lower) if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
                    if (lower != spoken) inputs.push_back(lower);
                }
                for (const std::string& input : inputs) {
                    std::string pred = squeeze(qasr::itn::normalize(input, lang));
                    Tally& t = per_class[cls];
                    ++t.total;
                    if (pred == squeeze(written)) ++t.ok;
                    else if (show)
                        std::printf("FAIL %s/%s: '%s' -> '%s' (expected '%s')\n", lang_dir, cls.c_str(), input.c_str(),
                                    pred.c_str(), written.c_str());
                }
                std::string again = squeeze(qasr::itn::normalize(written, lang));
                ++idem.total;
                if (again == squeeze(written)) ++idem.ok;
                else if (show)
                    std::printf("IDEM %s/%s: '%s' -> '%s'\n", lang_dir, cls.c_str(), written.c_str(), again.c_str());
            }
        }
        int all_t = 0, all_ok = 0;
        std::printf("%-4s %-12s %7s %7s %8s\n", "lang", "class", "cases", "exact", "accuracy");
        for (const auto& [cls, t] : per_class) {
            double acc = t.total ? 100.0 * t.ok / t.total : 100.0;
            double need = cls == "word" ? 100.0 : 95.0;
            bool ok = acc + 1e-9 >= need;
            if (!ok) pass = false;
            std::printf("%-4s %-12s %7d %7d %7.1f%%%s\n", lang_dir, cls.c_str(), t.total, t.ok, acc, ok ? "" : "  << below target");
            all_t += t.total;
            all_ok += t.ok;
        }
        double idem_pct = idem.total ? 100.0 * idem.ok / idem.total : 100.0;
        if (idem_pct + 1e-9 < 99.0) pass = false;
        std::printf("%-4s %-12s %7d %7d %7.1f%%\n", lang_dir, "ALL", all_t, all_ok, all_t ? 100.0 * all_ok / all_t : 100.0);
        std::printf("%-4s %-12s %7d %7d %7.1f%%%s\n\n", lang_dir, "idempotence", idem.total, idem.ok, idem_pct,
                    idem_pct + 1e-9 >= 99.0 ? "" : "  << below target");
    }
    std::printf("%s\n", pass ? "ITN accuracy: PASS" : "ITN accuracy: FAIL");
    return pass ? 0 : 1;
}
