//! Argument decoding: tool arguments arrive as raw JSON and are deserialized into typed serde
//! structs whose field names follow OpenCode's camelCase (`filePath`, `oldString`, …); the
//! same structs give the JSON schema sent to the model ([`args_schema`]).

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
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

/// The JSON schema of the arguments struct `T`, as providers take it: an inline object schema
/// (`type: object`, `properties`, `required`; no `$schema`, `$ref` or `$defs`), each field's
/// doc comment as its `description` (the struct's own doc comment is left out), `Option`
/// fields optional and not nullable. schemars'
/// `title`, integer `format` (`uint64`, …) and `default` annotations are dropped: OpenAI,
/// Anthropic and llama.cpp's grammar conversion need none of them, and the schemas stay what
/// the tools advertised before they were derived.
///
/// Panics only if schemars produces a non-object schema for a struct (a bug, not input).
///
/// Generated once per type and process, then cloned: the schema of a type never changes, and
/// every step lists the tools with their schemas (generating them took a good share of a
/// step's CPU).
pub fn args_schema<T: JsonSchema + 'static>() -> Value {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<TypeId, Value>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let key = TypeId::of::<T>();
    if let Some(v) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return v.clone();
    }
    let schema = generate_schema::<T>();
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, schema.clone());
    schema
}

fn generate_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    strip_annotations(&mut schema);
    // The struct's own doc comment is for Rust readers; the tool's description says it all.
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("description");
    }
    schema
}

/// Removes `title`, `format` and `default` from a schema and its sub-schemas (not from the
/// property names inside `properties`, which are data).
fn strip_annotations(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    for key in ["title", "format", "default", "$schema"] {
        obj.remove(key);
    }
    // An `Option` field: `type: [T, "null"]` becomes `type: T` (absent, not null, is how a
    // model leaves it out).
    if let Some(Value::Array(types)) = obj.get("type") {
        let kept: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
        if kept.len() == 1 {
            let only = kept[0].clone();
            obj.insert("type".into(), only);
        }
    }
    for (key, sub) in obj.iter_mut() {
        match key.as_str() {
            "properties" | "$defs" => {
                if let Some(props) = sub.as_object_mut() {
                    props.values_mut().for_each(strip_annotations);
                }
            }
            "items" | "additionalProperties" => strip_annotations(sub),
            "anyOf" | "oneOf" | "allOf" => {
                if let Some(list) = sub.as_array_mut() {
                    list.iter_mut().for_each(strip_annotations);
                }
            }
            _ => {}
        }
    }
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
