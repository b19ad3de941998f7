#!/usr/bin/env python3
"""List the `use super::` / `crate::` edges between sibling modules and the import circles.

Usage: tools/module_cycles.py <crate src dir> [<parent module path, e.g. manager>] [--edges]

Nodes are the direct children of the parent module (the crate root by default); an edge
A -> B means a file inside A names B through `crate::...` or `super::...` (use statements,
brace groups expanded, and inline paths). Items of the parent module itself are not nodes.
A name the parent re-exports (`pub use child::Item`) counts as its child. Code after
`#[cfg(test)]` and files of test modules (`tests.rs`, `tests/`) are left out (tests may
import anything). Exit status 1 when there is a circle, so the script can guard a check.
"""
import os
import re
import sys


def module_path(src, file):
    rel = os.path.relpath(file, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def expand_use(tree):
    """Expand a use tree `a::{b, c::{d, e}}` into paths."""
    tree = tree.strip()
    if "{" not in tree:
        return [tree]
    i = tree.index("{")
    prefix = tree[:i]
    depth, parts, cur = 0, [], ""
    for ch in tree[i + 1 : tree.rindex("}")]:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            for e in expand_use(p):
                out.append(prefix + e.strip())
    return out


PATH = re.compile(r"\b((?:crate|super)(?:::(?:super|\w+))+)")
USE = re.compile(r"\buse\s+((?:crate|super)::[^;]*);", re.S)


def paths_in(text):
    text = re.sub(r"//[^\n]*", "", text)
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    found = []
    for m in USE.finditer(text):
        found += expand_use(re.sub(r"\s+", "", m.group(1)))
    text = USE.sub("", text)
    found += [m.group(1) for m in PATH.finditer(text)]
    return found


def resolve(mod, path):
    segs = path.split("::")
    if segs[0] == "crate":
        base, segs = [], segs[1:]
    else:
        base = list(mod)
        while segs and segs[0] == "super":
            base = base[:-1]
            segs = segs[1:]
    return base + [s for s in segs if s not in ("self", "*")]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show_edges = "--edges" in sys.argv
    src = args[0]
    parent = args[1].split("::") if len(args) > 1 else []
    pdir = os.path.join(src, *parent)
    children = set()
    for name in os.listdir(pdir):
        if name.endswith(".rs") and name not in ("mod.rs", "lib.rs", "main.rs"):
            children.add(name[:-3])
        elif os.path.isdir(os.path.join(pdir, name)):
            children.add(name)
    # Names the parent module re-exports from its children (`pub use child::{A, B}`).
    reexported = {}
    for name in ("mod.rs", "lib.rs", "main.rs"):
        pfile = os.path.join(pdir, name)
        if not parent and name == "mod.rs" or not os.path.exists(pfile):
            continue
        with open(pfile, encoding="utf-8") as fh:
            ptext = re.sub(r"//[^\n]*", "", fh.read())
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]*);", ptext, re.S):
            for path in expand_use(re.sub(r"\s+", "", m.group(1))):
                segs = [x for x in path.split("::") if x not in ("self", "crate")]
                if len(segs) >= 2 and segs[0] in children:
                    reexported[segs[-1].split(" as ")[-1]] = segs[0]
    edges = {c: set() for c in children}
    for root, _, files in os.walk(pdir):
        for f in files:
            if not f.endswith(".rs"):
                continue
            file = os.path.join(root, f)
            mod = module_path(src, file)
            if len(mod) <= len(parent) or mod[: len(parent)] != parent:
                continue
            me = mod[len(parent)]
            if "tests" in mod[len(parent):] or "test" in mod[len(parent):]:
                continue
            with open(file, encoding="utf-8") as fh:
                text = fh.read()
            for p in paths_in(text):
                target = resolve(mod, p)
                if len(target) > len(parent) and target[: len(parent)] == parent:
                    other = target[len(parent)]
                    other = reexported.get(other, other) if other not in children else other
                    if other in children and other != me:
                        edges[me].add(other)
    if show_edges:
        for a in sorted(edges):
            print(f"{a} -> {', '.join(sorted(edges[a])) or '-'}")
    # Tarjan's strongly connected components.
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    where = "::".join(parent) or "crate root"
    if not sccs:
        print(f"{src} ({where}): no import circles")
        return 0
    for comp in sccs:
        print(f"{src} ({where}): circle among {', '.join(comp)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
