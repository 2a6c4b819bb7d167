//! TitleWorker: names a session after its first user message.
//!
//! Started by the session actor when a root session with the default title gets its first
//! user message. It asks the hidden `title` agent (temperature 0.5) on `small_model` when
//! configured, else the session's model, and cleans the answer
//! (troupe-session `title::title_from_response`: one line, ≤ 100 chars, no quotes).
//! It runs beside the turn and never blocks or fails it: any error just leaves the default
//! title. Its final state carries the title for the session actor to store.

use std::sync::Arc;
use std::time::Duration;
use troupe_session::SessionId;

use troupe_config::ResolvedModel;

use crate::RuntimeShared;
use crate::side_worker::{SideJob, SideState, SideWorker};

/// How long a title may take before it is given up.
pub const TITLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Arguments of a title worker: its job.
pub struct TitleArgs {
    /// Shared runtime parts.
    pub shared: Arc<RuntimeShared>,
    /// Session id.
    pub session_id: SessionId,
    /// The first user message's text.
    pub text: String,
    /// Model to ask.
    pub model: Arc<ResolvedModel>,
    /// Registry key of the parent node in the supervision tree (the session's).
    pub tree_parent: String,
}

/// The title worker actor.
pub type TitleWorker = SideWorker<TitleArgs>;

/// Final state: the cleaned title (`output`), if one was made.
pub type TitleState = SideState<TitleArgs>;

impl SideJob for TitleArgs {
    type Output = String;
    const KIND: crate::tree::Kind = crate::tree::Kind::Title;
    const TIMEOUT: Duration = TITLE_TIMEOUT;

    fn shared(&self) -> &Arc<RuntimeShared> {
        &self.shared
    }

    fn node(&self) -> (&str, &str, &str) {
        (&self.session_id, &self.session_id, &self.tree_parent)
    }

    async fn run(self) -> Option<String> {
        let agent = self.shared.agents.get("title").cloned();
        let system = agent
            .as_ref()
            .and_then(|a| a.prompt.clone())
            .unwrap_or_else(|| "Write a short title.".into());
        let request = crate::request::title_request(
            &self.model,
            &system,
            agent.as_ref().and_then(|a| a.temperature),
            &self.text,
            &self.session_id,
        );
        let out = crate::side_worker::answer_text(&self.shared, &self.model, request).await?;
        troupe_session::title::title_from_response(&out)
    }
}
