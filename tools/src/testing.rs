//! Test-only tools, compiled always but registered only through
//! [`crate::Registry::with_test_tools`]: `test_panic {message}` panics inside `execute` (the
//! actor layer must survive it), `test_sleep {ms}` sleeps while honouring `ctx.abort`, and
//! `test_gate {path}` waits until the file `path` exists (a test opens the gate when it has
//! seen what it wanted while the tool ran).

use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{Tool, ToolContext, ToolError, ToolOutput, parse_args};

/// `test_panic {message}`: panics with `message` when executed.
#[derive(Debug, Default, Clone, Copy)]
pub struct PanicTool;

/// `test_sleep {ms}`: sleeps `ms` milliseconds, returns `slept <ms> ms`; an abort ends it
/// early with [`ToolError::Aborted`].
#[derive(Debug, Default, Clone, Copy)]
pub struct SleepTool;

#[derive(Debug, Deserialize)]
struct PanicArgs {
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SleepArgs {
    ms: u64,
}

/// `test_gate {path}`: waits until the file `path` exists (checked every 20 ms), returns
/// `gate open`; an abort ends it early with [`ToolError::Aborted`].
#[derive(Debug, Default, Clone, Copy)]
pub struct GateTool;

#[derive(Debug, Deserialize)]
struct GateArgs {
    path: String,
}

impl Tool for GateTool {
    fn name(&self) -> &'static str {
        "test_gate"
    }

    fn description(&self) -> String {
        "Test tool: waits until the file `path` exists.".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: GateArgs = parse_args("test_gate", args)?;
            let path = std::path::PathBuf::from(&args.path);
            loop {
                if tokio::fs::try_exists(&path).await.unwrap_or(false) {
                    return Ok(ToolOutput {
                        title: "gate".into(),
                        output: "gate open".into(),
                        metadata: Default::default(),
                    });
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = ctx.abort.cancelled() => return Err(ToolError::Aborted),
                }
            }
        })
    }
}

impl Tool for PanicTool {
    fn name(&self) -> &'static str {
        "test_panic"
    }

    fn description(&self) -> String {
        "Test tool: panics with the given message.".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"message": {"type": "string"}}})
    }

    fn execute(
        &self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: PanicArgs = parse_args("test_panic", args)?;
            let message = args.message.unwrap_or_else(|| "test_panic".into());
            panic!("{message}");
        })
    }
}

impl Tool for SleepTool {
    fn name(&self) -> &'static str {
        "test_sleep"
    }

    fn description(&self) -> String {
        "Test tool: sleeps for `ms` milliseconds.".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"]})
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: SleepArgs = parse_args("test_sleep", args)?;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(args.ms)) => Ok(ToolOutput {
                    title: "sleep".into(),
                    output: format!("slept {} ms", args.ms),
                    metadata: Default::default(),
                }),
                _ = ctx.abort.cancelled() => Err(ToolError::Aborted),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sleep_honours_abort() {
        let ctx = ToolContext::simple("/");
        let abort = ctx.abort.clone();
        let h = tokio::spawn(SleepTool.execute(json!({"ms": 10_000}), ctx));
        tokio::time::sleep(Duration::from_millis(20)).await;
        abort.cancel();
        assert_eq!(h.await.unwrap(), Err(ToolError::Aborted));
        let out = SleepTool
            .execute(json!({"ms": 1}), ToolContext::simple("/"))
            .await
            .unwrap();
        assert_eq!(out.output, "slept 1 ms");
    }

    #[tokio::test]
    async fn gate_opens_when_the_file_appears_and_honours_abort() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("open");
        let args = json!({"path": path.display().to_string()});
        let h = tokio::spawn(GateTool.execute(args.clone(), ToolContext::simple("/")));
        std::fs::write(&path, "").unwrap();
        assert_eq!(h.await.unwrap().unwrap().output, "gate open");
        let ctx = ToolContext::simple("/");
        let abort = ctx.abort.clone();
        let closed = json!({"path": dir.path().join("never").display().to_string()});
        let h = tokio::spawn(GateTool.execute(closed, ctx));
        abort.cancel();
        assert_eq!(h.await.unwrap(), Err(ToolError::Aborted));
    }

    #[tokio::test]
    async fn panic_panics() {
        let h =
            tokio::spawn(PanicTool.execute(json!({"message": "boom"}), ToolContext::simple("/")));
        let err = h.await.unwrap_err();
        assert!(err.is_panic());
    }
}
