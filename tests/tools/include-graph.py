"""The quoted-include graph of kernels/, common/ and daemon/, for tests/lint.sh.

    python3 tests/tools/include-graph.py layers   common/<layer>/ includes only kernels/ and its own
                                                   or earlier layers (COMMON_LAYERS); every included name
                                                   resolves to exactly one header
    python3 tests/tools/include-graph.py cycles   no include cycle among daemon/'s modules (X.c + X.h)
    python3 tests/tools/include-graph.py graph    the edges: common/ folders, daemon/ files

Headers are included by name (#include "gguf.h"; the Makefile puts kernels/, every layer,
cli/ and daemon/ on the include path), so a name is resolved by looking it up in those
folders. A check prints one line per offence and exits 1; nothing and 0 when clean. Reads
the working tree: the tracked files and the new ones git does not ignore.
"""

import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layers():
    """The order of common/'s layers, the Makefile's COMMON_LAYERS (common/README.md): each may
    include kernels/, itself and the layers before it."""
    with open("Makefile", encoding="utf-8") as f:
        for line in f:
            m = re.match(r"COMMON_LAYERS\s*:?=(.*)", line)
            if m:
                return m.group(1).split()
    sys.exit("include-graph.py: no COMMON_LAYERS in the Makefile")


LAYERS = layers()


def source_files():
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--",
                              "kernels", "common", "daemon", "cli"],
                             check=True, capture_output=True, text=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = [os.path.join(d, f) for top in ("kernels", "common", "daemon", "cli")
               for d, _, fs in os.walk(top) for f in fs]
    return sorted({p for p in out if p.endswith((".c", ".h")) and os.path.isfile(p)})


def includes(path):
    """[(line number, included name)] of @path's quoted includes."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return [(n, m.group(1)) for n, line in enumerate(f, 1) for m in [INCLUDE.match(line)] if m]


def folder(path):
    """The folder a file belongs to: "kernels", "common/<layer>", "daemon", "cli"."""
    parts = path.split("/")
    return "/".join(parts[:2]) if parts[0] == "common" and len(parts) > 2 else parts[0]


class Tree:
    def __init__(self):
        self.files = source_files()
        self.headers = {}  # name -> [paths]
        for p in self.files:
            if p.endswith(".h"):
                self.headers.setdefault(os.path.basename(p), []).append(p)

    def resolve(self, src, name):
        """The file @src's #include "@name" reaches: its own folder first, as the compiler looks."""
        beside = os.path.normpath(os.path.join(os.path.dirname(src), name))
        if beside in self.files:
            return beside
        found = self.headers.get(name, [])
        return found[0] if len(found) == 1 else None


def check_layers(t):
    bad = []
    rank = {"common/" + layer: i for i, layer in enumerate(LAYERS)}
    for name, paths in sorted(t.headers.items()):
        lib = [p for p in paths if folder(p) in rank or folder(p) == "kernels"]
        if len(paths) > 1 and lib:
            bad.append(f"{name}: one name, several headers ({', '.join(paths)}): includes by name are ambiguous")
    for p in t.files:
        if not p.startswith("common/"):
            continue
        own = folder(p)
        if own not in rank:
            bad.append(f"{p}: not in a layer ({', '.join('common/' + layer for layer in LAYERS)})")
            continue
        for n, name in includes(p):
            dep = t.resolve(p, name)
            if not dep and len(t.headers.get(name, [])) > 1:
                continue  # reported above, once
            where = folder(dep) if dep else None
            if where == "kernels" or (where in rank and rank[where] <= rank[own]):
                continue
            why = (f"{where} is not below {own}" if where in rank else
                   f"{dep} is outside kernels/ and common/" if dep else "no such header in the tree")
            bad.append(f'{p}:{n}: #include "{name}": {why}')
    return bad


def daemon_graph(t):
    """{daemon file: [daemon files it includes]}."""
    return {p: sorted({d for _, name in includes(p) for d in [t.resolve(p, name)]
                       if d and folder(d) == "daemon"})
            for p in t.files if folder(p) == "daemon"}


def module(p):
    """A daemon file's module: taskpatchd-notify.c and taskpatchd-notify.h are one."""
    return os.path.splitext(p)[0]


def module_graph(t):
    """{daemon module: [daemon modules its files include]}: X.c including Y.h while Y.c includes
    X.h is a circle between the two modules, though no file includes itself."""
    graph = {}
    for p, deps in daemon_graph(t).items():
        graph.setdefault(module(p), set()).update(module(d) for d in deps if module(d) != module(p))
    return {m: sorted(d) for m, d in graph.items()}


def check_cycles(t):
    graph = module_graph(t)
    bad, state, stack = [], {}, []  # state: 1 on the stack, 2 done

    def visit(p):
        state[p] = 1
        stack.append(p)
        for d in graph.get(p, []):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                bad.append("include cycle: " + " -> ".join(cycle))
            elif d not in state:
                visit(d)
        stack.pop()
        state[p] = 2

    for p in sorted(graph):
        if p not in state:
            visit(p)
    return bad


def print_graph(t):
    edges = {}
    for p in t.files:
        src = folder(p)
        if src not in ("kernels", "daemon", "cli") and not src.startswith("common/"):
            continue
        for _, name in includes(p):
            dep = t.resolve(p, name)
            if dep and folder(dep) != src:
                edges.setdefault(src, set()).add(folder(dep))
    order = ["kernels"] + ["common/" + layer for layer in LAYERS] + ["daemon", "cli"]
    print("folders (quoted includes; -> what a folder includes from outside itself):")
    for src in order:
        deps = sorted(edges.get(src, ()), key=lambda d: order.index(d) if d in order else len(order))
        print(f"  {src} -> {', '.join(deps) if deps else '(nothing)'}")
    print("daemon/ files (-> the daemon/ headers each includes):")
    for p, deps in sorted(daemon_graph(t).items()):
        print(f"  {os.path.basename(p)} -> {', '.join(os.path.basename(d) for d in deps) or '(nothing)'}")


def main():
    what = sys.argv[1] if len(sys.argv) == 2 else ""
    t = Tree()
    if what == "graph":
        print_graph(t)
        return 0
    checks = {"layers": check_layers, "cycles": check_cycles}
    if what not in checks:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bad = checks[what](t)
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
