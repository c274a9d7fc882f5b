// `qasr itn --language en|zh`: reads text lines from stdin and writes their
// inverse-text-normalized form to stdout, one line per line, so anyone can
// try or measure the ITN module (src/text/itn). argv[0] is the subcommand.
#include "cmd_itn.hpp"

#include "text/itn/itn.hpp"

#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>

namespace qasr::cli {

namespace {

void usage(std::FILE* f) {
    std::fputs("usage: qasr itn --language en|zh\n"
               "  Inverse text normalization: reads lines from stdin, writes the written\n"
               "  form to stdout (\"twenty five dollars\" -> \"$25\", \"百分之五十\" -> \"50%\").\n"
               "  --language, -l LANG   en|english|zh|chinese (other names pass text through)\n"
               "  --help, -h            this help\n",
               f);
}

} // namespace

int cmd_itn(int argc, char** argv) {
    std::string lang_name;
    // Called as main's argv ("qasr itn ...", argv[1] == "itn") or with the subcommand as argv[0].
    int first = (argc > 1 && std::string_view(argv[1]) == "itn") ? 2 : 1;
    for (int i = first; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--help" || a == "-h") { usage(stdout); return 0; }
        if (a == "--language" || a == "-l") {
            if (i + 1 >= argc) { std::fputs("qasr itn: --language needs a value (en|zh)\n", stderr); return 2; }
            lang_name = argv[++i];
            continue;
        }
        if (a.rfind("--language=", 0) == 0) { lang_name = std::string(a.substr(11)); continue; }
        std::fprintf(stderr, "qasr itn: unknown argument '%s' (try --help)\n", argv[i]);
        return 2;
    }
    if (lang_name.empty()) { std::fputs("qasr itn: --language en|zh is required (try --help)\n", stderr); return 2; }
    itn::Language lang = itn::language_from_name(lang_name);
    if (lang == itn::Language::Other) {
        std::fprintf(stderr, "qasr itn: unsupported language '%s' (use en or zh)\n", lang_name.c_str());
        return 2;
    }
    std::ios::sync_with_stdio(false);
    std::string line;
    std::string out;
    while (std::getline(std::cin, line)) {
        out = itn::normalize(line, lang);
        out += '\n';
        std::cout << out;
    }
    std::cout.flush();
    return std::cout ? 0 : 1;
}

} // namespace qasr::cli
