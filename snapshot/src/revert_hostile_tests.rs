//! Hostile review of a41b10b: reverts that must not delete or overwrite what they should
//! not, and own files / the data directory that must never enter a snapshot. `hostile_*`
//! were defects of a41b10b, fixed; `known_defect_*` are defects not fixed yet (ignored, each
//! with its reason: run them with `--ignored`); `held_*` are attacks that held.

use super::*;
use std::os::unix::ffi::OsStrExt;
use std::process::Command as StdCommand;

use super::tests::{fixture, read, settle, write};

/// Paths in a snapshot tree, `-z` (names with newlines stay whole).
fn tree_paths(s: &Snapshot, tree: &str) -> Vec<String> {
    let out = StdCommand::new("git")
        .arg("--git-dir")
        .arg(s.git_dir())
        .args(["ls-tree", "-r", "-z", "--name-only", tree])
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Defects
// ---------------------------------------------------------------------------------------

/// An own file (or the data directory) inside a directory the project's `.gitignore`
/// ignores — `run -o build/result.json`, a data dir under `target/` — makes every `git add`
/// fail: the exclude pathspec's literal prefix (`build/result.jso`, up to the bracketed
/// last byte) runs past the ignored directory `build`, and git's `exclude_matches_pathspec`
/// reports `build` as "ignored by one of your .gitignore files" (exit 1), exclude magic or
/// not. Every track errors: no snapshot at all for the project.
#[tokio::test]
async fn hostile_own_file_inside_an_ignored_directory_breaks_every_track() {
    let f = fixture();
    write(&f.project, ".gitignore", "build/\n");
    write(&f.project, "a.txt", "a\n");
    let own = vec![f.project.join("build/result.json")];
    let s = Snapshot::open(&f.data, &f.project, &own).await.unwrap();
    write(&f.project, "build/result.json", "{}\n");
    let t = s.track().await;
    assert!(t.is_ok(), "track failed: {:?}", t.err());
    assert_eq!(tree_paths(&s, &t.unwrap()), vec![".gitignore", "a.txt"]);
}

/// Same, with the data directory nested in an ignored directory (`target/troupe`).
#[tokio::test]
async fn hostile_data_dir_inside_an_ignored_directory_breaks_every_track() {
    let f = fixture();
    write(&f.project, ".gitignore", "/target\n");
    write(&f.project, "a.txt", "a\n");
    let data = f.project.join("target/troupe");
    let s = Snapshot::open(&data, &f.project, &[]).await.unwrap();
    let t = s.track().await;
    assert!(t.is_ok(), "track failed: {:?}", t.err());
    assert_eq!(tree_paths(&s, &t.unwrap()), vec![".gitignore", "a.txt"]);
}

/// The data directory is made absolute but not resolved (own files' directories are): given
/// through a symbolic link to the project (`~/work` → `/data/work`, macOS `/var` →
/// `/private/var`), it does not start with git's resolved top level, so nothing is excluded
/// and the store enters every snapshot (and a revert can rewind it).
#[tokio::test]
async fn hostile_data_dir_given_through_a_symlink_enters_snapshots() {
    let f = fixture();
    let link = f.root.join("link-to-project");
    std::os::unix::fs::symlink(&f.project, &link).unwrap();
    write(&f.project, "a.txt", "a\n");
    let data = link.join(".troupe-data");
    let s = Snapshot::open(&data, &f.project, &[]).await.unwrap();
    write(&data, "troupe.db", "db\n");
    let t = s.track().await.unwrap();
    assert_eq!(
        tree_paths(&s, &t),
        vec!["a.txt"],
        "the store is in the snapshot"
    );
}

/// A `..` in the data directory's path (`project/sub/../.troupe`) is kept by
/// `std::path::absolute` (it does not resolve `..` on Unix): the exclude line
/// `/sub/../.troupe/` and the pathspec name nothing, and the store *and the shadow repository
/// itself* (`.troupe/snapshot/<hash>/…`, even its `index.lock`) enter every snapshot.
#[tokio::test]
async fn hostile_data_dir_with_dotdot_enters_snapshots() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    std::fs::create_dir_all(f.project.join("sub")).unwrap();
    let data = f.project.join("sub/../.troupe");
    let s = Snapshot::open(&data, &f.project, &[]).await.unwrap();
    write(&data, "troupe.db", "db\n");
    let t = s.track().await.unwrap();
    let paths = tree_paths(&s, &t);
    assert_eq!(paths, vec!["a.txt"], "{} paths", paths.len());
    // A `..` after a directory that does not exist (yet).
    let data = f.project.join("missing/../.troupe2");
    let s = Snapshot::open(&data, &f.project, &[]).await.unwrap();
    write(&f.project, ".troupe2/troupe.db", "db\n");
    let t = s.track().await.unwrap();
    let paths = tree_paths(&s, &t);
    assert!(
        !paths.iter().any(|p| p.starts_with(".troupe2")),
        "{} paths",
        paths.len()
    );
}

/// The data directory equal to the work tree (`rel` empty) is not excluded at all: the
/// store and the shadow repository itself (`snapshot/<hash>/…`) enter every snapshot.
#[tokio::test]
async fn hostile_data_dir_equal_to_the_work_tree_enters_snapshots() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = Snapshot::open(&f.project, &f.project, &[]).await.unwrap();
    write(&f.project, "troupe.db", "db\n");
    let _ = s.track().await.unwrap();
    let t = s.track().await.unwrap();
    let paths = tree_paths(&s, &t);
    assert!(
        !paths.iter().any(|p| p.starts_with("snapshot/")),
        "the shadow repository is in its own snapshot: {:?}",
        &paths[..paths.len().min(6)]
    );
}

/// A newline in an own file's name is not escaped by `exclude_line`: the name's second line
/// becomes a rule of the shadow `info/exclude`. An own file `x\nsrc` drops the project's
/// whole `src/` directory from every snapshot (so a step's edits there are neither shown
/// nor revertible).
#[tokio::test]
async fn hostile_newline_in_an_own_file_name_injects_an_exclude_rule() {
    let f = fixture();
    write(&f.project, "src/main.rs", "fn main() {}\n");
    let own = vec![f.project.join("x\nsrc")];
    let s = Snapshot::open(&f.data, &f.project, &own).await.unwrap();
    let t = s.track().await.unwrap();
    assert_eq!(tree_paths(&s, &t), vec!["src/main.rs"]);
}

/// An own file whose name is not UTF-8 is recorded lossily (`to_string_lossy`) in both the
/// exclude line and the pathspec, which then name another file: the own file enters the
/// snapshot.
#[tokio::test]
#[ignore = "known defect, not fixed yet: an own file name that is not UTF-8 is excluded lossily (needs byte paths through open)"]
async fn known_defect_non_utf8_own_file_name_enters_snapshots() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let own = f
        .project
        .join(std::ffi::OsStr::from_bytes(b"out\xe9.jsonl"));
    let s = Snapshot::open(&f.data, &f.project, std::slice::from_ref(&own))
        .await
        .unwrap();
    std::fs::write(&own, "{}\n").unwrap();
    let t = s.track().await.unwrap();
    assert_eq!(tree_paths(&s, &t), vec!["a.txt"]);
}

/// An own file that is a symbolic link to a file in the project: the process writes the
/// target, which is not excluded (only the link's directory is resolved), so it enters the
/// snapshot and a revert rewinds it.
#[tokio::test]
async fn hostile_own_file_that_is_a_symlink_lets_its_target_in() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "results/out.jsonl", "");
    std::os::unix::fs::symlink("results/out.jsonl", f.project.join("out.jsonl")).unwrap();
    let own = vec![f.project.join("out.jsonl")];
    let s = Snapshot::open(&f.data, &f.project, &own).await.unwrap();
    let t = s.track().await.unwrap();
    assert_eq!(tree_paths(&s, &t), vec!["a.txt"]);
}

/// `revert` does not leave troupe's own files and data directory alone: a patch that lists
/// them (stored by a version before a41b10b, whose snapshots a `.gitignore` negation could
/// let the store into, or by a process that did not count the file as its own) deletes the
/// store / the own file when the tree lacks it.
#[tokio::test]
async fn hostile_revert_deletes_the_store_and_own_files_a_patch_lists() {
    let f = fixture();
    let data = f.project.join(".troupe-data");
    write(&f.project, "a.txt", "a\n");
    let own = vec![f.project.join("out.jsonl")];
    let s = Snapshot::open(&data, &f.project, &own).await.unwrap();
    let t1 = s.track().await.unwrap();
    write(&data, "troupe.db", "the store\n");
    write(&f.project, "out.jsonl", "{\"id\":1}\n");
    let touched = s
        .revert(&[Patch {
            hash: t1,
            files: vec![data.join("troupe.db"), f.project.join("out.jsonl")],
        }])
        .await
        .unwrap();
    assert_eq!(read(&data, "troupe.db").as_deref(), Some("the store\n"));
    assert_eq!(
        read(&f.project, "out.jsonl").as_deref(),
        Some("{\"id\":1}\n")
    );
    assert!(touched.is_empty(), "{touched:?}");
}

/// Same, restoring: a tree another handle on the same shadow repository made (one that did
/// not count `out.jsonl` as its own) holds an old copy; the revert overwrites the own file.
#[tokio::test]
async fn hostile_revert_rewinds_an_own_file_from_a_tree_that_holds_it() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "out.jsonl", "old\n");
    let plain = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = plain.track().await.unwrap();
    assert!(tree_paths(&plain, &t1).contains(&"out.jsonl".to_string()));
    let own = vec![f.project.join("out.jsonl")];
    let s = Snapshot::open(&f.data, &f.project, &own).await.unwrap();
    write(&f.project, "out.jsonl", "new results\n");
    s.revert(&[Patch {
        hash: t1,
        files: own.clone(),
    }])
    .await
    .unwrap();
    assert_eq!(
        read(&f.project, "out.jsonl").as_deref(),
        Some("new results\n")
    );
}

/// A step that only edits `.gitignore` (drops the `.env` line) makes the user's long-standing
/// ignored `.env` show as *added*; reverting the step deletes the user's `.env`, a file no
/// step created (its content was never snapshotted, so it is lost).
#[tokio::test]
#[ignore = "known defect, not fixed yet: a file the step only un-ignored counts as added (needs check-ignore of the delete list after the checkout)"]
async fn known_defect_revert_deletes_a_users_file_the_step_only_unignored() {
    let f = fixture();
    write(&f.project, ".gitignore", ".env\n");
    write(&f.project, ".env", "SECRET=the user's\n");
    write(&f.project, "a.txt", "a\n");
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    // The step.
    write(&f.project, ".gitignore", "");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    assert_eq!(
        files,
        vec![f.project.join(".env"), f.project.join(".gitignore")]
    );
    s.revert(&[Patch { hash: t1, files }]).await.unwrap();
    assert_eq!(read(&f.project, ".gitignore").as_deref(), Some(".env\n"));
    assert_eq!(
        read(&f.project, ".env").as_deref(),
        Some("SECRET=the user's\n"),
        "the user's ignored file was deleted by the revert"
    );
}

/// Restoring goes through `git checkout`, which (forced, with pathspecs) removes a whole
/// directory standing where a file is restored (`remove_subtree` in git's entry.c). The step
/// deleted the file `notes`; the user then made a directory `notes/` with their own files;
/// reverting the step deletes the user's directory and everything in it. (`delete_inside`
/// refuses the analogous deletion.)
#[tokio::test]
async fn hostile_restore_removes_a_users_directory_standing_where_the_file_was() {
    let f = fixture();
    write(&f.project, "notes", "old notes\n");
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    std::fs::remove_file(f.project.join("notes")).unwrap();
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    // The user, after the step.
    write(&f.project, "notes/mine.txt", "the user's\n");
    write(&f.project, ".gitignore", "*.key\n");
    write(&f.project, "notes/ssh.key", "ignored, never snapshotted\n");
    let _ = s.revert(&[Patch { hash: t1, files }]).await;
    assert_eq!(
        read(&f.project, "notes/ssh.key").as_deref(),
        Some("ignored, never snapshotted\n"),
        "the revert removed the user's directory"
    );
    assert_eq!(
        read(&f.project, "notes/mine.txt").as_deref(),
        Some("the user's\n")
    );
}

/// Same through a leading directory: the step deleted `d/x` (and so `d`); the user then made
/// a file `d`. Restoring `d/x` unlinks the user's file to make the directory (git's
/// `create_directories`, forced). The revert doc says such a file is "left alone, as git's own
/// checkout would" — git's checkout does not.
#[tokio::test]
async fn hostile_restore_unlinks_a_users_file_standing_where_a_directory_was() {
    let f = fixture();
    write(&f.project, "d/x", "x\n");
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    std::fs::remove_dir_all(f.project.join("d")).unwrap();
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    write(&f.project, "d", "the user's file\n");
    let _ = s.revert(&[Patch { hash: t1, files }]).await;
    assert_eq!(
        std::fs::read_to_string(f.project.join("d")).ok().as_deref(),
        Some("the user's file\n"),
        "the revert unlinked the user's file"
    );
}

/// A patch naming a file inside the project's own `.git` (git never tracks it, so it is "not
/// in the tree") makes the revert delete it: `.git/config`, `.git/HEAD`, the user's index.
/// Patches come from the store, so this needs a damaged or crafted store; git itself refuses
/// every path with a `.git` component (`verify_path`), the revert should too.
#[tokio::test]
async fn hostile_revert_deletes_inside_the_users_git_dir() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    let config = f.project.join(".git/config");
    assert!(config.exists());
    let _ = s
        .revert(&[Patch {
            hash: t1,
            files: vec![config.clone(), f.project.join(".git/HEAD")],
        }])
        .await;
    assert!(config.exists(), "the user's .git/config was deleted");
    assert!(f.project.join(".git/HEAD").exists());
}

// ---------------------------------------------------------------------------------------
// Attacks that held
// ---------------------------------------------------------------------------------------

/// Own file names full of glob and pathspec magic (and a multi-byte last character) are
/// excluded, and project files with similar names are not: `a[b]` vs `ab`, `*` vs `star`,
/// `?` vs `q`, `x\y` vs `xy`, `:(top)z` vs `z`, `!neg` vs `neg`, trailing space, `é`.
#[tokio::test]
async fn held_glob_magic_in_own_names_matches_only_itself() {
    let f = fixture();
    // Everything ignored but what is negated: the pathspec alone must keep own files out.
    write(&f.project, ".gitignore", "*\n!*/\n!*.o\n!.gitignore\n");
    let own_names = [
        "a[b].o",
        "*.o",
        "?.o",
        "x\\y.o",
        ":(top)z.o",
        "!neg.o",
        " sp .o",
        "sub/[!a].o",
        "deep/er/caf\u{e9}",
        "x]",
        "n[a-z].o",
        "tail\\",
    ];
    let project_names = [
        "ab.o",
        "star.o",
        "q.o",
        "xy.o",
        "z.o",
        "neg.o",
        "sp.o",
        "sub/b.o",
        "sub/a.o",
        "deep/er/cafe.o",
        "nb.o",
        "n[a-z]x.o",
        "tail.o",
    ];
    let own: Vec<PathBuf> = own_names.iter().map(|n| f.project.join(n)).collect();
    let s = Snapshot::open(&f.data, &f.project, &own).await.unwrap();
    for n in own_names {
        write(&f.project, n, "own\n");
    }
    // `deep/er/café` needs the negation too.
    write(
        &f.project,
        ".gitignore",
        "*\n!*/\n!*.o\n!.gitignore\n!caf*\n",
    );
    for n in project_names {
        write(&f.project, n, "project\n");
    }
    let t = s.track().await.unwrap();
    let mut want: Vec<String> = project_names.iter().map(|s| s.to_string()).collect();
    want.push(".gitignore".into());
    want.sort();
    let mut got = tree_paths(&s, &t);
    got.sort();
    assert_eq!(got, want);
}

/// A data directory nested deep (and with glob characters) stays out with its contents.
#[tokio::test]
async fn held_deep_data_dir_and_own_directory_stay_out() {
    let f = fixture();
    write(&f.project, ".gitignore", "!*.db\n");
    write(&f.project, "a.txt", "a\n");
    let data = f.project.join("x/y [z]/.troupe*");
    let own = vec![f.project.join("outdir")];
    let s = Snapshot::open(&data, &f.project, &own).await.unwrap();
    write(&data, "troupe.db", "db\n");
    write(&data, "more/deeper.db", "db\n");
    write(&f.project, "outdir/r.jsonl", "{}\n");
    write(&f.project, "x/y [z]/.troupe", "a project file beside it\n");
    write(&f.project, "outdir2", "project\n");
    let _ = s.track().await.unwrap();
    let t = s.track().await.unwrap();
    assert_eq!(
        tree_paths(&s, &t),
        vec![".gitignore", "a.txt", "outdir2", "x/y [z]/.troupe"]
    );
}

/// Reverting a file the user replaced by a symlink to outside (or a dangling link, or a
/// FIFO): the checkout replaces the link itself, the deletion unlinks only the link; nothing
/// outside is written or deleted, nothing hangs.
#[tokio::test]
async fn held_links_and_fifos_in_place_of_reverted_files() {
    let f = fixture();
    let outside = f.root.join("outside");
    write(&outside, "secret", "outside\n");
    write(&outside, "victim", "outside victim\n");
    write(&f.project, "m.txt", "m1\n");
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    write(&f.project, "m.txt", "m2\n");
    write(&f.project, "added.txt", "a\n");
    write(&f.project, "fifo", "a\n");
    write(&f.project, "dangling", "a\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    assert_eq!(files.len(), 4);
    for n in ["m.txt", "added.txt", "fifo", "dangling"] {
        std::fs::remove_file(f.project.join(n)).unwrap();
    }
    std::os::unix::fs::symlink(outside.join("secret"), f.project.join("m.txt")).unwrap();
    std::os::unix::fs::symlink(outside.join("victim"), f.project.join("added.txt")).unwrap();
    std::os::unix::fs::symlink(f.root.join("nowhere"), f.project.join("dangling")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.project.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        s.revert(&[Patch {
            hash: t1.clone(),
            files,
        }]),
    )
    .await
    .expect("no hang");
    r.unwrap();
    assert_eq!(read(&outside, "secret").as_deref(), Some("outside\n"));
    assert_eq!(
        read(&outside, "victim").as_deref(),
        Some("outside victim\n")
    );
    let m = f.project.join("m.txt");
    assert!(!std::fs::symlink_metadata(&m).unwrap().is_symlink());
    assert_eq!(read(&f.project, "m.txt").as_deref(), Some("m1\n"));
    for n in ["added.txt", "fifo", "dangling"] {
        assert!(std::fs::symlink_metadata(f.project.join(n)).is_err(), "{n}");
    }
    assert_eq!(s.track().await.unwrap(), t1);
}

/// Restoring `sub/a.txt` after `sub` became a link to a directory outside with its own
/// `a.txt`: git replaces the link with a directory; the outside file is not written.
#[tokio::test]
async fn held_restore_never_writes_through_a_symlinked_directory() {
    let f = fixture();
    let outside = f.root.join("outside");
    write(&outside, "a.txt", "outside\n");
    write(&f.project, "sub/a.txt", "v1\n");
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    write(&f.project, "sub/a.txt", "v2\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    std::fs::remove_dir_all(f.project.join("sub")).unwrap();
    std::os::unix::fs::symlink(&outside, f.project.join("sub")).unwrap();
    let _ = s.revert(&[Patch { hash: t1, files }]).await;
    assert_eq!(read(&outside, "a.txt").as_deref(), Some("outside\n"));
}

/// `..`, `.`-free escapes, paths beside the work tree (`project2`), the work tree itself and
/// paths reached through a link to the work tree are all skipped: nothing outside is touched.
#[tokio::test]
async fn held_paths_outside_the_work_tree_are_skipped() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.root, "victim.txt", "outside\n");
    write(&f.root, "project2/v.txt", "sibling\n");
    let link = f.root.join("plink");
    std::os::unix::fs::symlink(&f.project, &link).unwrap();
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    write(&f.project, "b.txt", "b\n");
    let touched = s
        .revert(&[Patch {
            hash: t1,
            files: vec![
                f.project.join("../victim.txt"),
                f.project.join("sub/../../victim.txt"),
                f.root.join("project2/v.txt"),
                f.project.clone(),
                f.project.join("."),
                link.join("b.txt"),
                PathBuf::from("a.txt"),
            ],
        }])
        .await
        .unwrap();
    assert!(touched.is_empty(), "{touched:?}");
    assert_eq!(read(&f.root, "victim.txt").as_deref(), Some("outside\n"));
    assert_eq!(
        read(&f.root, "project2/v.txt").as_deref(),
        Some("sibling\n")
    );
    assert_eq!(read(&f.project, "b.txt").as_deref(), Some("b\n"));
}

/// A revert that only deletes (the shadow index untouched) is seen by the next track even
/// when the fingerprint was trusted; tracks racing the revert are serialized and give a
/// tree of the before or after state, never a mix.
#[tokio::test]
async fn held_tracks_racing_a_revert() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    for i in 0..20 {
        write(&f.project, &format!("n/{i}.txt"), "new\n");
    }
    settle().await;
    let t2 = s.track().await.unwrap();
    settle().await;
    assert_eq!(s.track().await.unwrap(), t2);
    let files = s.changed_files(&t1, &t2).await.unwrap();
    let mut tracks = Vec::new();
    for _ in 0..4 {
        let s2 = s.clone();
        tracks.push(tokio::spawn(async move { s2.track().await.unwrap() }));
    }
    s.revert(&[Patch {
        hash: t1.clone(),
        files,
    }])
    .await
    .unwrap();
    for t in tracks {
        let t = t.await.unwrap();
        assert!(t == t1 || t == t2, "a mixed tree");
    }
    assert_eq!(s.track().await.unwrap(), t1);
    settle().await;
    assert_eq!(s.track().await.unwrap(), t1);
}

/// A name with U+FFFD that really is UTF-8 is skipped too (conservative), and a name with a
/// newline, quotes and pathspec magic is reverted exactly, not as a pattern (`*` restoring
/// every file, `:(glob)` magic).
#[tokio::test]
async fn held_magic_names_revert_literally() {
    let f = fixture();
    write(&f.project, "keep1.txt", "k1\n");
    write(&f.project, "keep2.txt", "k2\n");
    write(&f.project, "*", "star v1\n");
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    write(&f.project, "keep1.txt", "user edit\n");
    write(&f.project, "keep2.txt", "user edit\n");
    write(&f.project, "*", "star v2\n");
    write(&f.project, ":(glob)**", "added\n");
    write(&f.project, "line\nbreak \"q\"", "added\n");
    let touched = s
        .revert(&[Patch {
            hash: t1,
            files: vec![
                f.project.join("*"),
                f.project.join(":(glob)**"),
                f.project.join("line\nbreak \"q\""),
            ],
        }])
        .await
        .unwrap();
    assert_eq!(touched.len(), 3);
    assert_eq!(read(&f.project, "*").as_deref(), Some("star v1\n"));
    assert_eq!(
        read(&f.project, "keep1.txt").as_deref(),
        Some("user edit\n")
    );
    assert_eq!(
        read(&f.project, "keep2.txt").as_deref(),
        Some("user edit\n")
    );
    assert_eq!(read(&f.project, ":(glob)**"), None);
    assert_eq!(read(&f.project, "line\nbreak \"q\""), None);
}

/// A directory where a file the step added was: left alone with its contents.
#[tokio::test]
async fn held_delete_leaves_a_directory_in_a_files_place() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    write(&f.project, "gen", "step\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    std::fs::remove_file(f.project.join("gen")).unwrap();
    write(&f.project, "gen/user.txt", "the user's\n");
    s.revert(&[Patch { hash: t1, files }]).await.unwrap();
    assert_eq!(
        read(&f.project, "gen/user.txt").as_deref(),
        Some("the user's\n")
    );
}

/// The tree had `d` as a link to a directory outside; the step made `d` a real directory
/// with `d/x`. Reverting restores the link first, then the deletion of `d/x` meets the link
/// and stops: the outside `x` survives.
#[tokio::test]
async fn held_a_restored_link_is_never_deleted_through() {
    let f = fixture();
    let outside = f.root.join("outside");
    write(&outside, "x", "outside\n");
    std::os::unix::fs::symlink(&outside, f.project.join("d")).unwrap();
    let s = Snapshot::open(&f.data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    std::fs::remove_file(f.project.join("d")).unwrap();
    write(&f.project, "d/x", "the step's\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    assert_eq!(files, vec![f.project.join("d"), f.project.join("d/x")]);
    s.revert(&[Patch {
        hash: t1.clone(),
        files,
    }])
    .await
    .unwrap();
    assert!(
        std::fs::symlink_metadata(f.project.join("d"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(read(&outside, "x").as_deref(), Some("outside\n"));
    assert_eq!(s.track().await.unwrap(), t1);
}
