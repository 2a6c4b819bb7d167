//! `write {filePath, content}`: create or overwrite a file, creating parent directories
//! (OpenCode `tool/write.ts`, §7.3). Asks `edit` (with the diff) before writing.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FileChange, approve_and_write, blocking, writable_target, write_allowed};
use crate::paths::{self, PathKind};
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

/// UTF-8 byte-order mark, preserved when the overwritten file had one.
pub const BOM: &str = "\u{feff}";

/// The `write` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteTool;

/// Arguments of the `write` tool; the schema the model sees is derived from this struct
/// (each field's doc comment is its description).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteArgs {
    /// The content to write to the file
    content: String,
    /// Absolute path of the file to write
    file_path: String,
}

impl TypedTool for WriteTool {
    type Args = WriteArgs;
    const NAME: &'static str = "write";

    fn describe(&self) -> String {
        "Write a file, replacing it if it exists; missing parent directories are created.\n\
         - `filePath`: absolute path (relative paths resolve against the working directory).\n\
         - `content`: the complete new file content.\n\
         - Read an existing file before overwriting it, and prefer `edit` for changes to \
         existing files. Do not create documentation files unless asked."
            .to_string()
    }

    fn run(
        &self,
        args: WriteArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let path = paths::normalize(&ctx.resolve(&args.file_path)?);
            let shown = path.to_string_lossy().into_owned();
            let input = (path.clone(), shown.clone(), args.content);
            // When the rules settle it (inside the project, `edit` allowed), the whole write
            // runs in the trip that locates the path.
            let (at, exists, change) = match paths::locate_and(
                &ctx,
                &path,
                "edit",
                |at| vec![at.rel.clone()],
                input,
                |at, (p, s, content)| {
                    let (exists, old, content) = load(&p, &s, content)?;
                    let change = write_allowed(&p, "write", &s, &at.rel, &old, &content)?;
                    Ok::<_, ToolError>((exists, change))
                },
            )
            .await?
            {
                paths::Trip::Done(at, done) => {
                    let (exists, change) = done?;
                    (at, exists, change)
                }
                paths::Trip::Ask(at, (p, s, content)) => {
                    paths::check_external(&ctx, &at, PathKind::File).await?;
                    let (exists, old, content) = blocking(move || load(&p, &s, content)).await??;
                    let change =
                        approve_and_write(&ctx, "write", &path, &shown, &at.rel, &old, &content)
                            .await?;
                    (at, exists, change)
                }
            };
            let FileChange {
                diff,
                additions,
                deletions,
            } = change;
            let rel = at.rel;
            let mut metadata = serde_json::Map::new();
            metadata.insert("filepath".into(), Value::String(shown));
            metadata.insert("exists".into(), Value::Bool(exists));
            metadata.insert("additions".into(), json!(additions));
            metadata.insert("deletions".into(), json!(deletions));
            metadata.insert("diff".into(), Value::String(diff));
            Ok(ToolOutput {
                title: rel,
                output: "Wrote file successfully.".into(),
                metadata,
            })
        })
    }
}

/// What a write replaces (blocking): whether `path` exists (a directory or a special file is
/// an error naming `shown`), its old text (empty when missing or unreadable: an unreadable old
/// content only makes the diff empty, and the write itself still refuses a path that became a
/// special file in between), and `content` with the old file's byte-order mark kept.
fn load(
    path: &std::path::Path,
    shown: &str,
    mut content: String,
) -> Result<(bool, String, String), ToolError> {
    let exists = writable_target(path, shown, "write")?.is_some();
    let old = exists
        .then(|| paths::read_regular_blocking(path, "write", shown).ok())
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    if old.starts_with(BOM) && !content.starts_with(BOM) {
        content.insert_str(0, BOM);
    }
    Ok((exists, old, content))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tool;
    use crate::paths::test_support::Recorder;

    /// Issue 24.4: write to a FIFO (no reader) or a device returns with a clear error.
    #[tokio::test]
    async fn fifo_and_devices_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("pipe");
        crate::paths::test_support::mkfifo(&fifo);
        let res = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            WriteTool.execute(
                json!({"filePath": "pipe", "content": "x"}),
                ToolContext::simple(d.path()),
            ),
        )
        .await
        .expect("write to a FIFO must return");
        let e = res.unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "Cannot write {}: it is a FIFO (named pipe), not a regular file.",
                fifo.display()
            )),
            "{e}"
        );
        let e = WriteTool
            .execute(
                json!({"filePath": "/dev/null", "content": "x"}),
                ToolContext::simple(d.path()),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("it is a character device"), "{e}");
        // The pure helper also refuses on the open descriptor (a FIFO with a reader).
        let e = crate::paths::write_regular(
            &std::path::PathBuf::from("/dev/null"),
            "write",
            "/dev/null",
            b"x",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("character device"), "{e}");
    }

    #[tokio::test]
    async fn creates_parent_dirs_and_reports() {
        let d = tempfile::tempdir().unwrap();
        let (ctx, rec) = Recorder::context(d.path());
        let out = WriteTool
            .execute(
                json!({"filePath": "a/b/c.txt", "content": "x\ny\n"}),
                ctx.clone(),
            )
            .await
            .unwrap();
        assert_eq!(out.output, "Wrote file successfully.");
        assert_eq!(
            std::fs::read_to_string(d.path().join("a/b/c.txt")).unwrap(),
            "x\ny\n"
        );
        assert_eq!(out.metadata["exists"], json!(false));
        assert_eq!(out.metadata["additions"], json!(2));
        assert_eq!(rec.permissions(), vec!["edit"]);
        assert_eq!(rec.requests()[0].patterns, vec!["a/b/c.txt"]);
        let out = WriteTool
            .execute(json!({"filePath": "a/b/c.txt", "content": "x\nz\n"}), ctx)
            .await
            .unwrap();
        assert_eq!(out.metadata["exists"], json!(true));
        assert_eq!(
            (
                out.metadata["additions"].clone(),
                out.metadata["deletions"].clone()
            ),
            (json!(1), json!(1))
        );
    }

    #[tokio::test]
    async fn denied_does_not_write() {
        let d = tempfile::tempdir().unwrap();
        let mut ctx = ToolContext::simple(d.path());
        ctx.permissions = Recorder::denying("edit");
        let err = WriteTool
            .execute(json!({"filePath": "x.txt", "content": "x"}), ctx)
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::PermissionDenied(_)));
        assert!(!d.path().join("x.txt").exists());
    }

    #[tokio::test]
    async fn outside_asks_external_first() {
        let d = tempfile::tempdir().unwrap();
        let proj = d.path().join("p");
        std::fs::create_dir(&proj).unwrap();
        let (ctx, rec) = Recorder::context(&proj);
        WriteTool
            .execute(json!({"filePath": "../o.txt", "content": "x"}), ctx)
            .await
            .unwrap();
        assert_eq!(rec.permissions(), vec!["external_directory", "edit"]);
    }
}
