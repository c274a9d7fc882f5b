// `qasr itn` subcommand: inverse text normalization of stdin lines.
// Implemented in cmd_itn.cpp on top of src/text/itn (qasr_itn); registered
// in tools/main.cpp as `qasr itn --language en|zh`.
#pragma once

namespace qasr::cli {

// qasr itn --language en|zh  (reads lines from stdin, writes normalized lines
// to stdout). Accepts main's argv (argv[1] == "itn") or argv[0] == "itn".
// Returns 0 on success, 2 on bad arguments (one-line message on stderr).
int cmd_itn(int argc, char** argv);

} // namespace qasr::cli
