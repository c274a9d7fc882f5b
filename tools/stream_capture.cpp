// `qasr stream --capture`: live transcription from a microphone (capture.hpp). Enter on standard input ends the
// utterance (the key release: the step in progress is interrupted, the final comes at once); with --ptt each Enter
// toggles talking, for a push-to-talk loop of utterances; with --auto-finish S (hands-free) an utterance ends after S
// seconds of quiet following speech and the next begins. Ctrl-C or SIGTERM finishes the utterance in progress and
// quits; another Ctrl-C a second later ends the process at once.
#include "stream_capture.hpp"

#include "audio/audio.hpp"
#include "capture.hpp"
#include "stop_signals.hpp"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

namespace qasr::cli {
namespace {

// Enter presses on standard input, the end of standard input and SIGINT/SIGTERM, reported from a thread of their own,
// so that they can interrupt a step that push() is running on the caller's thread.
class Controls {
public:
    enum class Event { Enter, EndOfInput, Signal };
    explicit Controls(std::function<void(Event)> cb) : cb_(std::move(cb)) {
        th_ = std::thread([this] { loop(); });
    }
    ~Controls() {
        signals_.wake();
        th_.join();
    }
    Controls(const Controls&) = delete;
    Controls& operator=(const Controls&) = delete;

private:
    void loop() {
        bool stdin_open = true;
        for (;;) {
            pollfd fds[2] = {{signals_.fd(), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
            if (::poll(fds, stdin_open ? 2 : 1, -1) < 0) continue; // EINTR
            if (fds[0].revents & POLLIN) {
                const int sig = signals_.next();
                if (sig <= 0) return; // wake(): the utterance loop is done
                // the first signal finishes; another one a second or more later (the final takes long: the user
                // insists) ends the process at once. One sooner is the same signal twice (`timeout` sends it to the
                // process and to its group).
                const auto now = std::chrono::steady_clock::now();
                if (!first_signal_) {
                    first_signal_ = now;
                    cb_(Event::Signal);
                } else if (now - *first_signal_ >= std::chrono::seconds(1)) {
                    std::fprintf(stderr, "qasr: stopped\n");
                    std::_Exit(128 + sig);
                }
            }
            if (stdin_open && fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
                char buf[256];
                const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
                if (n <= 0) {
                    stdin_open = false;
                    cb_(Event::EndOfInput);
                    continue;
                }
                for (ssize_t i = 0; i < n; ++i)
                    if (buf[i] == '\n') cb_(Event::Enter);
            }
        }
    }

    std::function<void(Event)> cb_;
    StopSignals signals_;
    std::optional<std::chrono::steady_clock::time_point> first_signal_;
    std::thread th_;
};

// "x.wav" → "x-3.wav" (the third utterance of --ptt)
std::string numbered(const std::string& path, int n) {
    const size_t slash = path.find_last_of('/');
    const size_t dot = path.find_last_of('.');
    const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
    return ext ? path.substr(0, dot) + "-" + std::to_string(n) + path.substr(dot) : path + "-" + std::to_string(n);
}

} // namespace

void save_wav16(const std::string& path, const std::vector<float>& x) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    const std::string bytes = wav16_bytes(x.data(), x.size());
    if (!f.write(bytes.data(), std::streamsize(bytes.size())) || !f.flush())
        throw std::runtime_error("cannot write " + path);
}

int list_capture_devices() {
    const std::vector<std::string> names = AudioCapture::devices();
    if (names.empty()) std::fprintf(stderr, "qasr: no capture devices found (the system default may still work)\n");
    for (const auto& n : names) std::printf("%s\n", n.c_str());
    return 0;
}

int run_capture(std::shared_ptr<const Model> model, const StreamOptions& so, const CaptureOptions& co,
                const StreamSession::Callback& on_event) {
    AudioCapture cap(co.device);
    std::mutex m;
    StreamSession* current = nullptr; // the utterance being recorded, if any
    std::atomic<int> presses{0};
    std::atomic<bool> quit{false};
    auto interrupt_current = [&] {
        std::lock_guard<std::mutex> lk(m);
        if (current) current->interrupt(); // the key release: the step in progress stops at its next boundary
    };
    const bool hands_free = co.auto_finish > 0;
    Controls controls([&](Controls::Event e) {
        if (e == Controls::Event::Enter && !hands_free) {
            presses.fetch_add(1);
            interrupt_current();
        } else if (e != Controls::Event::EndOfInput || co.ptt) { // without --ptt the end of input is not a key
            quit.store(true);
            interrupt_current();
        }
    });
    const size_t limit = size_t(co.seconds * kSampleRate);
    // hands-free: an utterance without speech (the quiet before the next one, ended by Enter) prints no final
    const StreamSession::Callback events = !hands_free ? on_event : [&on_event](const StreamEvent& e) {
        if (e.kind != StreamEvent::Kind::Final || !e.text().empty()) on_event(e);
    };
    if (co.ptt)
        std::fprintf(stderr, "qasr: push to talk on \"%s\" (%s): Enter starts talking, Enter again stops; Ctrl-C or the "
                     "end of input quits\n", cap.name().c_str(), cap.driver().c_str());
    else if (hands_free)
        std::fprintf(stderr, "qasr: listening on \"%s\" (%s): an utterance ends after %.1f s of quiet; Enter or Ctrl-C "
                     "quits\n", cap.name().c_str(), cap.driver().c_str(), co.auto_finish);
    else
        std::fprintf(stderr, "qasr: listening on \"%s\" (%s): Enter finishes%s\n", cap.name().c_str(),
                     cap.driver().c_str(), limit ? " (or the --capture-seconds limit)" : "");
    std::vector<int16_t> pcm;
    std::vector<float> x;
    for (int turn = 1; !quit.load(); ++turn) {
        if (co.ptt) { // wait for the key press, dropping what the microphone hears until then
            while (!quit.load() && presses.load() % 2 == 0) {
                pcm.clear();
                cap.read(pcm, std::chrono::milliseconds(20));
            }
            if (quit.load()) break;
            pcm.clear();
            cap.read(pcm, std::chrono::milliseconds(0));
            std::fprintf(stderr, "qasr: recording (Enter stops)\n");
        }
        // the press count that ends this utterance: the one after the (odd) press that started it; an Enter pressed
        // twice before this line ends it at once
        const int pressed = presses.load();
        const int released_at = !co.ptt ? 1 : pressed % 2 ? pressed + 1 : pressed;
        StreamSession s(model, so, events);
        struct Current { // what the control thread interrupts: this utterance, until it ends (also by an exception)
            std::mutex& m;
            StreamSession*& p;
            Current(std::mutex& mu, StreamSession*& ptr, StreamSession* s) : m(mu), p(ptr) { set(s); }
            ~Current() { set(nullptr); }
            void set(StreamSession* s) {
                std::lock_guard<std::mutex> lk(m);
                p = s;
            }
        } guard(m, current, &s);
        std::vector<float> kept; // --save-audio
        size_t total = 0;
        bool more = true;
        std::exception_ptr lost; // the device stopped: the utterance so far is still finished and saved
        while (more) {
            // once the key is released (or the limit reached), what the device has queued is still taken, then no more
            more = !quit.load() && presses.load() < released_at;
            pcm.clear();
            try {
                cap.read(pcm, std::chrono::milliseconds(more ? 20 : 0));
            } catch (const std::runtime_error&) {
                lost = std::current_exception();
                more = false;
            }
            if (limit && total + pcm.size() >= limit) pcm.resize(limit - total), more = false;
            total += pcm.size();
            x.resize(pcm.size());
            for (size_t i = 0; i < pcm.size(); ++i) x[i] = float(pcm[i]) / 32768.0f;
            if (!co.save_audio.empty()) kept.insert(kept.end(), x.begin(), x.end());
            s.push(x.data(), x.size());
            if (hands_free && s.trailing_quiet_seconds() >= co.auto_finish) more = false;
        }
        guard.set(nullptr);
        s.interrupt(); // a step still to come would only delay the final
        const TranscriptionResult fin = s.finish();
        if (co.on_result) co.on_result(fin);
        if (!co.save_audio.empty())
            save_wav16(co.ptt || hands_free ? numbered(co.save_audio, turn) : co.save_audio, kept);
        if (lost) std::rethrow_exception(lost);
        if (!co.ptt && !hands_free) break;
        // a --capture-seconds limit ends the utterance as a release would: the next press starts the next one
        if (presses.load() % 2) presses.fetch_add(1);
    }
    return 0;
}

} // namespace qasr::cli
