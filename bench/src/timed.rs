//! Tool time in microseconds: every built-in tool wrapped so the bench measures its
//! `execute` future itself (an `Instant` around it), instead of the millisecond timestamps
//! of the stored tool parts. What is outside the future (the tool-call actor, its part
//! writes, argument parsing before `execute`) counts as orchestrator overhead.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use troupe_tools::{Registry, Tool, ToolContext, ToolError, ToolOutput};

/// Σ µs of tool `execute` futures per session id.
pub type ToolTimes = Arc<Mutex<HashMap<String, u64>>>;

struct Timed {
    inner: Arc<dyn Tool>,
    times: ToolTimes,
}

impl Tool for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> String {
        self.inner.description()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn parameters(&self) -> Value {
        self.inner.parameters()
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'static>> {
        let session = ctx.session_id.clone();
        let times = self.times.clone();
        let start = Instant::now();
        let fut = self.inner.execute(args, ctx);
        Box::pin(async move {
            let out = fut.await;
            let us = start.elapsed().as_micros() as u64;
            if let Ok(mut t) = times.lock() {
                *t.entry(session).or_default() += us;
            }
            out
        })
    }
}

/// The built-in registry with every tool wrapped, and the table its calls add to.
pub fn builtin() -> (Registry, ToolTimes) {
    let base = Registry::builtin();
    let times: ToolTimes = Arc::default();
    let mut r = Registry::new();
    for name in base.names() {
        if let Some(inner) = base.get(&name) {
            r.register(Arc::new(Timed {
                inner,
                times: times.clone(),
            }));
        }
    }
    (r, times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_every_builtin_tool_and_times_calls_per_session() {
        let (r, times) = builtin();
        assert_eq!(r.names(), Registry::builtin().names());
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.txt"), "hello\n").expect("write");
        let mut ctx = ToolContext::simple(dir.path());
        ctx.session_id = "ses_t".into();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        let read = r.get("read").expect("read");
        let out = rt.block_on(read.execute(serde_json::json!({"filePath": "a.txt"}), ctx));
        assert!(out.is_ok(), "{out:?}");
        let t = times.lock().expect("lock");
        assert!(t.get("ses_t").is_some_and(|us| *us > 0), "{t:?}");
    }
}
