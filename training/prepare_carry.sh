#!/usr/bin/env bash
# Builds .carry/espeak (gitignored): a relocatable espeak-ng for the GPU machine, which has none.
# Copies the local espeak-ng binary, the shared libraries it needs (except libc/libm) and espeak-ng-data with only
# the English and German dictionaries. Needs espeak-ng installed here (apt-get install espeak-ng).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dst="$root/.carry/espeak"
exe=$(command -v espeak-ng)
data=$("$exe" --version | sed -n 's/.*Data at: //p')
rm -rf "$dst"; mkdir -p "$dst/bin" "$dst/lib" "$dst/share"
cp "$exe" "$dst/bin/"
for l in $(ldd "$exe" | awk '/=>/{print $3}'); do
  case $(basename "$l") in libc.so.*|libm.so.*) ;; *) cp -L "$l" "$dst/lib/";; esac
done
cp -r "$data" "$dst/share/espeak-ng-data"
for f in "$dst"/share/espeak-ng-data/*_dict; do
  case $(basename "$f") in en_dict|de_dict) ;; *) rm "$f";; esac
done
"$root/training/espeak_carried.sh" --version
du -sh "$dst"
