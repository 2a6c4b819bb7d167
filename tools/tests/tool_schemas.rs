//! The schemas the built-in tools advertise, derived from their argument structs, are the ones
//! they advertised when they were written by hand (`tests/data/tool_schemas.json`, taken before
//! the switch to derived schemas), and every one is an inline object schema the providers
//! accept: no `$ref`/`$defs`/`$schema`, `type: object` at the root, `properties` an object.

use serde_json::Value;
use troupe_tools::Registry;

fn snapshot() -> serde_json::Map<String, Value> {
    let text = include_str!("data/tool_schemas.json");
    serde_json::from_str::<Value>(text)
        .expect("snapshot JSON")
        .as_object()
        .expect("an object of schemas")
        .clone()
}

#[test]
fn derived_schemas_match_the_hand_written_ones() {
    let registry = Registry::builtin().with_test_tools();
    let want = snapshot();
    assert_eq!(
        registry.names(),
        want.keys().cloned().collect::<Vec<_>>(),
        "tool set"
    );
    for (name, schema) in &want {
        let got = registry.get(name).expect("tool").parameters();
        assert_eq!(
            &got,
            schema,
            "schema of {name}:\n{}",
            serde_json::to_string_pretty(&got).unwrap_or_default()
        );
    }
}

/// Walks a schema; fails on anything providers or llama.cpp's grammar conversion reject.
fn assert_inline(path: &str, v: &Value) {
    match v {
        Value::Object(obj) => {
            for key in ["$ref", "$defs", "definitions", "$schema"] {
                assert!(!obj.contains_key(key), "{path}: has {key}");
            }
            for (k, sub) in obj {
                assert_inline(&format!("{path}.{k}"), sub);
            }
        }
        Value::Array(items) => {
            for (i, sub) in items.iter().enumerate() {
                assert_inline(&format!("{path}[{i}]"), sub);
            }
        }
        _ => {}
    }
}

#[test]
fn schemas_are_inline_objects() {
    let registry = Registry::builtin().with_test_tools();
    for name in registry.names() {
        let schema = registry.get(&name).expect("tool").parameters();
        assert_eq!(schema["type"], "object", "{name}");
        assert!(schema["properties"].is_object(), "{name}: {schema}");
        assert_inline(&name, &schema);
    }
}
