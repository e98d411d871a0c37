#!/bin/bash
# Encrypted bundles (issue 19, item 9): `taskpatch create --encrypt-to` seals every frame of the
# payload (AES-256-GCM) and wraps the content key for each recipient (ECDH P-256 + HKDF); the
# manifest's hashes stay over the plaintext. The producer's tools read it (inspect: the
# recipients; verify: the payload without the key, every frame with it; apply --decrypt-key).
# A device with trust.decrypt_key installs and switches to it byte for byte (in place and
# relocating, at install and again from its store); a device without the key, or for whom it
# was not made, refuses it naming why; a tampered wrapped key, payload or stored bundle is
# refused and nothing changes; a key provisioned after the start is found; a key open to
# others is warned about.
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
make_relocated_fixture > /dev/null || fail "relocated fixture"
pki="$TMP/pki"
to_device=(--encrypt-to "$pki/device.crt" --encrypt-to "$pki/fleet.pub")

echo "# the producer"
make_bundle json.gguf json-enc.tpb json 1 "${to_device[@]}"
check "create --encrypt-to (a certificate and a bare public key) exits 0" test -s "$TMP/json-enc.tpb"
tp inspect --json "$TMP/json-enc.tpb" > "$TMP/inspect.json"
check "inspect lists the two recipients: key SHA-256 (as openssl computes it) and the certificate's subject" \
    python3 - "$TMP/inspect.json" \
    "$(openssl x509 -in "$pki/device.crt" -pubkey -noout | openssl pkey -pubin -outform DER | sha256sum | cut -c1-64)" \
    "$(openssl pkey -pubin -in "$pki/fleet.pub" -outform DER | sha256sum | cut -c1-64)" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["encryption"]
r = e["recipients"]
ok = (e["cipher"] == "aes-256-gcm" and e["key_wrap"] == "ecdh-p256-hkdf-sha256" and len(r) == 2 and
      r[0] == {"key_sha256": sys.argv[2], "name": "CN=device-0001"} and r[1] == {"key_sha256": sys.argv[3], "name": None})
sys.exit(0 if ok else 1)
PY
check "a plain bundle's inspect says encryption: null" \
    sh -c "'$BIN/taskpatch' inspect --json '$TMP/json.tpb' | grep -q '\"encryption\": null'"
check "no frame of the plain bundle appears in the encrypted one (zstd frames are deterministic)" \
    python3 - "$TMP/json.tpb" "$TMP/json-enc.tpb" <<'PY'
import struct, sys
def payload(p):
    d = open(p, "rb").read()
    m, s, n = struct.unpack_from("<QQQ", d, 16)
    return d[64 + m + s:]
plain, sealed = payload(sys.argv[1]), payload(sys.argv[2])
pieces = [plain[i:i + 32] for i in range(0, len(plain) - 32, 4096)]
sys.exit(0 if pieces and not any(p in sealed for p in pieces) and b"\x28\xb5\x2f\xfd" in plain else 1)
PY
tp verify "$TMP/json-enc.tpb" --ca "$pki/ca.pem" > "$TMP/out" 2>&1
check "verify without the key: the signature and the payload's SHA-256, frames not decrypted" \
    grep -q "payload SHA-256 matches; encrypted to 2 recipients: the frames were not decrypted" "$TMP/out"
tp verify "$TMP/json-enc.tpb" --ca "$pki/ca.pem" --decrypt-key "$pki/fleet.key" > "$TMP/out" 2>&1
check "verify --decrypt-key (the fleet key): every frame decrypted and decoded" \
    grep -q "decode to their lengths (decrypted, every tag checked)" "$TMP/out"
tp apply "$TMP/base.gguf" "$TMP/json-enc.tpb" -o "$TMP/applied.gguf" --ca "$pki/ca.pem" \
    --decrypt-key "$pki/device.key" > /dev/null 2>&1
check "apply --decrypt-key rebuilds json byte for byte" cmp -s "$TMP/applied.gguf" "$TMP/json.gguf"
tp apply "$TMP/base.gguf" "$TMP/json-enc.tpb" -o "$TMP/nokey.gguf" --ca "$pki/ca.pem" > /dev/null 2> "$TMP/out"
check "apply without a key: refused, asking for --decrypt-key, no output" \
    sh -c "grep -q 'give --decrypt-key' '$TMP/out' && test ! -e '$TMP/nokey.gguf'"
tp create "$TMP/base.gguf" "$TMP/json.gguf" -o "$TMP/x.tpb" --task json --unsigned \
    --encrypt-to "$pki/signonly-device.crt" > /dev/null 2> "$TMP/out"
check "a recipient certificate without keyAgreement is refused" grep -q "does not allow keyAgreement" "$TMP/out"
openssl pkey -in "$pki/p384-signer.key" -pubout -out "$TMP/p384.pub" 2> /dev/null
tp create "$TMP/base.gguf" "$TMP/json.gguf" -o "$TMP/x.tpb" --task json --unsigned \
    --encrypt-to "$TMP/p384.pub" > /dev/null 2> "$TMP/out"
check "a P-384 recipient is refused" grep -q "the key is not an EC P-256 key" "$TMP/out"

make_bundle shout.gguf shout-enc.tpb shout 1 "${to_device[@]}"
make_bundle grow.gguf grow-enc.tpb grow 1 --encrypt-to "$pki/device.crt"
make_bundle json2.gguf json-other.tpb json 2 --encrypt-to "$pki/device2.crt"
# A signer that signs a tampered manifest: a wrapped key altered, then signed.
tp create "$TMP/base.gguf" "$TMP/json2.gguf" -o "$TMP/bad-wrap.tpb" --task json --version 3 --unsigned \
    --encrypt-to "$pki/device.crt" --level 3 --plain-manifest > /dev/null
python3 - "$TMP/bad-wrap.tpb" <<'PY'
import sys
d = bytearray(open(sys.argv[1], "rb").read())
i = d.index(b"wrapped_key: ") + len("wrapped_key: ")
d[i] = ord("0") if d[i] != ord("0") else ord("1")
open(sys.argv[1], "wb").write(d)
PY
tp sign "$TMP/bad-wrap.tpb" --key "$pki/signer.key" --cert "$pki/signer.crt" > /dev/null
# A payload byte flipped in transit.
cp "$TMP/json-enc.tpb" "$TMP/flipped.tpb"
python3 -c "import sys; d = bytearray(open(sys.argv[1], 'rb').read()); d[-100] ^= 1; open(sys.argv[1], 'wb').write(d)" \
    "$TMP/flipped.tpb"

echo "# a device without a key"
write_config
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json-enc.tpb" > "$TMP/out" 2>&1
rc=$?
check "install refused (exit $rc), naming the missing trust.decrypt_key" \
    sh -c "test $rc -eq 2 && grep -q 'encrypted for 2 recipients, but this device has no trust.decrypt_key' '$TMP/out'"
stop_daemon

echo "# a device whose key is provisioned after the start"
write_config
sed -i "s|^trust:|trust:\n  decrypt_key: $TMP/keys/device.key|" "$CONF"
need_daemon
tpctl install "$TMP/json-enc.tpb" > "$TMP/out" 2>&1
check "install refused while the key file is missing, naming it" grep -q "trust.decrypt_key: .*keys/device.key" "$TMP/out"
mkdir -p "$TMP/keys"
install -m 0600 "$pki/device.key" "$TMP/keys/device.key"
tpctl install "$TMP/json-enc.tpb" --switch > "$TMP/out" 2>&1
check "once the key is there: installed and switched without a restart" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "json"'
check "... byte for byte" same "$TMP/json.gguf"
tpctl mark-good > /dev/null
tpctl install "$TMP/shout-enc.tpb" --switch > /dev/null 2>&1
check "a sibling switch to an encrypted shout" wait_status 's["state"] == "trial" and s["active"]["task"] == "shout"'
check "... byte for byte" same "$TMP/shout.gguf"
tpctl mark-good > /dev/null
tpctl switch json > /dev/null 2>&1
check "back to json from the store (its stored bundle decrypted again)" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "json"'
check "... byte for byte" same "$TMP/json.gguf"
tpctl mark-good > /dev/null
tpctl install "$TMP/grow-enc.tpb" --switch > /dev/null 2>&1
check "a relocating encrypted bundle (every tensor moved, built into a fresh file)" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "grow"'
check "... byte for byte" same "$TMP/grow.gguf"
tpctl mark-good > /dev/null

tpctl install "$TMP/json-other.tpb" > "$TMP/out" 2>&1
rc=$?
check "a bundle for another device only: refused (exit $rc), naming its recipient and this device's key" \
    sh -c "test $rc -eq 2 && grep -q 'encrypted for 1 key (CN=device-0002 .*); this device.s key is .*not for this device' '$TMP/out'"
tpctl install "$TMP/bad-wrap.tpb" > "$TMP/out" 2>&1
check "a tampered wrapped key (signed after the change): refused, the key does not open" \
    grep -q "does not open (its wrapped_key or ephemeral key was altered)" "$TMP/out"
tpctl install "$TMP/flipped.tpb" > "$TMP/out" 2>&1
check "a payload byte flipped in transit: refused at install" \
    grep -q "the payload does not match its manifest (damaged or tampered)" "$TMP/out"
check "... the active model did not change" same "$TMP/grow.gguf"

# Altered at rest: a stored bundle's frame byte flipped, then switched to.
stored=$(find "$STATE" -path '*shout*' -name '1.tpb' | head -n 1)
python3 -c "import sys; d = bytearray(open(sys.argv[1], 'rb').read()); d[-40] ^= 1; open(sys.argv[1], 'wb').write(d)" \
    "$stored"
tpctl switch shout > "$TMP/out" 2>&1
check "a stored bundle altered at rest: the switch fails on its frame's tag" \
    grep -q "does not authenticate\|payload SHA-256 does not match" "$TMP/out"
check "... grow still active" wait_status 's["active"]["task"] == "grow" and s["state"] in ("idle", "trial")'
check "... byte for byte" same "$TMP/grow.gguf"
stop_daemon

echo "# the key's mode"
chmod 0644 "$TMP/keys/device.key"
$WRAP "$BIN/taskpatchd" --config "$CONF" --check-config > "$TMP/out" 2>&1
check "--check-config warns about a key open to others" grep -q "trust.decrypt_key .* mode 0644" "$TMP/out"
echo "not a key" > "$TMP/keys/device.key"
$WRAP "$BIN/taskpatchd" --config "$CONF" --check-config > "$TMP/out" 2>&1
rc=$?
check "--check-config refuses a key file that is no key (exit $rc)" \
    sh -c "test $rc -eq 1 && grep -q 'trust.decrypt_key: .*not a private key' '$TMP/out'"
daemon_finish
