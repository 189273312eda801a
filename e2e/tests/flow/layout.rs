//! The map of the repository in docs/architecture.md (`## Layout`: every file, by folder, in a
//! few words) is where a reader finds the file that does a thing. Nothing else ties it to the
//! files, so it drifted: new modules, scripts and decisions went unlisted, and a file that had
//! moved stayed on it under its old path. This test ties it: it fails, naming each path, when
//! a file of the repository is not on the map or the map names a path that is not one.
//!
//! The scope is every file git knows as the repository's: tracked, or new and not ignored (a
//! new file must be on the map by the time it is committed; the test says so before the commit,
//! not after it). A file is on the map when the block lists its path, or when the block lists a
//! folder holding it as one line: a folder with a description and no entries beneath it
//! (`.sqlx/`, the query macros' generated data) stands for every file in it.
//!
//! The block's forms, as it is written:
//!
//! ```text
//! Cargo.toml                            a file at the root: no indent
//! .sqlx/                                a folder as one line: no indent, a description, no entries
//! docs/                                 a folder heading: no indent, entries beneath
//!   README.md                           an entry: two spaces, a path inside the heading's folder
//!                                       a description carried on: indented deeper
//! ```
//!
//! It needs no services: it reads a file and asks git.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The page that holds the map, from the workspace root.
const PAGE: &str = "docs/architecture.md";

/// The heading of the section the map is in.
const SECTION: &str = "## Layout";

/// The indent of an entry beneath its folder; deeper lines carry a description on.
const ENTRY_INDENT: usize = 2;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The repository's files, relative to `root`: tracked or new and not ignored, and present in
/// the working tree (a file deleted but not yet committed as deleted is gone already).
fn repository_files(root: &Path) -> BTreeSet<String> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output()
        .expect("git runs");
    assert!(
        listed.status.success(),
        "git ls-files failed: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    listed
        .stdout
        .split(|&byte| byte == 0)
        .filter(|path| !path.is_empty())
        .map(|path| String::from_utf8(path.to_vec()).expect("a path in UTF-8"))
        .filter(|path| root.join(path).symlink_metadata().is_ok())
        .collect()
}

/// What the map says, each path with the line of the page it is on.
#[derive(Debug, Default, PartialEq, Eq)]
struct Map {
    /// Files listed one by one.
    files: BTreeMap<String, usize>,
    /// Folders listed as one line, standing for every file in them.
    folders: BTreeMap<String, usize>,
    /// Lines that fit none of the forms, and paths listed twice.
    unreadable: Vec<String>,
}

/// A folder heading whose entries are still being read.
#[derive(Debug)]
struct Heading {
    path: String,
    line: usize,
    described: bool,
    entries: usize,
}

impl Map {
    fn add(&mut self, path: String, line: usize) {
        if path.starts_with('/') || path.split('/').any(|part| part == "." || part == "..") {
            self.unreadable.push(format!(
                "line {line}: `{path}` is not a path inside the repository"
            ));
            return;
        }
        let listed = if path.ends_with('/') {
            &mut self.folders
        } else {
            &mut self.files
        };
        if let Some(first) = listed.get(&path) {
            self.unreadable.push(format!(
                "line {line}: `{path}` is listed twice (first on line {first})"
            ));
        } else {
            listed.insert(path, line);
        }
    }

    /// A heading is done: with entries it was a heading; without, a folder as one line, which
    /// needs the description that says what its files are.
    fn close(&mut self, heading: Option<Heading>) {
        let Some(heading) = heading else { return };
        if heading.entries > 0 {
            return;
        }
        if heading.described {
            self.add(heading.path, heading.line);
        } else {
            self.unreadable.push(format!(
                "line {}: the folder `{}` has neither entries nor a description",
                heading.line, heading.path
            ));
        }
    }
}

/// Reads the first fenced block under [`SECTION`] of `page`; line numbers are the page's.
fn read_map(page: &str) -> Map {
    let mut lines = page
        .lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line));
    lines
        .by_ref()
        .find(|(_, line)| line.trim_end() == SECTION)
        .unwrap_or_else(|| panic!("{PAGE} has no `{SECTION}` section"));
    lines
        .by_ref()
        .find(|(_, line)| line.starts_with("```"))
        .unwrap_or_else(|| panic!("`{SECTION}` in {PAGE} has no fenced block"));

    let mut map = Map::default();
    let mut heading: Option<Heading> = None;
    let mut closed = false;
    for (number, line) in lines.by_ref() {
        if line.starts_with("```") {
            closed = true;
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start_matches(' ').len();
        let mut words = line.split_whitespace();
        let path = words.next().unwrap_or_default();
        let described = words.next().is_some();
        if line[indent..].starts_with('\t') {
            map.unreadable.push(format!(
                "line {number}: a tab where the block aligns with spaces"
            ));
        } else if indent == 0 {
            map.close(heading.take());
            if path.ends_with('/') {
                heading = Some(Heading {
                    path: path.to_owned(),
                    line: number,
                    described,
                    entries: 0,
                });
            } else {
                map.add(path.to_owned(), number);
            }
        } else if indent == ENTRY_INDENT {
            match heading.as_mut() {
                Some(folder) if !path.ends_with('/') || described => {
                    folder.entries += 1;
                    let path = format!("{}{path}", folder.path);
                    map.add(path, number);
                }
                Some(_) => map.unreadable.push(format!(
                    "line {number}: the folder `{path}` as one line needs a description"
                )),
                None => map.unreadable.push(format!(
                    "line {number}: the entry `{path}` is under no folder"
                )),
            }
        } else if indent < ENTRY_INDENT * 2 {
            map.unreadable.push(format!(
                "line {number}: indented {indent}, neither an entry ({ENTRY_INDENT}) nor a \
                 description carried on (deeper)"
            ));
        }
    }
    map.close(heading);
    assert!(
        closed,
        "the block under `{SECTION}` in {PAGE} is not closed"
    );
    map
}

/// Every disagreement between `map` and `files`, one line each; empty when they agree.
fn disagreements(map: &Map, files: &BTreeSet<String>) -> String {
    let on_map = |file: &String| {
        map.files.contains_key(file) || map.folders.keys().any(|folder| file.starts_with(folder))
    };
    let missing: Vec<&String> = files.iter().filter(|file| !on_map(file)).collect();
    let listed_files = map.files.iter().filter(|(path, _)| !files.contains(*path));
    let listed_folders = map
        .folders
        .iter()
        .filter(|(folder, _)| !files.iter().any(|file| file.starts_with(*folder)));
    let mut extra: Vec<(&String, &usize)> = listed_files.chain(listed_folders).collect();
    extra.sort_by_key(|(_, line)| **line);

    let mut report = String::new();
    if !missing.is_empty() {
        let _ = writeln!(
            report,
            "files of the repository not on the map (list each under its folder, in a few words; \
             for a Rust file, from its `//!` line):"
        );
        for file in missing {
            let _ = writeln!(report, "  {file}");
        }
    }
    if !extra.is_empty() {
        let _ = writeln!(
            report,
            "paths on the map that are not files of the repository (remove them, or correct \
             their folder):"
        );
        for (path, line) in extra {
            let _ = writeln!(report, "  {path} (line {line})");
        }
    }
    if !map.unreadable.is_empty() {
        let _ = writeln!(report, "lines of the map that fit none of its forms:");
        for problem in &map.unreadable {
            let _ = writeln!(report, "  {problem}");
        }
    }
    report
}

#[test]
fn the_layout_lists_every_file_of_the_repository_and_nothing_else() {
    let root = workspace_root();
    let page = std::fs::read_to_string(root.join(PAGE)).expect("the page reads");
    let map = read_map(&page);
    let files = repository_files(&root);
    assert!(
        !files.is_empty(),
        "git lists no files under {}",
        root.display()
    );
    let report = disagreements(&map, &files);
    assert!(
        report.is_empty(),
        "{PAGE}, `{SECTION}`, is out of step with the repository:\n{report}"
    );
}

/// The forms the map is written in, read as the real page writes them; a reader that took
/// every line for a file, or none, would make the test above pass or fail for nothing.
#[test]
fn the_layout_reader_tells_files_folders_and_carried_descriptions_apart() {
    let page = "\
# Title

## Layout

Words.

```
Cargo.toml                            the workspace
.sqlx/                                generated, one line for all
docs/
  README.md                           the index
  0003-a-long-name-that-fills-it.md A title that runs into the
                                      next line
  holds/rules.rs                      a file in a subfolder
  generated/                          a subfolder as one line
src/
```

## After
";
    let map = read_map(page);
    let files: Vec<&str> = map.files.keys().map(String::as_str).collect();
    assert_eq!(
        files,
        [
            "Cargo.toml",
            "docs/0003-a-long-name-that-fills-it.md",
            "docs/README.md",
            "docs/holds/rules.rs",
        ]
    );
    let folders: Vec<&str> = map.folders.keys().map(String::as_str).collect();
    assert_eq!(folders, [".sqlx/", "docs/generated/"]);
    assert_eq!(
        map.unreadable,
        ["line 16: the folder `src/` has neither entries nor a description"]
    );

    let repository: BTreeSet<String> = [
        "Cargo.toml",
        ".sqlx/query-1.json",
        "docs/README.md",
        "docs/holds/rules.rs",
        "docs/new.md",
    ]
    .map(str::to_owned)
    .into();
    let report = disagreements(&map, &repository);
    assert!(report.contains("\n  docs/new.md\n"), "{report}");
    assert!(
        report.contains("  docs/0003-a-long-name-that-fills-it.md (line 12)"),
        "{report}"
    );
    assert!(report.contains("  docs/generated/ (line 15)"), "{report}");
}
