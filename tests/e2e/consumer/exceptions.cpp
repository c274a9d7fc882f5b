// Built against an installed qasr (install_consumer.sh): the library's exceptions are caught by their public types
// across libqasr.so's boundary — qasr::Error for a missing model, qasr::Cancelled for a transcription stopped by
// TranscribeOptions::abort — and the model goes on transcribing. Prints the transcript last.
#include <qasr/qasr.hpp>

#include <atomic>
#include <iostream>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: exceptions MODEL_DIR AUDIO_FILE\n";
        return 2;
    }
    try {
        qasr::Transcriber::load(std::string(argv[1]) + "/no-such-model");
        std::cerr << "a missing model loaded\n";
        return 1;
    } catch (const qasr::Error& e) {
        std::cout << "qasr::Error: " << e.what() << "\n";
    }
    const auto asr = qasr::Transcriber::load(argv[1]);
    std::atomic<bool> stop{true};
    qasr::TranscribeOptions o;
    o.abort = [&] { return stop.load(); };
    try {
        asr.transcribe_file(argv[2], o);
        std::cerr << "not cancelled\n";
        return 1;
    } catch (const qasr::Cancelled& e) {
        std::cout << "qasr::Cancelled: " << e.what() << "\n";
    }
    stop = false;
    std::cout << asr.transcribe_file(argv[2], o).text << "\n";
    return 0;
}
