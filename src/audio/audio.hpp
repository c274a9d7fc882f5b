// Audio input: any supported file or byte buffer → mono float32 at 16 kHz in [-1, 1] (spec §3.1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qasr {

constexpr int kSampleRate = 16000;

struct DecodedAudio {
    std::vector<float> samples; // mono, native sample rate
    int sample_rate = 0;
    int channels = 0;           // of the source
};

// RIFF/WAVE: PCM 8/16/24/32-bit, IEEE float 32/64, WAVE_FORMAT_EXTENSIBLE; any channel count (averaged to mono).
DecodedAudio parse_wav(const uint8_t* data, size_t size, const std::string& what);
bool looks_like_wav(const uint8_t* data, size_t size);
// Whether bytes begin like an encoded audio file rather than raw PCM: RIFF/RF64 WAVE, FORM (AIFF), fLaC, OggS, ID3
// (MP3 with a tag), EBML (WebM/Matroska), an MP4 "ftyp" box. Raw 16-bit PCM could only match by a freak of its
// first samples' values.
bool looks_like_audio_file(const uint8_t* data, size_t size);

// Resamples mono audio with libsoxr (high quality). Identity when the rates match (the input is moved through).
std::vector<float> resample(std::vector<float> in, int from_rate, int to_rate);

// A qasr::Error ("[audio]", naming `what` and the sample) at the first NaN or infinite sample.
void check_finite(const float* x, size_t n, const std::string& what);
// Peak-normalizes when |x| > 1 and clips to [-1, 1] (spec §3.1 step 3).
void condition_range(std::vector<float>& x);

// Loads a file (WAV natively; other formats through FFmpeg when built with it) → mono 16 kHz float.
std::vector<float> load_audio_file(const std::string& path);
// The same for an encoded file held in memory (an upload); `what` names it in errors. max_seconds > 0: audio
// longer than that is a qasr::TooLong error, raised while decoding (a small compressed file cannot expand without bound).
std::vector<float> load_audio_bytes(const uint8_t* data, size_t size, const std::string& what, double max_seconds = 0);
// Raw signed 16-bit little-endian mono PCM at 16 kHz (e.g. from stdin).
std::vector<float> pcm_s16le_to_float(const uint8_t* data, size_t size);
// A 16-bit mono 16 kHz WAV file of x (scaled by 32768 and clipped, NaN as 0: the inverse of pcm_s16le_to_float, so
// 16-bit audio read back gives the same samples).
std::string wav16_bytes(const float* x, size_t n);

// Whether compressed formats can be decoded: FFmpeg's module loads (the first call loads it; ffmpeg_plugin.cpp).
bool ffmpeg_available();
// The module's path once loaded, else empty.
std::string ffmpeg_module_path();
// "12.5 s": a duration for messages.
std::string seconds_text(double s);
// Through FFmpeg's module (ffmpeg_plugin.cpp, or the stub without FFmpeg): decodes from memory (custom I/O,
// seekable), so files and uploads take one path. max_seconds > 0: stops with an error once more audio than that is decoded.
DecodedAudio decode_with_ffmpeg(const uint8_t* data, size_t size, const std::string& what, double max_seconds = 0);

} // namespace qasr
