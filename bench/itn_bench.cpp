// ITN throughput benchmark: normalizes the NeMo development inputs (spoken
// side of <shared>/itn/nemo/{en,zh}/*.txt, repeated to ~8 MB) on one thread
// and prints MB/s of input text per language.
// Usage: itn_bench [<shared>/itn] [megabytes]
#include "itn.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

int main(int argc, char** argv) {
    fs::path root = fs::path(argc > 1 ? argv[1] : "../shared/itn") / "nemo";
    double target_mb = argc > 2 ? std::atof(argv[2]) : 8.0;
    for (const char* lang_dir : {"en", "zh"}) {
        std::vector<std::string> lines;
        std::error_code ec;
        if (!fs::is_directory(root / lang_dir, ec)) {
            std::printf("itn_bench: %s not found\n", (root / lang_dir).string().c_str());
            return 77;
        }
        for (const auto& e : fs::directory_iterator(root / lang_dir)) {
            if (e.path().extension() != ".txt") continue;
            std::ifstream in(e.path(), std::ios::binary);
            std::string line;
            while (std::getline(in, line)) {
                size_t t = line.find('~');
                if (t != std::string::npos) lines.push_back(line.substr(0, t));
            }
        }
        size_t per_pass = 0;
        for (const auto& l : lines) per_pass += l.size() + 1;
        if (per_pass == 0) continue;
        auto lang = qasr::itn::language_from_name(lang_dir);
        size_t bytes = 0, sink = 0;
        auto t0 = std::chrono::steady_clock::now();
        while (bytes < static_cast<size_t>(target_mb * 1e6)) {
            for (const auto& l : lines) {
                sink += qasr::itn::normalize(l, lang).size();
                bytes += l.size() + 1;
            }
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("itn_bench %s: %.2f MB in %.3f s = %.2f MB/s (one thread, %zu lines/pass, sink %zu)\n", lang_dir,
                    bytes / 1e6, s, bytes / 1e6 / s, lines.size(), sink);
    }
    return 0;
}
