//! Hostile input against staging with ignore rules, seeding from an index git wrote, and the
//! `troupe-staged` record (`stage`, `Snapshot::stage_in_process`). `held_*`: attacks that
//! found nothing; `fixed_*`: the review's defects (another process staging meanwhile, a
//! stale record, a gc taking a tree a track had just returned, a record naming a collected
//! tree), fixed since.
//!
//! A second *process* is simulated two ways: dropping every handle and opening a new one
//! (the per-repository state is freed with the last handle), or, for two processes at
//! once, opening the same project through a symbolic link to the data directory: the state
//! is keyed by the git dir's path as given, so that handle has a state of its own, as
//! another process would, while the shadow repository and its file lock are the same.

use super::stage_tests::{Reference, diffs_match_git};
use super::tests::{Fixture, fixture, git_in, open, settle, shadow_git, write};
use super::*;
use std::process::Command as StdCommand;

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
    let expected = reference.tree(f);
    assert_eq!(
        tree,
        expected,
        "{what}: tree\ntroupe:\n{}git:\n{}",
        shadow_git(s, f, &["ls-tree", "-r", &tree]),
        ref_ls(reference, &expected)
    );
    diffs_match_git(s, f, history, &tree, what).await;
    history.push(tree.clone());
    tree
}

fn ref_ls(reference: &Reference, tree: &str) -> String {
    let out = StdCommand::new("git")
        .arg("--git-dir")
        .arg(reference.dir.path())
        .args(["ls-tree", "-r", tree])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fsck(s: &Snapshot, f: &Fixture) {
    shadow_git(s, f, &["fsck", "--no-dangling", "--no-progress"]);
}

fn rm(p: &Path, rel: &str) {
    std::fs::remove_file(p.join(rel)).unwrap();
}

/// The tree git's own path gives now, on a copy of the shadow repository whose index is
/// first brought up to the tree staged in process (`troupe-staged`), as `flush_index` does.
fn git_on_copy(s: &Snapshot, f: &Fixture) -> String {
    super::tests::oracle_tree(s, f)
}

/// Tracks and asserts the tree is the one git's own path gives on a copy taken just before.
async fn check_git_path(s: &Snapshot, f: &Fixture, what: &str) -> String {
    let expected = git_on_copy(s, f);
    let tree = s.track().await.unwrap();
    assert_eq!(
        tree,
        expected,
        "{what}\ntroupe:\n{}git:\n{}",
        shadow_git(s, f, &["ls-tree", "-r", "--name-only", &tree]),
        shadow_git(s, f, &["ls-tree", "-r", "--name-only", &expected]),
    );
    tree
}

/// A handle on the same shadow repository with a state of its own (another process).
async fn other_process(f: &Fixture) -> Snapshot {
    let link = f.root.join("data-other");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink(&f.data, &link).unwrap();
    }
    let s = Snapshot::open(&link, &f.project, &[]).await.unwrap();
    assert_eq!(
        std::fs::canonicalize(s.git_dir()).unwrap(),
        std::fs::canonicalize(f.data.join("snapshot").join(path_hash(&f.project))).unwrap()
    );
    s
}

// ---------------------------------------------------------------------------------------
// Rule sets
// ---------------------------------------------------------------------------------------

/// Negations, directory rules, nested rule files, anchored and `**` patterns, escaped
/// names, whitelisting; `restart`: a new process before every step.
async fn rule_sequence(restart: bool) {
    let f = fixture();
    let p = f.project.clone();
    write(&p, ".gitignore", "*.log\n!keep.log\nbuild/\n/*.tmp\n");
    for rel in [
        "a.txt",
        "x.log",
        "keep.log",
        "build/o.bin",
        "sub/y.tmp",
        "z.tmp",
    ] {
        write(&p, rel, rel);
    }
    let reference = Reference::new();
    let mut history = Vec::new();
    let mut s = open(&f).await;
    let mut k = 0;
    let mut step = async |s: &mut Snapshot, what: &str| {
        k += 1;
        if k % 2 == 0 {
            settle().await;
        }
        if restart {
            *s = open(&f).await;
        }
        round(s, &f, &reference, &mut history, what).await;
    };
    step(&mut s, "start").await;
    write(&p, "sub/.gitignore", "!*.log\n*.txt\n");
    write(&p, "sub/n.log", "re-included by a nested negation\n");
    write(&p, "sub/t.txt", "ignored by the nested file\n");
    write(&p, "sub/deeper/u.txt", "ignored too\n");
    step(&mut s, "nested rules").await;
    write(&p, "build/new.txt", "in an ignored dir\n");
    write(&p, "build/deep/d.txt", "deeper\n");
    write(
        &p,
        ".gitignore",
        "*.log\n!keep.log\nbuild/\n!build/keep\n/*.tmp\n",
    );
    write(&p, "build/keep", "cannot be re-included\n");
    step(&mut s, "negation under an ignored dir").await;
    write(&p, ".gitignore", "*.log\n!keep.log\n/*.tmp\n");
    step(&mut s, "build/ no longer ignored").await;
    write(
        &p,
        ".gitignore",
        "*.log\n!keep.log\nbuild/*\n!build/deep/\n/*.tmp\n",
    );
    write(&p, "build/new2.txt", "ignored by build/*\n");
    write(&p, "build/deep/e.txt", "re-included\n");
    step(&mut s, "build/* with a re-included subdirectory").await;
    rm(&p, "build/o.bin");
    write(
        &p,
        "build/o.bin",
        "tracked, deleted, made again: ignored now\n",
    );
    rm(&p, "x.log");
    step(&mut s, "tracked files deleted and made again").await;
    write(&p, "x.log", "made again\n");
    step(&mut s, "x.log made again").await;
    for name in [
        "#x",
        "!y",
        "*",
        "[ab]",
        "a",
        "b",
        "?q",
        "a[b]c.log",
        "sp ace",
        "trail ",
        " lead",
        "-n",
        "\\",
        "e\u{301}",
        "\u{e9}",
    ] {
        if name == "\\" {
            // A backslash leaves the track to git; made and gone within one step.
            continue;
        }
        write(&p, &format!("names/{name}"), name);
    }
    write(
        &p,
        "names/.gitignore",
        "\\#x\n\\!y\n\\*\n[ab]\n\\?q\ntrail\\ \n\\ lead\n\u{e9}\n",
    );
    step(&mut s, "escaped and glob names").await;
    write(&p, "names/.gitignore", "*\n!\\**\n!.gitignore\n");
    write(&p, "names/*new", "whitelisted by a literal star\n");
    write(&p, "names/other", "ignored\n");
    step(&mut s, "whitelist in names/").await;
    write(
        &p,
        ".gitignore",
        "/*\n!/src/\n!/.gitignore\n**/tmp/\na/**/b\n",
    );
    write(&p, "src/m.rs", "m\n");
    write(&p, "src/tmp/t.rs", "in tmp\n");
    write(&p, "src/a/x/y/b", "a/**/b is anchored at the top\n");
    write(&p, "a/x/b", "ignored by /*\n");
    write(&p, "top.txt", "ignored by /*\n");
    step(&mut s, "whitelisting the top").await;
    rm(&p, "a.txt");
    write(&p, "a.txt", "tracked once, ignored now\n");
    rm(&p, "keep.log");
    step(&mut s, "a.txt deleted and made again under /*").await;
    std::fs::remove_file(p.join(".gitignore")).unwrap();
    step(&mut s, "no root rules").await;
    fsck(&s, &f);
}

#[tokio::test]
async fn held_rule_sets_step_by_step() {
    rule_sequence(false).await;
}

#[tokio::test]
async fn held_rule_sets_with_a_new_process_before_every_step() {
    rule_sequence(true).await;
}

#[tokio::test]
async fn held_tracked_file_ignored_deleted_and_made_again_across_processes() {
    // A file tracked before a rule matched it; the rule comes; the file is deleted, then
    // made again: git drops it. A new process between every step.
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    write(&p, "x.log", "tracked\n");
    write(&p, "d/y.log", "tracked\n");
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&open(&f).await, &f, &reference, &mut history, "start").await;
    write(&p, ".gitignore", "*.log\n");
    settle().await;
    round(&open(&f).await, &f, &reference, &mut history, "rule").await;
    write(&p, "x.log", "changed while tracked\n");
    settle().await;
    round(&open(&f).await, &f, &reference, &mut history, "edited").await;
    rm(&p, "x.log");
    std::fs::remove_dir_all(p.join("d")).unwrap();
    round(&open(&f).await, &f, &reference, &mut history, "deleted").await;
    write(&p, "x.log", "made again\n");
    write(&p, "d/y.log", "made again\n");
    round(&open(&f).await, &f, &reference, &mut history, "made again").await;
    settle().await;
    write(&p, ".gitignore", "*.log\n!x.log\n");
    round(&open(&f).await, &f, &reference, &mut history, "re-included").await;
    fsck(&open(&f).await, &f);
}

#[tokio::test]
async fn held_project_info_exclude_changes() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    write(&p, "e.tmp", "e\n");
    write(&p, ".git/info/exclude", "*.tmp\n");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    settle().await;
    write(&p, "n.tmp", "n\n");
    write(&p, "n.bak", "n\n");
    round(&s, &f, &reference, &mut history, "new ignored").await;
    // Same size, other rule.
    write(&p, ".git/info/exclude", "*.bak\n");
    write(&p, "m.tmp", "m\n");
    round(&s, &f, &reference, &mut history, "rule swapped at once").await;
    settle().await;
    write(&p, "o.bak", "o\n");
    round(&s, &f, &reference, &mut history, "swapped rule settled").await;
    std::fs::remove_file(p.join(".git/info/exclude")).unwrap();
    write(&p, "p.bak", "p\n");
    round(&s, &f, &reference, &mut history, "no exclude file").await;
    settle().await;
    round(&s, &f, &reference, &mut history, "again").await;
    fsck(&s, &f);
}

/// Tracks and compares with the reference, except for the `.gitignore` blob: with its mtime
/// put back, git (which compares ctime by whole seconds) keeps the old blob when the ctime's
/// second did not change and the index is from a later second; staging stores the file as it
/// is. Which files are in the tree is git's.
async fn round_but_rule_blob(s: &Snapshot, f: &Fixture, reference: &Reference, what: &str) {
    let tree = s.track().await.unwrap();
    let expected = reference.tree(f);
    let without_rules = |listing: String| -> Vec<String> {
        listing
            .lines()
            .filter(|l| !l.ends_with("\t.gitignore"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        without_rules(shadow_git(s, f, &["ls-tree", "-r", &tree])),
        without_rules(ref_ls(reference, &expected)),
        "{what}"
    );
    assert_eq!(
        shadow_git(s, f, &["rev-parse", &format!("{tree}:.gitignore")]),
        git_in(&f.project, &["hash-object", ".gitignore"]),
        "{what}: the rule file as it is"
    );
}

#[tokio::test]
async fn held_rule_file_rewritten_within_one_tick_with_the_same_size_and_mtime() {
    // `.gitignore` rewritten (same size), its mtime put back, at once after the previous
    // track: the cached check-ignore answers must not outlive the first rule set.
    let f = fixture();
    let p = f.project.clone();
    write(&p, ".gitignore", "a.log\n");
    for rel in ["a.log", "b.log", "c.txt"] {
        write(&p, rel, rel);
    }
    let s = open(&f).await;
    let reference = Reference::new();
    round_but_rule_blob(&s, &f, &reference, "start").await;
    settle().await;
    round_but_rule_blob(&s, &f, &reference, "settled").await;
    let mtime = std::fs::metadata(p.join(".gitignore"))
        .unwrap()
        .modified()
        .unwrap();
    for (rules, new) in [
        ("b.log\n", "d.log"),
        ("a.log\n", "e.log"),
        ("d.log\n", "f.log"),
    ] {
        write(&p, ".gitignore", rules);
        std::fs::File::options()
            .write(true)
            .open(p.join(".gitignore"))
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        write(&p, new, new);
        round_but_rule_blob(&s, &f, &reference, rules).await;
        write(&p, &format!("again-{new}"), new);
        round_but_rule_blob(&s, &f, &reference, rules).await;
        settle().await;
        write(&p, &format!("settled-{new}"), new);
        round_but_rule_blob(&s, &f, &reference, rules).await;
    }
}

#[tokio::test]
async fn held_thousands_of_new_files_half_ignored_in_one_step() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, ".gitignore", "*.skip\n!keep-*.skip\n");
    write(&p, "a.txt", "a\n");
    let s = open(&f).await;
    let reference = Reference::new();
    let mut history = Vec::new();
    round(&s, &f, &reference, &mut history, "start").await;
    settle().await;
    round(&s, &f, &reference, &mut history, "settled").await;
    for i in 0..3000 {
        let dir = format!("d{}/", i % 37);
        let name = match i % 4 {
            0 => format!("{dir}f{i}.skip"),
            1 => format!("{dir}keep-{i}.skip"),
            2 => format!("{dir}#{i} [x]*.skip"),
            _ => format!("{dir}!{i}.txt"),
        };
        write(&p, &name, &i.to_string());
    }
    settle().await;
    let runs = s.git_runs();
    round(&s, &f, &reference, &mut history, "3000 new files").await;
    assert!(
        s.git_runs() <= runs + 2 + history.len() as u64,
        "one check-ignore"
    );
    fsck(&s, &f);
}

// ---------------------------------------------------------------------------------------
// The index: git-written, outside writes, seeds
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn held_outside_index_writes_after_the_index_caught_up() {
    // Outside git commands on the shadow index while it holds the last tree: assume-unchanged,
    // skip-worktree, chmod, intent-to-add, rm --cached. Staging must leave to git what it
    // cannot keep, and find git's tracked files otherwise.
    let f = fixture();
    let p = f.project.clone();
    write(&p, ".gitignore", "*.log\n");
    for rel in ["a.txt", "b.txt", "c.txt", "e.txt"] {
        write(&p, rel, rel);
    }
    let s = open(&f).await;
    s.track().await.unwrap();
    write(&p, ".gitignore", "");
    write(&p, "e.log", "tracked before the rule\n");
    settle().await;
    s.track().await.unwrap();
    write(&p, ".gitignore", "*.log\n");
    settle().await;
    s.track().await.unwrap();
    let ops: &[(&str, &[&str])] = &[
        (
            "assume-unchanged",
            &["update-index", "--assume-unchanged", "a.txt"],
        ),
        (
            "skip-worktree",
            &["update-index", "--skip-worktree", "b.txt"],
        ),
        ("chmod", &["update-index", "--chmod=+x", "c.txt"]),
        ("intent-to-add", &["add", "-N", "-f", "d.log"]),
        ("rm --cached", &["rm", "--cached", "-q", "e.log"]),
    ];
    for (what, op) in ops {
        // The index catches up with the staged tree (as before any git reading it).
        s.revert(&[]).await.unwrap();
        write(&p, "d.log", "ignored, intent to add\n");
        shadow_git(&s, &f, op);
        let t = check_git_path(&s, &f, what).await;
        write(&p, "a.txt", "changed after assume-unchanged\n");
        rm(&p, "b.txt");
        settle().await;
        check_git_path(&s, &f, &format!("{what}: edits")).await;
        // A new process.
        let s2 = open(&f).await;
        write(&p, "d.log", "ignored, intent to add, edited\n");
        check_git_path(&s2, &f, &format!("{what}: new process")).await;
        // Back to plain for the next op.
        let _ = t;
        for reset in [
            &["update-index", "--no-assume-unchanged", "a.txt"][..],
            &["update-index", "--no-skip-worktree", "b.txt"],
        ] {
            // Fails when the entry is gone.
            let _ = StdCommand::new("git")
                .arg("--git-dir")
                .arg(s.git_dir())
                .arg("--work-tree")
                .arg(&p)
                .args(reset)
                .current_dir(&p)
                .output();
        }
        write(&p, "a.txt", "a.txt");
        write(&p, "b.txt", "b.txt");
        shadow_git(&s, &f, &["add", "--all"]);
        settle().await;
        check_git_path(&s, &f, &format!("{what}: plain again")).await;
    }
    fsck(&s, &f);
}

#[tokio::test]
async fn held_seed_from_a_git_written_index_in_the_same_second() {
    // Git's path writes the index (an attributes file forces it); a new process then stages
    // with the index as its seed while files are rewritten with the same size in the index's
    // second (racy: git reads them) and later.
    let f = fixture();
    let p = f.project.clone();
    write(&p, ".gitignore", "*.log\n");
    write(&p, ".gitattributes", "*.bin binary\n");
    for rel in ["a.txt", "b.txt", "c.log"] {
        write(&p, rel, "one\n");
    }
    let reference = Reference::new();
    let mut history = Vec::new();
    {
        let s = open(&f).await;
        round(&s, &f, &reference, &mut history, "git's path").await;
    }
    rm(&p, ".gitattributes");
    write(&p, "a.txt", "two\n");
    {
        let s = open(&f).await;
        round(&s, &f, &reference, &mut history, "seeded, same second").await;
    }
    write(&p, "b.txt", "two\n");
    write(&p, "c.log", "two\n");
    {
        let s = open(&f).await;
        round(&s, &f, &reference, &mut history, "again").await;
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        write(&p, "a.txt", "six\n");
        round(&s, &f, &reference, &mut history, "a second later").await;
    }
}

#[tokio::test]
async fn held_revert_tracks_an_ignored_file_again_then_edits() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    write(&p, "x.log", "one\n");
    let s = open(&f).await;
    let t0 = s.track().await.unwrap();
    write(&p, ".gitignore", "*.log\n");
    rm(&p, "x.log");
    settle().await;
    let t1 = check_git_path(&s, &f, "ignored and deleted").await;
    write(&p, "x.log", "made again: ignored\n");
    settle().await;
    check_git_path(&s, &f, "made again").await;
    let files = s.changed_files(&t1, &t0).await.unwrap();
    s.revert(&[Patch { hash: t0, files }]).await.unwrap();
    let t = check_git_path(&s, &f, "reverted: tracked again").await;
    assert!(shadow_git(&s, &f, &["ls-tree", "-r", "--name-only", &t]).contains("x.log"));
    write(&p, "x.log", "edited while tracked\n");
    settle().await;
    check_git_path(&s, &f, "edited").await;
    drop(s);
    write(&p, "x.log", "edited in a new process\n");
    let s = open(&f).await;
    check_git_path(&s, &f, "new process").await;
    fsck(&s, &f);
}

#[tokio::test]
async fn held_state_is_freed_with_the_last_handle() {
    // While a clone lives, the next track with a new file matches the rules in process (no
    // git); after every handle is gone, a new one starts over from `troupe-staged`
    // (`read-tree`, then git's list of what it ignores).
    let f = fixture();
    let p = f.project.clone();
    write(&p, ".gitignore", "*.log\n");
    write(&p, "a.txt", "a\n");
    let s = open(&f).await;
    s.track().await.unwrap();
    settle().await;
    s.track().await.unwrap();
    let clone = s.clone();
    let other = open(&f).await;
    drop(s);
    write(&p, "b.txt", "b\n");
    settle().await;
    let runs = other.git_runs();
    other.track().await.unwrap();
    assert_eq!(
        other.git_runs(),
        runs,
        "state shared: rules matched in process"
    );
    drop(other);
    drop(clone);
    assert!(
        f.data
            .join("snapshot")
            .join(path_hash(&f.project))
            .join("troupe-staged")
            .exists()
    );
    let s = open(&f).await;
    write(&p, "c.txt", "c\n");
    settle().await;
    let reference = Reference::new();
    let tree = s.track().await.unwrap();
    // A fresh state: git lists what its rules ignore again (`read-tree` first).
    assert!(s.git_runs() >= 3, "state freed: {} git runs", s.git_runs());
    assert_eq!(tree, reference.tree(&f));
}

#[tokio::test]
async fn held_own_files_inside_the_project_with_rules_that_re_include_them() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, ".gitignore", "*.db\n!store.db\n!out/\n");
    write(&p, "a.txt", "a\n");
    write(&p, "store.db", "own\n");
    write(&p, "out/run.json", "own\n");
    write(&p, "other.db", "ignored\n");
    let own = [p.join("store.db"), p.join("out/run.json")];
    let s = Snapshot::open(&f.data, &p, &own).await.unwrap();
    let reference = tempfile::tempdir().unwrap();
    git_in(reference.path(), &["init", "-q", "--bare"]);
    let expected = |f: &Fixture| {
        let git = |args: &[&str]| {
            let out = StdCommand::new("git")
                .arg("--git-dir")
                .arg(reference.path())
                .arg("--work-tree")
                .arg(&f.project)
                .args(args)
                .current_dir(&f.project)
                .output()
                .unwrap();
            assert!(out.status.success());
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        git(&[
            "add",
            "--all",
            "--",
            ".",
            ":(exclude,literal,top)store.db",
            ":(exclude,literal,top)out/run.json",
        ]);
        git(&["write-tree"])
    };
    for step in 0..6 {
        match step {
            1 => write(&p, "store.db", "own, changed\n"),
            2 => write(&p, "out/other.json", "project\n"),
            3 => {
                rm(&p, "store.db");
                write(&p, "store.db", "own, made again\n");
            }
            4 => write(&p, ".gitignore", "!*\n"),
            5 => write(&p, "out/run.json", "own, changed\n"),
            _ => {}
        }
        if step % 2 == 1 {
            settle().await;
        }
        let tree = s.track().await.unwrap();
        assert_eq!(tree, expected(&f), "step {step}");
    }
}

// ---------------------------------------------------------------------------------------
// Processes and the `troupe-staged` record
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn fixed_a_second_process_staging_is_not_seen() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    let reference = Reference::new();
    let a = open(&f).await;
    assert_eq!(a.track().await.unwrap(), reference.tree(&f), "A: start");
    settle().await;
    // Process B, at the same time: stages a new file (no rules: no git at all).
    let b = other_process(&f).await;
    write(&p, "n.log", "tracked by B's step\n");
    settle().await;
    let tb = b.track().await.unwrap();
    assert_eq!(tb, reference.tree(&f), "B: n.log tracked");
    // A rule now matches the file B tracked: git keeps it (tracked).
    write(&p, ".gitignore", "*.log\n");
    settle().await;
    let ta = a.track().await.unwrap();
    let expected = reference.tree(&f);
    assert_eq!(
        ta,
        expected,
        "A after B\ntroupe:\n{}git:\n{}",
        shadow_git(&a, &f, &["ls-tree", "-r", "--name-only", &ta]),
        ref_ls(&reference, &expected)
    );
}

#[tokio::test]
async fn fixed_a_stale_troupe_staged_overwrites_a_newer_index() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    let reference = Reference::new();
    {
        let s = open(&f).await;
        assert_eq!(s.track().await.unwrap(), reference.tree(&f));
        write(&p, "b.txt", "b\n");
        settle().await;
        assert_eq!(s.track().await.unwrap(), reference.tree(&f));
    }
    // After that process: git stages the work tree on the shadow repository (as troupe
    // before in-process staging did), a new file with it.
    write(&p, "n.log", "tracked by git\n");
    let s = open(&f).await;
    shadow_git(&s, &f, &["add", "--all"]);
    shadow_git(&s, &f, &["write-tree"]);
    assert_eq!(
        shadow_git(&s, &f, &["write-tree"]).trim(),
        reference.tree(&f)
    );
    drop(s);
    write(&p, ".gitignore", "*.log\n");
    settle().await;
    let s = open(&f).await;
    let tree = s.track().await.unwrap();
    let expected = reference.tree(&f);
    assert_eq!(
        tree,
        expected,
        "troupe:\n{}git:\n{}",
        shadow_git(&s, &f, &["ls-tree", "-r", "--name-only", &tree]),
        ref_ls(&reference, &expected)
    );
}

/// Makes every loose object of `s`'s shadow repository 8 days old (older than `GC_PRUNE`).
fn age_objects(s: &Snapshot) {
    let status = StdCommand::new("sh")
        .arg("-c")
        .arg("find objects -type f -path 'objects/??/*' -exec touch -m -d '8 days ago' {} +")
        .current_dir(s.git_dir())
        .status()
        .unwrap();
    assert!(status.success());
}

/// A shadow repository whose last process staged the project (`a.txt`, `sub/b.txt`) in
/// process and ended 8 days ago (its loose objects aged so); a new process tracks the
/// unchanged project (the same tree) and the scheduled gc follows (`gc_due`).
async fn eight_days_later(f: &Fixture, reference: &Reference) -> (Snapshot, String) {
    let p = &f.project;
    write(p, "a.txt", "a\n");
    write(p, "sub/b.txt", "b\n");
    let tree = {
        let s = open(f).await;
        let tree = s.track().await.unwrap();
        assert_eq!(tree, reference.tree(f));
        tree
    };
    let s = open(f).await;
    age_objects(&s);
    settle().await;
    assert_eq!(s.track().await.unwrap(), tree, "unchanged");
    s.gc().await.unwrap();
    (s, tree)
}

#[tokio::test]
async fn fixed_gc_prunes_the_tree_a_track_just_returned() {
    let f = fixture();
    let reference = Reference::new();
    let (s, tree) = eight_days_later(&f, &reference).await;
    let listing = StdCommand::new("git")
        .arg("--git-dir")
        .arg(s.git_dir())
        .args(["ls-tree", "-r", &tree])
        .output()
        .unwrap();
    assert!(
        listing.status.success(),
        "the tree track returned was pruned: {}",
        String::from_utf8_lossy(&listing.stderr)
    );
    fsck(&s, &f);
    s.revert(&[Patch {
        hash: tree,
        files: vec![f.project.join("a.txt")],
    }])
    .await
    .unwrap();
}

#[tokio::test]
async fn fixed_a_pruned_staged_tree_fails_every_later_track() {
    let f = fixture();
    let reference = Reference::new();
    let (s, _) = eight_days_later(&f, &reference).await;
    write(&f.project, ".gitignore", "*.log\n");
    write(&f.project, "x.log", "x\n");
    settle().await;
    let first = s.track().await;
    drop(s);
    let s = open(&f).await;
    let second = s.track().await;
    let expected = reference.tree(&f);
    assert!(
        matches!((&first, &second), (Ok(a), Ok(b)) if *a == expected && *b == expected),
        "{first:?}, then in a new process {second:?}"
    );
}

#[tokio::test]
async fn held_troupe_staged_garbage_is_ignored() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    let reference = Reference::new();
    {
        let s = open(&f).await;
        assert_eq!(s.track().await.unwrap(), reference.tree(&f));
    }
    let git_dir = f.data.join("snapshot").join(path_hash(&f.project));
    for garbage in ["", "not a hash\n", "zz\n", "\u{0}\u{1}"] {
        std::fs::write(git_dir.join("troupe-staged"), garbage).unwrap();
        write(&p, &format!("f{}.txt", garbage.len()), garbage);
        settle().await;
        let s = open(&f).await;
        assert_eq!(s.track().await.unwrap(), reference.tree(&f), "{garbage:?}");
    }
}
