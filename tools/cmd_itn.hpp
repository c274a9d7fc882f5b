// `qasr itn` subcommand: inverse text normalization of stdin lines.
#pragma once

namespace qasr::tools {

// qasr itn --language en|zh  (reads lines from stdin, writes normalized lines
// to stdout). Returns 0 on success, 2 on bad arguments.
int cmd_itn(int argc, char** argv);

} // namespace qasr::tools
