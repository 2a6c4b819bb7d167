//! From framed SSE events to normalized [`StreamEvent`]s: the assembler of each protocol
//! driven as one stream that ends with exactly one `FinishStep`, the first error, or
//! `Aborted` on cancel. [`Provider::stream`](super::Provider::stream) ends here after the HTTP
//! exchange; [`assemble_stream`] also replays recorded streams.

use std::collections::VecDeque;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use troupe_config::model::Protocol;

use super::{EventStream, aborted};
use crate::anthropic;
use crate::error::{ErrorKind, LlmError};
use crate::openai::ChunkAssembler;
use crate::sse::SseStream;
use crate::types::StreamEvent;

enum Assembler {
    OpenAi(ChunkAssembler),
    Anthropic(anthropic::MessageAssembler),
}

impl Assembler {
    fn push(&mut self, event: &str, data: &str) -> Result<Vec<StreamEvent>, LlmError> {
        match self {
            Self::OpenAi(a) => a.push(data),
            Self::Anthropic(a) => a.push(event, data),
        }
    }
    fn finish(&mut self) -> Result<Vec<StreamEvent>, LlmError> {
        match self {
            Self::OpenAi(a) => a.finish(),
            Self::Anthropic(a) => a.finish(),
        }
    }
    fn is_done(&self) -> bool {
        match self {
            Self::OpenAi(a) => a.is_done(),
            Self::Anthropic(a) => a.is_done(),
        }
    }
}

struct Drive {
    sse: SseStream,
    asm: Assembler,
    queue: VecDeque<Result<StreamEvent, LlmError>>,
    cancel: CancellationToken,
    done: bool,
}

/// Turn framed SSE events into normalized events with the assembler of `protocol`
/// (`provider_id` selects provider quirks, e.g. xAI usage). This is what [`Provider::stream`]
/// does after the HTTP exchange; exposed for replaying recorded streams. The stream ends with
/// exactly one `FinishStep`, or with the first error; `cancel` ends it with `Aborted`.
pub fn assemble_stream(
    sse: SseStream,
    protocol: Protocol,
    provider_id: &str,
    cancel: CancellationToken,
) -> EventStream {
    assemble_stream_capped(
        sse,
        protocol,
        provider_id,
        crate::types::DEFAULT_MAX_TOOL_ARGUMENT_BYTES,
        cancel,
    )
}

/// [`assemble_stream`] with a cap on each tool call's argument text (bytes): a call whose
/// arguments pass it is emitted with an error and not executed.
pub fn assemble_stream_capped(
    sse: SseStream,
    protocol: Protocol,
    provider_id: &str,
    max_tool_argument_bytes: usize,
    cancel: CancellationToken,
) -> EventStream {
    let asm = match protocol {
        Protocol::OpenaiChat => Assembler::OpenAi(
            ChunkAssembler::new(provider_id).with_max_tool_argument_bytes(max_tool_argument_bytes),
        ),
        Protocol::AnthropicMessages => Assembler::Anthropic(
            anthropic::MessageAssembler::new()
                .with_max_tool_argument_bytes(max_tool_argument_bytes),
        ),
    };
    let st = Drive {
        sse,
        asm,
        queue: VecDeque::new(),
        cancel,
        done: false,
    };
    Box::pin(futures::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            if st.cancel.is_cancelled() {
                st.done = true;
                return Some((Err(aborted()), st));
            }
            let next = tokio::select! {
                biased;
                _ = st.cancel.cancelled() => {
                    st.done = true;
                    return Some((Err(aborted()), st));
                }
                n = st.sse.next() => n,
            };
            let result = match next {
                Some(Ok(ev)) => match st.asm.push(&ev.event, &ev.data) {
                    // A cut-off last fragment (no terminating blank line) is not a protocol
                    // error: the end-of-stream check below decides.
                    Err(e) if ev.at_eof && e.kind == ErrorKind::MalformedChunk => Ok(Vec::new()),
                    r => r,
                },
                Some(Err(e)) => Err(e),
                None => {
                    st.done = true;
                    st.asm.finish()
                }
            };
            match result {
                Ok(events) => {
                    st.queue.extend(events.into_iter().map(Ok));
                    if st.asm.is_done() {
                        st.done = true;
                    }
                }
                Err(e) => {
                    st.done = true;
                    st.queue.push_back(Err(e));
                }
            }
        }
    }))
}
