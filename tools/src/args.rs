//! Argument decoding: tool arguments arrive as raw JSON and are deserialized into typed serde
//! structs whose field names follow OpenCode's camelCase (`filePath`, `oldString`, …).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ToolError;

/// Decode `args` into `T`. A serde failure becomes [`ToolError::InvalidArguments`] whose
/// `detail` is serde's message, which names the offending field (e.g. "missing field
/// `filePath`", "invalid type: string \"x\", expected u64 for `limit`").
///
/// A JSON `null` for the whole arguments object is treated as `{}` (some providers send it for
/// argument-less calls).
pub fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    let args = if args.is_null() {
        Value::Object(Default::default())
    } else {
        args
    };
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments {
        tool: tool.to_string(),
        detail: e.to_string(),
    })
}

/// Shorthand to raise [`ToolError::InvalidArguments`] for a semantic check (e.g. a negative
/// timeout) after decoding succeeded.
pub fn invalid(tool: &str, detail: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments {
        tool: tool.to_string(),
        detail: detail.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct A {
        file_path: String,
        limit: Option<u64>,
    }

    #[test]
    fn names_missing_field() {
        let err = parse_args::<A>("read", serde_json::json!({"limit": 3})).unwrap_err();
        match err {
            ToolError::InvalidArguments { tool, detail } => {
                assert_eq!(tool, "read");
                assert!(detail.contains("filePath"), "{detail}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn wrong_type_is_invalid() {
        let err = parse_args::<A>("read", serde_json::json!({"filePath": "a", "limit": "x"}))
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }));
        assert!(
            err.to_string()
                .starts_with("The read tool was called with invalid arguments")
        );
    }
}
