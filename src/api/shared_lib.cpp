// libqasr.so's own source: none. The shared target is the static engine linked whole (src/CMakeLists.txt,
// WHOLE_ARCHIVE) with the exports listed in api/libqasr.map; CMake needs a source file per target.
