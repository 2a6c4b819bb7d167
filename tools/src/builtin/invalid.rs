//! `invalid {tool, error}`: the target of tool-call repair. Never advertised to the model; the
//! caller routes an unknown or malformed call here so the model sees what went wrong.

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{Tool, ToolContext, ToolError, ToolOutput, parse_args};

/// The `invalid` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct InvalidTool;

#[derive(Debug, Deserialize)]
struct Args {
    tool: String,
    error: String,
}

impl Tool for InvalidTool {
    fn name(&self) -> &'static str {
        "invalid"
    }

    fn description(&self) -> String {
        "Do not use".to_string()
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"tool": {"type": "string"}, "error": {"type": "string"}},
            "required": ["tool", "error"]
        })
    }

    fn execute(
        &self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args: Args = parse_args("invalid", args)?;
            let mut metadata = serde_json::Map::new();
            metadata.insert("tool".into(), Value::String(args.tool));
            Ok(ToolOutput {
                title: "Invalid Tool".into(),
                output: format!(
                    "The arguments provided to the tool are invalid: {}",
                    args.error
                ),
                metadata,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn formats_error() {
        let out = InvalidTool
            .execute(
                json!({"tool": "reed", "error": "Unknown tool"}),
                ToolContext::simple("/"),
            )
            .await
            .unwrap();
        assert_eq!(
            out.output,
            "The arguments provided to the tool are invalid: Unknown tool"
        );
    }
}
