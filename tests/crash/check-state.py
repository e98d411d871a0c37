#!/usr/bin/env python3
"""Checks one restarted taskpatchd state for crash-points.sh.

check-state.py check STATUS_JSON MODEL STATE_DIR FIXTURE_DIR
    (a) model_path is byte-identical to base/json/shout (or absent while unprovisioned),
    (b) status agrees with the bytes (active.sha256, active.task),
    (c) no temporary ('.'-name) file in the state dir,
    (d) state.json parses.
    Prints one line 'model=<base|json|shout|absent|other>' then one line per problem;
    exit 1 when there is a problem.
check-state.py same STATUS1 STATUS2
    (e) the parts of two status answers that must survive a restart are equal.
check-state.py reseal STATE_DIR
    After 'cp -a' of a template state dir the slot files have new inode numbers, so the
    seals (which record dev/ino/mtime) would no longer hold and every run would rebuild.
    Rewrite each clean seal's file identity to the copy's: the same state, copied.
"""
import hashlib
import json
import os
import sys

KEYS = ("state", "model_path", "active", "slots", "base", "tasks", "trial")


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def check(status_path, model, state_dir, fix):
    problems = []
    fixtures = {sha(os.path.join(fix, n + ".gguf")): n for n in ("base", "json", "shout")}
    try:
        st = json.load(open(status_path))
    except (OSError, ValueError) as e:
        print("model=?")
        print("status is not JSON: %s" % e)
        return 1
    if os.path.lexists(model):
        digest = sha(model) if os.path.exists(model) else None
        which = fixtures.get(digest, "other") if digest else "dangling"
    else:
        digest, which = None, "absent"
    print("model=" + which)
    # (a) + (b)
    if st.get("state") == "unprovisioned":
        if which != "absent":
            problems.append("status says unprovisioned but model_path holds %s" % which)
    else:
        if which not in fixtures.values():
            problems.append("model_path holds %s bytes (none of base/json/shout)" % which)
        active = st.get("active") or {}
        if active.get("sha256") != digest:
            problems.append("active.sha256 %s != sha256(model_path) %s" % (active.get("sha256"), digest))
        want = None if which == "base" else which
        if which in fixtures.values() and active.get("task") != want:
            problems.append("active.task %s but model_path holds %s" % (active.get("task"), which))
        if st.get("state") not in ("idle", "trial"):
            problems.append("state %s after restart (expected idle)" % st.get("state"))
    # (c)
    for d, dirs, files in os.walk(state_dir):
        for n in dirs + files:
            if n.startswith("."):
                problems.append("temporary left: %s" % os.path.relpath(os.path.join(d, n), state_dir))
    # (d)
    sp = os.path.join(state_dir, "state.json")
    if os.path.exists(sp):
        try:
            json.load(open(sp))
        except ValueError as e:
            problems.append("state.json does not parse: %s" % e)
    elif st.get("state") != "unprovisioned":
        problems.append("no state.json but status is %s" % st.get("state"))
    for p in problems:
        print(p)
    return 1 if problems else 0


def same(p1, p2):
    a, b = json.load(open(p1)), json.load(open(p2))
    diff = [k for k in KEYS if a.get(k) != b.get(k)]
    for k in diff:
        print("second restart changed %s: %s -> %s" % (k, json.dumps(a.get(k)), json.dumps(b.get(k))))
    return 1 if diff else 0


def reseal(state_dir):
    slots = os.path.join(state_dir, "slots")
    for n in sorted(os.listdir(slots)) if os.path.isdir(slots) else []:
        if not n.endswith(".seal"):
            continue
        sp = os.path.join(slots, n)
        seal = json.load(open(sp))
        data = [f for f in os.listdir(slots) if f.startswith(n[:-5] + ".") and f.endswith(".gguf")]
        if seal.get("dirty") or len(data) != 1:
            continue
        st = os.stat(os.path.join(slots, data[0]))
        seal["file"] = {"dev": st.st_dev, "ino": st.st_ino, "mtime_ns": st.st_mtime_ns}
        with open(sp, "w") as f:
            f.write(json.dumps(seal, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "reseal":
        sys.exit(reseal(sys.argv[2]))
    if sys.argv[1] == "check":
        sys.exit(check(*sys.argv[2:6]))
    sys.exit(same(sys.argv[2], sys.argv[3]))
