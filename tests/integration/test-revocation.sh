#!/bin/bash
# Revocation on the device (issue 19, item 1). A revocation list (taskpatch revoke, signed by
# the root role: trust.root_ca, here the channel CA) given with `tpctl trust update`: the
# bundles of a revoked key are listed as revoked and never installed, switched to or rolled
# back to; an active model one made is replaced through a trial by the newest good version of
# its task, else by the base; an older list, or one from another key than the root role's, is
# refused; the list survives a restart. Then X.509 CRLs (trust.crl): a revoked signer is refused
# at install, an active model it signed is replaced at start, and an out-of-date CRL refuses
# (trust.crl_expired: refuse, the default) or only warns (warn).
# shellcheck disable=SC2034  # DPID, SOCK, MODEL, CONF are read by daemon-lib.sh
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/daemon-lib.sh"

need_fixtures
pki="$TMP/pki"
root_keys=(--key "$pki/channel-signer.key" --cert "$pki/channel-signer.crt")
# create TARGET OUT TASK VERSION SIGNER: a bundle signed by pki/SIGNER.{key,crt}
create() {
    tp create "$TMP/base.gguf" "$TMP/$1" -o "$TMP/$2" --task "$3" --version "$4" --key "$pki/$5.key" \
        --cert "$pki/$5.crt" --level 3 > /dev/null
}
create json2.gguf json-2-leaked.tpb json 2 noeku-signer
create json.gguf json-3-leaked.tpb json 3 noeku-signer
create shout.gguf shout-revoked.tpb shout 1 revoked-signer
write_config "$LONG_TRIAL
  root_ca: $pki/channel-ca.pem" 2> /dev/null
# The trust section is written by write_config; root_ca belongs in it.
python3 - "$CONF" "$pki" <<'PY'
import sys
conf, pki = sys.argv[1], sys.argv[2]
text = open(conf).read().replace("  root_ca: %s/channel-ca.pem\n" % pki, "")
text = text.replace("trust:\n", "trust:\n  root_ca: %s/channel-ca.pem\n" % pki)
open(conf, "w").write(text)
PY
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/json.tpb" --switch > /dev/null && tpctl mark-good > /dev/null
tpctl install "$TMP/json-2-leaked.tpb" --switch > /dev/null && tpctl mark-good > /dev/null
check "json v2 (signed by the key that will leak) committed" wait_status 's["active"]["version"] == 2' 10

echo "# a revocation list for the leaked key"
tp revoke -o "$TMP/r1.revocations" "${root_keys[@]}" --revoke "$pki/noeku-signer.crt" --reason "key leaked" \
    > /dev/null
tpctl trust update "$TMP/r1.revocations" > "$TMP/out" 2>&1
check "taken: version 1, one installed bundle revoked" grep -q "version 1 accepted: 1 entries; 1 installed" "$TMP/out"
check "... the active model is replaced through a trial by the newest good version (json v1)" \
    wait_status 's["state"] == "trial" and s["active"]["task"] == "json" and s["active"]["version"] == 1' 30
check "... byte for byte" same "$TMP/json.gguf"
check "... status says why" grep -q "json v2 is signed by a revoked signer: certificate 'CN=noeku-signer' is revoked" \
    "$TMP/st.json"
check "... and lists the revoked bundle" python3 -c "
import json, sys; s = json.load(open(sys.argv[1]))
assert [(r['task'], r['version']) for r in s['revoked']] == [('json', 2)], s['revoked']
assert s['trust']['revocations']['version'] == 1 and s['trust']['revocations']['entries'] == 1, s['trust']" \
    "$TMP/st.json"
check "... the daemon says what it replaced" grep -q "replaced by json v1 through a trial" "$TMP/daemon.log"
tpctl status > "$TMP/out"
check "tpctl status: the revoked bundle and the list held" \
    sh -c "grep -q '^Revoked: *json v2: certificate .CN=noeku-signer. is revoked' '$TMP/out' &&
           grep -q '^Trust: *revocation list version 1 (1 entries' '$TMP/out'"
tpctl list > "$TMP/out"
check "tpctl list: json v1 only, then json v2 as revoked" \
    sh -c "grep -q '^  revoked: json v2: ' '$TMP/out' && ! grep -q '^. json  *2 ' '$TMP/out'"
tpctl mark-good > /dev/null
check "committed: nothing revoked runs now" wait_status 's["state"] == "idle" and s["trust"]["revoked_active"] is None'

echo "# what the revoked key signed is never used"
tpctl switch json --version 2 > "$TMP/out" 2>&1
rc=$?
check "switch to json v2: refused (exit $rc)" test "$rc" -eq 2
check "... it is installed but revoked" grep -q "json v2 is installed but revoked" "$TMP/out"
tpctl install "$TMP/json-3-leaked.tpb" > "$TMP/out" 2>&1
rc=$?
check "install of another bundle of that key: refused (exit $rc)" test "$rc" -eq 2
check "... by the revocation list, with the reason" grep -q "revoked by revocation list version 1 (key .*key leaked)" \
    "$TMP/out"
tpctl rollback > "$TMP/out" 2>&1
rc=$?
check "rollback to json v2 (committed before): refused (exit $rc)" test "$rc" -eq 2
check "... as revoked" grep -q "revoked" "$TMP/out"
check "... json v1 still runs" wait_status 's["active"]["version"] == 1 and s["state"] == "idle"'

echo "# lists that are not taken"
tpctl trust update "$TMP/r1.revocations" > "$TMP/out" 2>&1
check "the same list again: held already, nothing changes" grep -q "is the one held already" "$TMP/out"
tp revoke -o "$TMP/r2.revocations" --from "$TMP/r1.revocations" "${root_keys[@]}" > /dev/null
tpctl trust update "$TMP/r2.revocations" > /dev/null
tpctl trust update "$TMP/r1.revocations" > "$TMP/out" 2>&1
rc=$?
check "an older list after a newer one (a replay): refused (exit $rc)" test "$rc" -eq 2
check "... as not newer" grep -q "version 1 is not newer than the one this device holds (version 2)" "$TMP/out"
tp revoke -o "$TMP/by-bundle-key.revocations" --version 9 --key "$pki/signer.key" --cert "$pki/signer.crt" > /dev/null
tpctl trust update "$TMP/by-bundle-key.revocations" > "$TMP/out" 2>&1
rc=$?
check "a list signed by a bundle signer, not the root role: refused (exit $rc)" test "$rc" -eq 2
check "... it does not chain to trust.root_ca" grep -q "does not verify against $pki/channel-ca.pem" "$TMP/out"
cp "$TMP/r2.revocations" "$TMP/tampered.revocations"
sed -i 's/version: 2/version: 8/' "$TMP/tampered.revocations"
tpctl trust update "$TMP/tampered.revocations" > "$TMP/out" 2>&1
check "a list whose text was changed: refused" grep -q "signature does not match" "$TMP/out"

echo "# across a restart"
stop_daemon
start_daemon
check "the list is kept (version 2) and json v2 is still revoked" \
    wait_status 's["trust"]["revocations"]["version"] == 2 and [r["version"] for r in s["revoked"]] == [2]'

echo "# no good version left: the base"
tp revoke -o "$TMP/r3.revocations" --from "$TMP/r2.revocations" "${root_keys[@]}" --revoke "$pki/signer.crt" \
    > /dev/null
tpctl trust update "$TMP/r3.revocations" > /dev/null
check "json v1's signer revoked too: the base goes on trial" \
    wait_status 's["state"] == "trial" and s["active"]["task"] is None' 30
check "... byte for byte" same "$TMP/base.gguf"
tpctl mark-good > /dev/null
check "... committed" wait_status 's["state"] == "idle" and s["trust"]["revoked_active"] is None'
daemon_finish_keep() { stop_daemon; }
daemon_finish_keep

echo "# X.509 CRLs (trust.crl)"
rm -rf "$STATE"
write_config
need_daemon
tpctl provision "$TMP/base.gguf" > /dev/null
tpctl install "$TMP/shout-revoked.tpb" --switch > /dev/null && tpctl mark-good > /dev/null
check "without a CRL, shout (signed by revoked-signer) runs" wait_status 's["active"]["task"] == "shout"' 10
stop_daemon
sed -i "s|^trust:|trust:\n  crl: $pki/intermediate.crl|" "$CONF"
start_daemon
check "with the intermediate's CRL, at start: the active model is revoked and the base goes on trial" \
    wait_status 's["state"] == "trial" and s["active"]["task"] is None' 30
check "... the CRL named" grep -q "revoked by the CRL of 'CN=TaskPatch Test Intermediate CA'" "$TMP/st.json"
tpctl mark-good > /dev/null
tpctl install "$TMP/shout-revoked.tpb" > "$TMP/out" 2>&1
rc=$?
check "install of a bundle the CRL revokes: refused (exit $rc)" test "$rc" -eq 2
tpctl install "$TMP/json.tpb" > /dev/null
check "a good signer still installs" wait_status '[t["task"] for t in s["tasks"]] == ["json"]' 10
stop_daemon
sed -i "s|intermediate.crl|intermediate-stale.crl|" "$CONF"
start_daemon
tpctl install "$TMP/shout.tpb" > "$TMP/out" 2>&1
rc=$?
check "an out-of-date CRL (next update 2026-01-01): refused by default (exit $rc)" test "$rc" -eq 2
check "... saying so" grep -q "the CRL of 'CN=TaskPatch Test Intermediate CA' is out of date" "$TMP/out"
stop_daemon
sed -i "s|^trust:|trust:\n  crl_expired: warn|" "$CONF"
start_daemon
tpctl install "$TMP/shout.tpb" > /dev/null
check "with crl_expired: warn, it installs" wait_status '"shout" in [t["task"] for t in s["tasks"]]' 10
check "... with a warning" grep -q "out of date (its next update was due 2026-01-01" "$TMP/daemon.log"
daemon_finish
