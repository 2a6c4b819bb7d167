//! Per-file line counts of a session's changes, from its `write` / `edit` tool parts (the
//! session's `summary`).

use serde_json::Value;

use crate::types::{FileDiff, MessageWithParts, PartKind, SessionSummary, ToolState};

/// Tools whose completed parts carry `additions` / `deletions` metadata.
pub const FILE_CHANGE_TOOLS: &[&str] = &["write", "edit"];

fn count(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_u64).unwrap_or(0)
}

/// Files changed in a history, from completed [`FILE_CHANGE_TOOLS`] parts: the path is
/// `metadata.filepath`, else `metadata.filediff.file`, else `input.filePath` (parts without
/// any are skipped); line counts are `metadata.additions` / `metadata.deletions`, else the
/// same keys of `metadata.filediff`, else 0. Per-file totals are listed in order of first
/// change; `files` is the number of distinct paths. Pruned parts still count (prune clears
/// only the output).
pub fn file_changes(history: &[MessageWithParts]) -> SessionSummary {
    let mut summary = SessionSummary::default();
    for m in history {
        for p in &m.parts {
            let PartKind::Tool {
                tool,
                state:
                    ToolState::Completed {
                        input, metadata, ..
                    },
                ..
            } = &p.kind
            else {
                continue;
            };
            if !FILE_CHANGE_TOOLS.contains(&tool.as_str()) {
                continue;
            }
            let filediff = metadata.get("filediff");
            let path = metadata
                .get("filepath")
                .and_then(Value::as_str)
                .or_else(|| filediff.and_then(|d| d.get("file")).and_then(Value::as_str))
                .or_else(|| input.get("filePath").and_then(Value::as_str))
                .filter(|p| !p.is_empty());
            let Some(path) = path else { continue };
            let pick = |key: &str| {
                metadata
                    .get(key)
                    .or_else(|| filediff.and_then(|d| d.get(key)))
            };
            let (add, del) = (count(pick("additions")), count(pick("deletions")));
            summary.additions += add;
            summary.deletions += del;
            match summary.diffs.iter_mut().find(|d| d.file == path) {
                Some(d) => {
                    d.additions += add;
                    d.deletions += del;
                }
                None => summary.diffs.push(FileDiff {
                    file: path.to_string(),
                    additions: add,
                    deletions: del,
                }),
            }
        }
    }
    summary.files = summary.diffs.len() as u64;
    summary
}

#[cfg(test)]
#[path = "file_changes_tests.rs"]
mod tests;
