#!/bin/bash
# make install / uninstall are symmetric and honour PREFIX, DESTDIR and the directory
# variables: the binaries, the man pages, the systemd units (naming the installed binary),
# sysusers.d, tmpfiles.d, the bash completions, and the configuration, which is installed
# only when absent and left behind by uninstall once changed.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(dirname "$BIN")

mk() { make -s -C "$root" BUILD="$build" "$@" > "$TMP/log" 2>&1; }
# The files under a staged root, "MODE /PATH", sorted.
files() { (cd "$1" && find . -type f -printf '%m /%P\n' | sort); }
# The directories make install takes from systemd.pc and bash-completion.pc, or under PREFIX.
pc() { pkg-config --variable="$1" "$2" 2> /dev/null; }
unitdir=$(pc systemdsystemunitdir systemd)
sysusersdir=$(pc sysusersdir systemd)
tmpfilesdir=$(pc tmpfilesdir systemd)
compdir=$(pc completionsdir bash-completion)
# expected PREFIX: every file install adds under PREFIX=..., SYSCONFDIR=/etc, with its mode.
expected() {
    local p=$1
    printf '%s\n' "755 $p/bin/taskpatch" "755 $p/bin/tpctl" "755 $p/bin/taskpatchd" \
        "644 $p/share/man/man1/taskpatch.1" "644 $p/share/man/man1/tpctl.1" \
        "644 $p/share/man/man5/taskpatchd.yaml.5" "644 $p/share/man/man8/taskpatchd.8" \
        "644 ${unitdir:-$p/lib/systemd/system}/taskpatchd.service" \
        "644 ${unitdir:-$p/lib/systemd/system}/taskpatchd.socket" \
        "644 ${sysusersdir:-$p/lib/sysusers.d}/taskpatch.conf" \
        "644 ${tmpfilesdir:-$p/lib/tmpfiles.d}/taskpatch.conf" \
        "644 ${compdir:-$p/share/bash-completion/completions}/taskpatch" \
        "644 ${compdir:-$p/share/bash-completion/completions}/tpctl" \
        "644 /etc/taskpatch/taskpatchd.yaml" | sort
}
# verify ROOT: systemd-analyze verify on the units installed under ROOT, with systemd's own
# units beside them (as tests/packaging/check-deb.sh does); any output fails.
verify() {
    local r=$TMP/verify-root u=${unitdir:-$2/lib/systemd/system}
    rm -rf "$r" && cp -a "$1" "$r" && mkdir -p "$r/lib/systemd/system" "$r$u"
    cp -an /lib/systemd/system/. "$r/lib/systemd/system/"
    MANPATH=$r$2/share/man systemd-analyze verify --root="$r" "$u/taskpatchd.service" "$u/taskpatchd.socket" \
        > "$TMP/verify" 2>&1 && test ! -s "$TMP/verify"
}

# ---- PREFIX=/usr: the Debian package's layout ---------------------------------------------------
stage=$TMP/stage
mk install PREFIX=/usr DESTDIR="$stage"
check "make install PREFIX=/usr exits 0" test $? -eq 0
diff=$(diff <(expected /usr) <(files "$stage"))
check "installs exactly the $(expected /usr | wc -l) expected files with their modes${diff:+ (diff: $(echo $diff))}" \
    test -z "$diff"
# Every page in packaging/man goes to the section its name ends in: taskpatch.1, tpctl.1,
# taskpatchd.8, taskpatchd.yaml.5.
for src in "$root"/packaging/man/*.[1-8]; do
    page=$(basename "$src")
    dst="usr/share/man/man${page##*.}/$page"
    check "installs the ${page%.*}(${page##*.}) man page as /$dst" cmp -s "$src" "$stage/$dst"
done
for page in taskpatch.1 tpctl.1 taskpatchd.8 taskpatchd.yaml.5; do
    check "packaging/man has $page" test -f "$root/packaging/man/$page"
done
u=${unitdir:-/usr/lib/systemd/system}
for f in taskpatchd.service taskpatchd.socket; do
    check "$u/$f is systemd/$f (the paths in it are already /usr's)" cmp -s "$root/systemd/$f" "$stage$u/$f"
done
check "sysusers.d/taskpatch.conf is systemd/taskpatch.sysusers" \
    cmp -s "$root/systemd/taskpatch.sysusers" "$stage${sysusersdir:-/usr/lib/sysusers.d}/taskpatch.conf"
check "tmpfiles.d/taskpatch.conf is systemd/taskpatch.tmpfiles" \
    cmp -s "$root/systemd/taskpatch.tmpfiles" "$stage${tmpfilesdir:-/usr/lib/tmpfiles.d}/taskpatch.conf"
for f in taskpatch tpctl; do
    check "the $f bash completion is packaging/completion/$f" \
        cmp -s "$root/packaging/completion/$f" "$stage${compdir:-/usr/share/bash-completion/completions}/$f"
done
check "/etc/taskpatch/taskpatchd.yaml is config/taskpatchd.yaml (taskpatchd's default path)" \
    cmp -s "$root/config/taskpatchd.yaml" "$stage/etc/taskpatch/taskpatchd.yaml"
check "the installed taskpatch runs" sh -c '"$1/usr/bin/taskpatch" --version > /dev/null' sh "$stage"
check "the installed taskpatchd accepts the installed configuration" \
    sh -c '"$1/usr/bin/taskpatchd" --check-config --config "$1/etc/taskpatch/taskpatchd.yaml" > /dev/null 2>&1' sh "$stage"
if command -v systemd-analyze > /dev/null; then
    check "systemd-analyze verify: the installed units, no output" verify "$stage" /usr
    sed 's/^/    /' "$TMP/verify"
fi

# ---- a changed configuration survives install and uninstall ------------------------------------
conf=$stage/etc/taskpatch/taskpatchd.yaml
echo "# changed by the administrator" >> "$conf"
cp "$conf" "$TMP/changed"
rm "$stage/usr/bin/tpctl"
mk install PREFIX=/usr DESTDIR="$stage"
check "a second make install exits 0" test $? -eq 0
check "... keeps the changed configuration" cmp -s "$TMP/changed" "$conf"
check "... and says so" grep -q "keeping .*/etc/taskpatch/taskpatchd.yaml" "$TMP/log"
check "... reinstalls the rest (tpctl)" test -x "$stage/usr/bin/tpctl"
mk uninstall PREFIX=/usr DESTDIR="$stage"
check "make uninstall exits 0" test $? -eq 0
left=$(files "$stage")
check "uninstall removes every file but the changed configuration${left:+ (left: $(echo $left))}" \
    test "$left" = "644 /etc/taskpatch/taskpatchd.yaml"
check "... which it keeps as it was" cmp -s "$TMP/changed" "$conf"
check "... and says so" grep -q "keeping .*/etc/taskpatch/taskpatchd.yaml: it differs" "$TMP/log"

# ---- an unchanged configuration goes with uninstall ---------------------------------------------
rm "$conf"
mk install PREFIX=/usr DESTDIR="$stage" && mk uninstall PREFIX=/usr DESTDIR="$stage"
check "install, uninstall: exit 0" test $? -eq 0
left=$(files "$stage")
check "uninstall with the configuration unchanged leaves no file${left:+ (left: $(echo $left))}" test -z "$left"
check "... nor /etc/taskpatch" test ! -e "$stage/etc/taskpatch"

# ---- PREFIX=/usr/local: the units name the installed binary -------------------------------------
stage=$TMP/local
mk install PREFIX=/usr/local DESTDIR="$stage"
check "make install PREFIX=/usr/local exits 0" test $? -eq 0
diff=$(diff <(expected /usr/local) <(files "$stage"))
check "installs the expected files under /usr/local, the configuration in /etc${diff:+ (diff: $(echo $diff))}" \
    test -z "$diff"
u=${unitdir:-/usr/local/lib/systemd/system}
check "taskpatchd.service runs /usr/local/bin/taskpatchd --config /etc/taskpatch/taskpatchd.yaml" \
    grep -qx 'ExecStart=/usr/local/bin/taskpatchd --config /etc/taskpatch/taskpatchd.yaml' "$stage$u/taskpatchd.service"
check "... and differs from systemd/taskpatchd.service in that line only" \
    test "$(diff "$root/systemd/taskpatchd.service" "$stage$u/taskpatchd.service" | grep -c '^[<>]')" -eq 2
if command -v systemd-analyze > /dev/null; then
    check "systemd-analyze verify: the /usr/local units, no output" verify "$stage" /usr/local
    sed 's/^/    /' "$TMP/verify"
fi
mk uninstall PREFIX=/usr/local DESTDIR="$stage"
left=$(files "$stage")
check "make uninstall PREFIX=/usr/local leaves no file${left:+ (left: $(echo $left))}" test -z "$left"

# ---- the directories on the command line --------------------------------------------------------
stage=$TMP/dirs
vars=(PREFIX=/opt/tp SYSCONFDIR=/opt/tp/etc UNITDIR=/opt/tp/units SYSUSERSDIR=/opt/tp/sysusers
      TMPFILESDIR=/opt/tp/tmpfiles BASHCOMPDIR=/opt/tp/completions)
mk install "${vars[@]}" DESTDIR="$stage"
check "make install with every directory given exits 0" test $? -eq 0
want=$(printf '%s\n' "755 /opt/tp/bin/taskpatch" "755 /opt/tp/bin/tpctl" "755 /opt/tp/bin/taskpatchd" \
    "644 /opt/tp/share/man/man1/taskpatch.1" "644 /opt/tp/share/man/man1/tpctl.1" \
    "644 /opt/tp/share/man/man5/taskpatchd.yaml.5" "644 /opt/tp/share/man/man8/taskpatchd.8" \
    "644 /opt/tp/units/taskpatchd.service" "644 /opt/tp/units/taskpatchd.socket" \
    "644 /opt/tp/sysusers/taskpatch.conf" "644 /opt/tp/tmpfiles/taskpatch.conf" \
    "644 /opt/tp/completions/taskpatch" "644 /opt/tp/completions/tpctl" \
    "644 /opt/tp/etc/taskpatch/taskpatchd.yaml" | sort)
diff=$(diff <(echo "$want") <(files "$stage"))
check "... installs into exactly those directories${diff:+ (diff: $(echo $diff))}" test -z "$diff"
check "... and the unit reads SYSCONFDIR's configuration" \
    grep -qx 'ExecStart=/opt/tp/bin/taskpatchd --config /opt/tp/etc/taskpatch/taskpatchd.yaml' \
    "$stage/opt/tp/units/taskpatchd.service"
mk uninstall "${vars[@]}" DESTDIR="$stage"
left=$(files "$stage")
check "make uninstall with the same directories leaves no file${left:+ (left: $(echo $left))}" test -z "$left"
finish
