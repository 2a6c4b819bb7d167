//! The tool registry: built-in tools by name, the specs advertised to the model, and
//! tool-name repair (OpenCode `tool/registry.ts` + the `experimental_repairToolCall` hook).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::Tool;
use crate::builtin::{
    ApplyPatchTool, BashTool, EditTool, GlobTool, GrepTool, InvalidTool, ListTool, ReadTool,
    WebFetchTool, WriteTool,
};

/// Name of the repair-target tool, never advertised.
pub const INVALID_TOOL: &str = "invalid";

/// Tools that come and go while the runtime lives (MCP servers' tools): the registry asks
/// its sources on every lookup, so a tool withdrawn by its source is gone from the next
/// step's request and cannot be called.
pub trait ToolSource: Send + Sync {
    /// The tools offered now, by name. Names must not collide with built-ins (a built-in
    /// of the same name wins).
    fn tools(&self) -> BTreeMap<String, Arc<dyn Tool>>;

    /// A counter that changes (grows) whenever what [`ToolSource::tools`] returns may have
    /// changed — names, descriptions or schemas. A caller that reads it BEFORE calling
    /// `tools` may keep what it derived from that answer until the counter moves. `None`
    /// (the default): the source cannot say, so callers ask `tools` every time.
    fn generation(&self) -> Option<u64> {
        None
    }
}

/// Tools by name: fixed ones plus the current tools of each [`ToolSource`].
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
    /// [`Registry::specs`] of the fixed tools, computed on first use: they change only
    /// through `&mut self` ([`Registry::register`], [`Registry::remove`]), which resets it.
    /// Building a schema is most of a turn's tool-list cost (bench README, tenth pass).
    fixed_specs: Arc<std::sync::OnceLock<Vec<ToolSpecRow>>>,
}

/// One advertised tool: `(name, description, JSON Schema parameters)`.
pub type ToolSpecRow = (String, String, Value);

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

    /// The built-in tools: `apply_patch`, `bash`, `edit`, `glob`, `grep`, `invalid`, `list`,
    /// `read`, `webfetch`, `write` (a turn offers `apply_patch` or `edit`/`write` by model:
    /// [`hidden_for_model`]).
    pub fn builtin() -> Self {
        let mut r = Self::new();
        let tools: [Arc<dyn Tool>; 10] = [
            Arc::new(InvalidTool),
            Arc::new(BashTool),
            Arc::new(ReadTool),
            Arc::new(GlobTool),
            Arc::new(GrepTool),
            Arc::new(EditTool),
            Arc::new(WriteTool),
            Arc::new(ListTool),
            Arc::new(WebFetchTool),
            Arc::new(ApplyPatchTool),
        ];
        for t in tools {
            r.register(t);
        }
        r
    }

    /// Tools of the sources, for tests of the merge rules.
    #[cfg(test)]
    fn source_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .sources
            .iter()
            .flat_map(|s| s.tools().into_keys())
            .collect();
        v.sort();
        v
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
        self.fixed_specs = Default::default();
    }

    /// Add a source of tools that change at run time.
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// Fixed tools and the sources' current tools (a fixed tool wins a name clash).
    fn all(&self) -> BTreeMap<String, Arc<dyn Tool>> {
        let mut all = BTreeMap::new();
        for s in &self.sources {
            all.extend(s.tools());
        }
        all.extend(self.tools.iter().map(|(k, v)| (k.clone(), v.clone())));
        all
    }

    /// A counter for what [`Registry::specs`] and [`Registry::names`] return: while it gives
    /// the same `Some` value, the sources' tools are the ones they offered when it was read
    /// before (read it BEFORE listing the tools you derive a cache from). The fixed tools
    /// only change through `&mut self`, so a shared registry's fixed tools never change.
    /// `None` when a source has no counter ([`ToolSource::generation`]): do not cache.
    pub fn generation(&self) -> Option<u64> {
        let mut sum = 0u64;
        for s in &self.sources {
            sum = sum.wrapping_add(s.generation()?);
        }
        Some(sum)
    }

    /// Remove a tool; returns it if present.
    pub fn remove(&mut self, name: &str) -> Option<Arc<dyn Tool>> {
        self.fixed_specs = Default::default();
        self.tools.remove(name)
    }

    /// The tool called exactly `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(t) = self.tools.get(name) {
            return Some(t.clone());
        }
        self.sources
            .iter()
            .find_map(|s| s.tools().get(name).cloned())
    }

    /// All tool names, sorted (including `invalid`).
    pub fn names(&self) -> Vec<String> {
        if self.sources.is_empty() {
            return self.tools.keys().cloned().collect();
        }
        self.all().into_keys().collect()
    }

    /// `(name, description, JSON Schema parameters)` of every advertised tool, sorted by name;
    /// `invalid` is excluded. The fixed tools' rows are built once and cloned after; the
    /// sources' tools are asked every time (a fixed tool wins a name clash).
    pub fn specs(&self) -> Vec<ToolSpecRow> {
        let fixed = self.fixed_specs.get_or_init(|| {
            self.tools
                .iter()
                .filter(|(n, _)| n.as_str() != INVALID_TOOL)
                .map(|(n, t)| spec_row(n, t))
                .collect()
        });
        let mut extra: BTreeMap<String, Arc<dyn Tool>> = BTreeMap::new();
        for s in &self.sources {
            extra.extend(s.tools());
        }
        extra.retain(|n, _| n.as_str() != INVALID_TOOL && !self.tools.contains_key(n));
        if extra.is_empty() {
            return fixed.clone();
        }
        let mut rows: Vec<ToolSpecRow> = fixed.clone();
        rows.extend(extra.iter().map(|(n, t)| spec_row(n, t)));
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }

    /// `(name, description)` of every fixed tool but `invalid`, each description as it reads
    /// for a turn (see [`Tool::description_in`]), sorted by name. May read files: run it on
    /// the blocking pool.
    pub fn descriptions_in(&self, cx: &crate::DescribeContext<'_>) -> Vec<(String, String)> {
        self.tools
            .iter()
            .filter(|(n, _)| n.as_str() != INVALID_TOOL)
            .map(|(n, t)| (n.clone(), t.description_in(cx)))
            .collect()
    }

    /// Repair a tool name the model produced: the exact name if registered, else a unique
    /// match after trimming whitespace and ignoring ASCII case (`"Read "` → `read`). `None`
    /// means unknown: the caller routes the call to `invalid` with
    /// [`invalid_tool_message`]. Never repairs to `invalid` itself.
    pub fn repair(&self, name: &str) -> Option<String> {
        // The usual case, an exact fixed tool's name, without merging the sources' tools.
        if name != INVALID_TOOL && self.tools.contains_key(name) {
            return Some(name.to_string());
        }
        let all = self.all();
        if all.contains_key(name) && name != INVALID_TOOL {
            return Some(name.to_string());
        }
        let wanted = name.trim();
        let mut found = all
            .keys()
            .filter(|k| k.as_str() != INVALID_TOOL && k.eq_ignore_ascii_case(wanted));
        let first = found.next()?;
        if found.next().is_some() {
            return None;
        }
        Some(first.clone())
    }
}

/// The advertised row of tool `tool` registered as `name`.
fn spec_row(name: &str, tool: &Arc<dyn Tool>) -> ToolSpecRow {
    (name.to_string(), tool.description(), tool.parameters())
}

/// Whether model `model_id` is offered `apply_patch` instead of `edit` and `write`: the id
/// (ASCII case ignored) contains `gpt-` but neither `oss` nor `gpt-4`, the GPT models trained
/// on that patch format (OpenCode `tool/registry.ts`, reference §7.2).
pub fn uses_apply_patch(model_id: &str) -> bool {
    let id = model_id.to_ascii_lowercase();
    id.contains("gpt-") && !id.contains("oss") && !id.contains("gpt-4")
}

/// The tools model `model_id` is not offered: `edit` and `write` for the models that use
/// `apply_patch` ([`uses_apply_patch`]), `apply_patch` for every other model.
pub fn hidden_for_model(model_id: &str) -> &'static [&'static str] {
    if uses_apply_patch(model_id) {
        &["edit", "write"]
    } else {
        &["apply_patch"]
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
                "apply_patch",
                "bash",
                "edit",
                "glob",
                "grep",
                "invalid",
                "list",
                "read",
                "webfetch",
                "write"
            ]
        );
        // Specs: the same but `invalid`, which is never offered to a model.
        let specs = r.specs();
        let names: Vec<String> = specs.iter().map(|s| s.0.clone()).collect();
        let mut offered = r.names();
        offered.retain(|n| n != "invalid");
        assert_eq!(names, offered);
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

    struct Dynamic(std::sync::Mutex<BTreeMap<String, Arc<dyn Tool>>>);

    impl ToolSource for Dynamic {
        fn tools(&self) -> BTreeMap<String, Arc<dyn Tool>> {
            self.0.lock().map(|m| m.clone()).unwrap_or_default()
        }
    }

    struct Counted(std::sync::atomic::AtomicU64);

    impl ToolSource for Counted {
        fn tools(&self) -> BTreeMap<String, Arc<dyn Tool>> {
            BTreeMap::new()
        }
        fn generation(&self) -> Option<u64> {
            Some(self.0.load(std::sync::atomic::Ordering::SeqCst))
        }
    }

    #[test]
    fn the_generation_moves_with_any_source_and_is_none_when_one_cannot_say() {
        let mut r = Registry::builtin();
        assert_eq!(r.generation(), Some(0));
        let a = Arc::new(Counted(5.into()));
        let b = Arc::new(Counted(7.into()));
        r.add_source(a.clone());
        r.add_source(b.clone());
        let g = r.generation();
        assert_eq!(g, Some(12));
        b.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        assert_ne!(r.generation(), g);
        r.add_source(Arc::new(Dynamic(Default::default())));
        assert_eq!(r.generation(), None);
    }

    #[test]
    fn source_tools_come_and_go_and_never_shadow_builtins() {
        let src = Arc::new(Dynamic(Default::default()));
        let mut r = Registry::builtin();
        r.add_source(src.clone());
        assert!(r.get("s_x").is_none());
        {
            let mut m = src.0.lock().unwrap();
            m.insert("s_x".into(), Arc::new(crate::testing::SleepTool));
            m.insert("read".into(), Arc::new(crate::testing::SleepTool));
        }
        assert!(r.get("s_x").is_some());
        assert_eq!(r.repair("S_X").as_deref(), Some("s_x"));
        assert!(r.names().contains(&"s_x".to_string()));
        assert!(r.specs().iter().any(|s| s.0 == "s_x"));
        assert_eq!(r.get("read").unwrap().name(), "read");
        assert_eq!(r.source_names(), vec!["read", "s_x"]);
        src.0.lock().unwrap().clear();
        assert!(r.get("s_x").is_none());
        assert!(!r.names().contains(&"s_x".to_string()));
    }

    /// What `specs` returned before its fixed rows were cached: every tool of the merged
    /// map, asked each time.
    fn specs_uncached(r: &Registry) -> Vec<ToolSpecRow> {
        r.all()
            .iter()
            .filter(|(n, _)| n.as_str() != INVALID_TOOL)
            .map(|(n, t)| spec_row(n, t))
            .collect()
    }

    #[test]
    fn cached_specs_equal_the_merged_tools_through_registers_removes_and_source_changes() {
        let src = Arc::new(Dynamic(Default::default()));
        let mut r = Registry::builtin();
        r.add_source(src.clone());
        assert_eq!(r.specs(), specs_uncached(&r));
        // A source tool sorts among the fixed ones; one named like a fixed tool or
        // `invalid` is not offered.
        {
            let mut m = src.0.lock().unwrap();
            m.insert("m_tool".into(), Arc::new(crate::testing::SleepTool));
            m.insert("read".into(), Arc::new(crate::testing::SleepTool));
            m.insert("invalid".into(), Arc::new(crate::testing::SleepTool));
            m.insert("aaa".into(), Arc::new(crate::testing::PanicTool));
        }
        let specs = r.specs();
        assert_eq!(specs, specs_uncached(&r));
        let names: Vec<&str> = specs.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names.first(), Some(&"aaa"));
        assert!(names.contains(&"m_tool") && !names.contains(&"invalid"));
        // A clone that registers a tool sees it; the original keeps its own list.
        let before = r.specs();
        let mut c = r.clone();
        c.register(Arc::new(crate::testing::GateTool));
        assert_eq!(c.specs(), specs_uncached(&c));
        assert!(c.specs().iter().any(|s| s.0 == "test_gate"));
        assert_eq!(r.specs(), before);
        c.remove("bash");
        assert_eq!(c.specs(), specs_uncached(&c));
        assert!(!c.specs().iter().any(|s| s.0 == "bash"));
        src.0.lock().unwrap().clear();
        assert_eq!(r.specs(), specs_uncached(&r));
        assert_eq!(c.specs(), specs_uncached(&c));
    }

    #[test]
    fn repair_prefers_the_fixed_tool_and_still_finds_source_tools() {
        let src = Arc::new(Dynamic(Default::default()));
        let mut r = Registry::builtin();
        r.add_source(src.clone());
        src.0
            .lock()
            .unwrap()
            .insert("Mcp_Tool".into(), Arc::new(crate::testing::SleepTool));
        assert_eq!(r.repair("read").as_deref(), Some("read"));
        assert_eq!(r.repair("Mcp_Tool").as_deref(), Some("Mcp_Tool"));
        assert_eq!(r.repair("mcp_tool").as_deref(), Some("Mcp_Tool"));
        assert_eq!(r.repair("invalid"), None);
    }

    #[test]
    fn gpt_models_get_apply_patch_instead_of_edit_and_write() {
        for id in ["gpt-5", "gpt-5.1-codex", "openai/GPT-5-mini", "gpt-6"] {
            assert!(uses_apply_patch(id), "{id}");
            assert_eq!(hidden_for_model(id), ["edit", "write"]);
        }
        for id in [
            "gpt-4.1",
            "gpt-4o",
            "gpt-oss-120b",
            "claude-sonnet-4",
            "o3",
            "mock-model",
        ] {
            assert!(!uses_apply_patch(id), "{id}");
            assert_eq!(hidden_for_model(id), ["apply_patch"]);
        }
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
