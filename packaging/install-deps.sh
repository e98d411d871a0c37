#!/bin/sh
# Install everything TaskPatch needs to build, test and benchmark on Debian 12.
#
# Idempotent: packages already present are left alone. Runs apt-get, so it needs
# root (or sudo). Exits non-zero with a message naming what failed.
set -eu

# Native build and test dependencies.
PKGS_BUILD="build-essential pkg-config git ca-certificates
    libsystemd-dev libcurl4-openssl-dev libssl-dev libmbedtls-dev libyaml-dev libzstd-dev
    libjansson-dev libp11-kit-dev check libsubunit-dev"
# Tools the tests and benchmarks drive (softhsm2 and gnutls-bin's p11tool: a PKCS#11 token to sign
# with); for make deb / check-deb: debhelper 13 (with
# dh_installsysusers, dh_installtmpfiles), dh_bash-completion from bash-completion,
# lintian, and systemd-nspawn to boot a throw-away container that installs the package.
PKGS_TOOLS="openssl coreutils time curl python3 strace clang libclang-rt-14-dev
    zstd bsdiff xdelta3 nginx-light dbus-daemon softhsm2 gnutls-bin
    dpkg-dev debhelper bash-completion lintian systemd-container"
# Arm: cross compiler, user-mode emulator, and the arm64 dev packages side by side.
PKGS_ARM="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
PKGS_ARM64="libc6:arm64 libc6-dev:arm64 check:arm64 libsubunit-dev:arm64
    libjansson-dev:arm64 libmbedtls-dev:arm64 libcurl4-openssl-dev:arm64 libssl-dev:arm64
    libsystemd-dev:arm64 libzstd-dev:arm64 libyaml-dev:arm64 libp11-kit-dev:arm64"

die() { echo "install-deps: $*" >&2; exit 1; }

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "must run as root (or have sudo) to install packages"
    SUDO=sudo
fi
command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script supports Debian 12 (bookworm)"

# Are all of these packages installed already?
all_installed() {
    for p in "$@"; do
        # One status line per installed architecture (libzstd-dev and libzstd-dev:arm64): all installed.
        [ "$(dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | sort -u)" = "install ok installed" ] || return 1
    done
}

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "install-deps: enabling the arm64 architecture for cross-building"
    $SUDO dpkg --add-architecture arm64 || die "dpkg --add-architecture arm64 failed"
    NEED_UPDATE=1
fi

# shellcheck disable=SC2086 # word splitting of the package lists is intended
if all_installed $PKGS_BUILD $PKGS_TOOLS $PKGS_ARM $PKGS_ARM64 && [ -z "${NEED_UPDATE:-}" ]; then
    echo "install-deps: all packages already installed"
else
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q || die "apt-get update failed (is the network or the mirror reachable?)"
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -q --no-install-recommends $PKGS_BUILD $PKGS_TOOLS $PKGS_ARM $PKGS_ARM64 ||
        die "apt-get install failed; the packages needed are:
  $PKGS_BUILD $PKGS_TOOLS $PKGS_ARM $PKGS_ARM64"
fi

# Node.js >= 20 with npm runs the runtime checks and the demo's inference service (llama.cpp and
# ONNX Runtime from npm). Debian 12's own nodejs is 18: it must come from elsewhere (NodeSource).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    die "Node.js >= 20 with npm is needed (make check-runtimes, make demo) and was not found;
  Debian 12 ships 18: install Node.js 20 or later (e.g. from NodeSource) and run make deps again"
fi
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
    die "Node.js $(node --version) found; make check-runtimes and make demo need >= 20"
fi
echo "install-deps: Node.js $(node --version), npm $(npm --version)"

echo "install-deps: done"
