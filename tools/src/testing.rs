//! Test-only tools, compiled always but registered only through
//! [`crate::Registry::with_test_tools`]: `test_panic {message}` panics inside `execute` (the
//! actor layer must survive it), `test_sleep {ms}` sleeps while honouring `ctx.abort`, and
//! `test_gate {path}` waits until the file `path` exists (a test opens the gate when it has
//! seen what it wanted while the tool ran).

use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

/// `test_panic {message}`: panics with `message` when executed.
#[derive(Debug, Default, Clone, Copy)]
pub struct PanicTool;

/// `test_sleep {ms}`: sleeps `ms` milliseconds, returns `slept <ms> ms`; an abort ends it
/// early with [`ToolError::Aborted`].
#[derive(Debug, Default, Clone, Copy)]
pub struct SleepTool;

/// Arguments of the `test_panic` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PanicArgs {
    #[serde(default)]
    message: Option<String>,
}

/// Arguments of the `test_sleep` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SleepArgs {
    ms: u64,
}

/// `test_gate {path}`: waits until the file `path` exists (checked every 20 ms), returns
/// `gate open`; an abort ends it early with [`ToolError::Aborted`].
#[derive(Debug, Default, Clone, Copy)]
pub struct GateTool;

/// Arguments of the `test_gate` tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GateArgs {
    path: String,
}

impl TypedTool for GateTool {
    type Args = GateArgs;
    const NAME: &'static str = "test_gate";

    fn describe(&self) -> String {
        "Test tool: waits until the file `path` exists.".into()
    }

    fn run(
        &self,
        args: GateArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
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

impl TypedTool for PanicTool {
    type Args = PanicArgs;
    const NAME: &'static str = "test_panic";

    fn describe(&self) -> String {
        "Test tool: panics with the given message.".into()
    }

    fn run(
        &self,
        args: PanicArgs,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let message = args.message.unwrap_or_else(|| "test_panic".into());
            panic!("{message}");
        })
    }
}

impl TypedTool for SleepTool {
    type Args = SleepArgs;
    const NAME: &'static str = "test_sleep";

    fn describe(&self) -> String {
        "Test tool: sleeps for `ms` milliseconds.".into()
    }

    fn run(
        &self,
        args: SleepArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
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
    use crate::Tool;
    use serde_json::json;

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
