#!/usr/bin/env python3
"""Checks one restarted taskpatchd state for crash-points.sh.

check-state.py check STATUS_JSON MODEL STATE_DIR FIXTURE_DIR
    (a) model_path is byte-identical to base/json/shout/grow or the new base json2 (or absent
        while unprovisioned),
    (b) status agrees with the bytes (active.sha256, active.task),
    (c) no temporary ('.'-name) file in the state dir,
    (d) state.json parses.
    Prints one line 'model=<base|json|shout|absent|other>' then one line per problem;
    exit 1 when there is a problem.
check-state.py same STATUS1 STATUS2
    (e) the parts of two status answers that must survive a restart are equal.
check-state.py restarted LIVE RESTARTED
    After a failed call the daemon stopped normally and started again: a trial (LIVE says
    "trial") must have been rolled back (invariant 5), anything else must be as it was.
check-state.py injected LOG MAIN SYSCALL FROM K DIR
    Whether the K-th SYSCALL of thread MAIN after line FROM of the strace -yy LOG is the one
    strace failed ("(INJECTED)"): prints 'fired' or 'missed', then what the call was on, with
    DIR (the test's scratch dir) cut from paths.
check-state.py reseal STATE_DIR
    After 'cp -a' of a template state dir the slot files have new inode numbers, so the
    seals (which record dev/ino/mtime) would no longer hold and every run would rebuild.
    Rewrite each clean seal's file identity to the copy's: the same state, copied.
"""
import hashlib
import json
import os
import re
import sys

KEYS = ("state", "model_path", "active", "slots", "base", "tasks", "trial")
NEW_BASE = "json2"  # the base a base bundle brings in the rebase operations (crash-lib.sh)


def dir_files(d):
    """A model directory's files as the daemon orders them: relative paths, bytewise."""
    out = []
    for top, _, files in os.walk(d):
        out += [os.path.relpath(os.path.join(top, f), d) for f in files]
    return sorted(out, key=os.fsencode)


def le64(v):
    return (v & (2**64 - 1)).to_bytes(8, "little")


def sha(path):
    """A file's SHA-256, or a directory's set digest (common/base/fileset.h)."""
    if os.path.isdir(path):
        h = hashlib.sha256(b"taskpatch-set-v1\0")
        for r in dir_files(path):
            p = os.path.join(path, r)
            h.update(os.fsencode(r) + b"\0" + le64(os.path.getsize(p)) + bytes.fromhex(sha(p)))
        return h.hexdigest()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def check(status_path, model, state_dir, fix):
    problems = []
    ext = ".d" if os.path.isdir(os.path.join(fix, "base.d")) else ".gguf"  # CRASH_MODEL=dir
    fixtures = {sha(os.path.join(fix, n + ext)): n for n in ("base", "json", "shout", "grow", NEW_BASE)
                if os.path.exists(os.path.join(fix, n + ext))}
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
            problems.append("model_path holds %s bytes (none of base/json/shout/grow/%s)" % (which, NEW_BASE))
        active = st.get("active") or {}
        if active.get("sha256") != digest:
            problems.append("active.sha256 %s != sha256(model_path) %s" % (active.get("sha256"), digest))
        want = None if which in ("base", NEW_BASE) else which
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
        print("second restart changed %s: %s -> %s" % (k, brief(k, a.get(k)), brief(k, b.get(k))))
    return 1 if diff else 0


def brief(key, v):
    """A status part as a problem line shows it: short."""
    if key == "active" and v:
        return "slot %s (%s v%s)" % (v.get("slot"), v.get("task") or "base", v.get("version"))
    if key == "slots" and v:
        return ", ".join("%s: %s %s" % (s, d.get("state"), d.get("task") or "base") for s, d in sorted(v.items()))
    if key == "tasks" and v is not None:
        return "[%s]" % ", ".join("%s v%s" % (t.get("task"), t.get("version")) for t in v)
    return json.dumps(v)[:100]


def restarted(p0, p1):
    a, b = json.load(open(p0)), json.load(open(p1))
    problems = []
    if a.get("state") == "trial":
        t = a.get("trial") or {}
        if b.get("state") != "idle" or b.get("trial") is not None or (b.get("active") or {}).get("slot") == t.get("slot"):
            problems.append("the restart did not roll back the trial of %s in slot %s: %s, active %s"
                            % (t.get("task") or "the base", t.get("slot"), b.get("state"), json.dumps(b.get("active"))))
    else:
        # A base change's other slot is re-provisioned again at start: its slots may differ.
        for k in KEYS:
            if k == "slots" and a.get("reprovision"):
                continue
            if a.get(k) != b.get(k):
                problems.append("the restart changed %s: %s -> %s" % (k, brief(k, a.get(k)), brief(k, b.get(k))))
    for p in problems:
        print(p)
    return 1 if problems else 0


def short(path, scratch):
    """A path as the result line shows it: the scratch dir cut, mkostemp's suffix as XXXXXX."""
    for pre in (os.path.join(scratch, "state") + "/", scratch + "/"):
        if path.startswith(pre):
            path = path[len(pre):]
            break
    if os.path.basename(path).startswith("."):
        path = re.sub(r"\.[A-Za-z0-9]{6}$", ".XXXXXX", path)
    return path


def injected(log, main, sc, start, k, scratch):
    lines = open(log, errors="replace").read().splitlines()[int(start):]
    enter = re.compile(r"^%s\s+%s\(" % (main, sc))
    calls = [i for i, l in enumerate(lines) if enter.match(l)]
    if len(calls) < int(k):
        print("missed")
        print("the operation made %d %s calls" % (len(calls), sc))
        return 1
    i = calls[int(k) - 1]
    call = outcome = lines[i]
    if "<unfinished ...>" in call:
        resumed = re.compile(r"^%s\s+<\.\.\. %s resumed>" % (main, sc))
        outcome = next((l for l in lines[i + 1:] if resumed.match(l)), "")
    print("fired" if "(INJECTED)" in outcome else "missed")
    args = call[call.index("(") + 1:]
    fds = re.findall(r"(\d+)<([^>]*)>", args)
    paths = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
    if fds:
        fd, what = fds[-1] if sc == "copy_file_range" else fds[0]
        if fd == "2":
            print("stderr")
        elif what.startswith("UNIX"):
            print("a client socket")
        else:
            print(short(what, scratch) + ("/" if os.path.isdir(what) else ""))
    elif sc.startswith("rename") and len(paths) >= 2:
        print("%s -> %s" % (short(paths[0], scratch), short(paths[1], scratch)))
    elif paths:
        print(short(paths[-1], scratch))
    else:
        print(args[:60])
    return 0


def reseal(state_dir):
    slots = os.path.join(state_dir, "slots")
    for n in sorted(os.listdir(slots)) if os.path.isdir(slots) else []:
        if not n.endswith(".seal"):
            continue
        sp = os.path.join(slots, n)
        seal = json.load(open(sp))
        data = [f for f in os.listdir(slots) if f.startswith(n[:-5] + ".") and f.endswith((".gguf", ".dir"))]
        if seal.get("dirty") or len(data) != 1:
            continue
        path = os.path.join(slots, data[0])
        st = os.stat(path)
        seal["file"] = {"dev": st.st_dev, "ino": st.st_ino, "mtime_ns": st.st_mtime_ns}
        if "files" in seal:
            # A directory slot: the identity digest over the directory and each file (slot.c).
            h = hashlib.sha256(b"taskpatch-slot-identity-v1\0" + le64(st.st_dev) + le64(st.st_ino))
            for r in dir_files(path):
                f = os.lstat(os.path.join(path, r))
                h.update(os.fsencode(r) + b"\0" + le64(f.st_size) + le64(f.st_dev) + le64(f.st_ino) +
                         le64(f.st_mtime_ns))
            seal["files"]["identity"] = h.hexdigest()
        with open(sp, "w") as f:
            f.write(json.dumps(seal, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "reseal":
        sys.exit(reseal(sys.argv[2]))
    if sys.argv[1] == "check":
        sys.exit(check(*sys.argv[2:6]))
    if sys.argv[1] == "restarted":
        sys.exit(restarted(sys.argv[2], sys.argv[3]))
    if sys.argv[1] == "injected":
        sys.exit(injected(*sys.argv[2:8]))
    sys.exit(same(sys.argv[2], sys.argv[3]))
