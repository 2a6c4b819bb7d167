//! Tests against real temporary git repositories and the real `git` program.

use super::*;
use std::process::Command as StdCommand;

struct Fixture {
    _tmp: tempfile::TempDir,
    project: PathBuf,
    data: PathBuf,
}

fn git_in(dir: &Path, args: &[&str]) -> String {
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

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let project = root.join("project");
    let data = root.join("data");
    std::fs::create_dir_all(&project).unwrap();
    git_in(&project, &["init", "-q"]);
    Fixture {
        _tmp: tmp,
        project,
        data,
    }
}

fn write(p: &Path, rel: &str, content: &str) {
    let path = p.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn read(p: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(p.join(rel)).ok()
}

async fn open(f: &Fixture) -> Snapshot {
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
fn shadow_git(s: &Snapshot, f: &Fixture, args: &[&str]) -> String {
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
async fn settle() {
    tokio::time::sleep(fingerprint::RACY_MARGIN * 2).await;
}

/// The tree `git add --all` and `git write-tree` give now on a copy of `s`'s shadow
/// repository: what a track that ran git would have returned.
fn oracle_tree(s: &Snapshot, f: &Fixture) -> String {
    let copy = tempfile::tempdir().unwrap();
    let status = StdCommand::new("cp")
        .arg("-a")
        .arg(format!("{}/.", s.git_dir().display()))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    let git = |args: &[&str]| {
        let mut all = vec![
            "--git-dir",
            copy.path().to_str().unwrap(),
            "--work-tree",
            f.project.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        git_in(&f.project, &all)
    };
    git(&["add", "--all", "--", "."]);
    git(&["write-tree"]).trim().to_string()
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
    let f = fixture();
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
