//! `read {filePath, offset?, limit?}`: numbered file contents or a directory listing
//! (OpenCode `tool/read.ts`, §7.3 "read, in detail").

use std::path::Path;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::blocking;
use crate::paths;
use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

/// Default number of lines returned (OpenCode `DEFAULT_READ_LIMIT`).
pub const DEFAULT_READ_LIMIT: usize = 2000;
/// Lines longer than this many chars are cut (OpenCode `MAX_LINE_LENGTH`).
pub const MAX_LINE_LENGTH: usize = 2000;
/// Suffix of a cut line.
pub const MAX_LINE_SUFFIX: &str = "... (line truncated to 2000 chars)";
/// Cap of the returned content in bytes (50 KB, OpenCode `MAX_BYTES`).
pub const MAX_BYTES: usize = 50 * 1024;
/// Label of [`MAX_BYTES`] in the footer.
pub const MAX_BYTES_LABEL: &str = "50 KB";
/// Bytes sniffed for binary detection (OpenCode `SAMPLE_BYTES`).
pub const SAMPLE_BYTES: usize = 4096;
/// Lines kept in `metadata.preview`.
pub const PREVIEW_LINES: usize = 20;

/// Extensions always treated as binary.
pub const BINARY_EXTENSIONS: &[&str] = &[
    "zip", "tar", "gz", "tgz", "bz2", "xz", "zst", "7z", "rar", "exe", "dll", "so", "dylib",
    "class", "jar", "war", "doc", "docx", "xls", "xlsx", "ppt", "pptx", "odt", "ods", "odp", "bin",
    "dat", "obj", "o", "a", "lib", "wasm", "pyc", "pyo", "png", "jpg", "jpeg", "gif", "webp",
    "bmp", "ico", "tiff", "pdf", "mp3", "mp4", "mov", "avi", "mkv", "wav", "flac", "ogg", "woff",
    "woff2", "ttf", "otf", "eot", "sqlite", "db", "iso", "dmg", "img",
];

/// The `read` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadTool;

/// Arguments of the `read` tool; the schema the model sees is derived from this struct
/// (each field's doc comment is its description).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadArgs {
    /// Absolute path of the file or directory to read
    file_path: String,
    /// 1-based line (or entry) number to start from
    offset: Option<u64>,
    /// Maximum number of lines (or entries) to return (default 2000)
    limit: Option<u64>,
}

impl TypedTool for ReadTool {
    type Args = ReadArgs;
    const NAME: &'static str = "read";

    fn describe(&self) -> String {
        "Read a file or list a directory.\n\
         - `filePath`: absolute path (relative paths resolve against the working directory).\n\
         - Returns lines prefixed with their 1-based number (`12: text`). By default up to 2000 \
         lines from the start; use `offset` (1-based first line) and `limit` for large files.\n\
         - Lines longer than 2000 characters are cut; output is capped at 50 KB, and a footer \
         says which offset to use to continue.\n\
         - A directory returns its entries (subdirectories end with `/`).\n\
         - Binary files are refused. Prefer reading several relevant files in parallel."
            .to_string()
    }

    fn run(
        &self,
        args: ReadArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move { run(args, ctx).await })
    }
}

async fn run(args: ReadArgs, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
    let path = paths::normalize(&ctx.resolve(&args.file_path)?);
    let shown = path.to_string_lossy().into_owned();
    // offset is 1-based; 0 is accepted as 1.
    let offset = args.offset.unwrap_or(1).max(1) as usize;
    let limit = args.limit.map(|l| l as usize).unwrap_or(DEFAULT_READ_LIMIT);
    // When the rules settle it, the reading runs in the trip that locates the path.
    let (at, (path, shown)) = match paths::locate_and(
        &ctx,
        &path,
        "read",
        |at| vec![at.rel.clone()],
        (path.clone(), shown),
        move |at, (path, shown)| read_path(&path, &shown, at.rel.clone(), offset, limit),
    )
    .await?
    {
        paths::Trip::Done(_, out) => return out,
        paths::Trip::Ask(at, input) => (at, input),
    };
    paths::check_external(&ctx, &at, at.kind).await?;
    let rel = at.rel;
    paths::ask(
        &ctx,
        "read",
        vec![rel.clone()],
        vec!["*".into()],
        json!({"filepath": shown}),
    )
    .await?;
    // One trip to the blocking pool for all of the reading.
    blocking(move || read_path(&path, &shown, rel, offset, limit)).await?
}

/// The read itself, after the permission checks: a directory's entries or a regular file's
/// numbered lines (blocking).
fn read_path(
    path: &Path,
    shown: &str,
    rel: String,
    offset: usize,
    limit: usize,
) -> Result<ToolOutput, ToolError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(_) => return Err(ToolError::Failed(not_found_message(path))),
    };
    if meta.is_dir() {
        return read_dir(path, shown, &rel, offset, limit);
    }
    if let Some(kind) = paths::special_kind(meta.file_type()) {
        return Err(paths::special_file_error("read", shown, kind));
    }

    let (output, preview, truncated) = read_text_file(path, shown, offset, limit)?;
    let mut metadata = serde_json::Map::new();
    metadata.insert("preview".into(), Value::String(preview));
    metadata.insert("truncated".into(), Value::Bool(truncated));
    metadata.insert("loaded".into(), Value::Array(Vec::new()));
    Ok(ToolOutput {
        title: rel,
        output,
        metadata,
    })
}

/// Bytes of one line kept while streaming (enough for [`MAX_LINE_LENGTH`] chars of UTF-8);
/// the rest of a longer line is skipped without being stored.
const LINE_KEEP: usize = MAX_LINE_LENGTH * 4 + 4;

/// Accumulates lines as OpenCode's read loop does (offset/limit, line cut, byte cap).
struct Collector {
    offset: usize,
    limit: usize,
    raw: Vec<String>,
    bytes: usize,
    total: usize,
    capped: bool,
    more: bool,
}

impl Collector {
    fn new(offset: usize, limit: usize) -> Self {
        Self {
            offset,
            limit,
            raw: Vec::new(),
            bytes: 0,
            total: 0,
            capped: false,
            more: false,
        }
    }

    /// Whether the next line's text matters (otherwise only counting continues).
    fn wants_text(&self) -> bool {
        !self.capped && self.total + 1 >= self.offset && self.raw.len() < self.limit
    }

    /// Whether reading can stop (the byte cap was hit; OpenCode stops there too).
    fn done(&self) -> bool {
        self.capped
    }

    fn push(&mut self, line: &str) {
        self.total += 1;
        if self.total < self.offset || self.capped {
            return;
        }
        if self.raw.len() >= self.limit {
            self.more = true;
            return;
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = if line.chars().count() > MAX_LINE_LENGTH {
            let cut: String = line.chars().take(MAX_LINE_LENGTH).collect();
            format!("{cut}{MAX_LINE_SUFFIX}")
        } else {
            line.to_string()
        };
        let size = line.len() + usize::from(!self.raw.is_empty());
        if self.bytes + size > MAX_BYTES {
            self.capped = true;
            self.more = true;
            return;
        }
        self.bytes += size;
        self.raw.push(line);
    }

    /// `(output, preview, truncated)` or the out-of-range error.
    fn finish(self, shown: &str) -> Result<(String, String, bool), ToolError> {
        let Self {
            offset,
            raw,
            total,
            capped,
            more,
            ..
        } = self;
        if total < offset && !(total == 0 && offset == 1) {
            return Err(ToolError::Failed(format!(
                "Offset {offset} is out of range for this file ({total} lines)"
            )));
        }
        let numbered: Vec<String> = raw
            .iter()
            .enumerate()
            .map(|(i, l)| format!("{}: {l}", i + offset))
            .collect();
        let mut output = format!("<path>{shown}</path>\n<type>file</type>\n<content>\n");
        output.push_str(&numbered.join("\n"));
        let last = offset + raw.len() - 1;
        let next = last + 1;
        if capped {
            output.push_str(&format!(
                "\n\n(Output capped at {MAX_BYTES_LABEL}. Showing lines {offset}-{last}. Use offset={next} to continue.)"
            ));
        } else if more {
            output.push_str(&format!(
                "\n\n(Showing lines {offset}-{last} of {total}. Use offset={next} to continue.)"
            ));
        } else {
            output.push_str(&format!("\n\n(End of file - total {total} lines)"));
        }
        output.push_str("\n</content>");
        let preview = raw
            .iter()
            .take(PREVIEW_LINES)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        Ok((output, preview, more))
    }
}

/// Render text as OpenCode's read does (`<path>…</path>\n<type>file</type>\n<content>\n1: …`
/// plus footer). Returns `(output, preview, truncated)`; `offset` is 1-based (≥ 1).
pub fn format_text(
    text: &str,
    shown: &str,
    offset: usize,
    limit: usize,
) -> Result<(String, String, bool), ToolError> {
    let mut c = Collector::new(offset.max(1), limit);
    if !text.is_empty() {
        for line in text.strip_suffix('\n').unwrap_or(text).split('\n') {
            c.push(line);
            if c.done() {
                break;
            }
        }
    }
    c.finish(shown)
}

/// Stream a file through the [`Collector`] with bounded memory: binary sniffing on the first
/// [`SAMPLE_BYTES`], at most [`LINE_KEEP`] bytes kept per line, reading stops at the byte cap
/// (blocking).
fn read_text_file(
    path: &Path,
    shown: &str,
    offset: usize,
    limit: usize,
) -> Result<(String, String, bool), ToolError> {
    use std::io::Read;
    let fail = |e: std::io::Error| ToolError::Failed(format!("Cannot read file {shown}: {e}"));
    let mut file = paths::open_regular(path, "read", shown)?;
    let mut chunk = vec![0u8; 64 * 1024];
    // First chunk: at least SAMPLE_BYTES unless the file is shorter.
    let mut filled = 0;
    while filled < SAMPLE_BYTES {
        let n = file.read(&mut chunk[filled..]).map_err(fail)?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    if is_binary(path, &chunk[..filled]) {
        return Err(ToolError::Failed(format!(
            "Cannot read binary file: {shown}"
        )));
    }
    let mut c = Collector::new(offset, limit);
    let mut decoder = LineDecoder::new(&chunk[..filled]);
    let mut line: Vec<u8> = Vec::new();
    let mut pending = false; // bytes seen since the last newline
    let mut n = filled;
    'outer: while n > 0 {
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    if c.wants_text() {
                        let room = LINE_KEEP.saturating_sub(line.len());
                        line.extend_from_slice(&rest[..i.min(room)]);
                    }
                    let number = c.total + 1;
                    c.push(&decoder.decode(&line, number));
                    line.clear();
                    pending = false;
                    rest = &rest[i + 1..];
                    if c.done() {
                        break 'outer;
                    }
                }
                None => {
                    if c.wants_text() {
                        let room = LINE_KEEP.saturating_sub(line.len());
                        line.extend_from_slice(&rest[..rest.len().min(room)]);
                    }
                    pending = true;
                    rest = &[];
                }
            }
        }
        n = file.read(&mut chunk).map_err(fail)?;
    }
    if pending && !c.done() {
        let number = c.total + 1;
        c.push(&decoder.decode(&line, number));
    }
    let (mut output, preview, truncated) = c.finish(shown)?;
    if let Some(note) = decoder.note() {
        let end = output.len() - "\n</content>".len();
        output.insert_str(end, &format!("\n\n{note}"));
    }
    Ok((output, preview, truncated))
}

/// Decodes the lines of a file that may not be UTF-8 (issue 13.8): valid UTF-8 lines pass
/// through; the first invalid one makes [`chardetng`] guess the file's legacy encoding from
/// the start of the file and that line, and every invalid line is decoded with it through
/// [`encoding_rs`] (Windows-1252, the WHATWG superset of Latin-1, when the guess is UTF-8).
struct LineDecoder {
    sample: Vec<u8>,
    legacy: Option<&'static encoding_rs::Encoding>,
    first_bad: Option<usize>,
}

impl LineDecoder {
    fn new(sample: &[u8]) -> Self {
        Self {
            sample: sample.to_vec(),
            legacy: None,
            first_bad: None,
        }
    }

    /// Text of line `number` (1-based) from its raw bytes (possibly cut mid-character at the
    /// per-line cap: an incomplete final sequence is dropped, not counted as invalid).
    fn decode<'a>(&mut self, bytes: &'a [u8], number: usize) -> std::borrow::Cow<'a, str> {
        match std::str::from_utf8(bytes) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(e) if e.error_len().is_none() => std::borrow::Cow::Borrowed(
                std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
            ),
            Err(_) => {
                self.first_bad.get_or_insert(number);
                let enc = *self
                    .legacy
                    .get_or_insert_with(|| guess_legacy_encoding(&[&self.sample, bytes]));
                std::borrow::Cow::Owned(enc.decode_without_bom_handling(bytes).0.into_owned())
            }
        }
    }

    /// The note appended to the output when some line was not UTF-8.
    fn note(&self) -> Option<String> {
        let (line, enc) = (self.first_bad?, self.legacy?);
        Some(format!(
            "(This file is not valid UTF-8 (first invalid byte on line {line}). It looks like {}; \
             the lines above were decoded as {}. The edit tool only changes UTF-8 files: convert it \
             first, e.g. `iconv -f {} -t UTF-8`, if it must be edited.)",
            encoding_label(enc),
            enc.name(),
            enc.name()
        ))
    }
}

/// A human label: `windows-1252 (Latin-1)` for Windows-1252, else the WHATWG name.
pub fn encoding_label(enc: &'static encoding_rs::Encoding) -> String {
    if enc == encoding_rs::WINDOWS_1252 {
        "windows-1252 (Latin-1)".to_string()
    } else {
        enc.name().to_string()
    }
}

/// The legacy (non-UTF-8) encoding `chunks` most likely are in, by [`chardetng`] (the
/// detector Firefox uses); Windows-1252 when it can only say UTF-8.
pub fn guess_legacy_encoding(chunks: &[&[u8]]) -> &'static encoding_rs::Encoding {
    let mut det = chardetng::EncodingDetector::new();
    for (i, c) in chunks.iter().enumerate() {
        det.feed(c, i + 1 == chunks.len());
    }
    let enc = det.guess(None, false);
    if enc == encoding_rs::UTF_8 {
        encoding_rs::WINDOWS_1252
    } else {
        enc
    }
}

/// A directory's entries, sorted, subdirectories marked with `/` (blocking).
fn read_dir(
    path: &Path,
    shown: &str,
    rel: &str,
    offset: usize,
    limit: usize,
) -> Result<ToolOutput, ToolError> {
    let rd = std::fs::read_dir(path)
        .map_err(|e| ToolError::Failed(format!("Cannot read directory {shown}: {e}")))?;
    let mut entries = Vec::new();
    for e in rd.map_while(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        // Follow symlinks to decide whether the entry is a directory.
        let is_dir = std::fs::metadata(e.path())
            .map(|m| m.is_dir())
            .unwrap_or(false);
        entries.push(if is_dir { format!("{name}/") } else { name });
    }
    entries.sort();
    let total = entries.len();
    let start = (offset - 1).min(total);
    let end = start.saturating_add(limit).min(total);
    let slice = &entries[start..end];
    let mut output = format!("<path>{shown}</path>\n<type>directory</type>\n<entries>\n");
    output.push_str(&slice.join("\n"));
    let truncated = end < total;
    if truncated {
        output.push_str(&format!(
            "\n\n(Showing {} of {total} entries. Use 'offset' parameter to read beyond entry {})",
            slice.len(),
            end
        ));
    } else {
        output.push_str(&format!("\n\n({total} entries)"));
    }
    output.push_str("\n</entries>");
    let mut metadata = serde_json::Map::new();
    metadata.insert(
        "preview".into(),
        Value::String(
            slice
                .iter()
                .take(PREVIEW_LINES)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    );
    metadata.insert("truncated".into(), Value::Bool(truncated));
    metadata.insert("loaded".into(), Value::Array(Vec::new()));
    Ok(ToolOutput {
        title: if rel.is_empty() {
            ".".into()
        } else {
            rel.to_string()
        },
        output,
        metadata,
    })
}

/// `File not found: <p>`, plus up to 3 "Did you mean" entries from the same directory whose
/// names contain (or are contained in) the requested name, case-insensitively (blocking).
fn not_found_message(path: &Path) -> String {
    let shown = path.to_string_lossy();
    let mut msg = format!("File not found: {shown}");
    let (Some(dir), Some(base)) = (path.parent(), path.file_name()) else {
        return msg;
    };
    let base = base.to_string_lossy().to_lowercase();
    let mut names = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.map_while(Result::ok) {
            names.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    let suggestions: Vec<String> = names
        .into_iter()
        .filter(|n| {
            let l = n.to_lowercase();
            l.contains(&base) || base.contains(&l) || same_stem(&l, &base)
        })
        .take(3)
        .map(|n| dir.join(n).to_string_lossy().into_owned())
        .collect();
    if !suggestions.is_empty() {
        msg.push_str("\n\nDid you mean one of these?\n");
        msg.push_str(&suggestions.join("\n"));
    }
    msg
}

/// `main.rs` vs `main.ts`: same name before the extension.
fn same_stem(a: &str, b: &str) -> bool {
    let stem = |s: &str| {
        s.rsplit_once('.')
            .map(|(x, _)| x.to_string())
            .unwrap_or_else(|| s.to_string())
    };
    let (sa, sb) = (stem(a), stem(b));
    !sa.is_empty() && sa == sb
}

/// Binary detection: a known binary extension, a NUL byte in the first [`SAMPLE_BYTES`], or
/// more than 30% non-printable bytes there (bytes < 9 or 14..=31, as OpenCode counts).
pub fn is_binary(path: &Path, bytes: &[u8]) -> bool {
    if let Some(ext) = path.extension().and_then(|e| e.to_str())
        && BINARY_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str())
    {
        return true;
    }
    let sample = &bytes[..bytes.len().min(SAMPLE_BYTES)];
    if sample.is_empty() {
        return false;
    }
    if sample.contains(&0) {
        return true;
    }
    let non_printable = sample
        .iter()
        .filter(|&&b| b < 9 || (b > 13 && b < 32))
        .count();
    non_printable * 10 > sample.len() * 3
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
