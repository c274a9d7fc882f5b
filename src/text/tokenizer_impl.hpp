// The tokenizer's state, shared by its loaders (tokenizer_load.cpp) and its encoder/decoder (tokenizer.cpp).
#pragma once
#include "text/tokenizer.hpp"

#include "core/error.hpp"
#include "text/utf8.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

namespace qasr {

inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct AddedToken {
    int id;
    std::string content;
    bool special;
};

// Hash of std::string and std::string_view alike (heterogeneous lookup: finding a piece needs no string made).
struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using PieceMap = std::unordered_map<std::string, int, PieceHash, std::equal_to<>>;

struct Tokenizer::Impl {
    PieceMap vocab;                              // byte-mapped token string → id
    std::vector<std::string> id_bytes;           // id → raw bytes (vocab tokens)
    std::vector<std::string> merge_lines;        // "left right" in rank order, as read (finish() turns them into merges)
    PieceMap ranks;                              // "left right" → merge rank: only when id merges do not apply
    // The merges by id pair (left id << 32 | right id) → {rank, merged id}, made by finish(); used when every merge
    // joins two vocabulary pieces into one (real tokenizers), else `ranks` drives the string merging below.
    struct Merge {
        int rank, id;
    };
    std::unordered_map<uint64_t, Merge> merges;
    bool id_merges = false;
    std::vector<AddedToken> added;               // sorted by content length, longest first
    std::unordered_map<int, size_t> added_by_id; // id → index in added
    std::string byte_to_cp[256];                 // byte → UTF-8 of its mapped code point
    int16_t cp_to_byte[512];                     // mapped code point → byte (-1: none); all mapped cps are < 324
    pcre2_code* re = nullptr;
    size_t n_ids = 0;

    Impl() {
        int n = 0;
        std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t(-1));
        for (int b = 0; b < 256; ++b) {
            const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const char32_t cp = keep ? char32_t(b) : char32_t(256 + n++);
            byte_to_cp[b] = utf8::encode(cp);
            cp_to_byte[cp] = int16_t(b);
        }
        int err = 0;
        PCRE2_SIZE off = 0;
        re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kQwen2Pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                           &err, &off, nullptr);
        if (!re) fail("tokenizer", "cannot compile the pre-tokenizer regex");
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    }
    ~Impl() { pcre2_code_free(re); }

    void finish(const std::string& what) {
        if (vocab.empty()) fail("tokenizer", what + ": empty vocabulary");
        int max_id = -1;
        for (const auto& [tok, id] : vocab) max_id = std::max(max_id, id);
        for (const auto& a : added) max_id = std::max(max_id, a.id);
        n_ids = size_t(max_id) + 1;
        id_bytes.assign(n_ids, {});
        for (const auto& [tok, id] : vocab) {
            // byte-level pieces are code points below 512: one byte, or a two-byte sequence led by 0xC2–0xC7
            std::string bytes;
            bytes.reserve(tok.size());
            for (size_t i = 0; i < tok.size();) {
                const unsigned char b = static_cast<unsigned char>(tok[i]);
                char32_t cp = b;
                if (b >= 0x80) {
                    const unsigned char n = i + 1 < tok.size() ? static_cast<unsigned char>(tok[i + 1]) : 0;
                    if (b < 0xC2 || b > 0xC7 || (n & 0xC0) != 0x80)
                        fail("tokenizer", what + ": vocab entry is not byte-level encoded");
                    cp = char32_t(b & 0x1F) << 6 | char32_t(n & 0x3F);
                    ++i;
                }
                ++i;
                if (cp_to_byte[cp] < 0) fail("tokenizer", what + ": vocab entry is not byte-level encoded");
                bytes += char(cp_to_byte[cp]);
            }
            id_bytes[size_t(id)] = std::move(bytes);
        }
        std::sort(added.begin(), added.end(),
                  [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
        for (size_t i = 0; i < added.size(); ++i) added_by_id[added[i].id] = i;
        merges.clear();
        merges.reserve(merge_lines.size());
        id_merges = true;
        std::string joined;
        for (size_t rank = 0; rank < merge_lines.size(); ++rank) { // a repeated line keeps its first (lowest) rank
            const std::string_view line = merge_lines[rank];
            const size_t sp = line.find(' ');
            joined.assign(line.substr(0, sp)).append(line.substr(sp + 1));
            const auto a = vocab.find(line.substr(0, sp)), b = vocab.find(line.substr(sp + 1)), ab = vocab.find(joined);
            if (a == vocab.end() || b == vocab.end() || ab == vocab.end()) {
                id_merges = false; // a merge through a piece without an id: the string merging handles it
                break;
            }
            const uint64_t key = uint64_t(uint32_t(a->second)) << 32 | uint32_t(b->second);
            merges.try_emplace(key, Merge{int(rank), ab->second});
        }
        ranks.clear();
        if (!id_merges) {
            merges.clear();
            ranks.reserve(merge_lines.size());
            for (size_t rank = 0; rank < merge_lines.size(); ++rank) ranks.emplace(merge_lines[rank], int(rank));
        }
        merge_lines = {};
    }

    void add_merge(std::string line) {
        if (line.find(' ') == std::string::npos) return;
        merge_lines.push_back(std::move(line));
    }

    void bpe(const std::string& mapped, std::vector<int>& out) const {
        auto direct = vocab.find(mapped);
        if (direct != vocab.end()) {
            out.push_back(direct->second);
            return;
        }
        if (id_merges && bpe_ids(mapped, out)) return;
        bpe_strings(mapped, out);
    }

    // BPE over vocabulary ids with a heap of candidate merges (lowest rank first, then leftmost), as the reference
    // tokenizers library merges: O(k log k) in the piece's length k. The string merging below rescans every pair
    // after each merge, O(k²) with a string built per pair: a 20 KB word of random letters took 3 s, and a long run of
    // CJK characters (one pre-tokenizer piece) grows the same way. false: a character without an id (the caller
    // falls back to the string merging, which reports it).
    bool bpe_ids(const std::string& mapped, std::vector<int>& out) const {
        struct Sym {
            int id, prev, next;
        };
        std::vector<Sym> sym;
        for (char32_t cp : utf8::decode(mapped)) {
            const auto it = vocab.find(utf8::encode(cp));
            if (it == vocab.end()) return false;
            sym.push_back({it->second, int(sym.size()) - 1, int(sym.size()) + 1});
        }
        if (sym.empty()) return true;
        sym.back().next = -1;
        struct Cand {
            int rank, pos, left, right, merged; // the pair (left, right) of ids starting at symbol pos, and its merge
            bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
        };
        std::vector<Cand> heap;
        auto consider = [&](int pos) {
            if (pos < 0 || sym[size_t(pos)].next < 0) return;
            const int l = sym[size_t(pos)].id, r = sym[size_t(sym[size_t(pos)].next)].id;
            const auto it = merges.find(uint64_t(uint32_t(l)) << 32 | uint32_t(r));
            if (it == merges.end()) return;
            heap.push_back({it->second.rank, pos, l, r, it->second.id});
            std::push_heap(heap.begin(), heap.end(), std::greater<>());
        };
        for (int i = 0; i + 1 < int(sym.size()); ++i) consider(i);
        while (!heap.empty()) {
            std::pop_heap(heap.begin(), heap.end(), std::greater<>());
            const Cand c = heap.back();
            heap.pop_back();
            Sym& s = sym[size_t(c.pos)];
            // stale: the symbol was merged away (id -1), or it or its right neighbour changed since
            if (s.id != c.left || s.next < 0 || sym[size_t(s.next)].id != c.right) continue;
            const int gone = s.next;
            s.id = c.merged;
            s.next = sym[size_t(gone)].next;
            if (s.next >= 0) sym[size_t(s.next)].prev = c.pos;
            sym[size_t(gone)].id = -1;
            consider(s.prev);
            consider(c.pos);
        }
        for (int i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
        return true;
    }

    void bpe_strings(const std::string& mapped, std::vector<int>& out) const {
        std::vector<std::string> parts;
        for (char32_t cp : utf8::decode(mapped)) parts.push_back(utf8::encode(cp));
        while (parts.size() > 1) {
            int best = INT_MAX;
            size_t best_i = 0;
            for (size_t i = 0; i + 1 < parts.size(); ++i) {
                auto it = ranks.find(parts[i] + " " + parts[i + 1]);
                if (it != ranks.end() && it->second < best) {
                    best = it->second;
                    best_i = i;
                }
            }
            if (best == INT_MAX) break;
            const std::string a = parts[best_i], b = parts[best_i + 1];
            std::vector<std::string> merged;
            merged.reserve(parts.size());
            for (size_t i = 0; i < parts.size(); ++i) {
                if (i + 1 < parts.size() && parts[i] == a && parts[i + 1] == b) {
                    merged.push_back(a + b);
                    ++i;
                } else {
                    merged.push_back(parts[i]);
                }
            }
            parts.swap(merged);
        }
        for (const auto& p : parts) {
            auto it = vocab.find(p);
            if (it == vocab.end()) fail("tokenizer", "BPE produced a piece missing from the vocabulary");
            out.push_back(it->second);
        }
    }

    void encode_segment(const std::string& raw, std::vector<int>& out) const {
        if (raw.empty()) return;
        utf8proc_uint8_t* nfc = nullptr;
        const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(raw.data()),
                                                utf8proc_ssize_t(raw.size()), &nfc,
                                                utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        if (n < 0) fail("tokenizer", "cannot normalize text");
        std::string text(reinterpret_cast<char*>(nfc), size_t(n));
        std::free(nfc);
        // owned: bpe() throws on a tokenizer whose merges reach an id-less piece (a hostile tokenizer.json)
        const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> owner(
            pcre2_match_data_create_from_pattern(re, nullptr), &pcre2_match_data_free);
        if (!owner) throw std::bad_alloc();
        pcre2_match_data* md = owner.get();
        PCRE2_SIZE start = 0;
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        // utf8proc wrote `text` (valid UTF-8): without PCRE2_NO_UTF_CHECK every call re-validates the subject from
        // its start offset to the end, O(n²) over a long text (100 KB of context took 2.4 s instead of ~0.1 s)
        while (start < text.size()) {
            const int rc = pcre2_match(re, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
            if (rc < 0) break; // cannot happen: the last alternatives match any remaining character class
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            if (ov[1] == ov[0]) { // defensive: never loop on an empty match
                ++start;
                continue;
            }
            std::string mapped;
            for (PCRE2_SIZE i = ov[0]; i < ov[1]; ++i) mapped += byte_to_cp[uint8_t(text[i])];
            bpe(mapped, out);
            start = ov[1];
        }
    }
};

} // namespace qasr
