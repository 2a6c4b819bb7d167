//! The file tools' one-trip path (issue 19): when the rules alone settle a call (inside the
//! project, the permission allowed), the tool's I/O runs in the trip that locates the path.
//! It must give what the asked path gives, and never act where a question was due.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::{GlobTool, GrepTool, ListTool, ReadTool, WriteTool};
use crate::paths::test_support::Recorder;
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// A small project: files at distinct, fixed modification times (glob and grep sort by
/// them), a `.gitignore`d directory, a file with a byte-order mark.
fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let files = [
        ("a.txt", "one\ntwo\nthree\n"),
        ("sub/b.md", "# title\ntwo words\n"),
        ("sub/deep/c.md", "deep two\n"),
        ("bom.txt", "\u{feff}old\n"),
        (".gitignore", "ignored/\n"),
        ("ignored/x.md", "two\n"),
    ];
    for (i, (rel, text)) in files.iter().enumerate() {
        let path = p.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + 60 * i as u64);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }
    d
}

fn tool(name: &str) -> &'static dyn Tool {
    match name {
        "read" => &ReadTool,
        "list" => &ListTool,
        "glob" => &GlobTool,
        "grep" => &GrepTool,
        "write" => &WriteTool,
        other => panic!("no tool {other}"),
    }
}

/// The calls compared: successes and each tool's errors after its permission checks.
const CALLS: &[(&str, &str)] = &[
    ("read", r#"{"filePath":"a.txt"}"#),
    ("read", r#"{"filePath":"a.txt","offset":2,"limit":1}"#),
    ("read", r#"{"filePath":"sub"}"#),
    ("read", r#"{"filePath":"missing.txt"}"#),
    ("list", r#"{}"#),
    ("list", r#"{"path":"sub","ignore":["deep/"]}"#),
    ("list", r#"{"path":"a.txt"}"#),
    ("glob", r#"{"pattern":"**/*.md"}"#),
    ("glob", r#"{"pattern":"*.md","path":"sub"}"#),
    ("glob", r#"{"pattern":"*.md","path":"a.txt"}"#),
    ("grep", r#"{"pattern":"two"}"#),
    ("grep", r#"{"pattern":"two","include":"*.md"}"#),
    ("grep", r#"{"pattern":"(","path":"sub"}"#),
    ("grep", r#"{"pattern":"x","path":"nowhere"}"#),
    (
        "write",
        r#"{"filePath":"new/dir/n.txt","content":"hello\n"}"#,
    ),
    ("write", r#"{"filePath":"bom.txt","content":"new\n"}"#),
    (
        "write",
        r#"{"filePath":"a.txt","content":"one\n2\nthree\n"}"#,
    ),
    ("write", r#"{"filePath":"sub","content":"x"}"#),
];

/// A result with the project's path replaced by `<dir>`, to compare two projects' results.
fn shown(result: &Result<ToolOutput, ToolError>, dir: &Path) -> String {
    let real = dir.canonicalize().unwrap();
    format!("{result:?}")
        .replace(&real.to_string_lossy().to_string(), "<dir>")
        .replace(&dir.to_string_lossy().to_string(), "<dir>")
}

/// Every file under `dir` with its bytes, sorted.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
                out.push((rel, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

async fn call(
    name: &str,
    args: &str,
    dir: &Path,
    asker: std::sync::Arc<Recorder>,
) -> Result<ToolOutput, ToolError> {
    let mut ctx = ToolContext::simple(dir);
    ctx.permissions = asker;
    let args: Value = serde_json::from_str(args).unwrap();
    tool(name).execute(args, ctx).await
}

#[tokio::test]
async fn a_call_the_rules_settle_gives_what_the_asked_call_gives() {
    for (name, args) in CALLS {
        let (settled_dir, asked_dir) = (project(), project());
        let settled = Recorder::gated(&[]);
        let asked = Recorder::new();
        let a = call(name, args, settled_dir.path(), settled.clone()).await;
        let b = call(name, args, asked_dir.path(), asked.clone()).await;
        assert_eq!(
            shown(&a, settled_dir.path()),
            shown(&b, asked_dir.path()),
            "{name} {args}"
        );
        assert_eq!(
            tree(settled_dir.path()),
            tree(asked_dir.path()),
            "{name} {args}"
        );
        assert!(
            settled.requests().is_empty(),
            "{name} {args}: the rules settled it, yet it asked {:?}",
            settled.permissions()
        );
    }
}

#[tokio::test]
async fn a_permission_the_gate_does_not_allow_is_asked_before_anything_is_done() {
    // Edit not allowed by the rules: the write asks, is denied, and writes nothing.
    let d = project();
    let before = tree(d.path());
    let asker = Recorder::gated(&["edit"]);
    let r = call(
        "write",
        r#"{"filePath":"n.txt","content":"x"}"#,
        d.path(),
        asker.clone(),
    )
    .await;
    assert!(matches!(r, Err(ToolError::PermissionDenied(_))), "{r:?}");
    assert_eq!(asker.permissions(), ["edit"]);
    assert_eq!(tree(d.path()), before);
    // The same for each reading tool: the question comes, the answer decides.
    for (name, args) in [
        ("read", r#"{"filePath":"a.txt"}"#),
        ("list", r#"{}"#),
        ("glob", r#"{"pattern":"*.md"}"#),
        ("grep", r#"{"pattern":"two"}"#),
    ] {
        let asker = Recorder::gated(&[name]);
        let r = call(name, args, d.path(), asker.clone()).await;
        assert!(matches!(r, Err(ToolError::PermissionDenied(_))), "{r:?}");
        assert_eq!(asker.permissions(), [name]);
    }
}

#[tokio::test]
async fn outside_the_project_the_rules_do_not_settle_it() {
    let (d, outside) = (project(), project());
    let target = outside.path().join("a.txt");
    let asker = Recorder::gated(&[]);
    let args = format!(r#"{{"filePath":{:?}}}"#, target.to_string_lossy());
    call("read", &args, d.path(), asker.clone()).await.unwrap();
    assert_eq!(asker.permissions(), ["external_directory", "read"]);
    // Through a link inside the project, too.
    std::os::unix::fs::symlink(outside.path(), d.path().join("out")).unwrap();
    let asker = Recorder::gated(&["external_directory"]);
    let r = call(
        "write",
        r#"{"filePath":"out/a.txt","content":"x"}"#,
        d.path(),
        asker.clone(),
    )
    .await;
    assert!(matches!(r, Err(ToolError::PermissionDenied(_))), "{r:?}");
    assert_eq!(asker.permissions(), ["external_directory"]);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "one\ntwo\nthree\n"
    );
}

#[tokio::test]
async fn an_aborted_call_does_nothing_though_the_rules_allow_it() {
    let d = project();
    let before = tree(d.path());
    let mut ctx = ToolContext::simple(d.path());
    ctx.permissions = Recorder::gated(&[]);
    ctx.abort.cancel();
    let args: Value = serde_json::from_str(r#"{"filePath":"n.txt","content":"x"}"#).unwrap();
    let r = WriteTool.execute(args, ctx).await;
    assert!(matches!(r, Err(ToolError::Aborted)), "{r:?}");
    assert_eq!(tree(d.path()), before);
}
