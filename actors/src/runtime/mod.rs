//! The [`Runtime`] (it owns one root actor; a process usually runs one) and
//! [`RuntimeShared`], what every actor shares.
//!
//! This file holds the two types, the runtime's start (the shared parts, the built-in
//! tools, the root actor, the MCP servers) and shutdown, its accessors and what a person
//! answers through it (permissions, questions). The session API (create, prompt, update,
//! compact, abort, delete a session; wait for background subagents) is in `sessions.rs`.

use super::*;

mod sessions;

/// How long [`Runtime::delete_session`] waits for an aborted turn to close its parts before
/// it deletes the session anyway: 10 s.
pub const DELETE_ABORT_WAIT: Duration = Duration::from_secs(10);

/// What every actor of the runtime shares.
pub struct RuntimeShared {
    /// Store (and, through it, the bus).
    pub store: Store,
    /// Merged configuration.
    pub config: Arc<LoadedConfig>,
    /// The tool registry: built-in tools, MCP tools as their servers list them.
    pub registry: Arc<Registry>,
    /// Agents (built-in, config, markdown).
    pub agents: Arc<troupe_agents::AgentSet>,
    /// Pending permission requests and approvals.
    pub broker: Arc<crate::permission::PermissionBroker>,
    /// Limits and timeouts the runtime was started with (see [`RuntimeOptions`]).
    pub opts: RuntimeOptions,
    /// Live session actors by session id.
    pub sessions: DashMap<SessionId, ActorRef<SessionMsg>>,
    /// Lifetime counters (steps, restarts, failures by role) for `/metrics` and `/actors`.
    pub counters: Counters,
    /// Child sessions a `task` call is driving right now: one call per child at a time, so
    /// two calls with the same `task_id` never run two actors on one session (issue 24.7).
    pub task_children: DashMap<SessionId, ()>,
    /// Slots for concurrently running subagents.
    pub subagent_slots: Arc<tokio::sync::Semaphore>,
    /// Background subagents (`task` with `background: true`) by child session id, running
    /// or finished (a finished one keeps its result for `task_status`); an entry goes when
    /// its parent or child session is deleted.
    pub(crate) background: DashMap<SessionId, crate::task::Background>,
    /// The root actor, for work that outlives the call that started it (a background
    /// subagent's result is prompted into its parent through a [`Runtime`]).
    pub(crate) root_ref: std::sync::OnceLock<ActorRef<()>>,
    /// The live supervision tree (for monitoring).
    pub tree: Arc<crate::tree::ActorTree>,
    /// Per-provider back-off: no request to the provider starts before this time (ms since
    /// epoch). Set when one session gets a 429, so parallel sessions back off together.
    pub rate_limits: DashMap<String, i64>,
    pub(crate) http: reqwest::Client,
    pub(crate) providers: DashMap<String, Arc<Provider>>,
    pub(crate) spawn_lock: tokio::sync::Mutex<()>,
    /// Who this runtime is to other processes (session leases).
    pub identity: lease::Identity,
    /// Session leases held by this runtime.
    pub leases: Arc<lease::LeaseBook>,
    /// Returns freed heap memory to the kernel when no session is live ([`crate::memory`]).
    pub idle_trim: crate::memory::IdleTrim,
    /// The runtime root's children: session actor id → session id.
    pub(crate) root_children: DashMap<ractor::ActorId, SessionId>,
    /// Session actors that crashed, by session id: (actor, cause), until the prompt whose
    /// turn they ran takes the entry and restarts the session.
    pub(crate) crashed: DashMap<SessionId, (ractor::ActorId, String)>,
    /// Restart-intensity state of each session (crashes within the period).
    pub(crate) session_intensity: DashMap<SessionId, crate::supervision::Intensity>,
    /// Notified after the root handled a supervision event.
    pub(crate) root_events: tokio::sync::Notify,
    /// Fault injection for tests ([`faults`]; empty without the `fault-injection` feature).
    pub faults: faults::Faults,
    /// File snapshots per project (issue 15).
    pub snapshots: snapshots::Snapshots,
    /// Set while a saved-output cleanup runs (one at a time).
    pub(crate) output_cleanup_running: AtomicBool,
    /// MCP servers: states and tools (issue 16; see [`mcp`]).
    pub mcp: Arc<mcp::McpHub>,
    /// Pending `question` tool questions.
    pub questions: Arc<crate::question::QuestionBroker>,
    /// Hook commands of the config's `hooks` block; `None` when none is configured (the
    /// tool-call, request and idle paths then skip hooks entirely).
    pub hooks: Option<Arc<troupe_tools::hooks::Hooks>>,
    /// Running `session.idle` hooks: shutdown waits for them (within its grace period), so
    /// the notification of a CLI run's last turn is not cut off by the exit.
    pub(crate) hook_tasks: tokio_util::task::TaskTracker,
    /// The cluster that runs `cluster.subagents` task calls, once this process joined one
    /// ([`Runtime::set_remote_subagents`]).
    pub(crate) remote: std::sync::OnceLock<Arc<dyn remote::RemoteSubagents>>,
}

impl RuntimeShared {
    /// The provider client for a model (one per `provider/model`, sharing one HTTP pool).
    pub fn provider(&self, model: &ResolvedModel) -> Arc<Provider> {
        let key = model.full_id();
        if let Some(p) = self.providers.get(&key) {
            return p.clone();
        }
        let p = Arc::new(Provider::new(self.http.clone(), model.clone()));
        self.providers.insert(key, p.clone());
        p
    }
}

/// The runtime: one per process.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) shared: Arc<RuntimeShared>,
    pub(crate) root: ActorRef<()>,
}

impl Runtime {
    /// Start the root supervisor. Agents are loaded from `config` (built-ins, `agent` keys,
    /// markdown agents in the global dir and the worktree's `.troupe/`). `responder` answers
    /// permission asks nobody else answers first (a policy or a terminal prompt; see
    /// [`permission`]).
    pub async fn start(
        store: Store,
        config: LoadedConfig,
        registry: Registry,
        responder: Arc<dyn PermissionAsker>,
        opts: RuntimeOptions,
    ) -> Result<Runtime, RuntimeError> {
        let cfg = config.clone();
        let agents = tokio::task::spawn_blocking(move || troupe_agents::AgentSet::load(&cfg, &[]))
            .await
            .map_err(|e| RuntimeError::Spawn(e.to_string()))?
            .map_err(|e| RuntimeError::Turn(e.to_string()))?;
        Self::start_with_agents(store, config, agents, registry, responder, opts).await
    }

    /// [`Runtime::start`] with an already loaded agent set.
    pub async fn start_with_agents(
        store: Store,
        config: LoadedConfig,
        agents: troupe_agents::AgentSet,
        registry: Registry,
        responder: Arc<dyn PermissionAsker>,
        opts: RuntimeOptions,
    ) -> Result<Runtime, RuntimeError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| RuntimeError::Spawn(e.to_string()))?;
        let mut registry = registry;
        let mcp = mcp::McpHub::new(&config.config.mcp, store.bus().clone());
        registry.add_source(mcp.clone());
        let max_subagents = opts.max_subagents.max(1);
        let lease_label = opts.lease_label.clone();
        let snapshots = snapshots::Snapshots::new(
            opts.snapshot_dir.clone(),
            config.config.snapshot == Some(false),
            opts.own_files.clone(),
        );
        let hooks = (!config.config.hooks.is_empty())
            .then(|| Arc::new(troupe_tools::hooks::Hooks::new(config.config.hooks.clone())));
        let questions = Arc::new(crate::question::QuestionBroker::new(store.clone()));
        let shared = Arc::new_cyclic(|weak| {
            registry.register(Arc::new(crate::task::TaskTool::new(weak.clone())));
            registry.register(Arc::new(crate::task::TaskStatusTool::new(weak.clone())));
            registry.register(Arc::new(crate::todo::TodoWriteTool::new(store.clone())));
            registry.register(Arc::new(crate::todo::TodoReadTool::new(store.clone())));
            registry.register(Arc::new(crate::question::QuestionTool::new(
                questions.clone(),
            )));
            // A registry that brings its own `skill` (e.g. another global dir) keeps it.
            if registry.get("skill").is_none() {
                registry.register(Arc::new(crate::skill::SkillTool::new(
                    troupe_config::global_config_dir(),
                )));
            }
            RuntimeShared {
                store: store.clone(),
                config: Arc::new(config),
                registry: Arc::new(registry),
                agents: Arc::new(agents),
                broker: Arc::new(
                    crate::permission::PermissionBroker::new(store.clone(), responder)
                        .with_hooks(hooks.clone()),
                ),
                opts,
                sessions: DashMap::new(),
                counters: Counters::default(),
                task_children: DashMap::new(),
                background: DashMap::new(),
                root_ref: std::sync::OnceLock::new(),
                subagent_slots: Arc::new(tokio::sync::Semaphore::new(max_subagents)),
                rate_limits: DashMap::new(),
                tree: Arc::new(crate::tree::ActorTree::default()),
                http,
                providers: DashMap::new(),
                spawn_lock: tokio::sync::Mutex::new(()),
                identity: lease::Identity::current(&lease_label),
                leases: Arc::new(lease::LeaseBook::default()),
                idle_trim: Default::default(),
                root_children: DashMap::new(),
                crashed: DashMap::new(),
                session_intensity: DashMap::new(),
                root_events: tokio::sync::Notify::new(),
                faults: faults::Faults::default(),
                snapshots,
                output_cleanup_running: AtomicBool::new(false),
                mcp,
                hooks,
                questions,
                hook_tasks: tokio_util::task::TaskTracker::new(),
                remote: std::sync::OnceLock::new(),
            }
        });
        let (root, _) = Actor::spawn(None, RootActor, shared.clone())
            .await
            .map_err(|e| RuntimeError::Spawn(e.to_string()))?;
        let _ = shared.root_ref.set(root.clone());
        mcp::server::start(
            shared.mcp.clone(),
            shared.tree.clone(),
            shared.config.config.supervision.clone(),
        )
        .await
        .map_err(RuntimeError::Spawn)?;
        Ok(Runtime { shared, root })
    }

    /// The runtime of these shared parts (`None` before its root actor started).
    pub(crate) fn from_shared(shared: &Arc<RuntimeShared>) -> Option<Runtime> {
        Some(Runtime {
            shared: shared.clone(),
            root: shared.root_ref.get()?.clone(),
        })
    }

    /// Let the cluster run this runtime's `task` calls of the subagents config
    /// `cluster.subagents` names (see [`remote`]). Set once, when the process joins a
    /// cluster; a second call is ignored.
    pub fn set_remote_subagents(&self, remote: Arc<dyn remote::RemoteSubagents>) {
        let _ = self.shared.remote.set(remote);
    }

    /// Install a fault hook (tests only: feature `fault-injection`); see [`faults`].
    #[cfg(feature = "fault-injection")]
    pub fn inject_faults(&self, hook: faults::FaultHook) {
        self.shared.faults.install(hook);
    }

    /// Shared parts (store, config, counters).
    pub fn shared(&self) -> &Arc<RuntimeShared> {
        &self.shared
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The bus.
    pub fn bus(&self) -> &Bus {
        self.shared.store.bus()
    }

    /// Answer a pending permission request (`permission.asked` id).
    pub fn reply_permission(&self, request_id: &str, reply: crate::permission::Reply) -> bool {
        self.shared.broker.reply(request_id, reply)
    }

    /// Pending questions of the `question` tool (their `question.asked` payloads).
    pub fn pending_questions(&self) -> Vec<serde_json::Value> {
        self.shared.questions.pending()
    }

    /// Answer a pending question: one list of picked labels or typed text per question.
    pub fn reply_question(
        &self,
        id: &str,
        answers: Vec<Vec<String>>,
    ) -> Result<(), crate::question::ReplyError> {
        self.shared.questions.reply(id, answers)
    }

    /// Let `asker` (a terminal) answer the model's questions besides the API; set once.
    pub fn set_question_asker(&self, asker: Arc<dyn crate::question::QuestionAsker>) {
        self.shared.questions.set_asker(asker);
    }

    /// Dismiss a pending question (its turn stops); false when it is not pending.
    pub fn reject_question(&self, id: &str) -> bool {
        self.shared.questions.reject(id)
    }

    /// Number of live session actors.
    pub fn live_sessions(&self) -> usize {
        self.shared.sessions.len()
    }

    /// The live supervision tree: runtime → sessions → processor → tool calls → subagent
    /// sessions, with status, current tool, steps, tokens and cost. The runtime node's steps
    /// and cost are its lifetime totals (`troupe_steps_total` and the cost counter of
    /// `/metrics`): the sessions that ran them may have stopped since.
    pub fn actors(&self) -> crate::tree::ActorNode {
        let mut tree = self.shared.tree.tree();
        let counters = &self.shared.counters;
        tree.steps = counters.steps.load(std::sync::atomic::Ordering::Relaxed);
        tree.cost = *counters.cost.lock().unwrap_or_else(|e| e.into_inner());
        tree
    }

    /// Pending permission requests (`permission.asked` payloads).
    pub fn pending_permissions(&self) -> Vec<serde_json::Value> {
        self.shared.broker.pending()
    }

    /// Number of live actors below the root (sessions, processors, tool calls).
    pub fn live_actors(&self) -> i64 {
        self.shared.counters.live_actors.load(Ordering::Relaxed)
    }

    /// Stop the root supervisor and flush the store. Sessions still finishing background
    /// work (a title) get up to 3 s before everything is aborted.
    pub async fn shutdown(self) {
        self.shutdown_within(Duration::from_secs(3)).await
    }

    /// [`Runtime::shutdown`] waiting at most `grace` for background work (0 after Ctrl-C).
    pub async fn shutdown_within(self, grace: Duration) {
        // Only idle sessions with background work (a title, a summary) are waited for; a
        // running turn is aborted at once below. Every status change or removal in the tree
        // wakes the wait, so it ends as soon as the last session is gone.
        let _ = tokio::time::timeout(grace, async {
            loop {
                let changed = self.shared.tree.changed();
                if self.shared.sessions.is_empty() || !self.shared.tree.sessions_idle() {
                    return;
                }
                changed.await;
            }
        })
        .await;
        self.shared.hook_tasks.close();
        let _ = tokio::time::timeout(grace, self.shared.hook_tasks.wait()).await;
        self.abort_all();
        // Background processes of every session stop with the runtime.
        let _ = tokio::task::spawn_blocking(troupe_tools::procs::stop_all).await;
        let _ = self.shared.store.flush().await;
        self.root.stop(None);
        mcp::server::stop(&self.shared.mcp, Duration::from_secs(3)).await;
        // Stopped session actors release their leases; give the releases a moment so the
        // next process does not wait for them to expire.
        self.shared.leases.settle(Duration::from_secs(3)).await;
    }
}
