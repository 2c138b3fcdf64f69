#!/usr/bin/env bash
# Installs the Debian packages nextn builds with, if any are missing.
# Runs as root (or through sudo); a no-op when everything is present.
set -euo pipefail
pkgs=(gcc make cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev libxxhash-dev libmicrohttpd-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Node.js runs the server tests with the openai npm client; any node >= 18
# on PATH will do, Debian's is installed only when there is none.
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "nextn: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
