#!/usr/bin/env bash
# Installs qasr's build and test dependencies from Debian's packages (skips what is already installed).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git nlohmann-json3-dev libpcre2-dev libutf8proc-dev libsoxr-dev
      libopenblas-dev libcpp-httplib-dev libsdl2-dev libavformat-dev libavcodec-dev libavutil-dev libswresample-dev libgtest-dev sox)
# Installed for this machine's architecture (or arch-independent): `dpkg -s NAME` fails as ambiguous once the ARM
# cross build's :arm64 copies of a library are installed too (scripts/cross_arm64.sh), which made every run call apt.
native=$(dpkg --print-architecture)
installed() { dpkg-query -W -f='${Architecture} ${db:Status-Abbrev}\n' "$1" 2>/dev/null | grep -qE "^($native|all) ii"; }
missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
# Tools that may come from elsewhere than Debian (e.g. a Node.js distribution's npm): install only if absent.
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
