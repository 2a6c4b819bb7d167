//! The tool registry: built-in tools by name, the specs advertised to the model, and
//! tool-name repair (OpenCode `tool/registry.ts` + the `experimental_repairToolCall` hook).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::Tool;
use crate::builtin::{
    BashTool, EditTool, GlobTool, GrepTool, InvalidTool, ListTool, ReadTool, WriteTool,
};

/// Name of the repair-target tool, never advertised.
pub const INVALID_TOOL: &str = "invalid";

/// Tools by name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("tools", &self.names())
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-in tools: `bash`, `edit`, `glob`, `grep`, `invalid`, `list`, `read`, `write`.
    pub fn builtin() -> Self {
        let mut r = Self::new();
        let tools: [Arc<dyn Tool>; 8] = [
            Arc::new(InvalidTool),
            Arc::new(BashTool),
            Arc::new(ReadTool),
            Arc::new(GlobTool),
            Arc::new(GrepTool),
            Arc::new(EditTool),
            Arc::new(WriteTool),
            Arc::new(ListTool),
        ];
        for t in tools {
            r.register(t);
        }
        r
    }

    /// Add the test-only tools of [`crate::testing`] (`test_panic`, `test_sleep`, `test_gate`).
    pub fn with_test_tools(mut self) -> Self {
        self.register(Arc::new(crate::testing::PanicTool));
        self.register(Arc::new(crate::testing::SleepTool));
        self.register(Arc::new(crate::testing::GateTool));
        self
    }

    /// Add or replace a tool (keyed by [`Tool::name`]).
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// Remove a tool; returns it if present.
    pub fn remove(&mut self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.remove(name)
    }

    /// The tool called exactly `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// All tool names, sorted (including `invalid`).
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// `(name, description, JSON Schema parameters)` of every advertised tool, sorted by name;
    /// `invalid` is excluded.
    pub fn specs(&self) -> Vec<(String, String, Value)> {
        self.tools
            .iter()
            .filter(|(n, _)| n.as_str() != INVALID_TOOL)
            .map(|(n, t)| (n.clone(), t.description(), t.parameters()))
            .collect()
    }

    /// Repair a tool name the model produced: the exact name if registered, else a unique
    /// match after trimming whitespace and ignoring ASCII case (`"Read "` → `read`). `None`
    /// means unknown: the caller routes the call to `invalid` with
    /// [`invalid_tool_message`]. Never repairs to `invalid` itself.
    pub fn repair(&self, name: &str) -> Option<String> {
        if self.tools.contains_key(name) && name != INVALID_TOOL {
            return Some(name.to_string());
        }
        let wanted = name.trim();
        let mut found = self
            .tools
            .keys()
            .filter(|k| k.as_str() != INVALID_TOOL && k.eq_ignore_ascii_case(wanted));
        let first = found.next()?;
        if found.next().is_some() {
            return None;
        }
        Some(first.clone())
    }
}

/// The error text for an unknown tool: `Unknown tool 'X'. Available tools: a, b, c.`
/// (`valid_names` are listed in the given order).
pub fn invalid_tool_message(name: &str, valid_names: &[String]) -> String {
    format!(
        "Unknown tool '{name}'. Available tools: {}.",
        valid_names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_and_specs() {
        let r = Registry::builtin();
        assert_eq!(
            r.names(),
            vec![
                "bash", "edit", "glob", "grep", "invalid", "list", "read", "write"
            ]
        );
        let specs = r.specs();
        let names: Vec<&str> = specs.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(
            names,
            vec!["bash", "edit", "glob", "grep", "list", "read", "write"]
        );
        for (name, desc, params) in specs {
            assert!(!desc.is_empty(), "{name}");
            assert_eq!(params["type"], "object", "{name}");
            for req in params["required"].as_array().cloned().unwrap_or_default() {
                let req = req.as_str().unwrap().to_string();
                assert!(params["properties"].get(&req).is_some(), "{name}: {req}");
            }
        }
        let read = r.get("read").unwrap();
        assert!(read.parameters()["properties"].get("filePath").is_some());
    }

    #[test]
    fn repair_names() {
        let r = Registry::builtin().with_test_tools();
        assert_eq!(r.repair("read").as_deref(), Some("read"));
        assert_eq!(r.repair("Read").as_deref(), Some("read"));
        assert_eq!(r.repair(" BASH \n").as_deref(), Some("bash"));
        assert_eq!(r.repair("reed"), None);
        assert_eq!(r.repair("invalid"), None);
        assert_eq!(r.repair("test_sleep").as_deref(), Some("test_sleep"));
        assert!(Registry::builtin().get("test_panic").is_none());
    }

    #[test]
    fn invalid_message() {
        let names = vec!["bash".to_string(), "read".to_string()];
        assert_eq!(
            invalid_tool_message("reed", &names),
            "Unknown tool 'reed'. Available tools: bash, read."
        );
    }
}
