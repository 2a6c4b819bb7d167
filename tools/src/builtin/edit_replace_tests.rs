use super::*;

fn first_hit(strategy: Strategy, content: &str, find: &str) -> Option<String> {
    strategy(content, find)
        .into_iter()
        .find(|c| !c.is_empty() && content.contains(c.as_str()))
}

#[test]
fn simple_is_exact() {
    assert_eq!(replace("a b c", "b", "x", false).unwrap(), "a x c");
    assert_eq!(simple("abc", "b"), vec!["b"]);
}

#[test]
fn line_trimmed_ignores_per_line_indentation() {
    let content = "def f():\n    return 1\n";
    assert_eq!(
        first_hit(line_trimmed, content, "def f():\n  return 1").as_deref(),
        Some("def f():\n    return 1")
    );
    assert_eq!(
        replace(
            content,
            "def f():\n  return 1",
            "def f():\n    return 2",
            false
        )
        .unwrap(),
        "def f():\n    return 2\n"
    );
}

#[test]
fn block_anchor_tolerates_a_changed_middle() {
    let content = "fn a() {\n    let x = 1;\n    let y = 2;\n}\nfn b() {}\n";
    // The middle line is misremembered; the anchors are exact.
    let find = "fn a() {\n    let x = 1;\n    let yy = 22;\n}";
    assert_eq!(
        first_hit(block_anchor, content, find).as_deref(),
        Some("fn a() {\n    let x = 1;\n    let y = 2;\n}")
    );
    // Two candidates: the more similar one wins.
    let two = "start\nalpha one\nend\nstart\nbeta two\nend\n";
    assert_eq!(
        block_anchor(two, "start\nbeta twx\nend"),
        vec!["start\nbeta two\nend"]
    );
    // Too dissimilar among several: nothing.
    assert!(block_anchor(two, "start\nzzzzzzzzzzzzzzzzzzzzzzzz\nend").is_empty());
    // Fewer than 3 lines: not this strategy's job.
    assert!(block_anchor(content, "fn a() {\n}").is_empty());
}

#[test]
fn whitespace_normalized_collapses_runs() {
    let content = "let   x  =\t1;\nother\n";
    assert_eq!(
        first_hit(whitespace_normalized, content, "let x = 1;").as_deref(),
        Some("let   x  =\t1;")
    );
    // Inside a longer line: only the matching span.
    let content = "if (a  &&   b) { go(); }\n";
    assert_eq!(
        first_hit(whitespace_normalized, content, "a && b").as_deref(),
        Some("a  &&   b")
    );
    // Multi-line blocks.
    let content = "x  =  1\ny =   2\nz\n";
    assert_eq!(
        first_hit(whitespace_normalized, content, "x = 1\ny = 2").as_deref(),
        Some("x  =  1\ny =   2")
    );
}

#[test]
fn indentation_flexible_reindents() {
    let content = "class A:\n        def f(self):\n            return 1\n";
    let find = "def f(self):\n    return 1";
    assert_eq!(
        first_hit(indentation_flexible, content, find).as_deref(),
        Some("        def f(self):\n            return 1")
    );
    // Relative indentation must still agree.
    assert!(first_hit(indentation_flexible, content, "def f(self):\nreturn 1").is_none());
}

#[test]
fn escape_normalized_undoes_literal_escapes() {
    let content = "print(\"a\")\nprint('b')\n";
    assert_eq!(
        first_hit(escape_normalized, content, "print(\\\"a\\\")\\nprint('b')").as_deref(),
        Some("print(\"a\")\nprint('b')")
    );
    assert_eq!(unescape("a\\tb\\\\c\\$d\\q"), "a\tb\\c$d\\q");
}

#[test]
fn trimmed_boundary_drops_outer_whitespace() {
    let content = "alpha\n  beta\ngamma\n";
    assert_eq!(
        first_hit(trimmed_boundary, content, "\n\n  beta  \n").as_deref(),
        Some("beta")
    );
    assert!(trimmed_boundary(content, "beta").is_empty());
}

#[test]
fn context_aware_needs_half_the_middle() {
    let content = "begin\none\ntwo\nthree\nend\n";
    // Two of three middle lines match: accepted.
    assert_eq!(
        first_hit(context_aware, content, "begin\none\nTWO\nthree\nend").as_deref(),
        Some("begin\none\ntwo\nthree\nend")
    );
    // One of three: refused.
    assert!(first_hit(context_aware, content, "begin\nONE\nTWO\nthree\nend").is_none());
    // A block of another length: refused.
    assert!(first_hit(context_aware, content, "begin\none\nend").is_none());
}

#[test]
fn multi_occurrence_with_replace_all() {
    assert_eq!(multi_occurrence("x x", "x"), vec!["x"]);
    assert_eq!(replace("x\nx\n", "x", "y", true).unwrap(), "y\ny\n");
    assert_eq!(
        replace("x\nx\n", "x", "y", false).unwrap_err().to_string(),
        MULTIPLE
    );
}

#[test]
fn errors() {
    assert_eq!(
        replace("abc", "zzz", "y", false).unwrap_err().to_string(),
        NOT_FOUND
    );
    assert_eq!(
        replace("abc", "a", "a", false).unwrap_err().to_string(),
        IDENTICAL
    );
}

/// Through the whole chain: each kind of near miss lands on the right text.
#[test]
fn chain_picks_the_right_block() {
    let content = "fn main() {\n    let total = 1;\n    println!(\"{}\", total);\n}\n";
    let out = replace(
        content,
        "fn main() {\n  let total = 1;\n  println!(\"{}\", total);\n}",
        "fn main() {}",
        false,
    )
    .unwrap();
    assert_eq!(out, "fn main() {}\n");
    // A whitespace-normalized match of a whole line replaces the whole line, its
    // indentation included (as OpenCode does): newString carries the indentation.
    let out = replace(content, "let   total = 1;", "    let total = 2;", false).unwrap();
    assert_eq!(
        out,
        "fn main() {\n    let total = 2;\n    println!(\"{}\", total);\n}\n"
    );
}
