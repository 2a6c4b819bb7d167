//! `troupe serve`: the runtime behind the HTTP API (troupe-server).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use troupe_actors::Runtime;
use troupe_server::{NeverAsk, Server, ServerOptions};

/// `troupe serve` options.
#[derive(clap::Parser, Debug)]
pub struct ServeArgs {
    /// Port to listen on (0 picks a free one; the real one is printed).
    #[arg(long, default_value_t = troupe_server::DEFAULT_PORT)]
    pub port: u16,
    /// Address to listen on. Anything but a loopback address requires a password.
    #[arg(long, default_value = "127.0.0.1")]
    pub hostname: String,
    /// Password required on every route (Bearer, Basic with any user, or ?token=); default:
    /// $TROUPE_SERVER_PASSWORD (set but empty is refused).
    #[arg(long)]
    pub password: Option<String>,
    /// Origins allowed by CORS (repeatable; `*` for any, only with a password). None: no
    /// CORS headers, and no other site's page may call the server.
    #[arg(long, num_args = 1..)]
    pub cors: Vec<String>,
    /// Working directory: its config is used and new sessions default to it.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Append log lines here instead of stderr (the directory is created); the format is
    /// `--log-format`'s, the filter $TROUPE_LOG's.
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    /// Also show a cluster's workers: listen to their heartbeats on this NATS server
    /// (e.g. nats://127.0.0.1:4222); `/actors` lists them under `nodes` (dead ones marked)
    /// and `/metrics` adds their series with a `node` label.
    #[arg(long, value_name = "URL")]
    pub cluster: Option<String>,
    /// Prefix of the cluster's subjects (as given to its workers).
    #[arg(long, value_name = "PREFIX", default_value = troupe_cluster::DEFAULT_PREFIX)]
    pub cluster_prefix: String,
}

/// The fleet of `--cluster` as the server's view of other nodes.
struct FleetView(troupe_cluster::fleet::Fleet);

impl troupe_server::FleetView for FleetView {
    fn nodes(&self) -> Vec<serde_json::Value> {
        // A node is strings, numbers and JSON already: it always serializes.
        self.0
            .nodes()
            .into_iter()
            .filter_map(|n| serde_json::to_value(n).ok())
            .collect()
    }

    fn metrics(&self) -> String {
        self.0.metrics()
    }
}

/// Run the server until Ctrl-C.
pub async fn serve(db: Option<PathBuf>, args: ServeArgs) -> Result<ExitCode> {
    // `--password`, else TROUPE_SERVER_PASSWORD; one set but empty or blank is a password
    // the user meant to set, so it is refused (check_bind), not read as "none".
    let password = args.password.clone().or_else(|| {
        std::env::var_os(troupe_server::PASSWORD_ENV).map(|v| v.to_string_lossy().into_owned())
    });
    let check = ServerOptions {
        hostname: args.hostname.clone(),
        password: password.clone(),
        cors: args.cors.clone(),
        ..ServerOptions::default()
    };
    // Refuse unsafe options before touching config or store.
    troupe_server::check_options(&check)?;
    let fleet = match &args.cluster {
        Some(url) => {
            let names = troupe_cluster::Names::new(&args.cluster_prefix)?;
            let fleet = troupe_cluster::fleet::Fleet::watch(
                url,
                &names,
                tokio_util::sync::CancellationToken::new(),
            )
            .await
            .map_err(|e| anyhow!("--cluster: {e}"))?;
            Some(troupe_server::Fleet(Arc::new(FleetView(fleet))))
        }
        None => None,
    };
    let cwd = crate::resolve_dir(args.dir.clone())?;
    let (mut config, agents) = crate::load_agents(&cwd)?;
    if let Some(m) = config.default_model() {
        crate::local::apply_detected_limits(&mut config, &m).await;
    }
    let own_files = crate::own_files(db.clone(), &[]);
    let store = crate::open_store(db)?;
    let runtime = Runtime::start_with_agents(
        store,
        config,
        agents,
        crate::registry(),
        Arc::new(NeverAsk),
        troupe_actors::RuntimeOptions {
            lease_label: "troupe serve".into(),
            // Questions are answered through the HTTP API and the web view.
            interactive: true,
            own_files,
            ..crate::runtime_options()?
        },
    )
    .await?;
    let opts = ServerOptions {
        hostname: args.hostname.clone(),
        port: args.port,
        directory: cwd,
        fleet,
        ..check
    };
    let server = match Server::bind(runtime.clone(), &opts).await {
        Ok(s) => s,
        Err(e) => {
            runtime.shutdown().await;
            return Err(anyhow!("{e}"));
        }
    };
    let addr = server.local_addr()?;
    let host = if args.hostname.contains(':') && !args.hostname.starts_with('[') {
        format!("[{}]", args.hostname)
    } else {
        args.hostname.clone()
    };
    // Before the startup line: a client that signals as soon as it reads the line gets the
    // orderly shutdown, not the early handler's exit 143.
    let mut sigs = crate::signals::Signals::take_over()?;
    println!("troupe server listening on http://{host}:{}", addr.port());
    let _ = std::io::stdout().flush();
    let token = server.shutdown_token();
    let rt2 = runtime.clone();
    tokio::spawn(async move {
        // Ctrl-C and SIGTERM (what systemd and containers send) alike.
        if sigs.next().await.is_some() {
            // Not `eprintln!`: it panics when stderr is a closed pipe (`… 2>&1 | head -1`),
            // which ended this task before the shutdown and left the server running.
            let _ = writeln!(std::io::stderr(), "troupe: shutting down");
            // Running turns end (so waiting `POST /message` requests answer), then the
            // server stops accepting and every `/event` stream ends.
            rt2.abort_all();
            token.cancel();
        }
    });
    // Turns that a killed process left unfinished (its tools still `running`) are repaired
    // now and whenever another holder dies, not only when someone prompts the session.
    let rt3 = runtime.clone();
    let recovery = tokio::spawn(async move {
        let mut every = tokio::time::interval(troupe_actors::recover::RECOVER_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if let Err(e) = rt3.recover_abandoned().await {
                tracing::warn!(error = %e, "looking for abandoned sessions failed");
            }
        }
    });
    let result = server.run().await;
    recovery.abort();
    runtime.shutdown().await;
    result.map_err(|e| anyhow!("{e}"))?;
    Ok(ExitCode::SUCCESS)
}
