#!/usr/bin/env sh
# code-server's @vscode/ripgrep downloads `rg` from GitHub at install time unless its cache already holds the
# release tarball. Fill that cache from the system's rg (Debian's `ripgrep`) so the install works offline.
set -eu
rg_bin="$(command -v rg)" || { echo "seed-ripgrep: no rg on PATH (apt-get install ripgrep)" >&2; exit 1; }
pkg_version="${1:-1.15.11}"     # @vscode/ripgrep, pinned by code-server's lib/vscode/npm-shrinkwrap.json
rg_release="${2:-v13.0.0-10}"   # the VERSION constant of that package's postinstall.js
cache="${TMPDIR:-/tmp}/vscode-ripgrep-cache-$pkg_version"
tarball="$cache/ripgrep-$rg_release-x86_64-unknown-linux-musl.tar.gz"
[ -s "$tarball" ] && exit 0
mkdir -p "$cache"
work="$(mktemp -d)"
cp "$rg_bin" "$work/rg"
tar czf "$tarball" -C "$work" rg
rm -rf "$work"
echo "seed-ripgrep: $tarball from $rg_bin"
