"""Unit tests of the module circle check on small made-up workspaces:

    python3 -m unittest scripts/test_check_module_cycles.py

Each test writes a workspace to a temporary directory and checks what the script finds there:
a circle where modules import each other, none where a rule says an import does not count.
"""

import importlib.util
import io
import os
import sys
import tempfile
import textwrap
import unittest

sys.dont_write_bytecode = True
_HERE = os.path.dirname(os.path.abspath(__file__))
# The script's name has dashes, so it is loaded from its file rather than imported by name.
_SPEC = importlib.util.spec_from_file_location("check_module_cycles",
                                               os.path.join(_HERE, "check-module-cycles.py"))
check = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(check)


class Workspace:
    """A workspace on disk: `files` maps paths (under the root) to their text."""

    def __init__(self, files, members='["demo"]'):
        self._dir = tempfile.TemporaryDirectory()
        self.root = self._dir.name
        self.write("Cargo.toml", f"[workspace]\nmembers = {members}\n")
        for path, text in files.items():
            self.write(path, text)

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text).lstrip("\n"))

    def run(self, *argv):
        out = io.StringIO()
        code = check.main(list(argv), root=self.root, out=out)
        return code, out.getvalue()

    def crate(self, member="demo"):
        return check.Crate("demo", os.path.join(self.root, member, "src", "lib.rs"),
                           os.path.join(self.root, member))

    def close(self):
        self._dir.cleanup()


def demo(files):
    """The files of package `demo`, paths relative to its src/."""
    out = {"demo/Cargo.toml": '[package]\nname = "demo"\nversion = "0.1.0"\n'}
    out.update({f"demo/src/{path}": text for path, text in files.items()})
    return out


class CheckTest(unittest.TestCase):
    def workspace(self, files, **kw):
        ws = Workspace(files, **kw)
        self.addCleanup(ws.close)
        return ws

    def edges(self, ws):
        return {(check.name_of(a), check.name_of(b)) for a, b in ws.crate().edges}

    def test_two_module_cycle_is_found_with_its_sites(self):
        ws = self.workspace(demo({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "use crate::a::A;\npub struct B;\n",
        }))
        code, out = ws.run()
        self.assertEqual(code, 1)
        self.assertIn("demo: a -> b (src/a.rs:1 use crate::b::B) -> a (src/b.rs:1 use crate::a::A)", out)
        self.assertTrue(out.endswith("1 import circles in 1 crates\n"), out)

    def test_child_using_parents_reexport_depends_on_the_sibling(self):
        ws = self.workspace(demo({
            "lib.rs": "mod p;\npub use p::Thing;\npub use p::Other as Renamed;\n",
            # The parent calls into the child and passes on the sibling's items; neither
            # `pub use` line nor `mod` is an edge of its own.
            "p/mod.rs": """
                mod child;
                mod sibling;
                mod other;
                pub use sibling::Thing;
                pub(crate) use self::other::{Other};
                pub fn run() { child::go(); }
            """,
            "p/child.rs": """
                use super::Thing;
                pub fn go() -> Thing { Thing }
                pub fn twice() -> crate::Renamed { crate::Renamed }
            """,
            "p/sibling.rs": "pub struct Thing;\n",
            "p/other.rs": "pub struct Other;\n",
        }))
        self.assertEqual(self.edges(ws), {("p::child", "p::sibling"), ("p::child", "p::other")})
        code, out = ws.run()
        self.assertEqual(code, 0, out)

    def test_cfg_test_blocks_and_files_are_ignored(self):
        ws = self.workspace(demo({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": """
                pub fn f() {}
                #[cfg(test)]
                mod tests {
                    // A brace in a char literal must not end the block early.
                    const CLOSE: [char; 4] = ['}', '\\'', '\\n','}'];
                    use crate::b::g;
                    fn t() { if true { crate::b::g() } }
                }
                #[cfg(all(test, feature = "x"))]
                fn helper() { crate::b::g() }
                #[cfg(test)]
                mod more;
                pub fn after() {}
            """,
            "a/more.rs": "use crate::b::g;\n",
            "b.rs": "use crate::a::f;\npub fn g() { f() }\n",
        }))
        self.assertEqual(self.edges(ws), {("b", "a")})
        self.assertNotIn(("a", "more"), ws.crate().files)
        code, _ = ws.run()
        self.assertEqual(code, 0)

    def test_cfg_not_test_is_production(self):
        ws = self.workspace(demo({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "#[cfg(not(test))]\nuse crate::b::g;\npub fn f() {}\n",
            "b.rs": "use crate::a::f;\npub fn g() {}\n",
        }))
        code, _ = ws.run()
        self.assertEqual(code, 1)

    def test_paths_in_comments_and_literals_are_ignored(self):
        ws = self.workspace(demo({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": '''
                //! See [`crate::b::g`].
                // use crate::b::g;
                /* crate::b::g(); /* nested crate::b::g */ still comment crate::b::g */
                /// Calls `crate::b::g()`.
                pub fn f() -> (&'static str, &'static str, char) {
                    let brace = '{';
                    ("crate::b::g()", r#"crate::b::g "quoted" "#, brace)
                }
            ''',
            "b.rs": "use crate::a::f;\npub fn g() { let _ = f(); }\n",
        }))
        self.assertEqual(self.edges(ws), {("b", "a")})
        code, _ = ws.run()
        self.assertEqual(code, 0)

    def test_grouped_and_nested_use_braces_parse(self):
        toks = check.tokenize("use crate::{a::{self, x::Y}, b::{c::{D, E as F}, *}};")
        leaves, end = check._parse_use(toks, 1)
        self.assertEqual(end, len(toks))
        self.assertEqual([(segs, name, glob) for segs, name, glob, _line in leaves], [
            (["crate", "a"], "a", False),
            (["crate", "a", "x", "Y"], "Y", False),
            (["crate", "b", "c", "D"], "D", False),
            (["crate", "b", "c", "E"], "F", False),
            (["crate", "b"], None, True),
        ])
        ws = self.workspace(demo({
            "lib.rs": "mod a;\nmod b;\n",
            "a/mod.rs": "pub mod x;\n",
            "a/x.rs": "use crate::b::{self, c::{\n    D,\n    E as F,\n}};\npub struct Y;\n",
            "b/mod.rs": "pub mod c;\n",
            "b/c.rs": "use super::super::{a::{x::Y}};\npub struct D;\npub struct E;\n",
        }))
        code, out = ws.run()
        self.assertEqual(code, 1)
        self.assertIn("a::x -> b::c (src/a/x.rs:2 use crate::b::c::D +1 more) -> a::x "
                      "(src/b/c.rs:1 use super::super::a::x::Y)", out)

    def test_inline_paths_in_code_count(self):
        ws = self.workspace(demo({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub fn f() {\n    crate::b::g();\n}\n",
            "b.rs": "pub fn g() {\n    let _ = <super::a::T as Default>::default();\n}\n",
        }))
        ws.write("demo/src/a.rs", "#[derive(Default)]\npub struct T;\npub fn f() {\n    crate::b::g();\n}\n")
        code, out = ws.run()
        self.assertEqual(code, 1)
        self.assertIn("demo: a -> b (src/a.rs:4 crate::b::g) -> a (src/b.rs:2 super::a::T)", out)

    def test_other_crates_and_self_edges_do_not_count(self):
        ws = self.workspace(demo({
            # The root passes on another crate's item: using it through the root is no edge.
            "lib.rs": "mod a;\nmod b;\nuse crate::a::f;\npub use shared::Ext;\npub fn root() { f() }\n",
            "a.rs": """
                use b::thing;
                use shared::b::x;
                use crate::Ext;
                pub fn f() { self::g(); crate::a::g(); u64::MAX; }
                fn g() {}
            """,
            "b.rs": "use crate::a::f;\n",
        }))
        self.assertEqual(self.edges(ws), {("b", "a")})

    def test_exported_macro_belongs_to_the_module_that_defines_it(self):
        # `$crate::each!` names the root, but the macro is written in `backend`.
        ws = self.workspace(demo({
            "lib.rs": "mod backend;\npub fn root() { backend::helper() }\n",
            "backend.rs": """
                pub fn helper() {}
                #[macro_export]
                #[doc(hidden)]
                macro_rules! each {
                    () => { $crate::each!(@inner) };
                }
            """,
        }))
        self.assertEqual(self.edges(ws), set(), "backend -> crate would be an edge upwards")

    def test_a_parent_and_its_child_are_no_circle_but_two_siblings_are(self):
        ws = self.workspace(demo({
            "lib.rs": "mod p;\n",
            # The parent calls its child and the child uses the parent's item: one module
            # split into files.
            "p/mod.rs": "mod child;\nmod x;\nmod y;\npub struct Shared;\npub fn run() { child::go() }\n",
            "p/child.rs": "use super::Shared;\npub fn go() { let _ = Shared; }\n",
            "p/x.rs": "use super::y::Y;\npub struct X;\n",
            "p/y.rs": "use super::x::X;\npub struct Y;\n",
        }))
        self.assertEqual(self.edges(ws), {("p::child", "p"), ("p::x", "p::y"), ("p::y", "p::x")})
        code, out = ws.run()
        self.assertEqual(code, 1, out)
        self.assertIn("p::x", out)
        self.assertNotIn("p::child", out)

    def test_clean_workspace_exits_zero(self):
        files = demo({
            "lib.rs": "pub mod a;\npub mod b;\npub use b::B;\n",
            "a.rs": "use crate::B;\npub fn f(_: B) {}\n",
            "b.rs": "pub struct B;\n",
        })
        files["stores/extra/Cargo.toml"] = '[package]\nname = "extra-store"\nversion = "0.1.0"\n'
        files["stores/extra/src/lib.rs"] = "mod x;\nmod y;\n"
        files["stores/extra/src/x.rs"] = "use crate::y::Y;\npub struct X;\n"
        files["stores/extra/src/y.rs"] = "pub struct Y;\n"
        ws = self.workspace(files, members='["demo", "stores/*"]')
        code, out = ws.run()
        self.assertEqual((code, out), (0, "0 import circles in 0 crates\n"))
        # The glob member is read: a circle there is found, and `--crate` picks it.
        ws.write("stores/extra/src/y.rs", "use super::x::X;\npub struct Y;\n")
        self.assertEqual(ws.run()[0], 1)
        self.assertEqual(ws.run("--crate", "extra-store")[0], 1)
        self.assertEqual(ws.run("--crate", "demo"), (0, "0 import circles in 0 crates\n"))

    def test_three_module_component_prints_a_shortest_cycle(self):
        ws = self.workspace(demo({
            "lib.rs": "mod a;\nmod b;\nmod c;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "use crate::c::C;\npub struct B;\n",
            "c.rs": "use crate::a::A;\nuse crate::b::B;\npub struct C;\n",
        }))
        code, out = ws.run()
        self.assertEqual(code, 1)
        self.assertIn("demo: b -> c (src/b.rs:1 use crate::c::C) -> b (src/c.rs:2 use crate::b::B)", out)
        self.assertIn("holds 3 modules: a, b, c", out)


if __name__ == "__main__":
    unittest.main()
