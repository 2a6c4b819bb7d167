//! Bash command analysis for permission checks (OpenCode `tool/shell.ts` + `permission/arity.ts`,
//! §6.4), on the syntax tree of `tree-sitter-bash`.
//!
//! [`analyze`] parses a command line and walks every node of the tree, so a command is found
//! wherever bash would run it: in lists, pipelines, subshells, `{ …; }` groups, command and
//! process substitutions, `if`/`for`/`while`/`until`/`case` bodies, function bodies, and here-
//! document bodies. Each simple command becomes a [`Part`] whose patterns are *normalized*
//! command words (quotes and backslashes removed, the command word reduced to its file name,
//! blanks collapsed), with `VAR=x` prefixes, wrappers (`sudo`, `env`, `timeout`, `xargs`, …)
//! and git's global options skipped. Scripts a command runs itself (`sh -c '…'`, `eval …`,
//! `find … -exec … ;`, `watch '…'`) are parsed and walked the same way.
//!
//! What the command runs that cannot be known before it runs is reported in
//! [`Analysis::opaque`] (one reason each): a command word that is not a literal, a shell or
//! interpreter reading its program from stdin, a descriptor, a pipe or a here-document,
//! inline interpreter code (`python -c`), `eval`/`source` of a non-literal, a script written
//! and run in the same call, `sed`/`awk` programs that write or run, variables that make
//! programs run other code (`LD_PRELOAD`, `GIT_SSH_COMMAND`, …), git configuration that
//! defines aliases or commands, programs that run command strings (`sqlite3`, `ed`, `tmux`),
//! code in arithmetic and subscripts (also of names builtins evaluate: `let`, `unset`,
//! `test -v`, `declare`, …; see `names`), traps, aliases and parse errors. The permission layer turns each into at least an "ask" when the ruleset restricts
//! `bash` or denies any path (fail closed; tables in `bash_rules`).
//!
//! Every path a command touches is reported in [`Analysis::paths`]: redirection targets,
//! write targets of `tee`/`dd of=`/`cp`/`mv`/`install`/`ln`/`rm`/`touch`/`mkdir`/`sed -i`/
//! `find -delete`/…, operands of file commands, and path-like arguments of any command
//! (absolute, `~`, or containing `..`), joined to every directory an earlier `cd` may have
//! left (a `cd` may fail, so the old directory stays possible unless it is joined by `&&`).
//! A directory a command reads whole (`grep -r`, `rg`, `tar c`, `cp -r`, `find … -exec`) is
//! marked [`PathUse::recursive`]: the permission layer lists the files under it.
//! Paths only known when the command runs (`> $F`, `cat $(…)/x`, after a `cd` to an unknown
//! directory, or after a command that may have made links: `tar x`, `git clone`, `cp -a`) are
//! reported in [`Analysis::unknown_paths`].

use std::collections::HashMap;

use tree_sitter::{Node, Parser};

use crate::bash_rules::{self, WRAPPERS};

/// How many leading words name "the command" for `always` patterns (OpenCode
/// `permission/arity.ts` idea, own table): the longest matching prefix wins, commands not
/// listed use 1 word. `git checkout main` → `git checkout *`, `npm run dev` → `npm run dev *`.
pub const ARITY: &[(&str, usize)] = &[
    ("git", 2),
    ("git remote", 3),
    ("git stash", 3),
    ("git config", 3),
    ("npm", 2),
    ("npm run", 3),
    ("npm exec", 3),
    ("npx", 2),
    ("pnpm", 2),
    ("pnpm run", 3),
    ("pnpm exec", 3),
    ("pnpm dlx", 3),
    ("yarn", 2),
    ("yarn run", 3),
    ("bun", 2),
    ("bun run", 3),
    ("bun x", 3),
    ("bunx", 2),
    ("deno", 2),
    ("deno task", 3),
    ("cargo", 2),
    ("rustup", 2),
    ("rustup toolchain", 3),
    ("go", 2),
    ("go mod", 3),
    ("docker", 2),
    ("docker compose", 3),
    ("docker container", 3),
    ("docker image", 3),
    ("docker network", 3),
    ("docker volume", 3),
    ("podman", 2),
    ("kubectl", 2),
    ("helm", 2),
    ("terraform", 2),
    ("gh", 3),
    ("glab", 3),
    ("aws", 3),
    ("gcloud", 3),
    ("az", 3),
    ("pip", 2),
    ("pip3", 2),
    ("uv", 2),
    ("uv run", 3),
    ("uv pip", 3),
    ("poetry", 2),
    ("poetry run", 3),
    ("python -m", 3),
    ("python3 -m", 3),
    ("brew", 2),
    ("apt", 2),
    ("apt-get", 2),
    ("dnf", 2),
    ("yum", 2),
    ("pacman", 2),
    ("systemctl", 2),
    ("make", 2),
    ("just", 2),
    ("mvn", 2),
    ("gradle", 2),
    ("dotnet", 2),
    ("composer", 2),
    ("bundle", 2),
    ("bundle exec", 3),
    ("rails", 2),
    ("mix", 2),
    ("swift", 2),
    ("zig", 2),
];

/// Shells whose script is analysed (`-c SCRIPT`), or which read it from stdin.
const SHELLS: &[&str] = &[
    "sh", "bash", "rbash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh", "oksh", "loksh",
    "bosh",
];

/// Commands that change the directory the following commands run in.
const CD_COMMANDS: &[&str] = &["cd", "chdir", "pushd", "popd"];

/// Paths that are not files a command writes to or reads from the project's point of view.
const SPECIAL_PATHS: &[&str] = &[
    "/dev/null",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
];

/// Nesting limit for scripts run by commands (`sh -c`, `eval`) parsed again; deeper nesting
/// is opaque.
const MAX_NESTING: usize = 16;

/// One simple command found in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The command as written (whitespace runs collapsed), for messages.
    pub source: String,
    /// Normalized texts matched against `bash` rules: the whole command, then the command
    /// after each wrapper (`sudo rm -rf d` → `["sudo rm -rf d", "rm -rf d"]`). Never empty.
    pub patterns: Vec<String>,
    /// "Always" patterns: the words before the innermost command + its arity prefix + `" *"`
    /// (`sudo rm -rf d` → `["sudo rm *", "rm *"]`).
    pub always: Vec<String>,
}

/// A path a command touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathUse {
    /// The path as the command sees it after unquoting, joined to the directory of an earlier
    /// literal `cd` (relative to the working directory, absolute, or `~`-based).
    pub path: String,
    /// The command writes (creates, truncates, deletes, moves onto) it.
    pub write: bool,
    /// The command reads every file under it (`grep -r x dir`, `tar c dir`, `cp -r dir d`,
    /// `find dir -exec …`): which files is only known by looking at the disk.
    pub recursive: bool,
    /// With `recursive`: the reader skips hidden files and what `.gitignore` and `.ignore`
    /// files exclude, as `rg` and `ag` do unless told otherwise (`-u`, `--hidden`).
    pub filtered: bool,
    /// The command lists every name under it, following symbolic links into directories
    /// (`ls -RL`, `find -L`, `find … -follow`, `tree -l`, `du -L`; `chown -RL` and `chgrp
    /// -RL` change the owner of what they reach): no file's content is read, but every
    /// place a link leads to is reached, so each is checked as if it were named
    /// (`external_directory`).
    pub listed: bool,
    /// A glob operand of a command that shows each match itself (`ls *`, `du -s o*`, `stat
    /// -L o*`, `tree *`, `find -H o*`): every match, a directory or a link to one too, is
    /// checked where it really is, as if it were named (`ls outlink` lists what the link
    /// leads to). A reader (`cat *`) only reads the files it matches, so a link to a
    /// directory among its matches reads nothing and is not checked.
    pub named: bool,
    /// The command that touches it, as written.
    pub source: String,
}

/// A path a command touches that is only known when it runs (`cat $(echo ..)/x`,
/// `echo x > $OUT`, a path relative to a directory a `cd` may or may not have entered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPath {
    /// One sentence naming the command and the word, for the ask message.
    pub reason: String,
    /// The command may write there.
    pub write: bool,
}

/// Result of [`analyze`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command, in source order (`cd` gives none: its path is in `paths`).
    pub parts: Vec<Part>,
    /// Why what the command runs cannot be known before it runs, one sentence each naming
    /// the offending text (deduplicated): the `bash` request asks because of them.
    pub opaque: Vec<String>,
    /// Paths the command touches (deduplicated).
    pub paths: Vec<PathUse>,
    /// Paths the command touches that are only known when it runs (deduplicated): the
    /// `external_directory` request (and the `edit` request for writes) asks because of them.
    pub unknown_paths: Vec<UnknownPath>,
}

impl Analysis {
    /// All `bash` patterns with the source text of their part (same order), deduplicated.
    pub fn patterns_with_sources(&self) -> (Vec<String>, Vec<String>) {
        let mut pats = Vec::new();
        let mut srcs = Vec::new();
        for p in &self.parts {
            for pat in &p.patterns {
                if !pats.contains(pat) {
                    pats.push(pat.clone());
                    srcs.push(p.source.clone());
                }
            }
        }
        (pats, srcs)
    }

    /// All "always" patterns, deduplicated, in order.
    pub fn always(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in &self.parts {
            for a in &p.always {
                if !out.contains(a) {
                    out.push(a.clone());
                }
            }
        }
        out
    }
}

/// Parse `command` with tree-sitter-bash and collect its commands, opaque constructs and the
/// paths it touches (see the module docs). Never panics on any input; a command the parser
/// cannot make sense of is reported as opaque.
pub fn analyze(command: &str) -> Analysis {
    let mut w = Walker {
        out: Analysis::default(),
        cd: Cd::here(),
        cd_ok: None,
        last_cmd_cd: Cd::here(),
        cd_seen: 0,
        links: None,
        vars: HashMap::new(),
        link_dests: Vec::new(),
        written: Vec::new(),
        xargs_repl: None,
        in_find_exec: false,
        recursive: None,
        listing: false,
        naming: false,
        own_git_config: false,
        cd_ok_set_by_cd: false,
        level: 0,
    };
    w.script(command, 0);
    w.out
}

/// Arity prefix of a command's normalized words (longest dictionary match in [`ARITY`], else
/// 1 word; never more words than there are); a flag ends the prefix.
pub fn arity_prefix(words: &[String]) -> Vec<String> {
    if words.is_empty() {
        return Vec::new();
    }
    let mut arity = 1usize;
    let mut best = 0usize;
    for (key, n) in ARITY {
        let parts: Vec<&str> = key.split(' ').collect();
        if parts.len() <= words.len()
            && parts.len() > best
            && parts.iter().zip(words).all(|(a, b)| a == b)
        {
            best = parts.len();
            arity = *n;
        }
    }
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if i >= arity || (i > 0 && w.starts_with('-')) {
            break;
        }
        out.push(w.clone());
    }
    out
}

/// What is known about a shell variable assigned in the command.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Var {
    /// A literal value without code in it.
    Literal,
    /// Only known when it runs (`x=$(cat f)`, `read x`), or a literal holding code
    /// (`x='a[$(rm d)]'`, evaluated by arithmetic).
    Unknown,
}

/// One shell word: its value after quote removal when it is a literal, and its text as
/// written.
#[derive(Debug, Clone)]
struct Word {
    lit: Option<String>,
    raw: String,
    /// Unquoted glob or brace characters: the value is only known after expansion.
    glob: bool,
    /// The literal parts with each expansion replaced by `\0` (`$(echo ..)/x` → `\0/x`).
    skel: String,
}

impl Word {
    fn plain(s: &str) -> Word {
        Word {
            lit: Some(s.to_string()),
            raw: s.to_string(),
            glob: false,
            skel: s.to_string(),
        }
    }

    /// The value `v` cut from this word (`--opt=VALUE`, `-oVALUE`): literal when the word is,
    /// else only known when it runs.
    fn part(&self, v: &str) -> Word {
        if self.lit.is_some() {
            return Word::plain(v);
        }
        let skel = match self.skel.split_once('=') {
            Some((_, after)) => after.to_string(),
            None => "\0".to_string(),
        };
        Word {
            lit: None,
            raw: v.to_string(),
            glob: false,
            skel,
        }
    }

    /// Text for patterns: the literal value, else the text as written.
    fn text(&self) -> &str {
        self.lit.as_deref().unwrap_or(&self.raw)
    }
}

struct Walker {
    out: Analysis,
    /// Directory the next command runs in.
    cd: Cd,
    /// Directory when the command just walked succeeded, when it differs from `cd` (set by a
    /// `cd`, read by `&&` and `||`).
    cd_ok: Option<Cd>,
    /// The directory the last simple command started in.
    last_cmd_cd: Cd,
    /// How many `cd`-like commands were walked (a function body that `cd`s changes the
    /// directory of whatever runs after it is called).
    cd_seen: usize,
    /// Set by a command that may create symbolic links the analysis cannot see (`tar x`,
    /// `git clone`, `ln` with a computed target): later relative paths are unknown.
    links: Option<String>,
    /// Variables assigned in the command so far.
    vars: HashMap<String, Var>,
    /// Destinations of copied or moved files (which may be symbolic links resolving
    /// differently there): later paths through them are unknown.
    link_dests: Vec<String>,
    /// Paths written so far (as recorded), to spot a script written and run in one call.
    written: Vec<String>,
    /// The replace string of an enclosing `xargs -I`/`-i`/`--replace`, while its command is
    /// analysed: words holding it are built from the input.
    xargs_repl: Option<String>,
    /// A `find -exec` command is being analysed (`{}` is a file name it finds).
    in_find_exec: bool,
    /// The path being recorded is read recursively (see [`PathUse::recursive`]), and
    /// whether the reader skips hidden and ignored files ([`PathUse::filtered`]).
    recursive: Option<bool>,
    /// The path being recorded is listed through links (see [`PathUse::listed`]).
    listing: bool,
    /// The glob being recorded names each of its matches to the command (see
    /// [`PathUse::named`]).
    naming: bool,
    /// The path being recorded is the repository's own configuration, written by `git
    /// config` (whose keys are checked there): an edit under the edit rules, not the opaque
    /// "writes git's configuration or hooks" of any other command.
    own_git_config: bool,
    /// The command just analysed was a `cd` that set `cd_ok`.
    cd_ok_set_by_cd: bool,
    /// Current depth in the syntax tree (all scripts together), bounded by [`MAX_TREE_DEPTH`].
    level: usize,
}

/// Syntax-tree depth beyond which nodes are not walked (the command is opaque instead), so a
/// hostile nesting cannot exhaust the stack.
const MAX_TREE_DEPTH: usize = 400;

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn basename(s: &str) -> String {
    let t = s.trim_end_matches('/');
    t.rsplit('/').next().unwrap_or(t).to_string()
}

fn is_assignment(s: &str) -> bool {
    s.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Quote a text for a message.
fn q(s: &str) -> String {
    let s = collapse(s);
    let s: String = if s.chars().count() > 80 {
        s.chars().take(77).collect::<String>() + "..."
    } else {
        s
    };
    format!("`{s}`")
}

mod cd;
mod file_commands;
mod git;
mod names;
mod options;
mod paths;
mod recursive;
mod runners;
mod scripts;
mod simple;
mod syntax;
mod walk;

use {cd::*, options::*, syntax::*};

#[cfg(test)]
mod tests;
