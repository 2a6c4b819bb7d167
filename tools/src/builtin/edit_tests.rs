use super::*;
use crate::Tool;

async fn edit(dir: &std::path::Path, args: Value) -> Result<ToolOutput, ToolError> {
    EditTool.execute(args, ToolContext::simple(dir)).await
}

#[tokio::test]
async fn replaces_unique_match() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("f.rs"), "fn a() {}\nfn b() {}\n").unwrap();
    let out = edit(
        d.path(),
        json!({"filePath": "f.rs", "oldString": "fn b", "newString": "fn c"}),
    )
    .await
    .unwrap();
    assert_eq!(out.output, "Edit applied successfully.");
    assert_eq!(
        std::fs::read_to_string(d.path().join("f.rs")).unwrap(),
        "fn a() {}\nfn c() {}\n"
    );
    assert_eq!(out.metadata["additions"], json!(1));
    assert_eq!(out.metadata["deletions"], json!(1));
    assert!(
        out.metadata["diff"]
            .as_str()
            .unwrap()
            .contains("+fn c() {}")
    );
}

#[tokio::test]
async fn errors_match_opencode() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("f.txt"), "x\nx\n").unwrap();
    let e = edit(
        d.path(),
        json!({"filePath": "f.txt", "oldString": "y", "newString": "z"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.to_string(), NOT_FOUND);
    let e = edit(
        d.path(),
        json!({"filePath": "f.txt", "oldString": "x", "newString": "z"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.to_string(), MULTIPLE);
    let e = edit(
        d.path(),
        json!({"filePath": "f.txt", "oldString": "x", "newString": "x"}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.to_string(), IDENTICAL);
    let e = edit(
        d.path(),
        json!({"filePath": "nope.txt", "oldString": "x", "newString": "y"}),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("not found"));
    assert_eq!(
        std::fs::read_to_string(d.path().join("f.txt")).unwrap(),
        "x\nx\n"
    );
}

#[tokio::test]
async fn replace_all() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("f.txt"), "x\nx\n").unwrap();
    edit(
        d.path(),
        json!({"filePath": "f.txt", "oldString": "x", "newString": "y", "replaceAll": true}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("f.txt")).unwrap(),
        "y\ny\n"
    );
}

#[tokio::test]
async fn crlf_preserved() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("f.txt"), "a\r\nb\r\nc\r\n").unwrap();
    edit(
        d.path(),
        json!({"filePath": "f.txt", "oldString": "a\nb", "newString": "a\nB\nb2"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("f.txt")).unwrap(),
        "a\r\nB\r\nb2\r\nc\r\n"
    );
}

#[tokio::test]
async fn line_trimmed_fallback() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("f.py"), "def f():\n    return 1\n").unwrap();
    edit(d.path(), json!({"filePath": "f.py", "oldString": "def f():\n  return 1", "newString": "def f():\n    return 2"}))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("f.py")).unwrap(),
        "def f():\n    return 2\n"
    );
}

#[tokio::test]
async fn empty_old_creates_and_bom_kept() {
    let d = tempfile::tempdir().unwrap();
    edit(
        d.path(),
        json!({"filePath": "n/new.txt", "oldString": "", "newString": "hello"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("n/new.txt")).unwrap(),
        "hello"
    );
    std::fs::write(d.path().join("b.txt"), "\u{feff}abc").unwrap();
    edit(
        d.path(),
        json!({"filePath": "b.txt", "oldString": "abc", "newString": "xyz"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("b.txt")).unwrap(),
        "\u{feff}xyz"
    );
}

/// Issue 13.3: an empty oldString on an existing file is an error and the file is
/// unchanged; it still creates a missing file.
#[tokio::test]
async fn empty_old_on_existing_file_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let keep = d.path().join("keep.txt");
    std::fs::write(&keep, "keep me\nsecond line\n").unwrap();
    let e = edit(
        d.path(),
        json!({"filePath": "keep.txt", "oldString": "", "newString": "appended\n"}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{EMPTY_OLD_ON_EXISTING} ({})", keep.display())
    );
    assert_eq!(
        std::fs::read_to_string(&keep).unwrap(),
        "keep me\nsecond line\n"
    );
    // Even an empty existing file is not silently overwritten.
    std::fs::write(d.path().join("empty.txt"), "").unwrap();
    assert!(
        edit(
            d.path(),
            json!({"filePath": "empty.txt", "oldString": "", "newString": "x"}),
        )
        .await
        .is_err()
    );
}

/// Issue 13.8: edit keeps refusing a Latin-1 file, and says what it looks like.
#[tokio::test]
async fn latin1_refused_with_its_encoding() {
    let d = tempfile::tempdir().unwrap();
    let bytes = b"caf\xe9 cr\xe8me\n";
    std::fs::write(d.path().join("l1.txt"), bytes).unwrap();
    let e = edit(
        d.path(),
        json!({"filePath": "l1.txt", "oldString": "cr", "newString": "CR"}),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(&format!(
            "Cannot edit non-UTF-8 file: {} (it looks like windows-1252 (Latin-1)).",
            d.path().join("l1.txt").display()
        )),
        "{e}"
    );
    assert_eq!(std::fs::read(d.path().join("l1.txt")).unwrap(), bytes);
}

/// Issue 24.4: edit of a FIFO returns with an error instead of blocking.
#[tokio::test]
async fn fifo_is_refused() {
    let d = tempfile::tempdir().unwrap();
    crate::paths::test_support::mkfifo(&d.path().join("pipe"));
    let res = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        edit(
            d.path(),
            json!({"filePath": "pipe", "oldString": "a", "newString": "b"}),
        ),
    )
    .await
    .expect("edit of a FIFO must return");
    let e = res.unwrap_err().to_string();
    assert!(
        e.contains("it is a FIFO (named pipe), not a regular file"),
        "{e}"
    );
}

#[test]
fn pure_replace() {
    assert_eq!(replace("a b c", "b", "x", false).unwrap(), "a x c");
    assert_eq!(replace("  a\n  b\n", "a\nb", "z", false).unwrap(), "z\n");
}
