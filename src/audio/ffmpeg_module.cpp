// The FFmpeg module (libqasr_ffmpeg.so, loaded by ffmpeg_plugin.cpp; interface in ffmpeg_abi.h): compressed audio
// (mp3, flac, ogg/opus, m4a/aac, mp4/webm audio tracks...) through FFmpeg's libraries: demux the best audio stream,
// decode, convert to interleaved float with libswresample at the source rate (resampling to 16 kHz is done by
// libsoxr in load.cpp), average channels to mono. The bytes are read from memory through a custom, seekable
// AVIOContext: a file read by load_audio_file and an upload to `qasr serve` take the same path, and FFmpeg never
// opens a path or a protocol named by untrusted input. Self-contained: no qasr symbol is used here.
#include "audio/ffmpeg_abi.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
}

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace {

struct Failure { // what went wrong, and the status it returns
    int status;
    std::string message;
};
[[noreturn]] void fail(std::string m, int status = QASR_FFMPEG_ERROR) { throw Failure{status, std::move(m)}; }

std::string av_err(int code) {
    char buf[AV_ERROR_MAX_STRING_SIZE] = {};
    av_strerror(code, buf, sizeof buf);
    return buf;
}

struct FormatCloser {
    void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecCloser {
    void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFree {
    void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFree {
    void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwrFree {
    void operator()(SwrContext* s) const { swr_free(&s); }
};
struct IoFree { // the buffer may have been replaced by FFmpeg: free the one the context holds now
    void operator()(AVIOContext* c) const {
        av_freep(&c->buffer);
        avio_context_free(&c);
    }
};

struct MemReader {
    const uint8_t* data;
    size_t size;
    size_t pos = 0;
};

int mem_read(void* opaque, uint8_t* buf, int n) {
    auto* m = static_cast<MemReader*>(opaque);
    if (n <= 0) return 0;
    if (m->pos >= m->size) return AVERROR_EOF;
    const size_t k = std::min(size_t(n), m->size - m->pos);
    std::memcpy(buf, m->data + m->pos, k);
    m->pos += k;
    return int(k);
}

int64_t mem_seek(void* opaque, int64_t off, int whence) {
    auto* m = static_cast<MemReader*>(opaque);
    if (whence & AVSEEK_SIZE) return int64_t(m->size);
    whence &= ~AVSEEK_FORCE;
    const int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? int64_t(m->pos) : whence == SEEK_END ? int64_t(m->size) : -1;
    if (base < 0 || off > int64_t(m->size) || off < -int64_t(m->size)) return AVERROR(EINVAL);
    const int64_t p = base + off;
    if (p < 0 || p > int64_t(m->size)) return AVERROR(EINVAL);
    m->pos = size_t(p);
    return p;
}

void decode(QasrFfmpegCall& call) {
    av_log_set_level(AV_LOG_QUIET);
    MemReader mem{call.data, call.size};
    constexpr int kIoBuf = 64 * 1024;
    auto* iobuf = static_cast<unsigned char*>(av_malloc(kIoBuf));
    if (!iobuf) fail("out of memory");
    std::unique_ptr<AVIOContext, IoFree> io(avio_alloc_context(iobuf, kIoBuf, 0, &mem, mem_read, nullptr, mem_seek));
    if (!io) {
        av_free(iobuf);
        fail("out of memory");
    }
    AVFormatContext* raw = avformat_alloc_context();
    if (!raw) fail("out of memory");
    raw->pb = io.get();
    raw->flags |= AVFMT_FLAG_CUSTOM_IO;
    int rc = avformat_open_input(&raw, nullptr, nullptr, nullptr); // frees raw on failure
    if (rc < 0) fail("not a recognised audio file (" + av_err(rc) + ")");
    std::unique_ptr<AVFormatContext, FormatCloser> fmt(raw); // closed before io (declared after it)
    if ((rc = avformat_find_stream_info(fmt.get(), nullptr)) < 0) fail(av_err(rc));
    const AVCodec* codec = nullptr;
    const int stream = av_find_best_stream(fmt.get(), AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
    if (stream < 0 || !codec) fail("no audio stream");
    std::unique_ptr<AVCodecContext, CodecCloser> dec(avcodec_alloc_context3(codec));
    if (!dec) fail("out of memory");
    avcodec_parameters_to_context(dec.get(), fmt->streams[stream]->codecpar);
    if ((rc = avcodec_open2(dec.get(), codec, nullptr)) < 0) fail("cannot open decoder: " + av_err(rc));
    const int channels = dec->ch_layout.nb_channels;
    if (channels <= 0 || dec->sample_rate <= 0) fail("audio stream has no channels or sample rate");
    int rate = 0; // the first frame's (a decoder may output another rate than the stream declares: HE-AAC)
    std::unique_ptr<AVPacket, PacketFree> pkt(av_packet_alloc());
    std::unique_ptr<AVFrame, FrameFree> frame(av_frame_alloc());
    if (!pkt || !frame) fail("out of memory");
    call.channels = channels;
    // The conversion is set up from each frame's own format and channel layout, and again whenever they change: a
    // stream may change them between frames (a hostile FLAC did; converting its frames as the first one's read
    // planes that did not exist). The sample rate may not change: the caller gets one rate.
    std::unique_ptr<SwrContext, SwrFree> swr;
    int swr_format = -1;
    AVChannelLayout swr_layout{};
    struct LayoutFree {
        AVChannelLayout* l;
        ~LayoutFree() { av_channel_layout_uninit(l); }
    } layout_free{&swr_layout};
    std::vector<float> buf, mono;
    size_t total = 0;
    auto convert = [&]() { // the frame in `frame` → mono samples in `mono`
        const int fc = frame->ch_layout.nb_channels;
        if (!rate) {
            if (frame->sample_rate <= 0) fail("a frame without a sample rate");
            call.sample_rate = rate = frame->sample_rate;
        }
        if (frame->sample_rate != rate) fail("the sample rate changes within the audio stream");
        if (fc <= 0 || fc > 1024 || frame->nb_samples < 0 || !frame->extended_data) fail("a frame without channels or samples");
        if (!swr || frame->format != swr_format || av_channel_layout_compare(&frame->ch_layout, &swr_layout) != 0) {
            SwrContext* sc = nullptr;
            const int ok = swr_alloc_set_opts2(&sc, &frame->ch_layout, AV_SAMPLE_FMT_FLT, rate, &frame->ch_layout,
                                               AVSampleFormat(frame->format), rate, 0, nullptr);
            swr.reset(sc);
            if (ok < 0 || swr_init(swr.get()) < 0) fail("cannot set up sample conversion");
            swr_format = frame->format;
            av_channel_layout_uninit(&swr_layout);
            if (av_channel_layout_copy(&swr_layout, &frame->ch_layout) < 0) fail("out of memory");
        }
        buf.resize(size_t(frame->nb_samples) * size_t(fc));
        uint8_t* dst = reinterpret_cast<uint8_t*>(buf.data());
        const int n = swr_convert(swr.get(), &dst, frame->nb_samples, const_cast<const uint8_t**>(frame->extended_data),
                                  frame->nb_samples);
        mono.resize(size_t(std::max(n, 0)));
        for (int i = 0; i < n; ++i) {
            float acc = 0;
            for (int c = 0; c < fc; ++c) acc += buf[size_t(i) * size_t(fc) + size_t(c)];
            mono[size_t(i)] = acc / float(fc);
        }
    };
    auto drain = [&]() {
        while (avcodec_receive_frame(dec.get(), frame.get()) == 0) {
            convert();
            av_frame_unref(frame.get());
            if (!mono.empty() && call.append(call.ctx, mono.data(), mono.size()) != 0) fail("out of memory");
            total += mono.size();
            if (call.max_seconds > 0 && double(total) > call.max_seconds * double(rate))
                fail("longer than the limit", QASR_FFMPEG_TOO_LONG);
        }
    };
    while (av_read_frame(fmt.get(), pkt.get()) >= 0) {
        if (pkt->stream_index == stream && avcodec_send_packet(dec.get(), pkt.get()) >= 0) drain();
        av_packet_unref(pkt.get());
    }
    avcodec_send_packet(dec.get(), nullptr);
    drain();
    if (total == 0) fail("decoded no audio samples");
}

} // namespace

extern "C" __attribute__((visibility("default"))) int qasr_ffmpeg_decode_v1(QasrFfmpegCall* call) {
    int status = QASR_FFMPEG_ERROR;
    std::string message;
    try {
        decode(*call);
        return QASR_FFMPEG_OK;
    } catch (const Failure& f) {
        status = f.status;
        message = f.message;
    } catch (const std::bad_alloc&) {
        message = "out of memory";
    } catch (...) {
        message = "unexpected error while decoding";
    }
    std::snprintf(call->message, sizeof call->message, "%s", message.c_str());
    return status;
}
