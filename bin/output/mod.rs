//! Printing: the streaming view of `troupe run`, JSON lines, and the session/model listings.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use troupe_config::LoadedConfig;
use troupe_session::{
    Event, Message, MessageId, MessageWithParts, PartId, PartKind, PartRef, Session, SessionId,
    Store, ToolState,
};

use crate::SessionCommand;

mod listing;
mod printer;
mod sessions;
mod snapshot;
mod stats;

pub use listing::*;
pub use printer::*;
pub use sessions::*;
pub use snapshot::*;
pub use stats::*;

#[cfg(test)]
mod tests;
