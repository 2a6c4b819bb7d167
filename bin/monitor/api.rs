//! HTTP access to the server: one poll ([`Snapshot`]) of the tree, the counters and the
//! sessions' labels.

use super::*;

/// HTTP access to the server.
#[derive(Clone)]
pub(super) struct Api {
    pub(super) client: reqwest::Client,
    pub(super) base: String,
    pub(super) password: Option<String>,
    /// First prompt of each session seen (it never changes), so it is fetched once.
    pub(super) first_prompts: std::sync::Arc<std::sync::Mutex<HashMap<String, String>>>,
}

impl Api {
    pub(super) fn new(url: &str, password: Option<String>) -> Result<Api> {
        let base = url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("monitor: URL must start with http:// or https://, got {url:?}");
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Api {
            client,
            base,
            password,
            first_prompts: Default::default(),
        })
    }

    pub(super) async fn get(&self, path: &str) -> Result<reqwest::Response> {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(pw) = &self.password {
            req = req.bearer_auth(pw);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| anyhow!("cannot reach the troupe server at {}: {e}", self.base))?;
        let status = resp.status();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            bail!(
                "the troupe server at {} wants a password (--password or TROUPE_SERVER_PASSWORD)",
                self.base
            );
        }
        if !status.is_success() {
            bail!("GET {}{path}: HTTP {status}", self.base);
        }
        Ok(resp)
    }

    pub(super) async fn actors(&self) -> Result<ActorNode> {
        let v: Value = self
            .get("/actors")
            .await?
            .json()
            .await
            .context("GET /actors: invalid JSON")?;
        serde_json::from_value(v).context("GET /actors: unexpected shape")
    }

    pub(super) async fn metrics(&self) -> Result<Vec<(String, f64)>> {
        let text = self
            .get("/metrics")
            .await?
            .text()
            .await
            .context("GET /metrics")?;
        Ok(parse_metrics(&text))
    }

    /// Labels of the sessions in `tree`: titles from `GET /session`, first prompts (cached)
    /// from `GET /session/{id}/message` for sessions still on the default title.
    pub(super) async fn labels(&self, tree: &ActorNode) -> HashMap<String, String> {
        fn ids(n: &ActorNode, out: &mut Vec<String>) {
            if n.kind == "session" {
                out.push(n.id.clone());
            }
            for c in n
                .children
                .iter()
                .chain(n.nodes.iter().filter_map(|f| f.tree.as_ref()))
            {
                ids(c, out);
            }
        }
        let mut live = Vec::new();
        ids(tree, &mut live);
        if live.is_empty() {
            return HashMap::new();
        }
        let titles: HashMap<String, String> = match self.get("/session").await {
            Ok(resp) => resp
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|s| {
                    Some((
                        s["id"].as_str()?.to_string(),
                        s["title"].as_str().unwrap_or("").to_string(),
                    ))
                })
                .collect(),
            Err(_) => HashMap::new(),
        };
        let mut out = HashMap::new();
        for id in live {
            let title = titles.get(&id).cloned().unwrap_or_default();
            let label = session_label(&title, None);
            if !label.is_empty() {
                out.insert(id, label);
                continue;
            }
            let cached = self
                .first_prompts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
                .cloned();
            let prompt = match cached {
                Some(p) => p,
                None => {
                    let Some(p) = self.first_prompt(&id).await else {
                        continue;
                    };
                    self.first_prompts
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id.clone(), p.clone());
                    p
                }
            };
            out.insert(id, session_label(&title, Some(&prompt)));
        }
        out
    }

    /// The text of a session's first user message, if it has one yet.
    pub(super) async fn first_prompt(&self, id: &str) -> Option<String> {
        let v: Value = self
            .get(&format!("/session/{id}/message"))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let first = v.as_array()?.iter().find(|m| m["info"]["role"] == "user")?;
        let text: Vec<&str> = first["parts"]
            .as_array()?
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect();
        (!text.is_empty()).then(|| text.join(" "))
    }

    pub(super) async fn snapshot(&self) -> Snapshot {
        let started = Instant::now();
        let (tree, metrics) = tokio::join!(self.actors(), self.metrics());
        let latency = started.elapsed();
        let labels = match &tree {
            Ok(t) => self.labels(t).await,
            Err(_) => HashMap::new(),
        };
        match (tree, metrics) {
            (Ok(tree), Ok(metrics)) => Snapshot {
                tree: Some(tree),
                metrics,
                labels,
                error: None,
                latency,
                at: Some(Instant::now()),
            },
            (Ok(tree), Err(e)) => Snapshot {
                tree: Some(tree),
                metrics: Vec::new(),
                labels,
                error: Some(format!("{e:#}")),
                latency,
                at: Some(Instant::now()),
            },
            (Err(e), _) => Snapshot {
                error: Some(format!("{e:#}")),
                latency,
                ..Snapshot::default()
            },
        }
    }
}

/// The latest poll result.
#[derive(Debug, Clone, Default)]
pub(super) struct Snapshot {
    pub(super) tree: Option<ActorNode>,
    pub(super) metrics: Vec<(String, f64)>,
    /// Session id → title or first prompt.
    pub(super) labels: HashMap<String, String>,
    pub(super) error: Option<String>,
    pub(super) latency: Duration,
    pub(super) at: Option<Instant>,
}
