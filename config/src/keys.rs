//! Unknown-key check: every object key of a config document is compared with the keys its
//! place in the schema accepts, so a typo (`"modle"`) is an error naming the file, line,
//! column and the nearest known key instead of a silently ignored setting.
//!
//! Checked places: the top level, `provider.<id>`, `provider.<id>.models.<model>`, its
//! `limit`, `compaction` and `supervision` (an `mcp.<name>` entry refuses unknown keys
//! itself, naming the keys it takes). Provider `options` and model `options` are open by design
//! (their other keys go into the request body); `agent`, `permission`, `tools`, `server` and
//! the OpenCode-only keys are raw values checked by whoever interprets them.

use crate::error::ConfigError;
use crate::jsonc;

/// Top-level keys OpenCode's `opencode.json` schema defines that troupe does not use. They are
/// accepted (kept in `Config::extra`) so a whole `opencode.json` can be copied over unchanged.
/// Source: OpenCode `config/config.ts` `Config.Info` (v1.15).
pub(crate) const OPENCODE_ONLY_TOP_LEVEL_KEYS: &[&str] = &[
    "theme",
    "keybinds",
    "logLevel",
    "tui",
    "command",
    "watcher",
    "plugin",
    "share",
    "autoshare",
    "autoupdate",
    "disabled_providers",
    "enabled_providers",
    "username",
    "mode",
    "formatter",
    "lsp",
    "layout",
    "enterprise",
    "experimental",
];

/// Keys of a `provider.<id>` block: troupe's own plus OpenCode's `id`, `whitelist`, `blacklist`.
const PROVIDER_KEYS: &[&str] = &[
    "name",
    "npm",
    "api",
    "env",
    "options",
    "models",
    "id",
    "whitelist",
    "blacklist",
];

/// Keys of a model entry: troupe's own plus the rest of the models.dev / OpenCode model shape.
const MODEL_KEYS: &[&str] = &[
    "id",
    "name",
    "limit",
    "cost",
    "options",
    "headers",
    "tool_call",
    "reasoning",
    "temperature",
    "family",
    "attachment",
    "release_date",
    "last_updated",
    "knowledge",
    "open_weights",
    "modalities",
    "experimental",
    "status",
    "provider",
    "variants",
    "interleaved",
    "structured_output",
];

/// Keys of a model's `limit` (tokens).
const LIMIT_KEYS: &[&str] = &["context", "input", "output"];

/// Keys of `compaction`.
const COMPACTION_KEYS: &[&str] = &[
    "auto",
    "prune",
    "reserved",
    "tail_turns",
    "preserve_recent_tokens",
];

/// Keys of `supervision`.
const SUPERVISION_KEYS: &[&str] = &[
    "tool_restarts",
    "step_retries",
    "session_restarts",
    "period_secs",
    "backoff_ms",
    "read_only_tools",
    "mcp_restarts",
    "abort_background",
];

/// One object key found in a JSON text: the path of the object holding it (`[]` for array
/// elements), the decoded key and the byte offset of its opening quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyAt {
    pub path: Vec<String>,
    pub key: String,
    pub offset: usize,
}

/// Every object key of `json` (which must already be valid JSON: serde_json checked it, so the
/// nesting depth is bounded by its recursion limit) with its position.
pub(crate) fn object_keys(json: &str) -> Vec<KeyAt> {
    let mut scan = Scan {
        s: json,
        b: json.as_bytes(),
        i: 0,
        out: Vec::new(),
    };
    scan.value(&mut Vec::new());
    scan.out
}

struct Scan<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    out: Vec<KeyAt>,
}

impl Scan<'_> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    /// Consumes a string starting at `self.i` (a `"`), returning it decoded.
    fn string(&mut self) -> String {
        let start = self.i;
        self.i += 1;
        while let Some(&c) = self.b.get(self.i) {
            self.i += 1;
            match c {
                b'\\' => self.i += 1,
                b'"' => break,
                _ => {}
            }
        }
        let raw = self.s.get(start..self.i.min(self.s.len())).unwrap_or("");
        serde_json::from_str(raw).unwrap_or_default()
    }

    fn value(&mut self, path: &mut Vec<String>) {
        self.ws();
        match self.b.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                loop {
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b'}') => {
                            self.i += 1;
                            return;
                        }
                        Some(b',') => self.i += 1,
                        Some(b'"') => {
                            let offset = self.i;
                            let key = self.string();
                            self.ws();
                            if self.b.get(self.i) != Some(&b':') {
                                return;
                            }
                            self.i += 1;
                            self.out.push(KeyAt {
                                path: path.clone(),
                                key: key.clone(),
                                offset,
                            });
                            path.push(key);
                            self.value(path);
                            path.pop();
                        }
                        _ => return,
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                loop {
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b']') | None => {
                            self.i += 1;
                            return;
                        }
                        Some(b',') => self.i += 1,
                        Some(_) => {
                            let before = self.i;
                            path.push("[]".to_owned());
                            self.value(path);
                            path.pop();
                            if self.i == before {
                                return;
                            }
                        }
                    }
                }
            }
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                let before = self.i;
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
                {
                    self.i += 1;
                }
                if self.i == before {
                    self.i += 1;
                }
            }
            None => {}
        }
    }
}

/// The keys accepted at `path`, or `None` when that place is open (any key).
fn known_at(path: &[String]) -> Option<Vec<&'static str>> {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        [] => Some(
            crate::schema::KNOWN_TOP_LEVEL_KEYS
                .iter()
                .chain(OPENCODE_ONLY_TOP_LEVEL_KEYS)
                .copied()
                .collect(),
        ),
        ["provider", _] => Some(PROVIDER_KEYS.to_vec()),
        ["provider", _, "models", _] => Some(MODEL_KEYS.to_vec()),
        ["provider", _, "models", _, "limit"] => Some(LIMIT_KEYS.to_vec()),
        ["compaction"] => Some(COMPACTION_KEYS.to_vec()),
        ["supervision"] => Some(SUPERVISION_KEYS.to_vec()),
        ["cluster"] => Some(vec!["subagents"]),
        _ => None,
    }
}

/// Fails on the first key (in text order) that its place in the schema does not know, with
/// the nearest known key when one is close. `label` names the source in the error.
pub(crate) fn check_unknown_keys(label: &str, json: &str) -> Result<(), ConfigError> {
    for k in object_keys(json) {
        let Some(known) = known_at(&k.path) else {
            continue;
        };
        if known.contains(&k.key.as_str()) {
            continue;
        }
        let (line, column) = jsonc::line_col(json, k.offset);
        let suggestion = nearest(&k.key, &known).map(str::to_owned);
        return Err(ConfigError::UnknownKey {
            file: label.to_owned(),
            line,
            column,
            path: k.path.join("."),
            key: k.key,
            suggestion,
        });
    }
    Ok(())
}

/// The known key closest to `key` by edit distance with transpositions (optimal string
/// alignment, case-insensitive), if within `max(2, len/3)` edits; ties go to the key listed
/// first (troupe's own keys come before OpenCode-only ones).
pub(crate) fn nearest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let key_lc = key.to_lowercase();
    let max = (key.chars().count() / 3).max(2);
    let mut best: Option<(usize, &'a str)> = None;
    for &k in known {
        let d = osa_distance(&key_lc, &k.to_lowercase());
        if d <= max && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k)
}

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
/// neighbouring characters each cost 1.
fn osa_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// Permission keys troupe itself checks: the built-in tools' permissions (OpenCode's
/// `permission` schema: `read`, `edit`, `glob`, `grep`, `list`, `bash`, `task`,
/// `external_directory`, `todowrite`, `todoread`, `question`, `webfetch`, `websearch`,
/// `codesearch`, `lsp`, `skill`, `doom_loop`), the tool names that share `edit` (`write`,
/// `patch`, `apply_patch`, `multiedit`), troupe's `StructuredOutput` tool and the wildcard
/// `*`. Other keys may name MCP or custom tools, so an unknown one is a warning, not an error.
pub const BUILTIN_PERMISSION_KEYS: &[&str] = &[
    "*",
    "read",
    "edit",
    "write",
    "patch",
    "apply_patch",
    "multiedit",
    "glob",
    "grep",
    "list",
    "bash",
    "task",
    "external_directory",
    "todowrite",
    "todoread",
    "question",
    "webfetch",
    "websearch",
    "codesearch",
    "lsp",
    "skill",
    "doom_loop",
    "invalid",
    "StructuredOutput",
];

/// A key of a `permission` object (top level or `agent.<name>.permission`) found in a source,
/// kept until the merged config says which MCP servers exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PermissionKeyAt {
    /// `file:line:column` of the key.
    pub at: String,
    /// Dotted path of the key, e.g. `permission.bsh`.
    pub path: String,
    /// The key.
    pub key: String,
}

/// Every key of a `permission` object in `json` (a source's JSON text), with its place.
pub(crate) fn permission_keys(label: &str, json: &str) -> Vec<PermissionKeyAt> {
    object_keys(json)
        .into_iter()
        .filter_map(|k| {
            let p: Vec<&str> = k.path.iter().map(String::as_str).collect();
            let prefix = match p.as_slice() {
                ["permission"] => "permission".to_string(),
                ["agent", name, "permission"] => format!("agent.{name}.permission"),
                _ => return None,
            };
            let (line, column) = jsonc::line_col(json, k.offset);
            Some(PermissionKeyAt {
                at: format!("{label}:{line}:{column}"),
                path: format!("{prefix}.{}", k.key),
                key: k.key,
            })
        })
        .collect()
}

/// MCP tool names are `<server>_<tool>` with every character other than ASCII letters,
/// digits, `_` and `-` replaced by `_` (troupe-actors `mcp::content::sanitize`).
fn mcp_prefix(server: &str) -> String {
    let s: String = server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{s}_")
}

/// The warning for a permission key that no built-in permission and no configured MCP
/// server's tools (`<server>_…`) can be checked under, so its rule never applies:
/// `troupe.json:2:17: permission.bsh: no built-in permission or configured tool has this
/// name; did you mean bash?`. Keys with a wildcard (`*`, `?`) are patterns and not warned.
pub(crate) fn unknown_permission_warning(
    k: &PermissionKeyAt,
    mcp_servers: &[&str],
) -> Option<String> {
    if BUILTIN_PERMISSION_KEYS.contains(&k.key.as_str())
        || k.key.contains(['*', '?'])
        || mcp_servers
            .iter()
            .any(|s| k.key == *s || k.key.starts_with(&mcp_prefix(s)))
    {
        return None;
    }
    let hint = match nearest(&k.key, &BUILTIN_PERMISSION_KEYS[1..]) {
        Some(s) => format!("; did you mean {s}?"),
        None => " (a rule for a tool that does not exist never applies)".to_string(),
    };
    Some(format!(
        "{}: {}: no built-in permission or configured tool has this name{hint}",
        k.at, k.path
    ))
}

/// Line and column (1-based, column in bytes) of the first object key of the JSON(C) `text`,
/// in text order, for which `wanted(path, key)` holds; `path` holds the keys of the objects
/// around it (`[]` for an array element). `None` when no key does or `text` is not valid
/// JSON(C). For errors found after parsing (an agent's field, a permission action) to point
/// at their place like the parser's own.
pub fn find_key(text: &str, wanted: impl Fn(&[String], &str) -> bool) -> Option<(usize, usize)> {
    let json = jsonc::to_json(text);
    // `object_keys` needs valid JSON (its nesting bounded by serde_json's recursion limit).
    serde_json::from_str::<serde::de::IgnoredAny>(&json).ok()?;
    object_keys(&json)
        .into_iter()
        .find(|k| wanted(&k.path, &k.key))
        .map(|k| jsonc::line_col(&json, k.offset))
}
