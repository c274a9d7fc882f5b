// Subcommands of the qasr CLI. Each returns the process exit code; errors are thrown and reported by main.
#pragma once
#include "qasr/qasr.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace qasr {
class Tokenizer;
}

namespace qasr::cli {

int cmd_transcribe(int argc, char** argv);
int cmd_dev(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_stream(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_align(int argc, char** argv);

// Word timestamps for output (words.cpp): one Segment per word (subtitle cues, timestamped lines), JSON objects
// {"word", "start", "end"}.
std::vector<Segment> word_segments(const std::vector<AlignedWord>& words);
nlohmann::json words_json(const std::vector<AlignedWord>& words);
// A transcription result as `qasr transcribe --format json` prints it (also `qasr stream --json --logprobs`'s
// closing "result" line): text, language and its probability, finish reason, segments, tokens with logprobs (and
// each token's text from `tok`: its bytes, invalid UTF-8 replaced), timings.
nlohmann::json result_json(const std::string& file, const TranscriptionResult& r, const Tokenizer& tok);

// JSON text for output: bytes that are not UTF-8 (a file name, a request's path or field) become U+FFFD instead of
// an exception (nlohmann's dump() throws on them: `qasr transcribe --format json` lost the transcript of a file with
// such a name, and one `GET /%FF` request terminated `qasr serve`).
inline std::string json_text(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// -v / --verbose: diagnostics from Info up (load and warm-up stage times) on stderr.
void log_verbose();

} // namespace qasr::cli
