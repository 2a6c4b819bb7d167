//! `ConfigError`: every variant renders as ONE line that says what is wrong and where.

use std::path::PathBuf;

/// Errors from loading config files and resolving models. `Display` is a single line;
/// file errors start with `<file>:<line>:<col>: ` like a compiler diagnostic.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A config file exists but could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The text is not JSON(C): e.g. `troupe.json:5:1: invalid JSON: trailing characters`.
    #[error("{file}:{line}:{column}: invalid JSON: {message}")]
    Syntax {
        /// File path, or `TROUPE_CONFIG_CONTENT`.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (bytes).
        column: usize,
        /// serde_json's message without its position suffix.
        message: String,
    },
    /// A value has the wrong type or is out of range, e.g.
    /// `troupe.json:3:14: invalid type: integer `5`, expected a string at provider.mock.options.baseURL`.
    #[error("{file}{}: {message} at {path}", position(*line, *column))]
    Type {
        /// File path, or `TROUPE_CONFIG_CONTENT`.
        file: String,
        /// 1-based line (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        column: usize,
        /// Dotted key path, e.g. `provider.mock.options.baseURL`.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// A key the schema does not know at that place, e.g.
    /// `troupe.json:2:3: unknown key "modle" (did you mean "model"?)`. Source files only; the
    /// places checked are listed in the `keys` module.
    #[error(
        "{file}:{line}:{column}: unknown key {key:?}{}{}",
        if path.is_empty() { String::new() } else { format!(" in {path}") },
        suggestion.as_ref().map(|s| format!(" (did you mean {s:?}?)")).unwrap_or_default()
    )]
    UnknownKey {
        /// File path, or `TROUPE_CONFIG_CONTENT`.
        file: String,
        /// 1-based line of the key.
        line: usize,
        /// 1-based column of the key's opening quote.
        column: usize,
        /// Dotted path of the object holding the key (empty at the top level).
        path: String,
        /// The unknown key.
        key: String,
        /// The nearest known key at that place, when one is close (edit distance).
        suggestion: Option<String>,
    },
    /// `{file:…}` / `{env:…}` substitution failed (missing file).
    #[error("{file}:{line}:{column}: {message}")]
    Substitution {
        /// Config file path, or `TROUPE_CONFIG_CONTENT`.
        file: String,
        /// 1-based line of the `{file:…}` token.
        line: usize,
        /// 1-based column of the token.
        column: usize,
        /// What failed.
        message: String,
    },
    /// A model spec without `/`.
    #[error("model must be provider/model, got {0:?}")]
    InvalidModelSpec(String),
    /// No built-in, catalog or configured provider has this id.
    #[error("unknown provider {provider:?} (known providers: {})", known.join(", "))]
    UnknownProvider {
        /// Requested provider id.
        provider: String,
        /// Known provider ids, sorted.
        known: Vec<String>,
    },
    /// The provider's models are listed explicitly in config and this one is not among them.
    #[error(
        "model not found: {provider}/{model}.{}",
        suggestion_text(provider, suggestions, available)
    )]
    ModelNotFound {
        /// Provider id.
        provider: String,
        /// Requested model id.
        model: String,
        /// Closest model ids (edit distance), best first.
        suggestions: Vec<String>,
        /// All model ids of the provider, sorted.
        available: Vec<String>,
    },
    /// A provider has no base URL (user provider without `options.baseURL` / `api`).
    #[error("provider {0:?} has no base URL: set provider.{0}.options.baseURL")]
    MissingBaseUrl(String),
}

/// `:line:column`, or nothing when the position is unknown (0): a merged value or a file
/// such as `auth.json` checked after parsing has no place in a text to point at.
fn position(line: usize, column: usize) -> String {
    match (line, column) {
        (0, _) => String::new(),
        (l, 0) => format!(":{l}"),
        (l, c) => format!(":{l}:{c}"),
    }
}

fn suggestion_text(provider: &str, suggestions: &[String], available: &[String]) -> String {
    if !suggestions.is_empty() {
        let names: Vec<String> = suggestions
            .iter()
            .map(|m| format!("{provider}/{m}"))
            .collect();
        format!(" Did you mean {}?", names.join(", "))
    } else if !available.is_empty() {
        format!(" Available: {}", available.join(", "))
    } else {
        String::new()
    }
}
