// SIGINT/SIGTERM for the long-running commands (`qasr serve`, `qasr stream --capture`): a handler writes the signal's
// number to a pipe — all it may do in a signal handler, on whichever thread the kernel picks (libraries such as
// OpenBLAS start threads before main, so blocking the signals everywhere for sigwait is not possible) — and the
// command's own thread reads it from fd(). One instance at a time; the destructor restores the previous handlers.
#pragma once
#include <signal.h>

namespace qasr::cli {

class StopSignals {
public:
    StopSignals();
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

    int fd() const { return pipe_[0]; } // readable once a signal came or wake() was called
    void wake();                        // makes next() return 0 (the reader should stop)
    int next();                         // blocks until a byte: the signal's number, or 0 after wake(); -1 on error

private:
    int pipe_[2] = {-1, -1};
    struct sigaction old_int_{}, old_term_{};
};

} // namespace qasr::cli
