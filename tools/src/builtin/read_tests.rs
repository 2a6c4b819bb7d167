use super::*;
use crate::Tool;
use crate::paths::test_support::Recorder;

async fn read(dir: &Path, args: Value) -> Result<ToolOutput, ToolError> {
    ReadTool.execute(args, ToolContext::simple(dir)).await
}

/// Issue 24.4: a FIFO is refused with a clear error instead of blocking forever (the
/// outer timeout only keeps a regression from hanging the suite).
#[tokio::test]
async fn fifo_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("pipe");
    crate::paths::test_support::mkfifo(&fifo);
    let res = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        read(d.path(), json!({"filePath": "pipe"})),
    )
    .await
    .expect("read of a FIFO must return");
    let e = res.unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "Cannot read {}: it is a FIFO (named pipe), not a regular file.",
            fifo.display()
        )),
        "{e}"
    );
    // A character device too.
    let e = read(d.path(), json!({"filePath": "/dev/null"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("it is a character device"), "{e}");
}

/// Issue 13.8: a Latin-1 file says it is not UTF-8, which encoding it looks like, and
/// shows the text decoded from it (no replacement characters).
#[tokio::test]
async fn latin1_is_named_and_decoded() {
    let d = tempfile::tempdir().unwrap();
    // "café crème\nna\xefve résumé à Paris\n" in Latin-1.
    let bytes = b"caf\xe9 cr\xe8me\nna\xefve r\xe9sum\xe9 \xe0 Paris\n";
    std::fs::write(d.path().join("l1.txt"), bytes).unwrap();
    let out = read(d.path(), json!({"filePath": "l1.txt"})).await.unwrap();
    assert!(
        out.output
            .contains("1: café crème\n2: naïve résumé à Paris\n\n(End of file - total 2 lines)\n\n(This file is not valid UTF-8 (first invalid byte on line 1). It looks like windows-1252 (Latin-1);"),
        "{}",
        out.output
    );
    assert!(!out.output.contains('\u{fffd}'));
    assert!(out.output.ends_with("\n</content>"));
    // UTF-8 files get no note.
    std::fs::write(d.path().join("u.txt"), "café\n").unwrap();
    let out = read(d.path(), json!({"filePath": "u.txt"})).await.unwrap();
    assert!(!out.output.contains("not valid UTF-8"));
    assert!(out.output.contains("1: café\n"));
}

/// Issue 13.4 for read: one huge line (multi-byte) shows its first 2000 chars and the cut
/// marker, never an empty or broken line.
#[tokio::test]
async fn huge_multibyte_line() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("h.txt"),
        format!("{}\nnext\n", "é".repeat(100_000)),
    )
    .unwrap();
    let out = read(d.path(), json!({"filePath": "h.txt"})).await.unwrap();
    assert!(
        out.output.contains(&format!(
            "1: {}{MAX_LINE_SUFFIX}\n2: next\n",
            "é".repeat(MAX_LINE_LENGTH)
        )),
        "{}",
        &out.output[..200]
    );
}

#[tokio::test]
async fn reads_with_numbers_and_footer() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.txt"), "one\ntwo\r\nthree\n").unwrap();
    let out = read(d.path(), json!({"filePath": "a.txt"})).await.unwrap();
    let p = d.path().join("a.txt");
    assert_eq!(
        out.output,
        format!(
            "<path>{}</path>\n<type>file</type>\n<content>\n1: one\n2: two\n3: three\n\n(End of file - total 3 lines)\n</content>",
            p.display()
        )
    );
    assert_eq!(out.title, "a.txt");
    assert_eq!(out.metadata["truncated"], json!(false));
}

#[tokio::test]
async fn offset_and_limit() {
    let d = tempfile::tempdir().unwrap();
    let text: String = (1..=10).map(|i| format!("l{i}\n")).collect();
    std::fs::write(d.path().join("a.txt"), text).unwrap();
    let out = read(
        d.path(),
        json!({"filePath": "a.txt", "offset": 3, "limit": 2}),
    )
    .await
    .unwrap();
    assert!(out.output.contains("<content>\n3: l3\n4: l4\n\n(Showing lines 3-4 of 10. Use offset=5 to continue.)\n</content>"), "{}", out.output);
    assert_eq!(out.metadata["truncated"], json!(true));
    let err = read(d.path(), json!({"filePath": "a.txt", "offset": 11}))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Offset 11 is out of range for this file (10 lines)"
    );
    // Last line exactly reachable.
    let out = read(d.path(), json!({"filePath": "a.txt", "offset": 10}))
        .await
        .unwrap();
    assert!(
        out.output
            .contains("10: l10\n\n(End of file - total 10 lines)")
    );
}

#[tokio::test]
async fn empty_file_and_long_lines_and_cap() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("e.txt"), "").unwrap();
    let out = read(d.path(), json!({"filePath": "e.txt"})).await.unwrap();
    assert!(out.output.contains("(End of file - total 0 lines)"));
    std::fs::write(d.path().join("long.txt"), "x".repeat(2500)).unwrap();
    let out = read(d.path(), json!({"filePath": "long.txt"}))
        .await
        .unwrap();
    assert!(
        out.output
            .contains(&format!("1: {}{MAX_LINE_SUFFIX}\n", "x".repeat(2000)))
    );
    let big: String = (0..2000)
        .map(|_| format!("{}\n", "y".repeat(100)))
        .collect();
    std::fs::write(d.path().join("big.txt"), big).unwrap();
    let out = read(d.path(), json!({"filePath": "big.txt"}))
        .await
        .unwrap();
    assert!(
        out.output
            .contains("(Output capped at 50 KB. Showing lines 1-"),
        "{}",
        &out.output[out.output.len() - 200..]
    );
    assert!(out.output.len() < MAX_BYTES + 20_000);
}

#[tokio::test]
async fn streams_counts_and_matches_format_text() {
    let d = tempfile::tempdir().unwrap();
    let mut text: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
    text.push_str(&"w".repeat(100_000));
    text.push_str("\nlast");
    std::fs::write(d.path().join("s.txt"), &text).unwrap();
    let p = d.path().join("s.txt");
    let shown = p.to_string_lossy().to_string();
    for (offset, limit) in [(1, 2000), (4990, 20), (5001, 1), (5002, 5), (3, 0)] {
        let streamed = read_text_file(&p, &shown, offset, limit).unwrap();
        let whole = format_text(&text, &shown, offset, limit).unwrap();
        assert_eq!(streamed, whole, "offset {offset} limit {limit}");
    }
    let out = read(
        d.path(),
        json!({"filePath": "s.txt", "offset": 4999, "limit": 2}),
    )
    .await
    .unwrap();
    assert!(out.output.contains("4999: line 4999\n5000: line 5000\n\n(Showing lines 4999-5000 of 5002. Use offset=5001 to continue.)"), "{}", out.output);
    let err = read(d.path(), json!({"filePath": "s.txt", "offset": 5003}))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Offset 5003 is out of range for this file (5002 lines)"
    );
}

#[tokio::test]
async fn binary_refused() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("b.txt"), b"abc\0def").unwrap();
    let err = read(d.path(), json!({"filePath": "b.txt"}))
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("Cannot read binary file: "));
    std::fs::write(d.path().join("c.txt"), [1u8, 2, 3, 4, 5, b'a', b'b']).unwrap();
    assert!(read(d.path(), json!({"filePath": "c.txt"})).await.is_err());
    std::fs::write(d.path().join("x.zip"), "plain").unwrap();
    assert!(read(d.path(), json!({"filePath": "x.zip"})).await.is_err());
    std::fs::write(d.path().join("u.txt"), "héllo wörld ✓").unwrap();
    assert!(read(d.path(), json!({"filePath": "u.txt"})).await.is_ok());
}

#[tokio::test]
async fn not_found_suggests() {
    let d = tempfile::tempdir().unwrap();
    for n in ["config.rs", "config.toml", "Config.md", "other.txt"] {
        std::fs::write(d.path().join(n), "").unwrap();
    }
    let err = read(d.path(), json!({"filePath": "config"}))
        .await
        .unwrap_err()
        .to_string();
    let dir = d.path().display();
    assert!(
        err.starts_with(&format!(
            "File not found: {dir}/config\n\nDid you mean one of these?\n"
        )),
        "{err}"
    );
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with(&dir.to_string()))
            .count(),
        3
    );
    assert!(!err.contains("other.txt"));
    let err = read(d.path(), json!({"filePath": "zzz"}))
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(err, format!("File not found: {dir}/zzz"));
}

#[tokio::test]
async fn lists_directories() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    std::fs::write(d.path().join("b.txt"), "").unwrap();
    std::fs::write(d.path().join("a.txt"), "").unwrap();
    let out = read(d.path(), json!({"filePath": "."})).await.unwrap();
    assert!(
        out.output.contains(
            "<type>directory</type>\n<entries>\na.txt\nb.txt\nsub/\n\n(3 entries)\n</entries>"
        ),
        "{}",
        out.output
    );
    let out = read(d.path(), json!({"filePath": ".", "limit": 2}))
        .await
        .unwrap();
    assert!(
        out.output
            .contains("(Showing 2 of 3 entries. Use 'offset' parameter to read beyond entry 2)")
    );
}

#[tokio::test]
async fn asks_read_then_external() {
    let d = tempfile::tempdir().unwrap();
    let proj = d.path().join("p");
    std::fs::create_dir(&proj).unwrap();
    std::fs::write(d.path().join("out.txt"), "hi").unwrap();
    std::fs::write(proj.join("in.txt"), "hi").unwrap();
    let rec = Recorder::new();
    let mut ctx = ToolContext::simple(&proj);
    ctx.permissions = rec.clone();
    ReadTool
        .execute(json!({"filePath": "in.txt"}), ctx.clone())
        .await
        .unwrap();
    assert_eq!(rec.permissions(), vec!["read"]);
    assert_eq!(rec.requests()[0].patterns, vec!["in.txt"]);
    ReadTool
        .execute(json!({"filePath": "../out.txt"}), ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        rec.permissions(),
        vec!["read", "external_directory", "read"]
    );
    assert_eq!(rec.requests()[2].patterns, vec!["../out.txt"]);
    let deny = Recorder::denying("read");
    ctx.permissions = deny;
    let err = ReadTool
        .execute(json!({"filePath": "in.txt"}), ctx)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::PermissionDenied(_)));
}

#[tokio::test]
async fn missing_file_path_is_invalid() {
    let d = tempfile::tempdir().unwrap();
    let err = read(d.path(), json!({"path": "x"})).await.unwrap_err();
    assert!(
        matches!(err, ToolError::InvalidArguments { ref detail, .. } if detail.contains("filePath"))
    );
}
