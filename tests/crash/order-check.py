#!/usr/bin/env python3
"""Check taskpatchd's write ordering in `strace -f -y` traces (DESIGN.md invariants 1, 3, 4).

A SIGKILL keeps the page cache, so it cannot show what a power cut loses; this checker reads
the order of the daemon's syscalls instead and holds it to the rules that make a power cut
safe. Files are modelled by identity: an fd maps to a file object (strace -y names its path),
a rename moves the object to its new name, a replaced or unlinked object leaves the tree.
"The tree" is the state directory and the directory of model_path.

  R1 synced before renamed: a file renamed into the tree has no write after its last
     fsync/fdatasync. fdatasync counts in full: it also flushes a size change (fdatasync(2));
     it may leave an older mtime, which at worst fails a seal's identity check (a full
     verification follows, never a wrong trust). Writes are write/pwrite*/writev,
     copy_file_range, ioctl FICLONE*, ftruncate, fallocate, sendfile, open with O_TRUNC.
  R2 durable before announced: every entry change in a tree directory (rename, unlink,
     symlink, link, mkdir, rmdir; temporaries - names starting with '.', or files this trace
     created with O_EXCL and never renamed into place - excepted) is followed by an fsync of an
     fd open on that directory before the daemon sends a change event (staged, slot-changed,
     trial-started, committed, rolled-back, update-available) or a settled success reply
     ("ok":true with a "state") to provision/install/switch/mark-good/rollback.
  R3 the active model is never written: no write into, open for writing of, or rename over /
     unlink of the file model_path points at that moment (followed through its renames).
     Provision replaces both slots by rename on purpose (its state says "provisioning" first):
     renames during a provision request are exempt.
  R4 commit order: model_path changes only by rename (activation is one rename(2): an unlink
     of it or a symlink made at it is a violation); at that swap its new target has no
     unsynced write (invariant 3); at a rename of a seal that says "dirty": false its slot file
     has none (a seal vouches for bytes that must be on disk); at any rename into the tree no
     directory other than the rename's own has an entry change not yet fsynced (a commit must
     not overtake what it names; this includes the state directory's own entry).
  R5 write-temp or leased slot only: a write into the tree goes to a temporary, or to a slot
     file (slots/{a,b}<model ext>, or a file under slots/{a,b}.dir/) under a granted write lease
     (fcntl F_SETLEASE F_WRLCK = 0, not yet released); a file whose lease was refused (another
     process has it open) is never written; no MAP_SHARED writable mapping of a tree file (its
     writes would be invisible).

Directory slots (a model of several files): a slot is slots/{a,b}.dir and model_path links to
one. A name inside a temporary directory (any component starting with '.') is a temporary;
renaming a directory moves every file under it, RENAME_EXCHANGE swaps the two trees. The rules
then apply to the files under a directory: R1 when the directory is renamed into place, R3 to
every file under the active directory, R4 at the swap to it and at a clean seal of it.

Usage: order-check.py [--state-dir D --model-path P] TRACE...   (defaults: '# state_dir=D',
       '# model_path=P' lines at the top of a trace)
       order-check.py --self-test DIR   (DIR/*.strace, each with '# expect: R1 R4' or 'none')
Prints one line per violation, a count of what each rule checked per trace; exits 1 on any
violation.
"""
import argparse
import os
import re
import sys

sys.dont_write_bytecode = True      # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strace_parse import FD, STR, records, unescape  # noqa: E402  (beside this script)

RULES = ("R1", "R2", "R3", "R4", "R5")
CHANGE_EVENTS = {"staged", "slot-changed", "trial-started", "committed", "rolled-back", "update-available"}
CHANGING_CMDS = {"provision", "install", "switch", "mark-good", "rollback"}
# syscall -> index of the fd that is written
WRITES = {"write": 0, "pwrite64": 0, "writev": 0, "pwritev": 0, "pwritev2": 0, "ftruncate": 0,
          "fallocate": 0, "copy_file_range": 2, "sendfile": 0, "splice": 2}


class Obj:
    def __init__(self, kind, path, temp=False):
        self.kind, self.path, self.temp = kind, path, temp
        self.unsynced = None    # line of the first write not yet fsynced
        self.lease_fd = None    # fd holding a granted write lease
        self.refused = None     # line where a write lease was refused
        self.target = None      # symlinks: absolute target
        self.content = ""       # the first bytes written (a seal: clean or dirty?)


class Checker:
    def __init__(self, state_dir, model_path, quiet=False):
        self.state, self.model = os.path.normpath(state_dir), os.path.normpath(model_path)
        ext = os.path.splitext(self.model)[1]
        self.slotdir = self.state + "/slots"
        self.slots = {self.slotdir + "/a" + ext, self.slotdir + "/b" + ext}
        self.slot_dirs = {self.slotdir + "/a.dir", self.slotdir + "/b.dir"}
        self.paths, self.fds, self.pending, self.socks = {}, {}, {}, {}
        self.count = dict.fromkeys(RULES, 0)
        self.changes = self.calls = 0
        self.violations, self.notes, self.quiet = [], [], quiet
        self.provisioning = False
        self.said = set()

    # ---- the model ----
    def in_tree(self, p):
        return p is not None and (p == self.state or p.startswith(self.state + "/") or
                                  os.path.dirname(p) == os.path.dirname(self.model))

    def hidden(self, p):
        """A temporary name in the tree: a component below the tree's top starting with '.'."""
        if not self.in_tree(p):
            return False
        top = self.state if p == self.state or p.startswith(self.state + "/") else os.path.dirname(self.model)
        return any(c.startswith(".") for c in os.path.relpath(p, top).split("/"))

    def is_slot(self, p):
        """A slot file: slots/{a,b}<ext>, or a file under a directory slot."""
        return p in self.slots or os.path.dirname(p) in self.slot_dirs or \
            any(p.startswith(d + "/") for d in self.slot_dirs)

    def under(self, p):
        """The objects at p and below it (a file, or a directory's files)."""
        return [o for q, o in self.paths.items() if q == p or q.startswith(p + "/")]

    def unsynced_under(self, p):
        """The first object at or below p with a write not yet fsynced, or None."""
        return next((o for o in self.under(p) if o.unsynced), None)

    def lookup(self, p, kind="file"):
        o = self.paths.get(p)
        if o is None:
            o = self.paths[p] = Obj(kind, p)
        return o

    def fd(self, arg):
        """(fd, object or None, socket key or None) of an fd argument."""
        m = FD.match(arg or "")
        if not m or m.group(1) == "AT_FDCWD":
            return None, None, None
        fd, annot = int(m.group(1)), m.group(2)
        if annot and (annot.startswith("socket:") or annot.startswith("UNIX")):
            return fd, None, annot
        o = self.fds.get(fd)
        if annot and annot.startswith("/") and not m.group(3) and not annot.endswith(" (deleted)"):
            p = os.path.normpath(annot)
            if o is None or o.path != p:
                o = self.fds[fd] = self.lookup(p)
        return fd, o, None

    def path(self, dirarg, patharg):
        s = STR.match(patharg or "")
        if not s:
            return None
        p = unescape(s.group(1))
        if not p.startswith("/"):
            m = FD.match(dirarg or "")
            base = m.group(2) if m and m.group(2) else "/"
            p = os.path.join(base, p)
        return os.path.normpath(p)

    def active(self):
        link = self.paths.get(self.model)
        return self.lookup(link.target) if link and link.kind == "link" and link.target else None

    def is_active(self, o):
        """o is the active model, or a file under the active model directory."""
        act = self.active()
        return o is not None and act is not None and (o is act or (o.path is not None and act.path is not None and
                                                                      o.path.startswith(act.path + "/")))

    def report(self, rule, ln, text, path, why, once=None):
        """One line per violation; with @once, only the first of that key (a file's writes)."""
        self.violations.append(rule)
        if once is not None:
            if (rule, once) in self.said:
                return
            self.said.add((rule, once))
            why += " (its later writes not listed)"
        if not self.quiet:
            print(f"  {rule} VIOLATION line {ln}: {path}: {why}\n      {text[:220]}")

    def change(self, p, ln, text, temp=False):
        """A directory entry change: pending until its directory is fsynced."""
        if not self.in_tree(p) or temp or self.hidden(p):
            return
        self.changes += 1
        self.pending.setdefault(os.path.dirname(p), []).append([ln, text, p, set()])

    def unreported(self, rule, dirs):
        for d in dirs:
            for c in self.pending.get(d, []):
                if rule not in c[3]:
                    c[3].add(rule)
                    yield d, c

    # ---- events ----
    def write(self, o, ln, text, data=""):
        if o is None or not self.in_tree(o.path):
            return
        self.count["R3"] += 1
        self.count["R5"] += 1
        if self.is_active(o):
            self.report("R3", ln, text, o.path, "writes the active model (model_path points at it)", id(o))
        if o.refused:
            self.report("R5", ln, text, o.path, f"written although its write lease was refused at line {o.refused} "
                        "(another process has it open)", id(o))
        elif not o.temp and not (self.is_slot(o.path) and o.lease_fd is not None):
            self.report("R5", ln, text, o.path, "written in place: neither a temporary nor a slot under a write lease",
                        id(o))
        if o.unsynced is None:
            o.unsynced = ln
        if len(o.content) < 4096:
            o.content += data

    def synced(self, p, what, ln, text):
        """R4: the file at p, or every file under the directory p, has no unsynced write."""
        self.count["R4"] += 1
        o = self.unsynced_under(p) if p else None
        if o is not None:
            self.report("R4", ln, text, o.path, f"{what}, but its write at line {o.unsynced} was never fsynced")

    def move(self, old, new):
        """Re-key the objects at and below old to new (a rename; a directory's files with it)."""
        moved = {q: o for q, o in self.paths.items() if q == old or q.startswith(old + "/")}
        for q in moved:
            del self.paths[q]
        return {new + q[len(old):]: o for q, o in moved.items()}

    def place(self, moved):
        for q, o in moved.items():
            self.paths[q], o.path = o, q
            o.temp = o.temp and self.hidden(q) if o.kind == "file" else False

    def rename(self, old, new, ln, text, exchange=False):
        o, gone = self.lookup(old), self.paths.get(new)
        tree = self.in_tree(old) or self.in_tree(new)
        if tree and o.kind in ("file", "dir"):
            self.count["R1"] += 1
            bad = self.unsynced_under(old)
            if bad is not None:
                what = "renamed into place" if bad is o else f"its directory renamed into place as {new}"
                self.report("R1", ln, text, bad.path, f"{what} with its write at line {bad.unsynced} not fsynced")
        if tree and self.active() is not None and not self.provisioning:
            self.count["R3"] += 1
            # Replaced (at or under new), or moved away (under old; old itself only by an exchange).
            hit = [x for x in (self.under(new) if gone is not None else []) + self.under(old)
                   if self.is_active(x) and (exchange or x is not o)]
            if hit:
                self.report("R3", ln, text, new, f"replaces the active model by rename ({hit[0].path})")
        moved = self.move(old, new)
        back = self.move(new, old) if exchange and gone is not None else {}
        if gone is not None and not back:
            for x in self.move(new, new).values():
                x.path = None
        self.place(moved)
        self.place(back)
        o.temp = False
        if not tree:
            return
        self.count["R4"] += 1
        for d, c in self.unreported("R4", [d for d in self.pending if d not in (os.path.dirname(old), os.path.dirname(new))]):
            self.report("R4", ln, text, new, f"renamed while line {c[0]} ({c[2]}) is not yet durable: {d} was not fsynced")
        if new == self.model and o.kind == "link":
            self.synced(o.target, f"model_path now points at {o.target}", ln, text)
        if os.path.dirname(new) == self.slotdir and new.endswith(".seal") and not re.search(r'"dirty":\s*true', o.content):
            for p in self.slots | self.slot_dirs:
                if os.path.basename(p).split(".")[0] == os.path.basename(new)[:-5]:
                    self.synced(p, "a clean seal vouches for it", ln, text)
        self.change(new, ln, text)
        if os.path.dirname(old) != os.path.dirname(new):
            self.change(old, ln, text)

    def send(self, key, data, ln, text):
        q = self.socks.setdefault(key, [])
        for line in data.split("\n"):
            if not line.startswith("{"):        # not a protocol line (journald's socket)
                continue
            ev = re.match(r'^\{"event":"([\w-]+)"', line)
            if ev:
                what = ev.group(1)
                if what not in CHANGE_EVENTS:
                    continue
            else:
                cmd = q.pop(0) if q else None
                if cmd == "provision":
                    self.provisioning = False
                # A request not seen (traced late): a settled answer names committed/trial, status
                # answers carry model_path first.
                settled = cmd in CHANGING_CMDS if cmd else re.search(r'"state":"(committed|trial)"', line) and \
                    '"model_path"' not in line
                if line.startswith('{"ok":false') or '"state":' not in line or not settled:
                    continue
                what = f"the {cmd or 'settled'} reply"
            self.count["R2"] += 1
            for d, c in self.unreported("R2", list(self.pending)):
                self.report("R2", ln, text, d, f"{what} sent before the change at line {c[0]} ({c[2]}) was made "
                            "durable: no fsync of its directory")

    def recv(self, key, data):
        for cmd in re.findall(r'"cmd":\s*"([\w-]+)"', data):
            self.socks.setdefault(key, []).append(cmd)
            self.provisioning |= cmd == "provision"

    # ---- one syscall ----
    def step(self, ln, name, a, ret, rannot, err, text):
        self.calls += 1
        ok = ret is not None and ret >= 0
        if name in ("open", "openat", "creat", "openat2") and ok:
            at = 0 if name in ("open", "creat") else 1
            flags = "O_WRONLY|O_CREAT|O_TRUNC" if name == "creat" else (a[at + 1] if len(a) > at + 1 else "")
            p = os.path.normpath(rannot) if rannot and rannot.startswith("/") else self.path(a[0] if at else None, a[at])
            if p is None:
                return
            new = "O_EXCL" in flags and "O_CREAT" in flags
            o = self.paths[p] = Obj("file", p, temp=True) if new else self.lookup(p)
            if "O_DIRECTORY" in flags:
                o.kind = "dir"
            self.fds[ret] = o
            if ("O_WRONLY" in flags or "O_RDWR" in flags) and self.in_tree(p):
                self.count["R3"] += 1
                if self.is_active(o):
                    self.report("R3", ln, text, p, "the active model is opened for writing")
            if "O_TRUNC" in flags and not new:
                self.write(o, ln, text)
        elif name == "close" and a:
            fd, o, _ = self.fd(a[0])
            if o is not None and o.lease_fd == fd:
                o.lease_fd = None
            self.fds.pop(fd, None)
        elif name in ("dup", "dup2", "dup3") and ok or (name == "fcntl" and len(a) > 1 and "F_DUPFD" in a[1] and ok):
            self.fds[ret] = self.fd(a[0])[1]
        elif name == "fcntl" and len(a) > 2 and a[1] == "F_SETLEASE":
            fd, o, _ = self.fd(a[0])
            if o is not None and a[2] == "F_WRLCK":
                # A granted lease proves nobody else has the file open any more.
                o.lease_fd, o.refused = (fd, None) if ok else (None, ln if err == "EAGAIN" else o.refused)
            elif o is not None and a[2] == "F_UNLCK" and o.lease_fd == fd:
                o.lease_fd = None
        elif name in WRITES and ok and (ret > 0 or name in ("ftruncate", "fallocate")):
            fd, o, sock = self.fd(a[WRITES[name]])
            data = "".join(unescape(s) for s in STR.findall(",".join(a[1:2])))
            if sock:
                self.send(sock, data, ln, text)
            else:
                self.write(o, ln, text, data)
        elif name in ("sendto", "sendmsg") and ok:
            _, _, sock = self.fd(a[0])
            if sock:
                self.send(sock, "".join(unescape(s) for s in STR.findall(",".join(a[1:]))), ln, text)
        elif name in ("recvmsg", "recvfrom", "read") and ok and ret > 0:
            _, _, sock = self.fd(a[0])
            if sock:
                self.recv(sock, "".join(unescape(s) for s in STR.findall(",".join(a[1:]))))
        elif name == "ioctl" and ok and len(a) > 1 and "CLONE" in a[1]:
            self.write(self.fd(a[0])[1], ln, text)
        elif name == "truncate" and ok:
            self.write(self.lookup(self.path(None, a[0])), ln, text)
        elif name in ("fsync", "fdatasync") and ok:
            o = self.fd(a[0])[1]
            if o is not None:
                o.unsynced = None
                if o.kind == "dir" or o.path in self.pending:
                    self.pending.pop(o.path, None)
        elif name in ("sync", "syncfs") and ok:
            self.pending.clear()
            for o in self.paths.values():
                o.unsynced = None
        elif name == "mmap" and len(a) > 4 and "PROT_WRITE" in a[2] and "MAP_SHARED" in a[3]:
            o = self.fd(a[4])[1]
            if o is not None and self.in_tree(o.path):
                self.report("R5", ln, text, o.path, "a shared writable mapping: its writes bypass this check")
        elif name in ("rename", "renameat", "renameat2") and ok:
            old, new = (self.path(None, a[0]), self.path(None, a[1])) if name == "rename" else \
                (self.path(a[0], a[1]), self.path(a[2], a[3]))
            if old and new:
                self.rename(old, new, ln, text, len(a) > 4 and "RENAME_EXCHANGE" in a[4])
        elif name in ("unlink", "unlinkat", "rmdir") and ok:
            p = self.path(None, a[0]) if name != "unlinkat" else self.path(a[0], a[1])
            o = self.paths.pop(p, None)
            if p == self.model:
                self.report("R4", ln, text, p, "model_path unlinked: activation must be one rename")
            if self.in_tree(p) and self.is_active(o):
                self.count["R3"] += 1
                if not self.provisioning:
                    what = "the active model" if o is self.active() else "a file of the active model directory"
                    self.report("R3", ln, text, p, f"unlinks {what}")
            if o is not None:
                o.path = None
            self.change(p, ln, text, temp=o is not None and o.temp)
        elif name in ("symlink", "symlinkat") and ok:
            p = self.path(a[1] if name == "symlinkat" else None, a[-1])
            o = self.paths[p] = Obj("link", p, temp=self.hidden(p))
            s = STR.match(a[0])
            o.target = os.path.normpath(os.path.join(os.path.dirname(p), unescape(s.group(1)))) if s else None
            self.change(p, ln, text)
            if p == self.model:
                self.report("R4", ln, text, p, "symlink made at model_path: activation must be one rename")
        elif name in ("link", "linkat") and ok:
            p = self.path(None, a[1]) if name == "link" else self.path(a[2], a[3])
            src = self.path(None, a[0]) if name == "link" else self.path(a[0], a[1])
            if p and src:
                self.paths[p] = self.lookup(src)
                self.change(p, ln, text)
        elif name in ("mkdir", "mkdirat") and ok:
            p = self.path(None, a[0]) if name == "mkdir" else self.path(a[0], a[1])
            self.paths[p] = Obj("dir", p)
            if p == self.state:      # the state directory itself: its entry is in the parent
                self.pending.setdefault(os.path.dirname(p), []).append([ln, text, p, set()])
                self.changes += 1
            else:
                self.change(p, ln, text)
        elif name == "readlink" and ok and self.path(None, a[0]) == self.model:
            s = STR.match(a[1])
            if s:
                link = self.paths[self.model] = Obj("link", self.model)
                link.target = os.path.normpath(os.path.join(os.path.dirname(self.model), unescape(s.group(1))))

    def run(self, lines):
        for rec in records(lines):
            self.step(*rec)
        for d, cs in self.pending.items():
            for c in cs:
                if not c[3]:
                    self.notes.append(f"line {c[0]}: {c[2]}: never fsynced (nothing announced it)")
        return not self.violations


def header(lines):
    h = {}
    for line in lines[:20]:
        m = re.match(r"^#\s*([\w-]+)\s*[=:]\s*(.*?)\s*$", line)
        if m:
            h[m.group(1)] = m.group(2)
    return h


def check(path, state=None, model=None, quiet=False):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    h = header(lines)
    state, model = state or h.get("state_dir"), model or h.get("model_path")
    if not state or not model:
        sys.exit(f"{path}: no state_dir/model_path (options or '# key=value' header lines)")
    c = Checker(state, model, quiet)
    c.run(lines)
    return c, h


def self_test(d):
    bad = 0
    for name in sorted(os.listdir(d)):
        if not name.endswith(".strace"):
            continue
        c, h = check(os.path.join(d, name), quiet=True)
        want = set(h.get("expect", "none").split()) - {"none"}
        got = set(c.violations)
        if got == want:
            print(f"self-test {name}: ok ({'caught ' + ' '.join(sorted(got)) if got else 'accepted'})")
        else:
            bad += 1
            print(f"self-test {name}: FAIL: expected {sorted(want) or 'none'}, got {sorted(got) or 'none'}")
            check(os.path.join(d, name))
    n = len([x for x in os.listdir(d) if x.endswith(".strace")])
    print(f"order-self-test: {n - bad} passed, {bad} failed")
    return bad == 0


def main(argv):
    ap = argparse.ArgumentParser(description="Check taskpatchd's write ordering in strace -f -y traces.")
    ap.add_argument("--state-dir")
    ap.add_argument("--model-path")
    ap.add_argument("--self-test", metavar="DIR", help="check the checker on DIR/*.strace")
    ap.add_argument("traces", nargs="*", metavar="TRACE")
    o = ap.parse_args(argv)
    if o.self_test:
        return 0 if self_test(o.self_test) else 1
    if not o.traces:
        ap.error("no TRACE")
    failed = 0
    for t in o.traces:
        print(f"{os.path.basename(t)}:")
        c, _ = check(t, o.state_dir, o.model_path)
        for n in c.notes:
            print(f"  note {n}")
        counts = ", ".join(f"{r} {c.count[r]}" for r in RULES)
        print(f"  {c.calls} syscalls, {c.changes} directory changes; checked: {counts}; "
              f"{len(c.violations)} violation(s)")
        failed += bool(c.violations)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
