#!/bin/bash
# The package on a booted system: run by tests/packaging/check-deb.sh as a unit inside a
# throw-away container (systemd-nspawn on an overlay of the host's root, so nothing it does
# stays). Installs taskpatch with dpkg as a device would, drives the daemon through systemd
# and the socket unit as a reader, a technician and a stranger, then removes and purges it.
# Prints one "ok ..." or "FAIL ..." line per check and "done" at the end.
#
# /x (bound from the host) holds taskpatch.deb, ca.pem (the test CA, installed as the
# default trust.ca), base.gguf, json.gguf and json.tpb (a bundle signed by the test signer).
set -u
X=/x
export SYSTEMD_COLORS=0 SYSTEMD_PAGER=

ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; }
check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else fail "$desc"; fi
}
# wait_for COMMAND...: poll COMMAND for up to 10 s.
wait_for() {
    for _ in $(seq 100); do
        "$@" 2> /dev/null && return 0
        sleep 0.1
    done
    "$@"
}
quiet() { "$@" > /dev/null; }
prop() { systemctl show -P "$2" "$1"; }
is() { test "$(systemctl is-active "$1")" = "$2"; }
status_is() { test "$(prop taskpatchd.service StatusText)" = "$1"; }
as() {
    local user=$1
    shift
    runuser -u "$user" -- "$@"
}
status_line() { grep -m 1 "^$2:" "/proc/$1/status" | cut -f 2; }

# A device has no policy-rc.d (container images often carry one that forbids starting
# services): let the maintainer scripts start the units as they would on a device.
rm -f /usr/sbin/policy-rc.d
mkdir -p /etc/taskpatch
cp "$X/ca.pem" /etc/taskpatch/ca.pem

# ---- install -------------------------------------------------------------------------------
dpkg -i "$X/taskpatch.deb" > "$X/dpkg-install.log" 2>&1
check "dpkg -i: exit 0" test $? -eq 0
has_group() { getent group "$1" > /dev/null; }
check "sysusers.d: the group taskpatch exists" has_group taskpatch
check "sysusers.d: the group taskpatch-admin exists" has_group taskpatch-admin
check "tmpfiles.d: /var/lib/taskpatch is 750 root:taskpatch" \
    test "$(stat -c '%a %U:%G' /var/lib/taskpatch)" = "750 root:taskpatch"
check "the units are enabled (service and socket)" \
    test "$(systemctl is-enabled taskpatchd.service taskpatchd.socket | tr '\n' ' ')" = "enabled enabled "
check "postinst started the service: active (READY=1 arrived)" wait_for is taskpatchd.service active
check "... and the socket unit: active" is taskpatchd.socket active
check "the socket: 660 root:taskpatch" \
    test "$(stat -c '%a %U:%G %F' /run/taskpatch/taskpatchd.sock)" = "660 root:taskpatch socket"
check "STATUS=unprovisioned" status_is unprovisioned
check "the daemon was given the socket (journal: 'listening on the socket systemd passed')" \
    wait_for sh -c 'journalctl -b -o cat -u taskpatchd.service | grep -qx "listening on the socket systemd passed"'
check "WatchdogSec=30s" test "$(prop taskpatchd.service WatchdogUSec)" = 30s

pid=$(prop taskpatchd.service MainPID)
check "sandbox: the capability bounding set is CAP_LEASE alone ($(status_line "$pid" CapBnd))" \
    test "$(status_line "$pid" CapBnd)" = 0000000010000000
check "sandbox: no_new_privs" test "$(status_line "$pid" NoNewPrivs)" = 1
check "sandbox: a seccomp filter" test "$(status_line "$pid" Seccomp)" = 2
# The daemon's mount namespace: what ProtectSystem=strict and ReadWritePaths= left writable.
in_ns() { nsenter -t "$pid" -m -- sh -c "$1" 2> /dev/null; }
check "sandbox: /etc is read-only for the daemon" in_ns '! touch /etc/taskpatch/.probe'
check "sandbox: /usr is read-only for the daemon" in_ns '! touch /usr/.probe'
check "sandbox: /var/lib/taskpatch is writable for the daemon" in_ns 'touch /var/lib/taskpatch/.probe && rm /var/lib/taskpatch/.probe'
check "sandbox: /run/taskpatch is writable for the daemon" in_ns 'touch /run/taskpatch/.probe && rm /run/taskpatch/.probe'
check "sandbox: /home is hidden from the daemon (ProtectHome: a mount over it)" \
    sh -c "! mountpoint -q /home && nsenter -t $pid -m -- mountpoint -q /home"

# ---- who may do what -------------------------------------------------------------------------
useradd --system --no-create-home --groups taskpatch reader
useradd --system --no-create-home --groups taskpatch,taskpatch-admin tech
useradd --system --no-create-home stranger

as stranger tpctl status > /dev/null 2> /tmp/stranger.err
rc=$?
check "a stranger cannot connect: exit 3 (got $rc)" test "$rc" -eq 3
check "... 'Permission denied'" grep -q "Permission denied" /tmp/stranger.err
check "a reader (group taskpatch) reads the state" \
    sh -c 'runuser -u reader -- tpctl --json status | grep -q "\"state\": *\"unprovisioned\""'
as reader tpctl provision "$X/base.gguf" > /dev/null 2>&1
rc=$?
check "... but may not provision: exit 2 (got $rc)" test "$rc" -eq 2

# notify: the inference service is restarted over D-Bus (from inside the sandbox: uid 0
# without CAP_SYS_ADMIN) and the notify command runs (writing where the daemon may).
cat > /etc/systemd/system/inference.service << 'EOF'
[Service]
ExecStart=/bin/sh -c 'echo started >> /run/inference.starts; exec sleep infinity'
EOF
systemctl daemon-reload
systemctl start dbus.socket inference.service
sed -i -e 's|^  restart_units: \[\]$|  restart_units: [inference.service]|' \
    -e 's|^  exec: ""$|  exec: "env > /run/taskpatch/notified"|' /etc/taskpatch/taskpatchd.yaml
systemctl restart taskpatchd.service
starts() { wc -l < /run/inference.starts; }
starts_are() { test "$(starts)" -eq "$1"; }
check "the inference service runs (started once)" wait_for starts_are 1

# The whole update cycle under the sandbox: leases, fsyncs, renames, the symlink swap.
check "a technician (taskpatch + taskpatch-admin) provisions the base" \
    as tech tpctl --no-progress provision "$X/base.gguf"
check "... installs a signed bundle (trust.ca = /etc/taskpatch/ca.pem)" \
    as tech tpctl --no-progress install "$X/json.tpb"
check "... switches to it" as tech tpctl --no-progress switch json
check "STATUS: json on trial" wait_for status_is "json v1 on trial in slot b"
check "... mark-good" as tech tpctl mark-good
check "STATUS: idle, json active" wait_for status_is "idle: json v1 active in slot b"
# Provision and switch each ask for a restart; systemd merges a restart job that is still
# queued with the next one ("replace"), so two requests may make one restart.
starts_at_least() { test "$(starts)" -ge "$1"; }
check "notify: the inference service was restarted over D-Bus after provision and switch" \
    wait_for starts_at_least 2
notify_ok() {
    tpctl --json status | python3 -c 'import json, sys
n = json.load(sys.stdin)["notify"]
sys.exit(not (n["last_error"] is None and n["unit_calls"] == 2))'
}
check "notify: two unit calls, no error (tpctl status)" notify_ok
check "notify: the command ran with the event (TASKPATCH_TASK=json)" \
    wait_for grep -qx "TASKPATCH_TASK=json" /run/taskpatch/notified
check "the reader (the inference service) reads the model: json's bytes" \
    as reader cmp -s /var/lib/taskpatch/model.gguf "$X/json.gguf"
check "a stranger cannot read the model" sh -c '! runuser -u stranger -- cat /var/lib/taskpatch/model.gguf > /dev/null 2>&1'
check "the slot files are 0644 (UMask=0022)" \
    test "$(stat -L -c %a /var/lib/taskpatch/model.gguf)" = 644

# ---- stop, socket activation ---------------------------------------------------------------
systemctl stop taskpatchd.service 2> /dev/null # "... can still be activated by taskpatchd.socket": yes
check "systemctl stop: the daemon exited 0 on SIGTERM (result $(prop taskpatchd.service Result))" \
    test "$(prop taskpatchd.service Result) $(prop taskpatchd.service ExecMainStatus)" = "success 0"
check "... the socket unit keeps listening" is taskpatchd.socket active
check "a reader's tpctl starts the daemon through the socket" quiet as reader tpctl status
check "... active again, json still active" wait_for status_is "idle: json v1 active in slot b"

# ---- watchdog and Restart=on-failure -------------------------------------------------------
mkdir -p /run/systemd/system/taskpatchd.service.d
printf '[Service]\nWatchdogSec=2s\nRestartSec=100ms\n' > /run/systemd/system/taskpatchd.service.d/test.conf
systemctl daemon-reload
systemctl restart taskpatchd.service
pid=$(prop taskpatchd.service MainPID)
sleep 5
check "WatchdogSec=2s: still the same process after 5 s (it pets the watchdog)" \
    test "$(prop taskpatchd.service MainPID)" = "$pid"
kill -STOP "$pid"
check "a frozen daemon: killed by the watchdog" \
    wait_for sh -c 'journalctl -b -o cat -u taskpatchd.service | grep -q "Watchdog timeout"'
check "... and restarted (Restart=on-failure)" \
    wait_for sh -c "test \"\$(systemctl show -P MainPID taskpatchd.service)\" -ne $pid -a \"\$(systemctl is-active taskpatchd.service)\" = active"
check "... with its state: json active" wait_for status_is "idle: json v1 active in slot b"
rm -r /run/systemd/system/taskpatchd.service.d
systemctl daemon-reload

# ---- remove, purge -------------------------------------------------------------------------
dpkg -r taskpatch > "$X/dpkg-remove.log" 2>&1
check "dpkg -r: exit 0" test $? -eq 0
check "... the service and the socket are stopped" \
    test "$(systemctl is-active taskpatchd.service) $(systemctl is-active taskpatchd.socket)" = "inactive inactive"
check "... the binaries are gone" test ! -e /usr/bin/taskpatchd -a ! -e /usr/bin/tpctl -a ! -e /usr/bin/taskpatch
check "... the configuration (a conffile) stays" test -e /etc/taskpatch/taskpatchd.yaml
check "... the models stay" test -e /var/lib/taskpatch/model.gguf
dpkg -P taskpatch > "$X/dpkg-purge.log" 2>&1
check "dpkg -P: exit 0" test $? -eq 0
check "... the configuration is gone" test ! -e /etc/taskpatch/taskpatchd.yaml
check "... and the units' enablement links" \
    test ! -e /etc/systemd/system/multi-user.target.wants/taskpatchd.service -a \
    ! -e /etc/systemd/system/sockets.target.wants/taskpatchd.socket
echo "done"
