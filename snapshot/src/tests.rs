//! Tests against real temporary git repositories and the real `git` program.

use super::*;
use std::process::Command as StdCommand;

pub(super) struct Fixture {
    _tmp: tempfile::TempDir,
    /// The temporary directory holding `project` and `data` (resolved).
    pub(super) root: PathBuf,
    pub(super) project: PathBuf,
    pub(super) data: PathBuf,
}

pub(super) fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = StdCommand::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(super) fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let project = root.join("project");
    let data = root.join("data");
    std::fs::create_dir_all(&project).unwrap();
    git_in(&project, &["init", "-q"]);
    Fixture {
        _tmp: tmp,
        root,
        project,
        data,
    }
}

pub(super) fn write(p: &Path, rel: &str, content: &str) {
    let path = p.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

pub(super) fn read(p: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(p.join(rel)).ok()
}

pub(super) async fn open(f: &Fixture) -> Snapshot {
    Snapshot::open(&f.data, &f.project, &[])
        .await
        .expect("git repo")
}

#[tokio::test]
async fn not_a_git_repo_is_unavailable() {
    let tmp = tempfile::tempdir().unwrap();
    let err = Snapshot::open(tmp.path(), tmp.path(), &[])
        .await
        .unwrap_err();
    assert!(matches!(err, Unavailable::NotGitRepo(_)), "{err:?}");
    assert!(err.to_string().contains("not in a git repository"));
}

#[tokio::test]
async fn opened_from_a_subdirectory_uses_the_top_level() {
    let f = fixture();
    write(&f.project, "sub/x.txt", "x\n");
    let s = Snapshot::open(&f.data, &f.project.join("sub"), &[])
        .await
        .unwrap();
    assert_eq!(s.work_tree(), f.project.as_path());
    assert!(s.git_dir().starts_with(f.data.join("snapshot")));
}

#[tokio::test]
async fn same_content_same_tree_and_changed_files_listed() {
    let f = fixture();
    write(&f.project, "a.txt", "one\n");
    write(&f.project, "dir/b.txt", "two\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    assert!(is_hash(&t1));
    assert_eq!(s.track().await.unwrap(), t1, "nothing changed, same tree");
    write(&f.project, "a.txt", "one\nmore\n");
    write(&f.project, "new file *.txt", "n\n");
    std::fs::remove_file(f.project.join("dir/b.txt")).unwrap();
    let t2 = s.track().await.unwrap();
    assert_ne!(t1, t2);
    let mut files = s.changed_files(&t1, &t2).await.unwrap();
    files.sort();
    assert_eq!(
        files,
        vec![
            f.project.join("a.txt"),
            f.project.join("dir/b.txt"),
            f.project.join("new file *.txt"),
        ]
    );
    assert!(s.changed_files(&t2, &t2).await.unwrap().is_empty());
}

#[tokio::test]
async fn users_git_dir_is_never_written() {
    let f = fixture();
    write(&f.project, "a.txt", "one\n");
    git_in(&f.project, &["add", "a.txt"]);
    let index_before = std::fs::read(f.project.join(".git/index")).unwrap();
    let objects_before = git_in(&f.project, &["count-objects", "-v"]);
    let s = open(&f).await;
    write(&f.project, "b.txt", "two\n");
    s.track().await.unwrap();
    write(&f.project, "a.txt", "changed\n");
    s.track().await.unwrap();
    assert_eq!(
        std::fs::read(f.project.join(".git/index")).unwrap(),
        index_before
    );
    assert_eq!(git_in(&f.project, &["count-objects", "-v"]), objects_before);
    // The shadow repository is not inside the project.
    assert!(!s.git_dir().starts_with(&f.project));
}

#[tokio::test]
async fn ignore_rules_and_large_untracked_files_are_left_out() {
    let f = fixture();
    write(&f.project, ".gitignore", "*.log\nbuild/\n");
    write(&f.project, ".git/info/exclude", "secret.env\n");
    write(&f.project, "keep.txt", "k\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    write(&f.project, "run.log", "log\n");
    write(&f.project, "build/out.o", "obj\n");
    write(&f.project, "secret.env", "KEY=1\n");
    let big = "x".repeat(MAX_UNTRACKED_BYTES as usize + 1);
    write(&f.project, "big.bin", &big);
    let exactly = "y".repeat(MAX_UNTRACKED_BYTES as usize);
    write(&f.project, "limit.bin", &exactly);
    write(&f.project, "keep.txt", "k2\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    assert_eq!(
        files,
        vec![f.project.join("keep.txt"), f.project.join("limit.bin")],
        "ignored and >2 MiB files are not in snapshots; exactly 2 MiB is"
    );
}

#[tokio::test]
async fn data_dir_inside_the_project_is_excluded() {
    let f = fixture();
    let data = f.project.join(".troupe-data");
    write(&f.project, "a.txt", "a\n");
    let s = Snapshot::open(&data, &f.project, &[]).await.unwrap();
    let t1 = s.track().await.unwrap();
    write(&data, "troupe.db", "db\n");
    let t2 = s.track().await.unwrap();
    assert_eq!(t1, t2, "troupe's own files never appear in a snapshot");
}

/// The process's own files in the project (a batch's `--out`, given relatively, through
/// a subdirectory; a store file) are never snapshotted, so no diff shows them and no revert
/// rewinds them; the project's files beside them are.
#[tokio::test]
async fn own_files_inside_the_project_are_excluded() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    std::fs::create_dir_all(f.project.join("out")).unwrap();
    let own = vec![
        f.project.join("out").join("..").join("results.jsonl"),
        f.project.join("my [db].sqlite"),
        // Outside the project: nothing to exclude, and no error.
        f.data.join("elsewhere.jsonl"),
    ];
    let s = Snapshot::open(&f.data, &f.project, &own).await.unwrap();
    let t1 = s.track().await.unwrap();
    write(&f.project, "results.jsonl", "{\"id\":1}\n");
    write(&f.project, "my [db].sqlite", "db\n");
    let t2 = s.track().await.unwrap();
    assert_eq!(t1, t2, "own files never appear in a snapshot");
    write(&f.project, "a.txt", "b\n");
    let t3 = s.track().await.unwrap();
    let changed: Vec<String> = s
        .diff(&t1, &t3)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.file)
        .collect();
    assert_eq!(changed, vec!["a.txt".to_string()]);
}

#[tokio::test]
async fn diff_counts_lines_and_status() {
    let f = fixture();
    write(&f.project, "m.txt", "1\n2\n3\n");
    write(&f.project, "gone.txt", "a\nb\n");
    std::fs::write(f.project.join("bin.dat"), [0u8, 1, 2, 3]).unwrap();
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    write(&f.project, "m.txt", "1\ntwo\n3\n4\n");
    std::fs::remove_file(f.project.join("gone.txt")).unwrap();
    write(&f.project, "new.txt", "x\ny\nz\n");
    std::fs::write(f.project.join("bin.dat"), [0u8, 9, 9]).unwrap();
    let t2 = s.track().await.unwrap();
    let d = s.diff_full(&t1, &t2).await.unwrap();
    let by = |name: &str| d.iter().find(|c| c.file == name).unwrap().clone();
    assert_eq!(d.len(), 4);
    let m = by("m.txt");
    assert_eq!(
        (m.status, m.additions, m.deletions),
        (ChangeStatus::Modified, 2, 1)
    );
    assert!(
        m.patch.starts_with("diff --git a/m.txt b/m.txt"),
        "{}",
        m.patch
    );
    assert!(m.patch.contains("+two\n") && m.patch.contains("-2\n"));
    let g = by("gone.txt");
    assert_eq!(
        (g.status, g.additions, g.deletions),
        (ChangeStatus::Deleted, 0, 2)
    );
    let n = by("new.txt");
    assert_eq!(
        (n.status, n.additions, n.deletions),
        (ChangeStatus::Added, 3, 0)
    );
    assert!(n.patch.contains("new.txt"));
    let b = by("bin.dat");
    assert!(b.binary);
    // The plain diff has the same counts without the text.
    let plain = s.diff(&t1, &t2).await.unwrap();
    assert_eq!(plain.len(), 4);
    assert!(plain.iter().all(|c| c.patch.is_empty()));
    let text = s.diff_text(&t1, &t2).await.unwrap();
    assert!(text.contains("diff --git a/new.txt b/new.txt"));
}

#[tokio::test]
async fn revert_restores_modified_and_deleted_and_deletes_added() {
    let f = fixture();
    write(&f.project, ".gitignore", "*.log\n");
    write(&f.project, "b.txt", "b\n");
    write(&f.project, "c.txt", "c\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    // The "agent" step.
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "b.txt", "b edited\n");
    std::fs::remove_file(f.project.join("c.txt")).unwrap();
    write(&f.project, "d dir/d.txt", "new\n");
    write(&f.project, "x.log", "ignored\n");
    let big = "z".repeat(MAX_UNTRACKED_BYTES as usize + 10);
    write(&f.project, "big.bin", &big);
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    assert_eq!(files.len(), 4);
    let before_revert = s.track().await.unwrap();
    let touched = s
        .revert(&[Patch {
            hash: t1.clone(),
            files: files.clone(),
        }])
        .await
        .unwrap();
    assert_eq!(touched.len(), 4);
    assert_eq!(read(&f.project, "a.txt"), None);
    assert_eq!(read(&f.project, "b.txt").as_deref(), Some("b\n"));
    assert_eq!(read(&f.project, "c.txt").as_deref(), Some("c\n"));
    assert_eq!(read(&f.project, "d dir/d.txt"), None);
    assert_eq!(read(&f.project, "x.log").as_deref(), Some("ignored\n"));
    assert_eq!(read(&f.project, "big.bin").as_deref(), Some(big.as_str()));
    // Unrevert: back to the state before the revert, byte for byte.
    s.restore(&before_revert, &files).await.unwrap();
    assert_eq!(read(&f.project, "a.txt").as_deref(), Some("a\n"));
    assert_eq!(read(&f.project, "b.txt").as_deref(), Some("b edited\n"));
    assert_eq!(read(&f.project, "c.txt"), None);
    assert_eq!(read(&f.project, "d dir/d.txt").as_deref(), Some("new\n"));
    assert_eq!(s.track().await.unwrap(), t2);
}

#[tokio::test]
async fn first_patch_listing_a_file_wins() {
    let f = fixture();
    write(&f.project, "f.txt", "v1\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    write(&f.project, "f.txt", "v2\n");
    let t2 = s.track().await.unwrap();
    write(&f.project, "f.txt", "v3\n");
    let file = vec![f.project.join("f.txt")];
    let patches = [
        Patch {
            hash: t1,
            files: file.clone(),
        },
        Patch {
            hash: t2,
            files: file,
        },
    ];
    s.revert(&patches).await.unwrap();
    assert_eq!(read(&f.project, "f.txt").as_deref(), Some("v1\n"));
}

#[tokio::test]
async fn a_user_edit_between_steps_is_not_undone_by_reverting_a_step() {
    let f = fixture();
    write(&f.project, "agent.txt", "a1\n");
    write(&f.project, "user.txt", "u1\n");
    let s = open(&f).await;
    // Step 1 (agent) changes agent.txt.
    let start1 = s.track().await.unwrap();
    write(&f.project, "agent.txt", "a2\n");
    let finish1 = s.track().await.unwrap();
    let step1 = s.changed_files(&start1, &finish1).await.unwrap();
    // The user edits user.txt between the steps; step 2 changes nothing.
    write(&f.project, "user.txt", "u2 by the user\n");
    let start2 = s.track().await.unwrap();
    let finish2 = s.track().await.unwrap();
    assert!(s.changed_files(&start2, &finish2).await.unwrap().is_empty());
    s.revert(&[Patch {
        hash: start1,
        files: step1,
    }])
    .await
    .unwrap();
    assert_eq!(read(&f.project, "agent.txt").as_deref(), Some("a1\n"));
    assert_eq!(
        read(&f.project, "user.txt").as_deref(),
        Some("u2 by the user\n")
    );
}

#[tokio::test]
async fn concurrent_tracks_on_one_repository_are_serialized() {
    let f = fixture();
    for i in 0..20 {
        write(&f.project, &format!("f{i}.txt"), &format!("{i}\n"));
    }
    let a = open(&f).await;
    let b = open(&f).await;
    let mut tasks = Vec::new();
    for k in 0..8 {
        let s = if k % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move { s.track().await }));
    }
    let mut trees = HashSet::new();
    for t in tasks {
        trees.insert(t.await.unwrap().expect("no index.lock clash"));
    }
    assert_eq!(trees.len(), 1);
}

#[tokio::test]
async fn stale_index_lock_is_cleared() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    s.track().await.unwrap();
    std::fs::write(s.git_dir().join("index.lock"), b"").unwrap();
    // A fresh process (new state) finds the stale lock and removes it.
    drop(s);
    let s = open(&f).await;
    write(&f.project, "a.txt", "b\n");
    s.track().await.expect("stale index.lock removed");
}

#[tokio::test]
async fn bad_hashes_are_refused() {
    let f = fixture();
    let s = open(&f).await;
    let err = s.changed_files("HEAD", "HEAD").await.unwrap_err();
    assert!(matches!(err, SnapshotError::BadHash(_)));
    let err = s
        .revert(&[Patch {
            hash: "--output=/tmp/x".into(),
            files: vec![],
        }])
        .await
        .unwrap_err();
    assert!(matches!(err, SnapshotError::BadHash(_)));
}

#[tokio::test]
async fn gc_runs() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    s.track().await.unwrap();
    s.gc().await.unwrap();
}

#[test]
fn exclude_lines_are_literal() {
    assert_eq!(exclude_line("a b/*x?.txt"), "/a\\ b/\\*x\\?.txt");
    assert_eq!(exclude_line("#n!"), "/\\#n\\!");
}

#[test]
fn own_pathspecs_match_only_the_path() {
    assert_eq!(
        own_pathspecs("d/a*b"),
        b":(exclude,top,glob)[\\d]/a\\*b\0:(exclude,top,glob)[\\d]/a\\*b/**\0".to_vec()
    );
    assert!(own_pathspecs("").is_empty());
}

#[test]
fn path_hash_is_stable() {
    assert_eq!(path_hash(Path::new("")), "cbf29ce484222325");
    assert_eq!(path_hash(Path::new("/a")), path_hash(Path::new("/a")));
    assert_ne!(path_hash(Path::new("/a")), path_hash(Path::new("/b")));
}

#[test]
fn raw_numstat_parsing() {
    let out = b":100644 100644 aaaa bbbb M\0x\0:000000 100644 0000 cccc A\0y z\0\
                2\t1\tx\0-\t-\ty z\0";
    let c = parse_raw_numstat(out);
    assert_eq!(c.len(), 2);
    assert_eq!((c[0].additions, c[0].deletions), (2, 1));
    assert_eq!(c[1].status, ChangeStatus::Added);
    assert!(c[1].binary);
    assert_eq!(c[0].after.as_deref(), Some("100644 bbbb"));
    assert_eq!(c[1].after.as_deref(), Some("100644 cccc"));
    let d = parse_raw_numstat(b":100755 000000 aaaa 0000 D\0gone\0");
    assert_eq!(d[0].after, None);
    let odd = parse_raw_numstat(b":100644\0odd\0");
    assert_eq!(files_between(&odd, &odd), ["odd"], "unparsable: changed");
}

#[tokio::test]
async fn files_between_two_snapshots_agree_with_git() {
    // Changed files derived from the diffs of a common first snapshot (no git process)
    // equal `git diff-tree --name-only` between the two, for every pair of a random history.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let first = s.track().await.unwrap();
    let mut trees = vec![first.clone()];
    let mut seed: u64 = 0x0123_4567_89ab_cdef;
    for _ in 0..14 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        random_change(&f.project, seed);
        trees.push(s.track().await.unwrap());
    }
    for a in &trees {
        let to_a = s.diff(&first, a).await.unwrap();
        for b in &trees {
            let to_b = s.diff(&first, b).await.unwrap();
            let derived: Vec<PathBuf> = files_between(&to_a, &to_b)
                .iter()
                .map(|rel| f.project.join(rel))
                .collect();
            assert_eq!(derived, s.changed_files(a, b).await.unwrap(), "{a} -> {b}");
        }
    }
}

/// Runs git on `s`'s shadow repository (and `f`'s project as its work tree).
pub(super) fn shadow_git(s: &Snapshot, f: &Fixture, args: &[&str]) -> String {
    let mut all = vec![
        "--git-dir",
        s.git_dir().to_str().unwrap(),
        "--work-tree",
        f.project.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    git_in(&f.project, &all)
}

/// The tree a shadow repository made from scratch gives for the project now (no reuse: a
/// fresh data directory). Tree hashes depend only on content, so it must equal `track`'s.
async fn fresh_tree(f: &Fixture) -> String {
    let data = tempfile::tempdir().unwrap();
    let s = Snapshot::open(data.path(), &f.project, &[]).await.unwrap();
    s.track().await.unwrap()
}

/// Tracks again at once, asserting the tree is the same and only `git add` ran (also right
/// after a write, while git still re-checks the entries of files changed in the index's own
/// second and rewrites the index).
async fn unchanged(s: &Snapshot, tree: &str) {
    for _ in 0..3 {
        let runs = s.git_runs();
        assert_eq!(s.track().await.unwrap(), tree, "nothing changed, same tree");
        assert_eq!(s.git_runs() - runs, 1, "git add only");
    }
}

#[tokio::test]
async fn a_track_that_finds_nothing_changed_runs_only_git_add() {
    // Without fingerprints (a file system they do not trust, or too many files).
    let f = fixture();
    write(&f.project, ".gitignore", "build/\n");
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    s.without_fingerprints().await;
    let t1 = s.track().await.unwrap();
    unchanged(&s, &t1).await;
    // A change: add, then write-tree.
    write(&f.project, "a.txt", "b\n");
    let runs = s.git_runs();
    let t2 = s.track().await.unwrap();
    assert_ne!(t2, t1);
    assert_eq!(s.git_runs() - runs, 2, "git add and write-tree");
    unchanged(&s, &t2).await;
    // A large file git ignores, or inside the project's own .git, needs no ls-files.
    let big = "x".repeat(MAX_UNTRACKED_BYTES as usize + 1);
    write(&f.project, "build/huge.bin", &big);
    write(&f.project, ".git/huge.pack", &big);
    let runs = s.git_runs();
    assert_eq!(s.track().await.unwrap(), t2);
    assert_eq!(s.git_runs() - runs, 1);
    // A large file git would see: ls-files finds it untracked, it stays out.
    write(&f.project, "data/huge.bin", &big);
    let runs = s.git_runs();
    assert_eq!(
        s.track().await.unwrap(),
        t2,
        "over 2 MiB and untracked: left out"
    );
    assert_eq!(s.git_runs() - runs, 2, "ls-files and git add");
    assert_eq!(fresh_tree(&f).await, t2);
}

#[tokio::test]
async fn a_reused_tree_always_equals_a_tree_made_from_scratch() {
    // Same-size rewrites right after a track (within one file-system timestamp tick),
    // creations, deletions, mode changes, reverts: after each, the tree `track` returns
    // (reused or written) is the one a new shadow repository computes.
    let f = fixture();
    write(&f.project, "a.txt", "0000\n");
    let s = open(&f).await;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut trees = Vec::new();
    for round in 0..40 {
        let r = next();
        let name = format!("f{}.txt", r % 4);
        match (r >> 8) % 5 {
            0 | 1 => write(&f.project, &name, &format!("{:04}\n", (r >> 16) % 10_000)),
            2 => {
                let _ = std::fs::remove_file(f.project.join(&name));
            }
            3 => {
                use std::os::unix::fs::PermissionsExt;
                if let Ok(m) = std::fs::metadata(f.project.join(&name)) {
                    let mode = m.permissions().mode() ^ 0o111;
                    std::fs::set_permissions(
                        f.project.join(&name),
                        std::fs::Permissions::from_mode(mode),
                    )
                    .unwrap();
                }
            }
            _ => {
                if let Some(old) = trees.get((r >> 20) as usize % trees.len().max(1)) {
                    let old: &String = old;
                    let files = (0..4)
                        .map(|i| f.project.join(format!("f{i}.txt")))
                        .collect();
                    s.revert(&[Patch {
                        hash: old.clone(),
                        files,
                    }])
                    .await
                    .unwrap();
                }
            }
        }
        let tree = s.track().await.unwrap();
        assert_eq!(tree, fresh_tree(&f).await, "round {round}");
        trees.push(tree);
    }
}

#[tokio::test]
async fn an_index_without_checksum_is_never_reused() {
    // A user's `index.skipHash` (set by `feature.manyFiles`) is overridden for the shadow
    // index, so reuse still works; an index written without checksum anyway (zeros: git's
    // "no checksum") is never taken as unchanged.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    s.without_fingerprints().await;
    s.track().await.unwrap();
    shadow_git(&s, &f, &["config", "feature.manyFiles", "true"]);
    write(&f.project, "a.txt", "b\n");
    let t = s.track().await.unwrap();
    unchanged(&s, &t).await;
    let index = s.git_dir().join("index");
    let mut bytes = std::fs::read(&index).unwrap();
    let n = bytes.len();
    bytes[n - 20..].fill(0);
    assert!(s.index_stamp().await.is_some());
    std::fs::write(&index, &bytes).unwrap();
    assert!(s.index_stamp().await.is_none(), "no checksum, no stamp");
    assert_eq!(s.track().await.unwrap(), t);
    write(&f.project, "a.txt", "c\n");
    assert_eq!(s.track().await.unwrap(), fresh_tree(&f).await);
}

#[tokio::test]
async fn an_index_another_process_changed_gets_a_new_tree() {
    // Another troupe process on the same project stages a change in the shared shadow
    // index; this process's `git add` then has nothing to add, yet its tree must change.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    write(&f.project, "a.txt", "changed elsewhere\n");
    shadow_git(&s, &f, &["add", "--all", "--", "."]);
    let t2 = s.track().await.unwrap();
    assert_ne!(t2, t1);
    assert_eq!(t2, fresh_tree(&f).await);
}

#[tokio::test]
async fn a_project_too_large_to_walk_asks_git_for_large_files() {
    let f = fixture();
    for i in 0..=git::WALK_LIMIT {
        write(&f.project, &format!("d{}/f{i}.txt", i / 500), "x\n");
    }
    let s = open(&f).await;
    s.without_fingerprints().await;
    let t1 = s.track().await.unwrap();
    for _ in 0..2 {
        let runs = s.git_runs();
        assert_eq!(s.track().await.unwrap(), t1);
        assert_eq!(s.git_runs() - runs, 2, "ls-files and git add");
    }
    let big = "x".repeat(MAX_UNTRACKED_BYTES as usize + 1);
    write(&f.project, "d0/huge.bin", &big);
    assert_eq!(s.track().await.unwrap(), t1, "still left out");
}

/// Paths in a snapshot tree (via the shadow repository).
fn tree_paths(s: &Snapshot, f: &Fixture, tree: &str) -> Vec<String> {
    shadow_git(s, f, &["ls-tree", "-r", "--name-only", tree])
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_large_file_only_a_symlinked_gitignore_names_stays_out() {
    // git (>= 2.32) does not follow a symlinked `.gitignore` in the work tree, so it does
    // not ignore big.bin: big.bin is untracked and over 2 MiB, and must be left out. The
    // `ignore` crate follows the link, its walk finds no large file, ls-files is skipped.
    let f = fixture();
    write(&f.project, "conf/rules", "big.bin\n");
    std::os::unix::fs::symlink("conf/rules", f.project.join(".gitignore")).unwrap();
    write(
        &f.project,
        "big.bin",
        &"x".repeat(MAX_UNTRACKED_BYTES as usize + 1),
    );
    for fingerprints in [true, false] {
        let data = tempfile::tempdir().unwrap();
        let s = Snapshot::open(data.path(), &f.project, &[]).await.unwrap();
        if !fingerprints {
            s.without_fingerprints().await;
        }
        let tree = s.track().await.unwrap();
        let paths = tree_paths(&s, &f, &tree);
        assert!(!paths.contains(&"big.bin".to_string()), "{paths:?}");
    }
}

#[tokio::test]
async fn a_large_file_in_a_subdirectory_named_like_an_anchored_exclude_stays_out() {
    // `ignore::WalkBuilder::add_ignore` matches the shadow `info/exclude` relative to the
    // process's current directory, git relative to the work tree. Run from a subdirectory
    // (as when troupe starts in `project/app`), the walk applies `/out/` to `app/out/`.
    struct Cwd(PathBuf);
    impl Drop for Cwd {
        fn drop(&mut self) {
            let _ = std::env::set_current_dir(&self.0);
        }
    }
    let f = fixture();
    write(&f.project, ".git/info/exclude", "/out/\n");
    write(&f.project, "app/main.rs", "fn main() {}\n");
    write(
        &f.project,
        "app/out/huge.bin",
        &"x".repeat(MAX_UNTRACKED_BYTES as usize + 1),
    );
    let _cwd = Cwd(std::env::current_dir().unwrap());
    std::env::set_current_dir(f.project.join("app")).unwrap();
    for fingerprints in [true, false] {
        let data = tempfile::tempdir().unwrap();
        let s = Snapshot::open(data.path(), &f.project, &[]).await.unwrap();
        if !fingerprints {
            s.without_fingerprints().await;
        }
        let tree = s.track().await.unwrap();
        let paths = tree_paths(&s, &f, &tree);
        assert!(paths.contains(&"app/main.rs".to_string()), "{paths:?}");
        assert!(
            !paths.contains(&"app/out/huge.bin".to_string()),
            "{paths:?}"
        );
    }
}

/// Waits until every timestamp written so far is past the fingerprint's racy margin.
pub(super) async fn settle() {
    tokio::time::sleep(fingerprint::RACY_MARGIN * 2).await;
}

/// The tree `git add --all` and `git write-tree` give now on a copy of `s`'s shadow
/// repository, untracked files over [`MAX_UNTRACKED_BYTES`] left out (see [`oracle_on`]):
/// what a track that ran git would have returned.
///
/// A copy taken while the index is behind a tree staged in process gets that tree first
/// (`git read-tree`, as `flush_index` would do before git reads the index): the files of
/// the last tree are the tracked ones. `stage_tests` checks that assumption against a
/// repository only git ever ran on.
pub(super) fn oracle_tree(s: &Snapshot, f: &Fixture) -> String {
    let copy = shadow_copy(s);
    let due = git::read_index_stamp(&s.git_dir().join("index"))
        .and_then(|now| git::index_due(s.git_dir(), &now));
    if let Some(tree) = due {
        git_in(
            &f.project,
            &[
                "--git-dir",
                copy.path().to_str().unwrap(),
                "read-tree",
                &tree.to_string(),
            ],
        );
    }
    oracle_on(copy.path(), f)
}

/// Tracks until the fingerprint is trusted (the first track writes the shadow repository's
/// own files, too recent for its own fingerprint), asserting that a track then runs no git;
/// returns the tree.
async fn trusted_tree(s: &Snapshot) -> String {
    settle().await;
    let t = s.track().await.unwrap();
    settle().await;
    assert_eq!(s.track().await.unwrap(), t);
    settle().await;
    let runs = s.git_runs();
    assert_eq!(s.track().await.unwrap(), t);
    assert_eq!(s.git_runs(), runs, "fingerprint trusted: no git");
    t
}

#[tokio::test]
async fn a_track_that_finds_nothing_changed_runs_no_git() {
    let f = fixture();
    write(&f.project, ".gitignore", "build/\n*.log\n");
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "src/lib.rs", "//\n");
    write(&f.project, "build/out.o", "o");
    write(&f.project, "x.log", "log");
    let s = open(&f).await;
    let t1 = trusted_tree(&s).await;
    for _ in 0..3 {
        let runs = s.git_runs();
        assert_eq!(s.track().await.unwrap(), t1);
        assert_eq!(s.git_runs() - runs, 0, "nothing changed: no git");
    }
    // What git ignores changes freely.
    write(&f.project, "build/out.o", "o2");
    write(&f.project, "build/new/deep.o", "o");
    write(&f.project, "x.log", "log2");
    settle().await;
    let runs = s.git_runs();
    assert_eq!(s.track().await.unwrap(), t1);
    assert_eq!(s.git_runs() - runs, 0, "only ignored files changed");
    // A change is seen, and the next unchanged track is free again.
    write(&f.project, "src/lib.rs", "//2\n");
    settle().await;
    let t2 = s.track().await.unwrap();
    assert_ne!(t2, t1);
    assert_eq!(t2, oracle_tree(&s, &f));
    settle().await;
    let runs = s.git_runs();
    assert_eq!(s.track().await.unwrap(), t2);
    assert_eq!(s.git_runs() - runs, 0);
}

#[tokio::test]
async fn a_rewrite_that_restores_size_and_mtime_is_still_seen() {
    let f = fixture();
    write(&f.project, "a.txt", "aaaa\n");
    let s = open(&f).await;
    let t1 = trusted_tree(&s).await;
    let mtime = std::fs::metadata(f.project.join("a.txt"))
        .unwrap()
        .modified()
        .unwrap();
    write(&f.project, "a.txt", "bbbb\n");
    std::fs::File::options()
        .write(true)
        .open(f.project.join("a.txt"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    settle().await;
    let t2 = s.track().await.unwrap();
    assert_ne!(t2, t1, "ctime changed");
    assert_eq!(t2, oracle_tree(&s, &f));
}

#[tokio::test]
async fn a_file_added_where_every_file_was_ignored_is_seen() {
    // git lists `logs/` as an ignored directory (all it holds is ignored) but still walks
    // it: it is not skipped, and a new file there is snapshotted.
    let f = fixture();
    write(&f.project, ".gitignore", "*.log\n");
    write(&f.project, "logs/a.log", "x");
    write(&f.project, "logs/deeper/b.log", "x");
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let t1 = trusted_tree(&s).await;
    assert!(!tree_paths(&s, &f, &t1).contains(&"logs/a.log".to_string()));
    write(&f.project, "logs/deeper/notes.txt", "n\n");
    settle().await;
    let t2 = s.track().await.unwrap();
    assert!(tree_paths(&s, &f, &t2).contains(&"logs/deeper/notes.txt".to_string()));
}

#[tokio::test]
async fn a_nested_repository_is_asked_of_git_unless_ignored() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "vendor/lib/x.txt", "x\n");
    let nested = f.project.join("vendor/lib");
    git_in(&nested, &["init", "-q"]);
    git_in(
        &nested,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ],
    );
    let s = open(&f).await;
    settle().await;
    let t1 = s.track().await.unwrap();
    settle().await;
    let runs = s.git_runs();
    assert_eq!(s.track().await.unwrap(), t1);
    assert!(
        s.git_runs() > runs,
        "git reads a nested repository's state from inside it"
    );
    // One in a directory git ignores (a dependency checked out with its history) is not
    // walked: the fingerprint works.
    let g = fixture();
    write(&g.project, ".gitignore", "deps/\n");
    write(&g.project, "a.txt", "a\n");
    write(&g.project, "deps/lib/x.txt", "x\n");
    git_in(&g.project.join("deps/lib"), &["init", "-q"]);
    let s = open(&g).await;
    let t = trusted_tree(&s).await;
    assert_eq!(tree_paths(&s, &g, &t), [".gitignore", "a.txt"]);
}

/// One random change to a small project (a seeded xorshift draw `r`).
fn random_change(p: &Path, r: u64) {
    use std::os::unix::fs::PermissionsExt;
    let dirs = ["", "src/", "logs/", "gen/", "src/deep/"];
    let dir = dirs[(r % 5) as usize];
    let name = format!(
        "{dir}f{}.{}",
        (r >> 4) % 3,
        ["txt", "log", "rs"][((r >> 6) % 3) as usize]
    );
    let path = p.join(&name);
    match (r >> 8) % 12 {
        0..=2 => write(p, &name, &format!("{:04}\n", (r >> 16) % 10_000)),
        3 => {
            let _ = std::fs::remove_file(&path);
        }
        4 => {
            if let Ok(m) = std::fs::metadata(&path) {
                let mode = m.permissions().mode() ^ 0o111;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        5 => {
            let rules = [
                "*.log\n",
                "gen/\n",
                "*.log\n!logs/f1.log\n",
                "",
                "src/deep/\n",
            ];
            write(p, ".gitignore", rules[((r >> 16) % 5) as usize]);
        }
        6 => {
            let rules = ["", "*.rs\n", "/gen/\n"];
            write(p, ".git/info/exclude", rules[((r >> 16) % 3) as usize]);
        }
        7 => {
            let _ = std::fs::remove_file(p.join("link"));
            let target = ["a.txt", "src", "missing"][((r >> 16) % 3) as usize];
            std::os::unix::fs::symlink(target, p.join("link")).unwrap();
        }
        8 => {
            let to = p.join(format!("{dir}renamed{}.txt", (r >> 16) % 2));
            let _ = std::fs::rename(&path, to);
        }
        9 => {
            let _ = std::fs::remove_dir_all(p.join(dir));
        }
        10 => write(p, &format!("{dir}sub{}/n.txt", (r >> 16) % 2), "n\n"),
        _ => write(
            p,
            "src/.gitignore",
            ["f0.txt\n", "", "deep\n"][((r >> 16) % 3) as usize],
        ),
    }
}

#[tokio::test]
async fn a_tree_from_a_fingerprint_always_equals_the_one_git_gives() {
    // Creations, deletions, renames, mode flips, symlinks, rule changes in `.gitignore`
    // files and in the project's `info/exclude`, whole directories removed: after each, the
    // tree `track` returns (with git, or from the fingerprint without it) is the one `git
    // add --all` and `write-tree` give on a copy of the shadow repository.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "src/lib.rs", "//\n");
    let s = open(&f).await;
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut without_git = 0;
    for round in 0..80 {
        let r = next();
        if r % 4 != 0 {
            random_change(&f.project, r >> 2);
        }
        // Mostly past the racy margin (the fingerprint is trusted), sometimes at once.
        if (r >> 40) % 4 != 0 {
            settle().await;
        }
        let runs = s.git_runs();
        let tree = s.track().await.unwrap();
        if s.git_runs() == runs {
            without_git += 1;
        }
        assert_eq!(tree, oracle_tree(&s, &f), "round {round}");
    }
    assert!(
        without_git >= 10,
        "the fingerprint answered {without_git} times of 80"
    );
}

#[tokio::test]
async fn a_fingerprint_is_not_trusted_once_the_index_changed() {
    // With an attributes file, so git stages (without, staging in process reads no index).
    let f = fixture();
    write(&f.project, ".gitattributes", "*.log -text\n");
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let t = trusted_tree(&s).await;
    // Another process wrote the index (here: without checksum): git looks again.
    let index = s.git_dir().join("index");
    let mut bytes = std::fs::read(&index).unwrap();
    let n = bytes.len();
    bytes[n - 20..].fill(0);
    std::fs::write(&index, &bytes).unwrap();
    let runs = s.git_runs();
    assert_eq!(s.track().await.unwrap(), t);
    assert!(s.git_runs() > runs, "index changed: git ran");
}

#[tokio::test]
async fn a_handle_with_other_exclusions_does_not_take_anothers_fingerprint() {
    // Two handles on one shadow repository (one process, two runtimes): the first keeps its
    // store file out; the second does not, so the first one's tree is not its answer.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "own.db", "store\n");
    let with_own = Snapshot::open(&f.data, &f.project, &[f.project.join("own.db")])
        .await
        .unwrap();
    let t = trusted_tree(&with_own).await;
    assert!(!tree_paths(&with_own, &f, &t).contains(&"own.db".to_string()));
    let plain = open(&f).await;
    let tree = plain.track().await.unwrap();
    assert!(tree_paths(&plain, &f, &tree).contains(&"own.db".to_string()));
}

#[tokio::test]
async fn a_large_ignored_directory_is_skipped_by_the_fingerprint() {
    // More entries than a fingerprint records, all in a directory git ignores: git's list
    // of ignored directories keeps the walk out of it, and unchanged tracks run no git.
    let f = fixture();
    write(&f.project, ".gitignore", "node_modules/\n");
    write(&f.project, "src/main.rs", "fn main() {}\n");
    for i in 0..=fingerprint::FINGERPRINT_LIMIT {
        write(
            &f.project,
            &format!("node_modules/p{}/f{i}.js", i / 1000),
            "x",
        );
    }
    let s = open(&f).await;
    let t = trusted_tree(&s).await;
    assert!(
        !tree_paths(&s, &f, &t)
            .iter()
            .any(|p| p.starts_with("node_modules"))
    );
    write(&f.project, "src/lib.rs", "\n");
    settle().await;
    let t2 = s.track().await.unwrap();
    assert_eq!(t2, oracle_tree(&s, &f));
    assert!(tree_paths(&s, &f, &t2).contains(&"src/lib.rs".to_string()));
}

// Hostile cases, from a reviewing helper's attack on the fingerprint. The first five were
// real defects: an index made to track ignored files by a revert (file and directory),
// symlinked rule files outside the tree, non-UTF-8 names, pathspec magic in directory names.

/// Paths in a tree, read with `-z` (names as UTF-8, lossy).
fn tree_paths_z(s: &Snapshot, f: &Fixture, tree: &str) -> Vec<String> {
    shadow_git(s, f, &["ls-tree", "-r", "-z", "--name-only", tree])
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Settles, tracks, and asserts the tree is the oracle's; returns (tree, git ran).
async fn hostile_check(s: &Snapshot, f: &Fixture, label: &str) -> (String, bool) {
    settle().await;
    let runs = s.git_runs();
    let tree = s.track().await.unwrap();
    let ran = s.git_runs() != runs;
    assert_eq!(tree, oracle_tree(s, f), "{label} (git ran: {ran})");
    (tree, ran)
}

/// After a change: settle + track (checked against the oracle), then a second settled track
/// that must answer from the fingerprint with the same tree.
async fn hostile_step(s: &Snapshot, f: &Fixture, label: &str) -> String {
    let (t, _) = hostile_check(s, f, label).await;
    // A second one may still be needed (the first git run's own racy files).
    let (t2, _) = hostile_check(s, f, &format!("{label} / again")).await;
    assert_eq!(t2, t, "{label}: unchanged");
    let (t3, ran) = hostile_check(s, f, &format!("{label} / third")).await;
    assert_eq!(t3, t, "{label}: unchanged");
    assert!(!ran, "{label}: the fingerprint should answer once settled");
    t
}

#[tokio::test]
async fn hostile_revert_puts_an_ignored_file_back_into_the_index() {
    // `*.log` is ignored and git listed `debug.log` as an ignored (untracked) file. A revert
    // to a tree from before the rule checks `debug.log` out *into the shadow index*: it is
    // tracked now, so `git add --all` stages its changes although it matches `*.log`.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "debug.log", "one\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    assert!(tree_paths(&s, &f, &t1).contains(&"debug.log".to_string()));
    write(&f.project, ".gitignore", "*.log\n");
    std::fs::remove_file(f.project.join("debug.log")).unwrap();
    hostile_step(&s, &f, "ignored and deleted").await;
    write(&f.project, "debug.log", "two\n");
    hostile_step(&s, &f, "recreated, ignored").await;
    // Any rule change makes the track ask git again, which now lists debug.log as ignored.
    write(&f.project, ".gitignore", "*.log\n# touched\n");
    hostile_step(&s, &f, "rules touched").await;
    s.revert(&[Patch {
        hash: t1.clone(),
        files: vec![f.project.join("debug.log")],
    }])
    .await
    .unwrap();
    let t3 = hostile_step(&s, &f, "reverted: debug.log tracked again").await;
    assert!(tree_paths(&s, &f, &t3).contains(&"debug.log".to_string()));
    // The user edits the (tracked) log file.
    write(&f.project, "debug.log", "three: edited after the revert\n");
    // Staged in process since (the edit is to a tracked file: no rule is asked); the tree
    // is the oracle's.
    let (t4, _) = hostile_check(&s, &f, "tracked ignored file edited").await;
    assert!(tree_paths(&s, &f, &t4).contains(&"debug.log".to_string()));
}

#[tokio::test]
async fn hostile_revert_puts_a_file_of_an_ignored_directory_back_into_the_index() {
    // Same with a directory git wholly ignores (`build/`): the walk skips it entirely.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "build/out.o", "one\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    write(&f.project, ".gitignore", "build/\n");
    std::fs::remove_file(f.project.join("build/out.o")).unwrap();
    write(&f.project, "build/other.o", "x\n");
    hostile_step(&s, &f, "build/ ignored").await;
    // Asked again after the index dropped build/out.o: git lists build/ as ignored.
    write(&f.project, ".gitignore", "build/\n# touched\n");
    hostile_step(&s, &f, "rules touched").await;
    s.revert(&[Patch {
        hash: t1.clone(),
        files: vec![f.project.join("build/out.o")],
    }])
    .await
    .unwrap();
    let t3 = hostile_step(&s, &f, "reverted: build/out.o tracked again").await;
    assert!(tree_paths(&s, &f, &t3).contains(&"build/out.o".to_string()));
    write(&f.project, "build/out.o", "two: edited after the revert\n");
    hostile_check(&s, &f, "tracked file in an ignored directory edited").await;
}

#[tokio::test]
async fn hostile_symlinked_info_exclude_target_changes() {
    // The project's `.git/info/exclude` is a symlink (dotfile managers do this); the
    // fingerprint records its lstat, which does not change when the target does. git reads
    // the target (sync_exclude copies it). Compare with a track that runs git.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "secret.txt", "s\n");
    let rules = f.project.parent().unwrap().join("exclude-rules");
    std::fs::write(&rules, "secret.txt\n").unwrap();
    let exclude = f.project.join(".git/info/exclude");
    let _ = std::fs::remove_file(&exclude);
    std::fs::create_dir_all(exclude.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&rules, &exclude).unwrap();
    let s = open(&f).await;
    let t1 = trusted_tree(&s).await;
    assert!(!tree_paths(&s, &f, &t1).contains(&"secret.txt".to_string()));
    // The user un-excludes secret.txt.
    std::fs::write(&rules, "# nothing\n").unwrap();
    settle().await;
    let runs = s.git_runs();
    let t2 = s.track().await.unwrap();
    let ran = s.git_runs() != runs;
    let expected = fresh_tree(&f).await;
    assert_eq!(
        t2, expected,
        "stale tree from the fingerprint (git ran: {ran})"
    );
}

#[tokio::test]
async fn hostile_non_utf8_ignored_name_hides_a_real_file() {
    // git lists the ignored file `\xff.txt`; read lossily it becomes `\u{FFFD}.txt`, the
    // name of a real, not ignored file, which the walk then skips.
    use std::os::unix::ffi::OsStrExt;
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    std::fs::write(f.project.join(".gitignore"), b"\xff.txt\n").unwrap();
    std::fs::write(
        f.project.join(std::ffi::OsStr::from_bytes(b"\xff.txt")),
        "ignored\n",
    )
    .unwrap();
    write(&f.project, "\u{FFFD}.txt", "kept one\n");
    let s = open(&f).await;
    let t1 = hostile_step(&s, &f, "initial").await;
    assert!(tree_paths_z(&s, &f, &t1).contains(&"\u{FFFD}.txt".to_string()));
    // Any change makes the next track walk again, now with git's list of ignored files.
    write(&f.project, "a.txt", "a2\n");
    hostile_step(&s, &f, "a.txt edited").await;
    write(&f.project, "\u{FFFD}.txt", "kept two, edited\n");
    // The tree is the oracle's (git's or staged in process: both see the edit).
    hostile_check(&s, &f, "edited the real U+FFFD file").await;
}

#[tokio::test]
async fn hostile_directory_shapes() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    write(&p, "dir1/x.txt", "x\n");
    write(&p, "dir1/sub/y.txt", "y\n");
    write(&p, "other/z.txt", "z\n");
    let s = open(&f).await;
    hostile_step(&s, &f, "initial").await;
    std::fs::rename(p.join("dir1"), p.join("dir2")).unwrap();
    hostile_step(&s, &f, "mv dir1 dir2").await;
    // Swap two directories through a temporary name.
    std::fs::rename(p.join("dir2"), p.join("tmp")).unwrap();
    std::fs::rename(p.join("other"), p.join("dir2")).unwrap();
    std::fs::rename(p.join("tmp"), p.join("other")).unwrap();
    hostile_step(&s, &f, "swap dir2 <-> other").await;
    // Swap two same-size files.
    write(&p, "s1.txt", "AAAA\n");
    write(&p, "s2.txt", "BBBB\n");
    hostile_step(&s, &f, "two files").await;
    std::fs::rename(p.join("s1.txt"), p.join("t.txt")).unwrap();
    std::fs::rename(p.join("s2.txt"), p.join("s1.txt")).unwrap();
    std::fs::rename(p.join("t.txt"), p.join("s2.txt")).unwrap();
    hostile_step(&s, &f, "swap s1 <-> s2").await;
    // A file replaced by a directory of the same name, and back.
    std::fs::remove_file(p.join("a.txt")).unwrap();
    write(&p, "a.txt/inner.txt", "i\n");
    hostile_step(&s, &f, "file -> dir").await;
    std::fs::remove_dir_all(p.join("a.txt")).unwrap();
    write(&p, "a.txt", "a\n");
    hostile_step(&s, &f, "dir -> file").await;
    // Symlinked directories.
    std::os::unix::fs::symlink("other", p.join("link")).unwrap();
    hostile_step(&s, &f, "symlink to a dir").await;
    write(&p, "other/new.txt", "through the target\n");
    hostile_step(&s, &f, "file added in the symlink's target").await;
    std::fs::remove_file(p.join("link")).unwrap();
    std::os::unix::fs::symlink("dir2", p.join("link")).unwrap();
    hostile_step(&s, &f, "symlink retargeted (same length)").await;
    std::fs::remove_file(p.join("link")).unwrap();
    std::fs::create_dir(p.join("link")).unwrap();
    write(&p, "link/f.txt", "f\n");
    hostile_step(&s, &f, "symlink -> real dir").await;
    // chmod on a directory, then on the files.
    std::fs::set_permissions(p.join("other"), std::fs::Permissions::from_mode(0o700)).unwrap();
    hostile_step(&s, &f, "chmod dir").await;
    std::fs::set_permissions(
        p.join("other/x.txt"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    hostile_step(&s, &f, "chmod +x file").await;
    // Empty directories, deep trees.
    std::fs::create_dir_all(p.join("empty/deeper/still")).unwrap();
    hostile_step(&s, &f, "empty dirs").await;
    let deep: String = (0..40).map(|i| format!("d{i}/")).collect();
    write(&p, &format!("{deep}leaf.txt"), "leaf\n");
    hostile_step(&s, &f, "deep tree").await;
    write(&p, &format!("{deep}leaf.txt"), "LEAF\n");
    hostile_step(&s, &f, "deep leaf same size").await;
    write(&p, "empty/deeper/still/now.txt", "n\n");
    hostile_step(&s, &f, "file in a former empty dir").await;
    // Moving a file between two directories.
    std::fs::rename(p.join("other/x.txt"), p.join("dir2/x.txt")).unwrap();
    hostile_step(&s, &f, "move between dirs").await;
    // Whole subtree moved under another one.
    std::fs::rename(p.join("dir2"), p.join("other/dir2")).unwrap();
    hostile_step(&s, &f, "subtree moved").await;
}

#[tokio::test]
async fn hostile_file_rewrites() {
    use std::os::unix::fs::MetadataExt;
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "aaaa\n");
    write(&p, "b.txt", "bbbb\n");
    let s = open(&f).await;
    hostile_step(&s, &f, "initial").await;
    // set_times restores mtime and atime.
    let m = std::fs::metadata(p.join("a.txt")).unwrap();
    let (mt, at) = (m.modified().unwrap(), m.accessed().unwrap());
    write(&p, "a.txt", "AAAA\n");
    std::fs::File::options()
        .write(true)
        .open(p.join("a.txt"))
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(mt).set_accessed(at))
        .unwrap();
    hostile_step(&s, &f, "set_times restore").await;
    // Truncation to the same size (zeroes).
    let file = std::fs::File::options()
        .write(true)
        .open(p.join("b.txt"))
        .unwrap();
    file.set_len(0).unwrap();
    file.set_len(5).unwrap();
    drop(file);
    hostile_step(&s, &f, "truncate to same size").await;
    // Rewrite via rename of a temp file (new inode), mtime copied.
    let old = std::fs::metadata(p.join("a.txt")).unwrap();
    std::fs::write(p.join(".a.tmp"), "ZZZZ\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(p.join(".a.tmp"))
        .unwrap()
        .set_modified(old.modified().unwrap())
        .unwrap();
    std::fs::rename(p.join(".a.tmp"), p.join("a.txt")).unwrap();
    hostile_step(&s, &f, "atomic rename rewrite").await;
    // Hard links, modified through the other name (also from outside the project).
    std::fs::hard_link(p.join("a.txt"), p.join("a-link.txt")).unwrap();
    hostile_step(&s, &f, "hard link").await;
    write(&p, "a-link.txt", "YYYY\n");
    hostile_step(&s, &f, "written through the link").await;
    let outside = p.parent().unwrap().join("outside-link");
    std::fs::hard_link(p.join("b.txt"), &outside).unwrap();
    hostile_step(&s, &f, "outside hard link made").await;
    std::fs::write(&outside, "QQQQ\n").unwrap();
    hostile_step(&s, &f, "written from outside the project").await;
    // Delete and recreate at the same path with same size and the old mtime (the inode
    // number may be reused).
    let old = std::fs::metadata(p.join("b.txt")).unwrap();
    std::fs::remove_file(p.join("b.txt")).unwrap();
    std::fs::remove_file(&outside).unwrap();
    write(&p, "b.txt", "RRRR\n");
    std::fs::File::options()
        .write(true)
        .open(p.join("b.txt"))
        .unwrap()
        .set_modified(old.modified().unwrap())
        .unwrap();
    let new = std::fs::metadata(p.join("b.txt")).unwrap();
    eprintln!("inode old {} new {}", old.ino(), new.ino());
    hostile_step(&s, &f, "recreated with old mtime").await;
    // Writes right after a track (same tick), then one settled track.
    for i in 0..5 {
        let t = s.track().await.unwrap();
        write(&p, "a.txt", &format!("{i:04}\n"));
        let _ = t;
    }
    hostile_step(&s, &f, "writes right after tracks").await;
    // Names: newline, backslash, non-UTF-8, leading dash, spaces, glob characters.
    use std::os::unix::ffi::OsStrExt;
    write(&p, "new\nline.txt", "n\n");
    write(&p, "back\\slash.txt", "b\n");
    write(&p, "-dash *?[x].txt", "d\n");
    std::fs::write(
        p.join(std::ffi::OsStr::from_bytes(b"bin\xfe\xff.txt")),
        "x\n",
    )
    .unwrap();
    hostile_step(&s, &f, "odd names").await;
    write(&p, "new\nline.txt", "N\n");
    std::fs::write(
        p.join(std::ffi::OsStr::from_bytes(b"bin\xfe\xff.txt")),
        "y\n",
    )
    .unwrap();
    hostile_step(&s, &f, "odd names edited").await;
}

#[tokio::test]
async fn hostile_large_files_across_the_limit() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    let limit = MAX_UNTRACKED_BYTES as usize;
    write(&p, "big.bin", &"x".repeat(limit + 1));
    let s = open(&f).await;
    let t = hostile_step(&s, &f, "big untracked").await;
    assert!(!tree_paths(&s, &f, &t).contains(&"big.bin".to_string()));
    // Shrinks to the limit: now it is added.
    std::fs::File::options()
        .write(true)
        .open(p.join("big.bin"))
        .unwrap()
        .set_len(limit as u64)
        .unwrap();
    let t = hostile_step(&s, &f, "shrunk to the limit").await;
    assert!(tree_paths(&s, &f, &t).contains(&"big.bin".to_string()));
    // Tracked now: growing past the limit keeps it.
    write(&p, "big.bin", &"y".repeat(limit + 10));
    let t = hostile_step(&s, &f, "tracked, grown").await;
    assert!(tree_paths(&s, &f, &t).contains(&"big.bin".to_string()));
    // Deleted, then back big: untracked again, left out.
    std::fs::remove_file(p.join("big.bin")).unwrap();
    hostile_step(&s, &f, "deleted").await;
    write(&p, "sub/big.bin", &"z".repeat(limit + 1));
    write(&p, "big.bin", &"z".repeat(limit + 1));
    let t = hostile_step(&s, &f, "big again").await;
    assert!(!tree_paths(&s, &f, &t).contains(&"big.bin".to_string()));
    // Same size, new content, and a small one next to it.
    write(&p, "big.bin", &"w".repeat(limit + 1));
    write(&p, "sub/small.txt", "s\n");
    hostile_step(&s, &f, "big rewritten, small added").await;
    // Big in an ignored dir, then the dir un-ignored.
    write(&p, ".gitignore", "out/\n");
    write(&p, "out/huge.bin", &"h".repeat(limit + 1));
    write(&p, "out/small.txt", "s\n");
    hostile_step(&s, &f, "big in ignored dir").await;
    write(&p, ".gitignore", "\n");
    hostile_step(&s, &f, "dir un-ignored").await;
}

#[tokio::test]
async fn hostile_ignore_rules() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    write(&p, "logs/a.log", "l\n");
    write(&p, "logs/keep.log", "k\n");
    write(&p, "gen/out.txt", "g\n");
    write(&p, "gen/.gitignore", "*.tmp\n");
    write(&p, "gen/x.tmp", "t\n");
    let s = open(&f).await;
    hostile_step(&s, &f, "initial").await;
    write(&p, ".gitignore", "*.log\n!keep.log\n");
    hostile_step(&s, &f, "negation").await;
    write(&p, "logs/keep.log", "K2\n");
    write(&p, "logs/a.log", "L2\n");
    hostile_step(&s, &f, "negated file edited").await;
    write(&p, ".gitignore", "*.log\n!keep.log\n.gitignore\n");
    hostile_step(&s, &f, ".gitignore ignores itself").await;
    write(&p, ".gitignore", "*.log\n!keep.log\n.gitignore\ngen/\n");
    hostile_step(&s, &f, "gen/ ignored").await;
    write(&p, "gen/.gitignore", "\n");
    write(&p, "gen/new.txt", "n\n");
    hostile_step(&s, &f, "inside the ignored dir").await;
    write(&p, ".gitignore", "*.log\n!keep.log\n");
    hostile_step(&s, &f, "gen/ un-ignored (its .gitignore changed meanwhile)").await;
    write(&p, "gen/.gitignore", "*.txt\n");
    hostile_step(&s, &f, "gen/.gitignore ignores *.txt").await;
    write(&p, "gen/another.txt", "x\n");
    hostile_step(&s, &f, "ignored new txt").await;
    // The project's info/exclude.
    write(&p, ".git/info/exclude", "a.txt\n/logs/\n");
    hostile_step(&s, &f, "info/exclude").await;
    write(&p, "logs/new.log", "n\n");
    write(&p, "logs/new.txt", "n\n");
    hostile_step(&s, &f, "under excluded logs").await;
    write(&p, ".git/info/exclude", "");
    hostile_step(&s, &f, "info/exclude emptied").await;
    std::fs::remove_file(p.join(".git/info/exclude")).unwrap();
    hostile_step(&s, &f, "info/exclude removed").await;
    // Ignore everything but directories and a few names.
    write(&p, ".gitignore", "*\n!*/\n!.gitignore\n!*.txt\n");
    hostile_step(&s, &f, "whitelist").await;
    write(&p, "logs/w.txt", "w\n");
    write(&p, "logs/w.dat", "w\n");
    hostile_step(&s, &f, "whitelist new files").await;
    // A file ignored by name becomes a dir, and a dir ignored by `x/` becomes a file.
    write(&p, ".gitignore", "thing\nonlydir/\n");
    write(&p, "thing", "t\n");
    write(&p, "onlydir/f.txt", "o\n");
    hostile_step(&s, &f, "thing / onlydir").await;
    std::fs::remove_file(p.join("thing")).unwrap();
    write(&p, "thing/in.txt", "i\n");
    std::fs::remove_dir_all(p.join("onlydir")).unwrap();
    write(&p, "onlydir", "now a file\n");
    hostile_step(&s, &f, "thing -> dir, onlydir -> file").await;
    std::fs::remove_file(p.join("onlydir")).unwrap();
    std::os::unix::fs::symlink("logs", p.join("onlydir")).unwrap();
    hostile_step(&s, &f, "onlydir -> symlink to dir").await;
    // Attributes.
    write(&p, "crlf.txt", "one\ntwo\n");
    hostile_step(&s, &f, "crlf.txt").await;
    write(&p, ".gitattributes", "*.txt text eol=crlf\n");
    hostile_step(&s, &f, "eol=crlf").await;
    write(&p, "crlf.txt", "one\r\ntwo\r\n");
    hostile_step(&s, &f, "crlf content").await;
    write(&p, ".gitattributes", "*.txt filter=up\n");
    hostile_step(&s, &f, "filter attribute without driver").await;
    shadow_git(&s, &f, &["config", "filter.up.clean", "tr a-z A-Z"]);
    hostile_step(&s, &f, "filter driver configured in the shadow config").await;
    write(&p, "f.txt", "lower\n");
    hostile_step(&s, &f, "filtered file").await;
    write(&p, ".gitignore", "\n");
    hostile_step(&s, &f, "no rules").await;
}

#[tokio::test]
async fn hostile_concurrent_writer() {
    // A thread rewrites files (same size, new ones, renames, deletions) while tracks run;
    // after it stops, a settled track must equal the oracle.
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "0000\n");
    write(&p, "d/b.txt", "0000\n");
    let s = open(&f).await;
    hostile_step(&s, &f, "initial").await;
    for round in 0..6u64 {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (stop2, p2) = (stop.clone(), p.clone());
        let writer = std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let _ = std::fs::write(p2.join("a.txt"), format!("{:04}\n", i % 10_000));
                let _ = std::fs::write(p2.join("d/b.txt"), format!("{:04}\n", (i * 7) % 10_000));
                match i % 4 {
                    0 => {
                        let _ = std::fs::write(p2.join(format!("d/n{}.txt", i % 3)), "n\n");
                    }
                    1 => {
                        let _ = std::fs::remove_file(p2.join(format!("d/n{}.txt", i % 3)));
                    }
                    2 => {
                        let _ = std::fs::rename(p2.join("d/n0.txt"), p2.join("d/m.txt"));
                    }
                    _ => {}
                }
                if round % 2 == 0 {
                    std::thread::sleep(Duration::from_micros(300 * (i % 7)));
                }
            }
        });
        for _ in 0..15 {
            // git itself may fail on a file deleted under it ("unable to stat").
            let _ = s.track().await;
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap();
        hostile_step(&s, &f, &format!("after concurrent writes, round {round}")).await;
    }
}

#[tokio::test]
async fn hostile_writes_racing_one_track() {
    // A few writes spaced around one track (so the last one lands during the walk or
    // between the walk and `git add`), then a settled track checked against the oracle.
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "0000\n");
    write(&p, "d/b.txt", "0000\n");
    let s = open(&f).await;
    hostile_step(&s, &f, "initial").await;
    let mut fast = 0;
    for round in 0..30u64 {
        let p2 = p.clone();
        let writer = std::thread::spawn(move || {
            for i in 0..(round % 5 + 1) {
                std::thread::sleep(Duration::from_micros(700 * ((round + i) % 6)));
                let v = round * 10 + i;
                let _ = std::fs::write(p2.join("a.txt"), format!("{:04}\n", v % 10_000));
                if v % 3 == 0 {
                    let _ = std::fs::write(p2.join(format!("d/n{}.txt", v % 4)), "n\n");
                }
                if v % 5 == 0 {
                    let _ = std::fs::remove_file(p2.join(format!("d/n{}.txt", (v / 5) % 4)));
                }
            }
        });
        settle().await;
        s.track().await.unwrap();
        writer.join().unwrap();
        let (_, ran) = hostile_check(&s, &f, &format!("round {round}")).await;
        if !ran {
            fast += 1;
        }
    }
    eprintln!("fast answers after a race: {fast}/30");
}

#[tokio::test]
async fn hostile_directory_name_with_pathspec_magic() {
    // git lists `:foo/` (all it holds is ignored); `git check-ignore` reads its input as
    // pathspecs, so `:foo` is the path `foo`, which the rule `foo` ignores: `:foo` is taken
    // for a directory git never walks. git add does walk it.
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, ".gitignore", "foo\n*.log\n");
    write(&f.project, ":foo/a.log", "x\n");
    let s = open(&f).await;
    hostile_step(&s, &f, "initial").await;
    write(&f.project, ":foo/new.txt", "not ignored\n");
    let (t, _) = hostile_check(&s, &f, "a file added in :foo/").await;
    assert!(tree_paths(&s, &f, &t).contains(&":foo/new.txt".to_string()));
}

// Second hostile review: a walk made under a stale ignored list let an untracked file over
// 2 MiB into the snapshot (its largest-file answer skipped it), and a new large ignored
// directory turned fingerprints off for good. The oracle's copy is taken *before* the track
// (one taken after would already hold what the track wrongly added).

/// A copy of the shadow repository now; `oracle_on` gives what git would give on it.
pub(super) fn shadow_copy(s: &Snapshot) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    let status = StdCommand::new("cp")
        .arg("-a")
        .arg(format!("{}/.", s.git_dir().display()))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    copy
}

/// The tree git gives on `copy` (a copy of a shadow repository, see [`shadow_copy`]) for
/// `f`'s work tree: `add --all` leaving out untracked files over [`MAX_UNTRACKED_BYTES`],
/// then `write-tree`, as a track that runs git does.
pub(super) fn oracle_on(copy: &Path, f: &Fixture) -> String {
    let git = |args: &[&str], stdin: Option<Vec<u8>>| -> Vec<u8> {
        use std::io::Write;
        let mut cmd = StdCommand::new("git");
        cmd.arg("--git-dir")
            .arg(copy)
            .arg("--work-tree")
            .arg(&f.project)
            .args(args)
            .current_dir(&f.project)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut pipe = child.stdin.take().unwrap();
        if let Some(b) = stdin {
            pipe.write_all(&b).unwrap();
        }
        drop(pipe);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let others = git(&["ls-files", "--others", "--exclude-standard", "-z"], None);
    let mut spec = b".\0".to_vec();
    for rel in others.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        use std::os::unix::ffi::OsStrExt;
        let path = f.project.join(std::ffi::OsStr::from_bytes(rel));
        if std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_file() && m.len() > MAX_UNTRACKED_BYTES)
        {
            spec.extend_from_slice(b":(exclude,literal,top)");
            spec.extend_from_slice(rel);
            spec.push(0);
        }
    }
    git(
        &[
            "add",
            "--all",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ],
        Some(spec),
    );
    String::from_utf8_lossy(&git(&["write-tree"], None))
        .trim()
        .to_string()
}

/// Track right now (no settle), compared with git on a copy taken just before.
async fn quick_check(s: &Snapshot, f: &Fixture, label: &str) -> String {
    let copy = shadow_copy(s);
    let runs = s.git_runs();
    let t = s.track().await.unwrap();
    let ran = s.git_runs() != runs;
    assert_eq!(t, oracle_on(copy.path(), f), "{label} (git ran: {ran})");
    t
}

/// A file over [`MAX_UNTRACKED_BYTES`] at `huge` is ignored by `.gitignore` (`rules`, git's
/// list trusted); the rules become `now` (no longer ignoring it) and a track follows. The
/// walk must not answer from the old list: the huge untracked file stays out of the tree,
/// as git on a copy of the shadow repository agrees. `future`: the new rule file's mtime is
/// an hour ahead (an archive from a machine whose clock is ahead: racy on every track), and
/// the track waits past the racy margin.
async fn hostile_large_file_unignored(rules: &str, huge: &str, now: &str, future: bool) {
    let f = fixture();
    let p = f.project.clone();
    write(&p, "a.txt", "a\n");
    write(&p, ".gitignore", rules);
    write(&p, huge, &"h".repeat(MAX_UNTRACKED_BYTES as usize + 1));
    let s = open(&f).await;
    hostile_step(&s, &f, "initial").await;
    std::fs::write(p.join(".gitignore"), now).unwrap();
    if future {
        std::fs::File::options()
            .write(true)
            .open(p.join(".gitignore"))
            .unwrap()
            .set_modified(std::time::SystemTime::now() + Duration::from_secs(3600))
            .unwrap();
        settle().await;
    }
    let t = quick_check(&s, &f, &format!("{rules:?} -> {now:?}")).await;
    assert!(!tree_paths(&s, &f, &t).contains(&huge.to_string()));
}

#[tokio::test]
async fn hostile_large_file_in_a_directory_unignored_just_now() {
    // The rule file is racy, the walk would still skip big/ (old list), find no large file,
    // and git add --all would take the huge untracked file.
    hostile_large_file_unignored("big/\n", "big/huge.bin", "# none\n", false).await;
}

#[tokio::test]
async fn hostile_large_file_in_a_directory_unignored_by_a_future_dated_rule_file() {
    hostile_large_file_unignored("big/\n", "big/huge.bin", "# none\n", true).await;
}

#[tokio::test]
async fn hostile_large_ignored_file_unignored_just_now() {
    hostile_large_file_unignored("*.bin\n", "huge.bin", "*.bim\n", false).await;
}

#[tokio::test]
async fn hostile_npm_install_turns_fingerprints_off_for_good() {
    let f = fixture();
    let p = f.project.clone();
    write(&p, ".gitignore", "node_modules/\n");
    write(&p, "src/main.rs", "fn main() {}\n");
    let s = open(&f).await;
    trusted_tree(&s).await;
    for i in 0..=fingerprint::FINGERPRINT_LIMIT {
        write(&p, &format!("node_modules/p{}/f{i}.js", i / 1000), "x");
    }
    for _ in 0..4 {
        settle().await;
        s.track().await.unwrap();
    }
    settle().await;
    let runs = s.git_runs();
    s.track().await.unwrap();
    assert_eq!(
        s.git_runs(),
        runs,
        "fingerprint answers again after npm install"
    );
}

/// A step that created `d/x`; `d` is then swapped for a link to a directory outside the
/// project holding its own `x`. The revert leaves the outside file alone (git's checkout
/// would not write through the link either).
#[tokio::test]
async fn a_revert_never_deletes_through_a_symlinked_directory() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    write(&f.project, "d/x", "made by the step\n");
    write(&f.project, "e/y", "made by the step\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    assert_eq!(files.len(), 2);
    let outside = f.project.parent().unwrap().join("outside");
    write(&outside, "x", "the user's\n");
    std::fs::remove_dir_all(f.project.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, f.project.join("d")).unwrap();
    // `e` becomes a file: nothing under it to delete.
    std::fs::remove_dir_all(f.project.join("e")).unwrap();
    write(&f.project, "e", "now a file\n");
    s.revert(&[Patch {
        hash: t1.clone(),
        files: files.clone(),
    }])
    .await
    .unwrap();
    assert_eq!(read(&outside, "x").as_deref(), Some("the user's\n"));
    assert_eq!(read(&f.project, "e").as_deref(), Some("now a file\n"));
    // Without the link, the step's file is deleted as before.
    std::fs::remove_file(f.project.join("d")).unwrap();
    write(&f.project, "d/x", "made by the step\n");
    s.revert(&[Patch { hash: t1, files }]).await.unwrap();
    assert_eq!(read(&f.project, "d/x"), None);
}

/// A step created `\xff.txt` (not UTF-8); its name is recorded lossily as `\u{FFFD}.txt`,
/// which is also the name of a file the user keeps (ignored). Reverting must not delete the
/// user's file; the unidentifiable name is skipped.
#[tokio::test]
async fn a_revert_skips_a_name_that_was_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let f = fixture();
    write(&f.project, ".gitignore", "\u{FFFD}.txt\n");
    write(&f.project, "\u{FFFD}.txt", "the user's\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    let odd = f.project.join(std::ffi::OsStr::from_bytes(b"\xff.txt"));
    std::fs::write(&odd, "made by the step\n").unwrap();
    write(&f.project, "plain.txt", "made by the step\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    // As the patch part stores them: text.
    let stored: Vec<PathBuf> = files
        .iter()
        .map(|p| PathBuf::from(p.display().to_string()))
        .collect();
    let touched = s
        .revert(&[Patch {
            hash: t1,
            files: stored,
        }])
        .await
        .unwrap();
    assert_eq!(touched, vec!["plain.txt".to_string()]);
    assert_eq!(
        read(&f.project, "\u{FFFD}.txt").as_deref(),
        Some("the user's\n")
    );
    assert_eq!(read(&f.project, "plain.txt"), None);
    assert!(odd.exists(), "left alone, not guessed at");
}

/// `.gitignore` negations outrank the shadow `info/exclude`; troupe's data directory and
/// own files still never enter a snapshot.
#[tokio::test]
async fn a_gitignore_negation_does_not_bring_own_files_back() {
    let f = fixture();
    let data = f.project.join(".troupe-data");
    write(
        &f.project,
        ".gitignore",
        "*\n!*/\n!*.db\n!*.jsonl\n!*.sqlite\n!a.txt\n!.gitignore\n",
    );
    write(&f.project, "a.txt", "a\n");
    // Glob characters in an own file's name match only themselves.
    let own = vec![
        f.project.join("out.jsonl"),
        f.project.join("we[i]rd*.sqlite"),
    ];
    let s = Snapshot::open(&data, &f.project, &own).await.unwrap();
    let t1 = s.track().await.unwrap();
    write(&data, "troupe.db", "db\n");
    write(&f.project, "out.jsonl", "{}\n");
    write(&f.project, "kept.db", "the project's\n");
    write(&f.project, "we[i]rd*.sqlite", "own\n");
    write(&f.project, "weird.sqlite", "the project's\n");
    settle().await;
    let t2 = s.track().await.unwrap();
    let files: Vec<String> = s
        .diff(&t1, &t2)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.file)
        .collect();
    assert_eq!(files, vec!["kept.db", "weird.sqlite"]);
    assert_eq!(
        tree_paths(&s, &f, &t2),
        vec![".gitignore", "a.txt", "kept.db", "weird.sqlite"]
    );
}

/// One Latin-1 byte in the project's `.git/info/exclude` keeps every rule of the file.
#[tokio::test]
async fn a_latin1_byte_in_the_projects_info_exclude_keeps_its_rules() {
    let f = fixture();
    let exclude = f.project.join(".git/info/exclude");
    std::fs::create_dir_all(exclude.parent().unwrap()).unwrap();
    std::fs::write(&exclude, b"caf\xe9.txt\n*.secret\n").unwrap();
    write(&f.project, "a.txt", "a\n");
    write(&f.project, "k.secret", "s\n");
    let s = open(&f).await;
    let t = s.track().await.unwrap();
    assert_eq!(tree_paths(&s, &f, &t), vec!["a.txt"]);
}

/// The shadow repository deleted while the process runs (a user cleaning the data
/// directory): the next track makes it again instead of failing until a restart.
#[tokio::test]
async fn a_deleted_shadow_repository_is_made_again() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    std::fs::remove_dir_all(s.git_dir()).unwrap();
    let again = s.track().await.unwrap();
    assert_eq!(again, t1, "same content, same tree");
    write(&f.project, "b.txt", "b\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    assert_eq!(files, vec![f.project.join("b.txt")]);
}

/// A track finding the gc stamp older than [`GC_INTERVAL`] touches it and starts a gc in
/// the background (the loose objects end up packed); a fresh stamp starts none.
#[tokio::test]
async fn a_track_starts_a_gc_when_the_stamp_is_old() {
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    s.track().await.unwrap();
    let stamp = s.git_dir().join("troupe-gc");
    let packs = || {
        std::fs::read_dir(s.git_dir().join("objects/pack"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
                    .count()
            })
            .unwrap_or(0)
    };
    write(&f.project, "b.txt", "b\n");
    s.track().await.unwrap();
    assert_eq!(packs(), 0, "a fresh stamp starts no gc");
    std::fs::File::options()
        .write(true)
        .open(&stamp)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - GC_INTERVAL * 2)
        .unwrap();
    write(&f.project, "c.txt", "c\n");
    s.track().await.unwrap();
    let age = std::fs::metadata(&stamp)
        .unwrap()
        .modified()
        .unwrap()
        .elapsed()
        .unwrap();
    assert!(age < GC_INTERVAL, "stamp touched");
    for _ in 0..200 {
        if packs() > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no gc ran within 10 s");
}

/// A step that turned a file into a directory (and one that turned a directory into a file)
/// is reverted whole: deletions run before restores, so each clears the other's way.
#[tokio::test]
async fn a_revert_undoes_a_file_turned_into_a_directory_and_back() {
    let f = fixture();
    write(&f.project, "x", "file x\n");
    write(&f.project, "d/y", "file d/y\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    std::fs::remove_file(f.project.join("x")).unwrap();
    write(&f.project, "x/inner", "now a directory\n");
    std::fs::remove_dir_all(f.project.join("d")).unwrap();
    write(&f.project, "d", "now a file\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    assert_eq!(files.len(), 4, "{files:?}");
    let touched = s
        .revert(&[Patch {
            hash: t1.clone(),
            files,
        }])
        .await
        .unwrap();
    assert_eq!(touched.len(), 4, "{touched:?}");
    assert_eq!(read(&f.project, "x").as_deref(), Some("file x\n"));
    assert_eq!(read(&f.project, "d/y").as_deref(), Some("file d/y\n"));
    assert_eq!(s.track().await.unwrap(), t1);
}

/// A hook of the user's (`core.hooksPath` in any config git reads; here the shadow
/// repository's own) never runs on the shadow repository: a failing `post-checkout` made a
/// revert fail after its deletions, with half the files restored.
#[tokio::test]
async fn a_users_hook_never_runs_on_the_shadow_repository() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    write(&f.project, "a.txt", "a\n");
    let s = open(&f).await;
    let t1 = s.track().await.unwrap();
    let hooks = f.root.join("hooks");
    let marker = f.root.join("hook-ran");
    write(
        &hooks,
        "post-checkout",
        &format!("#!/bin/sh\ntouch '{}'\nexit 3\n", marker.display()),
    );
    std::fs::set_permissions(
        hooks.join("post-checkout"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    shadow_git(
        &s,
        &f,
        &["config", "core.hooksPath", hooks.to_str().unwrap()],
    );
    write(&f.project, "a.txt", "edited\n");
    write(&f.project, "b.txt", "new\n");
    let t2 = s.track().await.unwrap();
    let files = s.changed_files(&t1, &t2).await.unwrap();
    s.revert(&[Patch { hash: t1, files }]).await.unwrap();
    assert_eq!(read(&f.project, "a.txt").as_deref(), Some("a\n"));
    assert_eq!(read(&f.project, "b.txt"), None);
    assert!(!marker.exists(), "the hook ran");
}
