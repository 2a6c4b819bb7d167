//! `StructuredOutput`: the tool a turn with a JSON Schema (`troupe run --json-schema FILE`, a
//! batch task's `"schema"`) offers, and the model must call with its final answer
//! (OpenCode §7.3: "Added only for `format.type == json_schema`; captures the args and ends
//! the loop").
//!
//! Its parameters are the user's schema (without `$schema`, as OpenCode sends it). Function
//! parameters must be an object, so a schema whose root is not an object schema (an array, a
//! string, …) is offered wrapped as `{"value": <schema>}` and the value is unwrapped again.
//! Each call is validated with the `jsonschema` crate: a valid value is the tool's metadata
//! `structured` (the session ends the turn with it), an invalid one is an error whose text
//! lists every violation with its JSON pointer, so the model can correct it.
//!
//! Not a [`crate::TypedTool`]: its argument schema is the user's, known only at run time.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// The tool's name, as OpenCode spells it.
pub const STRUCTURED_OUTPUT_TOOL: &str = "StructuredOutput";

/// Metadata key of the validated value on a completed call.
pub const STRUCTURED_METADATA_KEY: &str = "structured";

/// Prefix of a failed validation's error text (the session quotes the last one when the
/// turn fails).
pub const VALIDATION_ERROR_PREFIX: &str = "The value does not match the required JSON schema";

/// Extra system prompt of a turn with a schema (troupe's wording of OpenCode's
/// `STRUCTURED_OUTPUT_SYSTEM_PROMPT`).
pub const STRUCTURED_OUTPUT_SYSTEM_PROMPT: &str = "IMPORTANT: This request requires a structured answer. When you have the final answer, you MUST call the StructuredOutput tool exactly once with it as the arguments; its parameters are the JSON schema the answer must satisfy. Do not reply with plain text instead. If the tool reports that the value does not match the schema, correct the value and call it again.";

/// Most violations listed in one error (the rest are counted).
const MAX_LISTED_ERRORS: usize = 20;

/// The `StructuredOutput` tool for one schema.
#[derive(Clone)]
pub struct StructuredOutputTool {
    parameters: Value,
    validator: Arc<jsonschema::Validator>,
    /// The root schema is not an object schema: arguments are `{"value": …}`.
    wrapped: bool,
}

impl std::fmt::Debug for StructuredOutputTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StructuredOutputTool")
            .field("parameters", &self.parameters)
            .field("wrapped", &self.wrapped)
            .finish()
    }
}

impl StructuredOutputTool {
    /// Compile `schema`. Errors: the schema is not a JSON object or boolean, or it is not a
    /// valid JSON Schema (the message says where), e.g. `invalid JSON schema: "strin" is not
    /// valid under any of the schemas listed in the 'anyOf' keyword (at /properties/a/type)`.
    pub fn new(schema: &Value) -> Result<Self, String> {
        if !schema.is_object() {
            return Err(
                "invalid JSON schema: the schema must be a JSON object (e.g. {\"type\": \"object\", \"properties\": {…}})"
                    .into(),
            );
        }
        let validator = jsonschema::validator_for(schema).map_err(|e| {
            // Validating the schema against its meta-schema: the "instance" is the schema,
            // so the instance path is the place in the user's schema.
            let at = e.instance_path().to_string();
            if at.is_empty() {
                format!("invalid JSON schema: {e}")
            } else {
                format!("invalid JSON schema: {e} (at {at})")
            }
        })?;
        let mut parameters = schema.clone();
        if let Some(m) = parameters.as_object_mut() {
            m.remove("$schema");
        }
        let wrapped = parameters.get("type").and_then(Value::as_str) != Some("object");
        if wrapped {
            parameters = json!({
                "type": "object",
                "properties": {"value": parameters},
                "required": ["value"],
                "additionalProperties": false,
            });
        }
        Ok(Self {
            parameters,
            validator: Arc::new(validator),
            wrapped,
        })
    }

    /// Validate one call's arguments; `Ok` is the answer value (unwrapped), `Err` the text
    /// the model sees: [`VALIDATION_ERROR_PREFIX`] and one line per violation
    /// (`- /items/0/price: "x" is not of type "number"`).
    pub fn check(&self, args: Value) -> Result<Value, String> {
        let value = if self.wrapped {
            match args {
                Value::Object(mut m) if m.contains_key("value") => {
                    m.remove("value").unwrap_or(Value::Null)
                }
                _ => {
                    return Err(format!(
                        "{VALIDATION_ERROR_PREFIX}:\n- the arguments must be an object {{\"value\": <answer>}}"
                    ));
                }
            }
        } else {
            args
        };
        let mut lines = Vec::new();
        let mut total = 0usize;
        for e in self.validator.iter_errors(&value) {
            total += 1;
            if lines.len() < MAX_LISTED_ERRORS {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "(root)".into() } else { at };
                lines.push(format!("- {at}: {e}"));
            }
        }
        if total == 0 {
            return Ok(value);
        }
        if total > lines.len() {
            lines.push(format!("- … and {} more", total - lines.len()));
        }
        Err(format!(
            "{VALIDATION_ERROR_PREFIX}:\n{}\nCall StructuredOutput again with a corrected value.",
            lines.join("\n")
        ))
    }
}

impl Tool for StructuredOutputTool {
    fn name(&self) -> &'static str {
        STRUCTURED_OUTPUT_TOOL
    }

    fn description(&self) -> String {
        "Give the final answer as a JSON value that satisfies this tool's parameter schema. Call it exactly once, when the answer is complete; if it reports a mismatch, fix the value and call it again.".into()
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn execute(
        &self,
        args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let checked = self.check(args);
        Box::pin(async move {
            let value = checked.map_err(ToolError::Failed)?;
            let mut metadata = Map::new();
            metadata.insert(STRUCTURED_METADATA_KEY.into(), value);
            Ok(ToolOutput {
                title: "structured output".into(),
                output: "Structured output captured.".into(),
                metadata,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
            "required": ["name", "age"],
            "additionalProperties": false
        })
    }

    #[tokio::test]
    async fn valid_value_is_captured_in_metadata() {
        let t = StructuredOutputTool::new(&person()).unwrap();
        assert!(t.parameters().get("$schema").is_none());
        assert_eq!(t.parameters()["type"], "object");
        let out = t
            .execute(json!({"name": "Ada", "age": 36}), ToolContext::simple("/"))
            .await
            .unwrap();
        assert_eq!(
            out.metadata[STRUCTURED_METADATA_KEY],
            json!({"name": "Ada", "age": 36})
        );
    }

    #[tokio::test]
    async fn violations_are_listed_with_their_paths() {
        let t = StructuredOutputTool::new(&person()).unwrap();
        let err = t
            .execute(
                json!({"name": 7, "age": -1, "extra": true}),
                ToolContext::simple("/"),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(VALIDATION_ERROR_PREFIX), "{err}");
        assert!(
            err.contains("- /name: 7 is not of type \"string\""),
            "{err}"
        );
        assert!(
            err.contains("- /age: -1 is less than the minimum of 0"),
            "{err}"
        );
        assert!(err.contains("- (root): Additional properties"), "{err}");
        let missing = t.check(json!({})).unwrap_err();
        assert!(
            missing.contains("\"name\" is a required property"),
            "{missing}"
        );
    }

    #[test]
    fn non_object_root_is_wrapped_and_unwrapped() {
        let t = StructuredOutputTool::new(&json!({"type": "array", "items": {"type": "number"}}))
            .unwrap();
        assert_eq!(t.parameters()["required"], json!(["value"]));
        assert_eq!(t.parameters()["properties"]["value"]["type"], "array");
        assert_eq!(
            t.check(json!({"value": [1, 2.5]})).unwrap(),
            json!([1, 2.5])
        );
        assert!(t.check(json!({"value": ["x"]})).unwrap_err().contains("/0"));
        assert!(t.check(json!([1])).unwrap_err().contains("{\"value\""));
    }

    #[test]
    fn bad_schemas_are_refused_with_the_place() {
        let e = StructuredOutputTool::new(&json!({"type": "strin"})).unwrap_err();
        assert!(e.starts_with("invalid JSON schema:"), "{e}");
        let e = StructuredOutputTool::new(&json!([1])).unwrap_err();
        assert!(e.contains("must be a JSON object"), "{e}");
        let e = StructuredOutputTool::new(
            &json!({"type": "object", "properties": {"a": {"minimum": "x"}}}),
        )
        .unwrap_err();
        assert!(e.contains("/properties/a/minimum"), "{e}");
    }

    #[test]
    fn many_violations_are_capped() {
        let t = StructuredOutputTool::new(&json!({"type": "array", "items": {"type": "string"}}))
            .unwrap();
        let e = t
            .check(json!({"value": (0..30).collect::<Vec<_>>()}))
            .unwrap_err();
        assert_eq!(e.matches("\n- /").count(), MAX_LISTED_ERRORS, "{e}");
        assert!(e.contains("… and 10 more"), "{e}");
    }
}
