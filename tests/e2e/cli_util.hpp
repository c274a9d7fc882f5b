// Helpers of the CLI end-to-end tests (test_cli.cpp, test_cli_stream.cpp): run the qasr binary or a bash command
// line and collect its exit status and output, a per-process scratch folder, the random-weight tiny checkpoint.
#pragma once
#include "demo_util.hpp"
#include "model/random_checkpoint.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace qasr_e2e {

struct CliRun {
    int status;
    std::string out, err;
};

// Per-process scratch folder: ctest runs these tests in parallel processes.
struct Scratch {
    std::string path = testing::TempDir() + "/qasr_e2e_" + std::to_string(::getpid());
    Scratch() { std::filesystem::create_directories(path); }
    ~Scratch() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};
inline const std::string& scratch() {
    static const Scratch s;
    return s.path;
}

inline std::string slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `command` through /bin/sh, its standard output and error captured
inline CliRun system_run(const std::string& command) {
    const std::string dir = scratch();
    const int rc = std::system((command + " >" + dir + "/e2e_out 2>" + dir + "/e2e_err").c_str());
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(dir + "/e2e_out"), slurp(dir + "/e2e_err")};
}

// the qasr binary with these arguments
inline CliRun run(const std::string& args) { return system_run(std::string(QASR_BIN) + " " + args); }

// a bash command line (process substitution, pipes, jobs; no single quotes in it)
inline CliRun shell(const std::string& line) { return system_run("bash -c '" + line + "'"); }

inline int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

inline const std::string& tiny() {
    static const std::string dir = [] {
        const std::string d = scratch() + "/tiny";
        if (!std::filesystem::exists(d + "/model.safetensors"))
            qasr::write_random_checkpoint(d, "tiny", "hf", 1, QASR_TOKENIZER_DIR);
        return d;
    }();
    return dir;
}

inline const std::string kWav = std::string(QASR_SOURCE_DIR) + "/tests/data/audio/t1p3s.wav";

// a bundled sample's path (samples/NAME.wav) and its expected transcript (the first line of samples/NAME.txt)
inline std::string sample_wav(const std::string& name) { return std::string(QASR_SOURCE_DIR) + "/samples/" + name + ".wav"; }
inline std::string sample_text(const std::string& name) {
    std::string line;
    std::ifstream in(std::string(QASR_SOURCE_DIR) + "/samples/" + name + ".txt");
    std::getline(in, line);
    return line;
}

} // namespace qasr_e2e

#define NEED_TOKENIZER()                                                                                               \
    if (!std::filesystem::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json"))                                \
    GTEST_SKIP() << "tokenizer not set up: run scripts/setup_tokenizer.sh"
