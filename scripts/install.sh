#!/usr/bin/env bash
# install.sh [--debug] [--built] PREFIX -- builds and installs the C API, the Python module
# and the maestro binary:
#   PREFIX/include/maestro.h
#   PREFIX/lib/libmaestro.so, PREFIX/lib/libmaestro.a
#   PREFIX/lib/pkgconfig/maestro.pc
#   PREFIX/lib/python3.X/site-packages/maestro_core/   (X: this machine's python3)
#   PREFIX/lib/maestro_spank.so                         (Slurm SPANK plugin, for plugstack.conf)
#   PREFIX/bin/maestro
# then: cc prog.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs maestro)
#       PYTHONPATH=PREFIX/lib/python3.X/site-packages python3 -c 'import maestro_core'
# --debug installs the debug build (what the tests use: no second, release build).
# --built installs what the target directory holds, built by the caller with
# `cargo build --workspace --all-targets` (the tests: building here again, with the
# features of these packages alone, would relink binaries that other tests are running).
# Installs missing Debian packages first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
build=yes
while [[ ${1:-} == --* ]]; do
    case $1 in
        --debug) profile=debug ;;
        --built) build=no ;;
        *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [[ $# -ne 1 || -z $1 ]]; then
    echo "usage: scripts/install.sh [--debug] [--built] PREFIX" >&2
    exit 2
fi
mkdir -p "$1"
prefix=$(cd "$1" && pwd)
scripts/setup.sh
cargo_flags=()
[[ $profile == release ]] && cargo_flags+=(--release)
if [[ $build == yes ]]; then
    cargo build "${cargo_flags[@]}" -p maestro-capi -p maestro-python -p maestro-spank -p maestro
    # The benchmarks' program on its own: built with the others, its bare-libfabric
    # reference would be linked into `maestro` too (cargo unifies the features of one build).
    cargo build "${cargo_flags[@]}" -p maestro-bench
fi
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
out="$target/$profile"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
install -d "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/bin"
install -m 0644 capi/include/maestro.h "$prefix/include/maestro.h"
install -m 0755 "$out/libmaestro.so" "$prefix/lib/libmaestro.so"
install -m 0644 "$out/libmaestro.a" "$prefix/lib/libmaestro.a"
install -m 0755 "$out/maestro" "$prefix/bin/maestro"
install -m 0755 "$out/maestro-bench" "$prefix/bin/maestro-bench"
install -m 0755 "$out/libmaestro_spank.so" "$prefix/lib/maestro_spank.so"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" capi/maestro.pc.in \
    >"$prefix/lib/pkgconfig/maestro.pc"
pyver=$(/usr/bin/env python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
pkg="$prefix/lib/python$pyver/site-packages/maestro_core"
install -d "$pkg"
install -m 0644 python/maestro_core/__init__.py python/maestro_core/__init__.pyi \
    python/maestro_core/py.typed "$pkg/"
install -m 0755 "$out/lib_native.so" "$pkg/_native.abi3.so"
echo "installed maestro $version ($profile) in $prefix"
