//! Markdown agents: `{agent,agents}/**/*.md` below a config directory, frontmatter = fields,
//! body = prompt, name = path below `agent/` minus `.md` (OpenCode `config/agent.ts`, §12.2).
//!
//! Reads files synchronously: call it at startup or inside `spawn_blocking`.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::agent_set::AgentError;
use crate::permission::json_kind;

/// `worktree`; otherwise just `[cwd]`. Suitable as `extra_dirs` for [`AgentSet::load`].
pub fn project_dirs(cwd: &Path, worktree: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if cwd.starts_with(worktree) {
        let mut cur = Some(cwd);
        while let Some(d) = cur {
            out.push(d.to_path_buf());
            if d == worktree {
                break;
            }
            cur = d.parent();
        }
        out.reverse();
    } else {
        out.push(cwd.to_path_buf());
    }
    out
}

/// Without a leading `---` line the whole text is the body.
fn split_frontmatter(text: &str) -> Option<(&str, usize, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first_end = text.find('\n')?;
    if text[..first_end].trim_end() != "---" {
        return None;
    }
    let rest = &text[first_end + 1..];
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            let fm = &rest[..offset];
            let body = &rest[offset + line.len()..];
            return Some((fm, 2, body));
        }
        offset += line.len();
    }
    None
}

/// A parsed markdown agent file.
pub(crate) struct MarkdownAgent {
    pub(crate) name: String,
    pub(crate) label: String,
    pub(crate) fields: Map<String, Value>,
    pub(crate) frontmatter: String,
}

fn parse_markdown_agent(
    name: String,
    label: String,
    text: &str,
) -> Result<MarkdownAgent, AgentError> {
    let (fm, first_line, body) = match split_frontmatter(text) {
        Some((fm, l, body)) => (fm, l, body),
        None => {
            if text.trim_start().starts_with("---") && text.trim_start().lines().count() > 0 {
                // Opening marker without a closing one.
                if text.trim_start().lines().next().map(str::trim_end) == Some("---") {
                    return Err(AgentError::Invalid {
                        location: format!("{label}:1"),
                        message: "frontmatter is not closed with a `---` line".into(),
                    });
                }
            }
            ("", 2, text)
        }
    };
    let value: Value = if fm.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        // Pad with blank lines so YAML line numbers (also inside the message) are file lines.
        let padded = format!("{}{fm}", "\n".repeat(first_line - 1));
        serde_norway::from_str(&padded).map_err(|e| {
            let line = e.location().map(|l| l.line());
            AgentError::Invalid {
                location: match line {
                    Some(l) => format!("{label}:{l}"),
                    None => label.clone(),
                },
                message: format!("invalid YAML frontmatter: {e}"),
            }
        })?
    };
    let mut fields = match value {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        other => {
            return Err(AgentError::Invalid {
                location: format!("{label}:{first_line}"),
                message: format!(
                    "frontmatter must be a mapping of fields, got {}",
                    json_kind(&other)
                ),
            });
        }
    };
    let body = body.trim();
    if !body.is_empty() {
        fields.insert("prompt".into(), Value::String(body.to_string()));
    }
    Ok(MarkdownAgent {
        name,
        label,
        fields,
        frontmatter: fm.to_string(),
    })
}

/// `.md` files under `root` (recursive, sorted), with names relative to `root` minus `.md`.
fn markdown_files(root: &Path) -> Result<Vec<(String, PathBuf)>, AgentError> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(AgentError::Io { path: dir, source }),
        };
        for entry in entries {
            let entry = entry.map_err(|source| AgentError::Io {
                path: dir.clone(),
                source,
            })?;
            let path = entry.path();
            let ft = entry.file_type().map_err(|source| AgentError::Io {
                path: path.clone(),
                source,
            })?;
            if ft.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                let rel = path.strip_prefix(root).unwrap_or(&path).with_extension("");
                let name = rel.to_string_lossy().replace('\\', "/");
                out.push((name, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Appends the markdown agents of `<config_dir>/{agent,agents}/**/*.md` to `out`, sorted by
/// name within each folder. A missing folder is no error; unreadable files and bad frontmatter
/// are, naming the file (and line).
pub(crate) fn load_markdown_dir(
    config_dir: &Path,
    out: &mut Vec<MarkdownAgent>,
) -> Result<(), AgentError> {
    load_markdown_subdirs(config_dir, &["agent", "agents"], out)
}

/// Appends the markdown files of `<config_dir>/<sub>/**/*.md` for each of `subs` (agents,
/// commands), parsed as frontmatter fields with the body as `prompt`.
pub(crate) fn load_markdown_subdirs(
    config_dir: &Path,
    subs: &[&str],
    out: &mut Vec<MarkdownAgent>,
) -> Result<(), AgentError> {
    for sub in subs {
        for (name, path) in markdown_files(&config_dir.join(sub))? {
            let text = std::fs::read_to_string(&path).map_err(|source| AgentError::Io {
                path: path.clone(),
                source,
            })?;
            out.push(parse_markdown_agent(
                name,
                path.display().to_string(),
                &text,
            )?);
        }
    }
    Ok(())
}
