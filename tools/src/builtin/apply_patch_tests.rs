use super::*;
use crate::Tool;
use crate::paths::test_support::Recorder;

async fn apply(dir: &Path, patch: &str) -> Result<ToolOutput, ToolError> {
    ApplyPatchTool
        .execute(json!({"patchText": patch}), ToolContext::simple(dir))
        .await
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[tokio::test]
async fn adds_updates_moves_and_deletes_in_one_call() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(root.join("old.txt"), "bye\n").unwrap();
    std::fs::create_dir(root.join("src")).unwrap();
    std::fs::write(root.join("src/m.rs"), "fn f() {\n    1\n}\n").unwrap();
    let patch = "*** Begin Patch\n*** Add File: new/dir/n.txt\n+hello\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n three\n*** Delete File: old.txt\n*** Update File: src/m.rs\n*** Move to: src/n.rs\n@@ fn f() {\n-    1\n+    2\n*** End Patch";
    let out = apply(&root, patch).await.unwrap();
    assert_eq!(read(&root.join("new/dir/n.txt")), "hello\n");
    assert_eq!(read(&root.join("a.txt")), "one\nTWO\nthree\n");
    assert!(!root.join("old.txt").exists());
    assert!(!root.join("src/m.rs").exists());
    assert_eq!(read(&root.join("src/n.rs")), "fn f() {\n    2\n}\n");
    assert_eq!(
        out.output,
        "Success. Updated the following files:\nA new/dir/n.txt\nM a.txt\nD old.txt\nR src/m.rs -> src/n.rs"
    );
    assert_eq!(out.title, "5 files");
    let files = out.metadata["files"].as_array().unwrap();
    assert_eq!(files.len(), 5);
    let kinds: Vec<(&str, &str)> = files
        .iter()
        .map(|f| {
            (
                f["relativePath"].as_str().unwrap(),
                f["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("a.txt", "update"),
            ("new/dir/n.txt", "add"),
            ("old.txt", "delete"),
            ("src/m.rs", "delete"),
            ("src/n.rs", "add")
        ]
    );
    let diff = out.metadata["diff"].as_str().unwrap();
    assert!(diff.contains("-two\n+TWO"), "{diff}");
    assert_eq!(out.metadata["additions"], 5);
}

#[tokio::test]
async fn any_failure_writes_nothing_and_names_the_line() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::write(root.join("b.txt"), "x\n").unwrap();
    // The second file's chunk does not match: the first stays untouched, the add is not made.
    let patch = "*** Begin Patch\n*** Update File: a.txt\n-one\n+ONE\n*** Add File: c.txt\n+c\n*** Update File: b.txt\n@@\n-not there\n+y\n*** End Patch";
    let e = apply(&root, patch).await.unwrap_err().to_string();
    assert!(
        e.starts_with("apply_patch verification failed: line 8: could not find these lines in "),
        "{e}"
    );
    assert!(e.contains("b.txt:\nnot there"), "{e}");
    assert_eq!(read(&root.join("a.txt")), "one\n");
    assert!(!root.join("c.txt").exists());

    let cases = [
        (
            "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch",
            "line 2: cannot add",
            "already exists",
        ),
        (
            "*** Begin Patch\n*** Delete File: nope.txt\n*** End Patch",
            "line 2: cannot delete",
            "no such file",
        ),
        (
            "*** Begin Patch\n*** Update File: nope.txt\n-a\n+b\n*** End Patch",
            "line 2: cannot update",
            "no such file",
        ),
        (
            "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n-one\n+1\n*** End Patch",
            "line 2: cannot move to",
            "already exists",
        ),
        (
            "*** Begin Patch\n*** Update File: a.txt\n-one\n+two\n*** End Patch junk",
            "line 5:",
            "must end with",
        ),
    ];
    for (patch, start, needle) in cases {
        let e = apply(&root, patch).await.unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("apply_patch verification failed: {start}"))
                && e.contains(needle),
            "{patch:?}: {e}"
        );
    }
    assert_eq!(read(&root.join("a.txt")), "one\n");
    assert_eq!(read(&root.join("b.txt")), "x\n");
    // Several operations on one file apply in order: delete, then add again.
    let out = apply(
        &root,
        "*** Begin Patch\n*** Delete File: b.txt\n*** Add File: b.txt\n+fresh\n*** End Patch",
    )
    .await
    .unwrap();
    assert_eq!(read(&root.join("b.txt")), "fresh\n");
    assert_eq!(out.title, "b.txt");
}

#[tokio::test]
async fn asks_edit_for_all_files_and_external_directory_outside() {
    let outside = tempfile::tempdir().unwrap();
    let outside_real = outside.path().canonicalize().unwrap();
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    let ext = outside_real.join("e.txt");
    let patch = format!(
        "*** Begin Patch\n*** Update File: a.txt\n-one\n+two\n*** Add File: {}\n+e\n*** End Patch",
        ext.display()
    );
    let rec = Recorder::new();
    let mut ctx = ToolContext::simple(&root);
    ctx.permissions = rec.clone();
    ApplyPatchTool
        .execute(json!({"patchText": patch}), ctx)
        .await
        .unwrap();
    let reqs = rec.requests();
    assert_eq!(rec.permissions(), vec!["external_directory", "edit"]);
    assert_eq!(reqs[0].patterns, vec![paths::external_glob(&outside_real)]);
    let rel_ext = paths::relative_path(&root, &ext);
    let mut want = vec!["a.txt".to_string(), rel_ext];
    want.sort();
    let mut got = reqs[1].patterns.clone();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(reqs[1].always, vec!["*".to_string()]);
    assert!(reqs[1].metadata["diff"].as_str().unwrap().contains("+two"));

    // A denial of edit writes nothing.
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    let rec = Recorder::denying("edit");
    let mut ctx = ToolContext::simple(&root);
    ctx.permissions = rec.clone();
    let e = ApplyPatchTool
        .execute(
            json!({"patchText": "*** Begin Patch\n*** Update File: a.txt\n-one\n+two\n*** Add File: z.txt\n+z\n*** End Patch"}),
            ctx,
        )
        .await
        .unwrap_err();
    assert_eq!(e, ToolError::PermissionDenied("denied edit".into()));
    assert_eq!(read(&root.join("a.txt")), "one\n");
    assert!(!root.join("z.txt").exists());
}

#[tokio::test]
async fn a_rule_deny_on_one_part_refuses_before_asking_the_other() {
    struct DenyEditByRule(std::sync::Mutex<Vec<String>>);
    impl crate::PermissionAsker for DenyEditByRule {
        fn ask(&self, req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
            self.0.lock().unwrap().push(req.permission);
            Box::pin(async { PermissionReply::Allow })
        }
        fn precheck(&self, req: &PermissionRequest) -> BoxFuture<'static, Option<PermissionReply>> {
            let deny = req.permission == "edit";
            Box::pin(
                async move { deny.then(|| PermissionReply::Deny("edit denied by rule".into())) },
            )
        }
    }
    let outside = tempfile::tempdir().unwrap();
    let d = tempfile::tempdir().unwrap();
    let asker = std::sync::Arc::new(DenyEditByRule(Default::default()));
    let mut ctx = ToolContext::simple(d.path());
    ctx.permissions = asker.clone();
    let patch = format!(
        "*** Begin Patch\n*** Add File: {}\n+e\n*** End Patch",
        outside.path().join("e.txt").display()
    );
    let e = ApplyPatchTool
        .execute(json!({"patchText": patch}), ctx)
        .await
        .unwrap_err();
    assert_eq!(e, ToolError::PermissionDenied("edit denied by rule".into()));
    assert!(asker.0.lock().unwrap().is_empty(), "nobody was asked");
}

#[tokio::test]
async fn keeps_bom_and_crlf_and_refuses_non_utf8() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::write(root.join("w.txt"), "\u{feff}a\r\nb\r\n").unwrap();
    apply(
        root,
        "*** Begin Patch\n*** Update File: w.txt\n-b\n+c\n*** End Patch",
    )
    .await
    .unwrap();
    assert_eq!(read(&root.join("w.txt")), "\u{feff}a\r\nc\r\n");
    std::fs::write(root.join("l.txt"), b"caf\xe9\n").unwrap();
    let e = apply(
        root,
        "*** Begin Patch\n*** Update File: l.txt\n-x\n+y\n*** End Patch",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("Cannot patch non-UTF-8 file"), "{e}");
    std::fs::create_dir(root.join("dir")).unwrap();
    let e = apply(root, "*** Begin Patch\n*** Delete File: dir\n*** End Patch")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("is a directory"), "{e}");
}
