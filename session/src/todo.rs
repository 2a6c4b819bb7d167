//! A session's todo list (OpenCode's `todo` table and `todowrite` tool): an ordered list the
//! model keeps with `todowrite`, replaced whole on each write, published as `todo.updated`.

use serde::{Deserialize, Serialize};

/// One todo item. The fields are free strings as in OpenCode; the tool's description names
/// the usual values (`status`: `pending`, `in_progress`, `completed`, `cancelled`;
/// `priority`: `high`, `medium`, `low`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Todo {
    /// Brief description of the task.
    pub content: String,
    /// Current status of the task: pending, in_progress, completed, cancelled.
    pub status: String,
    /// Priority level of the task: high, medium, low.
    pub priority: String,
}

impl Todo {
    /// Whether the item still needs doing (neither `completed` nor `cancelled`).
    pub fn is_open(&self) -> bool {
        !matches!(self.status.as_str(), "completed" | "cancelled")
    }
}
