// Standalone development driver for `qasr itn`, built only in the ITN
// module's standalone CMake mode (the real binary registers cmd_itn in
// tools/main.cpp): qasr_itn_cli --language en|zh < in > out.
#include "cmd_itn.hpp"

int main(int argc, char** argv) { return qasr::cli::cmd_itn(argc, argv); }
