#include "text/align_words.hpp"

#include "text/utf8.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>

namespace qasr {
namespace {

bool cjk_ideograph(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Python's str.isspace(): the separators (Zs, Zl, Zp) and the ASCII/C1 controls of bidirectional class B, S or WS.
bool is_space(char32_t c) {
    if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85) return true;
    const utf8proc_category_t k = utf8proc_category(utf8proc_int32_t(c));
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

bool kept(char32_t c) {
    if (c == U'\'') return true;
    switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return true;
    default: return false;
    }
}

} // namespace

std::vector<std::string> split_alignment_words(const std::string& text) {
    std::vector<std::string> words;
    std::vector<char32_t> run;
    auto flush = [&] {
        if (!run.empty()) words.push_back(utf8::encode(run));
        run.clear();
    };
    for (char32_t c : utf8::decode(utf8::sanitize(text))) {
        if (cjk_ideograph(c)) {
            flush();
            words.push_back(utf8::encode(c));
        } else if (is_space(c)) {
            flush();
        } else if (kept(c)) {
            run.push_back(c);
        }
    }
    flush();
    return words;
}

std::vector<int64_t> fix_timestamps(const std::vector<double>& v) {
    const size_t n = v.size();
    std::vector<int64_t> out(n);
    if (n == 0) return out;
    std::vector<int> len(n, 1), parent(n, -1);
    for (size_t i = 1; i < n; ++i)
        for (size_t j = 0; j < i; ++j)
            if (v[j] <= v[i] && len[j] + 1 > len[i]) {
                len[i] = len[j] + 1;
                parent[i] = int(j);
            }
    std::vector<bool> normal(n, false);
    for (int i = int(std::max_element(len.begin(), len.end()) - len.begin()); i >= 0; i = parent[size_t(i)])
        normal[size_t(i)] = true;
    std::vector<double> r = v;
    for (size_t i = 0; i < n;) {
        if (normal[i]) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < n && !normal[j]) ++j; // [i, j): a run of values outside the kept sequence
        const bool has_l = i > 0, has_r = j < n; // the kept neighbours (normal[i-1] and normal[j] by construction)
        const double lv = has_l ? v[i - 1] : 0, rv = has_r ? v[j] : 0;
        const size_t count = j - i;
        for (size_t p = i; p < j; ++p) {
            if (!has_l && !has_r) break; // cannot happen: the kept sequence is never empty
            if (!has_l) r[p] = rv;
            else if (!has_r) r[p] = lv;
            else if (count <= 2) r[p] = (p - (i - 1)) <= (j - p) ? lv : rv;
            else r[p] = lv + (rv - lv) / double(count + 1) * double(p - i + 1);
        }
        i = j;
    }
    for (size_t i = 0; i < n; ++i) out[i] = int64_t(r[i]); // truncation toward zero, as Python's int()
    return out;
}

} // namespace qasr
