//! Git's ignore rules matched in process (`rules`, the walk with a matcher) against git
//! itself: generated trees, `.gitignore` files at several depths and `info/exclude` with
//! hostile spellings (negations, anchors, `**`, classes, escapes, trailing spaces, CRLF,
//! byte order marks), some files tracked; what the walk keeps must be exactly what `git
//! ls-files --others --exclude-standard` lists plus the tracked files.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

use proptest::prelude::*;

use crate::fingerprint::{Ignored, NoFingerprint, walk};
use crate::rules::{Matcher, RuleCache};
use crate::stage::Staged;

/// Names files and directories get (each a path component).
const NAMES: &[&str] = &[
    "a",
    "b",
    "c",
    "x.log",
    "y.txt",
    "x y",
    "sp ",
    "#h",
    "!n",
    "[ab]",
    "q?",
    "st*r",
    "back\\slash",
    "é",
    "target",
    "keep",
    "a.log.d",
    "-",
    ".hidden",
];

/// Pattern components the rules are made of.
const PIECES: &[&str] = &[
    "a",
    "b",
    "c",
    "*",
    "**",
    "?",
    "*.log",
    "x*",
    "[ab]",
    "[!a]*",
    "\\!n",
    "\\#h",
    "x\\ y",
    "x y",
    "sp\\ ",
    "sp ",
    "é",
    "target",
    "keep",
    "[a-c]",
    "\\[ab]",
    "q\\?",
    "st\\*r",
    "*.d",
    ".*",
    "back\\\\slash",
    "**/",
    "[[:alpha:]]",
    "[]]",
    "\\",
];

/// What a walk of the repository at `root` (its git dir `.git`) that matches the rules in
/// process keeps, with `tracked` (relative path bytes) as the tracked files: every file it
/// recorded but the rule files it read that git ignores. `None`: it refused the rules.
pub(super) fn walk_keeps(root: &Path, tracked: Vec<Vec<u8>>) -> Option<Paths> {
    let staged = Staged::tracking(tracked);
    let mut cache = RuleCache::default();
    let git_dir = root.join(".git");
    let mut matcher = Matcher {
        info_exclude: git_dir.join("info/exclude"),
        config: git_dir.join("config"),
        global_excludes: &[],
        global_plain: true,
        tracked: Some(&staged),
        cache: &mut cache,
        outside: Vec::new(),
    };
    let outside = [git_dir.join("config"), git_dir.join("info/exclude")];
    let w = match walk(root, &Ignored::default(), &outside, Some(&mut matcher)) {
        Ok(w) => w,
        Err(NoFingerprint::Rules) => return None,
        Err(e) => panic!("walk: {e:?}"),
    };
    Some(
        w.fingerprint
            .files(root)
            .map(|(rel, _)| rel.as_os_str().as_bytes().to_vec())
            .filter(|k| !w.unstaged.contains(k))
            .collect(),
    )
}

/// Runs git hermetically in `dir` (no global or system configuration).
pub(super) fn git(dir: &Path, home: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_LITERAL_PATHSPECS", "1")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {:?}", out);
    out.stdout
}

/// One generated rule file: lines (each a pattern, a comment or blank), CRLF or not, a
/// byte order mark or not, a final newline or not.
fn rule_text() -> impl Strategy<Value = Vec<u8>> {
    let line = (
        0..10u8,
        prop::collection::vec(prop::sample::select(PIECES), 1..4),
        any::<bool>(),
        any::<bool>(),
        0..6u8,
    )
        .prop_map(|(lead, pieces, slash_start, slash_end, trail)| {
            let mut l = String::new();
            match lead {
                0..=2 => l.push('!'),
                3 => l.push_str("# a comment "),
                4 => return String::new(),
                _ => {}
            }
            if slash_start {
                l.push('/');
            }
            l.push_str(&pieces.join("/"));
            if slash_end {
                l.push('/');
            }
            match trail {
                0 => l.push_str("  "),
                1 => l.push_str("\\ "),
                _ => {}
            }
            l
        });
    (
        prop::collection::vec(line, 0..6),
        any::<bool>(),
        0..8u8,
        any::<bool>(),
    )
        .prop_map(|(lines, crlf, bom, last_newline)| {
            let end = if crlf { "\r\n" } else { "\n" };
            let mut text = Vec::new();
            if bom == 0 {
                text.extend_from_slice(b"\xEF\xBB\xBF");
            }
            for (i, l) in lines.iter().enumerate() {
                text.extend_from_slice(l.as_bytes());
                if i + 1 < lines.len() || last_newline {
                    text.extend_from_slice(end.as_bytes());
                }
            }
            text
        })
}

/// A generated case: entries (path components, a file or a link), rule files (directory
/// of the entries' paths to put one in, text), `info/exclude`, which files git tracks.
#[derive(Debug, Clone)]
struct Case {
    entries: Vec<(Vec<&'static str>, bool)>,
    ignores: Vec<(Vec<&'static str>, Vec<u8>)>,
    exclude: Vec<u8>,
    tracked: Vec<bool>,
}

fn case() -> impl Strategy<Value = Case> {
    let path = prop::collection::vec(prop::sample::select(NAMES), 1..4);
    (
        prop::collection::vec((path, 0..6u8), 1..16),
        prop::collection::vec(
            (
                prop::collection::vec(prop::sample::select(NAMES), 0..3),
                rule_text(),
            ),
            0..4,
        ),
        rule_text(),
        prop::collection::vec(prop::bool::weighted(0.2), 16),
    )
        .prop_map(|(entries, ignores, exclude, tracked)| Case {
            entries: entries
                .into_iter()
                .map(|(p, kind)| (p, kind == 0))
                .collect(),
            ignores,
            exclude,
            tracked,
        })
}

/// Creates the directories of `rel` under `root` one by one; `false` when one of them is
/// taken by a file or a link (a path through a link names another place).
fn make_dirs(root: &Path, rel: &Path) -> bool {
    let mut at = root.to_path_buf();
    rel.components().all(|c| {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) => m.is_dir(),
            Err(_) => std::fs::create_dir(&at).is_ok(),
        }
    })
}

/// Relative paths, as bytes.
pub(super) type Paths = BTreeSet<Vec<u8>>;

/// Builds the case in a fresh repository and returns (what git keeps, what the walk kept),
/// or `None` when the walk refused the rules.
fn run(c: &Case) -> Option<(Paths, Paths)> {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, home.path(), &["init", "--quiet"]);
    let mut files = Vec::new();
    for (path, link) in &c.entries {
        let rel: std::path::PathBuf = path.iter().collect();
        let full = root.join(&rel);
        // A name already taken by the other kind (a file where a directory is needed):
        // the entry is left out.
        if !make_dirs(root, rel.parent().unwrap_or(Path::new("")))
            || std::fs::symlink_metadata(&full).is_ok()
        {
            continue;
        }
        let made = if *link {
            std::os::unix::fs::symlink("a", &full)
        } else {
            std::fs::write(&full, b"x")
        };
        if made.is_ok() {
            files.push(rel);
        }
    }
    for (path, text) in &c.ignores {
        let rel: std::path::PathBuf = path.iter().collect();
        let d = root.join(&rel);
        if make_dirs(root, &rel) && std::fs::symlink_metadata(d.join(".gitignore")).is_err() {
            std::fs::write(d.join(".gitignore"), text).unwrap();
        }
    }
    std::fs::create_dir_all(root.join(".git/info")).unwrap();
    std::fs::write(root.join(".git/info/exclude"), &c.exclude).unwrap();
    let tracked: Vec<Vec<u8>> = files
        .iter()
        .zip(&c.tracked)
        .filter(|(_, t)| **t)
        .map(|(f, _)| f.as_os_str().as_bytes().to_vec())
        .collect();
    if !tracked.is_empty() {
        let mut args = vec!["add", "--force", "--"];
        let names: Vec<&str> = tracked
            .iter()
            .map(|t| std::str::from_utf8(t).unwrap())
            .collect();
        args.extend(names);
        git(root, home.path(), &args);
    }
    let out = git(
        root,
        home.path(),
        &["ls-files", "--others", "--exclude-standard", "-z"],
    );
    let mut expected: BTreeSet<Vec<u8>> = out
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    expected.extend(tracked.iter().cloned());

    let kept = walk_keeps(root, tracked)?;
    Some((expected, kept))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// What the walk keeps is what `git add --all` would stage.
    #[test]
    fn matched_rules_keep_what_git_keeps(c in case()) {
        if let Some((expected, kept)) = run(&c) {
            let show = |s: &BTreeSet<Vec<u8>>| -> Vec<String> {
                s.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect()
            };
            prop_assert_eq!(show(&expected), show(&kept));
        }
    }
}

/// The spellings git and gix could read differently are refused, not guessed.
#[test]
fn rule_text_git_reads_otherwise_is_refused() {
    let p = Path::new(".gitignore");
    assert!(crate::rules::parse(b"a\0b\n", p, b"").is_err());
    assert!(crate::rules::parse(b"a\rb\n", p, b"").is_err());
    assert!(crate::rules::parse(b"a\r", p, b"").is_err());
    assert!(crate::rules::parse(b"a\r\nb\r\n", p, b"").is_ok());
    // A UTF-16 byte order mark is text to git: kept as bytes of the first pattern.
    let list = crate::rules::parse(b"\xFF\xFEa\n", p, b"").unwrap();
    assert_eq!(list.patterns.len(), 1);
    assert_eq!(list.patterns[0].pattern.text.as_slice(), b"\xFF\xFEa");
    // UTF-7's is too.
    let list = crate::rules::parse(b"+/v8a\n", p, b"").unwrap();
    assert_eq!(list.patterns[0].pattern.text.as_slice(), b"+/v8a");
}
