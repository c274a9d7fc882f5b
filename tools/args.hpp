// Minimal argument scanner shared by the qasr subcommands: "--name value", "--flag", positionals.
#pragma once
#include "qasr/qasr.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace qasr::cli {

class Args {
public:
    Args(int argc, char** argv, int first) {
        for (int i = first; i < argc; ++i) items_.emplace_back(argv[i]);
    }
    // Returns true and advances when the current item is `name`.
    bool flag(const std::string& name) {
        if (pos_ < items_.size() && items_[pos_] == name) {
            ++pos_;
            return true;
        }
        return false;
    }
    bool option(const std::string& name, std::string& out) {
        if (pos_ < items_.size() && items_[pos_] == name) {
            if (pos_ + 1 >= items_.size()) throw std::invalid_argument(name + " needs a value");
            out = items_[pos_ + 1];
            pos_ += 2;
            return true;
        }
        return false;
    }
    bool done() const { return pos_ >= items_.size(); }
    const std::string& peek() const { return items_[pos_]; }
    std::string next() { return items_[pos_++]; }

private:
    std::vector<std::string> items_;
    size_t pos_ = 0;
};

inline long to_long(const std::string& opt, const std::string& v, long lo, long hi) {
    char* end = nullptr;
    const long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || x < lo || x > hi)
        throw std::invalid_argument(opt + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                    "], got '" + v + "'");
    return x;
}

inline double to_double(const std::string& opt, const std::string& v, double lo, double hi) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(x >= lo && x <= hi))
        throw std::invalid_argument(opt + " expects a number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                    "], got '" + v + "'");
    return x;
}

// A time: seconds ("90", "12.5") or [[HH:]MM:]SS(.fff) ("1:30", "01:02:03.5"), in [0, 1e7] seconds.
inline double to_time(const std::string& opt, const std::string& v) {
    double total = 0;
    size_t at = 0;
    for (int part = 0;; ++part) {
        const size_t colon = v.find(':', at);
        const std::string field = v.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
        char* end = nullptr;
        const double x = std::strtod(field.c_str(), &end);
        const bool last = colon == std::string::npos;
        const bool ok = !field.empty() && !*end && x >= 0 && (last || field.find('.') == std::string::npos) &&
                        (part == 0 || x < 60) && part < 3 && field.find_first_not_of("0123456789.") == std::string::npos;
        if (!ok)
            throw std::invalid_argument(opt + " expects seconds or [HH:]MM:SS(.fff), got '" + v + "'");
        total = total * 60 + x;
        if (last) break;
        at = colon + 1;
    }
    if (total > 1e7) throw std::invalid_argument(opt + ": " + v + " is too long");
    return total;
}

// --device D, --threads N, --compute C: what every command that loads a model takes (LoadOptions). True when the
// current item was one of them (and was read into lo).
inline bool load_option(Args& a, LoadOptions& lo) {
    std::string v;
    if (a.option("--threads", v) || a.option("-t", v)) return lo.threads = int(to_long("--threads", v, 1, 1024)), true;
    return a.option("--device", lo.device) || a.option("--compute", lo.compute);
}

} // namespace qasr::cli
