#!/usr/bin/env python3
"""Finds modules of a crate that import each other in a circle: a stand-in for
`cargo modules dependencies --acyclic` that reads the source instead of compiling it, and
works per module (a file), not per item:

    python3 scripts/check-module-cycles.py [--crate NAME] [--edges]

Exit status 1 when any crate has a circle, 0 when none has, 2 on a bad argument.

What is checked, and why:

- Crates: every `[workspace] members` entry of Cargo.toml (globs such as `stores/*` expanded)
  that has a `src/`; each target root there (`lib.rs`, `main.rs`, `bin/*.rs`) is a crate of its
  own, because modules of different targets cannot import each other. Only `src/` is read:
  `tests/`, `benches/` and `examples/` are other crates, and their shape is not production's.
- Modules: one per file, found by following `mod x;` declarations from the root (a file no
  `mod` names is not compiled). The root is `crate`; `a.rs` or `a/mod.rs` is `a`, `a/b.rs` is
  `a::b`. An inline `mod x { .. }` is folded into its file's module (it is part of that file's
  code), though paths inside it still resolve from where it sits.
- Not read: anything under a `#[cfg(test)]` (inline unit tests are not production code, and
  `use super::*` in them would make every tested module look circular), comments and doc
  comments (intra-doc links are not imports), string and char literals.
- Edges: module M depends on N when M's code names a path that resolves into N: a `use` (each
  leaf of a grouped `use a::{b::C, d}` on its own) or a path written in code (`crate::a::f()`,
  `super::x::Y`, `child::Z`, or `name::Z` where `name` is something M imported). `crate::`,
  `self::`, `super::` and names of M's children and imports are followed; any other first
  segment is another crate, and circles are per crate.
- Resolving: a path walks down the modules it names; when the next segment is a name the
  module imports (`pub use child::Name`, `pub(crate) use ..`, or a private `use` a descendant
  reaches through `super::`), the walk follows that import to the module that defines the
  item, and again from there. So using an item through a parent's re-export depends on the
  module that defines it, not on the parent, which only passes it on. A walk that ends in an
  import from another crate is no edge. A `#[macro_export]` macro is named at the root
  (`$crate::m!`) but belongs to the module that writes it.
- Not edges: a `pub use` line (it re-exports; the modules using the name are the ones that
  depend on its definition), a `mod child;` declaration (owning is not using), an edge from a
  module to itself, and a module's use of its own descendants (`batch::place()` in the parent
  of `batch`): a parent composes the children it declares, and they see its private items by
  design, so a parent and its child naming each other is how Rust splits one module into
  files, not a knot between two. Circles among siblings, cousins or a child and an uncle
  count, as does a descendant reaching up into a sibling of its ancestor. A glob `use super::*` is an edge to that module: what it brings in is not
  resolved item by item.
- Output: each strongly connected component of two or more modules (Tarjan) is one circle,
  printed as one shortest cycle through it, each edge with the file and line that makes it;
  `--edges` also lists every edge inside the component. Then `N import circles in M crates`,
  M counting the crates that have one.
"""

import argparse
import collections
import glob
import os
import sys
import tomllib

# Item keywords whose next identifier names an item of the enclosing module; only needed to
# tell, behind a glob re-export, whether a module defines a name.
ITEM_KEYWORDS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union"}
# Keywords that can start an item, so that a `#[cfg(test)]` on one skips through its body.
ITEM_STARTS = ITEM_KEYWORDS | {"mod", "impl", "use", "extern", "unsafe", "async", "macro_rules",
                               "let", "pub", "default"}
OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {")", "]", "}"}


# ---------------------------------------------------------------------------------------------
# Tokens


class Tok:
    __slots__ = ("kind", "text", "line")

    def __init__(self, kind, text, line):
        self.kind = kind  # "id", "punct", "lit"
        self.text = text
        self.line = line

    def __repr__(self):
        return f"{self.kind}:{self.text}@{self.line}"


def _is_ident_start(c):
    return c.isalpha() or c == "_"


def _is_ident_char(c):
    return c.isalnum() or c == "_"


def tokenize(src):
    """Identifiers, `::` and single-character punctuation, with line numbers. Comments vanish;
    string, char and number literals become one "lit" token each, so that neither their text
    nor a brace inside them (`'{'`, `"}"`) is read as code."""
    toks = []
    i, n, line = 0, len(src), 1

    def skip_string(j):
        # j is just after the opening quote of a normal (escaped) string.
        nonlocal line
        while j < n:
            c = src[j]
            if c == "\\":
                if j + 1 < n and src[j + 1] == "\n":
                    line += 1
                j += 2
                continue
            if c == "\n":
                line += 1
            elif c == '"':
                return j + 1
            j += 1
        return j

    def skip_raw_string(j):
        # j is at the `#`s or the `"` after an `r`.
        nonlocal line
        hashes = 0
        while j < n and src[j] == "#":
            hashes += 1
            j += 1
        j += 1  # the opening quote
        close = '"' + "#" * hashes
        end = src.find(close, j)
        end = n if end < 0 else end
        line += src.count("\n", j, end)
        return min(n, end + len(close))

    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            end = src.find("\n", i)
            i = n if end < 0 else end
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    if src[j] == "\n":
                        line += 1
                    j += 1
            i = j
        elif c == '"':
            start = line
            i = skip_string(i + 1)
            toks.append(Tok("lit", '""', start))
        elif c == "'":
            # A char literal ('a', '\n', '{') or a lifetime ('a, 'static).
            if i + 1 < n and src[i + 1] == "\\":
                j = i + 2
                while j < n and src[j] != "'":
                    j += 1
                toks.append(Tok("lit", "''", line))
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                toks.append(Tok("lit", "''", line))
                i += 3
            else:
                j = i + 1
                while j < n and _is_ident_char(src[j]):
                    j += 1
                toks.append(Tok("punct", "'", line))
                i = j
        elif _is_ident_start(c):
            j = i
            while j < n and _is_ident_char(src[j]):
                j += 1
            word = src[i:j]
            nxt = src[j] if j < n else ""
            if word in ("r", "br", "cr") and (nxt == '"' or (nxt == "#" and j + 1 < n and src[j + 1] in '"#')):
                start = line
                i = skip_raw_string(j)
                toks.append(Tok("lit", '""', start))
            elif word == "r" and nxt == "#" and j + 1 < n and _is_ident_start(src[j + 1]):
                k = j + 1
                while k < n and _is_ident_char(src[k]):
                    k += 1
                toks.append(Tok("id", src[j + 1:k], line))
                i = k
            elif word in ("b", "c") and nxt == '"':
                start = line
                i = skip_string(j + 1)
                toks.append(Tok("lit", '""', start))
            elif word == "b" and nxt == "'":
                k = j + 1
                if k + 1 < n and src[k + 1] == "\\":
                    k += 2
                    while k < n and src[k] != "'":
                        k += 1
                    i = k + 1
                else:
                    i = k + 3
                toks.append(Tok("lit", "''", line))
            else:
                toks.append(Tok("id", word, line))
                i = j
        elif c.isdigit():
            j = i
            while j < n and (_is_ident_char(src[j]) or (src[j] == "." and j + 1 < n and src[j + 1].isdigit())):
                j += 1
            toks.append(Tok("lit", src[i:j], line))
            i = j
        elif src.startswith("::", i):
            toks.append(Tok("punct", "::", line))
            i += 2
        else:
            toks.append(Tok("punct", c, line))
            i += 1
    return toks


# ---------------------------------------------------------------------------------------------
# One file: its scopes (the file's module and any inline modules in it)


class Scope:
    """What one module (file or inline) declares: the names it binds by `use`, the items it
    defines, the paths its code names, and its `mod x;` declarations."""

    def __init__(self, path, file_module):
        self.path = path  # logical module path, a tuple
        self.file_module = file_module  # the file module it is folded into
        self.bindings = {}  # name -> (scope path, segments)
        self.globs = []  # (scope path, segments, public)
        self.items = set()
        self.uses = []  # (segments, line, public, glob)
        self.paths = []  # (segments, line)
        self.decls = []  # (name, path attribute or None)
        # `#[macro_export]` puts a macro at the crate root, wherever it is written.
        self.exported_macros = set()


def _balanced_end(toks, i):
    """Index just past the bracket group opening at toks[i]."""
    depth = 0
    while i < len(toks):
        t = toks[i].text
        if t in OPENERS and toks[i].kind == "punct":
            depth += 1
        elif t in CLOSERS and toks[i].kind == "punct":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def _cfg_needs_test(toks, i, end):
    """Whether the cfg predicate in toks[i:end] holds only under `test`, e.g. `test` or
    `all(test, feature = "x")`. `not(..)`, `any(..)` with another way out, and everything
    else are production code."""
    if i >= end:
        return False
    head = toks[i].text
    if head == "test" and (i + 1 >= end or toks[i + 1].text in (",", ")")):
        return True
    if head in ("all", "any") and i + 1 < end and toks[i + 1].text == "(":
        close = _balanced_end(toks, i + 1) - 1
        args, j, start, depth = [], i + 2, i + 2, 0
        while j < close:
            t = toks[j].text
            if t in OPENERS:
                depth += 1
            elif t in CLOSERS:
                depth -= 1
            elif t == "," and depth == 0:
                args.append((start, j))
                start = j + 1
            j += 1
        if start < close:
            args.append((start, close))
        needs = [_cfg_needs_test(toks, a, b) for a, b in args]
        return any(needs) if head == "all" else bool(needs) and all(needs)
    return False


def _attribute(toks, i):
    """At `#`: (end index, is_inner, test_only, path_attr) of the attribute, or None."""
    j = i + 1
    inner = j < len(toks) and toks[j].text == "!"
    if inner:
        j += 1
    if j >= len(toks) or toks[j].text != "[":
        return None
    end = _balanced_end(toks, j)
    body = j + 1
    test_only = False
    path_attr = None
    if body < end and toks[body].text == "cfg" and body + 1 < end and toks[body + 1].text == "(":
        test_only = _cfg_needs_test(toks, body + 2, end - 2)
    if body + 2 < end and toks[body].text == "path" and toks[body + 1].text == "=":
        path_attr = toks[body + 2]
    return end, inner, test_only, path_attr


def _opening_of(toks, j):
    """The index of the bracket that opens the one closing at toks[j], or -1."""
    close = toks[j].text
    opener = {")": "(", "]": "[", "}": "{"}[close]
    depth = 0
    while j >= 0:
        if toks[j].text == close:
            depth += 1
        elif toks[j].text == opener:
            depth -= 1
            if depth == 0:
                return j
        j -= 1
    return -1


def _attributes_before(toks, i):
    """First words of the outer attributes right before toks[i], e.g. {"macro_export"}."""
    words = set()
    j = i - 1
    while j >= 0 and toks[j].text == "]":
        j = _opening_of(toks, j)
        if j < 1 or toks[j - 1].text != "#":
            break
        if j + 1 < i:
            words.add(toks[j + 1].text)
        j -= 2
    return words


def _skip_item(toks, i):
    """Index past the item (or field, arm, statement) starting at toks[i], attributes
    included: an item ends at its `;` or its closing `}`; anything else at a `,`, a `;`, or the
    bracket that closes its container."""
    n = len(toks)
    while i < n and toks[i].text == "#":
        attr = _attribute(toks, i)
        if attr is None:
            break
        i = attr[0]
    is_item = i < n and toks[i].kind == "id" and toks[i].text in ITEM_STARTS | ITEM_KEYWORDS
    depth = 0
    while i < n:
        t = toks[i]
        if t.kind == "punct":
            if t.text in OPENERS:
                depth += 1
            elif t.text in CLOSERS:
                if depth == 0:
                    return i
                depth -= 1
                if depth == 0 and t.text == "}" and is_item:
                    return i + 1
            elif depth == 0 and (t.text == ";" or (t.text == "," and not is_item)):
                return i + 1
        i += 1
    return i


def _parse_use(toks, i):
    """Parses the use tree after `use` at toks[i]; returns (leaves, index past the `;`).
    A leaf is (segments, binding name or None, glob, line of its last segment)."""
    leaves = []

    def tree(j, prefix):
        if j < len(toks) and toks[j].text == "::":
            prefix = prefix + ["::"]
            j += 1
        if j >= len(toks):
            return j
        t = toks[j]
        if t.text == "{":
            j += 1
            while j < len(toks) and toks[j].text != "}":
                # Something this parser does not know (an attribute in a group) is stepped
                # over rather than looped on.
                j = max(tree(j, prefix), j + 1)
                if j < len(toks) and toks[j].text == ",":
                    j += 1
            return j + 1
        if t.text == "*":
            leaves.append((prefix, None, True, t.line))
            return j + 1
        segs, line = list(prefix), t.line
        while j < len(toks) and toks[j].kind == "id":
            segs.append(toks[j].text)
            line = toks[j].line
            j += 1
            if j < len(toks) and toks[j].text == "::":
                if j + 1 < len(toks) and toks[j + 1].kind == "id":
                    j += 1
                    continue
                return tree(j + 1, segs)
            break
        name = segs[-1] if segs else None
        if name == "self" and len(segs) > 1:
            segs = segs[:-1]
            name = segs[-1]
        if j + 1 < len(toks) and toks[j].text == "as":
            name = toks[j + 1].text
            j += 2
        if name == "_":
            name = None
        leaves.append((segs, name, False, line))
        return j

    j = tree(i, [])
    while j < len(toks) and toks[j].text != ";":
        j += 1
    return leaves, j + 1


def _visibility_before(toks, i):
    """Whether the item whose keyword is at toks[i] is `pub`/`pub(..)` (not `pub(self)`)."""
    j = i - 1
    if j >= 0 and toks[j].text == ")":
        j = _opening_of(toks, j)
        inside = [t.text for t in toks[j + 1:i - 1]]
        return j >= 1 and toks[j - 1].text == "pub" and inside != ["self"]
    return j >= 0 and toks[j].text == "pub"


def parse_file(src, module):
    """Scopes of one file whose module path is `module`. None when the whole file is
    `#![cfg(test)]`."""
    toks = tokenize(src)
    scopes = {module: Scope(module, module)}
    stack = [(module, 0)]  # (scope path, bracket depth of its body)
    depth = 0
    i, n = 0, len(toks)
    pending_path = None
    while i < n:
        t = toks[i]
        scope = scopes[stack[-1][0]]
        at_top = depth == stack[-1][1]
        if t.kind == "punct":
            if t.text == "#":
                attr = _attribute(toks, i)
                if attr is not None:
                    end, inner, test_only, path_attr = attr
                    if test_only:
                        if inner:
                            if len(stack) == 1 and depth == 0:
                                return None
                            # The rest of this inline module is test-only.
                            close = i
                            d = 0
                            while close < n:
                                if toks[close].text in OPENERS:
                                    d += 1
                                elif toks[close].text in CLOSERS:
                                    if d == 0:
                                        break
                                    d -= 1
                                close += 1
                            i = close
                            continue
                        i = _skip_item(toks, end)
                        continue
                    if path_attr is not None:
                        pending_path = path_attr
                    # Attribute contents are code (`#[utoipa::path(body = crate::x::Y)]`).
                    i += 1
                    continue
            elif t.text in OPENERS:
                depth += 1
            elif t.text in CLOSERS:
                depth -= 1
                if t.text == "}" and len(stack) > 1 and depth == stack[-1][1] - 1:
                    stack.pop()
            elif t.text == "$" and i + 2 < n and toks[i + 1].text == "crate" and toks[i + 2].text == "::":
                # `$crate::..` in a macro is this crate's root.
                i = _code_path(toks, i + 1, scope)
                continue
            i += 1
            continue
        if t.kind != "id":
            i += 1
            continue
        word = t.text
        nxt = toks[i + 1].text if i + 1 < n else ""
        if word == "pub" and nxt == "(":
            # `pub(in crate::a)` names a module to limit visibility, not a dependency.
            i = _balanced_end(toks, i + 1)
            continue
        if word == "use" and nxt != "<":
            public = _visibility_before(toks, i)
            leaves, i = _parse_use(toks, i + 1)
            for segs, name, is_glob, line in leaves:
                if not segs:
                    continue
                scope.uses.append((segs, line, public, is_glob))
                if is_glob:
                    scope.globs.append((scope.path, segs, public))
                elif name is not None:
                    scope.bindings[name] = (scope.path, segs)
            pending_path = None
            continue
        if word == "extern" and nxt == "crate" and i + 2 < n:
            # `extern crate foo as bar;` binds another crate.
            j = i + 3
            name = toks[i + 2].text
            if j + 1 < n and toks[j].text == "as":
                name = toks[j + 1].text
            scope.bindings[name] = (scope.path, ["::", toks[i + 2].text])
            i = j
            continue
        if word == "mod" and i + 2 < n and toks[i + 1].kind == "id":
            name = toks[i + 1].text
            after = toks[i + 2].text
            if at_top:
                scope.items.add(name)
            if after == ";":
                scope.decls.append((name, pending_path))
                pending_path = None
                i += 3
                continue
            if after == "{":
                child = scope.path + (name,)
                scopes[child] = Scope(child, module)
                depth += 1
                stack.append((child, depth))
                pending_path = None
                i += 3
                continue
        if word in ITEM_KEYWORDS and at_top and i + 1 < n and toks[i + 1].kind == "id" \
                and toks[i + 1].text not in ITEM_KEYWORDS | {"mut", "unsafe", "extern", "async"}:
            scope.items.add(toks[i + 1].text)
        if word == "macro_rules" and nxt == "!" and i + 2 < n:
            if at_top:
                scope.items.add(toks[i + 2].text)
            if "macro_export" in _attributes_before(toks, i):
                scope.exported_macros.add(toks[i + 2].text)
        if nxt == "::" and (i == 0 or toks[i - 1].text != "::") and word != "Self":
            i = _code_path(toks, i, scope)
            continue
        i += 1
    return scopes


def _code_path(toks, i, scope):
    """Records the path starting at toks[i] (an identifier followed by `::`)."""
    segs, line = [toks[i].text], toks[i].line
    j = i + 1
    while j + 1 < len(toks) and toks[j].text == "::" and toks[j + 1].kind == "id":
        segs.append(toks[j + 1].text)
        line = toks[j + 1].line
        j += 2
    scope.paths.append((segs, line))
    return j


# ---------------------------------------------------------------------------------------------
# A crate: its modules, and where the paths they name lead


class Crate:
    def __init__(self, name, root_file, crate_dir):
        self.name = name
        self.crate_dir = crate_dir
        self.root_file = root_file
        self.scopes = {}  # logical path -> Scope, file and inline modules alike
        self.files = {}  # file module path -> file path
        self.edges = collections.defaultdict(list)  # (from, to) -> [(file, line, text)]
        self._load(root_file, ())
        root = self.scopes.get(())
        for scope in list(self.scopes.values()):
            for name in scope.exported_macros:
                if root is not None and scope.path != ():
                    root.bindings.setdefault(name, ((), ["crate", *scope.path, name]))
        self._link()

    # Loading ------------------------------------------------------------------------------

    def _load(self, path, module):
        if module in self.files:
            return
        try:
            with open(path, encoding="utf-8") as f:
                src = f.read()
        except OSError:
            return
        scopes = parse_file(src, module)
        if scopes is None:
            return
        self.files[module] = path
        self.scopes.update(scopes)
        is_dir_owner = module == () or os.path.basename(path) == "mod.rs"
        base = os.path.dirname(path) if is_dir_owner else path[:-len(".rs")]
        for scope in scopes.values():
            inline = scope.path[len(module):]
            for name, path_attr in scope.decls:
                if path_attr is not None:
                    # Strings are blanked by the tokenizer; read it from the line itself.
                    child = self._path_attribute(src, path_attr.line, os.path.dirname(path))
                    if child:
                        self._load(child, scope.path + (name,))
                    continue
                d = os.path.join(base, *inline)
                for cand in (os.path.join(d, name + ".rs"), os.path.join(d, name, "mod.rs")):
                    if os.path.isfile(cand):
                        self._load(cand, scope.path + (name,))
                        break

    @staticmethod
    def _path_attribute(src, line, directory):
        text = src.splitlines()[line - 1]
        start = text.find('"')
        end = text.find('"', start + 1)
        if start < 0 or end < 0:
            return None
        return os.path.normpath(os.path.join(directory, text[start + 1:end]))

    # Resolving ----------------------------------------------------------------------------

    def _start(self, scope_path, segs):
        """(base module, remaining segments) of a path written in `scope_path`, or None when
        it leaves the crate: its first segment is `crate`/`self`/`super`, or a name the scope
        has (a child module, an import, an item); anything else is another crate, a primitive
        or a generic parameter."""
        if not segs or segs[0] == "::":
            return None
        base, rest = scope_path, list(segs)
        if rest[0] in ("crate", "$crate"):
            base, rest = (), rest[1:]
        elif rest[0] not in ("self", "super") and not self._has_name(scope_path, rest[0], set()):
            return None
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                if not base:
                    return None
                base = base[:-1]
            rest = rest[1:]
        return base, rest

    def _has_name(self, scope_path, name, seen):
        scope = self.scopes.get(scope_path)
        if scope is None:
            return False
        if scope_path + (name,) in self.scopes or name in scope.bindings or name in scope.items:
            return True
        for where, target, _public in scope.globs:
            if (where, tuple(target)) in seen:
                continue
            seen.add((where, tuple(target)))
            start = self._start(where, target)
            if start is not None:
                source = self._walk(start[0], start[1], set())
                if source is not None and self._has_name(source, name, seen):
                    return True
        return False

    def resolve(self, scope_path, segs):
        """The logical module a path written in `scope_path` ends in, after following imports
        to where the named item is defined; None when it leads out of the crate."""
        start = self._start(scope_path, segs)
        if start is None:
            return None
        return self._walk(start[0], start[1], set())

    def _walk(self, cur, rest, seen):
        for k, seg in enumerate(rest):
            scope = self.scopes.get(cur)
            if scope is None:
                return cur
            if cur + (seg,) in self.scopes:
                cur = cur + (seg,)
                continue
            if seg in scope.bindings and (cur, seg) not in seen:
                seen.add((cur, seg))
                where, target = scope.bindings[seg]
                start = self._start(where, target)
                if start is None:
                    return None
                return self._walk(start[0], start[1] + list(rest[k + 1:]), seen)
            if seg in scope.items:
                return cur
            for where, target, _public in scope.globs:
                key = (cur, "*", tuple(target))
                start = self._start(where, target)
                if start is None or key in seen:
                    continue
                seen.add(key)
                source = self._walk(start[0], start[1], seen)
                if source is not None and self._has_name(source, seg, set()):
                    return self._walk(source, list(rest[k:]), seen)
            return cur
        return cur

    def _link(self):
        for scope in self.scopes.values():
            src_file = os.path.relpath(self.files[scope.file_module], self.crate_dir)
            for segs, line, public, is_glob in scope.uses:
                if public:
                    continue
                self._edge(scope, segs, line, "use " + "::".join(segs) + ("::*" if is_glob else ""), src_file)
            for segs, line in scope.paths:
                self._edge(scope, segs, line, "::".join(segs), src_file)

    def _edge(self, scope, segs, line, text, src_file):
        target = self.resolve(scope.path, segs)
        if target is None or target not in self.scopes:
            return
        a, b = scope.file_module, self.scopes[target].file_module
        # A module reaching into its own descendants composes them (see the header).
        if a != b and b[: len(a)] != a:
            self.edges[(a, b)].append((src_file, line, text))

    # Circles --------------------------------------------------------------------------------

    def graph(self):
        g = collections.defaultdict(set)
        for a, b in self.edges:
            g[a].add(b)
        return g

    def circles(self):
        """Components of two or more modules, each as (shortest cycle, sorted members)."""
        g = self.graph()
        out = []
        for comp in tarjan(sorted(self.files), g):
            if len(comp) < 2:
                continue
            members = set(comp)
            out.append((shortest_cycle(members, g), sorted(members)))
        out.sort(key=lambda c: c[1])
        return out

    def site(self, a, b):
        sites = sorted(self.edges[(a, b)], key=lambda s: s[1])
        file, line, text = sites[0]
        more = f" +{len(sites) - 1} more" if len(sites) > 1 else ""
        return f"{file}:{line} {text}{more}"


def name_of(module):
    return "::".join(module) if module else "crate"


def tarjan(nodes, g):
    """Strongly connected components, iteratively (deep module trees must not hit Python's
    recursion limit)."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(g.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(comp)
    return comps


def shortest_cycle(members, g):
    """One shortest cycle inside a component (BFS from each member; ties go to the member
    first in name order), as a list of modules with the start repeated at the end."""
    best = None
    for start in sorted(members):
        prev = {start: None}
        queue = collections.deque([start])
        found = None
        while queue and found is None:
            v = queue.popleft()
            for w in sorted(g.get(v, ())):
                if w not in members:
                    continue
                if w == start:
                    found = v
                    break
                if w not in prev:
                    prev[w] = v
                    queue.append(w)
        if found is None:
            continue
        path = [start]
        v = found
        while v != start:
            path.append(v)
            v = prev[v]
        path = [start] + list(reversed(path[1:])) + [start]
        if best is None or len(path) < len(best):
            best = path
    return best


# ---------------------------------------------------------------------------------------------
# The workspace


def workspace_crates(root):
    """(package directory, crate name, root file) of every target of every member with a
    `src/`."""
    with open(os.path.join(root, "Cargo.toml"), "rb") as f:
        manifest = tomllib.load(f)
    ws = manifest.get("workspace", {})
    excluded = {os.path.normpath(os.path.join(root, e)) for e in ws.get("exclude", [])}
    dirs = []
    if "package" in manifest:
        dirs.append(root)
    for pattern in ws.get("members", []):
        for d in sorted(glob.glob(os.path.join(root, pattern))):
            d = os.path.normpath(d)
            if d not in excluded and d not in dirs and os.path.isfile(os.path.join(d, "Cargo.toml")):
                dirs.append(d)
    out = []
    for d in dirs:
        src = os.path.join(d, "src")
        if not os.path.isdir(src):
            continue
        with open(os.path.join(d, "Cargo.toml"), "rb") as f:
            package = tomllib.load(f).get("package", {}).get("name", os.path.basename(d))
        ident = package.replace("-", "_")
        lib = os.path.join(src, "lib.rs")
        main = os.path.join(src, "main.rs")
        if os.path.isfile(lib):
            out.append((d, package, ident, lib))
        if os.path.isfile(main):
            out.append((d, package, ident if not os.path.isfile(lib) else f"{ident}[bin]", main))
        for b in sorted(glob.glob(os.path.join(src, "bin", "*.rs")) + glob.glob(os.path.join(src, "bin", "*", "main.rs"))):
            bin_name = os.path.splitext(os.path.basename(b))[0] if not b.endswith("/main.rs") \
                else os.path.basename(os.path.dirname(b))
            out.append((d, package, f"{ident}[bin {bin_name}]", b))
    return out


def main(argv=None, root=None, out=sys.stdout):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crate", action="append",
                        help="check only this package (name with - or _); may be repeated")
    parser.add_argument("--edges", action="store_true",
                        help="also list every edge inside each circle's component")
    args = parser.parse_args(argv)
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    targets = workspace_crates(root)
    if args.crate:
        chosen = []
        for name in args.crate:
            want = name.replace("-", "_")
            found = [t for t in targets if t[2] == want or t[1].replace("-", "_") == want]
            if not found:
                print(f"no workspace crate named {name}", file=sys.stderr)
                return 2
            chosen += [t for t in found if t not in chosen]
        targets = chosen
    total, crates_with = 0, 0
    for crate_dir, _package, ident, root_file in targets:
        crate = Crate(ident, root_file, crate_dir)
        circles = crate.circles()
        if circles:
            crates_with += 1
        total += len(circles)
        for cycle, members in circles:
            hops = [name_of(cycle[0])]
            for a, b in zip(cycle, cycle[1:]):
                hops.append(f"{name_of(b)} ({crate.site(a, b)})")
            print(f"{ident}: " + " -> ".join(hops), file=out)
            if len(members) > len(cycle) - 1:
                print(f"    the circle's component holds {len(members)} modules: "
                      + ", ".join(name_of(m) for m in members), file=out)
            if args.edges:
                inside = set(members)
                for (a, b) in sorted(crate.edges):
                    if a in inside and b in inside:
                        print(f"    {name_of(a)} -> {name_of(b)} ({crate.site(a, b)})", file=out)
    print(f"{total} import circles in {crates_with} crates", file=out)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
