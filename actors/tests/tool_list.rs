//! Issue 19: the registry's tool list is built once and reused while the registry's sources
//! report no change ([`troupe_tools::Registry::generation`]); a source that adds or withdraws
//! a tool mid-session moves its generation, and the next step offers the new list. Runs the
//! real runtime against the scripted provider.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;
use support::*;
use troupe_testkit::{Script, Step};
use troupe_tools::registry::ToolSource;
use troupe_tools::{Registry, Tool};

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

/// A source tool named `name` answering "ok"; running `src_grow` also adds `src_new` to
/// `source` and withdraws itself.
fn source_tool(name: &'static str, source: std::sync::Weak<Source>) -> Arc<dyn Tool> {
    let description = format!("Test tool {name}.");
    Arc::new(FnTool::new(name, &description, move |_, _| {
        if name == "src_grow"
            && let Some(grown) = source.upgrade()
        {
            grown.add(source_tool("src_new", source.clone()));
            grown.remove("src_grow");
        }
        Box::pin(async { Ok(output("ok", "ok")) })
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_a_source_adds_mid_turn_is_offered_from_the_next_step() {
    let (dir, root) = scratch();
    let server = start_mock(Script::single(vec![
        Step::tool("glob", json!({"pattern": "*"})),
        Step::tool("src_grow", json!({})),
        Step::tool("src_new", json!({})),
        Step::text("done"),
        Step::text("again"),
    ]))
    .await;
    let source = Arc::new(Source::default());
    source.add(source_tool("src_grow", Arc::downgrade(&source)));
    let mut f = Fixture::new(&server.base_url());
    let mut registry = Registry::builtin();
    registry.add_source(source.clone());
    f.registry = registry;
    let runtime = f.start(&dir).await;
    let sid = new_session(&runtime, &root).await;
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
