//! Shared helpers for the replay tests: fixture loading and event summaries.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use troupe_config::model::Protocol;
use troupe_llm::provider::assemble_stream;
use troupe_llm::sse::sse_events;
use troupe_llm::{FinishReason, LlmError, StreamEvent, Usage};

/// Root of the recorded wire fixtures, relative to the crate dir (tests run with cwd = llm/).
pub fn wire_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wire")
}

/// The SSE body of a fixture: `.sse` as-is, `.chunks.jsonl` re-framed as `data: <line>\n\n`.
pub fn load_body(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let name = path.to_string_lossy();
    if name.ends_with(".chunks.jsonl") {
        let text = String::from_utf8(raw).expect("utf8 fixture");
        let mut out = String::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            out.push_str("data: ");
            out.push_str(line);
            out.push_str("\n\n");
        }
        out.into_bytes()
    } else {
        raw
    }
}

/// Replay `body`, split into `parts`, through SSE framing + assembly.
pub async fn replay_parts(
    parts: Vec<Vec<u8>>,
    protocol: Protocol,
    provider: &str,
) -> Vec<Result<StreamEvent, LlmError>> {
    let bytes = futures::stream::iter(parts.into_iter().map(|p| Ok::<_, LlmError>(Bytes::from(p))));
    let sse = sse_events(bytes, Duration::from_secs(30));
    assemble_stream(sse, protocol, provider, CancellationToken::new())
        .collect()
        .await
}

/// Replay a whole body in one piece.
pub async fn replay(
    body: Vec<u8>,
    protocol: Protocol,
    provider: &str,
) -> Vec<Result<StreamEvent, LlmError>> {
    replay_parts(vec![body], protocol, provider).await
}

/// What a step assembled to.
#[derive(Debug, Default, PartialEq)]
pub struct Summary {
    pub text: String,
    pub reasoning: String,
    pub signatures: Vec<String>,
    /// (id, name, raw input, truncated)
    pub tools: Vec<(String, String, String, bool)>,
    pub finish: Option<(FinishReason, Usage, Option<String>)>,
    pub finish_count: usize,
    pub error: Option<LlmError>,
}

pub fn summarize(events: &[Result<StreamEvent, LlmError>]) -> Summary {
    let mut s = Summary::default();
    for e in events {
        match e {
            Ok(StreamEvent::TextDelta { text, .. }) => s.text.push_str(text),
            Ok(StreamEvent::ReasoningDelta { text, .. }) => s.reasoning.push_str(text),
            Ok(StreamEvent::ReasoningEnd {
                signature: Some(sig),
                ..
            }) => s.signatures.push(sig.clone()),
            Ok(StreamEvent::ToolCall {
                id,
                name,
                input,
                truncated,
                ..
            }) => s
                .tools
                .push((id.clone(), name.clone(), input.clone(), *truncated)),
            Ok(StreamEvent::FinishStep {
                reason,
                usage,
                raw_reason,
            }) => {
                s.finish = Some((*reason, *usage, raw_reason.clone()));
                s.finish_count += 1;
            }
            Ok(_) => {}
            Err(err) => s.error = Some(err.clone()),
        }
    }
    s
}

/// Every fixture file of a provider dir that holds a stream (`.sse` or `.chunks.jsonl`).
pub fn stream_fixtures(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(wire_dir().join(dir))
        .expect("fixture dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".sse") || n.ends_with(".chunks.jsonl")
        })
        .collect();
    v.sort();
    v
}

/// `body` cut into consecutive chunks at the offsets `cuts` (each taken modulo
/// `body.len() + 1`, sorted and deduplicated), so a property can feed a parser any split of
/// the same bytes. The chunks concatenate back to `body`; empty ones can occur at the ends.
pub fn split_at(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut parts = Vec::new();
    let mut prev = 0;
    for c in cuts {
        parts.push(body[prev..c].to_vec());
        prev = c;
    }
    parts.push(body[prev..].to_vec());
    parts
}

/// A current-thread tokio runtime with I/O and timers, for a property test (proptest's cases
/// are synchronous) to run the async replay in.
pub fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}
