// The HTTP server's fuzz target (fuzz_http.cpp): raw bytes to a `qasr serve` running in this process.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qasr_fuzz {

// Input: up to 8 requests separated by "\n@@@\n", each sent on a connection of its own (pipelined requests within
// one are allowed), one connection after the other; "{ID}" in a request becomes the id of the last stream a
// response opened (so POST /v1/streams, then .../{ID}/audio and .../{ID}/finish reach a live stream). Each
// connection must be answered within 60 s, never with a 500, every JSON error body must carry error.message, and
// after the input the server must still answer GET /health. The server: the tiny model with the real tokenizer,
// small limits (3 s of audio, 32 tokens asked at most and 24 by default, 256 KiB bodies, a 0.25 s read timeout),
// CORS on. Returns false where it did not run (no tokenizer, or a build without the server).
bool http(const uint8_t* data, size_t size);
// Starts that server now (it is otherwise started by the first input; libFuzzer calls this before the first input so
// that no input's time limit includes the start).
void prepare_http();
std::vector<std::vector<uint8_t>> http_seeds(uint8_t target);

} // namespace qasr_fuzz
