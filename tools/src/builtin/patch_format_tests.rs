use super::*;

fn chunks_of(patch: &str) -> Vec<Chunk> {
    match parse(patch).unwrap().remove(0) {
        Hunk::Update { chunks, .. } => chunks,
        other => panic!("not an update: {other:?}"),
    }
}

#[test]
fn parses_every_operation() {
    let patch = "*** Begin Patch\n*** Add File: new.txt\n+hello\n+\n*** Delete File: old.txt\n*** Update File: src/a.rs\n*** Move to: src/b.rs\n@@ fn main() {\n     let x = 1;\n-    let y = 2;\n+    let y = 3;\n@@\n-tail\n+TAIL\n*** End of File\n*** End Patch\n";
    let hunks = parse(patch).unwrap();
    assert_eq!(
        hunks,
        vec![
            Hunk::Add {
                path: "new.txt".into(),
                contents: "hello\n\n".into(),
                line: 2
            },
            Hunk::Delete {
                path: "old.txt".into(),
                line: 5
            },
            Hunk::Update {
                path: "src/a.rs".into(),
                move_to: Some("src/b.rs".into()),
                chunks: vec![
                    Chunk {
                        context: Some("fn main() {".into()),
                        old: vec!["    let x = 1;".into(), "    let y = 2;".into()],
                        new: vec!["    let x = 1;".into(), "    let y = 3;".into()],
                        end_of_file: false,
                        line: 8
                    },
                    Chunk {
                        context: None,
                        old: vec!["tail".into()],
                        new: vec!["TAIL".into()],
                        end_of_file: true,
                        line: 12
                    }
                ],
                line: 6
            }
        ]
    );
}

#[test]
fn accepts_a_heredoc_wrapper_crlf_and_a_first_chunk_without_marker() {
    let patch = "apply_patch <<'EOF'\r\n*** Begin Patch\r\n*** Update File: a.txt\r\n-x\r\n+y\r\n*** End Patch\r\nEOF\r\n";
    let c = chunks_of(patch);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].old.clone(), c[0].new.clone()),
        (vec!["x".into()], vec!["y".into()])
    );
    assert_eq!(c[0].line, 4);
}

#[test]
fn malformed_patches_name_the_line() {
    let cases: [(&str, usize, &str); 10] = [
        ("", 0, "empty"),
        (
            "*** Update File: a\n-x\n+y\n*** End Patch",
            1,
            "must start with `*** Begin Patch`",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n-x\n+y",
            4,
            "must end with `*** End Patch`",
        ),
        ("*** Begin Patch\n*** End Patch", 1, "changes no file"),
        (
            "*** Begin Patch\n*** Frobnicate: a\n*** End Patch",
            2,
            "expected `*** Add File: `",
        ),
        (
            "*** Begin Patch\n*** Add File: a\nno plus\n*** End Patch",
            3,
            "must start with '+'",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n x\n?y\n*** End Patch",
            5,
            "a line must start with ' '",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n*** End Patch",
            2,
            "has no changes",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n x\n*** End Patch",
            3,
            "changes nothing",
        ),
        (
            "*** Begin Patch\n*** Add File: \n+x\n*** End Patch",
            2,
            "path is missing",
        ),
    ];
    for (patch, line, needle) in cases {
        let e = parse(patch).unwrap_err();
        assert_eq!(e.line, line, "{patch:?}: {e}");
        assert!(e.message.contains(needle), "{patch:?}: {e}");
    }
    let e = parse("*** Begin Patch\n*** Delete File: a\n+x\n*** End Patch").unwrap_err();
    assert_eq!(
        (e.line, e.to_string().starts_with("line 3: ")),
        (3, true),
        "{e}"
    );
}

#[test]
fn applies_chunks_in_order_with_context_and_eof() {
    let original = "fn a() {\n    1\n}\nfn b() {\n    1\n}\nend\n";
    let patch = "*** Begin Patch\n*** Update File: f.rs\n@@ fn b() {\n-    1\n+    2\n@@\n-end\n+END\n*** End of File\n*** End Patch";
    let out = apply_chunks(original, &chunks_of(patch), "f.rs").unwrap();
    assert_eq!(out, "fn a() {\n    1\n}\nfn b() {\n    2\n}\nEND\n");
}

#[test]
fn pure_additions_go_after_the_context_or_at_the_end() {
    let original = "a\nb\n";
    let patch = "*** Begin Patch\n*** Update File: f\n@@ a\n+inserted\n@@\n+last\n*** End Patch";
    let out = apply_chunks(original, &chunks_of(patch), "f").unwrap();
    assert_eq!(out, "a\ninserted\nb\nlast\n");
}

#[test]
fn tolerates_whitespace_and_typographic_punctuation_and_keeps_crlf() {
    let original = "let s = \u{201C}hi\u{201D};   \r\nkeep\r\n";
    let patch =
        "*** Begin Patch\n*** Update File: f\n-let s = \"hi\";\n+let s = \"yo\";\n*** End Patch";
    let out = apply_chunks(original, &chunks_of(patch), "f").unwrap();
    assert_eq!(out, "let s = \"yo\";\r\nkeep\r\n");
}

#[test]
fn missing_lines_fail_naming_the_chunk_line_and_file() {
    let patch =
        "*** Begin Patch\n*** Update File: f\n@@\n-present\n+x\n@@\n-absent\n+y\n*** End Patch";
    let e = apply_chunks("present\n", &chunks_of(patch), "f").unwrap_err();
    assert_eq!(e.line, 6);
    assert!(
        e.message
            .contains("could not find these lines in f:\nabsent"),
        "{e}"
    );
    let patch = "*** Begin Patch\n*** Update File: f\n@@ nowhere\n-present\n+x\n*** End Patch";
    let e = apply_chunks("present\n", &chunks_of(patch), "f").unwrap_err();
    assert!(e.message.contains("`@@` context line \"nowhere\""), "{e}");
    // End of File: the lines must be the last ones.
    let patch = "*** Begin Patch\n*** Update File: f\n-a\n+x\n*** End of File\n*** End Patch";
    let e = apply_chunks("a\nb\n", &chunks_of(patch), "f").unwrap_err();
    assert!(e.message.contains("at the end of the file"), "{e}");
}

#[test]
fn a_trailing_blank_context_line_matches_the_final_newline() {
    let patch = "*** Begin Patch\n*** Update File: f\n-last\n+LAST\n \n*** End Patch";
    let out = apply_chunks("x\nlast\n", &chunks_of(patch), "f").unwrap();
    assert_eq!(out, "x\nLAST\n");
}
