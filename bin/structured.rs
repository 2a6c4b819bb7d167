//! `troupe run --json-schema FILE`: read and check the schema before anything runs, and print
//! the turn's validated answer (structured output, see `troupe_actors::structured`).

use std::path::Path;

use anyhow::{Result, anyhow};
use serde_json::{Value, json};

/// Read the JSON Schema in `path` and compile it once, so a bad file fails before a session
/// is created. Errors name the file: `--json-schema s.json: expected value at line 1 column 2`,
/// `--json-schema s.json: invalid JSON schema: …`.
pub fn load_schema(path: &Path) -> Result<Value> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("--json-schema {shown}: {e}"))?;
    let schema: Value =
        serde_json::from_str(&text).map_err(|e| anyhow!("--json-schema {shown}: {e}"))?;
    troupe_tools::builtin::StructuredOutputTool::new(&schema)
        .map_err(|e| anyhow!("--json-schema {shown}: {e}"))?;
    Ok(schema)
}

/// Print the answer on stdout: with `--format json` one line
/// `{"type": "structured.output", "sessionID": …, "output": <value>}` after the events,
/// otherwise the value as pretty JSON.
pub fn print_output(json_format: bool, session_id: &str, value: &Value) {
    if json_format {
        println!(
            "{}",
            json!({"type": "structured.output", "sessionID": session_id, "output": value})
        );
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        );
    }
}
