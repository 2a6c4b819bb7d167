//! `edit {filePath, oldString, newString, replaceAll?}`: string replacement with OpenCode's
//! chain of match strategies ([`super::edit_replace`]; OpenCode `tool/edit.ts`, §7.3 "edit,
//! in detail").

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::write::BOM;
use super::{FileChange, approve_and_write, blocking, writable_target};
use crate::paths::{self, PathKind};
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

pub use super::edit_replace::{IDENTICAL, MULTIPLE, NOT_FOUND};
/// Error when `oldString` is empty but the file exists (issue 13.3): an empty `oldString`
/// only creates a new file; replacing a whole existing file silently lost its content.
pub const EMPTY_OLD_ON_EXISTING: &str = "oldString is empty but the file already exists. An empty oldString only creates a new file; to change this file give the exact text to replace in oldString, or use the write tool to replace the whole file.";

/// The `edit` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct EditTool;

/// Arguments of the `edit` tool; the schema the model sees is derived from this struct
/// (each field's doc comment is its description).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EditArgs {
    /// Absolute path of the file to modify
    file_path: String,
    /// The text to replace
    old_string: String,
    /// The text to replace it with (must be different from oldString)
    new_string: String,
    /// Replace all occurrences of oldString (default false)
    #[serde(default)]
    replace_all: Option<bool>,
}

/// Per-file locks so concurrent edits of one file apply one after the other.
static LOCKS: LazyLock<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

pub(crate) fn file_lock(path: &std::path::Path) -> Arc<tokio::sync::Mutex<()>> {
    match LOCKS.lock() {
        Ok(mut map) => {
            map.retain(|_, l| Arc::strong_count(l) > 1);
            map.entry(path.to_path_buf()).or_default().clone()
        }
        Err(_) => Arc::new(tokio::sync::Mutex::new(())),
    }
}

impl TypedTool for EditTool {
    type Args = EditArgs;
    const NAME: &'static str = "edit";

    fn describe(&self) -> String {
        "Replace text in a file.\n\
         - `oldString` must match the file exactly (whitespace and indentation included; copy it \
         from `read` output without the `N: ` line-number prefix) and must be unique unless \
         `replaceAll` is true; add surrounding lines to make it unique.\n\
         - `newString` must differ from `oldString`. `replaceAll` replaces every occurrence \
         (e.g. renaming a variable).\n\
         - An empty `oldString` creates a new file with `newString`; on an existing file it is \
         an error (use `write` to replace a whole file).\n\
         - Read the file first; prefer editing existing files over creating new ones."
            .to_string()
    }

    fn run(
        &self,
        args: EditArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move { run(args, ctx).await })
    }
}

async fn run(args: EditArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
    if args.old_string == args.new_string {
        return Err(ToolError::Failed(IDENTICAL.into()));
    }
    let path = paths::normalize(&ctx.resolve(&args.file_path)?);
    let shown = path.to_string_lossy().into_owned();
    let at = paths::locate(&ctx, &path).await;
    paths::check_external(&ctx, &at, PathKind::File).await?;
    let lock = file_lock(&path);
    let _guard = lock.lock().await;

    // One trip to the blocking pool: the target's type, then its bytes when they are needed.
    let (p, s, wants_old) = (path.clone(), shown.clone(), !args.old_string.is_empty());
    let (exists, bytes) = blocking(move || {
        let exists = writable_target(&p, &s, "edit")?.is_some();
        let bytes = (exists && wants_old)
            .then(|| paths::read_regular_blocking(&p, "edit", &s))
            .transpose()?;
        Ok::<_, ToolError>((exists, bytes))
    })
    .await??;
    let (old_content, new_content) = if args.old_string.is_empty() {
        if exists {
            return Err(ToolError::Failed(format!(
                "{EMPTY_OLD_ON_EXISTING} ({shown})"
            )));
        }
        (String::new(), args.new_string)
    } else {
        let Some(bytes) = bytes else {
            return Err(ToolError::Failed(format!("File {shown} not found")));
        };
        let old = utf8_text(bytes, &shown)?;
        let (bom, body) = match old.strip_prefix(BOM) {
            Some(rest) => (BOM, rest),
            None => ("", old.as_str()),
        };
        let crlf = body.contains("\r\n");
        let fix = |s: &str| {
            if crlf {
                s.replace("\r\n", "\n").replace('\n', "\r\n")
            } else {
                s.to_string()
            }
        };
        let replaced = replace(
            body,
            &fix(&args.old_string),
            &fix(&args.new_string),
            args.replace_all.unwrap_or(false),
        )?;
        let new = format!("{bom}{replaced}");
        (old, new)
    };

    let rel = at.rel;
    let FileChange {
        diff,
        additions,
        deletions,
    } = approve_and_write(
        &ctx,
        "edit",
        &path,
        &shown,
        &rel,
        &old_content,
        &new_content,
    )
    .await?;

    let mut metadata = serde_json::Map::new();
    metadata.insert("diff".into(), Value::String(diff.clone()));
    metadata.insert("additions".into(), json!(additions));
    metadata.insert("deletions".into(), json!(deletions));
    metadata.insert("filepath".into(), Value::String(shown.clone()));
    metadata.insert(
        "filediff".into(),
        json!({"file": shown, "patch": diff, "additions": additions, "deletions": deletions}),
    );
    Ok(ToolOutput {
        title: rel,
        output: "Edit applied successfully.".into(),
        metadata,
    })
}

/// The file's bytes as text; `Cannot edit non-UTF-8 file: …` (naming the encoding it looks
/// like) otherwise.
fn utf8_text(bytes: Vec<u8>, shown: &str) -> Result<String, ToolError> {
    String::from_utf8(bytes).map_err(|e| {
        let enc = super::read::guess_legacy_encoding(&[e.as_bytes()]);
        ToolError::Failed(format!(
            "Cannot edit non-UTF-8 file: {shown} (it looks like {}). The edit tool only changes \
             UTF-8 files; convert it first (e.g. `iconv -f {} -t UTF-8`) or rewrite it whole \
             with write.",
            super::read::encoding_label(enc),
            enc.name()
        ))
    })
}

pub use super::edit_replace::replace;

#[cfg(test)]
#[path = "edit_tests.rs"]
mod tests;
