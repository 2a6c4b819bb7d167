//! Tool progress → the running tool part (title, metadata), written through the store.

use std::sync::Mutex;

use serde_json::Value;
use troupe_session::{Part, PartKind, Store, ToolState, Write};
use troupe_tools::ProgressSink;

/// Writes a running tool's progress onto its part. Updates after the part left `running`
/// are ignored.
pub struct PartProgress {
    store: Store,
    part: Mutex<Part>,
}

impl PartProgress {
    /// Track `part` (a tool part in `running` state).
    pub fn new(store: Store, part: Part) -> Self {
        Self {
            store,
            part: Mutex::new(part),
        }
    }
}

impl PartProgress {
    /// The part as last updated.
    pub fn current(&self) -> Part {
        self.part.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl ProgressSink for PartProgress {
    fn update(&self, title: Option<String>, metadata: serde_json::Map<String, Value>) {
        let mut part = self.part.lock().unwrap_or_else(|e| e.into_inner());
        if let PartKind::Tool {
            state:
                ToolState::Running {
                    title: t,
                    metadata: m,
                    ..
                },
            ..
        } = &mut part.kind
        {
            if title.is_some() {
                *t = title;
            }
            *m = Some(Value::Object(metadata));
            self.store.write1(Write::Part(part.clone()));
        }
    }
}
