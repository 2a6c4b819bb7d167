//! Prompt inputs beyond plain text (issue 22): `@path` and `@agent` references in a prompt,
//! files attached to it (`troupe run -f`, `file` parts on the API) and agent parts, turned
//! into the parts of the user message the way OpenCode's `createUserMessage` does
//! (opencode-engine.md §1.6):
//!
//! | input | parts of the user message |
//! |---|---|
//! | text file (`@README.md`, `path#L10-20`, `file://…?start=&end=`) | the `read` tool runs (with its permission checks and the range as offset/limit): synthetic text `Called the Read tool with the following input: {…}`, synthetic text with its output, a `file` part (`text/plain`, the `file://` URL) |
//! | directory | the same through `read`'s listing, `file` part `application/x-directory` |
//! | image (PNG, JPEG, GIF, WebP) or PDF | a `file` part with the bytes as a `data:` URL, after the same `external_directory`/`read` checks; sent only to a model that accepts it (checked where the model is known) |
//! | `data:text/…` part | synthetic `Called the Read tool…` text and the decoded text |
//! | a path that cannot be read (missing, binary, denied) | synthetic text `Read tool failed to read PATH with the following error: …`; the turn runs |
//! | `@name` of a subagent (no such file) | an `agent` part and synthetic text asking the model to hand the work to it through the task tool |
//!
//! Resolution runs in [`crate::Runtime::prompt`] before the prompt reaches the session actor
//! (the `read` tool may wait for a permission answer; an actor handler must not), so the CLI,
//! the chat, the API and batches share this one code path.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use troupe_session::SessionId;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_session::PartKind;
use troupe_tools::{ToolContext, ToolError, paths};

use crate::RuntimeShared;

/// Largest image attached from a file, bytes (Anthropic's Messages API limit per image, 5 MB).
pub const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

/// Largest PDF attached from a file, bytes (Anthropic's request limit for PDFs, 32 MB).
pub const MAX_PDF_BYTES: u64 = 32 * 1024 * 1024;

/// MIME type of a directory's `file` part (OpenCode's).
pub const DIRECTORY_MIME: &str = "application/x-directory";

/// MIME type of a PDF.
pub const PDF_MIME: &str = "application/pdf";

/// A file attached to a prompt: `-f FILE` on the CLI, a `file` part on the API.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileInput {
    /// `file:///abs/path` (optionally `?start=N&end=M`, 1-based lines), `data:<mime>;base64,…`,
    /// or a plain path (relative to the session's directory; `path#L10-20` for a range).
    pub url: String,
    /// MIME type the client declared (`data:` URLs carry their own).
    pub mime: Option<String>,
    /// Name to show (default: the path as given).
    pub filename: Option<String>,
}

/// A `@name` found in prompt text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    /// What follows the `@` (trailing sentence punctuation removed).
    pub name: String,
    /// Char offset of the `@`.
    pub start: usize,
    /// Char offset just after the name.
    pub end: usize,
}

/// The `@name` references in `text`: an `@` not preceded by a word character or a backtick
/// (so `me@host.com` is none), followed by a name up to whitespace, a backtick or a comma;
/// dots inside the name are kept, a trailing `.`, `)`, `]`, `}`, `:`, `;`, `!`, `?`, quote
/// is not (the shape of OpenCode's `/(?<![\w`])@(\.?[^\s`,.]*(?:\.[^\s`,.]+)*)/`).
pub fn mentions(text: &str) -> Vec<Mention> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '@'
            || i > 0 && (chars[i - 1].is_alphanumeric() || matches!(chars[i - 1], '_' | '`'))
        {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < chars.len() && !chars[j].is_whitespace() && !matches!(chars[j], '`' | ',') {
            j += 1;
        }
        let mut end = j;
        while end > i + 1
            && matches!(
                chars[end - 1],
                '.' | ')' | ']' | '}' | ':' | ';' | '!' | '?' | '"' | '\''
            )
        {
            end -= 1;
        }
        if end > i + 1 {
            out.push(Mention {
                name: chars[i + 1..end].iter().collect(),
                start: i,
                end,
            });
        }
        i = j.max(i + 1);
    }
    out
}

/// A 1-based inclusive line range of a reference (`#L10-20`, `#L10`, `?start=10&end=20`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRange {
    /// First line, 1-based.
    pub start: u64,
    /// Last line, inclusive (`None`: to the read tool's default limit).
    pub end: Option<u64>,
}

impl LineRange {
    /// The read tool's `offset` and `limit` for this range.
    pub fn offset_limit(&self) -> (u64, Option<u64>) {
        let start = self.start.max(1);
        (start, self.end.map(|e| e.saturating_sub(start) + 1))
    }
}

/// Split a reference into its path and line range: `src/a.rs#L10-20`, `src/a.rs#L10-L20`,
/// `src/a.rs#L10`, `src/a.rs?start=10&end=20`. A suffix that is not a well-formed range
/// stays part of the path.
pub fn split_range(reference: &str) -> (&str, Option<LineRange>) {
    let num = |s: &str| s.parse::<u64>().ok().filter(|n| *n > 0);
    if let Some((path, frag)) = reference.rsplit_once("#L") {
        let (a, b) = match frag.split_once('-') {
            Some((a, b)) => (a, Some(b.trim_start_matches('L'))),
            None => (frag, None),
        };
        if let Some(start) = num(a) {
            match b.map(num) {
                None => return (path, Some(LineRange { start, end: None })),
                Some(Some(end)) if end >= start => {
                    return (
                        path,
                        Some(LineRange {
                            start,
                            end: Some(end),
                        }),
                    );
                }
                Some(_) => {}
            }
        }
    }
    if let Some((path, query)) = reference.rsplit_once('?') {
        let mut start = None;
        let mut end = None;
        for kv in query.split('&') {
            match kv.split_once('=') {
                Some(("start", v)) => start = num(v),
                Some(("end", v)) => end = num(v),
                _ => {}
            }
        }
        if let Some(start) = start
            && end.is_none_or(|e| e >= start)
        {
            return (path, Some(LineRange { start, end }));
        }
    }
    (reference, None)
}

/// What a file is, judged by its name (content is read only after the permission checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    /// An image (`image/png`, …) sent as an image input.
    Image(&'static str),
    /// A PDF document.
    Pdf,
    /// Anything else: read as text by the `read` tool (which refuses binary files).
    Text,
}

/// The kind of `path` by its extension (case-insensitive).
pub fn media_kind(path: &Path) -> MediaKind {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match ext.as_str() {
        "png" => MediaKind::Image("image/png"),
        "jpg" | "jpeg" => MediaKind::Image("image/jpeg"),
        "gif" => MediaKind::Image("image/gif"),
        "webp" => MediaKind::Image("image/webp"),
        "pdf" => MediaKind::Pdf,
        _ => MediaKind::Text,
    }
}

/// The MIME type `bytes` really are by their signature (PNG, JPEG, GIF, WebP, PDF), or
/// `None`: an attachment named `.png` must be one.
pub fn sniff_mime(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.starts_with(b"%PDF-") {
        Some(PDF_MIME)
    } else {
        None
    }
}

/// Whether a prompt needs [`resolve`]: it has attachments, agent parts or an `@`.
pub fn needed(input: &crate::PromptInput) -> bool {
    !input.compact
        && (!input.files.is_empty() || !input.agents.is_empty() || input.text.contains('@'))
}

/// The session's directory and worktree, the agent's and session's rules: what the `read`
/// tool runs with while a prompt is resolved.
struct Resolver {
    shared: Arc<RuntimeShared>,
    ctx: ToolContext,
    parts: Vec<PartKind>,
    seen: Vec<(PathBuf, Option<LineRange>)>,
}

/// The context a tool runs with on the user's behalf (a `@file` read, a command's
/// `` !`cmd` ``): the session's directory and worktree, the permissions of `agent` (default:
/// the config's default agent) merged with the session's rules, asking like the model's
/// calls do; `abort` stops it.
pub async fn user_tool_context(
    shared: &Arc<RuntimeShared>,
    session_id: &SessionId,
    agent: Option<&str>,
    abort: &CancellationToken,
) -> Result<ToolContext, String> {
    let sid = session_id.clone();
    let session = shared
        .store
        .read(move |r| r.session(&sid))
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("session {session_id} not found"))?;
    let agent = match agent {
        Some(name) => shared.agents.require(name).map_err(|e| e.to_string())?,
        None => shared
            .agents
            .default_agent(shared.config.config.default_agent.as_deref())
            .map_err(|e| e.to_string())?,
    };
    let session_rules = session.ruleset().map_err(|e| e.to_string())?;
    let rules = Arc::new(troupe_agents::Ruleset::merge(&[
        &agent.permission,
        &session_rules,
    ]));
    let directory = PathBuf::from(&session.directory);
    let worktree = crate::session_actor::worktree_of(&directory);
    Ok(ToolContext {
        session_id: session.id.to_string(),
        message_id: String::new(),
        call_id: String::new(),
        agent: agent.name.clone(),
        directory,
        worktree: worktree.clone(),
        abort: abort.clone(),
        permissions: Arc::new(crate::permission::TurnPermissions {
            broker: shared.broker.clone(),
            session_id: session.id.clone(),
            project: worktree.display().to_string(),
            rules,
        }),
        progress: Arc::new(troupe_tools::NoProgress),
        extra: None,
        hooks: shared.hooks.clone(),
    })
}

/// Resolve `input`'s mentions, files and agent parts into `input.parts` (see the module
/// docs). Errors (a malformed `data:` URL, an unknown session) name what was wrong; a file
/// that cannot be read is not an error but a synthetic text saying so.
pub async fn resolve(
    shared: &Arc<RuntimeShared>,
    session_id: &SessionId,
    input: &mut crate::PromptInput,
    abort: &CancellationToken,
) -> Result<(), String> {
    let ctx = user_tool_context(shared, session_id, input.agent.as_deref(), abort).await?;
    let mut r = Resolver {
        shared: shared.clone(),
        ctx,
        parts: Vec::new(),
        seen: Vec::new(),
    };
    for f in std::mem::take(&mut input.files) {
        r.file(&f).await?;
    }
    for name in std::mem::take(&mut input.agents) {
        r.agent(&name, None)?;
    }
    for m in mentions(&input.text) {
        r.mention(&m).await;
    }
    input.parts.append(&mut r.parts);
    Ok(())
}

impl Resolver {
    /// `~/x` → home, relative → session directory.
    fn absolute(&self, p: &str) -> PathBuf {
        if let Some(rest) = p.strip_prefix("~/")
            && let Some(home) = dirs_home()
        {
            return home.join(rest);
        }
        // A `~user/…` mention is not a file troupe resolves: kept literal, so it is not found.
        paths::normalize(
            &self
                .ctx
                .resolve(p)
                .unwrap_or_else(|_| self.ctx.directory.join(p)),
        )
    }

    async fn mention(&mut self, m: &Mention) {
        let (path, range) = split_range(&m.name);
        let abs = self.absolute(path);
        if tokio::fs::symlink_metadata(&abs).await.is_ok() {
            self.path(&abs, path, range).await;
            return;
        }
        if range.is_none()
            && let Some(agent) = self.shared.agents.get(path)
            && agent.is_subagent()
        {
            let name = agent.name.clone();
            let _ = self.agent(&name, Some(m));
            return;
        }
        // A reference that looks like a path is reported missing; a bare `@word` (a
        // handle, a decorator) is plain text.
        if range.is_some() || path.contains('/') || path.contains('.') {
            self.path(&abs, path, range).await;
        }
    }

    async fn file(&mut self, f: &FileInput) -> Result<(), String> {
        if f.url.starts_with("data:") {
            return self.data_url(f);
        }
        let reference = f.url.strip_prefix("file://").unwrap_or(&f.url);
        let (path, range) = split_range(reference);
        let abs = self.absolute(path);
        let shown = f.filename.clone().unwrap_or_else(|| path.to_string());
        self.path(&abs, &shown, range).await;
        Ok(())
    }

    fn data_url(&mut self, f: &FileInput) -> Result<(), String> {
        use base64::Engine as _;
        let name = f.filename.clone().unwrap_or_else(|| "attachment".into());
        let Some(img) = troupe_llm::types::ImageInput::from_data_url(&f.url) else {
            return Err(format!(
                "file part {name}: the url must be data:<mime>;base64,<data> or file:///path"
            ));
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(img.data.as_bytes())
            .map_err(|e| format!("file part {name}: invalid base64 data: {e}"))?;
        if img.mime.starts_with("text/") {
            let text = String::from_utf8(bytes)
                .map_err(|_| format!("file part {name}: {} data is not UTF-8", img.mime))?;
            self.synthetic(read_call_text(&json!({"filePath": name})));
            self.synthetic(text);
            return Ok(());
        }
        match sniff_mime(&bytes) {
            Some(m) if m == img.mime => {
                self.parts.push(PartKind::File {
                    mime: img.mime.clone(),
                    filename: Some(name),
                    url: f.url.clone(),
                });
                Ok(())
            }
            _ => Err(format!(
                "file part {name}: {} is not supported or the data is not one (accepted: text/*, image/png, image/jpeg, image/gif, image/webp, application/pdf)",
                img.mime
            )),
        }
    }

    /// A path reference: images and PDFs are inlined after the permission checks, all else
    /// goes through the `read` tool. `shown` is the name the user wrote.
    async fn path(&mut self, abs: &Path, shown: &str, range: Option<LineRange>) {
        if self.seen.iter().any(|(p, r)| p == abs && *r == range) {
            return;
        }
        self.seen.push((abs.to_path_buf(), range));
        let meta = tokio::fs::metadata(abs).await.ok();
        let is_file = meta.as_ref().is_some_and(|m| m.is_file());
        match media_kind(abs) {
            MediaKind::Image(_) | MediaKind::Pdf if is_file => match self.media(abs).await {
                Ok(part) => self.parts.push(part),
                Err(e) => self.failed(abs, &e),
            },
            _ => {
                self.read(abs, shown, range, meta.is_some_and(|m| m.is_dir()))
                    .await
            }
        }
    }

    async fn read(&mut self, abs: &Path, shown: &str, range: Option<LineRange>, dir: bool) {
        let mut args = json!({"filePath": abs.display().to_string()});
        if let Some(r) = range {
            let (offset, limit) = r.offset_limit();
            args["offset"] = json!(offset);
            if let Some(l) = limit {
                args["limit"] = json!(l);
            }
        }
        let Some(tool) = self.shared.registry.get("read") else {
            self.failed(
                abs,
                &ToolError::Failed("the read tool is not available".into()),
            );
            return;
        };
        match tool.execute(args.clone(), self.ctx.clone()).await {
            Ok(out) => {
                self.synthetic(read_call_text(&args));
                self.synthetic(out.output);
                let url = match range {
                    Some(LineRange { start, end }) => format!(
                        "file://{}?start={start}{}",
                        abs.display(),
                        end.map(|e| format!("&end={e}")).unwrap_or_default()
                    ),
                    None => format!("file://{}", abs.display()),
                };
                self.parts.push(PartKind::File {
                    mime: if dir { DIRECTORY_MIME } else { "text/plain" }.into(),
                    filename: Some(shown.to_string()),
                    url,
                });
            }
            Err(e) => self.failed(abs, &e),
        }
    }

    /// An image or PDF as a `data:` URL, after the checks the `read` tool makes.
    async fn media(&self, abs: &Path) -> Result<PartKind, ToolError> {
        use base64::Engine as _;
        let ctx = &self.ctx;
        paths::assert_external_directory(ctx, abs, paths::PathKind::File).await?;
        let rel = paths::worktree_relative(ctx, abs).await;
        let shown = abs.display().to_string();
        paths::ask(
            ctx,
            "read",
            vec![rel],
            vec!["*".into()],
            json!({"filepath": shown}),
        )
        .await?;
        let expected = match media_kind(abs) {
            MediaKind::Image(m) => m,
            _ => PDF_MIME,
        };
        let limit = if expected == PDF_MIME {
            MAX_PDF_BYTES
        } else {
            MAX_IMAGE_BYTES
        };
        let len = tokio::fs::metadata(abs)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?
            .len();
        if len > limit {
            return Err(ToolError::Failed(format!(
                "{len} bytes is over the {limit} byte limit for an attached {}",
                if expected == PDF_MIME { "PDF" } else { "image" }
            )));
        }
        let bytes = paths::read_regular(abs, "read", &shown).await?;
        let mime = sniff_mime(&bytes)
            .filter(|m| *m == expected)
            .ok_or_else(|| ToolError::Failed(format!("the file is not a valid {expected} file")))?;
        Ok(PartKind::File {
            mime: mime.to_string(),
            filename: Some(
                abs.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| shown.clone()),
            ),
            url: format!(
                "data:{mime};base64,{}",
                base64::engine::general_purpose::STANDARD.encode(&bytes)
            ),
        })
    }

    fn agent(&mut self, name: &str, mention: Option<&Mention>) -> Result<(), String> {
        let agent = self
            .shared
            .agents
            .require(name)
            .map_err(|e| e.to_string())?;
        if !agent.is_subagent() {
            return Err(format!(
                "agent part {name}: not a subagent (available: {})",
                self.shared
                    .agents
                    .subagents()
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if self
            .parts
            .iter()
            .any(|p| matches!(p, PartKind::Agent { name: n, .. } if n == name))
        {
            return Ok(());
        }
        self.parts.push(PartKind::Agent {
            name: name.to_string(),
            source: mention.map(|m| troupe_session::AgentSource {
                value: format!("@{}", m.name),
                start: m.start as u64,
                end: m.end as u64,
            }),
        });
        self.synthetic(agent_instruction(name));
        Ok(())
    }

    fn failed(&mut self, abs: &Path, e: &ToolError) {
        self.synthetic(format!(
            "Read tool failed to read {} with the following error: {e}",
            abs.display()
        ));
    }

    fn synthetic(&mut self, text: String) {
        self.parts.push(PartKind::Text {
            text,
            synthetic: true,
            time: None,
        });
    }
}

/// Refuse `parts` holding an image or a PDF that `model` does not accept (see
/// [`check_mime`]).
pub fn check_media(
    parts: &[PartKind],
    model: &troupe_config::model::ResolvedModel,
) -> Result<(), String> {
    for p in parts {
        if let PartKind::File { mime, url, .. } = p
            && url.starts_with("data:")
        {
            check_mime(mime, model)?;
        }
    }
    Ok(())
}

/// Refuse inline media of type `mime` (an image or a PDF) when `model` does not accept it,
/// naming the model and the config key that says it does.
pub fn check_mime(mime: &str, model: &troupe_config::model::ResolvedModel) -> Result<(), String> {
    let (what, key, ok) = if mime == PDF_MIME {
        ("PDFs", "pdf", model.pdf_input)
    } else {
        ("images", "image", model.image_input)
    };
    if ok {
        return Ok(());
    }
    Err(format!(
        "model {} does not accept {what} (its catalog entry lists no {key} input; set \"modalities\": {{\"input\": [\"text\", \"{key}\"]}} on the model in troupe.json if it does)",
        model.full_id()
    ))
}

/// Check a file the user attaches by name (`troupe run -f`) before anything starts: it must
/// exist; a directory is listed; a file named as an image or PDF must be one and within the
/// size limit; anything else must look like text (no NUL byte, UTF-8 in its first 8 KiB).
/// Returns the inline media type, if it is an image or a PDF. Errors say what is wrong.
pub fn check_attachment(path: &Path) -> Result<Option<&'static str>, String> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.is_dir() {
        return Ok(None);
    }
    if !meta.is_file() {
        return Err("not a regular file or a directory".into());
    }
    let mut head = Vec::with_capacity(8192);
    std::fs::File::open(path)
        .and_then(|f| f.take(8192).read_to_end(&mut head))
        .map_err(|e| e.to_string())?;
    let (expected, limit) = match media_kind(path) {
        MediaKind::Image(m) => (m, MAX_IMAGE_BYTES),
        MediaKind::Pdf => (PDF_MIME, MAX_PDF_BYTES),
        MediaKind::Text => {
            let text = match std::str::from_utf8(&head) {
                Ok(t) => Some(t),
                // A multi-byte character cut at the 8 KiB boundary is still text.
                Err(e) if e.error_len().is_none() => {
                    std::str::from_utf8(&head[..e.valid_up_to()]).ok()
                }
                Err(_) => None,
            };
            if text.is_none_or(|t| t.contains('\0')) {
                return Err("neither UTF-8 text nor an image or PDF named as one (.png, .jpg, .jpeg, .gif, .webp, .pdf)".into());
            }
            return Ok(None);
        }
    };
    if sniff_mime(&head) != Some(expected) {
        return Err(format!("named as {expected} but its content is not"));
    }
    if meta.len() > limit {
        return Err(format!(
            "{} bytes is over the {limit} byte limit for {expected}",
            meta.len()
        ));
    }
    Ok(Some(expected))
}

/// The synthetic text recording a read made for the user (OpenCode's wording).
pub fn read_call_text(args: &serde_json::Value) -> String {
    format!("Called the Read tool with the following input: {args}")
}

/// The synthetic text that hands a mention's work to a subagent (OpenCode's wording).
pub fn agent_instruction(name: &str) -> String {
    format!(
        "Use the above message and context to generate a prompt and call the task tool with subagent: {name}"
    )
}

fn dirs_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
#[path = "inputs_tests.rs"]
mod tests;
