//! `todowrite` / `todoread`: the session's todo list (OpenCode §7.3). `todowrite {todos}`
//! replaces the whole list in the store (table `todo`, ordered by position) and publishes
//! `todo.updated`; `todoread {}` returns it. Both answer with the list as JSON and the title
//! `<n> todos` (the items not yet completed or cancelled). Each asks its own permission key
//! (`todowrite`, `todoread`, pattern `*`); subagents are denied `todowrite` unless their agent
//! has a rule for it ([`troupe_agents::permission`], as OpenCode does).

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use troupe_session::{Store, Todo, Write};
use troupe_tools::{ToolContext, ToolError, ToolOutput, TypedTool};

/// The `todowrite` tool, bound to the runtime's store.
#[derive(Clone)]
pub struct TodoWriteTool {
    store: Store,
}

/// The `todoread` tool, bound to the runtime's store.
#[derive(Clone)]
pub struct TodoReadTool {
    store: Store,
}

impl TodoWriteTool {
    /// A `todowrite` writing to `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

impl TodoReadTool {
    /// A `todoread` reading from `store`.
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

/// Arguments of `todowrite`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoWriteArgs {
    /// The updated todo list (replaces the current one).
    todos: Vec<Todo>,
}

/// Arguments of `todoread` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoReadArgs {}

const WRITE_DESCRIPTION: &str = "Create and update a structured task list for the current session: it tracks progress on multi-step work and shows the user what you are doing. Each call replaces the whole list.\n\nUse it for complex tasks of three or more distinct steps, when the user gives several tasks or asks for a todo list, and right after receiving new instructions (capture them as todos). Skip it for a single trivial step or a purely conversational reply.\n\nItem fields: content (brief description), status (pending, in_progress, completed, cancelled), priority (high, medium, low). Keep exactly one item in_progress while working; mark an item completed as soon as it is done (not in batches), and cancelled when it no longer applies.";

const READ_DESCRIPTION: &str = "Read the current session's todo list (written with todowrite). Takes no parameters. Use it to check what is pending before deciding what to do next, or after finishing an item.";

/// Ask `permission` with pattern `*` (a denial is the tool's error).
async fn ask(ctx: &ToolContext, permission: &str) -> Result<(), ToolError> {
    troupe_tools::paths::ask(
        ctx,
        permission,
        vec!["*".into()],
        vec!["*".into()],
        Value::Object(Map::new()),
    )
    .await
}

/// The tool output for a list: pretty JSON, title `<open> todos`, metadata `{todos}`.
fn output(todos: &[Todo]) -> ToolOutput {
    let open = todos.iter().filter(|t| t.is_open()).count();
    let list = serde_json::to_value(todos).unwrap_or(Value::Null);
    let mut metadata = Map::new();
    metadata.insert("todos".into(), list.clone());
    ToolOutput {
        title: format!("{open} todos"),
        output: serde_json::to_string_pretty(&list).unwrap_or_default(),
        metadata,
    }
}

impl TypedTool for TodoWriteTool {
    type Args = TodoWriteArgs;
    const NAME: &'static str = "todowrite";

    fn describe(&self) -> String {
        WRITE_DESCRIPTION.into()
    }

    fn run(
        &self,
        args: TodoWriteArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let store = self.store.clone();
        Box::pin(async move {
            ask(&ctx, "todowrite").await?;
            store.write1(Write::Todos {
                session_id: ctx.session_id.clone().into(),
                todos: args.todos.clone(),
            });
            store
                .flush()
                .await
                .map_err(|e| ToolError::Failed(format!("could not store the todo list: {e}")))?;
            Ok(output(&args.todos))
        })
    }
}

impl TypedTool for TodoReadTool {
    type Args = TodoReadArgs;
    const NAME: &'static str = "todoread";

    fn describe(&self) -> String {
        READ_DESCRIPTION.into()
    }

    fn run(
        &self,
        _args: TodoReadArgs,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let store = self.store.clone();
        Box::pin(async move {
            ask(&ctx, "todoread").await?;
            let sid = troupe_session::SessionId::from(ctx.session_id.as_str());
            let todos = store
                .read(move |r| r.todos(&sid))
                .await
                .map_err(|e| ToolError::Failed(format!("could not read the todo list: {e}")))?;
            Ok(output(&todos))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use troupe_tools::Tool;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("t.db"), troupe_session::Bus::new()).unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn write_replaces_the_list_publishes_and_read_returns_it() {
        let (_d, store) = store();
        let mut rx = store.bus().subscribe();
        let ctx = ToolContext::simple("/");
        let w = TodoWriteTool::new(store.clone());
        let first = json!({"todos": [
            {"content": "a", "status": "in_progress", "priority": "high"},
            {"content": "b", "status": "pending", "priority": "low"},
            {"content": "c", "status": "completed", "priority": "low"}
        ]});
        let out = w.execute(first, ctx.clone()).await.unwrap();
        assert_eq!(out.title, "2 todos");
        let ev = rx.recv().await.unwrap();
        assert_eq!(ev.type_name(), "todo.updated");
        assert_eq!(ev.session_id(), Some("ses_test"));
        let second =
            json!({"todos": [{"content": "z", "status": "cancelled", "priority": "medium"}]});
        w.execute(second, ctx.clone()).await.unwrap();
        let read = TodoReadTool::new(store.clone())
            .execute(json!({}), ctx)
            .await
            .unwrap();
        assert_eq!(read.title, "0 todos");
        let list: Value = serde_json::from_str(&read.output).unwrap();
        assert_eq!(
            list,
            json!([{"content": "z", "status": "cancelled", "priority": "medium"}])
        );
        let other = store.read(|r| r.todos(&"ses_other".into())).await.unwrap();
        assert!(other.is_empty());
    }

    #[tokio::test]
    async fn bad_items_and_denials_are_errors() {
        let (_d, store) = store();
        let w = TodoWriteTool::new(store);
        let err = w
            .execute(
                json!({"todos": [{"content": "a"}]}),
                ToolContext::simple("/"),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("status"), "{err}");
        let mut ctx = ToolContext::simple("/");
        ctx.permissions = std::sync::Arc::new(crate::permission::Policy::Deny);
        let err = w.execute(json!({"todos": []}), ctx).await.unwrap_err();
        assert!(matches!(err, ToolError::PermissionDenied(_)), "{err:?}");
    }
}
