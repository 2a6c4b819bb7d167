//! Hostile review of git's ignore rules matched in process (`rules`, the walk with a
//! matcher, `Snapshot::matched_walk`). `held_*`: attacks the code withstood (the tree is
//! the one git alone gives, or the walk keeps what git keeps); `fixed_*`: a difference from
//! git the review found (all in gix-glob 0.27's wildmatch), now refused by `rules::risky`
//! so git decides.
//!
//! End to end, a difference needs the second track of a handle: the first asks git what
//! its rules ignore, the next ones match the rules in process (no git run). A name the
//! in-process stage refuses (a control character, `\`, `:`) sends the track to git, so a
//! file troupe keeps but git ignores only shows with a plain name; a file troupe leaves out
//! is never looked at, so any name shows.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::rules_tests::{Paths, git, walk_keeps};
use super::stage_tests::Reference;
use super::tests::{Fixture, fixture, open, settle, shadow_git, write};
use super::{Patch, Snapshot};

fn os(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// One case: a directory of its own holding a `.gitignore` with `rules` and a file at each
/// of `paths` (relative to that directory, `/`-separated).
struct Case<'a> {
    rules: &'a [u8],
    paths: &'a [&'a [u8]],
}

/// Builds every case in its own directory of one repository and returns, per case, the
/// paths git ignores and those the in-process walk ignores (`None`: the walk refused).
fn differ(cases: &[Case<'_>]) -> Option<Vec<(Paths, Paths)>> {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, home.path(), &["init", "--quiet"]);
    let mut all = Vec::new();
    for (k, c) in cases.iter().enumerate() {
        let base = root.join(format!("c{k}"));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join(".gitignore"), c.rules).unwrap();
        for rel in c.paths {
            let full = base.join(os(rel));
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(&full, b"x").unwrap();
            let mut key = format!("c{k}/").into_bytes();
            key.extend_from_slice(rel);
            all.push((k, key));
        }
    }
    let out = git(
        root,
        home.path(),
        &["ls-files", "--others", "--exclude-standard", "-z"],
    );
    let kept_by_git: BTreeSet<Vec<u8>> = out
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let kept = walk_keeps(root, Vec::new())?;
    let mut result = vec![(BTreeSet::new(), BTreeSet::new()); cases.len()];
    for (k, key) in all {
        if !kept_by_git.contains(&key) {
            result[k].0.insert(key.clone());
        }
        if !kept.contains(&key) {
            result[k].1.insert(key);
        }
    }
    Some(result)
}

fn show(s: &BTreeSet<Vec<u8>>) -> Vec<String> {
    s.iter()
        .map(|k| format!("{:?}", String::from_utf8_lossy(k)))
        .collect()
}

/// Asserts the walk ignores exactly what git ignores in every case it matches in process;
/// a case whose rules it refuses (`rules::risky`: git decides) is taken on its own, and at
/// least one case must be matched.
fn assert_same(cases: &[Case<'_>]) {
    let r = match differ(cases) {
        Some(r) => r,
        None => {
            let mut matched = 0;
            for c in cases {
                let one = [Case {
                    rules: c.rules,
                    paths: c.paths,
                }];
                if differ(&one).is_some() {
                    assert_same(&one);
                    matched += 1;
                }
            }
            assert!(matched > 0, "the walk matched none of the rules");
            return;
        }
    };
    let mut bad = Vec::new();
    for (k, (by_git, by_troupe)) in r.iter().enumerate() {
        if by_git != by_troupe {
            let only_git: BTreeSet<_> = by_git.difference(by_troupe).cloned().collect();
            let only_troupe: BTreeSet<_> = by_troupe.difference(by_git).cloned().collect();
            bad.push(format!(
                "rules {:?}: ignored by git only {:?}, by troupe only {:?}",
                String::from_utf8_lossy(cases[k].rules),
                show(&only_git),
                show(&only_troupe)
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

// ---------------------------------------------------------------------------------------
// End to end
// ---------------------------------------------------------------------------------------

/// Writes `content` at `rel` (bytes: any name) under `p`.
fn put(p: &Path, rel: &[u8], content: &[u8]) {
    let path = p.join(os(rel));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// `git ls-tree -r` of `tree` in the reference repository.
fn ref_ls(reference: &Reference, tree: &str) -> String {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(reference.dir.path())
        .args(["ls-tree", "-r", tree])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Tracks; returns troupe's tree listing, git's (the reference's, after the same history)
/// and the git processes the track ran.
async fn round(s: &Snapshot, f: &Fixture, reference: &Reference) -> (String, String, u64) {
    let runs = s.git_runs();
    let tree = s.track().await.unwrap();
    let runs = s.git_runs() - runs;
    let expected = reference.tree(f);
    (
        shadow_git(s, f, &["ls-tree", "-r", &tree]),
        ref_ls(reference, &expected),
        runs,
    )
}

/// Tracks and asserts the tree is git's.
async fn check(s: &Snapshot, f: &Fixture, reference: &Reference, what: &str) -> u64 {
    let (troupe, git, runs) = round(s, f, reference).await;
    assert_eq!(troupe, git, "{what}: troupe's tree (left) vs git's (right)");
    runs
}

/// A project with a top `.gitignore` holding `rules` and the files `first`: one track (git
/// says what its rules ignore), then `later` written, and a track after the racy margin
/// (the rules matched in process). Returns that second track's [`round`].
async fn second_track(rules: &[u8], first: &[&[u8]], later: &[&[u8]]) -> (String, String, u64) {
    let f = fixture();
    let p = f.project.clone();
    put(&p, b".gitignore", rules);
    put(&p, b"plain.txt", b"plain\n");
    for rel in first {
        put(&p, rel, b"first\n");
    }
    let s = open(&f).await;
    let reference = Reference::new();
    check(&s, &f, &reference, "first").await;
    settle().await;
    for rel in later {
        put(&p, rel, b"later\n");
    }
    settle().await;
    round(&s, &f, &reference).await
}

/// Asserts the walk refuses to match `cases` in process (git decides).
fn assert_refused(cases: &[Case<'_>]) {
    assert!(
        differ(cases).is_none(),
        "the walk matched rules git may read otherwise"
    );
}

/// Asserts the second track gives git's tree with git deciding (the rules refused).
async fn assert_left_to_git(rules: &[u8], first: &[&[u8]], later: &[&[u8]]) {
    let (troupe, git, runs) = second_track(rules, first, later).await;
    assert_eq!(
        troupe,
        git,
        "rules {:?}: troupe's tree (left) vs git's (right)",
        String::from_utf8_lossy(rules)
    );
    assert!(
        runs > 0,
        "rules git and gix may match differently are left to git"
    );
}

async fn assert_second_track(rules: &[u8], first: &[&[u8]], later: &[&[u8]]) {
    let (troupe, git, runs) = second_track(rules, first, later).await;
    assert_eq!(
        troupe,
        git,
        "rules {:?}: troupe's tree (left) vs git's (right)",
        String::from_utf8_lossy(rules)
    );
    assert_eq!(runs, 0, "the rules were matched in process");
}

// ---------------------------------------------------------------------------------------
// Fixed: differences from git the review found; such rules are now left to git
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn fixed_blank_class_matches_line_breaks() {
    // git stages `a\nb`, `a\x0cb` and `a\rb`; troupe left them out (now refused: git decides).
    assert_left_to_git(b"a[[:blank:]]b\n", &[], &[b"a\nb", b"a\x0cb", b"a\rb"]).await;
}

#[tokio::test]
async fn fixed_negated_space_class_leaves_out_a_tab() {
    // `[![:space:]]` matches a tab for gix, not for git: git stages `a\tb`, troupe did not.
    assert_left_to_git(b"a[![:space:]]b\n", &[], &[b"a\tb", b"a\nb"]).await;
}

#[test]
fn fixed_space_class_walk_keeps_what_git_ignores() {
    // The walk kept `a\tb`, `a\nb`, `a\rb`, which git ignores (end to end the stage then
    // refuses the name and git decides: a git run on every track).
    assert_refused(&[Case {
        rules: b"a[[:space:]]b\n",
        paths: &[b"a\tb", b"a\nb", b"a\rb", b"a b", b"axb"],
    }]);
}

#[tokio::test]
async fn fixed_bracket_with_a_colon_that_opens_no_class() {
    // git: `a[x[:a]b` is the set {x, [, :, a}, so `aab` is ignored; troupe staged it.
    assert_left_to_git(b"a[x[:a]b\n", &[], &[b"aab", b"axb"]).await;
}

#[test]
fn fixed_bracket_with_a_colon_walk() {
    assert_refused(&[
        Case {
            rules: b"a[[:ab]b\n",
            paths: &[b"a:b", b"aab", b"a[b"],
        },
        Case {
            rules: b"a[[:]b\n",
            paths: &[b"a:b", b"a[b"],
        },
        Case {
            rules: b"a[x[:a]b\n",
            paths: &[b"a:b", b"aab", b"axb", b"a[b"],
        },
    ]);
}

#[tokio::test]
async fn fixed_whitespace_only_pattern_is_dropped() {
    // git: `!<tab>` re-includes a file named by a tab; gix dropped the line.
    assert_left_to_git(b"*\n!.gitignore\n!plain.txt\n!\t\n", &[], &[b"\t"]).await;
}

#[test]
fn fixed_whitespace_only_pattern_walk() {
    assert_refused(&[
        Case {
            rules: b"\t\n",
            paths: &[b"\t", b"x"],
        },
        Case {
            rules: b"\x0c\n",
            paths: &[b"\x0c", b"x"],
        },
        Case {
            rules: b"*\n!\t\n",
            paths: &[b"\t", b"x"],
        },
    ]);
}

#[tokio::test]
async fn fixed_double_star_after_a_literal_prefix() {
    // git compares the literal prefix `ab` first and wildmatches the rest, `**/c`, where
    // `**` now starts the pattern and matches across slashes: `abz/q/c` is ignored. gix
    // wildmatches `ab**/c` whole, `**` not after a slash is `*`: troupe staged the file.
    assert_left_to_git(b"ab**/c\n", &[], &[b"abz/q/c", b"ab/q/c", b"abz/c"]).await;
}

#[tokio::test]
async fn fixed_long_pattern_hits_the_recursion_limit() {
    // `*a` 70 times matches `a` x 70 for git; gix stops at depth 64 and answers no match.
    let rules = [b"*a".repeat(70), b"\n".to_vec()].concat();
    let name = b"a".repeat(70);
    let deep_rules = [b"**/".repeat(70), b"zz\n".to_vec()].concat();
    let mut rules = rules;
    rules.extend_from_slice(&deep_rules);
    assert_left_to_git(&rules, &[], &[&name, b"q/q/zz"]).await;
}

// ---------------------------------------------------------------------------------------
// Held: spellings
// ---------------------------------------------------------------------------------------

/// Every printable and control ASCII byte, and a non-UTF-8 one, between `a` and `b`.
fn three_byte_names() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (1u8..=127)
        .filter(|b| *b != b'/')
        .map(|b| vec![b'a', b, b'b'])
        .collect();
    v.push(b"a\xffb".to_vec());
    v
}

#[test]
fn held_classes_ranges_and_odd_brackets_over_every_byte() {
    let names = three_byte_names();
    let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
    let patterns: &[&[u8]] = &[
        b"a[[:cntrl:]]b",
        b"a[[:punct:]]b",
        b"a[[:print:]]b",
        b"a[[:graph:]]b",
        b"a[[:alnum:]]b",
        b"a[[:alpha:]]b",
        b"a[[:upper:]]b",
        b"a[[:lower:]]b",
        b"a[[:xdigit:]]b",
        b"a[[:digit:]]b",
        b"a[![:alpha:]]b",
        b"a[[:a]x]b",
        b"a[[:ab]]b",
        b"a[x[:ab]-z]b",
        b"a[[:a:]b",
        b"a[!]b",
        b"a[]-]b",
        b"a[!]-]b",
        b"a[--/]b",
        b"a[\\]]b",
        b"a[a-]b",
        b"a[-a]b",
        b"a[z-a]b",
        b"a[[]b",
        b"a[b",
        b"a\\",
        b"\\",
        b"a[^a]b",
        b"a[\\-\\]]b",
        b"a[[:alpha:]-z]b",
        b"a[[:alpha:][:digit:]]b",
        b"a[[:digit:]-]b",
        b"a[[.a.]]b",
        b"a[[=a=]]b",
        b"a[[:foo:]]b",
        b"a?b",
        b"a*b",
        b"a**b",
        b"a[\\xfe-\\xff]b",
    ];
    let cases: Vec<Case<'_>> = patterns
        .iter()
        .map(|p| Case {
            rules: p,
            paths: &names,
        })
        .collect();
    assert_same(&cases);
}

#[test]
fn held_escapes_spaces_anchors_and_stars() {
    let long = b"a".repeat(40);
    let long_rules = [b"*a".repeat(40), b"\n".to_vec()].concat();
    assert_same(&[
        Case {
            rules: &long_rules,
            paths: &[&long, b"b"],
        },
        Case {
            rules: b"x \t\n",
            paths: &[b"x \t", b"x ", b"x"],
        },
        Case {
            rules: b"x\\  \n",
            paths: &[b"x ", b"x", b"x  "],
        },
        Case {
            rules: b"x  \\\n",
            paths: &[b"x  ", b"x", b"x  \\"],
        },
        Case {
            rules: b"y\\ \\ \n",
            paths: &[b"y  ", b"y ", b"y"],
        },
        Case {
            rules: b"\\#x\n\\!y\n#z\n",
            paths: &[b"#x", b"!y", b"\\#x", b"#z", b"z"],
        },
        Case {
            rules: b"\\$x\n$y\n",
            paths: &[b"$x", b"\\$x", b"$y", b"y"],
        },
        Case {
            rules: b"!$x\n*\n!$y\n",
            paths: &[b"$x", b"$y"],
        },
        Case {
            rules: b" #x\n",
            paths: &[b" #x", b"#x"],
        },
        Case {
            rules: b"*\n!\\!a\n!\\\\b\n",
            paths: &[b"!a", b"\\b", b"b"],
        },
        Case {
            rules: b"/\n",
            paths: &[b"a", b"d/a"],
        },
        Case {
            rules: b"*/\n",
            paths: &[b"a", b"d/a"],
        },
        Case {
            rules: b"!/\n",
            paths: &[b"a"],
        },
        Case {
            rules: b"//\n",
            paths: &[b"a", b"d/a"],
        },
        Case {
            rules: b"/*/\n",
            paths: &[b"a", b"d/a", b"d/e/a"],
        },
        Case {
            rules: b"d//e\nf/./g\n./h\n",
            paths: &[b"d/e", b"f/g", b"h"],
        },
        Case {
            rules: b"\xef\xbb\xbf\xef\xbb\xbfe\ng\n\xef\xbb\xbff\n",
            paths: &[b"e", b"\xef\xbb\xbfe", b"f", b"\xef\xbb\xbff", b"g"],
        },
        Case {
            rules: b"\xff\n\\\xfe\n",
            paths: &[b"\xff", b"\xfe", b"\xfd"],
        },
        Case {
            rules: b"**foo\nd/**bar\nq**\n",
            paths: &[
                b"d/xfoo",
                b"foo",
                b"d/xbar",
                b"d/e/xbar",
                b"d/bar",
                b"q/x",
                b"qq",
            ],
        },
        Case {
            rules: b"a/**b/c\n",
            paths: &[b"a/xb/c", b"a/x/yb/c"],
        },
        Case {
            rules: b"*/**/c\n",
            paths: &[b"a/c", b"a/x/c", b"c"],
        },
        Case {
            rules: b"**\n!*/\n!c\n",
            paths: &[b"a/c", b"a/x/d", b"c"],
        },
        Case {
            rules: b"a\\/b\na[/]b\n",
            paths: &[b"a/b"],
        },
        Case {
            rules: b"m/n/\n!m/n/o\n",
            paths: &[b"m/n/o", b"m/n/p"],
        },
        Case {
            rules: b"/r/*\n!/r/s/\n/r/s/*\n!/r/s/t\n",
            paths: &[b"r/s/t", b"r/s/u", b"r/v"],
        },
        Case {
            rules: b"u/\n!u/\n",
            paths: &[b"u/w"],
        },
        Case {
            rules: b"**/\n!**/\n*\n!*/\n!*.keep\n",
            paths: &[b"p/x.keep", b"p/x", b"x.keep"],
        },
        Case {
            rules: b"a\r\n\xef\xbb\xbf\r\n!b\r\n",
            paths: &[b"a", b"b"],
        },
    ]);
}

#[tokio::test]
async fn held_spellings_end_to_end() {
    assert_second_track(
        b"x\\ \n\\#h\n\\!n\n[a-]*\n*[\\]]\nun[terminated\n\\\n/\n!/\n*.[oa]\nd/**/z\n",
        &[b"keep-"],
        &[
            b"x ",
            b"#h",
            b"!n",
            b"a1",
            b"-1",
            b"b]",
            b"un[terminated",
            b"untterminated",
            b"x.o",
            b"x.c",
            b"d/z",
            b"d/e/f/z",
            b"e/d/z",
        ],
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Held: rule files, tracked files, history
// ---------------------------------------------------------------------------------------

/// One project, one handle and the reference, tracked step by step.
struct Seq {
    f: Fixture,
    s: Snapshot,
    reference: Reference,
}

impl Seq {
    async fn new(files: &[(&str, &str)]) -> Self {
        let f = fixture();
        for (rel, content) in files {
            write(&f.project, rel, content);
        }
        let s = open(&f).await;
        Seq {
            f,
            s,
            reference: Reference::new(),
        }
    }

    fn p(&self) -> PathBuf {
        self.f.project.clone()
    }

    fn write(&self, rel: &str, content: &str) {
        write(&self.f.project, rel, content);
    }

    fn rm(&self, rel: &str) {
        let path = self.f.project.join(rel);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).unwrap(),
            Ok(_) => std::fs::remove_file(path).unwrap(),
            Err(_) => {}
        }
    }

    /// Tracks, asserts git's tree; returns the git processes the track ran.
    async fn step(&self, what: &str) -> u64 {
        check(&self.s, &self.f, &self.reference, what).await
    }

    /// As [`Seq::step`], after the racy margin, and asserts no git ran (the rules were
    /// matched in process).
    async fn settled_step(&self, what: &str) {
        settle().await;
        let runs = self.step(what).await;
        assert_eq!(runs, 0, "{what}: no git");
    }
}

#[tokio::test]
async fn held_negations_cannot_re_include_below_an_excluded_directory() {
    let q = Seq::new(&[
        (
            ".gitignore",
            "build/\n!build/keep\n!build/sub/\n!build/sub/x\n",
        ),
        ("a.txt", "a\n"),
        ("build/o", "o\n"),
    ])
    .await;
    q.step("start").await;
    q.write("build/keep", "k\n");
    q.write("build/sub/x", "x\n");
    q.write("build/sub/.gitignore", "!*\n");
    q.write("build/sub/y", "y\n");
    q.settled_step("re-included names below an excluded directory")
        .await;
    // `!` in a file of its own below the excluded directory: never read.
    q.write("build/.gitignore", "!keep\n");
    q.write("other/build/n", "n\n");
    q.settled_step("a rule file inside the excluded directory")
        .await;
    // Only the file matched, not the directory: re-inclusion works.
    q.write(
        ".gitignore",
        "build/*\n!build/keep\n!build/sub/\n!build/sub/x\n",
    );
    settle().await;
    q.step("build/* instead of build/").await;
    q.write("build/sub/z", "z\n");
    q.settled_step("then a new file").await;
}

#[tokio::test]
async fn held_directory_excluded_while_it_holds_tracked_files() {
    let q = Seq::new(&[("d/a", "a\n"), ("d/e/b", "b\n"), ("top", "t\n")]).await;
    q.step("start").await;
    q.write(".gitignore", "d/\n");
    settle().await;
    q.step("d/ excluded with tracked files").await;
    q.write("d/new", "untracked in an excluded directory\n");
    q.write("d/e/new", "deeper\n");
    q.write("d/f/new", "a new directory\n");
    q.write("d/.gitignore", "!new\n");
    q.write("d/a", "edited while tracked\n");
    q.settled_step("new files in the excluded directory").await;
    q.rm("d/a");
    q.settled_step("a tracked file deleted").await;
    q.write("d/a", "made again: ignored now\n");
    q.settled_step("made again").await;
    q.rm("d/e/b");
    q.write("d/e/b/c", "a file became a directory\n");
    q.settled_step("tracked file to directory").await;
    q.rm("d/e/b");
    q.write("d/e/b", "and back\n");
    q.settled_step("directory to file").await;
    q.write(".gitignore", "d/*\n!d/e/\n");
    settle().await;
    q.step("rules relaxed").await;
    q.write("d/e/more", "more\n");
    q.settled_step("a file where the rules allow").await;
}

#[tokio::test]
async fn held_rule_files_that_ignore_themselves() {
    let q = Seq::new(&[
        (".gitignore", ".gitignore\n*.log\n"),
        ("sub/.gitignore", "/.gitignore\n!keep.log\n"),
        ("ign/.gitignore", "*\n"),
        ("a.log", "a\n"),
        ("sub/keep.log", "k\n"),
        ("ign/x", "x\n"),
    ])
    .await;
    q.step("start").await;
    q.write("sub/new.log", "n\n");
    q.write("ign/y", "y\n");
    q.settled_step("new files").await;
    // A rule file git ignores still decides: edited, then gone.
    q.write("sub/.gitignore", "/.gitignore\n!*.log\n");
    settle().await;
    q.step("an ignored rule file edited").await;
    q.write("sub/other.log", "o\n");
    q.settled_step("under it").await;
    q.rm("sub/.gitignore");
    settle().await;
    q.step("an ignored rule file deleted").await;
    q.write("sub/third.log", "t\n");
    q.settled_step("then").await;
}

#[tokio::test]
async fn held_rule_files_that_are_not_regular_files() {
    let q = Seq::new(&[
        (".gitignore", "*.log\n"),
        ("a.txt", "a\n"),
        ("b.log", "b\n"),
    ])
    .await;
    q.step("start").await;
    let p = q.p();
    // A symbolic link: git does not follow it.
    std::fs::create_dir_all(p.join("l")).unwrap();
    q.write("rules", "*.txt\n");
    std::os::unix::fs::symlink("../rules", p.join("l/.gitignore")).unwrap();
    q.write("l/x.txt", "x\n");
    settle().await;
    q.step("a symlinked .gitignore").await;
    q.step("again").await;
    // A directory.
    q.write("g/.gitignore/inner", "*\n");
    q.write("g/y.txt", "y\n");
    settle().await;
    q.step("a directory named .gitignore").await;
    // A FIFO is left out: git itself blocks opening one (no writer), so does the
    // reference; troupe refuses it and leaves the track to that same git.
    q.rm("g");
    q.rm("l");
    settle().await;
    q.step("all gone").await;
    q.write("n.log", "n\n");
    q.write("n.txt", "n\n");
    q.settled_step("matched again").await;
}

#[tokio::test]
async fn held_unreadable_rule_file() {
    use std::os::unix::fs::PermissionsExt;
    let q = Seq::new(&[
        (".gitignore", "*.log\n"),
        ("s/.gitignore", "*.txt\n"),
        ("a.txt", "a\n"),
        ("s/b.txt", "b\n"),
    ])
    .await;
    q.step("start").await;
    let path = q.p().join("s/.gitignore");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    q.write("s/c.txt", "c\n");
    settle().await;
    // Root reads it anyway; git warns and skips it otherwise: either way git's tree.
    q.step("mode 000").await;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    q.write("s/d.txt", "d\n");
    settle().await;
    q.step("readable again").await;
}

#[tokio::test]
async fn held_rules_rewritten_within_the_racy_margin() {
    let q = Seq::new(&[
        (".gitignore", "a.log\n"),
        ("a.log", "a\n"),
        ("b.log", "b\n"),
    ])
    .await;
    q.step("start").await;
    settle().await;
    q.step("settled").await;
    // Same size, at once, several times, each followed by a track at once.
    for (rules, new) in [
        ("b.log\n", "c.log"),
        ("c.log\n", "d.log"),
        ("a.log\n", "e.log"),
    ] {
        q.write(".gitignore", rules);
        q.write(new, "n\n");
        q.step(rules).await;
        q.write(&format!("x-{new}"), "x\n");
        q.step(rules).await;
    }
    // The project's info/exclude, likewise.
    q.write(".git/info/exclude", "*.tmp\n");
    q.write("a.tmp", "a\n");
    q.step("info/exclude").await;
    q.write(".git/info/exclude", "*.bak\n");
    q.write("a.bak", "a\n");
    q.step("info/exclude swapped at once").await;
    q.write("b.tmp", "b\n");
    q.settled_step("settled").await;
}

#[tokio::test]
async fn held_symlinks_to_directories_and_directory_patterns() {
    let q = Seq::new(&[
        (".gitignore", "ld/\nreal/\n!keep\n"),
        ("real/x", "x\n"),
        ("other/y", "y\n"),
    ])
    .await;
    let p = q.p();
    std::os::unix::fs::symlink("other", p.join("ld")).unwrap();
    std::os::unix::fs::symlink("real", p.join("lr")).unwrap();
    q.step("start").await;
    std::os::unix::fs::symlink("other", p.join("keep")).unwrap();
    std::fs::create_dir_all(p.join("s")).unwrap();
    std::os::unix::fs::symlink("../real", p.join("s/ld")).unwrap();
    q.settled_step("more links").await;
    // A link becomes the directory the pattern names, and back.
    q.rm("ld");
    q.write("ld/z", "z\n");
    q.settled_step("link to directory").await;
    q.rm("ld");
    std::os::unix::fs::symlink("other", p.join("ld")).unwrap();
    q.settled_step("directory to link").await;
}

#[tokio::test]
async fn held_info_exclude_precedence() {
    let q = Seq::new(&[
        (".git/info/exclude", "!*.log\n*.tmp\ndir/\n"),
        (".gitignore", "*.log\n!keep.tmp\n"),
        ("sub/.gitignore", "!x.log\n"),
        ("a.log", "a\n"),
        ("keep.tmp", "k\n"),
        ("b.tmp", "b\n"),
        ("sub/x.log", "x\n"),
        ("dir/z", "z\n"),
    ])
    .await;
    q.step("start").await;
    q.write("c.log", "c\n");
    q.write("c.tmp", "c\n");
    q.write("sub/y.log", "y\n");
    q.write("sub/dir/w", "w\n");
    q.settled_step("new files").await;
    q.write(".git/info/exclude", "!*.log\n*.tmp\n");
    settle().await;
    q.step("info/exclude changed").await;
    q.write("dir/new", "n\n");
    q.settled_step("after").await;
    q.rm(".git/info/exclude");
    std::fs::create_dir_all(q.p().join(".git/info/exclude")).unwrap();
    settle().await;
    q.step("info/exclude a directory").await;
    q.rm(".git/info/exclude");
    settle().await;
    q.step("info/exclude gone").await;
}

#[tokio::test]
async fn held_odd_names() {
    let q = Seq::new(&[(".gitignore", "*.o\n")]).await;
    q.step("start").await;
    let p = q.p();
    let rules: &[u8] = b"*.o\n\\#*\n!\\#keep\nback\\\\slash\nnon-\xff-utf8\n*[\\xfe]*\n";
    put(&p, b".gitignore", rules);
    for name in [
        &b"#h"[..],
        b"#keep",
        b"!bang",
        b"back\\slash",
        b"non-\xff-utf8",
        b"x\xfey",
        b"line\nbreak.o",
        b"line\nbreak",
        b"tab\tname",
        b"d/#h",
        b"d/back\\slash/x",
        b"plain",
    ] {
        put(&p, name, b"n\n");
    }
    settle().await;
    q.step("odd names").await;
    q.step("again").await;
    put(&p, b"more.o", b"m\n");
    settle().await;
    q.step("one more").await;
}

#[tokio::test]
async fn held_stable_project_runs_no_git() {
    let q = Seq::new(&[
        (".gitignore", "*.log\nbuild/\n"),
        ("sub/.gitignore", "!x.log\n"),
        (".git/info/exclude", "*.tmp\n"),
        ("a.txt", "a\n"),
        ("b.log", "b\n"),
        ("sub/x.log", "x\n"),
        ("build/o", "o\n"),
        ("c.tmp", "c\n"),
    ])
    .await;
    q.step("start").await;
    settle().await;
    q.step("settled").await;
    settle().await;
    for k in 0..3 {
        assert_eq!(
            q.step(&format!("stable {k}")).await,
            0,
            "stable {k}: no git"
        );
    }
    q.write("new.txt", "n\n");
    q.settled_step("a new file").await;
    settle().await;
    assert_eq!(q.step("stable again").await, 0);
}

#[tokio::test]
async fn held_two_handles_and_clones() {
    let q = Seq::new(&[
        (".gitignore", "*.log\n"),
        ("a.txt", "a\n"),
        ("a.log", "a\n"),
    ])
    .await;
    q.step("start").await;
    let clone = q.s.clone();
    let other = open(&q.f).await;
    q.write("b.log", "b\n");
    q.write("b.txt", "b\n");
    settle().await;
    check(&clone, &q.f, &q.reference, "clone").await;
    q.write(".gitignore", "*.txt\n");
    q.write("c.log", "c\n");
    settle().await;
    check(&other, &q.f, &q.reference, "another handle, rules changed").await;
    q.write("d.log", "d\n");
    settle().await;
    q.step("first handle").await;
    drop(other);
    drop(clone);
    q.write("e.txt", "e\n");
    q.settled_step("alone").await;
}

#[tokio::test]
async fn held_revert_then_tracks() {
    let q = Seq::new(&[
        (".gitignore", "*.log\n"),
        ("a.txt", "a\n"),
        ("x.log", "ignored\n"),
        ("d/y", "y\n"),
    ])
    .await;
    q.step("start").await;
    let t0 = q.s.track().await.unwrap();
    q.write(".gitignore", "*.log\nd/\n");
    q.write("a.txt", "changed\n");
    q.write("d/y", "changed under a now excluded directory\n");
    settle().await;
    q.step("d/ excluded").await;
    let t1 = q.s.track().await.unwrap();
    // The rules stay: `d/y` goes back under an excluded directory, tracked.
    let files: Vec<PathBuf> =
        q.s.changed_files(&t1, &t0)
            .await
            .unwrap()
            .into_iter()
            .filter(|f| !f.ends_with(".gitignore"))
            .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    q.s.revert(&[Patch { hash: t0, files }]).await.unwrap();
    assert_eq!(std::fs::read_to_string(q.p().join("d/y")).unwrap(), "y\n");
    settle().await;
    q.step("reverted").await;
    q.write("d/z", "new in the excluded directory\n");
    q.write("d/y", "edited again\n");
    q.settled_step("after the revert").await;
    q.rm("d/y");
    q.settled_step("the tracked file deleted").await;
    q.write("d/y", "made again: ignored\n");
    q.settled_step("made again").await;
    q.write("x2.log", "x\n");
    q.settled_step("again").await;
}

#[tokio::test]
async fn held_deep_nesting_and_many_rule_files() {
    let mut files: Vec<(String, String)> = Vec::new();
    let mut dir = String::new();
    for k in 0..40u32 {
        dir.push_str(&format!("d{k}/"));
        let rule = if k % 2 == 0 {
            format!("*.l{k}\n!*.l{}\n", k.saturating_sub(1))
        } else {
            format!("!*.l{}\nx{k}/\n", k - 1)
        };
        files.push((format!("{dir}.gitignore"), rule));
        files.push((format!("{dir}f.l{k}"), "f\n".into()));
        files.push((format!("{dir}f.l{}", k.saturating_sub(1)), "f\n".into()));
        files.push((format!("{dir}x{k}/g"), "g\n".into()));
    }
    for k in 0..100 {
        files.push((format!("w{k}/.gitignore"), format!("*.{k}\n")));
        files.push((format!("w{k}/a.{k}"), "a\n".into()));
        files.push((format!("w{k}/a.{}", k + 1), "a\n".into()));
    }
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let q = Seq::new(&refs).await;
    q.step("start").await;
    q.write(&format!("{dir}new.l39"), "n\n");
    q.write(&format!("{dir}new.l38"), "n\n");
    q.write("w5/b.5", "b\n");
    q.write("w5/b.6", "b\n");
    q.settled_step("new files deep down").await;
}
