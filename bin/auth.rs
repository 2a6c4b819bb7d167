//! `troupe auth login|logout|list`: API keys stored in the user's config directory
//! (`<config dir>/auth.json`, mode 0600), used after the config's `apiKey` and the provider's
//! key variables.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use serde_json::{Map, Value, json};
use troupe_config::LoadedConfig;

/// `troupe auth …`.
#[derive(Subcommand, Debug)]
pub enum AuthCommand {
    /// Store an API key for PROVIDER: asked for without echo in a terminal, else read from
    /// the first line of standard input.
    Login {
        /// Provider id (`openai`, `anthropic`, a `provider` block of your config, …).
        provider: String,
    },
    /// Remove the stored key of PROVIDER.
    Logout {
        /// Provider id.
        provider: String,
    },
    /// List the providers with a stored key (keys are not shown).
    List,
}

fn auth_path() -> std::path::PathBuf {
    troupe_config::global_config_dir().join(troupe_config::AUTH_FILE_NAME)
}

fn read_raw(path: &Path) -> Result<Map<String, Value>> {
    // Validates the shape first (errors name the file).
    troupe_config::read_auth(path).map_err(|e| anyhow!("{e}"))?;
    match std::fs::read_to_string(path) {
        Ok(t) => match serde_json::from_str::<Value>(&t) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Ok(Map::new()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Map::new()),
        Err(e) => Err(anyhow!("{}: {e}", path.display())),
    }
}

/// Writes the auth file readable by the user only (0600), through a temporary file renamed
/// over it, so a crash never leaves half a file.
fn write_raw(path: &Path, map: &Map<String, Value>) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow!("{}: no parent directory", path.display()))?;
    std::fs::create_dir_all(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    let tmp = dir.join(format!(".auth.json.{}", std::process::id()));
    let text = serde_json::to_string_pretty(&Value::Object(map.clone()))?;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(&tmp)
        .map_err(|e| anyhow!("{}: {e}", tmp.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The mode above applies only to a new file; a leftover one is narrowed here.
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| anyhow!("{}: {e}", tmp.display()))?;
    }
    f.write_all(text.as_bytes())
        .and_then(|_| f.write_all(b"\n"))
        .and_then(|_| f.sync_all())
        .map_err(|e| anyhow!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| anyhow!("{}: {e}", path.display()))
}

fn read_key(provider: &str) -> Result<String> {
    let key = if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        rpassword::prompt_password(format!("API key for {provider} (not shown): "))
            .map_err(|e| anyhow!("cannot read the key: {e}"))?
    } else {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| anyhow!("cannot read the key from standard input: {e}"))?;
        line
    };
    let key = key.trim().to_string();
    if key.is_empty() {
        bail!("no key given for {provider}");
    }
    Ok(key)
}

/// Runs an auth command. Only `login` reads the config (`config` loads it), to know the
/// providers its `provider` blocks add; a config that does not load (a typo in a project's
/// `troupe.json`) leaves the built-in and catalog providers known, and is named only when
/// the provider is not among them: the keys live in the user's config directory, not in the
/// project.
pub fn run(config: impl FnOnce() -> Result<LoadedConfig>, cmd: AuthCommand) -> Result<ExitCode> {
    let path = auth_path();
    match cmd {
        AuthCommand::Login { provider } => {
            let (known, unread) = match config() {
                Ok(c) => (c.provider_ids(), None),
                Err(e) => (LoadedConfig::default().provider_ids(), Some(e)),
            };
            if !known.contains(&provider) {
                let unread = unread
                    .map(|e| {
                        format!(
                            "; the providers of your config are not known, it did not load: {e:#}"
                        )
                    })
                    .unwrap_or_default();
                bail!(
                    "unknown provider {provider:?} (known providers: {}){unread}",
                    known.join(", ")
                );
            }
            let key = read_key(&provider)?;
            let mut map = read_raw(&path)?;
            map.insert(provider.clone(), json!({"type": "api", "key": key}));
            write_raw(&path, &map)?;
            eprintln!("stored the key for {provider} in {}", path.display());
        }
        AuthCommand::Logout { provider } => {
            let mut map = read_raw(&path)?;
            if map.remove(&provider).is_none() {
                bail!("no stored key for {provider} in {}", path.display());
            }
            write_raw(&path, &map)?;
            eprintln!("removed the key for {provider} from {}", path.display());
        }
        AuthCommand::List => {
            let map = read_raw(&path)?;
            if map.is_empty() {
                println!("no stored keys ({})", path.display());
            }
            for p in map.keys() {
                println!("{p}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
