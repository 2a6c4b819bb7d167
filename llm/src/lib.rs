//! troupe-llm: provider protocols spoken over real HTTP (reqwest), normalized into one
//! [`StreamEvent`] enum; error classes; the pure retry policy; usage normalization.
//!
//! Layout:
//! - [`types`]: provider-neutral request ([`ChatRequest`]) and stream ([`StreamEvent`]) types.
//! - [`error`]: [`LlmError`] and its [`ErrorKind`] classes.
//! - [`provider`]: [`Provider`], one model of one provider; `stream()` opens one step.
//! - [`openai`]: OpenAI Chat Completions request building, errors and usage; the streamed
//!   chunk assembly ([`openai::ChunkAssembler`], [`openai::events_from_completion`]) is in
//!   `openai/stream.rs`.
//! - [`anthropic`]: Anthropic Messages request building and event assembly.
//! - [`body`]: request bodies built incrementally ([`body::BodyCache`]).
//! - [`sse`]: SSE framing of our own (WHATWG event-stream parsing), byte-capped.
//! - [`retry`]: the retry delay policy (pure).

pub mod anthropic;
pub mod body;
pub mod error;
pub mod openai;
pub mod provider;
pub mod retry;
pub mod sse;
pub mod types;

pub use error::{ErrorKind, LlmError};
pub use provider::{EventStream, Provider};
pub use retry::retry_delay;
pub use types::*;
