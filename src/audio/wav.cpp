// RIFF/WAVE parser for untrusted bytes: walks chunks with bounds checks, accepts PCM 8/16/24/32-bit and
// IEEE float 32/64 (also inside WAVE_FORMAT_EXTENSIBLE), averages channels to mono. Fuzzed in tests/fuzz. Also the 16-bit writer.
#include "audio/audio.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace qasr {
namespace {

uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t rd32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

} // namespace

bool looks_like_wav(const uint8_t* d, size_t n) {
    return n >= 12 && (std::memcmp(d, "RIFF", 4) == 0 || std::memcmp(d, "RF64", 4) == 0) &&
           std::memcmp(d + 8, "WAVE", 4) == 0;
}

bool looks_like_audio_file(const uint8_t* d, size_t n) {
    if (looks_like_wav(d, n)) return true;
    if (n < 12) return false;
    for (const char* magic : {"FORM", "fLaC", "OggS", "ID3", "\x1a\x45\xdf\xa3"})
        if (std::memcmp(d, magic, std::strlen(magic)) == 0) return true;
    return std::memcmp(d + 4, "ftyp", 4) == 0;
}

DecodedAudio parse_wav(const uint8_t* d, size_t n, const std::string& what) {
    const std::string C = "audio";
    if (!looks_like_wav(d, n)) fail(C, what + ": not a RIFF/WAVE file");
    size_t pos = 12;
    bool have_fmt = false;
    uint16_t format = 0, channels = 0, bits = 0, block_align = 0;
    uint32_t rate = 0;
    const uint8_t* pcm = nullptr;
    size_t pcm_size = 0;
    while (pos + 8 <= n) {
        const uint8_t* ch = d + pos;
        const uint32_t len = rd32(ch + 4);
        const size_t body = pos + 8;
        size_t avail = n - body;
        if (std::memcmp(ch, "fmt ", 4) == 0) {
            if (len < 16 || len > avail) fail(C, what + ": truncated fmt chunk");
            format = rd16(ch + 8);
            channels = rd16(ch + 10);
            rate = rd32(ch + 12);
            block_align = rd16(ch + 20);
            bits = rd16(ch + 22);
            if (format == 0xFFFE) {
                if (len < 40) fail(C, what + ": truncated WAVE_FORMAT_EXTENSIBLE fmt chunk");
                format = rd16(ch + 8 + 24); // first two bytes of the sub-format GUID
            }
            have_fmt = true;
        } else if (std::memcmp(ch, "data", 4) == 0) {
            if (!have_fmt) fail(C, what + ": data chunk before fmt chunk");
            pcm = body <= n ? d + body : nullptr;
            pcm_size = (len == 0xFFFFFFFFu || len > avail) ? avail : len; // streamed/truncated: take what exists
            break;
        }
        if (len > avail) fail(C, what + ": chunk '" + std::string(reinterpret_cast<const char*>(ch), 4) + "' runs past the end");
        pos = body + len + (len & 1);
    }
    if (!have_fmt) fail(C, what + ": no fmt chunk");
    if (!pcm) fail(C, what + ": no data chunk");
    if (channels == 0 || channels > 64) fail(C, what + ": unsupported channel count " + std::to_string(channels));
    if (rate < 1000 || rate > 768000) fail(C, what + ": unsupported sample rate " + std::to_string(rate));
    const bool is_float = format == 3;
    if (format != 1 && format != 3) fail(C, what + ": unsupported WAVE format tag " + std::to_string(format) +
                                                " (PCM and IEEE float only)");
    const bool ok_bits = is_float ? (bits == 32 || bits == 64) : (bits == 8 || bits == 16 || bits == 24 || bits == 32);
    if (!ok_bits) fail(C, what + ": unsupported sample size " + std::to_string(bits) + " bits");
    const size_t bps = bits / 8;
    if (block_align != bps * channels) block_align = uint16_t(bps * channels);
    const size_t frames = pcm_size / block_align;
    DecodedAudio out;
    out.sample_rate = int(rate);
    out.channels = channels;
    out.samples.resize(frames);
    if (!is_float && bits == 16 && channels == 1) { // the common case (16 kHz speech), without the general loop's
        for (size_t f = 0; f < frames; ++f)         // branches: the same values (x / 32768 is exact in float)
            out.samples[f] = float(int16_t(rd16(pcm + 2 * f))) * (1.0f / 32768.0f);
        return out;
    }
    for (size_t f = 0; f < frames; ++f) {
        double acc = 0;
        for (size_t c = 0; c < channels; ++c) {
            const uint8_t* p = pcm + f * block_align + c * bps;
            double v = 0;
            if (is_float) {
                if (bits == 32) {
                    float x;
                    std::memcpy(&x, p, 4);
                    v = x;
                } else {
                    double x;
                    std::memcpy(&x, p, 8);
                    v = x;
                }
            } else if (bits == 8) {
                v = (double(p[0]) - 128.0) / 128.0;
            } else if (bits == 16) {
                v = double(int16_t(rd16(p))) / 32768.0;
            } else if (bits == 24) {
                int32_t x = int32_t(uint32_t(p[0]) << 8 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 24) >> 8;
                v = double(x) / 8388608.0;
            } else {
                v = double(int32_t(rd32(p))) / 2147483648.0;
            }
            acc += v;
        }
        out.samples[f] = float(acc / channels);
    }
    return out;
}

std::vector<float> pcm_s16le_to_float(const uint8_t* data, size_t size) {
    std::vector<float> out(size / 2);
    for (size_t i = 0; i < out.size(); ++i) out[i] = float(int16_t(rd16(data + 2 * i))) / 32768.0f;
    return out;
}

std::string wav16_bytes(const float* x, size_t n) {
    if (n > (size_t(0xffffffffu) - 36) / 2) throw std::invalid_argument("wav16_bytes: too many samples for a WAV file");
    std::string out;
    out.reserve(44 + 2 * n);
    const auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) out += char(v >> (8 * i) & 0xff); };
    const auto u16 = [&](uint16_t v) { out += char(v & 0xff), out += char(v >> 8); };
    out += "RIFF", u32(uint32_t(36 + 2 * n)), out += "WAVEfmt ", u32(16), u16(1), u16(1), u32(uint32_t(kSampleRate)),
        u32(uint32_t(2 * kSampleRate)), u16(2), u16(16), out += "data", u32(uint32_t(2 * n));
    for (size_t i = 0; i < n; ++i) {
        const float v = std::isfinite(x[i]) ? x[i] : 0.0f;
        u16(uint16_t(int16_t(std::lround(std::clamp(v * 32768.0f, -32768.0f, 32767.0f)))));
    }
    return out;
}

} // namespace qasr
