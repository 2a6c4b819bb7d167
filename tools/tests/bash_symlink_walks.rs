//! A property over generated project layouts: a recursive read (`grep -r`, `grep -R`, `rg
//! -L`), a listing that follows links (`ls -RL`, `find -L`, `tree -l`, `du -L`: any file or
//! directory reached counts, names being what it shows) or a glob (`cat */*`) that reaches a
//! file outside the project through any chain of symbolic links — to a directory or a file
//! outside, relative or absolute, below another link, in a cycle, up to a parent — is
//! refused under `external_directory: deny`; a layout whose links
//! all stay inside is allowed. The oracles are independent walks with `std::fs`: one that
//! follows every link (GNU `grep -R` does; `grep -r` follows fewer, so the property is the
//! checker's superset) and bash's expansion of `*` components.

#[allow(dead_code)] // the shared module's tables and project are for the other files
mod bash_support;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use bash_support::{EXT, decide, ruleset};
use proptest::prelude::*;
use troupe_agents::permission::Action;

/// Directories of the generated project, relative to it ("" is the project itself).
const DIRS: &[&str] = &["", "a", "a/b", "c"];

/// Where a generated link points.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// `outside/` (holds `secret`).
    OutsideDir,
    /// `outside/deep/` (holds `key`), below the outside directory.
    OutsideDeep,
    /// `outside/secret`, a file.
    OutsideFile,
    /// `outside/empty/`: outside, but no file to read.
    OutsideEmpty,
    /// A directory of the project (may make a cycle).
    InsideDir(usize),
    /// The project's `a/f1`.
    InsideFile,
    /// A name that does not exist.
    Dangling,
    /// Another generated link, by index (a chain; may dangle or loop).
    Link(usize),
}

/// One link: the directory it is in (index into [`DIRS`]), its target, and whether the
/// target is written absolute or relative to the link's directory.
#[derive(Debug, Clone, Copy)]
struct Link {
    dir: usize,
    target: Target,
    absolute: bool,
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        Just(Target::OutsideDir),
        Just(Target::OutsideDeep),
        Just(Target::OutsideFile),
        Just(Target::OutsideEmpty),
        (0..DIRS.len()).prop_map(Target::InsideDir),
        Just(Target::InsideFile),
        Just(Target::Dangling),
        (0..4usize).prop_map(Target::Link),
    ]
}

fn link() -> impl Strategy<Value = Link> {
    (0..DIRS.len(), target(), any::<bool>()).prop_map(|(dir, target, absolute)| Link {
        dir,
        target,
        absolute,
    })
}

/// `to` written relative to the directory `from` (both absolute, no links between).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push("..");
    }
    for c in to.components().skip(common) {
        out.push(c);
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// The link's own path: `<dir>/l<i>`.
fn link_path(proj: &Path, links: &[Link], i: usize) -> PathBuf {
    proj.join(DIRS[links[i].dir]).join(format!("l{i}"))
}

/// Builds the layout under a fresh temporary directory: `proj/` with `a/f1`, `a/b/f2`,
/// `c/f3` and the links, beside `outside/` with `secret`, `deep/key` and `empty/`.
fn build(links: &[Link]) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let proj = root.join("proj");
    for dir in DIRS {
        std::fs::create_dir_all(proj.join(dir)).unwrap();
    }
    for (f, text) in [("a/f1", "s1\n"), ("a/b/f2", "s2\n"), ("c/f3", "s3\n")] {
        std::fs::write(proj.join(f), text).unwrap();
    }
    let outside = root.join("outside");
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    std::fs::create_dir_all(outside.join("empty")).unwrap();
    std::fs::write(outside.join("secret"), "s\n").unwrap();
    std::fs::write(outside.join("deep/key"), "s\n").unwrap();
    for (i, l) in links.iter().enumerate() {
        let at = link_path(&proj, links, i);
        let dest = match l.target {
            Target::OutsideDir => outside.clone(),
            Target::OutsideDeep => outside.join("deep"),
            Target::OutsideFile => outside.join("secret"),
            Target::OutsideEmpty => outside.join("empty"),
            Target::InsideDir(k) => proj.join(DIRS[k]),
            Target::InsideFile => proj.join("a/f1"),
            Target::Dangling => proj.join("nope"),
            Target::Link(k) => link_path(&proj, links, k % links.len()),
        };
        let written = if l.absolute {
            dest
        } else {
            relative(at.parent().unwrap(), &dest)
        };
        std::os::unix::fs::symlink(written, at).unwrap();
    }
    (d, proj)
}

/// The oracle: every regular file a walk from `start` that follows every link reaches, by its
/// real path (each real directory visited once, so cycles end).
fn reached_files(start: &Path) -> Vec<PathBuf> {
    reached(start, false)
}

/// The oracle of a listing that follows links (`ls -RL`, `find -L`): every file and
/// directory such a walk reaches (their names are shown), by real path.
fn reached_entries(start: &Path) -> Vec<PathBuf> {
    reached(start, true)
}

/// Every regular file (and with `dirs`, every directory) a walk from `start` that follows
/// every link reaches, by its real path (each real directory visited once).
fn reached(start: &Path, dirs: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![start.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(real) = std::fs::canonicalize(&dir) else {
            continue;
        };
        if !seen.insert(real) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            // Follows links: a dangling one or a loop of links has no metadata.
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => {
                    if dirs {
                        out.extend(std::fs::canonicalize(&p).ok());
                    }
                    stack.push(p)
                }
                Ok(m) if m.is_file() => out.extend(std::fs::canonicalize(&p).ok()),
                _ => {}
            }
        }
    }
    out
}

/// The oracle of a shell glob of `depth` `*` components (`cat */*` is 2): the regular files
/// bash expands it to (no name starting with `.`; a link to a directory is a directory), by
/// their real paths.
fn globbed_files(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let p = e.path();
        match std::fs::metadata(&p) {
            Ok(m) if m.is_dir() && depth > 1 => out.extend(globbed_files(&p, depth - 1)),
            Ok(m) if m.is_file() && depth == 1 => out.extend(std::fs::canonicalize(&p).ok()),
            _ => {}
        }
    }
    out
}

/// The oracle of a glob of `depth` `*` components given to a command that shows each match
/// (`ls */*` is 2): every file and directory bash expands it to (no name starting with `.`;
/// links followed through the levels above), by real path.
fn globbed_entries(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let p = e.path();
        match std::fs::metadata(&p) {
            Ok(m) if m.is_dir() && depth > 1 => out.extend(globbed_entries(&p, depth - 1)),
            Ok(_) if depth == 1 => out.extend(std::fs::canonicalize(&p).ok()),
            _ => {}
        }
    }
    out
}

/// The property of the tests: `line` under `external_directory: deny` is denied, naming
/// it, when `outside` (what the oracle reached outside the project) is not empty, and
/// allowed when it is.
fn refused_iff_outside(
    proj: &Path,
    line: &str,
    outside: &[PathBuf],
    links: &[Link],
) -> Result<(), TestCaseError> {
    let (action, message) = runtime().block_on(decide(ruleset("extdeny"), proj, line));
    if outside.is_empty() {
        prop_assert_eq!(
            action,
            Action::Allow,
            "{} with {:?}: {}",
            line,
            links,
            message
        );
    } else {
        prop_assert_eq!(
            action,
            Action::Deny,
            "{} reaches {:?} with {:?}: {}",
            line,
            outside,
            links,
            message
        );
        prop_assert!(message.contains(EXT), "{}", message);
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Outside reached ⇒ denied naming `external_directory`; all inside ⇒ allowed.
    #[test]
    fn a_recursive_read_through_links_out_of_the_project_is_refused(
        links in prop::collection::vec(link(), 1..5),
        command in prop::sample::select(vec![
            ("grep -R s .", "", 0),
            ("grep -r s .", "", 0),
            ("grep -rl s a", "a", 0),
            ("grep -R -n s c", "c", 0),
            ("rg -L s .", "", 0),
            ("rg --follow s a", "a", 0),
            ("cat */*", "", 2),
            ("cat */*/*", "", 3),
            ("head a/*/*", "a", 2),
        ]),
    ) {
        let (_d, proj) = build(&links);
        let (line, start, glob_depth) = command;
        let reached = match glob_depth {
            0 => reached_files(&proj.join(start)),
            d => globbed_files(&proj.join(start), d),
        };
        let outside: Vec<PathBuf> = reached
            .into_iter()
            .filter(|f| !f.starts_with(&proj))
            .collect();
        refused_iff_outside(&proj, line, &outside, &links)?;
    }

    /// A listing that follows links shows the names of everything it reaches: anything
    /// reached outside (a directory with no file in it too) ⇒ denied naming
    /// `external_directory`; all inside ⇒ allowed.
    #[test]
    fn a_listing_through_links_out_of_the_project_is_refused(
        links in prop::collection::vec(link(), 1..5),
        command in prop::sample::select(vec![
            ("ls -RL .", ""),
            ("ls -lRL a", "a"),
            ("find -L .", ""),
            ("find c -follow -name x", "c"),
            ("tree -l", ""),
            ("du -aL a", "a"),
        ]),
    ) {
        let (_d, proj) = build(&links);
        let (line, start) = command;
        let outside: Vec<PathBuf> = reached_entries(&proj.join(start))
            .into_iter()
            .filter(|f| !f.starts_with(&proj))
            .collect();
        refused_iff_outside(&proj, line, &outside, &links)?;
    }

    /// A glob given to a command that shows each match (`ls *` lists a directory a link
    /// leads to, `du`/`stat -L` report it) is checked match by match, as if each were
    /// named: a match outside the project (a file or a directory) ⇒ denied naming
    /// `external_directory`; all inside ⇒ allowed.
    #[test]
    fn a_glob_shown_by_a_listing_is_checked_where_each_match_leads(
        links in prop::collection::vec(link(), 1..5),
        command in prop::sample::select(vec![
            ("ls *", "", 1),
            ("ls -l */*", "", 2),
            ("du -s a/*", "a", 1),
            ("stat -L c/*", "c", 1),
            ("tree */*", "", 2),
            ("find -H *", "", 1),
        ]),
    ) {
        let (_d, proj) = build(&links);
        let (line, start, depth) = command;
        let outside: Vec<PathBuf> = globbed_entries(&proj.join(start), depth)
            .into_iter()
            .filter(|f| !f.starts_with(&proj))
            .collect();
        refused_iff_outside(&proj, line, &outside, &links)?;
    }
}
