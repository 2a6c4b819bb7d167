//! Permission asking: rulesets decide, `ask` waits for an answer.
//!
//! A tool asks through its context's [`TurnPermissions`]. Each pattern is evaluated against
//! the layers agent ruleset → session rules → the project's "always" approvals (last match
//! wins, default ask; troupe-agents `permission`). Any deny refuses; all allow proceeds;
//! otherwise the [`PermissionBroker`] publishes `permission.asked` and waits for a reply
//! (`once`, `always`, `reject` with optional feedback the model sees). A reply comes from
//! [`PermissionBroker::reply`] (the HTTP API, a terminal prompt) or from the runtime's
//! responder (a policy for non-interactive runs), whichever is first. "Always" approvals are
//! stored per project and apply to later sessions too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use troupe_session::SessionId;

use dashmap::DashMap;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tracing::Instrument;
use troupe_agents::permission::Verdict;
use troupe_agents::{Action, Rule, Ruleset};
use troupe_session::{Event, Store, Write};
use troupe_tools::hooks::PermissionDecision;
use troupe_tools::{PermissionAsker, PermissionReply, PermissionRequest, RuleGate};

/// A reply to a pending request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Allow this call.
    Once,
    /// Allow this call and remember the request's `always` patterns for the project.
    Always,
    /// Refuse; optional feedback is shown to the model.
    Reject(Option<String>),
}

impl Reply {
    /// `once`, `always`, `reject`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reply::Once => "once",
            Reply::Always => "always",
            Reply::Reject(_) => "reject",
        }
    }
}

struct Pending {
    info: Value,
    session_id: SessionId,
    project: String,
    permission: String,
    patterns: Vec<String>,
    always: Vec<String>,
    reason: String,
    rules: Arc<Ruleset>,
    tx: oneshot::Sender<PermissionReply>,
}

/// Projects whose approvals [`PermissionBroker`] keeps before it forgets the ones without
/// any (their store row is read again on the next check): 1,024.
const APPROVALS_CACHED_MAX: usize = 1024;

/// Holds pending permission requests and the projects' "always" approvals.
pub struct PermissionBroker {
    store: Store,
    pending: DashMap<String, Pending>,
    approvals: Mutex<HashMap<String, Ruleset>>,
    responder: Arc<dyn PermissionAsker>,
    hooks: Option<Arc<troupe_tools::hooks::Hooks>>,
}

impl PermissionBroker {
    /// A broker writing approvals to `store`; `responder` answers asks that nobody else
    /// answers first (a policy, or a terminal prompt).
    pub fn new(store: Store, responder: Arc<dyn PermissionAsker>) -> Self {
        Self {
            store,
            pending: DashMap::new(),
            approvals: Mutex::new(HashMap::new()),
            responder,
            hooks: None,
        }
    }

    /// Run the `permission.asked` hooks before a request reaches the user: a hook may answer
    /// `allow` or `deny`; a failing hook leaves the question to the user (never an allow).
    pub fn with_hooks(mut self, hooks: Option<Arc<troupe_tools::hooks::Hooks>>) -> Self {
        self.hooks = hooks.filter(|h| !h.config().permission_asked.is_empty());
        self
    }

    async fn approvals_for(&self, project: &str) -> Ruleset {
        if let Some(r) = self
            .approvals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(project)
        {
            return r.clone();
        }
        let key = project.to_string();
        let stored = self
            .store
            .read(move |r| r.approvals(&key))
            .await
            .ok()
            .flatten();
        let rules: Ruleset = stored
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        let mut map = self.approvals.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= APPROVALS_CACHED_MAX {
            // A runtime that served many projects (one per session in a benchmark) keeps
            // only the ones with approvals; an empty one is read again when next needed.
            map.retain(|_, r| !r.0.is_empty());
        }
        map.entry(project.to_string()).or_insert(rules).clone()
    }

    /// What the rules (`rules` + the project's approvals) decide for `req`, without asking
    /// (troupe-agents `decide_request`: strictest part, opaque parts at least ask).
    pub async fn verdict(
        &self,
        project: &str,
        rules: &Ruleset,
        req: &PermissionRequest,
    ) -> Verdict {
        let approvals = self.approvals_for(project).await;
        troupe_agents::permission::decide_request(
            &req.permission,
            &req.patterns,
            &req.sources,
            &req.opaque,
            &[rules, &approvals],
        )
    }

    /// For each of `patterns`, whether `rules` + the project's approvals allow `permission`
    /// for it without asking (an ask or a deny is `false`): [`PermissionAsker::allowed`].
    pub async fn allowed(
        &self,
        project: &str,
        rules: &Ruleset,
        permission: &str,
        patterns: &[String],
    ) -> Vec<bool> {
        let approvals = self.approvals_for(project).await;
        patterns
            .iter()
            .map(|p| {
                troupe_agents::permission::decide_request(
                    permission,
                    std::slice::from_ref(p),
                    &[],
                    &[],
                    &[rules, &approvals],
                )
                .action
                    == Action::Allow
            })
            .collect()
    }

    /// Evaluate a request against `rules` + approvals; ask when needed. A deny names the
    /// deciding rule and part; an ask carries the reason in `req.reason` and the published
    /// `permission.asked` payload (`reason`).
    pub async fn ask(
        self: &Arc<Self>,
        session_id: &SessionId,
        project: &str,
        rules: Arc<Ruleset>,
        mut req: PermissionRequest,
        tool: Option<(String, String)>,
    ) -> PermissionReply {
        let verdict = self.verdict(project, &rules, &req).await;
        match verdict.action {
            Action::Deny => {
                return PermissionReply::Deny(deny_message(&verdict));
            }
            Action::Allow => return PermissionReply::Allow,
            Action::Ask => req.reason = verdict.message,
        }
        if let Some(hooks) = &self.hooks {
            match hooks
                .permission_asked(
                    std::path::Path::new(project),
                    session_id,
                    &req.permission,
                    &req.patterns,
                    &req.metadata,
                )
                .await
            {
                Ok(Some(PermissionDecision::Allow)) => return PermissionReply::Allow,
                Ok(Some(PermissionDecision::Deny)) => {
                    return PermissionReply::Deny(format!(
                        "Permission {} denied by a permission.asked hook. Do not retry this \
                         call; choose another approach or ask the user.",
                        req.permission
                    ));
                }
                Ok(None) => {}
                Err(e) => {
                    // Fail closed: the user is asked as if there were no hook, and told why.
                    tracing::warn!(session = %session_id, "{e}; asking the user instead");
                    req.reason = format!("{} ({e}; asking you instead)", req.reason);
                }
            }
        }
        // Only a real ask gets a span: its duration is the time the call waited.
        let span = crate::spans::permission_ask(session_id, &req.permission);
        let id = troupe_session::id::ascending(troupe_session::id::Prefix::Permission);
        let mut info = json!({
            "id": id,
            "sessionID": session_id,
            "permission": req.permission,
            "patterns": req.patterns,
            "always": req.always,
            "metadata": req.metadata,
            "reason": req.reason,
        });
        if let Some((message_id, call_id)) = tool {
            info["tool"] = json!({"messageID": message_id, "callID": call_id});
        }
        let (tx, rx) = oneshot::channel();
        self.pending.insert(
            id.clone(),
            Pending {
                info: info.clone(),
                session_id: session_id.clone(),
                project: project.to_string(),
                permission: req.permission.clone(),
                patterns: req.patterns.clone(),
                always: req.always.clone(),
                reason: req.reason.clone(),
                rules,
                tx,
            },
        );
        self.store
            .write1(Write::Publish(Event::PermissionAsked(info)));
        let me = self.clone();
        let fut = self.responder.ask(req);
        let rid = id.clone();
        let responder = tokio::spawn(async move {
            match fut.await {
                PermissionReply::Allow => me.reply(&rid, Reply::Once),
                PermissionReply::AllowAlways => me.reply(&rid, Reply::Always),
                PermissionReply::Reject(_) => me.reply(&rid, Reply::Reject(None)),
                PermissionReply::Deny(msg) => me.settle(&rid, Reply::Reject(None), Some(msg)),
            };
        });
        let out = rx
            .instrument(span.clone())
            .await
            .unwrap_or_else(|_| PermissionReply::Deny("the permission request was dropped".into()));
        span.record(
            "reply",
            match &out {
                PermissionReply::Allow | PermissionReply::AllowAlways => "allow",
                PermissionReply::Deny(_) => "deny",
                PermissionReply::Reject(_) => "reject",
            },
        );
        responder.abort();
        // If nobody answered (e.g. the call was aborted), forget the request.
        self.pending.remove(&id);
        out
    }

    /// Answer a pending request. Returns false when no such request is pending. A
    /// `Reject(None)` stops the turn and rejects the session's other pending requests; a
    /// `Reject(Some(feedback))` sends the feedback to the model and the turn goes on.
    pub fn reply(&self, request_id: &str, reply: Reply) -> bool {
        self.settle(request_id, reply, None)
    }

    /// [`PermissionBroker::reply`]; `refusal` is a responder's own refusal text (a
    /// non-interactive policy, a prompt's feedback), sent verbatim, not stopping the turn and
    /// not touching other requests.
    fn settle(&self, request_id: &str, reply: Reply, refusal: Option<String>) -> bool {
        let Some((_, p)) = self.pending.remove(request_id) else {
            return false;
        };
        self.store.write1(Write::Publish(Event::PermissionReplied {
            session_id: p.session_id.clone(),
            request_id: request_id.to_string(),
            reply: reply.as_str().to_string(),
        }));
        match reply {
            Reply::Once => {
                let _ = p.tx.send(PermissionReply::Allow);
            }
            Reply::Always => {
                let data = {
                    let mut map = self.approvals.lock().unwrap_or_else(|e| e.into_inner());
                    let rules = map.entry(p.project.clone()).or_default();
                    for pat in &p.always {
                        rules
                            .0
                            .push(Rule::new(p.permission.clone(), pat.clone(), Action::Allow));
                    }
                    serde_json::to_string(&rules).unwrap_or_else(|_| "[]".into())
                };
                self.store.write1(Write::Approvals {
                    project: p.project.clone(),
                    data,
                });
                let _ = p.tx.send(PermissionReply::AllowAlways);
                // Other pending requests of the session that the approval now covers proceed.
                let covered: Vec<String> = self
                    .pending
                    .iter()
                    .filter(|e| e.session_id == p.session_id && e.project == p.project)
                    .filter(|e| {
                        let approvals = self
                            .approvals
                            .lock()
                            .unwrap_or_else(|er| er.into_inner())
                            .get(&e.project)
                            .cloned()
                            .unwrap_or_default();
                        e.patterns.iter().all(|pat| {
                            troupe_agents::permission::evaluate(
                                &e.permission,
                                pat,
                                &[&e.rules, &approvals],
                            ) == Action::Allow
                        })
                    })
                    .map(|e| e.key().clone())
                    .collect();
                for id in covered {
                    self.reply(&id, Reply::Once);
                }
            }
            Reply::Reject(feedback) => {
                let (reply, stops) = match (refusal, feedback) {
                    (Some(text), _) => (PermissionReply::Deny(text), false),
                    (None, Some(f)) => (
                        PermissionReply::Deny(format!("The user rejected this call and said: {f}")),
                        false,
                    ),
                    (None, None) => (
                        PermissionReply::Reject(if p.reason.is_empty() {
                            "The user rejected permission to run this tool call. The turn stops here."
                                .to_string()
                        } else {
                            format!(
                                "The user rejected permission to run this tool call ({}). The turn stops here.",
                                p.reason
                            )
                        }),
                        true,
                    ),
                };
                let _ = p.tx.send(reply);
                if !stops {
                    return true;
                }
                // A plain rejection also rejects the session's other pending requests.
                let others: Vec<String> = self
                    .pending
                    .iter()
                    .filter(|e| e.session_id == p.session_id)
                    .map(|e| e.key().clone())
                    .collect();
                for id in others {
                    self.reply(&id, Reply::Reject(None));
                }
            }
        }
        true
    }

    /// Pending requests (their `permission.asked` payloads), oldest first.
    pub fn pending(&self) -> Vec<Value> {
        payloads_in_id_order(&self.pending, |p| &p.info)
    }
}

/// The payloads (`info` of each entry) of a broker's pending requests, ordered by id: ids
/// are time-ordered, so oldest first. Shared by the permission and question brokers.
pub(crate) fn payloads_in_id_order<T>(
    pending: &DashMap<String, T>,
    info: impl Fn(&T) -> &Value,
) -> Vec<Value> {
    let mut v: Vec<(String, Value)> = pending
        .iter()
        .map(|e| (e.key().clone(), info(e.value()).clone()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v.into_iter().map(|(_, i)| i).collect()
}

/// The permission asker handed to the tools of one turn.
#[derive(Clone)]
pub struct TurnPermissions {
    /// The broker that holds the asks the user has not answered yet.
    pub broker: Arc<PermissionBroker>,
    /// Id of the session (`ses_…`) whose tools ask.
    pub session_id: SessionId,
    /// Project key for approvals (worktree path).
    pub project: String,
    /// Agent ruleset merged with the session's rules.
    pub rules: Arc<Ruleset>,
}

impl PermissionAsker for TurnPermissions {
    fn ask(&self, req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
        let me = self.clone();
        Box::pin(async move {
            me.broker
                .ask(&me.session_id, &me.project, me.rules.clone(), req, None)
                .await
        })
    }

    fn precheck(&self, req: &PermissionRequest) -> BoxFuture<'static, Option<PermissionReply>> {
        let me = self.clone();
        let req = req.clone();
        Box::pin(async move {
            let v = me.broker.verdict(&me.project, &me.rules, &req).await;
            (v.action == Action::Deny).then(|| PermissionReply::Deny(deny_message(&v)))
        })
    }

    fn allowed(&self, permission: &str, patterns: Vec<String>) -> BoxFuture<'static, Vec<bool>> {
        let me = self.clone();
        let permission = permission.to_string();
        Box::pin(async move {
            me.broker
                .allowed(&me.project, &me.rules, &permission, &patterns)
                .await
        })
    }

    fn gate(&self) -> BoxFuture<'static, Option<Arc<dyn RuleGate>>> {
        let me = self.clone();
        Box::pin(async move {
            let approvals = me.broker.approvals_for(&me.project).await;
            Some(Arc::new(RulesNow {
                rules: me.rules,
                approvals,
            }) as Arc<dyn RuleGate>)
        })
    }
}

/// The turn's rules and the project's approvals as they stood when a tool took its gate
/// ([`PermissionAsker::gate`]): allows exactly what [`PermissionBroker::ask`] answers with
/// a rule's allow (the same `decide_request`), so a hook or a person is never skipped.
struct RulesNow {
    rules: Arc<Ruleset>,
    approvals: Ruleset,
}

impl RuleGate for RulesNow {
    fn allows(&self, permission: &str, patterns: &[String]) -> bool {
        troupe_agents::permission::decide_request(
            permission,
            patterns,
            &[],
            &[],
            &[self.rules.as_ref(), &self.approvals],
        )
        .action
            == Action::Allow
    }
}

/// The text a rule's deny sends to the model: the verdict (permission, deciding rule, part)
/// and what to do instead.
fn deny_message(v: &Verdict) -> String {
    format!(
        "Permission {}. Do not retry this call; choose another approach or ask the user.",
        v.message
    )
}

/// A responder that answers every ask with a fixed policy (non-interactive runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Allow once.
    Allow,
    /// Reject the call (the model is told it was refused).
    Deny,
}

impl PermissionAsker for Policy {
    fn ask(&self, req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
        let reply = match self {
            Policy::Allow => PermissionReply::Allow,
            Policy::Deny if !req.reason.is_empty() => PermissionReply::Deny(format!(
                "Permission {}. This run is non-interactive, so nobody could approve it (auto-rejected; run in a terminal or pass --permission allow).",
                req.reason
            )),
            Policy::Deny => PermissionReply::Deny(format!(
                "permission {} for {} needs approval and this run is non-interactive (auto-rejected; run in a terminal or pass --permission allow)",
                req.permission,
                req.patterns.join(", ")
            )),
        };
        Box::pin(async move { reply })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_session::Bus;

    fn broker(responder: Arc<dyn PermissionAsker>) -> (tempfile::TempDir, Arc<PermissionBroker>) {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path().join("t.db"), Bus::new()).unwrap();
        (d, Arc::new(PermissionBroker::new(store, responder)))
    }

    fn req(perm: &str, pat: &str) -> PermissionRequest {
        PermissionRequest {
            permission: perm.into(),
            patterns: vec![pat.into()],
            always: vec!["*".into()],
            metadata: Value::Null,
            ..Default::default()
        }
    }

    /// The id of the oldest pending request, once one is pending.
    async fn first_pending(b: &PermissionBroker) -> String {
        loop {
            if let Some(p) = b.pending().first() {
                return p["id"].as_str().unwrap().to_string();
            }
            tokio::task::yield_now().await;
        }
    }

    struct Never;
    impl PermissionAsker for Never {
        fn ask(&self, _r: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
            Box::pin(futures::future::pending())
        }
    }

    #[tokio::test]
    async fn rules_decide_without_asking() {
        let (_d, b) = broker(Arc::new(Never));
        let mut rules = Ruleset::new();
        rules.0.push(Rule::new("*", "*", Action::Allow));
        rules.0.push(Rule::new("bash", "rm *", Action::Deny));
        let rules = Arc::new(rules);
        assert_eq!(
            b.ask(
                &"s".into(),
                "/p",
                rules.clone(),
                req("bash", "ls -la"),
                None
            )
            .await,
            PermissionReply::Allow
        );
        assert!(matches!(
            b.ask(&"s".into(), "/p", rules, req("bash", "rm -rf x"), None)
                .await,
            PermissionReply::Deny(_)
        ));
    }

    /// Issue 19's one-trip tools act on the gate's word without asking: it must allow
    /// exactly what `ask` answers with a rule's allow (rules and the project's approvals),
    /// and nothing that would deny or ask.
    #[tokio::test]
    async fn the_gate_allows_exactly_what_the_rules_allow_without_asking() {
        let (_d, b) = broker(Arc::new(Never));
        let mut rules = Ruleset::new();
        rules.0.push(Rule::new("read", "*", Action::Allow));
        rules.0.push(Rule::new("read", "secret/*", Action::Deny));
        rules.0.push(Rule::new("edit", "*", Action::Ask));
        rules.0.push(Rule::new("edit", "docs/*", Action::Allow));
        let rules = Arc::new(rules);
        // An "always" for edit notes/* (asked, then answered by the person).
        let (b2, r2) = (b.clone(), rules.clone());
        let h = tokio::spawn(async move {
            let mut r = req("edit", "notes/a.md");
            r.always = vec!["notes/*".into()];
            b2.ask(&"s".into(), "/p", r2, r, None).await
        });
        let id = first_pending(&b).await;
        assert!(b.reply(&id, Reply::Always));
        assert_eq!(h.await.unwrap(), PermissionReply::AllowAlways);

        let turn = TurnPermissions {
            broker: b.clone(),
            session_id: "s".into(),
            project: "/p".into(),
            rules: rules.clone(),
        };
        let gate = turn.gate().await.expect("a turn's asker has a gate");
        let cases = [
            ("read", "a.txt", true),
            ("read", "secret/key", false),
            ("edit", "a.txt", false),
            ("edit", "docs/x.md", true),
            ("edit", "notes/b.md", true),
            ("grep", "x", false),
            ("external_directory", "/etc/*", false),
        ];
        for (perm, pat, allowed) in cases {
            let verdict = b.verdict("/p", &rules, &req(perm, pat)).await;
            assert_eq!(
                verdict.action == Action::Allow,
                allowed,
                "{perm} {pat}: {verdict:?}"
            );
            assert_eq!(
                gate.allows(perm, &[pat.to_string()]),
                allowed,
                "{perm} {pat}"
            );
        }
        // Several patterns: allowed only when every one is.
        let both = ["a.txt".to_string(), "secret/key".to_string()];
        assert!(!gate.allows("read", &both));
        // An allowed one is what `ask` answers at once (the responder never answers).
        assert_eq!(
            turn.ask(req("edit", "notes/c.md")).await,
            PermissionReply::Allow
        );
    }

    #[tokio::test]
    async fn ask_waits_for_reply_and_always_is_remembered() {
        let (_d, b) = broker(Arc::new(Never));
        let rules = Arc::new(Ruleset::new()); // default: ask
        let b2 = b.clone();
        let r2 = rules.clone();
        let h = tokio::spawn(async move {
            b2.ask(&"s".into(), "/p", r2, req("edit", "a.txt"), None)
                .await
        });
        let id = first_pending(&b).await;
        assert!(b.reply(&id, Reply::Always));
        assert_eq!(h.await.unwrap(), PermissionReply::AllowAlways);
        // Now covered by the approval: no ask.
        assert_eq!(
            b.ask(&"s2".into(), "/p", rules, req("edit", "b.txt"), None)
                .await,
            PermissionReply::Allow
        );
    }

    #[tokio::test]
    async fn reject_feedback_reaches_the_caller_and_policy_answers() {
        let (_d, b) = broker(Arc::new(Never));
        let rules = Arc::new(Ruleset::new());
        let b2 = b.clone();
        let r2 = rules.clone();
        let h = tokio::spawn(async move {
            b2.ask(&"s".into(), "/p", r2, req("bash", "make"), None)
                .await
        });
        let id = first_pending(&b).await;
        b.reply(&id, Reply::Reject(Some("use cargo instead".into())));
        match h.await.unwrap() {
            PermissionReply::Deny(m) => assert!(m.contains("use cargo instead")),
            o => panic!("{o:?}"),
        }
        let (_d2, b) = broker(Arc::new(Policy::Deny));
        assert!(
            matches!(b.ask(&"s".into(), "/p", rules, req("bash", "make"), None).await, PermissionReply::Deny(m) if m.contains("non-interactive"))
        );
    }

    /// Issue 11: a plain reject stops the turn (`Reject`) and takes the session's other
    /// pending requests with it; a non-interactive policy's refusal is a `Deny` that says why
    /// (the deciding rule and part) and leaves other requests alone.
    #[tokio::test]
    async fn plain_reject_stops_and_policy_refusal_explains() {
        let (_d, b) = broker(Arc::new(Never));
        let rules = Arc::new(Ruleset::new());
        let spawn_ask = |pat: &'static str| {
            let b2 = b.clone();
            let r2 = rules.clone();
            tokio::spawn(async move { b2.ask(&"s".into(), "/p", r2, req("bash", pat), None).await })
        };
        let h1 = spawn_ask("make");
        let h2 = spawn_ask("make test");
        let ids = loop {
            let p = b.pending();
            if p.len() == 2 {
                break p;
            }
            tokio::task::yield_now().await;
        };
        assert!(
            ids[0]["reason"]
                .as_str()
                .unwrap()
                .contains("bash: needs approval by no matching rule (default ask)")
        );
        b.reply(ids[0]["id"].as_str().unwrap(), Reply::Reject(None));
        for h in [h1, h2] {
            match h.await.unwrap() {
                PermissionReply::Reject(m) => assert!(m.contains("turn stops"), "{m}"),
                o => panic!("{o:?}"),
            }
        }

        let (_d2, b) = broker(Arc::new(Policy::Deny));
        let mut rules = Ruleset::new();
        rules.push("bash", "*", Action::Allow);
        rules.push("bash", "rm *", Action::Deny);
        let rules = Arc::new(rules);
        let opaque = PermissionRequest {
            permission: "bash".into(),
            patterns: vec!["$(echo rm) -rf d".into()],
            opaque: vec!["the command word `$(echo rm)` is not a literal".into()],
            ..Default::default()
        };
        match b.ask(&"s".into(), "/p", rules.clone(), opaque, None).await {
            PermissionReply::Deny(m) => {
                assert!(m.contains("only known when it runs"), "{m}");
                assert!(m.contains("`$(echo rm)` is not a literal"), "{m}");
                assert!(m.contains("non-interactive"), "{m}");
            }
            o => panic!("{o:?}"),
        }
        let denied = PermissionRequest {
            permission: "bash".into(),
            patterns: vec!["ls".into(), "rm -rf d".into()],
            sources: vec!["ls".into(), "/bin/rm -rf d".into()],
            ..Default::default()
        };
        match b.ask(&"s".into(), "/p", rules, denied, None).await {
            PermissionReply::Deny(m) => assert!(
                m.contains("bash: denied by rule \"rm *\": /bin/rm -rf d"),
                "{m}"
            ),
            o => panic!("{o:?}"),
        }
    }
}
