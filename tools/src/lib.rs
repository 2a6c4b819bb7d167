//! troupe-tools: the [`Tool`] trait, the [`ToolContext`] a tool runs with, the registry of
//! built-in tools (OpenCode names and parameters: `bash`, `read`, `write`, `edit`, `glob`,
//! `grep`, `list`, `webfetch`, `apply_patch`, `invalid`; `StructuredOutput` is offered only to
//! a turn with a JSON Schema), output truncation and tool-name repair.
//!
//! A tool is written as a [`TypedTool`]: its arguments are a struct that derives both
//! `Deserialize` and `JsonSchema`, so the schema the model sees and the parsing of each call
//! come from one definition and cannot drift; every `TypedTool` is a [`Tool`].
//!
//! Tools are plain async functions of (arguments, context). They know nothing of actors: the
//! actor layer runs each call in its own supervised tool-call actor, enforces the timeout and
//! cancels through [`ToolContext::abort`].
//!
//! Modules: [`builtin`] (one module per built-in tool), [`registry`] (the registry, tool
//! sources such as MCP servers, name repair), [`args`] (argument decoding and schemas),
//! [`paths`] (path resolution and the `external_directory` ask), [`bash_command`] (analysis
//! of a bash command for its permission check), [`procs`] (who owns the processes a tool
//! starts), [`hooks`] (the hook commands of every hook point), [`truncate`] (output truncation)
//! and [`testing`] (test-only tools).

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod args;
pub mod bash_command;
mod bash_rules;
pub mod builtin;
pub mod hooks;
pub mod paths;
pub mod procs;
pub mod registry;
pub mod testing;
pub mod truncate;

pub use args::{args_schema, parse_args};
pub use bash_command::{Analysis, Part, PathUse, analyze};
pub use registry::{Registry, ToolSource, invalid_tool_message};
pub use truncate::{Direction, Truncated, apply_truncation, truncate_output};

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// What a finished tool call returns.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// Short title shown in UIs (e.g. the file path, the command's description).
    pub title: String,
    /// Text sent back to the model as the tool result.
    pub output: String,
    /// Structured metadata kept on the tool part (e.g. `{"exit": 0}` for bash).
    pub metadata: serde_json::Map<String, Value>,
}

/// A tool failure. Its `Display` text is what the model sees as the error result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// Arguments were not valid JSON or failed the tool's schema.
    #[error(
        "The {tool} tool was called with invalid arguments: {detail}\nPlease rewrite the input so it satisfies the expected schema."
    )]
    InvalidArguments {
        /// Tool name.
        tool: String,
        /// What was wrong.
        detail: String,
    },
    /// The tool ran and failed; the message says why (e.g. "File not found: …").
    #[error("{0}")]
    Failed(String),
    /// The call was aborted (session cancelled).
    #[error("Tool execution aborted")]
    Aborted,
    /// Permission denied by a rule, refused by a non-interactive policy, or rejected by the
    /// user with feedback (message says which); the turn goes on and the model sees it.
    #[error("{0}")]
    PermissionDenied(String),
    /// The user rejected the call without feedback: the turn stops after this step
    /// (OpenCode `RejectedError`, §6).
    #[error("{0}")]
    PermissionRejected(String),
}

/// Decision of a permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionReply {
    /// Go ahead.
    Allow,
    /// Go ahead, and remember the request's `always` patterns as allowed for this project.
    AllowAlways,
    /// Refused; the text explains (and may carry the user's feedback). The turn goes on.
    Deny(String),
    /// The user rejected it without feedback; the text explains. The turn stops.
    Reject(String),
}

/// A permission request a tool raises before acting (OpenCode `ctx.ask`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PermissionRequest {
    /// Permission key: `read`, `edit`, `bash`, `glob`, `grep`, `list`, `external_directory`, …
    pub permission: String,
    /// Patterns checked against the rules (paths relative to the worktree, sub-commands, …).
    pub patterns: Vec<String>,
    /// Patterns remembered when the user answers "always".
    pub always: Vec<String>,
    /// Extra information for the UI.
    pub metadata: Value,
    /// The text each pattern came from (same order as `patterns`; may be empty), e.g. the
    /// command `/bin/rm -rf d` for the pattern `rm -rf d`. Messages name it.
    pub sources: Vec<String>,
    /// Why the request's meaning is only known when it runs (one sentence each, e.g. a bash
    /// command word that is not a literal). Each makes the request at least "ask" when the
    /// rules restrict this permission at all (fail closed).
    pub opaque: Vec<String>,
    /// Why approval is needed (the deciding rule and part), filled in by the permission layer
    /// before the request is shown to the user or a policy; empty until then.
    pub reason: String,
}

/// Who answers permission requests. The actor layer supplies the real one (rulesets, asking
/// the user); [`AllowAll`] answers yes to everything.
pub trait PermissionAsker: Send + Sync {
    /// Ask; resolves when a rule or the user decides.
    fn ask(&self, req: PermissionRequest) -> BoxFuture<'static, PermissionReply>;

    /// What the rules alone decide, without asking anyone: `Some(Deny(message))` when a rule
    /// denies the request, `None` otherwise (allowed, or it would ask). A tool making several
    /// requests for one action checks them all first, so the strictest part decides before
    /// the user is asked about a looser one. The default knows no rules.
    fn precheck(&self, _req: &PermissionRequest) -> BoxFuture<'static, Option<PermissionReply>> {
        Box::pin(async { None })
    }

    /// For each of `patterns` (same order), whether the rules alone allow `permission` for it
    /// without asking anyone: `false` for a pattern that would ask or is denied. For a tool
    /// that touches many paths in one call and cannot ask per path (grep's matching files
    /// under `read`): it leaves out the paths not allowed and says so. One call checks a
    /// whole batch. The default knows no rules and allows nothing (fail closed).
    fn allowed(&self, _permission: &str, patterns: Vec<String>) -> BoxFuture<'static, Vec<bool>> {
        let n = patterns.len();
        Box::pin(async move { vec![false; n] })
    }

    /// A synchronous view of what the rules alone allow right now (the turn's rules and the
    /// project's "always" approvals, as [`PermissionAsker::ask`] would read them), for a tool
    /// that decides inside its trip to the blocking pool whether it may act at once: a path
    /// known only there (its real location) that the rules allow needs no question, so the
    /// tool's I/O runs in the same trip (issue 19: one trip per tool step, not two).
    /// `None` (the default) when this asker cannot tell without asking: the tool then asks
    /// as usual. A gate only ever says "allowed" where [`PermissionAsker::ask`] would answer
    /// [`PermissionReply::Allow`] without a hook or a person; anything else is the usual ask.
    fn gate(&self) -> BoxFuture<'static, Option<Arc<dyn RuleGate>>> {
        Box::pin(async { None })
    }
}

/// What the rules alone allow, decided on the calling thread (see [`PermissionAsker::gate`]).
pub trait RuleGate: Send + Sync {
    /// True when the rules alone allow `permission` for every one of `patterns` without
    /// asking anyone; false for anything that would ask or is denied (the tool then asks,
    /// and the ask gives the rule's answer and message).
    fn allows(&self, permission: &str, patterns: &[String]) -> bool;
}

/// The gate of [`AllowAll`]: everything is allowed.
struct AllowEverything;

impl RuleGate for AllowEverything {
    fn allows(&self, _permission: &str, _patterns: &[String]) -> bool {
        true
    }
}

/// A [`PermissionAsker`] that allows everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl PermissionAsker for AllowAll {
    fn ask(&self, _req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
        Box::pin(async { PermissionReply::Allow })
    }

    fn allowed(&self, _permission: &str, patterns: Vec<String>) -> BoxFuture<'static, Vec<bool>> {
        let n = patterns.len();
        Box::pin(async move { vec![true; n] })
    }

    fn gate(&self) -> BoxFuture<'static, Option<Arc<dyn RuleGate>>> {
        Box::pin(async { Some(Arc::new(AllowEverything) as Arc<dyn RuleGate>) })
    }
}

/// Progress sink: a tool may publish a title/metadata update while it runs (e.g. bash
/// streaming output into `metadata.output`).
pub trait ProgressSink: Send + Sync {
    /// Publish an update of the running tool part.
    fn update(&self, title: Option<String>, metadata: serde_json::Map<String, Value>);
}

/// A sink that drops updates.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl ProgressSink for NoProgress {
    fn update(&self, _title: Option<String>, _metadata: serde_json::Map<String, Value>) {}
}

/// Everything a tool call runs with.
#[derive(Clone)]
pub struct ToolContext {
    /// Session id (`ses_…`).
    pub session_id: String,
    /// Assistant message id (`msg_…`) the call belongs to.
    pub message_id: String,
    /// Provider call id.
    pub call_id: String,
    /// Agent name running the call.
    pub agent: String,
    /// Session working directory: relative paths resolve against it.
    pub directory: PathBuf,
    /// Worktree root (git root, else `directory`): permission patterns are relative to it.
    pub worktree: PathBuf,
    /// Fires when the call must stop (session aborted, timeout). Tools check it at await
    /// points; bash kills its process group.
    pub abort: CancellationToken,
    /// Permission checks.
    pub permissions: Arc<dyn PermissionAsker>,
    /// Progress updates.
    pub progress: Arc<dyn ProgressSink>,
    /// Runtime-specific handle for tools defined outside this crate (the actor layer puts
    /// the calling tool-call actor here so the task tool can supervise its subagent).
    pub extra: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// The runtime's hook commands (the config's `hooks` block), `None` when none is
    /// configured: `bash` runs the `shell.env` hooks through it.
    pub hooks: Option<Arc<hooks::Hooks>>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("session_id", &self.session_id)
            .field("call_id", &self.call_id)
            .field("directory", &self.directory)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context for tests and one-off runs: allow-all permissions, no progress sink.
    pub fn simple(directory: impl Into<PathBuf>) -> Self {
        let directory = directory.into();
        Self {
            session_id: "ses_test".into(),
            message_id: "msg_test".into(),
            call_id: "call_test".into(),
            agent: "build".into(),
            worktree: directory.clone(),
            directory,
            abort: CancellationToken::new(),
            permissions: Arc::new(AllowAll),
            progress: Arc::new(NoProgress),
            extra: None,
            hooks: None,
        }
    }

    /// Resolve a path argument: a leading `~` or `~/` is the user's home directory
    /// (`dirs::home_dir`: `$HOME`, else the password database), other relative paths are
    /// relative to the session directory, absolute paths are unchanged (not normalized; see
    /// [`paths::resolve_in`]). Errors ([`ToolError::Failed`]): `~user/…` (another user's home
    /// is not guessed), or `~` when the home directory is unknown.
    pub fn resolve(&self, p: &str) -> Result<PathBuf, ToolError> {
        paths::resolve_in(&self.directory, p, dirs::home_dir().as_deref())
    }

    /// Resolve an optional directory argument (`path` of `glob`, `list`, `grep`; `workdir` of
    /// `bash`): `p` as [`resolve`](Self::resolve) gives it, or the session directory when `p`
    /// is absent or blank; [normalized](paths::normalize) either way. Errors: those of
    /// [`resolve`](Self::resolve).
    pub fn resolve_or_directory(&self, p: Option<&str>) -> Result<PathBuf, ToolError> {
        match p {
            Some(p) if !p.trim().is_empty() => Ok(paths::normalize(&self.resolve(p)?)),
            _ => Ok(paths::normalize(&self.directory)),
        }
    }
}

/// What a tool's description may depend on in a turn ([`Tool::description_in`]).
pub struct DescribeContext<'a> {
    /// Session working directory.
    pub directory: &'a Path,
    /// Worktree root.
    pub worktree: &'a Path,
    /// Whether the turn's rules deny `(permission, pattern)` outright (a call would be
    /// refused without asking), e.g. `("skill", "internal-notes")`.
    pub denies: &'a dyn Fn(&str, &str) -> bool,
}

impl<'a> DescribeContext<'a> {
    /// A context for `directory` (also the worktree) whose rules deny nothing.
    pub fn plain(directory: &'a Path) -> Self {
        Self {
            directory,
            worktree: directory,
            denies: &|_, _| false,
        }
    }
}

/// A tool the model can call.
pub trait Tool: Send + Sync + 'static {
    /// Name the model calls it by (e.g. `read`, or `<server>_<tool>` for an MCP tool).
    fn name(&self) -> &str;
    /// Description sent to the model.
    fn description(&self) -> String;
    /// Description sent to the model in a turn ([`DescribeContext`]): tools that list what
    /// the session's directory holds override it (`skill` lists the skills the turn's rules
    /// do not deny). May read files, so callers run it on the blocking pool. Default:
    /// [`Tool::description`].
    fn description_in(&self, _cx: &DescribeContext<'_>) -> String {
        self.description()
    }
    /// Whether a call only reads (safe to run again after a crash). Default false: unknown
    /// means side-effecting. MCP tools say true when their server marks them
    /// `readOnlyHint`; built-ins are listed in `supervision.read_only_tools` instead.
    fn read_only(&self) -> bool {
        false
    }
    /// JSON Schema (draft 2020-12 subset: `type: object`, `properties`, `required`) of the
    /// arguments object.
    fn parameters(&self) -> Value;
    /// Run the call. `args` has been parsed as JSON but not validated: the tool validates
    /// and returns [`ToolError::InvalidArguments`] on a mismatch.
    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>>;
}

/// The one way to write a tool: a typed [`Tool`]. `Args` is the arguments struct (serde
/// `Deserialize` for parsing, schemars `JsonSchema` for the schema, field names in OpenCode's
/// camelCase, each field's doc comment its description for the model). [`Tool::parameters`]
/// is [`args_schema`]`::<Args>()`, and [`Tool::execute`] parses the call's arguments with
/// [`parse_args`] (a mismatch is [`ToolError::InvalidArguments`] naming the field) before
/// [`TypedTool::run`] sees them.
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments struct.
    type Args: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static;
    /// Name the model calls it by (e.g. `read`).
    const NAME: &'static str;
    /// Description sent to the model.
    fn describe(&self) -> String;
    /// Description in a turn; see [`Tool::description_in`]. Default: [`TypedTool::describe`].
    fn describe_in(&self, _cx: &DescribeContext<'_>) -> String {
        self.describe()
    }
    /// Run the call with parsed arguments. Semantic checks beyond the schema (e.g. a path
    /// that must be absolute) return [`ToolError::InvalidArguments`] via [`args::invalid`].
    fn run(
        &self,
        args: Self::Args,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>>;
}

impl<T: TypedTool> Tool for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn description(&self) -> String {
        self.describe()
    }

    fn description_in(&self, cx: &DescribeContext<'_>) -> String {
        self.describe_in(cx)
    }

    fn parameters(&self) -> Value {
        args_schema::<T::Args>()
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        match parse_args::<T::Args>(T::NAME, args) {
            Ok(args) => self.run(args, ctx),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
}
