#!/bin/sh
# SPDX-License-Identifier: MIT
#
# make-pki.sh DIR — a throw-away test PKI for the signing code (common/bundle/sign.c).
#
# Usage: tests/tools/make-pki.sh DIR
#   Creates DIR if needed. Idempotent: when DIR already holds a complete PKI made by this
#   version of the script (DIR/.pki-stamp), it does nothing; otherwise it (re)creates every
#   file below. Needs only the openssl command line; takes well under a second or two.
#   NOT for production: keys are unencrypted, dates are fixed, the CA database is thrown away.
#
# Validity dates are fixed (not relative to today) so that tests, which pass their own clock
# to signature_verify(), give the same answers in any year. All keys are EC P-256 unless
# named otherwise; every signer key usage is digitalSignature + EKU codeSigning unless
# named otherwise. Chains (*.crt) are PEM, leaf first, then the intermediate.
#
#   ca.key, ca.pem                    root CA "CN=TaskPatch Test Root CA", 2000-01-01..2100-01-01
#   intermediate.key, intermediate.pem  "CN=TaskPatch Test Intermediate CA" (by the root),
#                                     pathlen 0, 2000-01-01..2095-01-01
#   signer.key, signer.crt            "CN=ci-signer" (by the intermediate), 2024-01-01..2040-01-01
#   signer-leaf.crt                   the same leaf without the intermediate (chain incomplete)
#   other-ca.key, other-ca.pem        an unrelated root "CN=TaskPatch Other Root CA",
#                                     2020-01-01..2030-01-01 (expires before its signer)
#   other-signer.key, other-signer.crt  "CN=other-signer" (directly by other-ca), 2020-01-01..2099-01-01
#   channel-ca.key, channel-ca.pem    a root for the channel role "CN=TaskPatch Test Channel CA",
#                                     2000-01-01..2100-01-01 (trust.channel_ca in the role tests)
#   channel-signer.key, .crt          "CN=channel-signer" (directly by channel-ca), 2024-01-01..2090-01-01
#   expired-signer.key, .crt          "CN=expired-signer", 2000-01-01..2001-01-01 (in the past)
#   future-signer.key, .crt           "CN=future-signer", 2090-01-01..2099-01-01 (not yet valid;
#                                     outlives the intermediate, which ends 2095-01-01)
#   nodigsig-signer.key, .crt         "CN=nodigsig-signer": keyUsage keyAgreement only
#   noku-signer.key, .crt             "CN=noku-signer": no keyUsage extension at all
#   serverauth-signer.key, .crt       "CN=serverauth-signer": EKU serverAuth only
#   noeku-signer.key, .crt            "CN=noeku-signer": digitalSignature, no EKU extension
#                                     (acceptable: EKU is checked only when present)
#   ca-signer.key, .crt               "CN=ca-signer": a CA certificate (CA:TRUE) with digitalSignature and
#                                     codeSigning (refused: a signer is an end entity)
#   anyeku-signer.key, .crt           "CN=anyeku-signer": EKU codeSigning and anyExtendedKeyUsage (refused)
#   fake-intermediate.key, .pem       "CN=TaskPatch Fake Intermediate" (by the root) with CA:FALSE
#   underfake-signer.key, .crt        "CN=underfake-signer" issued by the fake intermediate (its chain
#                                     does not verify: its issuer is not a CA)
#   rsa-signer.key, .crt              "CN=rsa-signer": RSA-2048 key (not ECDSA P-256)
#   p384-signer.key, .crt             "CN=p384-signer": EC P-384 key (not P-256)
#   ca.d/                             a CA directory: ca.pem, other-ca.pem and README.txt
#                                     (not a certificate: ignored, only *.pem / *.crt count)
#   revoked-signer.key, .crt          "CN=revoked-signer" (by the intermediate), 2024-01-01..2040-01-01,
#                                     revoked on 2025-01-01 by the CRLs below
#   intermediate.crl                  the intermediate's CRL (PEM): revoked-signer; 2025-01-01..2099-01-01
#   intermediate-stale.crl            the same, out of date: next update 2026-01-01
#   ca.crl                            the root's CRL: revokes no certificate it issued; 2025-01-01..2099-01-01
#   forged.crl                        a CRL in the intermediate's name revoking ci-signer, signed by
#                                     another key (impostor.key): it does not verify
#   crl.d/                            a CRL directory: ca.crl, intermediate.crl and README.txt (ignored)
#   channel-signer2.key, .crt         "CN=channel-signer-2" (by channel-ca): a second key of that role
#   rotated-ca.key, .pem              a root "CN=TaskPatch Rotated Root CA", 2000-01-01..2100-01-01, and
#   rotated-signer.key, .crt          "CN=rotated-signer" by it: the root role after a rotation
#   bundle2-ca.key, .pem              a root "CN=TaskPatch Second Bundle CA", 2000-01-01..2100-01-01, and
#   bundle2-signer.key, .crt          "CN=bundle2-signer" by it: the bundle role after a rotation
#   device.key, .crt                  "CN=device-0001" (by the intermediate): a device's encryption key
#                                     (keyUsage keyAgreement), what create --encrypt-to names
#   device2.key, .crt                 "CN=device-0002": another device's
#   fleet.key, fleet.pub              a fleet key: no certificate, its public key alone (PEM)
#   signonly-device.key, .crt         "CN=device-signonly": keyUsage digitalSignature only (refused as
#                                     a recipient: no keyAgreement)
set -eu

STAMP_VERSION="make-pki 6"

if [ $# -ne 1 ] || [ -z "$1" ]; then
        echo "usage: $0 DIR" >&2
        exit 2
fi
dir=$1
stamp="$dir/.pki-stamp"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$STAMP_VERSION" ]; then
        exit 0
fi

command -v openssl >/dev/null 2>&1 || { echo "$0: openssl not found" >&2; exit 1; }

umask 077
mkdir -p "$dir"
rm -f "$stamp"
work=$(mktemp -d "$dir/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

# One throw-away openssl-ca database for every issuer: it only records what was issued.
: > "$work/index.txt"
echo 1000 > "$work/serial"
cat > "$work/ca.cnf" <<EOF
[ ca ]
default_ca = tp_ca

[ tp_ca ]
database = $work/index.txt
serial = $work/serial
new_certs_dir = $work
default_md = sha256
policy = tp_policy
unique_subject = no
copy_extensions = none

[ tp_policy ]
commonName = supplied

[ req ]
distinguished_name = tp_dn
[ tp_dn ]

[ v3_root ]
basicConstraints = critical, CA:true
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[ v3_intermediate ]
basicConstraints = critical, CA:true, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always

[ v3_signer ]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = codeSigning
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always

[ v3_nodigsig ]
basicConstraints = critical, CA:false
keyUsage = critical, keyAgreement
extendedKeyUsage = codeSigning

[ v3_noku ]
basicConstraints = critical, CA:false
extendedKeyUsage = codeSigning

[ v3_serverauth ]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth

[ v3_noeku ]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature

[ v3_casigner ]
basicConstraints = critical, CA:true
keyUsage = critical, digitalSignature, keyCertSign
extendedKeyUsage = codeSigning

[ v3_anyeku ]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature
extendedKeyUsage = codeSigning, anyExtendedKeyUsage

[ v3_device ]
basicConstraints = critical, CA:false
keyUsage = critical, keyAgreement
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always

[ v3_fakeca ]
basicConstraints = critical, CA:false
keyUsage = critical, digitalSignature, keyCertSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
EOF

# key NAME [ec-p256|ec-p384|rsa]
key() {
        case $2 in
        ec-p256) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
                        -pkeyopt ec_param_enc:named_curve -out "$work/$1.key" 2>/dev/null ;;
        ec-p384) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 \
                        -pkeyopt ec_param_enc:named_curve -out "$work/$1.key" 2>/dev/null ;;
        rsa) openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/$1.key" 2>/dev/null ;;
        esac
}

# issue NAME CN ISSUER|self EXTENSIONS START END  → $work/NAME.pem (just the certificate)
# openssl x509 -days cannot express a validity in the past; openssl ca -startdate/-enddate can.
issue() {
        openssl req -new -config "$work/ca.cnf" -key "$work/$1.key" -subj "/CN=$2" -out "$work/$1.csr"
        if [ "$3" = self ]; then
                set -- "$1" "$2" "$3" "$4" "$5" "$6" -selfsign -keyfile "$work/$1.key"
        else
                set -- "$1" "$2" "$3" "$4" "$5" "$6" -cert "$work/$3.pem" -keyfile "$work/$3.key"
        fi
        name=$1 ext=$4 start=$5 end=$6
        shift 6
        openssl ca -batch -config "$work/ca.cnf" "$@" -in "$work/$name.csr" -out "$work/$name.pem" \
                -extensions "$ext" -startdate "$start" -enddate "$end" -notext 2>"$work/ca.log" ||
                { cat "$work/ca.log" >&2; exit 1; }
}

# signer NAME CN KEYTYPE EXTENSIONS START END [ISSUER] → NAME.key, NAME.crt (leaf + intermediate)
signer() {
        key "$1" "$3"
        issue "$1" "$2" "${7:-intermediate}" "$4" "$5" "$6"
        if [ "${7:-intermediate}" = intermediate ]; then
                cat "$work/$1.pem" "$work/intermediate.pem" > "$work/$1.crt"
        else
                cp "$work/$1.pem" "$work/$1.crt"
        fi
        mv "$work/$1.key" "$work/$1.crt" "$dir/"
}

key ca ec-p256
issue ca "TaskPatch Test Root CA" self v3_root 20000101000000Z 21000101000000Z
key intermediate ec-p256
issue intermediate "TaskPatch Test Intermediate CA" ca v3_intermediate 20000101000000Z 20950101000000Z
key other-ca ec-p256
issue other-ca "TaskPatch Other Root CA" self v3_root 20200101000000Z 20300101000000Z
key channel-ca ec-p256
issue channel-ca "TaskPatch Test Channel CA" self v3_root 20000101000000Z 21000101000000Z
key rotated-ca ec-p256
issue rotated-ca "TaskPatch Rotated Root CA" self v3_root 20000101000000Z 21000101000000Z
key bundle2-ca ec-p256
issue bundle2-ca "TaskPatch Second Bundle CA" self v3_root 20000101000000Z 21000101000000Z

signer signer ci-signer ec-p256 v3_signer 20240101000000Z 20400101000000Z
cp "$work/signer.pem" "$dir/signer-leaf.crt"
signer other-signer other-signer ec-p256 v3_signer 20200101000000Z 20990101000000Z other-ca
signer channel-signer channel-signer ec-p256 v3_signer 20240101000000Z 20900101000000Z channel-ca
signer channel-signer2 channel-signer-2 ec-p256 v3_signer 20240101000000Z 20900101000000Z channel-ca
signer rotated-signer rotated-signer ec-p256 v3_signer 20240101000000Z 20900101000000Z rotated-ca
signer bundle2-signer bundle2-signer ec-p256 v3_signer 20240101000000Z 20900101000000Z bundle2-ca
signer expired-signer expired-signer ec-p256 v3_signer 20000101000000Z 20010101000000Z
signer future-signer future-signer ec-p256 v3_signer 20900101000000Z 20990101000000Z
signer nodigsig-signer nodigsig-signer ec-p256 v3_nodigsig 20240101000000Z 20400101000000Z
signer noku-signer noku-signer ec-p256 v3_noku 20240101000000Z 20400101000000Z
signer serverauth-signer serverauth-signer ec-p256 v3_serverauth 20240101000000Z 20400101000000Z
signer noeku-signer noeku-signer ec-p256 v3_noeku 20240101000000Z 20400101000000Z
signer ca-signer ca-signer ec-p256 v3_casigner 20240101000000Z 20400101000000Z
signer anyeku-signer anyeku-signer ec-p256 v3_anyeku 20240101000000Z 20400101000000Z
signer device device-0001 ec-p256 v3_device 20240101000000Z 20900101000000Z
signer device2 device-0002 ec-p256 v3_device 20240101000000Z 20900101000000Z
signer signonly-device device-signonly ec-p256 v3_noeku 20240101000000Z 20900101000000Z
key fleet ec-p256
openssl pkey -in "$work/fleet.key" -pubout -out "$dir/fleet.pub" 2>/dev/null
mv "$work/fleet.key" "$dir/fleet.key"
key fake-intermediate ec-p256
issue fake-intermediate "TaskPatch Fake Intermediate" ca v3_fakeca 20000101000000Z 20950101000000Z
signer underfake-signer underfake-signer ec-p256 v3_signer 20240101000000Z 20400101000000Z fake-intermediate
cat "$work/underfake-signer.pem" "$work/fake-intermediate.pem" > "$dir/underfake-signer.crt"
signer rsa-signer rsa-signer rsa v3_signer 20240101000000Z 20400101000000Z
signer p384-signer p384-signer ec-p384 v3_signer 20240101000000Z 20400101000000Z

signer revoked-signer revoked-signer ec-p256 v3_signer 20240101000000Z 20400101000000Z
# Revoked on a fixed date in the past (openssl ca -revoke writes now): the database's third field.
openssl ca -config "$work/ca.cnf" -revoke "$work/revoked-signer.pem" -cert "$work/intermediate.pem" \
        -keyfile "$work/intermediate.key" 2>"$work/ca.log" || { cat "$work/ca.log" >&2; exit 1; }
awk 'BEGIN { FS = OFS = "\t" } $1 == "R" { $3 = "250101000000Z" } { print }' "$work/index.txt" \
        > "$work/index.new" && mv "$work/index.new" "$work/index.txt"
# crl NAME ISSUER NEXT_UPDATE [CONFIG] → NAME.crl (every revoked entry of the database, signed by ISSUER)
crl() {
        openssl ca -config "$work/${4:-ca}.cnf" -gencrl -cert "$work/$2.pem" -keyfile "$work/$2.key" \
                -crl_lastupdate 20250101000000Z -crl_nextupdate "$3" -out "$dir/$1.crl" 2>"$work/ca.log" ||
                { cat "$work/ca.log" >&2; exit 1; }
}
crl intermediate intermediate 20990101000000Z
crl intermediate-stale intermediate 20260101000000Z
crl ca ca 20990101000000Z
# An impostor with the intermediate's name: its CRL claims ci-signer is revoked.
key impostor ec-p256
issue impostor "TaskPatch Test Intermediate CA" self v3_root 20000101000000Z 21000101000000Z
signer_serial=$(openssl x509 -in "$work/signer.pem" -noout -serial | cut -d= -f2)
# Its own database (a serial is listed once in one): ci-signer's, revoked.
sed "s|^database = .*|database = $work/forged-index.txt|" "$work/ca.cnf" > "$work/forged.cnf"
printf 'R\t400101000000Z\t250101000000Z\t%s\tunknown\t/CN=ci-signer\n' "$signer_serial" > "$work/forged-index.txt"
crl forged impostor 20990101000000Z forged
rm -rf "$dir/crl.d"
mkdir "$dir/crl.d"
cp "$dir/ca.crl" "$dir/intermediate.crl" "$dir/crl.d/"
echo "Not a CRL: only *.pem and *.crl are read." > "$dir/crl.d/README.txt"

for f in ca intermediate other-ca channel-ca rotated-ca bundle2-ca fake-intermediate; do
        mv "$work/$f.key" "$dir/$f.key"
        cp "$work/$f.pem" "$dir/$f.pem"
done

rm -rf "$dir/ca.d"
mkdir "$dir/ca.d"
cp "$dir/ca.pem" "$dir/other-ca.pem" "$dir/ca.d/"
echo "Not a certificate: make-pki.sh puts it here to show that only *.pem and *.crt are read." \
        > "$dir/ca.d/README.txt"

echo "$STAMP_VERSION" > "$stamp"
