//! Output truncation (OpenCode `tool/truncate.ts`, §7.2): outputs over [`MAX_LINES`] lines or
//! [`MAX_BYTES`] bytes keep the head (or tail) within both limits; the full text is saved to a
//! file whose path is given in a hint so the model can Grep/Read it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Default line limit (OpenCode `Truncate.MAX_LINES`).
pub const MAX_LINES: usize = 2000;
/// Default byte limit, 50 KiB (OpenCode `Truncate.MAX_BYTES`).
pub const MAX_BYTES: usize = 50 * 1024;
/// Env var naming the directory where full outputs are saved; default
/// `std::env::temp_dir()/troupe-tool-output`.
pub const OUTPUT_DIR_ENV: &str = "TROUPE_TOOL_OUTPUT_DIR";

/// How long saved full outputs are kept (OpenCode: 7 days); see [`cleanup_outputs`].
pub const RETENTION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Which end of the text to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Keep the first lines (default, e.g. grep results).
    #[default]
    Head,
    /// Keep the last lines (e.g. shell output).
    Tail,
}

/// Result of [`truncate_output`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated {
    /// Text to return to the model (unchanged when nothing was cut).
    pub content: String,
    /// Whether anything was cut.
    pub truncated: bool,
    /// Where the full text was saved (only when truncated and the write succeeded).
    pub output_path: Option<PathBuf>,
}

/// Directory for saved full outputs: `$TROUPE_TOOL_OUTPUT_DIR`, else
/// `<temp_dir>/troupe-tool-output`.
pub fn output_dir() -> PathBuf {
    match std::env::var_os(OUTPUT_DIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => std::env::temp_dir().join("troupe-tool-output"),
    }
}

/// A fresh file path `tool_<millis>_<counter>` inside [`output_dir`] (ascending ids).
pub fn new_output_path() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    output_dir().join(format!("tool_{ms:013}_{n:06}_{}", std::process::id()))
}

/// The hint appended to a truncated output (OpenCode's non-task variant).
pub fn hint(path: &str) -> String {
    format!(
        "The tool call succeeded but the output was truncated. Full output saved to: {path}\n\
         Use Grep to search the full content or Read with offset/limit to view specific sections."
    )
}

/// Pure part of truncation: the kept preview and how much was dropped, or `None` when `text`
/// fits (`lines <= max_lines && bytes <= max_bytes`). Returns `(preview, removed, unit)` where
/// `unit` is `"lines"` or `"bytes"` (bytes when the byte limit cut first). Whole lines are
/// kept from the chosen end; the first line that does not fit is cut on a char boundary to
/// fill what is left of the byte limit and marked with [`ELLIPSIS`] (`…tail` or `head…`), so
/// one huge line still shows its end (tail) or start (head). The preview never exceeds
/// `max_bytes`.
pub fn cut(
    text: &str,
    max_lines: usize,
    max_bytes: usize,
    direction: Direction,
) -> Option<(String, usize, &'static str)> {
    let lines: Vec<&str> = text.split('\n').collect();
    if lines.len() <= max_lines && text.len() <= max_bytes {
        return None;
    }
    let mut kept: Vec<&str> = Vec::new();
    let mut bytes = 0usize;
    let mut hit_bytes = false;
    let iter: Box<dyn Iterator<Item = &&str>> = match direction {
        Direction::Head => Box::new(lines.iter()),
        Direction::Tail => Box::new(lines.iter().rev()),
    };
    // The part of a line that did not fit whole, with its ellipsis (issue 13.4: one huge
    // line must not vanish, the model sees as much of its kept end as the limit allows).
    let mut partial: Option<String> = None;
    for line in iter {
        if kept.len() >= max_lines {
            break;
        }
        let sep = usize::from(!kept.is_empty());
        let size = line.len() + sep;
        if bytes + size > max_bytes {
            hit_bytes = true;
            let room = max_bytes.saturating_sub(bytes + sep + ELLIPSIS.len());
            if room > 0 && kept.len() < max_lines {
                let piece = match direction {
                    Direction::Head => {
                        let mut end = room.min(line.len());
                        while !line.is_char_boundary(end) {
                            end -= 1;
                        }
                        &line[..end]
                    }
                    Direction::Tail => {
                        let mut start = line.len().saturating_sub(room);
                        while !line.is_char_boundary(start) {
                            start += 1;
                        }
                        &line[start..]
                    }
                };
                if !piece.is_empty() {
                    bytes += sep + piece.len();
                    partial = Some(match direction {
                        Direction::Head => format!("{piece}{ELLIPSIS}"),
                        Direction::Tail => format!("{ELLIPSIS}{piece}"),
                    });
                }
            }
            break;
        }
        bytes += size;
        kept.push(line);
    }
    let mut kept: Vec<&str> = kept;
    if let Some(p) = &partial {
        kept.push(p.as_str());
    }
    if direction == Direction::Tail {
        kept.reverse();
    }
    let preview = kept.join("\n");
    if hit_bytes {
        Some((preview, text.len().saturating_sub(bytes), "bytes"))
    } else {
        Some((preview, lines.len() - kept.len(), "lines"))
    }
}

/// Marks where a line was cut by [`cut`] (3 bytes, counted within the byte limit).
pub const ELLIPSIS: &str = "…";

/// Truncate `text` to at most `max_lines` lines and `max_bytes` bytes (defaults
/// [`MAX_LINES`], [`MAX_BYTES`]), keeping the head or tail. When cut, the full text is written
/// to [`new_output_path`] and the result is
/// - head: `"<preview>\n\n...<N> lines|bytes truncated...\n\n<hint>"`,
/// - tail: `"<hint>\n\n...<N> lines|bytes truncated...\n\n<preview>"`.
///
/// If saving fails the hint says so instead of naming a file.
pub async fn truncate_output(
    text: &str,
    max_lines: usize,
    max_bytes: usize,
    direction: Direction,
) -> Truncated {
    let Some((preview, removed, unit)) = cut(text, max_lines, max_bytes, direction) else {
        return Truncated {
            content: text.to_string(),
            truncated: false,
            output_path: None,
        };
    };
    let path = save_full_output(text).await;
    let hint_text = match &path {
        Some(p) => hint(&p.to_string_lossy()),
        None => "The tool call succeeded but the output was truncated (the full output could not be saved).".to_string(),
    };
    let marker = format!("...{removed} {unit} truncated...");
    let content = match direction {
        Direction::Head => format!("{preview}\n\n{marker}\n\n{hint_text}"),
        Direction::Tail => format!("{hint_text}\n\n{marker}\n\n{preview}"),
    };
    Truncated {
        content,
        truncated: true,
        output_path: path,
    }
}

/// OpenCode's wrapper step 3 (§7.1): when a tool's metadata has no `truncated` key, truncate
/// its output (head, default limits) and set `metadata.truncated` (and `outputPath` when
/// saved). Tools that manage their own limits (read, bash, grep, …) set `truncated` and pass
/// through unchanged. Meant for the caller of [`crate::Tool::execute`], e.g. for MCP tools.
pub async fn apply_truncation(mut out: crate::ToolOutput) -> crate::ToolOutput {
    if out.metadata.contains_key("truncated") {
        return out;
    }
    let t = truncate_output(&out.output, MAX_LINES, MAX_BYTES, Direction::Head).await;
    out.output = t.content;
    out.metadata
        .insert("truncated".into(), serde_json::Value::Bool(t.truncated));
    if let Some(p) = t.output_path {
        out.metadata.insert(
            "outputPath".into(),
            serde_json::Value::String(p.to_string_lossy().into_owned()),
        );
    }
    out
}

/// Write `text` to a new file under [`output_dir`]; `None` (and a warning) on failure.
pub async fn save_full_output(text: &str) -> Option<PathBuf> {
    let path = new_output_path();
    if let Some(dir) = path.parent()
        && let Err(e) = tokio::fs::create_dir_all(dir).await
    {
        tracing::warn!(error = %e, dir = %dir.display(), "cannot create tool output dir");
        return None;
    }
    match tokio::fs::write(&path, text).await {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::warn!(error = %e, path = %path.display(), "cannot save tool output");
            None
        }
    }
}

/// Delete saved outputs (`tool_*` files in [`output_dir`]) older than `retention` (use
/// [`RETENTION`]). Returns how many files were removed; a missing directory counts as 0.
/// OpenCode runs this hourly.
pub async fn cleanup_outputs(retention: std::time::Duration) -> usize {
    let Ok(mut rd) = tokio::fs::read_dir(output_dir()).await else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    while let Ok(Some(e)) = rd.next_entry().await {
        if !e.file_name().to_string_lossy().starts_with("tool_") {
            continue;
        }
        let old = match e.metadata().await.and_then(|m| m.modified()) {
            Ok(t) => now.duration_since(t).is_ok_and(|age| age > retention),
            Err(_) => false,
        };
        if old && tokio::fs::remove_file(e.path()).await.is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_text_untouched() {
        assert!(cut("a\nb", 2, 100, Direction::Head).is_none());
    }

    #[test]
    fn head_and_tail_by_lines() {
        let text = (1..=10)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        let (p, n, unit) = cut(&text, 3, 1000, Direction::Head).unwrap();
        assert_eq!((p.as_str(), n, unit), ("1\n2\n3", 7, "lines"));
        let (p, n, _) = cut(&text, 3, 1000, Direction::Tail).unwrap();
        assert_eq!((p.as_str(), n), ("8\n9\n10", 7));
    }

    #[test]
    fn by_bytes() {
        let text = "aaaa\nbbbb\ncccc";
        let (p, n, unit) = cut(text, 100, 9, Direction::Head).unwrap();
        assert_eq!((p.as_str(), unit), ("aaaa\nbbbb", "bytes"));
        assert_eq!(n, 5);
    }

    /// Issue 13.4: `head -c 60000 /dev/zero | tr '\0' x; echo END` is one 60 003-byte line;
    /// the tail keeps as much of it as the limit allows, ending in `END`.
    #[test]
    fn one_huge_line_keeps_its_tail() {
        let text = format!("{}END\n", "x".repeat(60_000));
        let (p, removed, unit) = cut(&text, MAX_LINES, MAX_BYTES, Direction::Tail).unwrap();
        assert_eq!(unit, "bytes");
        assert!(p.starts_with("…xxxx"), "{}", &p[..20]);
        assert!(p.ends_with("xxxxEND\n"));
        assert_eq!(p.len(), MAX_BYTES);
        assert_eq!(removed, text.len() - (p.len() - ELLIPSIS.len()));
        // Head keeps the start of the line instead.
        let (p, _, _) = cut(&text, MAX_LINES, MAX_BYTES, Direction::Head).unwrap();
        assert!(p.starts_with("xxx") && p.ends_with("x…"));
        assert!(p.len() <= MAX_BYTES);
    }

    #[test]
    fn huge_multibyte_line_is_cut_on_a_char_boundary() {
        // 2-, 3- and 4-byte characters: every budget lands inside some character.
        for ch in ["é", "€", "𝄞"] {
            let text = format!("first\n{}END", ch.repeat(30_000));
            for max in [100, 101, 102, 103, 1000, MAX_BYTES] {
                let (p, _, _) = cut(&text, MAX_LINES, max, Direction::Tail).unwrap();
                assert!(p.ends_with(&format!("{ch}END")), "{ch} {max}");
                assert!(p.starts_with('…'));
                assert!(
                    p.len() <= max && p.len() + ch.len() > max - 1,
                    "{ch} {max}: {}",
                    p.len()
                );
                let (p, _, _) = cut(&text, MAX_LINES, max, Direction::Head).unwrap();
                assert!(p.len() <= max);
                assert!(p.starts_with("first\n") && p.ends_with('…'));
            }
        }
    }

    #[test]
    fn whole_lines_then_a_partial_one() {
        let text = "aaaaaaaaaa\nbb\ncc";
        // Tail, 12 bytes: "bb\ncc" (5) + "\n" + "…" (3) leaves 3 bytes of the a-line.
        let (p, _, _) = cut(text, 100, 12, Direction::Tail).unwrap();
        assert_eq!(p, "…aaa\nbb\ncc");
        // No room for even one byte after the ellipsis: whole lines only.
        let (p, _, _) = cut(text, 100, 9, Direction::Tail).unwrap();
        assert_eq!(p, "bb\ncc");
    }

    #[tokio::test]
    async fn cleanup_removes_only_old_outputs() {
        let fresh = save_full_output("fresh").await.unwrap();
        let old = save_full_output("old").await.unwrap();
        let past = SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(past)
            .unwrap();
        let removed = cleanup_outputs(std::time::Duration::from_secs(60)).await;
        assert!(removed >= 1);
        assert!(!old.exists());
        assert!(fresh.exists());
        let _ = std::fs::remove_file(fresh);
    }

    #[tokio::test]
    async fn wrapper_truncation() {
        let out = crate::ToolOutput {
            output: "a\n".repeat(3000),
            ..Default::default()
        };
        let out = apply_truncation(out).await;
        assert_eq!(out.metadata["truncated"], serde_json::json!(true));
        let path = out.metadata["outputPath"].as_str().unwrap().to_string();
        assert!(out.output.contains(&path));
        let _ = std::fs::remove_file(path);
        let mut small = crate::ToolOutput {
            output: "x".into(),
            ..Default::default()
        };
        small
            .metadata
            .insert("truncated".into(), serde_json::json!(false));
        assert_eq!(apply_truncation(small.clone()).await, small);
    }

    #[tokio::test]
    async fn saves_full_output() {
        let text = "x\n".repeat(50);
        let t = truncate_output(&text, 10, MAX_BYTES, Direction::Head).await;
        assert!(t.truncated);
        let path = t.output_path.clone().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        assert!(t.content.contains(&path.to_string_lossy().to_string()));
        assert!(t.content.contains("...41 lines truncated..."));
        let _ = std::fs::remove_file(path);
    }
}
