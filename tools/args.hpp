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

// --device D, --threads N, --compute C: what every command that loads a model takes (LoadOptions). True when the
// current item was one of them (and was read into lo).
inline bool load_option(Args& a, LoadOptions& lo) {
    std::string v;
    if (a.option("--threads", v)) return lo.threads = int(to_long("--threads", v, 1, 1024)), true;
    return a.option("--device", lo.device) || a.option("--compute", lo.compute);
}

} // namespace qasr::cli
