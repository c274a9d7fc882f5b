// The three-line API: load with warm-up, transcribe a file, read text and RTF.
//   build/examples/three_lines models/demo samples/demo_en.wav
#include <qasr/qasr.hpp>

#include <iostream>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: three_lines MODEL_DIR AUDIO_FILE\n";
        return 2;
    }
    try {
        auto asr = qasr::Transcriber::load_with_warmup(argv[1]);
        auto r = asr.transcribe_file(argv[2]);
        std::cout << r.text << "\nRTF " << r.rtf << "\n";
    } catch (const std::exception& e) {
        std::cerr << e.what() << "\n";
        return 1;
    }
    return 0;
}
