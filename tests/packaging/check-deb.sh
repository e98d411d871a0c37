#!/bin/bash
# make check-deb: the Debian package make deb built. lintian (no errors; warnings shown);
# its contents, conffiles, dependencies and maintainer scripts; its binaries run; its
# sysusers.d and tmpfiles.d entries applied to a staged root; its units pass
# "systemd-analyze verify" against that root and "systemd-analyze security" scores them
# (exposure at most $MAX_EXPOSURE); its bash completions complete. Then, for a native
# package, a throw-away container boots systemd, installs the package with dpkg and drives
# the daemon through its units (tests/packaging/in-container.sh).
#
# Usage: tests/packaging/check-deb.sh DEB [BUILD_DIR]; ends with "deb: N passed, N failed".
# BUILD_DIR (default build) provides tools/gguf-fixture for the container's model fixtures.
# Needs root (unshare, overlayfs, systemd-nspawn from systemd-container).
set -u
deb=$(realpath "$1")
build=$(realpath "${2:-build}")
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
MAX_EXPOSURE=${MAX_EXPOSURE:-3.0}

PASS=0
FAIL=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/taskpatch-deb.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
ok() { PASS=$((PASS + 1)); echo "  ok   $*"; }
fail() { FAIL=$((FAIL + 1)); echo "  FAIL $*"; }
check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else fail "$desc"; fi
}
finish() {
    echo "deb: $PASS passed, $FAIL failed"
    [ "$FAIL" -eq 0 ]
}
[ -f "$deb" ] || { fail "no package at $1 (run 'make deb')"; finish; exit 1; }

version=$(dpkg-deb -f "$deb" Version)
arch=$(dpkg-deb -f "$deb" Architecture)
native=$(dpkg --print-architecture)
echo "  $(basename "$deb"): taskpatch $version for $arch"

# ---- lintian ---------------------------------------------------------------------------------
# The .changes covers the package, its -dbgsym and the .buildinfo.
changes=${deb%.deb}.changes
[ -f "$changes" ] || changes=$deb
lintian --allow-root --fail-on error --pedantic --display-info --show-overrides "$changes" > "$TMP/lintian" 2>&1
rc=$?
sed 's/^/    /' "$TMP/lintian"
count() { grep -c "^$1: " "$TMP/lintian"; }
check "lintian: exit $rc, $(count E) errors ($(count W) warnings, $(count I) info, $(count P) pedantic, $(count O) overridden)" \
    test "$rc" -eq 0 -a "$(count E)" -eq 0

# ---- contents --------------------------------------------------------------------------------
dpkg-deb -c "$deb" > "$TMP/contents"
awk '$1 !~ /^d/ { print $6 }' "$TMP/contents" | sort > "$TMP/files"
cat > "$TMP/expected" << 'EOF'
./etc/taskpatch/taskpatchd.yaml
./lib/systemd/system/taskpatchd.service
./lib/systemd/system/taskpatchd.socket
./usr/bin/taskpatch
./usr/bin/taskpatchd
./usr/bin/tpctl
./usr/lib/sysusers.d/taskpatch.conf
./usr/lib/tmpfiles.d/taskpatch.conf
./usr/share/bash-completion/completions/taskpatch
./usr/share/bash-completion/completions/tpctl
./usr/share/doc/taskpatch/changelog.gz
./usr/share/doc/taskpatch/copyright
./usr/share/lintian/overrides/taskpatch
./usr/share/man/man1/taskpatch.1.gz
./usr/share/man/man1/tpctl.1.gz
./usr/share/man/man5/taskpatchd.yaml.5.gz
./usr/share/man/man8/taskpatchd.8.gz
EOF
diff=$(diff "$TMP/expected" "$TMP/files")
check "dpkg-deb -c: exactly the $(wc -l < "$TMP/expected") expected files${diff:+ (diff: $(echo $diff))}" test -z "$diff"
check "... all owned by root/root" test -z "$(awk '$2 != "root/root"' "$TMP/contents")"
check "... the binaries 0755, the rest 0644" \
    test -z "$(awk '$1 !~ /^d/ && !(($6 ~ /^\.\/usr\/bin\// && $1 == "-rwxr-xr-x") || ($6 !~ /^\.\/usr\/bin\// && $1 == "-rw-r--r--"))' "$TMP/contents")"

root=$TMP/root
mkdir -p "$root/lib/systemd/system"
# systemd's own units first (systemd-analyze verify resolves sysinit.target & co. under
# --root), then the package over them.
cp -a /lib/systemd/system/. "$root/lib/systemd/system/"
dpkg -x "$deb" "$root"
same_as() { cmp -s "$root/$1" "$top/$2"; }
check "the units are systemd/taskpatchd.{service,socket}" \
    sh -c 'cmp -s "$1/lib/systemd/system/taskpatchd.service" "$2/systemd/taskpatchd.service" &&
           cmp -s "$1/lib/systemd/system/taskpatchd.socket" "$2/systemd/taskpatchd.socket"' sh "$root" "$top"
check "sysusers.d/taskpatch.conf is systemd/taskpatch.sysusers" same_as usr/lib/sysusers.d/taskpatch.conf systemd/taskpatch.sysusers
check "tmpfiles.d/taskpatch.conf is systemd/taskpatch.tmpfiles" same_as usr/lib/tmpfiles.d/taskpatch.conf systemd/taskpatch.tmpfiles
check "/etc/taskpatch/taskpatchd.yaml is config/taskpatchd.yaml" same_as etc/taskpatch/taskpatchd.yaml config/taskpatchd.yaml

# ---- control ---------------------------------------------------------------------------------
dpkg-deb -e "$deb" "$TMP/control"
check "conffiles: /etc/taskpatch/taskpatchd.yaml alone" test "$(cat "$TMP/control/conffiles")" = /etc/taskpatch/taskpatchd.yaml
depends=$(dpkg-deb -f "$deb" Depends)
echo "    Depends: $depends"
for d in "systemd | systemd-sysusers" libc6 libcurl4 libsystemd0 libmbedcrypto7 libmbedx509-1 libyaml-0-2 libzstd1 libjansson4; do
    check "Depends: $d" sh -c 'echo "$1" | tr "," "\n" | sed "s/ *(.*//; s/^ *//" | grep -qxF "$2"' sh "$depends" "$d"
done
post=$TMP/control/postinst
check "postinst: systemd-sysusers taskpatch.conf (dh_installsysusers)" grep -q 'systemd-sysusers .*taskpatch.conf' "$post"
check "postinst: systemd-tmpfiles --create taskpatch.conf (dh_installtmpfiles)" grep -q 'systemd-tmpfiles .*--create taskpatch.conf' "$post"
check "postinst: sysusers before tmpfiles (tmpfiles needs the group)" \
    test "$(grep -n systemd-sysusers "$post" | cut -d: -f1 | head -1)" -lt "$(grep -n 'systemd-tmpfiles ' "$post" | cut -d: -f1 | head -1)"
check "postinst: enables and starts taskpatchd.service and .socket (dh_installsystemd)" \
    sh -c 'grep -q "deb-systemd-helper enable .taskpatchd.service." "$1" &&
           grep -q "deb-systemd-helper enable .taskpatchd.socket." "$1" &&
           grep -q "deb-systemd-invoke .* .taskpatchd.service. .taskpatchd.socket." "$1"' sh "$post"

# ---- the binaries ----------------------------------------------------------------------------
WRAP=
if [ "$arch" != "$native" ]; then
    case $arch in arm64) WRAP="qemu-aarch64" ;; esac
fi
case $arch in
    amd64) machine="Advanced Micro Devices X86-64" ;;
    arm64) machine="AArch64" ;;
    *) machine="?" ;;
esac
for b in taskpatchd tpctl taskpatch; do
    m=$(readelf -h "$root/usr/bin/$b" | sed -n 's/^ *Machine: *//p')
    check "$b: an ELF for $arch ($m)" test "$m" = "$machine"
    out=$($WRAP "$root/usr/bin/$b" --version 2>&1)
    check "$b --version: '$out'" test "$out" = "$b $version"
done
out=$($WRAP "$root/usr/bin/taskpatchd" --check-config --config "$root/etc/taskpatch/taskpatchd.yaml" 2>&1)
check "taskpatchd --check-config accepts the shipped configuration" \
    sh -c 'echo "$1" | grep -q ": OK (state_dir /var/lib/taskpatch, socket /run/taskpatch/taskpatchd.sock, model_path /var/lib/taskpatch/model.gguf"' sh "$out"

# ---- sysusers.d, tmpfiles.d on the staged root -------------------------------------------------
mkdir -p "$root/etc" "$root/var/lib" "$root/run"
systemd-sysusers --root="$root" taskpatch.conf > "$TMP/sysusers.log" 2>&1
check "systemd-sysusers --root: exit 0" test $? -eq 0
gid=$(sed -n 's/^taskpatch:x:\([0-9]*\):.*/\1/p' "$root/etc/group")
check "... creates the system group taskpatch (gid $gid)" test -n "$gid" -a "${gid:-1000}" -lt 1000
check "... and taskpatch-admin" grep -q '^taskpatch-admin:x:[0-9]*:' "$root/etc/group"
systemd-tmpfiles --root="$root" --create taskpatch.conf > "$TMP/tmpfiles.log" 2>&1
check "systemd-tmpfiles --root --create: exit 0" test $? -eq 0
check "... /var/lib/taskpatch: 0750, root, the taskpatch group" \
    test "$(stat -c '%a %u %g' "$root/var/lib/taskpatch")" = "750 0 $gid"
check "... /run/taskpatch: 0755 root:root" test "$(stat -c '%a %u %g' "$root/run/taskpatch")" = "755 0 0"

# ---- systemd-analyze ---------------------------------------------------------------------------
# verify reports bad values only as warnings (exit 0): any output fails. MANPATH lets it find
# the Documentation= man pages the package ships.
MANPATH=$root/usr/share/man systemd-analyze verify --root="$root" \
    /lib/systemd/system/taskpatchd.service /lib/systemd/system/taskpatchd.socket > "$TMP/verify" 2>&1
rc=$?
sed 's/^/    /' "$TMP/verify"
check "systemd-analyze verify --root (service, socket): exit $rc, no output" test "$rc" -eq 0 -a ! -s "$TMP/verify"
systemd-analyze security --offline=true --root="$root" --no-pager taskpatchd.service > "$TMP/security" 2>&1
grep '✗' "$TMP/security" | sed 's/  */ /g; s/^/    /'
score=$(sed -n 's/.*Overall exposure level for taskpatchd.service: \([0-9.]*\).*/\1/p' "$TMP/security")
check "systemd-analyze security --offline=true: exposure ${score:-?} (at most $MAX_EXPOSURE)" \
    awk -v s="${score:-99}" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s + 0 <= m + 0) }'

# ---- bash completion ---------------------------------------------------------------------------
# complete LINE: what bash completion offers at the end of LINE, sorted, on one line.
complete_line() {
    bash --norc --noprofile -c '
        . /usr/share/bash-completion/bash_completion
        . "$1/usr/share/bash-completion/completions/tpctl"
        . "$1/usr/share/bash-completion/completions/taskpatch"
        cd "$2"
        COMP_LINE=$3 COMP_POINT=${#3}
        read -ra COMP_WORDS <<< "$3"
        [[ $3 == *" " ]] && COMP_WORDS+=("")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        _${COMP_WORDS[0]}
        printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "' sh "$root" "$TMP/compl" "$1" 2> /dev/null
}
mkdir -p "$TMP/compl/dir"
touch "$TMP/compl/a.tpb" "$TMP/compl/b.gguf" "$TMP/compl/c.channel"
if [ -r /usr/share/bash-completion/bash_completion ]; then
    ccheck() { check "complete '$1' -> '$2'" test "$(complete_line "$1")" = "$2 "; }
    ccheck "tpctl " "install list mark-good provision rollback status switch trust watch"
    ccheck "tpctl trust " "update"
    ccheck "tpctl --" "--help --json --model --no-progress --socket --version"
    ccheck "tpctl --socket /run sw" "switch"
    ccheck "tpctl install --" "--allow-downgrade --help --json --model --no-progress --socket --switch"
    ccheck "tpctl install " "a.tpb dir"
    ccheck "tpctl switch --" "--base --help --json --model --no-progress --socket --version"
    ccheck "tpctl switch --version " ""
    ccheck "taskpatch " "apply caps create diff fold hash inspect publish quantize revoke root sign verify"
    ccheck "taskpatch root --ch" "--channel-ca --channel-threshold"
    ccheck "taskpatch sign --p" "--pkcs11-uri"
    ccheck "taskpatch create --ma" "--max-changed-share"
    ccheck "taskpatch inspect " "a.tpb c.channel dir"
    ccheck "taskpatch publish " "dir"
    ccheck "taskpatch verify a.tpb --" "--allow-unsigned --ca --crl --decrypt-key --help --json --threshold"
    ccheck "taskpatch create --en" "--encrypt-to"
    ccheck "taskpatch create --dr" "--dry-run"
else
    fail "bash completion: /usr/share/bash-completion/bash_completion is missing (run 'make deps')"
fi

# ---- on a booted system ------------------------------------------------------------------------
if [ "$arch" != "$native" ]; then
    echo "  (the container check runs for the native package only: $arch is not $native)"
    finish
    exit
fi
x=$TMP/x
mkdir -p "$x"
fixtures() {
    local fix="$build/tools/gguf-fixture" ggml dims=(--type q4_0 --dim 256 --ff 512 --layers 2 --vocab 300)
    [ -x "$fix" ] || { echo "$fix is missing: run 'make BUILD=${build#"$top"/} tests-build'"; return 1; }
    sh "$top/tests/tools/make-pki.sh" "$TMP/pki" > /dev/null || return 1
    ggml=$(sh "$top/tests/tools/npm-ggml.sh" "$top/build/npm" | tail -n 1) || return 1
    "$fix" --ggml "$ggml" "${dims[@]}" -o "$x/base.gguf" > /dev/null &&
        "$fix" --ggml "$ggml" "${dims[@]}" --mode lora --targets attn_q,ffn_down -o "$x/json.gguf" > /dev/null &&
        "$root/usr/bin/taskpatch" create "$x/base.gguf" "$x/json.gguf" -o "$x/json.tpb" --task json --version 1 \
            --key "$TMP/pki/signer.key" --cert "$TMP/pki/signer.crt" --level 3 > /dev/null &&
        cp "$TMP/pki/ca.pem" "$x/ca.pem" && cp "$deb" "$x/taskpatch.deb" && cp "$here/in-container.sh" "$x/"
}
if ! command -v systemd-nspawn > /dev/null; then
    fail "container check: systemd-nspawn is missing (run 'make deps': systemd-container)"
elif ! fixtures > "$TMP/fixtures.log" 2>&1; then
    fail "container check: fixtures: $(tail -n 3 "$TMP/fixtures.log")"
else
    chmod -R a+rX "$x"
    check "the packaged taskpatch created the test bundle" test -s "$x/json.tpb"
    cat > "$x/taskpatch-check.service" << 'EOF'
[Unit]
Description=TaskPatch package check
[Service]
Type=oneshot
ExecStart=/bin/bash /x/in-container.sh
StandardOutput=file:/x/result
StandardError=file:/x/result.err
TimeoutStartSec=150
ExecStopPost=/bin/systemctl --no-block poweroff
EOF
    # A private mount namespace: the overlay (the host's root read-only below, a tmpfs above)
    # and nspawn's runtime directory vanish with it.
    start=$(date +%s)
    timeout 240 unshare -m --propagation private sh -c '
        set -e
        o=$1 x=$2
        mkdir -p "$o" /run/systemd/nspawn
        mount -t tmpfs -o size=256m,mode=0700 taskpatch-check "$o"
        mount -t tmpfs -o mode=0755 taskpatch-check /run/systemd/nspawn
        mkdir "$o/upper" "$o/work" "$o/root"
        mount -t overlay overlay -o "lowerdir=/,upperdir=$o/upper,workdir=$o/work" "$o/root"
        rm -f "$o/root/etc/machine-id"
        cp "$x/taskpatch-check.service" "$o/root/etc/systemd/system/"
        mkdir -p "$o/root/x"
        SYSTEMD_COLORS=0 systemd-nspawn --quiet --directory="$o/root" --machine=taskpatch-check \
            --register=no --keep-unit --link-journal=no --private-network --bind="$x:/x" \
            --boot -- --unit=taskpatch-check.service
    ' sh "$TMP/ovl" "$x" > "$TMP/console.log" 2>&1 < /dev/null
    rc=$?
    if [ -s "$x/result" ]; then
        while IFS= read -r line; do
            case $line in
                "ok   "*) ok "container: ${line#ok   }" ;;
                "FAIL "*) fail "container: ${line#FAIL }" ;;
            esac
        done < "$x/result"
    fi
    check "container: booted, ran every check and powered off (exit $rc, $(($(date +%s) - start)) s)" \
        sh -c '[ "$1" -eq 0 ] && tail -n 1 "$2" | grep -qx done' sh "$rc" "$x/result"
    if [ "$rc" -ne 0 ] || ! tail -n 1 "$x/result" 2> /dev/null | grep -qx "done"; then
        echo "    console (last lines):"
        tail -n 15 "$TMP/console.log" | sed 's/^/      /'
        tail -n 10 "$x/result.err" 2> /dev/null | sed 's/^/      stderr: /'
        tail -n 10 "$x/dpkg-install.log" 2> /dev/null | sed 's/^/      dpkg: /'
    fi
fi
finish
