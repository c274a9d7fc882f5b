#!/usr/bin/env bash
# Installs qasr's build and test dependencies from Debian's packages (skips what is already installed).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git nlohmann-json3-dev libpcre2-dev libutf8proc-dev libsoxr-dev
      libopenblas-dev libavformat-dev libavcodec-dev libavutil-dev libswresample-dev libgtest-dev npm python3)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
