#!/bin/bash
# Keys in hardware (issue 19, item 5): a signing key generated inside a PKCS#11 token (SoftHSM2,
# through p11-kit) signs a bundle (taskpatch create --pkcs11-uri), a channel (publish) and a
# revocation list (revoke); the device verifies and installs what it signed. The key is marked
# sensitive and never extractable by the token; a wrong PIN, a key the URI does not name and a
# certificate of another key are refused, and no message echoes the URI's PIN.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
pki="$TMP/pki"
module=/usr/lib/softhsm/libsofthsm2.so
command -v p11tool > /dev/null && [ -e "$module" ] || { fail "softhsm2 and gnutls-bin (p11tool) are needed"; finish; exit 1; }
export SOFTHSM2_CONF="$TMP/softhsm2.conf"
mkdir -p "$TMP/tokens"
printf 'directories.tokendir = %s/tokens\nobjectstore.backend = file\nlog.level = ERROR\n' "$TMP" > "$SOFTHSM2_CONF"
softhsm2-util --init-token --free --label fleet --pin 4321 --so-pin 8765 > /dev/null
GNUTLS_PIN=4321 p11tool --provider "$module" --login --generate-privkey=ecdsa --curve=secp256r1 --label hsm-signer \
    --outfile "$TMP/hsm.pub" 'pkcs11:token=fleet' > /dev/null 2>&1
check "a P-256 key generated in the token" test -s "$TMP/hsm.pub"
GNUTLS_PIN=4321 p11tool --provider "$module" --login --list-privkeys 'pkcs11:token=fleet' > "$TMP/keys" 2>&1
check "... sensitive and never extractable" grep -q "CKA_NEVER_EXTRACTABLE; CKA_SENSITIVE" "$TMP/keys"
# Its certificate, issued by the test intermediate for the public key alone (no CSR: the key stays in).
printf 'basicConstraints = critical, CA:false\nkeyUsage = critical, digitalSignature\nextendedKeyUsage = codeSigning\n' \
    > "$TMP/hsm.ext"
openssl x509 -new -force_pubkey "$TMP/hsm.pub" -subj /CN=hsm-signer -CA "$pki/intermediate.pem" \
    -CAkey "$pki/intermediate.key" -days 365 -extfile "$TMP/hsm.ext" -out "$TMP/hsm.pem" 2> /dev/null
cat "$TMP/hsm.pem" "$pki/intermediate.pem" > "$TMP/hsm.crt"
uri="pkcs11:token=fleet;object=hsm-signer;type=private?module-path=$module&pin-value=4321"

echo "# signing in the token"
tp create "$TMP/base.gguf" "$TMP/json.gguf" -o "$TMP/hsm.tpb" --task json --version 1 --pkcs11-uri "$uri" \
    --cert "$TMP/hsm.crt" --level 3 > /dev/null
check "taskpatch create --pkcs11-uri: the bundle verifies" \
    sh -c "'$BIN/taskpatch' verify '$TMP/hsm.tpb' --ca '$pki/ca.pem' | grep -q 'OK: CN=hsm-signer'"
mkdir -p "$TMP/www"
cp "$TMP/hsm.tpb" "$TMP/www/json-1.tpb"
TASKPATCH_PKCS11_PIN=4321 tp publish "$TMP/www" --channel stable --serial 1 \
    --pkcs11-uri "pkcs11:token=fleet;object=hsm-signer" --cert "$TMP/hsm.crt" > /dev/null
check "publish with the PIN from TASKPATCH_PKCS11_PIN and p11-kit's configured modules: the channel verifies" \
    "$BIN/taskpatch" verify "$TMP/www/stable.channel" --ca "$pki/ca.pem"
printf '4321\n' > "$TMP/pin"
tp revoke -o "$TMP/r.revocations" --pkcs11-uri "pkcs11:token=fleet;object=hsm-signer?module-path=$module&pin-source=$TMP/pin" \
    --cert "$TMP/hsm.crt" --revoke "$pki/noeku-signer.crt" > /dev/null
check "revoke with the PIN from pin-source: the list verifies" \
    "$BIN/taskpatch" verify "$TMP/r.revocations" --ca "$pki/ca.pem"

echo "# refusals"
tp create "$TMP/base.gguf" "$TMP/json.gguf" -o "$TMP/x.tpb" --task json --pkcs11-uri "${uri/4321/1111}" \
    --cert "$TMP/hsm.crt" > /dev/null 2> "$TMP/err"
check "a wrong PIN: refused, saying so" grep -q "C_Login: The password or PIN is incorrect" "$TMP/err"
check "... without echoing the URI's PIN" sh -c "! grep -q 1111 '$TMP/err'"
tp create "$TMP/base.gguf" "$TMP/json.gguf" -o "$TMP/x.tpb" --task json --pkcs11-uri "${uri/object=hsm-signer/object=other}" \
    --cert "$TMP/hsm.crt" > /dev/null 2> "$TMP/err"
check "a key the URI does not name: refused" grep -q "no private key on any token matches pkcs11:token=fleet;object=other;type=private$" "$TMP/err"
tp create "$TMP/base.gguf" "$TMP/json.gguf" -o "$TMP/x.tpb" --task json --pkcs11-uri "$uri" \
    --cert "$pki/signer.crt" > /dev/null 2> "$TMP/err"
check "the certificate of another key: refused" grep -q "does not match the token's key" "$TMP/err"
check "... without echoing the URI's PIN" sh -c "! grep -q 4321 '$TMP/err'"
tp create "$TMP/base.gguf" "$TMP/json.gguf" -o "$TMP/x.tpb" --task json --pkcs11-uri "token=fleet" \
    --cert "$TMP/hsm.crt" > /dev/null 2> "$TMP/err"
check "not a pkcs11: URI: refused" grep -q "PKCS#11 URI: " "$TMP/err"
tp create "$TMP/base.gguf" "$TMP/json.gguf" -o "$TMP/x.tpb" --task json \
    --pkcs11-uri "pkcs11:token=fleet?module-path=$TMP/nonexistent.so&pin-value=4321" --cert "$TMP/hsm.crt" \
    > /dev/null 2> "$TMP/err"
check "a module that does not load: refused, naming it" grep -q "cannot load the module $TMP/nonexistent.so" "$TMP/err"
tp create "$TMP/base.gguf" "$TMP/json.gguf" -o "$TMP/x.tpb" --task json --pkcs11-uri "$uri" --key "$pki/signer.key" \
    --cert "$TMP/hsm.crt" > /dev/null 2> "$TMP/err"
check "--key and --pkcs11-uri together: a usage error" grep -q "give either --key (or --pkcs11-uri) and --cert" "$TMP/err"
check "nothing written by the refusals" test ! -e "$TMP/x.tpb"

echo "# the device"
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/hsm.tpb" --switch > /dev/null
check "installs and switches to the bundle the token signed" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "json"' 20
check "... byte for byte" same "$TMP/json.gguf"
tpctl list > "$TMP/out"
check "... its signer CN=hsm-signer" grep -q "hsm-signer" "$TMP/out"
daemon_finish
