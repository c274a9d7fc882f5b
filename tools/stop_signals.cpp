#include "stop_signals.hpp"

#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace qasr::cli {
namespace {
int g_write_fd = -1;
extern "C" void qasr_on_stop_signal(int sig) {
    const unsigned char b = static_cast<unsigned char>(sig);
    [[maybe_unused]] const ssize_t n = ::write(g_write_fd, &b, 1);
}
} // namespace

StopSignals::StopSignals() {
    if (g_write_fd >= 0) throw std::logic_error("StopSignals: one at a time");
    if (::pipe(pipe_) != 0) throw std::runtime_error("cannot create the signal pipe");
    g_write_fd = pipe_[1];
    struct sigaction sa{};
    sa.sa_handler = qasr_on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    g_write_fd = -1;
    ::close(pipe_[0]);
    ::close(pipe_[1]);
}

void StopSignals::wake() {
    const unsigned char zero = 0;
    [[maybe_unused]] const ssize_t n = ::write(pipe_[1], &zero, 1);
}

int StopSignals::next() {
    unsigned char b = 0;
    for (;;) {
        const ssize_t n = ::read(pipe_[0], &b, 1);
        if (n == 1) return b;
        if (n < 0 && errno == EINTR) continue;
        return -1;
    }
}

} // namespace qasr::cli
