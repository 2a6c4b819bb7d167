//! `invalid {tool, error}`: the target of tool-call repair. Never advertised to the model; the
//! caller routes an unknown or malformed call here so the model sees what went wrong.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::{ToolContext, ToolError, ToolOutput, TypedTool};

/// The `invalid` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct InvalidTool;

/// Arguments of the `invalid` tool; the schema the model sees is derived from this struct
/// (each field's doc comment is its description).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct InvalidArgs {
    tool: String,
    error: String,
}

impl TypedTool for InvalidTool {
    type Args = InvalidArgs;
    const NAME: &'static str = "invalid";

    fn describe(&self) -> String {
        "Do not use".to_string()
    }

    fn run(
        &self,
        args: InvalidArgs,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
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
    use crate::Tool;
    use serde_json::json;

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
