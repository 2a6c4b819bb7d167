//! Issue 19: the registry's tool list is built once and reused while the registry's sources
//! report no change ([`troupe_tools::Registry::generation`]); a source that adds or withdraws
//! a tool mid-session moves its generation, and the next step offers the new list. Runs the
//! real runtime against the scripted provider.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use support::*;
use tempfile::TempDir;
use troupe_testkit::{MockServer, Script, Step};
use troupe_tools::registry::ToolSource;
use troupe_tools::{Registry, Tool, ToolContext, ToolError, ToolOutput};

/// A source like an MCP hub: tools that come and go, with a generation counter.
#[derive(Default)]
struct Source {
    tools: Mutex<BTreeMap<String, Arc<dyn Tool>>>,
    generation: AtomicU64,
}

impl Source {
    fn add(&self, tool: Arc<dyn Tool>) {
        self.tools
            .lock()
            .unwrap()
            .insert(tool.name().to_string(), tool);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn remove(&self, name: &str) {
        self.tools.lock().unwrap().remove(name);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl ToolSource for Source {
    fn tools(&self) -> BTreeMap<String, Arc<dyn Tool>> {
        self.tools.lock().unwrap().clone()
    }
    fn generation(&self) -> Option<u64> {
        Some(self.generation.load(Ordering::SeqCst))
    }
}

/// A source tool; running `src_grow` adds `src_new` to the source and withdraws itself.
struct SourceTool {
    name: &'static str,
    source: std::sync::Weak<Source>,
}

impl Tool for SourceTool {
    fn name(&self) -> &'static str {
        self.name
    }
    fn description(&self) -> String {
        format!("Test tool {}.", self.name)
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn execute(
        &self,
        _args: Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        if self.name == "src_grow"
            && let Some(source) = self.source.upgrade()
        {
            source.add(Arc::new(SourceTool {
                name: "src_new",
                source: self.source.clone(),
            }));
            source.remove("src_grow");
        }
        Box::pin(async move {
            Ok(ToolOutput {
                title: "ok".into(),
                output: "ok".into(),
                metadata: Default::default(),
            })
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_a_source_adds_mid_turn_is_offered_from_the_next_step() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let server = MockServer::start(Script::single(vec![
        Step::tool("glob", json!({"pattern": "*"})),
        Step::tool("src_grow", json!({})),
        Step::tool("src_new", json!({})),
        Step::text("done"),
        Step::text("again"),
    ]))
    .await
    .unwrap();
    let source = Arc::new(Source::default());
    source.add(Arc::new(SourceTool {
        name: "src_grow",
        source: Arc::downgrade(&source),
    }));
    let mut f = Fixture::new(&server.base_url());
    let mut registry = Registry::builtin();
    registry.add_source(source.clone());
    f.registry = registry;
    let runtime = f.start(&dir).await;
    let sid = runtime.create_session(&root, None).await.unwrap().id;
    let r = run_prompt(&runtime, &sid, "go").await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.text, "done");
    let reqs = requests_of(&server, &sid);
    assert_eq!(reqs.len(), 4);
    let has = |i: usize, name: &str| reqs[i].offered_tools().iter().any(|n| n == name);
    // Steps 1 and 2 share one list (nothing changed between them).
    assert_eq!(reqs[0].offered_tools(), reqs[1].offered_tools());
    assert!(has(0, "src_grow") && has(1, "src_grow"));
    assert!(!has(0, "src_new") && !has(1, "src_new"));
    // `src_grow` ran in step 2: step 3 offers `src_new` and no longer `src_grow`.
    assert!(has(2, "src_new"), "{:?}", reqs[2].offered_tools());
    assert!(!has(2, "src_grow"), "{:?}", reqs[2].offered_tools());
    assert!(has(3, "src_new"));
    let parts = tool_parts(&messages(&runtime, &sid).await);
    assert_eq!(parts.len(), 3);
    assert!(
        parts
            .iter()
            .all(|(_, s)| matches!(s, troupe_session::ToolState::Completed { .. })),
        "{parts:?}"
    );
    // Withdrawn between turns: the next turn's first step no longer offers it.
    source.remove("src_new");
    let r = run_prompt(&runtime, &sid, "again").await;
    assert!(r.error.is_none(), "{:?}", r.error);
    let reqs = requests_of(&server, &sid);
    assert!(
        !reqs
            .last()
            .unwrap()
            .offered_tools()
            .iter()
            .any(|n| n == "src_new")
    );
}
