"""Reading `strace -f -y` output for order-check.py: one record per syscall, with the halves
-f splits ('<unfinished ...>' / '<... name resumed>') joined by pid, arguments split at their
top-level commas, C string escapes decoded. Nothing here knows taskpatchd."""
import re

LINE = re.compile(r"^(\d+)\s+(.*)$")
CALL = re.compile(r"^(\w+)\(")
RET = re.compile(r"^\s*=\s*(-?\d+|0x[0-9a-fA-F]+|\?)(?:<([^>]*)>)?\s*(E[A-Z0-9]+)?")
FD = re.compile(r"^(-?\d+|AT_FDCWD)(?:<(.*)>(\(deleted\))?)?$")     # strace 6 prints <path>(deleted)
STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


def unescape(s):
    def one(m):
        c = m.group(1)
        if c[0] in "01234567":
            return chr(int(c, 8))
        if c[0] == "x":
            return chr(int(c[1:], 16))
        return {"n": "\n", "t": "\t", "r": "\r", "v": "\v", "f": "\f"}.get(c, c)
    return re.sub(r"\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)", one, s)


def split_args(s):
    """Top-level arguments of a syscall; quotes, brackets and -y <annotations> kept whole."""
    out, depth, cur, i = [], 0, [], 0
    while i < len(s):
        c = s[i]
        if c == '"':
            m = STR.match(s, i)
            j = m.end() if m else len(s)
            cur.append(s[i:j])
            i = j
            continue
        if c == "<" and cur and (cur[-1][-1:].isdigit() or "".join(cur).endswith("AT_FDCWD")):
            j = s.find(">", i)
            while j > 0 and s[j - 1] == "-":   # "->" inside a -yy socket annotation
                j = s.find(">", j + 1)
            j = len(s) - 1 if j < 0 else j
            cur.append(s[i:j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def records(lines):
    """(lineno, name, args, ret, ret_annotation, errno, text) per syscall; joins -f's
    '<unfinished ...>' / '<... name resumed>' halves by pid."""
    held = {}
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        m = LINE.match(line)
        pid, rest = (m.group(1), m.group(2)) if m else ("", line)
        if not rest or rest[0] in "#+-":
            continue
        if rest.endswith("<unfinished ...>"):
            held[pid] = (n, rest[:-len("<unfinished ...>")].rstrip())
            continue
        r = re.match(r"^<\.\.\. \w+ resumed>\s?(.*)$", rest)
        if r:
            if pid not in held:
                continue
            n, head = held.pop(pid)
            rest = head + r.group(1)
        c = CALL.match(rest)
        if not c:
            continue
        depth, i, end = 0, c.end() - 1, None
        while i < len(rest):
            ch = rest[i]
            if ch == '"':
                s = STR.match(rest, i)
                i = s.end() if s else len(rest)
                continue
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                end = i
                break
            i += 1
        if end is None:
            continue
        rv = RET.match(rest[end + 1:])
        if not rv:
            continue
        ret = None if rv.group(1) == "?" else int(rv.group(1), 0)
        yield n, c.group(1), split_args(rest[c.end():end]), ret, rv.group(2), rv.group(3), rest
