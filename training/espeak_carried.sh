#!/bin/sh
# Runs a carried (dpkg -x / copied) espeak-ng: ESPEAK_CARRY points at a folder with bin/espeak-ng, lib/ and
# share/espeak-ng-data (default: .carry/espeak next to this repo's root).
d=${ESPEAK_CARRY:-$(dirname "$0")/../.carry/espeak}
LD_LIBRARY_PATH="$d/lib" ESPEAK_DATA_PATH="$d/share" exec "$d/bin/espeak-ng" "$@"
