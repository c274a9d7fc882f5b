// Subcommands of the qasr CLI. Each returns the process exit code; errors are thrown and reported by main.
#pragma once

namespace qasr::cli {

int cmd_transcribe(int argc, char** argv);
int cmd_dev(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_stream(int argc, char** argv);
int cmd_serve(int argc, char** argv);

// -v / --verbose: diagnostics from Info up (load and warm-up stage times) on stderr.
void log_verbose();

} // namespace qasr::cli
