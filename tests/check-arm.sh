#!/bin/sh
# The arm64 build under qemu-user, as a Raspberry Pi 5 (-cpu cortex-a76) and as the
# richest CPU qemu emulates (-cpu max): the whole unit suite, caps --json against what
# each CPU really has, and taskpatch hash against sha256sum with every kernel.
# Usage: tests/check-arm.sh BUILD_DIR; ends with "arm: N passed, N failed".
set -u
build=$1
here=$(dirname "$0")
command -v qemu-aarch64 > /dev/null || { echo "arm: qemu-aarch64 not found (run 'make deps')"; echo "arm: 0 passed, 1 failed"; exit 1; }

passed=0 failed=0
. "$here/tally.sh"

# Feature expectations: what the real chips have. Cortex-A76 is ARMv8.2-A with the
# crypto extension, dotprod and fp16, and none of SHA3/SHA512, i8mm, bf16, SVE, SME.
# qemu 7.2's "max" has everything up to SME, but does not emulate SME2.
expect() {
    case $1 in
    cortex-a76) echo "neon aes pmull sha1 sha2 crc32 atomics fp16 dotprod !sha3 !sha512 !i8mm !bf16 !sve !sve2 !sme !sme2" ;;
    max) echo "neon aes pmull sha1 sha2 sha3 sha512 crc32 atomics fp16 dotprod i8mm bf16 sve sve2 sme !sme2" ;;
    esac
}

for cpu in cortex-a76 max; do
    out=$("$here/unit/run.sh" "$build" "arm64/$cpu" qemu-aarch64 -cpu "$cpu" 2>&1)
    printf '%s\n' "$out"
    tally "$out"

    expect=$(expect "$cpu")
    json=$(qemu-aarch64 -cpu "$cpu" "$build/bin/taskpatch" caps --json)
    if printf '%s' "$json" | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["arch"] == "aarch64", j["arch"]
bad = [e for e in sys.argv[1].split() if j["features"][e.lstrip("!")] != (not e.startswith("!"))]
assert not bad, "wrong: " + " ".join(bad)
assert j["kernels"]["sha256"] == ("armv8-ce" if j["features"]["sha2"] else "generic"), j["kernels"]
' "$expect"; then
        echo "  [arm64/$cpu] ok   caps --json reports this CPU's features: $expect"
        passed=$((passed + 1))
    else
        echo "  [arm64/$cpu] FAIL caps --json for -cpu $cpu: $json"
        failed=$((failed + 1))
    fi

    out=$(WRAP="qemu-aarch64 -cpu $cpu" BIN=$(cd "$build/bin" && pwd) bash "$here/integration/test-arm-hash.sh" 2>&1)
    printf '%s\n' "$out" | sed "s|^|  [arm64/$cpu] |"
    tally "$out"
done

echo "arm: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
