//! Hostile input against staging in process (`stage`): each test names the attack and
//! asserts the tree git alone would give. `held_*`: attacks that found nothing; `fixed_*`:
//! the review's defects, fixed since (NTFS short names of links, shadow configuration
//! spellings, `core.protectHFS`, an index left behind by an ended process, a submodule's
//! entry in the index, an outside prune, non-UTF-8 names in git's numstat).

use super::stage_tests::{Reference, diffs_match_git, git_diff};
use super::tests::{Fixture, fixture, open, settle, shadow_git, write};
use super::*;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::Command as StdCommand;

impl Reference {
    /// `git add --all` on the reference: whether git accepted the work tree.
    fn add_ok(&self, f: &Fixture) -> bool {
        StdCommand::new("git")
            .arg("--git-dir")
            .arg(self.dir.path())
            .arg("--work-tree")
            .arg(&f.project)
            .args(["add", "--all"])
            .current_dir(&f.project)
            .output()
            .unwrap()
            .status
            .success()
    }

    /// `git ls-tree -r` of `tree` in the reference.
    fn ls_tree(&self, tree: &str) -> String {
        let out = StdCommand::new("git")
            .arg("--git-dir")
            .arg(self.dir.path())
            .args(["ls-tree", "-r", tree])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn append_config(&self, text: &str) {
        append(&self.dir.path().join("config"), text);
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

/// Tracks, asserts the tree is the reference's, and that `diff` and `changed_files` from
/// every earlier tree in `history` are git's; pushes the tree on `history`.
async fn round(
    s: &Snapshot,
    f: &Fixture,
    reference: &Reference,
    history: &mut Vec<String>,
    what: &str,
) -> String {
    let tree = s.track().await.unwrap();
    assert_eq!(tree, reference.tree(f), "{what}: tree");
    diffs_match_git(s, f, history, &tree, what).await;
    history.push(tree.clone());
    tree
}

fn fsck(s: &Snapshot, f: &Fixture) {
    shadow_git(s, f, &["fsck", "--no-dangling", "--no-progress"]);
}

fn chmod(p: &Path, rel: &str, mode: u32) {
    std::fs::set_permissions(p.join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
}

fn symlink(target: &[u8], p: &Path, rel: &str) {
    let at = p.join(rel);
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), at).unwrap();
}

fn write_bytes(p: &Path, rel: &[u8], content: &[u8]) {
    let path = p.join(std::ffi::OsStr::from_bytes(rel));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Whether the last track of `s` ran no git (staged in process).
async fn staged_in_process(s: &Snapshot) -> (String, bool) {
    let runs = s.git_runs();
    let tree = s.track().await.unwrap();
    (tree, s.git_runs() == runs)
}

// ---------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn held_names_sorting_around_slash_and_odd_bytes() {
    let f = fixture();
    let p = &f.project;
    write(p, "seed.txt", "seed\n");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    for name in [
        "a-b",
        "a.b",
        "a/x",
        "a/y/z",
        "a0",
        "a b",
        "ab/c",
        "a.b.c/d",
        "foo.",
        "foo ",
        "-rf",
        "#hash",
        "!bang",
        "*?[x]",
        "q\"uote",
        "sp ace",
        "\u{e9}t\u{e9}",
        "e\u{301}",
        "x/a-",
        "x/a/",
        "x/a.",
        "x/a0",
    ] {
        let rel = name
            .strip_suffix('/')
            .map_or(name.to_string(), |n| format!("{n}/in"));
        write(p, &rel, name);
    }
    // Non-UTF-8 names whose lossy forms differ (two that collide: see
    // `defect_non_utf8_names_colliding_when_lossy_get_each_others_counts`).
    write_bytes(p, b"bin/\xff.raw", b"latin\n");
    write_bytes(p, b"bin/a\xfe\xfd.raw", b"other\n");
    let long = "l".repeat(255);
    write(p, &format!("deep/{long}"), "long\n");
    let deep = (0..40)
        .map(|i| format!("d{i}"))
        .collect::<Vec<_>>()
        .join("/");
    write(p, &format!("{deep}/leaf"), "leaf\n");
    settle().await;
    let (tree, fast) = staged_in_process(&s).await;
    assert!(fast, "expected the names to be staged in process");
    assert_eq!(tree, reference.tree(&f), "odd names");
    history.push(tree);
    // A file becomes a directory and a directory a file, around the same sort points.
    std::fs::remove_file(p.join("a0")).unwrap();
    write(p, "a0/inner", "now a dir\n");
    std::fs::remove_dir_all(p.join("a")).unwrap();
    write(p, "a", "now a file\n");
    std::fs::remove_file(p.join("a-b")).unwrap();
    settle().await;
    round(&s, &f, &reference, &mut history, "file <-> directory").await;
    fsck(&s, &f);
}

#[tokio::test]
async fn held_names_git_refuses_leave_the_track_to_git() {
    // `.GIT/x`, `.git./x`, `.Git /x`, `git~1/x`, `GIT~1`: git refuses them (core.protectNTFS
    // is on by default); staging must not accept what git refuses.
    for name in [
        ".GIT/x",
        ".git./x",
        ".Git /x",
        "git~1/x",
        "GIT~1",
        "sub/.gIt/x",
    ] {
        let f = fixture();
        write(&f.project, "a.txt", "a\n");
        let s = open(&f).await;
        let reference = Reference::new();
        s.track().await.unwrap();
        assert!(reference.add_ok(&f));
        write(&f.project, name, "x\n");
        settle().await;
        let ours = s.track().await;
        let git_ok = reference.add_ok(&f);
        assert_eq!(
            ours.is_ok(),
            git_ok,
            "{name}: troupe {ours:?}, git ok: {git_ok}"
        );
        if git_ok {
            assert_eq!(ours.unwrap(), reference.tree(&f), "{name}");
        }
    }
}

#[tokio::test]
async fn fixed_ntfs_short_name_of_gitmodules_as_symlink() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let reference = Reference::new();
    s.track().await.unwrap();
    assert!(reference.add_ok(&f));
    symlink(b"a.txt", &f.project, "gitmod~1");
    settle().await;
    let git_ok = reference.add_ok(&f);
    assert!(!git_ok, "git itself refuses the link");
    let ours = s.track().await;
    let mut problems = Vec::new();
    if let Ok(tree) = &ours {
        problems.push(format!(
            "track gave {tree} where git errs:\n{}",
            shadow_git(&s, &f, &["ls-tree", "-r", tree])
        ));
        let read_tree = StdCommand::new("git")
            .arg("--git-dir")
            .arg(s.git_dir())
            .args(["read-tree", "--index-output=/dev/null", tree])
            .output()
            .unwrap();
        if !read_tree.status.success() {
            problems.push(format!(
                "git read-tree refuses it: {}",
                String::from_utf8_lossy(&read_tree.stderr).trim()
            ));
        }
    }
    // The link goes away and a rule comes: git's path, which flushes the index first.
    std::fs::remove_file(f.project.join("gitmod~1")).unwrap();
    write(&f.project, ".gitignore", "*.log\n");
    settle().await;
    let later = s.track().await;
    let expected = reference.tree(&f);
    if later.as_ref().ok() != Some(&expected) {
        problems.push(format!(
            "the next track (link gone, a .gitignore): {later:?}, git: {expected}"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test]
async fn held_gitignore_and_gitattributes_as_directories() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    write(p, ".gitignore/x.txt", "*.txt\n");
    write(p, "sub/.gitattributes/y", "* text eol=crlf\n");
    write(p, "sub/.gitmodules", "[submodule]\n");
    write(p, ".mailmap", "a <b>\n");
    settle().await;
    round(&s, &f, &reference, &mut history, "rule names as dirs").await;
    // No fsck: git's own tree (equal to this one) holds a `.gitattributes` tree, which fsck
    // reports (gitattributesBlob) whoever wrote it.
}

#[tokio::test]
async fn fixed_non_utf8_names_colliding_when_lossy_get_each_others_counts() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    let s = open(&f).await;
    s.without_fingerprints().await;
    let t0 = s.track().await.unwrap();
    write_bytes(p, b"\xff\xfe.raw", b"one\n");
    write_bytes(p, b"\xff\xfd.raw", b"two\nlines\n");
    let t1 = s.track().await.unwrap();
    let counts: Vec<u64> = s
        .diff(&t0, &t1)
        .await
        .unwrap()
        .iter()
        .map(|c| c.additions)
        .collect();
    let numstat = shadow_git(&s, &f, &["diff-tree", "-r", "--numstat", &t0, &t1]);
    assert_eq!(counts, vec![2, 1], "git --numstat:\n{numstat}");
}

// ---------------------------------------------------------------------------------------
// Modes, links, special files
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn held_executable_bits_other_than_the_owners() {
    let f = fixture();
    let p = &f.project;
    write(p, "seed", "s\n");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    let modes = [
        0o644, 0o744, 0o654, 0o645, 0o4644, 0o4755, 0o2710, 0o1777, 0o100, 0o000, 0o011, 0o6111,
    ];
    for (i, mode) in modes.iter().enumerate() {
        write(p, &format!("m/{i}"), &format!("{mode:o}\n"));
        chmod(p, &format!("m/{i}"), *mode);
    }
    settle().await;
    let (tree, fast) = staged_in_process(&s).await;
    assert!(fast);
    assert_eq!(tree, reference.tree(&f), "modes");
    for from in &history {
        assert_eq!(
            s.diff(from, &tree).await.unwrap(),
            git_diff(&s, &f, from, &tree)
        );
    }
    history.push(tree);
    // Every mode shifted by one: mode-only changes, diffed in process.
    for (i, _) in modes.iter().enumerate() {
        chmod(p, &format!("m/{i}"), modes[(i + 1) % modes.len()]);
    }
    settle().await;
    round(&s, &f, &reference, &mut history, "modes shifted").await;
    fsck(&s, &f);
}

#[tokio::test]
async fn held_symlinks_and_type_changes_with_the_same_blob() {
    let f = fixture();
    let p = &f.project;
    write(p, "src/lib.rs", "//\n");
    write(p, "plain", "target");
    write(p, "exe", "run");
    chmod(p, "exe", 0o755);
    symlink(b"back", p, "was-link");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    symlink(b"src", p, "to-dir");
    symlink(b"src/", p, "to-dir-slash");
    symlink(b"nowhere", p, "dangling");
    symlink(b"/etc", p, "absolute");
    symlink(b"\xff\xfe", p, "latin-target");
    symlink(b"two\nlines", p, "newline-target");
    symlink(b"../../..", p, "deep/up");
    // A link named like a directory entry, next to names sorting around '/'.
    symlink(b"a.b", p, "a");
    write(p, "a-b", "1\n");
    write(p, "a.b", "2\n");
    write(p, "a0/x", "3\n");
    settle().await;
    let (tree, fast) = staged_in_process(&s).await;
    assert!(fast);
    assert_eq!(tree, reference.tree(&f), "links");
    history.push(tree);
    // Type changes keeping the blob id: file -> link, executable -> link, link -> file.
    std::fs::remove_file(p.join("plain")).unwrap();
    symlink(b"target", p, "plain");
    std::fs::remove_file(p.join("exe")).unwrap();
    symlink(b"run", p, "exe");
    std::fs::remove_file(p.join("was-link")).unwrap();
    write(p, "was-link", "back");
    // A link to a directory becomes the directory, and a directory a link.
    std::fs::remove_file(p.join("to-dir")).unwrap();
    write(p, "to-dir/file", "real\n");
    std::fs::remove_dir_all(p.join("a0")).unwrap();
    symlink(b"a-b", p, "a0");
    settle().await;
    round(&s, &f, &reference, &mut history, "type changes").await;
    fsck(&s, &f);
}

#[tokio::test]
async fn held_fifos_sockets_empty_files_and_hard_links() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    std::fs::create_dir_all(p.join("only-fifo")).unwrap();
    std::fs::create_dir_all(p.join("only-socket")).unwrap();
    for fifo in ["pipe", "only-fifo/pipe"] {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p.join(fifo),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o755),
            0,
        )
        .unwrap();
    }
    let _socket = std::os::unix::net::UnixListener::bind(p.join("only-socket/sock")).unwrap();
    write(p, "empty", "");
    write(p, "e/empty", "");
    std::fs::create_dir_all(p.join("empty-dir/deeper")).unwrap();
    write(p, "h1", "shared\n");
    std::fs::hard_link(p.join("h1"), p.join("h2")).unwrap();
    std::fs::create_dir_all(p.join("sub")).unwrap();
    std::fs::hard_link(p.join("h1"), p.join("sub/h3")).unwrap();
    settle().await;
    let (tree, fast) = staged_in_process(&s).await;
    assert!(fast);
    assert_eq!(tree, reference.tree(&f), "special files");
    history.push(tree);
    // Written through one hard link: all three change, only one was written.
    std::fs::write(p.join("h1"), "changed through h1\n").unwrap();
    chmod(p, "h2", 0o755);
    settle().await;
    round(&s, &f, &reference, &mut history, "hard links").await;
    fsck(&s, &f);
}

// ---------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn held_same_size_rewrites_in_the_same_tick() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "aaaa");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    for i in 0..30u8 {
        let c = (b'a' + i % 26) as char;
        write(p, "a.txt", &c.to_string().repeat(4));
        write(p, "b.txt", &c.to_string().repeat(4));
        let tree = s.track().await.unwrap();
        assert_eq!(tree, reference.tree(&f), "round {i}: written");
        // Rewritten at once after the tracks: same size, likely the same tick as the walk.
        write(p, "b.txt", &((b'z' - i % 26) as char).to_string().repeat(4));
        let again = s.track().await.unwrap();
        assert_eq!(again, reference.tree(&f), "round {i}");
        history.push(again);
    }
}

#[tokio::test]
async fn held_same_size_rewrite_with_restored_mtime() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "aaaa\n");
    let s = open(&f).await;
    let reference = Reference::new();
    settle().await;
    let t0 = s.track().await.unwrap();
    assert_eq!(t0, reference.tree(&f));
    settle().await;
    assert_eq!(s.track().await.unwrap(), t0, "fingerprinted");
    let before = std::fs::symlink_metadata(p.join("a.txt")).unwrap();
    std::fs::write(p.join("a.txt"), "bbbb\n").unwrap();
    let times = std::fs::FileTimes::new()
        .set_modified(before.modified().unwrap())
        .set_accessed(before.accessed().unwrap());
    std::fs::File::options()
        .write(true)
        .open(p.join("a.txt"))
        .unwrap()
        .set_times(times)
        .unwrap();
    let t1 = s.track().await.unwrap();
    assert_eq!(t1, reference.tree(&f), "restored mtime, at once");
    settle().await;
    assert_eq!(s.track().await.unwrap(), reference.tree(&f), "settled");
    // Delete and make again under the same name with the old mtime (maybe the same inode).
    std::fs::remove_file(p.join("a.txt")).unwrap();
    std::fs::write(p.join("a.txt"), "cccc\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(p.join("a.txt"))
        .unwrap()
        .set_times(times)
        .unwrap();
    settle().await;
    assert_eq!(s.track().await.unwrap(), reference.tree(&f), "recreated");
}

// ---------------------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn held_files_at_and_past_the_size_limit_and_growing_past_it() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    write(p, "grow.bin", "small\n");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    let limit = MAX_UNTRACKED_BYTES as usize;
    write(p, "exact.bin", &"x".repeat(limit));
    settle().await;
    let (tree, fast) = staged_in_process(&s).await;
    assert!(fast, "a file of exactly the limit is staged");
    assert_eq!(tree, reference.tree(&f));
    history.push(tree);
    write(p, "over.bin", &"y".repeat(limit + 1));
    settle().await;
    round(&s, &f, &reference, &mut history, "one over").await;
    std::fs::remove_file(p.join("over.bin")).unwrap();
    settle().await;
    round(&s, &f, &reference, &mut history, "over gone").await;
    // A file staged in process (tracked) grows past the limit: git keeps tracked files.
    write(p, "grow.bin", &"z".repeat(limit + 10));
    settle().await;
    round(&s, &f, &reference, &mut history, "grown").await;
    write(p, "grow.bin", "small again\n");
    settle().await;
    round(&s, &f, &reference, &mut history, "shrunk").await;
    fsck(&s, &f);
}

#[tokio::test]
async fn held_thousands_of_files() {
    let f = fixture();
    let p = &f.project;
    for d in 0..40 {
        for i in 0..75 {
            write(p, &format!("d{d}/f{i}.txt"), &format!("{d} {i}\n"));
        }
    }
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    settle().await;
    round(&s, &f, &reference, &mut history, "3000 files").await;
    for d in 0..40 {
        write(p, &format!("d{d}/f{d}.txt"), "changed\n");
        write(p, &format!("d{d}/new"), "new\n");
    }
    std::fs::remove_dir_all(p.join("d7")).unwrap();
    settle().await;
    let (tree, fast) = staged_in_process(&s).await;
    assert!(fast);
    assert_eq!(tree, reference.tree(&f));
    assert_eq!(
        s.diff(&history[0], &tree).await.unwrap(),
        git_diff(&s, &f, &history[0], &tree)
    );
}

// ---------------------------------------------------------------------------------------
// Rules and configuration appearing later
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn held_rule_and_attribute_files_appearing_deep() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    write(p, "deep/er/x.tmp", "tracked before the rule\n");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    write(p, "deep/er/y.tmp", "new\n");
    settle().await;
    round(&s, &f, &reference, &mut history, "staged").await;
    write(p, "deep/er/.gitignore", "*.tmp\n");
    write(p, "deep/er/z.tmp", "ignored\n");
    settle().await;
    round(&s, &f, &reference, &mut history, "deep gitignore").await;
    std::fs::remove_file(p.join("deep/er/.gitignore")).unwrap();
    settle().await;
    round(&s, &f, &reference, &mut history, "gitignore gone").await;
    write(p, "deep/crlf.txt", "one\r\ntwo\r\n");
    // Seconds old, so no index written now finds its entry racy (git compares whole
    // seconds): the reference and troupe then agree that git keeps the converted blob.
    std::fs::File::options()
        .write(true)
        .open(p.join("deep/crlf.txt"))
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(10))
        .unwrap();
    write(p, "deep/.gitattributes", "*.txt text\n");
    settle().await;
    round(&s, &f, &reference, &mut history, "deep gitattributes").await;
    std::fs::remove_file(p.join("deep/.gitattributes")).unwrap();
    settle().await;
    round(&s, &f, &reference, &mut history, "gitattributes gone").await;
    // The project's own info/exclude gets a pattern (copied into the shadow).
    append(&p.join(".git/info/exclude"), "*.txt\n");
    write(p, "new.txt", "ignored\n");
    settle().await;
    round(&s, &f, &reference, &mut history, "info/exclude").await;
    fsck(&s, &f);
}

#[tokio::test]
async fn held_plain_spellings_of_shadow_configuration() {
    // Spellings `plain_config` reads as git does: a new executable file is 100644 under
    // `core.fileMode` off; files differing in case are one under `core.ignoreCase`.
    for line in [
        "[core]\n\tfilemode = false\n",
        "[CORE]\n\tFileMode=No\n",
        "[core]\n\tfilemode = 0\n",
        "[core]\n\tignorecase\n",
        "[core]\n\tignoreCase = yes\n",
    ] {
        config_attack(line).await.unwrap();
    }
}

#[tokio::test]
async fn fixed_shadow_config_spellings_plain_config_misses() {
    let mut failures = Vec::new();
    for line in [
        "[core]\n\tfilemode = \"false\"\n",
        "[core]\n\tfilemode = false ; off\n",
        "[core]\n\tfilemode = false # off\n",
        "[core]\n\tfilemode =\n",
        "[core] filemode = false\n",
        "[core]\n\tfilemode = fal\\\nse\n",
        "[core] ignorecase = true\n",
    ] {
        if let Err(e) = config_attack(line).await {
            failures.push(format!("{line:?}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Appends `line` to the shadow configuration (and the reference's), then makes a new
/// executable file and two files differing in case; `Err` when the tree is not git's.
async fn config_attack(line: &str) -> Result<(), String> {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    let s = open(&f).await;
    let reference = Reference::new();
    s.track().await.unwrap();
    reference.tree(&f);
    append(&s.git_dir().join("config"), line);
    reference.append_config(line);
    write(p, "run.sh", "#!/bin/sh\n");
    chmod(p, "run.sh", 0o755);
    write(p, "A.txt", "upper\n");
    settle().await;
    let tree = s.track().await.map_err(|e| e.to_string())?;
    let expected = reference.tree(&f);
    if tree != expected {
        return Err(format!(
            "troupe:\n{}git:\n{}",
            shadow_git(&s, &f, &["ls-tree", "-r", &tree]),
            reference.ls_tree(&expected),
        ));
    }
    Ok(())
}

#[tokio::test]
async fn fixed_protect_hfs_names_are_staged() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let reference = Reference::new();
    s.track().await.unwrap();
    let line = "[core]\n\tprotectHFS = true\n";
    append(&s.git_dir().join("config"), line);
    reference.append_config(line);
    write(&f.project, ".g\u{200c}it/config", "x\n");
    settle().await;
    let ours = s.track().await;
    let git_ok = reference.add_ok(&f);
    assert!(!git_ok, "git refuses the name under protectHFS");
    assert!(ours.is_err(), "troupe staged a path git refuses: {ours:?}");
}

// ---------------------------------------------------------------------------------------
// Handles, processes, gc
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn held_two_handles_on_one_shadow_repository() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    let s1 = open(&f).await;
    let s2 = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    for i in 0..6 {
        write(p, &format!("f{i}"), &format!("{i}\n"));
        if i % 3 == 2 {
            std::fs::remove_file(p.join(format!("f{}", i - 1))).unwrap();
        }
        settle().await;
        let s = if i % 2 == 0 { &s1 } else { &s2 };
        round(
            s,
            &f,
            &reference,
            &mut history,
            &format!("handle {}", i % 2),
        )
        .await;
    }
    fsck(&s1, &f);
}

#[tokio::test]
async fn held_git_run_on_the_shadow_between_tracks() {
    // Another process runs git on the shadow repository between tracks: `read-tree
    // --empty`, `add`, `gc` (with the default prune), while the index lags the staged tree.
    // An index git wrote after the last stage is git's word from then on (the stage's
    // record is stale), so each tree is compared with git's own path on a copy of the
    // shadow repository taken just before the track.
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    write(p, "x.log", "tracked\n");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    write(p, "b.txt", "b\n");
    settle().await;
    round(&s, &f, &reference, &mut history, "staged").await;
    let check = async |what: &str| {
        let expected = super::tests::oracle_tree(&s, &f);
        assert_eq!(s.track().await.unwrap(), expected, "{what}");
    };
    shadow_git(&s, &f, &["read-tree", "--empty"]);
    write(p, ".gitignore", "*.log\n");
    settle().await;
    check("after read-tree --empty").await;
    std::fs::remove_file(p.join(".gitignore")).unwrap();
    write(p, "c.txt", "c\n");
    settle().await;
    check("staged again").await;
    shadow_git(&s, &f, &["add", "--all"]);
    shadow_git(&s, &f, &["gc", "--quiet"]);
    write(p, "d.txt", "d\n");
    settle().await;
    check("after add and gc").await;
    s.gc().await.unwrap();
    std::fs::remove_file(p.join("d.txt")).unwrap();
    settle().await;
    check("after troupe gc").await;
    fsck(&s, &f);
}

#[tokio::test]
async fn fixed_index_left_behind_when_the_process_ends() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    let reference = Reference::new();
    {
        let s = open(&f).await;
        assert_eq!(s.track().await.unwrap(), reference.tree(&f));
        write(p, "x.log", "tracked\n");
        write(p, "grow.bin", "small\n");
        settle().await;
        let (tree, fast) = staged_in_process(&s).await;
        assert!(fast, "staged in process");
        assert_eq!(tree, reference.tree(&f));
    }
    // A new process: no state about the index.
    let s = open(&f).await;
    write(p, ".gitignore", "*.log\n");
    write(p, "grow.bin", &"z".repeat(MAX_UNTRACKED_BYTES as usize + 1));
    settle().await;
    let tree = s.track().await.unwrap();
    let expected = reference.tree(&f);
    assert_eq!(
        tree,
        expected,
        "troupe:\n{}git:\n{}",
        shadow_git(&s, &f, &["ls-tree", "-r", &tree]),
        reference.ls_tree(&expected),
    );
}

#[tokio::test]
async fn fixed_gitlink_in_the_index_is_replaced_by_a_staged_directory() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "a\n");
    write(p, "sub/f", "x\n");
    let sub = p.join("sub");
    super::tests::git_in(&sub, &["init", "-q"]);
    super::tests::git_in(&sub, &["add", "f"]);
    super::tests::git_in(
        &sub,
        &[
            "-c",
            "user.name=a",
            "-c",
            "user.email=b@c",
            "commit",
            "-qm",
            "m",
        ],
    );
    let reference = Reference::new();
    {
        let s = open(&f).await;
        assert_eq!(s.track().await.unwrap(), reference.tree(&f), "gitlink");
    }
    std::fs::remove_dir_all(sub.join(".git")).unwrap();
    settle().await;
    // A new process.
    let s = open(&f).await;
    let tree = s.track().await.unwrap();
    let expected = reference.tree(&f);
    assert_eq!(
        tree,
        expected,
        "troupe:\n{}git:\n{}",
        shadow_git(&s, &f, &["ls-tree", "-r", &tree]),
        reference.ls_tree(&expected),
    );
}

#[tokio::test]
async fn fixed_outside_prune_then_the_same_tree_again() {
    let f = fixture();
    let p = &f.project;
    write(p, "a.txt", "one\n");
    let s = open(&f).await;
    settle().await;
    let t1 = s.track().await.unwrap();
    write(p, "a.txt", "two\n");
    settle().await;
    let (_, fast) = staged_in_process(&s).await;
    assert!(fast);
    shadow_git(&s, &f, &["gc", "--quiet", "--prune=now"]);
    write(p, "a.txt", "one\n");
    settle().await;
    let t3 = s.track().await.unwrap();
    assert_eq!(t3, t1);
    shadow_git(&s, &f, &["cat-file", "-e", &t3]);
}

// ---------------------------------------------------------------------------------------
// Revert
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn held_revert_across_modes_type_changes_and_directories() {
    let f = fixture();
    let p = &f.project;
    write(p, "run.sh", "#!/bin/sh\n");
    chmod(p, "run.sh", 0o755);
    write(p, "plain", "target");
    write(p, "dir/inner", "inner\n");
    write(p, "a-b", "1\n");
    let s = open(&f).await;
    settle().await;
    let before = s.track().await.unwrap();
    chmod(p, "run.sh", 0o644);
    std::fs::remove_file(p.join("plain")).unwrap();
    write(p, "plain/now-a-dir", "x\n");
    std::fs::remove_dir_all(p.join("dir")).unwrap();
    write(p, "dir", "now a file\n");
    write(p, "a.b", "new\n");
    write(p, "a/c", "new\n");
    settle().await;
    let (after, fast) = staged_in_process(&s).await;
    assert!(fast);
    let files = s.changed_files(&before, &after).await.unwrap();
    s.revert(&[Patch {
        hash: before.clone(),
        files,
    }])
    .await
    .unwrap();
    settle().await;
    assert_eq!(s.track().await.unwrap(), before);
    fsck(&s, &f);
}
