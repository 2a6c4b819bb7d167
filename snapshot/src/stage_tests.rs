//! Tests of staging in process (`stage`): every staged tree is the one git gives, every
//! diff computed without git is git's, and git's own path starts from what staging left.

use super::tests::{Fixture, fixture, open, oracle_on, read, settle, shadow_git, write};
use super::*;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;

/// A shadow repository that only git ever touches (its index updated by `git add` on every
/// track): the tree git alone would give after the same history.
pub(super) struct Reference {
    pub(super) dir: tempfile::TempDir,
}

impl Reference {
    pub(super) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("git")
            .args(["init", "--quiet", "--bare"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success());
        Reference { dir }
    }

    pub(super) fn tree(&self, f: &Fixture) -> String {
        // As `sync_exclude` copies it.
        let exclude = std::fs::read(f.project.join(".git/info/exclude")).unwrap_or_default();
        std::fs::create_dir_all(self.dir.path().join("info")).unwrap();
        std::fs::write(self.dir.path().join("info/exclude"), exclude).unwrap();
        oracle_on(self.dir.path(), f)
    }
}

/// `git diff-tree -r --raw --numstat` between two trees of `s`, parsed as `diff` parses it.
pub(super) fn git_diff(s: &Snapshot, f: &Fixture, a: &str, b: &str) -> Vec<FileChange> {
    if a == b {
        return Vec::new();
    }
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(s.git_dir())
        .args([
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--raw",
            "--numstat",
            a,
            b,
            "--",
        ])
        .current_dir(&f.project)
        .output()
        .unwrap();
    assert!(out.status.success());
    git::parse_raw_numstat(&out.stdout)
}

/// Asserts that `diff` and `changed_files` from every tree of `history` to `tree` are
/// `git diff-tree`'s.
pub(super) async fn diffs_match_git(
    s: &Snapshot,
    f: &Fixture,
    history: &[String],
    tree: &str,
    what: &str,
) {
    for from in history {
        let expected = git_diff(s, f, from, tree);
        assert_eq!(
            s.diff(from, tree).await.unwrap(),
            expected,
            "{what}: diff {from}..{tree}"
        );
        let files: Vec<PathBuf> = expected.iter().map(|c| f.project.join(&c.file)).collect();
        assert_eq!(
            s.changed_files(from, tree).await.unwrap(),
            files,
            "{what}: changed_files {from}..{tree}"
        );
    }
}

/// One random change to a project without ignore rules (a seeded draw `r`): content written
/// or appended, files deleted, renamed, made executable, turned into directories and back,
/// symbolic links, FIFOs, empty directories, names with spaces and non-UTF-8 bytes, whole
/// directories removed; now and then a `.gitignore` comes or goes (git's path, then back),
/// or, with `rules`, the rules change (`.gitignore` or the project's `info/exclude`, with
/// negations and directory rules; never none).
fn staging_change(p: &Path, r: u64, rules: bool) {
    // A write where a file now stands for a directory (or the reverse) fails: skipped.
    let write = |p: &Path, rel: &str, content: &str| {
        let path = p.join(rel);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(path, content);
    };
    let dirs = ["", "src/", "src/deep/", "a b/", "x/"];
    let dir = dirs[(r % 5) as usize];
    let names = ["f0.txt", "f1", "f0.txt.bak", "f0", "\u{e9}.md"];
    let name = format!("{dir}{}", names[((r >> 4) % 5) as usize]);
    let path = p.join(&name);
    let text = |k: u64| "line\n".repeat((k % 7) as usize) + &format!("{k}");
    match (r >> 8) % 16 {
        0..=3 => write(p, &name, &text(r >> 16)),
        4 => {
            let _ = std::fs::remove_file(&path);
        }
        5 => {
            if let Ok(m) = std::fs::symlink_metadata(&path)
                && m.is_file()
            {
                let mode = m.permissions().mode() ^ 0o100;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        6 => {
            let _ = std::fs::remove_file(p.join("link"));
            let target = ["f0.txt", "src", "missing", "a b/f1"][((r >> 16) % 4) as usize];
            std::os::unix::fs::symlink(target, p.join("link")).unwrap();
        }
        7 => {
            let _ = std::fs::rename(&path, p.join(format!("{dir}moved{}", (r >> 16) % 2)));
        }
        8 => {
            if !dir.is_empty() {
                let _ = std::fs::remove_dir_all(p.join(dir));
            }
        }
        9 => {
            // A file where a directory was, or the other way round.
            let _ = std::fs::remove_dir_all(&path);
            let _ = std::fs::remove_file(&path);
            if (r >> 16).is_multiple_of(2) {
                write(p, &format!("{name}/inner.txt"), "inner\n");
            } else {
                write(p, &name, "flat\n");
            }
        }
        10 => {
            let fifo = p.join(format!("{dir}pipe"));
            if let Some(parent) = fifo.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let _ = rustix::fs::mknodat(
                rustix::fs::CWD,
                &fifo,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o644),
                0,
            );
        }
        11 => {
            let _ = std::fs::create_dir_all(p.join(format!("{dir}empty/deeper")));
        }
        12 => {
            let odd = std::ffi::OsStr::from_bytes(b"latin\xe9 name.txt");
            let at = p.join(dir);
            let _ = std::fs::create_dir_all(&at);
            let _ = std::fs::write(at.join(odd), text(r >> 20));
        }
        13 if rules => {
            let sets = [
                "*.bak\n",
                "*.bak\n!f0.txt.bak\n",
                "x/\n*.md\n",
                "f1\nmoved*\n",
                "src/deep/\n!src/deep/f0\n",
            ];
            if (r >> 16).is_multiple_of(4) {
                write(
                    p,
                    ".git/info/exclude",
                    ["pipe\n", "", "n1.txt\n"][((r >> 18) % 3) as usize],
                );
            } else {
                write(p, ".gitignore", sets[((r >> 18) % 5) as usize]);
            }
        }
        13 => {
            if (r >> 16).is_multiple_of(3) {
                write(p, ".gitignore", "*.bak\n");
            } else {
                let _ = std::fs::remove_file(p.join(".gitignore"));
            }
        }
        14 => {
            // Appended to, so the size changes but not always the mtime's second.
            use std::io::Write;
            if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(&path) {
                let _ = file.write_all(b"more\n");
            }
        }
        _ => write(p, &format!("{dir}n{}.txt", (r >> 16) % 4), &text(r >> 24)),
    }
}

#[tokio::test]
async fn a_staged_tree_and_its_diffs_always_equal_what_git_gives() {
    // 150 seeded rounds of changes; after each, the tree `track` returns equals the one a
    // shadow repository run only by git gives, and every diff `diff` gives (from the first
    // tree, from the previous one) equals `git diff-tree`'s. Most rounds run no git at all.
    let (without_git, _) = seeded_rounds(false, 0x9e37_79b9_7f4a_7c15).await;
    assert!(
        without_git >= 75,
        "staged without git in {without_git} rounds of 150"
    );
}

#[tokio::test]
async fn with_ignore_rules_a_staged_tree_always_equals_what_git_gives() {
    // The same with rules always present and changing: files git once tracked then ignored,
    // deleted and made again; negations; directory rules; the project's `info/exclude`.
    // Staging asks `git check-ignore` only about files new to the tree.
    // Most rounds make a new file: one `check-ignore`, where git's own path ran three.
    let (without_git, one_git) = seeded_rounds(true, 0x2545_f491_4f6c_dd1d).await;
    assert!(
        without_git >= 10 && without_git + one_git >= 90,
        "of 150 rounds, {without_git} without git, {one_git} with one process"
    );
}

/// 150 seeded rounds of [`staging_change`]s, each checked against a [`Reference`]; returns
/// how many rounds ran no git process and how many ran one.
async fn seeded_rounds(rules: bool, mut seed: u64) -> (usize, usize) {
    let f = fixture();
    write(&f.project, "f0.txt", "zero\n");
    write(&f.project, "src/lib.rs", "//\n");
    if rules {
        write(&f.project, ".gitignore", "*.bak\n");
    }
    let s = open(&f).await;
    let reference = Reference::new();
    let first = s.track().await.unwrap();
    assert_eq!(first, reference.tree(&f));
    let mut previous = first.clone();
    let (mut without_git, mut one_git, mut diffs_without_git) = (0, 0, 0);
    for round in 0..150 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let r = seed;
        for k in 0..=(r >> 60) % 3 {
            staging_change(&f.project, r.rotate_left(k as u32 * 7), rules);
        }
        if !(r >> 40).is_multiple_of(3) {
            settle().await;
        }
        let runs = s.git_runs();
        let tree = s.track().await.unwrap();
        match s.git_runs() - runs {
            0 => without_git += 1,
            1 => one_git += 1,
            _ => {}
        }
        assert_eq!(tree, reference.tree(&f), "round {round}");
        for from in [&first, &previous] {
            let runs = s.git_runs();
            let ours = s.diff(from, &tree).await.unwrap();
            if s.git_runs() == runs {
                diffs_without_git += 1;
            }
            assert_eq!(
                ours,
                git_diff(&s, &f, from, &tree),
                "round {round}: diff from {from}"
            );
        }
        previous = tree;
    }
    assert!(
        diffs_without_git >= 40,
        "{diffs_without_git} of 300 diffs without git"
    );
    // Every object staging wrote is one git reads.
    shadow_git(&s, &f, &["fsck", "--no-dangling", "--no-progress"]);
    (without_git, one_git)
}

#[tokio::test]
async fn a_track_that_changes_files_runs_no_git_without_ignore_rules() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let t0 = s.track().await.unwrap();
    let runs = s.git_runs();
    write(&f.project, "out/new.txt", "new\n");
    let t1 = s.track().await.unwrap();
    std::fs::remove_file(f.project.join("a.txt")).unwrap();
    let t2 = s.track().await.unwrap();
    assert_eq!(
        s.git_runs(),
        runs,
        "added and deleted files staged in process"
    );
    let added = s.diff(&t0, &t1).await.unwrap();
    assert_eq!(added.len(), 1);
    assert_eq!(
        (added[0].file.as_str(), added[0].status, added[0].additions),
        ("out/new.txt", ChangeStatus::Added, 1)
    );
    let both = s.diff(&t0, &t2).await.unwrap();
    assert_eq!(both, git_diff(&s, &f, &t0, &t2));
    assert_eq!(s.git_runs(), runs, "diffs of staged trees without git");
    // A file changed in place needs a line diff: git's.
    write(&f.project, "out/new.txt", "changed\nnow\n");
    let t3 = s.track().await.unwrap();
    let runs = s.git_runs();
    let changed = s.diff(&t2, &t3).await.unwrap();
    assert_eq!(s.git_runs(), runs + 1, "one diff-tree");
    assert_eq!((changed[0].additions, changed[0].deletions), (2, 1));
}

#[tokio::test]
async fn with_ignore_rules_new_files_are_matched_without_git() {
    let f = fixture();
    write(&f.project, ".gitignore", "*.log\n");
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let reference = Reference::new();
    // The rules are read again while their files are too recent to vouch for the parse.
    s.track().await.unwrap();
    settle().await;
    s.track().await.unwrap();
    write(&f.project, "b.txt", "b\n");
    write(&f.project, "b.log", "log\n");
    let runs = s.git_runs();
    let tree = s.track().await.unwrap();
    assert_eq!(s.git_runs(), runs, "the walk matched the rules: no git");
    assert_eq!(tree, reference.tree(&f));
    // A file already in the tree changed: staged again, the ignored one still left out.
    settle().await;
    write(&f.project, "b.txt", "b2\n");
    let runs = s.git_runs();
    s.track().await.unwrap();
    assert_eq!(s.git_runs(), runs);
    assert_eq!(
        shadow_git(&s, &f, &["ls-tree", "-r", "--name-only", &tree]),
        ".gitignore\na.txt\nb.txt\n"
    );
}

#[tokio::test]
async fn git_starts_from_the_staged_tree_when_rules_come_back() {
    // A file git once tracked, deleted while staging ran in process, then ignored by a new
    // rule and made again: git must not see it as tracked (a stale index would keep it in
    // every tree from then on).
    let f = fixture();
    write(&f.project, ".gitignore", "*.tmp\n");
    write(&f.project, "keep.txt", "k\n");
    write(&f.project, "x.log", "tracked once\n");
    let s = open(&f).await;
    let reference = Reference::new();
    assert_eq!(s.track().await.unwrap(), reference.tree(&f));
    std::fs::remove_file(f.project.join(".gitignore")).unwrap();
    settle().await;
    let runs = s.git_runs();
    assert_eq!(s.track().await.unwrap(), reference.tree(&f));
    std::fs::remove_file(f.project.join("x.log")).unwrap();
    assert_eq!(s.track().await.unwrap(), reference.tree(&f));
    assert_eq!(s.git_runs(), runs, "both staged in process");
    write(&f.project, ".gitignore", "*.log\n");
    write(&f.project, "x.log", "made again\n");
    let tree = s.track().await.unwrap();
    assert_eq!(tree, reference.tree(&f));
    assert_eq!(
        shadow_git(&s, &f, &["ls-tree", "-r", "--name-only", &tree]),
        ".gitignore\nkeep.txt\n"
    );
}

#[tokio::test]
async fn a_revert_restores_files_from_staged_trees() {
    let f = fixture();
    write(&f.project, "a.txt", "before\n");
    let s = open(&f).await;
    let before = s.track().await.unwrap();
    let runs = s.git_runs();
    write(&f.project, "a.txt", "after\n");
    write(&f.project, "new/b.txt", "b\n");
    let after = s.track().await.unwrap();
    assert_eq!(s.git_runs(), runs, "staged in process");
    let files = s.changed_files(&before, &after).await.unwrap();
    s.revert(&[Patch {
        hash: before.clone(),
        files,
    }])
    .await
    .unwrap();
    assert_eq!(read(&f.project, "a.txt").as_deref(), Some("before\n"));
    assert!(!f.project.join("new/b.txt").exists());
    assert_eq!(s.track().await.unwrap(), before);
}

#[tokio::test]
async fn objects_collected_by_gc_are_written_again() {
    // After a gc (which may collect unreachable objects: staged ones are until the index
    // holds them), staging hashes every file again instead of trusting ids it remembers.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    settle().await;
    let t = s.track().await.unwrap();
    s.gc().await.unwrap();
    // As a prune would leave it: no object at all.
    let objects = s.git_dir().join("objects");
    for entry in std::fs::read_dir(&objects).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.len() == 2 || name == "pack" {
            std::fs::remove_dir_all(&path).unwrap();
        }
    }
    std::fs::create_dir_all(objects.join("pack")).unwrap();
    assert_eq!(s.track().await.unwrap(), t);
    shadow_git(&s, &f, &["cat-file", "-e", &format!("{t}:a.txt")]);
}

#[tokio::test]
async fn a_name_git_may_refuse_leaves_the_track_to_git() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    s.track().await.unwrap();
    write(&f.project, "odd\\name.txt", "x\n");
    let runs = s.git_runs();
    let tree = s.track().await.unwrap();
    assert!(s.git_runs() > runs);
    assert_eq!(tree, oracle_on(super::tests::shadow_copy(&s).path(), &f));
}

#[tokio::test]
async fn content_git_keeps_for_an_unchanged_file_is_kept() {
    // A filter converted a file's content (`text`: CRLF stored as LF); the filter goes, the
    // file stays as it was: git keeps the converted blob (the index entry is clean), and so
    // must staging, which takes the entries of an index git wrote as its seed.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "crlf.txt", "one\r\ntwo\r\n");
    write(&f.project, ".gitattributes", "*.txt text\n");
    // The index must be written in a later second than the file (git's racy rule).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let s = open(&f).await;
    let reference = Reference::new();
    assert_eq!(s.track().await.unwrap(), reference.tree(&f));
    std::fs::remove_file(f.project.join(".gitattributes")).unwrap();
    settle().await;
    let tree = s.track().await.unwrap();
    assert_eq!(tree, reference.tree(&f));
    let blob = shadow_git(&s, &f, &["cat-file", "-p", &format!("{tree}:crlf.txt")]);
    assert_eq!(blob, "one\ntwo\n", "the converted content kept");
    // Once the file changes, it is hashed as it is.
    write(&f.project, "crlf.txt", "three\r\n");
    settle().await;
    let runs = s.git_runs();
    let tree = s.track().await.unwrap();
    assert_eq!(s.git_runs(), runs, "staged in process");
    assert_eq!(tree, reference.tree(&f));
}

#[test]
fn shadow_configuration_that_rewrites_entries_is_not_plain() {
    use fingerprint::plain_config;
    let init = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";
    assert!(plain_config(init));
    assert!(plain_config(
        "[core]\n\tignorecase = false\n\tsymlinks = false\n"
    ));
    for other in [
        "[core]\n\tfilemode = false\n",
        "[core]\n\tignorecase = true\n",
        "[core]\n\tignorecase\n",
        "[core]\n\tfilemode = \"false\"\n",
        "[core]\n\tfilemode = true ; really false? no: anything unknown\n",
        "[core]\n\tfilemode =\n",
        "[core] filemode = false\n",
        "[core]\n\tfilemode = tr\\\nue\n",
        "[core]\n\tprotecthfs = true\n",
        "[extensions]\n\tobjectformat = sha256\n",
        "[core\n",
        "filemode = true\n",
        "[user]\n\tname = x\n",
    ] {
        assert!(!plain_config(other), "{other:?}");
    }
}
