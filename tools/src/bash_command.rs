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
//! defines aliases or commands, code in arithmetic and subscripts, traps, aliases and parse
//! errors. The permission layer turns each into at least an "ask" when the ruleset restricts
//! `bash` or denies any path (fail closed; tables in `bash_rules`).
//!
//! Every path a command touches is reported in [`Analysis::paths`]: redirection targets,
//! write targets of `tee`/`dd of=`/`cp`/`mv`/`install`/`ln`/`rm`/`touch`/`mkdir`/`sed -i`/
//! `find -delete`/…, operands of file commands, and path-like arguments of any command
//! (absolute, `~`, or containing `..`), joined to every directory an earlier `cd` may have
//! left (a `cd` may fail, so the old directory stays possible unless it is joined by `&&`).
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

/// Git global options that take a separate value (`git -C dir push` → `git push`).
const GIT_OPTS_WITH_VALUE: &[&str] = &[
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--config-env",
    "--super-prefix",
    "--attr-source",
];

/// Git config keys (prefix match, lower case) that only change formatting, identity or
/// plain behaviour. Any other key set inline (`-c KEY=…`) or with `git config` is opaque:
/// many keys name a command git runs (`core.sshCommand`, `diff.<driver>.textconv`,
/// `submodule.<name>.update=!cmd`, `trailer.<t>.cmd`), define an alias, enable a transport
/// (`protocol.ext.allow`) or make a typo run a command (`help.autocorrect`).
const GIT_SAFE_KEYS: &[&str] = &[
    "user.",
    "color.",
    "advice.",
    "log.",
    "status.",
    "column.",
    "i18n.",
    "blame.",
    "gc.",
    "pack.",
    "init.defaultbranch",
    "core.autocrlf",
    "core.filemode",
    "core.ignorecase",
    "core.quotepath",
    "core.whitespace",
    "core.safecrlf",
    "core.eol",
    "core.longpaths",
    "core.precomposeunicode",
    "core.abbrev",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "fetch.prune",
    "fetch.prunetags",
    "rebase.autosquash",
    "rebase.autostash",
    "rebase.updaterefs",
    "merge.conflictstyle",
    "merge.ff",
    "diff.algorithm",
    "diff.renames",
    "diff.colormoved",
    "diff.mnemonicprefix",
    "diff.noprefix",
    "diff.context",
    "commit.verbose",
    "commit.cleanup",
    "commit.gpgsign",
    "tag.sort",
    "branch.sort",
    "grep.linenumber",
    "grep.extendedregexp",
    "format.pretty",
    "checkout.defaultremote",
    "rerere.enabled",
    "protocol.version",
    "http.postbuffer",
    "http.version",
];

/// Whether setting the git configuration `key` (lower case) can make git run a command or
/// mean something else by a subcommand (see [`GIT_SAFE_KEYS`]).
fn git_key_risky(key: &str) -> bool {
    !GIT_SAFE_KEYS.iter().any(|p| {
        if p.ends_with('.') {
            key.starts_with(p)
        } else {
            key == *p
        }
    })
}

/// Options whose value is code the program runs (`tar --to-command=CMD`, `vim -c CMD`,
/// `sort --compress-program=CMD`, `man -P CMD`): (program, options).
const CODE_OPTIONS: &[(&str, &[&str])] = &[
    (
        "tar",
        &[
            "--to-command",
            "-I",
            "--use-compress-program",
            "--checkpoint-action",
            "-F",
            "--info-script",
            "--new-volume-script",
            "--rsh-command",
            "--rmt-command",
        ],
    ),
    ("zip", &["-TT", "--unzip-command"]),
    ("sort", &["--compress-program"]),
    ("man", &["-P", "--pager", "-H", "--html"]),
    ("vim", &["-c", "--cmd", "-S"]),
    ("nvim", &["-c", "--cmd", "-S", "-l"]),
    ("vi", &["-c", "--cmd", "-S"]),
    ("ex", &["-c", "--cmd", "-S"]),
    ("view", &["-c", "--cmd", "-S"]),
    (
        "emacs",
        &[
            "--eval",
            "-l",
            "--load",
            "-f",
            "--funcall",
            "--script",
            "-x",
        ],
    ),
    ("sqlite3", &["-cmd", "-init"]),
    ("psql", &["-c", "--command", "-f", "--file"]),
    ("mysql", &["-e", "--execute"]),
    ("R", &["-e"]),
    ("octave", &["--eval"]),
    ("gnuplot", &["-e"]),
    ("dc", &["-e", "--expression", "-f"]),
    ("ipython", &["-c"]),
    ("cargo", &["--config"]),
    ("npx", &["-c", "--call"]),
    ("npm", &["-c", "--call"]),
    ("pnpm", &["-c"]),
    ("make", &["--eval", "-E"]),
    ("gmake", &["--eval", "-E"]),
];

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

/// Directory the next commands run in, relative to the working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cd {
    /// One of these literal directories (relative to the working directory, absolute, or
    /// `~`-based; `""` is the working directory itself): a `cd` that may have failed leaves
    /// both the old and the new directory possible.
    Known(Vec<String>),
    /// Only known when the command runs (`cd $X`, `cd -`, `popd`, a function that `cd`s).
    Unknown(String),
}

/// More candidate directories than this make the directory unknown.
const MAX_CD_CANDIDATES: usize = 8;

impl Cd {
    fn here() -> Cd {
        Cd::Known(vec![String::new()])
    }

    /// Either state (after a command that may or may not have changed directory).
    fn union(a: &Cd, b: &Cd) -> Cd {
        match (a, b) {
            (Cd::Unknown(u), _) | (_, Cd::Unknown(u)) => Cd::Unknown(u.clone()),
            (Cd::Known(x), Cd::Known(y)) => {
                let mut v = x.clone();
                for d in y {
                    if !v.contains(d) {
                        v.push(d.clone());
                    }
                }
                Cd::Known(v)
            }
        }
    }
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

impl Walker {
    fn opaque(&mut self, reason: String) {
        if !self.out.opaque.contains(&reason) {
            self.out.opaque.push(reason);
        }
    }

    /// Parse and walk one script (the whole command line, or a script run by a command).
    fn script(&mut self, text: &str, depth: usize) {
        if depth > MAX_NESTING {
            self.opaque(format!(
                "scripts nested more than {MAX_NESTING} levels deep are not analysed: {}",
                q(text)
            ));
            return;
        }
        let mut parser = Parser::new();
        if parser
            .set_language(&tree_sitter_bash::LANGUAGE.into())
            .is_err()
        {
            self.opaque("the bash parser could not be loaded".into());
            return;
        }
        let joined = join_continuations(text);
        let text = joined.as_str();
        let Some(tree) = parser.parse(text, None) else {
            self.opaque(format!("the command could not be parsed: {}", q(text)));
            return;
        };
        let root = tree.root_node();
        if root.has_error() {
            let at = first_error(root)
                .map(|n| q(&text[n.byte_range()]))
                .unwrap_or_else(|| q(text));
            self.opaque(format!(
                "the command is not valid bash (parse error near {at})"
            ));
        }
        self.walk(root, text, depth);
    }

    fn walk(&mut self, node: Node<'_>, src: &str, depth: usize) {
        if self.level >= MAX_TREE_DEPTH {
            self.opaque(format!(
                "the command nests more than {MAX_TREE_DEPTH} levels deep and is not analysed"
            ));
            return;
        }
        self.level += 1;
        self.walk_node(node, src, depth);
        self.level -= 1;
    }

    fn walk_node(&mut self, node: Node<'_>, src: &str, depth: usize) {
        match node.kind() {
            "command" => self.command(node, src, depth),
            "command_substitution" if src[node.byte_range()].starts_with('`') => {
                // Inside backticks `\\`, `\``, `\$` stand for the character itself before the
                // body is parsed (bash "Command Substitution"); the tree does not do that, so
                // the body is parsed again after undoing them.
                let text = &src[node.byte_range()];
                let body = text[1..].strip_suffix('`').unwrap_or(&text[1..]);
                let saved = self.cd.clone();
                self.script(&unescape_backtick(body), depth + 1);
                self.cd = saved;
            }
            "subshell" | "command_substitution" | "process_substitution" | "pipeline" => {
                // A child process: its `cd` does not move what comes after.
                let saved = self.cd.clone();
                self.children(node, src, depth);
                self.cd = saved;
                self.cd_ok = None;
            }
            "function_definition" => {
                // The body runs when the function is called, in the calling shell: a body
                // that changes directory leaves every later directory unknown.
                let saved = self.cd.clone();
                let seen = self.cd_seen;
                self.children(node, src, depth);
                self.cd = saved;
                self.cd_ok = None;
                if self.cd_seen != seen {
                    let text = collapse(&src[node.byte_range()]);
                    self.cd = Cd::Unknown(text);
                }
            }
            "list" => self.list(node, src, depth),
            "heredoc_redirect" => {
                self.heredoc(node, src, depth);
                self.children(node, src, depth);
            }
            "redirected_statement" => {
                // The tree hangs `a && b > f` as `(a && b) > f`; bash redirects `b` only,
                // in the directory `b` runs in.
                let kids = fielded(node);
                let mut body_was_list = false;
                for (f, k) in &kids {
                    if *f == Some("body") {
                        body_was_list = k.kind() == "list";
                        self.walk(*k, src, depth);
                    }
                }
                let after = self.cd.clone();
                let ok = self.cd_ok.clone();
                if body_was_list {
                    self.cd = self.last_cmd_cd.clone();
                }
                for (f, k) in &kids {
                    if *f != Some("body") {
                        self.walk(*k, src, depth);
                    }
                }
                self.cd = after;
                self.cd_ok = ok;
            }
            "negated_command" => {
                self.children(node, src, depth);
                self.cd_ok = None;
            }
            "file_redirect" => self.redirect(node, src, depth),
            "variable_assignment" => self.assignment(node, src, depth),
            "for_statement" => self.for_loop(node, src, depth),
            "arithmetic_expansion" => {
                self.arith(node, src);
                self.children(node, src, depth);
            }
            "compound_statement" if node.child(0).is_some_and(|c| c.kind() == "((") => {
                self.arith(node, src);
                self.children(node, src, depth);
            }
            "c_style_for_statement" => {
                let kids = fielded(node);
                for (f, k) in kids {
                    if matches!(f, Some("initializer" | "condition" | "update")) {
                        self.arith(k, src);
                    }
                }
                self.children(node, src, depth);
            }
            "subscript" => {
                if let Some(ix) = node.child_by_field_name("index") {
                    self.arith(ix, src);
                }
                self.children(node, src, depth);
            }
            "expansion" => {
                self.expansion(node, src);
                self.children(node, src, depth);
            }
            "test_command" => {
                self.test_command(node, src);
                self.children(node, src, depth);
            }
            "declaration_command" => {
                let text = collapse(&src[node.byte_range()]);
                let mut cur = node.walk();
                let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
                for k in &kids {
                    let w = word(*k, src);
                    if k.kind() != "variable_assignment" && holds_subscript_code(&w) {
                        self.opaque(format!(
                            "{} evaluates a subscript holding code: {}",
                            q(&text),
                            q(&w.raw)
                        ));
                    }
                    if k.kind() == "word" && w.lit.as_deref() == Some("-n") {
                        // `declare -n r=…`: a name reference, whose target is only known
                        // when it runs.
                        self.opaque(format!("{} declares a name reference", q(&text)));
                    }
                }
                self.children(node, src, depth);
            }
            _ => self.children(node, src, depth),
        }
    }

    /// A here-document whose delimiter is not quoted expands `$(…)`, backticks and `${…}` in
    /// its body, which the tree does not always show (`<<-`, backticks): the body is parsed
    /// again as the inside of a double-quoted string. A body that will not parse is opaque.
    fn heredoc(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut cur = node.walk();
        let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
        let quoted = kids
            .iter()
            .find(|k| k.kind() == "heredoc_start")
            .is_some_and(|k| src[k.byte_range()].contains(['\'', '"', '\\']));
        if quoted {
            return;
        }
        let Some(body) = kids.iter().find(|k| k.kind() == "heredoc_body") else {
            return;
        };
        let text = &src[body.byte_range()];
        if !(text.contains("$(") || text.contains('`') || text.contains("${")) {
            return;
        }
        let before = self.out.opaque.len();
        let saved = self.cd.clone();
        // An assignment records no command of its own; its value's substitutions are walked.
        self.script(
            &format!("__heredoc=\"{}\"", text.replace('"', "\\\"")),
            depth + 1,
        );
        self.cd = saved;
        if self.out.opaque.len() > before {
            self.opaque(format!(
                "the here-document of {} expands text troupe could not parse",
                q(&src[node.byte_range()])
            ));
        }
    }

    /// `a && b`, `a || b`: `b` runs in the directory `a` left when it succeeded (`&&`) or
    /// failed (`||`); afterwards either is possible.
    fn list(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut cur = node.walk();
        let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
        let op = kids
            .iter()
            .find(|k| !k.is_named() && matches!(k.kind(), "&&" | "||"))
            .map(|k| k.kind());
        let (Some(op), [left, .., right]) = (op, kids.as_slice()) else {
            self.children(node, src, depth);
            return;
        };
        self.cd_ok = None;
        self.walk(*left, src, depth);
        let any_left = self.cd.clone();
        let ok_left = self.cd_ok.take().unwrap_or_else(|| any_left.clone());
        if op == "&&" {
            self.cd = ok_left.clone();
        }
        self.walk(*right, src, depth);
        let any_right = self.cd.clone();
        let ok_right = self.cd_ok.take().unwrap_or_else(|| any_right.clone());
        self.cd = Cd::union(&any_left, &any_right);
        self.cd_ok = Some(if op == "&&" {
            ok_right
        } else {
            Cd::union(&ok_left, &ok_right)
        });
    }

    /// `NAME=value` (alone, before a command, or in `export`/`declare`/`local`): a variable
    /// that makes programs run other code is opaque; a value holding subscript code is
    /// opaque; a path-like literal value is a path the command touches.
    fn assignment(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let text = collapse(&src[node.byte_range()]);
        let name_node = node.child_by_field_name("name");
        let name = name_node
            .map(|n| match n.kind() {
                "subscript" => n
                    .child_by_field_name("name")
                    .map(|x| src[x.byte_range()].to_string())
                    .unwrap_or_default(),
                _ => src[n.byte_range()].to_string(),
            })
            .unwrap_or_default();
        if bash_rules::risky_var(&name) {
            self.opaque(format!(
                "{} sets `{name}`, which can make programs run other code or read other \
                 configuration",
                q(&text)
            ));
        }
        let state = match node.child_by_field_name("value") {
            None => Var::Literal,
            Some(v) => {
                let w = word(v, src);
                if holds_subscript_code(&w) {
                    self.opaque(format!(
                        "{} stores code that arithmetic evaluation would run",
                        q(&text)
                    ));
                }
                if w.lit.is_some() {
                    self.path(&w, false, &text, false);
                    Var::Literal
                } else if v.kind() == "arithmetic_expansion" {
                    // `$(( … ))` is always a number.
                    Var::Literal
                } else {
                    Var::Unknown
                }
            }
        };
        if !name.is_empty() {
            self.vars.insert(name, state);
        }
        self.children(node, src, depth);
    }

    /// `for NAME in WORDS`: NAME holds each word (known when they are literals, which are
    /// paths the command touches when path-like).
    fn for_loop(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let text = collapse(&src[node.byte_range()]);
        let mut known = true;
        let kids = fielded(node);
        for (f, k) in &kids {
            if *f == Some("value") {
                let w = word(*k, src);
                if w.lit.is_some() {
                    self.path(&w, false, &text, false);
                } else if !(w.raw.starts_with("$(seq ") || w.raw.starts_with("`seq ")) {
                    // (`$(seq 1 5)` gives numbers.)
                    known = false;
                }
            }
        }
        if let Some(v) = node.child_by_field_name("variable") {
            let name = src[v.byte_range()].to_string();
            if bash_rules::risky_var(&name) {
                self.opaque(format!(
                    "{} sets `{name}`, which can make programs run other code",
                    q(&text)
                ));
            }
            self.vars
                .insert(name, if known { Var::Literal } else { Var::Unknown });
        }
        self.children(node, src, depth);
    }

    /// An arithmetic context (`$(( ))`, `(( ))`, a subscript, `[[ a -eq b ]]`): bash
    /// evaluates variables' values as expressions, and a subscript in them runs `$( )`. A
    /// variable whose value is unknown, quoted text or a command's output is opaque.
    fn arith(&mut self, node: Node<'_>, src: &str) {
        let text = collapse(&src[node.byte_range()]);
        let mut stack = vec![node];
        let mut steps = 0usize;
        while let Some(n) = stack.pop() {
            steps += 1;
            if steps > 10_000 {
                break;
            }
            match n.kind() {
                "string" | "raw_string" | "ansi_c_string" | "translated_string" => {
                    self.opaque(format!(
                        "quoted text in the arithmetic {} is evaluated as an expression",
                        q(&text)
                    ));
                    return;
                }
                "command_substitution" | "process_substitution" => {
                    self.opaque(format!(
                        "a command's output is evaluated as an arithmetic expression in {}",
                        q(&text)
                    ));
                    return;
                }
                "variable_name" | "word" => {
                    let t = &src[n.byte_range()];
                    if self.vars.get(t) == Some(&Var::Unknown) {
                        self.opaque(format!(
                            "`{t}`, whose value is only known when it runs, is evaluated as an \
                             arithmetic expression in {}",
                            q(&text)
                        ));
                        return;
                    }
                }
                _ => {}
            }
            let mut cur = n.walk();
            stack.extend(n.children(&mut cur));
        }
    }

    /// `${…}`: `${x@P}` expands the value as a prompt (running `$( )` in it), `${!x}` names
    /// another variable (a subscript in it runs code), offsets are arithmetic, and
    /// `${X:=v}` assigns.
    fn expansion(&mut self, node: Node<'_>, src: &str) {
        let text = collapse(&src[node.byte_range()]);
        if (text.contains("$(") || text.contains('`'))
            && !has_descendant(node, "command_substitution")
        {
            // `${x#$(rm d)}`: the tree shows the pattern as a plain word.
            self.opaque(format!(
                "{} holds a command substitution troupe could not parse",
                q(&text)
            ));
        }
        if text.contains("@P") || text.contains("@A") {
            self.opaque(format!(
                "{} expands a value as a prompt or assignment, which can run code",
                q(&text)
            ));
        }
        let mut cur = node.walk();
        let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
        let name = kids
            .iter()
            .find(|k| k.kind() == "variable_name")
            .map(|k| src[k.byte_range()].to_string());
        let indirect = kids.get(1).is_some_and(|k| k.kind() == "!")
            && !text.ends_with("[@]}")
            && !text.ends_with("[*]}")
            && !text.ends_with("*}")
            && !text.ends_with("@}");
        if indirect
            && name
                .as_ref()
                .is_none_or(|n| self.vars.get(n) == Some(&Var::Unknown))
        {
            self.opaque(format!(
                "{} names a variable that is only known when it runs",
                q(&text)
            ));
        }
        if kids.iter().any(|k| matches!(k.kind(), ":=" | "="))
            && let Some(n) = name.as_ref().filter(|n| bash_rules::risky_var(n))
        {
            self.opaque(format!(
                "{} sets `{n}`, which can make programs run other code",
                q(&text)
            ));
        }
        if kids.iter().any(|k| k.kind() == ":") {
            // `${s:off:len}`: offset and length are arithmetic.
            let mut after = false;
            for k in &kids {
                if k.kind() == ":" {
                    after = true;
                } else if after && k.is_named() {
                    self.arith(*k, src);
                }
            }
        }
    }

    /// `[[ … ]]`: `-eq`-style operands are arithmetic, `-v NAME` evaluates a subscript.
    fn test_command(&mut self, node: Node<'_>, src: &str) {
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            if matches!(n.kind(), "binary_expression" | "unary_expression") {
                let op = n
                    .child_by_field_name("operator")
                    .map(|o| src[o.byte_range()].to_string())
                    .unwrap_or_default();
                let mut cur = n.walk();
                let kids: Vec<Node<'_>> = n.named_children(&mut cur).collect();
                match op.as_str() {
                    "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge" => {
                        for k in kids.iter().filter(|k| k.kind() != "test_operator") {
                            self.arith(*k, src);
                        }
                    }
                    "-v" | "-R" => {
                        for k in kids.iter().filter(|k| k.kind() != "test_operator") {
                            let w = word(*k, src);
                            if w.lit.is_none() || holds_subscript_code(&w) {
                                self.opaque(format!(
                                    "{} tests a variable name holding code or only known when \
                                     it runs",
                                    q(&src[n.byte_range()])
                                ));
                            }
                        }
                    }
                    _ => {}
                }
            }
            let mut cur = n.walk();
            stack.extend(n.named_children(&mut cur));
        }
    }

    fn children(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut cur = node.walk();
        let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
        for k in kids {
            self.walk(k, src, depth);
        }
    }

    /// A `file_redirect` (`>`, `>>`, `&>`, `2>`, `<`, `>&`, …): its target is a path read or
    /// written by the command.
    fn redirect(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut op = String::new();
        let mut dests: Vec<Node<'_>> = Vec::new();
        let mut cur = node.walk();
        for (i, k) in node.children(&mut cur).enumerate() {
            if node.field_name_for_child(i as u32) == Some("destination") {
                dests.push(k);
            } else if !k.is_named() {
                op.push_str(&src[k.byte_range()]);
            }
        }
        let write = op.contains('>');
        let source = collapse(&src[node.byte_range()]);
        for d in dests {
            // Substitutions inside the target run too.
            self.walk(d, src, depth);
            let w = word(d, src);
            if op.contains('&') && !op.starts_with('&') && !op.ends_with("&>") {
                // `>&2`, `<&0`, `>&-`: duplicates a descriptor (a file name here is a write).
                if w.lit.as_deref().is_some_and(|s| {
                    s == "-" || s.trim_end_matches('-').chars().all(|c| c.is_ascii_digit())
                }) {
                    continue;
                }
            }
            self.path(&w, write, &source, true);
        }
    }

    /// Record a path only known when it runs.
    fn unknown(&mut self, reason: String, write: bool) {
        let u = UnknownPath { reason, write };
        if !self.out.unknown_paths.contains(&u) {
            self.out.unknown_paths.push(u);
        }
    }

    /// Record a path use. `required`: the word is known to be a path (a redirection or write
    /// target), so a non-literal value is unknown; otherwise only path-like words count (a
    /// literal that is absolute, `~`-based or climbs with `..`; a computed word with a `/`
    /// or `..` in its literal parts).
    fn path(&mut self, w: &Word, write: bool, source: &str, required: bool) {
        let Some(lit) = w.lit.as_deref() else {
            let skel = &w.skel;
            let path_like = (skel.contains('/') && !skel.contains("://"))
                || skel.starts_with('~')
                || skel.contains("..");
            if required || write || path_like {
                self.unknown(
                    format!(
                        "{} {} {}, a path only known when it runs",
                        q(source),
                        if write { "writes to" } else { "reads" },
                        q(&w.raw)
                    ),
                    write,
                );
            }
            return;
        };
        if w.glob {
            // Brace expansion gives several words; glob characters match names only known
            // when it runs (`.[.]` may match `..`).
            let alts = if lit.contains('{') {
                bash_rules::expand_braces(lit)
            } else {
                Some(vec![lit.to_string()])
            };
            let Some(alts) = alts else {
                self.unknown(
                    format!(
                        "{} touches {}, too many paths to check",
                        q(source),
                        q(&w.raw)
                    ),
                    write,
                );
                return;
            };
            for a in alts {
                let has_glob = a.contains(['*', '?', '[']);
                let dot_glob = a
                    .split('/')
                    .any(|c| c.starts_with('.') && c.contains(['*', '?', '[']));
                if has_glob && (required || dot_glob) {
                    self.unknown(
                        format!(
                            "{} touches {}, whose matches are only known when it runs",
                            q(source),
                            q(&w.raw)
                        ),
                        write,
                    );
                    continue;
                }
                self.path_literal(&a, write, source, required);
            }
            return;
        }
        let lit = lit.to_string();
        self.path_literal(&lit, write, source, required);
    }

    /// [`Walker::path`] for one literal path.
    fn path_literal(&mut self, lit: &str, write: bool, source: &str, required: bool) {
        if lit.is_empty() {
            return;
        }
        if let Some(local) = lit.strip_prefix("file://") {
            // `curl file:///bin/rm -o x`: a URL naming a local file.
            let local = local.to_string();
            self.path_literal(&local, write, source, true);
            return;
        }
        if lit.contains("{}") {
            if let Some(r) = self.xargs_repl.clone().filter(|r| lit.contains(r.as_str())) {
                // The placeholder of `xargs -I{}`: the paths come from its input.
                self.unknown(
                    format!(
                        "{} touches {}, built from its input when it runs",
                        q(source),
                        q(&r)
                    ),
                    write,
                );
                return;
            }
            if lit == "{}" {
                // `find -exec … {}`: the files are under the paths given to `find`.
                return;
            }
        }
        // `~+` is the current directory, `~-` the previous one, `~user` a home directory.
        let lit: String = if lit == "~+" || lit.starts_with("~+/") {
            format!(".{}", &lit[2..])
        } else {
            lit.to_string()
        };
        let tilde_user =
            lit.starts_with('~') && !lit.starts_with("~/") && lit != "~" && !lit.starts_with("~+");
        if tilde_user {
            self.unknown(
                format!(
                    "{} touches {}, in a directory only known when it runs",
                    q(source),
                    q(&lit)
                ),
                write,
            );
            return;
        }
        let path_like = lit.starts_with('/')
            || lit.starts_with('~')
            || lit == ".."
            || lit.starts_with("../")
            || lit.contains("/../")
            || lit.ends_with("/..");
        if !required && !write && !path_like {
            return;
        }
        if SPECIAL_PATHS.contains(&lit.as_str()) || lit.starts_with("/dev/fd/") {
            return;
        }
        let absolute = lit.starts_with('/') || lit.starts_with('~');
        if !absolute && let Some(how) = self.links.clone() {
            self.unknown(
                format!(
                    "{} touches {}, which may go through a link made by {} in the same \
                         command",
                    q(source),
                    q(&lit),
                    q(&how)
                ),
                write,
            );
            return;
        }
        let joined: Vec<String> = match (&self.cd, absolute) {
            (_, true) => vec![lit.clone()],
            (Cd::Known(dirs), false) => dirs
                .iter()
                .map(|d| {
                    if d.is_empty() {
                        lit.clone()
                    } else {
                        format!("{}/{lit}", d.trim_end_matches('/'))
                    }
                })
                .collect(),
            (Cd::Unknown(how), false) => {
                let how = how.clone();
                self.unknown(
                    format!(
                        "{} touches {}, relative to a directory only known when it runs \
                         (after {})",
                        q(source),
                        q(&lit),
                        q(&how)
                    ),
                    write,
                );
                return;
            }
        };
        for path in joined {
            let clean = path.trim_start_matches("./").to_string();
            if let Some(d) = self.link_dests.iter().find(|d| {
                let d = d.trim_start_matches("./").trim_end_matches('/');
                clean == d || clean.starts_with(&format!("{d}/"))
            }) {
                let d = d.clone();
                self.unknown(
                    format!(
                        "{} touches {}, under {} which the same command copied or moved (a link \
                         there may point elsewhere)",
                        q(source),
                        q(&lit),
                        q(&d)
                    ),
                    write,
                );
                continue;
            }
            if write
                && (path
                    .split('/')
                    .rev()
                    .skip(1)
                    .any(|c| c == ".git" || c.ends_with(".git"))
                    || path.ends_with(".gitconfig"))
            {
                self.opaque(format!(
                    "{} writes {}, git's configuration or hooks, which can run commands",
                    q(source),
                    q(&lit)
                ));
            }
            if write && !self.written.contains(&path) {
                self.written.push(path.clone());
            }
            let use_ = PathUse {
                path,
                write,
                source: collapse(source),
            };
            if !self.out.paths.contains(&use_) {
                self.out.paths.push(use_);
            }
        }
    }

    /// A `command` node: words, prefix assignments and redirections.
    fn command(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut words: Vec<Word> = Vec::new();
        let kids = fielded(node);
        for (field, k) in &kids {
            match (*field, k.kind()) {
                (Some("name"), _) => {
                    let inner = k.named_child(0).unwrap_or(*k);
                    words.push(word(inner, src));
                    self.walk(*k, src, depth);
                }
                (Some("argument"), _) => {
                    words.push(word(*k, src));
                    self.walk(*k, src, depth);
                }
                (_, "file_redirect") => self.redirect(*k, src, depth),
                _ => self.walk(*k, src, depth),
            }
        }
        let source = collapse(&src[node.byte_range()]);
        self.simple(words, &source, depth);
    }

    /// Analyse one simple command given as words (also used for `find -exec` commands).
    fn simple(&mut self, words: Vec<Word>, source: &str, depth: usize) {
        self.last_cmd_cd = self.cd.clone();
        let saved_repl = self.xargs_repl.clone();
        self.simple_inner(words, source, depth);
        self.xargs_repl = saved_repl;
        if !self.cd_ok_set_by_cd {
            self.cd_ok = None;
        }
        self.cd_ok_set_by_cd = false;
    }

    fn simple_inner(&mut self, words: Vec<Word>, source: &str, depth: usize) {
        // Leading assignments (only possible here for `find -exec`-built commands).
        let mut k = words
            .iter()
            .take_while(|w| w.lit.as_deref().is_some_and(is_assignment))
            .count();
        for w in &words[..k] {
            self.env_assignment(w.text(), source);
        }
        if k >= words.len() {
            return;
        }
        // Wrapper layers: each start index is one pattern variant.
        let mut starts: Vec<usize> = Vec::new();
        let name = loop {
            starts.push(k);
            let w = &words[k];
            let Some(lit) = w.lit.as_deref().filter(|_| !w.glob) else {
                self.opaque(format!(
                    "the command word {} is not a literal (its value is only known when it runs)",
                    q(&w.raw)
                ));
                self.record(&words, &starts, source, None);
                return;
            };
            let from_input = match &self.xargs_repl {
                Some(r) => lit.contains(r.as_str()),
                None => self.in_find_exec && lit.contains("{}"),
            };
            if from_input {
                self.opaque(format!(
                    "the command word {} is built from the input when it runs",
                    q(&w.raw)
                ));
                self.record(&words, &starts, source, None);
                return;
            }
            if lit.contains('/') && self.is_written(lit) {
                self.opaque(format!(
                    "{} runs {}, a file written by the same command",
                    q(source),
                    q(lit)
                ));
            }
            let name = basename(lit);
            if name == "command" {
                // `command -v x` / `command -V x` only describe x.
                if words
                    .get(k + 1)
                    .and_then(|w| w.lit.as_deref())
                    .is_some_and(|f| f.starts_with('-') && (f.contains('v') || f.contains('V')))
                {
                    break name;
                }
            }
            let su_style = name == "runuser"
                && !words[k + 1..].iter().any(|w| {
                    matches!(w.text(), "-u" | "--user") || w.text().starts_with("--user=")
                });
            let Some(spec) = WRAPPERS.iter().find(|s| s.name == name && !su_style) else {
                let sub = words.get(k + 1).and_then(|w| w.lit.as_deref());
                if bash_rules::SUBCOMMAND_WRAPPERS
                    .iter()
                    .any(|(p, s)| *p == name && Some(*s) == sub)
                {
                    let mut j = k + 2;
                    if name == "direnv" {
                        j += 1;
                    }
                    while j < words.len() && words[j].text().starts_with('-') {
                        let t = words[j].text().to_string();
                        j += 1;
                        if t == "--" {
                            break;
                        }
                    }
                    if j < words.len() {
                        k = j;
                        continue;
                    }
                }
                break name;
            };
            let mut j = k + 1;
            let mut repl: Option<String> = None;
            let mut script_done = false;
            let mut positional_left = spec.positional;
            while j < words.len() {
                let t = words[j].text().to_string();
                if t == "--" {
                    j += 1;
                    break;
                }
                if matches!(spec.name, "sudo" | "doas" | "env")
                    && !t.starts_with('-')
                    && t.contains('=')
                {
                    self.env_assignment(&t, source);
                    j += 1;
                    continue;
                }
                if let Some(long) = t.strip_prefix("--").filter(|l| !l.is_empty()) {
                    let (opt, inline) = match long.split_once('=') {
                        Some((o, v)) => (format!("--{o}"), Some(v.to_string())),
                        None => (t.clone(), None),
                    };
                    if spec.name == "env" && opt == "--split-string" {
                        self.opaque(format!(
                            "{} splits a string into a command (`env -S`), which is not analysed",
                            q(source)
                        ));
                    }
                    if spec.name == "xargs" && opt == "--replace" {
                        repl = Some(inline.clone().unwrap_or_else(|| "{}".into()));
                    }
                    let takes = inline.is_none() && spec.long_values.contains(&opt.as_str());
                    let value = match &inline {
                        Some(v) => Some(words[j].part(v)),
                        None if takes => words.get(j + 1).cloned(),
                        None => None,
                    };
                    if let Some(v) = value {
                        self.wrapper_value(spec.name, &opt, &v, source);
                    }
                    if spec.script_long.contains(&opt.as_str()) {
                        let v = match inline {
                            Some(v) => Some(words[j].part(&v)),
                            None => words.get(j + 1).cloned(),
                        };
                        self.wrapper_script(v.as_ref(), source, depth);
                        script_done = true;
                        j += if t.contains('=') { 1 } else { 2 };
                        continue;
                    }
                    j += if takes { 2 } else { 1 };
                    continue;
                }
                if t.starts_with('-') && t.len() > 1 {
                    let chars: Vec<char> = t[1..].chars().collect();
                    let mut next_taken = false;
                    for (ci, c) in chars.iter().enumerate() {
                        let rest: String = chars[ci + 1..].iter().collect();
                        if spec.script_short.contains(*c) {
                            let v = if rest.is_empty() {
                                next_taken = true;
                                words.get(j + 1).cloned()
                            } else {
                                Some(words[j].part(&rest))
                            };
                            self.wrapper_script(v.as_ref(), source, depth);
                            script_done = true;
                            break;
                        }
                        if spec.name == "xargs" && *c == 'i' {
                            repl = Some(if rest.is_empty() { "{}".into() } else { rest });
                            break;
                        }
                        if spec.short_values.contains(*c) {
                            let value = if rest.is_empty() {
                                next_taken = true;
                                words.get(j + 1).map(|w| w.text().to_string())
                            } else {
                                Some(rest)
                            };
                            if let Some(v) = &value {
                                let w = if next_taken {
                                    words.get(j + 1).cloned().unwrap_or_else(|| Word::plain(v))
                                } else {
                                    words[j].part(v)
                                };
                                self.wrapper_value(spec.name, &format!("-{c}"), &w, source);
                            }
                            if spec.name == "xargs" && *c == 'I' {
                                repl = value;
                            }
                            if spec.name == "env" && *c == 'S' {
                                self.opaque(format!(
                                    "{} splits a string into a command (`env -S`), which is not \
                                     analysed",
                                    q(source)
                                ));
                            }
                            break;
                        }
                    }
                    j += 1 + usize::from(next_taken);
                    continue;
                }
                if positional_left > 0 {
                    positional_left -= 1;
                    if matches!(spec.name, "flock" | "chroot") {
                        let w = words[j].clone();
                        self.path(&w, false, source, true);
                    }
                    if spec.name == "chroot" {
                        self.links = Some(collapse(source));
                    }
                    j += 1;
                    continue;
                }
                break;
            }
            if spec.name == "xargs"
                && let Some(r) = repl.filter(|r| !r.is_empty())
            {
                self.xargs_repl = Some(r);
            }
            if script_done || j >= words.len() {
                break name;
            }
            k = j;
        };
        let core = *starts.last().unwrap_or(&0);
        let mut args: Vec<Word> = words[core + 1..].to_vec();
        let mut name = name;
        if let Some(sub) = name.strip_prefix("git-").map(str::to_string) {
            // `/usr/lib/git-core/git-push` is `git push`.
            args.insert(0, Word::plain(&sub));
            name = "git".into();
        }
        let mut inner_words: Vec<String> = vec![name.clone()];
        if name == "git" {
            args = self.git_globals(args, source);
        }
        inner_words.extend(args.iter().map(|w| collapse(w.text())));
        if CD_COMMANDS.contains(&name.as_str()) {
            self.cd(&name, &args, source);
            return;
        }
        self.record(&words, &starts, source, Some(&inner_words));
        if let Some(extra) = self.equivalents(&name, &args)
            && let Some(p) = self.out.parts.last_mut()
            && !p.patterns.contains(&extra)
        {
            p.patterns.push(extra);
        }
        self.scripts(&name, &args, source, depth);
        self.paths_of(&name, &args, source);
        self.assigns(&name, &args, source);
    }

    /// An option value of a wrapper that is a path: the directory the command runs in
    /// (`env -C DIR`, `sudo -D DIR`), a file it reads (`xargs -a FILE`) or writes
    /// (`strace -o FILE`).
    fn wrapper_value(&mut self, wrapper: &str, opt: &str, v: &Word, source: &str) {
        let (is_path, write) = match (wrapper, opt) {
            ("env", "-C" | "--chdir")
            | ("sudo", "-D" | "--chdir" | "-R" | "--chroot")
            | ("doas", "-C")
            | ("nsenter", "--wd" | "--root")
            | ("unshare", "-w" | "--wd" | "-R" | "--root")
            | ("systemd-run", "--working-directory")
            | ("xargs", "-a" | "--arg-file")
            | ("fakeroot", "-s" | "-i")
            | ("chroot", "--userspec") => (opt != "--userspec", false),
            ("strace" | "ltrace" | "time", "-o" | "--output") => (true, true),
            _ => (false, false),
        };
        if is_path {
            self.path(v, write, source, true);
        }
    }

    /// Whether a path (as written, relative to the current directory candidates) was
    /// written earlier in the command.
    fn is_written(&self, lit: &str) -> bool {
        let lit = lit.trim_start_matches("./");
        match &self.cd {
            Cd::Known(dirs) => dirs.iter().any(|d| {
                let p = if d.is_empty() || lit.starts_with('/') {
                    lit.to_string()
                } else {
                    format!("{}/{lit}", d.trim_end_matches('/'))
                };
                self.written.iter().any(|w| w.trim_start_matches("./") == p)
            }),
            Cd::Unknown(_) => !self.written.is_empty(),
        }
    }

    /// `NAME=value` given to `env` (or before a `find -exec` command).
    fn env_assignment(&mut self, text: &str, source: &str) {
        let name = text.split('=').next().unwrap_or("");
        if bash_rules::risky_var(name) {
            self.opaque(format!(
                "{} sets `{name}`, which can make programs run other code or read other \
                 configuration",
                q(source)
            ));
        }
    }

    /// The script a wrapper runs itself (`flock FILE -c SCRIPT`, `runuser -c SCRIPT`).
    fn wrapper_script(&mut self, w: Option<&Word>, source: &str, depth: usize) {
        match w {
            Some(Word { lit: Some(s), .. }) => {
                let saved = self.cd.clone();
                self.script(s, depth + 1);
                self.cd = saved;
            }
            Some(w) => self.opaque(format!(
                "the script of {} is not a literal: {}",
                q(source),
                q(&w.raw)
            )),
            None => self.opaque(format!("{} has `-c` without a script", q(source))),
        }
    }

    /// Another spelling of the same action, matched against the rules too: `git send-pack`
    /// and `git http-push` push, as do `git subtree push` and `git lfs push`; `find -delete`
    /// removes files like `rm`.
    fn equivalents(&self, name: &str, args: &[Word]) -> Option<String> {
        let texts: Vec<String> = args.iter().map(|w| collapse(w.text())).collect();
        match (name, texts.first().map(String::as_str)) {
            ("git", Some("send-pack" | "http-push")) => Some(
                format!("git push {}", texts[1..].join(" "))
                    .trim_end()
                    .to_string(),
            ),
            ("git", Some("subtree" | "lfs"))
                if texts.get(1).map(String::as_str) == Some("push") =>
            {
                Some(
                    format!("git push {}", texts[2..].join(" "))
                        .trim_end()
                        .to_string(),
                )
            }
            ("find", _) if texts.iter().any(|t| t == "-delete") => {
                let roots: Vec<&str> = texts
                    .iter()
                    .take_while(|t| !t.starts_with('-') && !matches!(t.as_str(), "(" | "!"))
                    .map(String::as_str)
                    .collect();
                Some(format!(
                    "rm -r {}",
                    if roots.is_empty() {
                        ".".to_string()
                    } else {
                        roots.join(" ")
                    }
                ))
            }
            _ => None,
        }
    }

    /// Variables a command assigns (`read x`, `mapfile a`, `printf -v x`): their values are
    /// only known when it runs.
    fn assigns(&mut self, name: &str, args: &[Word], source: &str) {
        let mut names: Vec<String> = Vec::new();
        match name {
            "read" => {
                let mut i = 0;
                while i < args.len() {
                    let t = args[i].text();
                    if t.starts_with('-') {
                        if matches!(t, "-a" | "-d" | "-i" | "-n" | "-N" | "-p" | "-t" | "-u") {
                            if t == "-a"
                                && let Some(n) = args.get(i + 1)
                            {
                                names.push(n.text().to_string());
                            }
                            i += 1;
                        }
                    } else {
                        names.push(t.to_string());
                    }
                    i += 1;
                }
                if names.is_empty() {
                    names.push("REPLY".into());
                }
            }
            "mapfile" | "readarray" => {
                names.push(
                    args.last()
                        .filter(|w| !w.text().starts_with('-'))
                        .map(|w| w.text().to_string())
                        .unwrap_or_else(|| "MAPFILE".into()),
                );
            }
            "printf" => {
                if let Some(i) = args.iter().position(|w| w.text() == "-v")
                    && let Some(n) = args.get(i + 1)
                {
                    names.push(n.text().to_string());
                }
            }
            "getopts" => {
                if let Some(n) = args.get(1) {
                    names.push(n.text().to_string());
                }
            }
            _ => return,
        }
        for n in &names {
            let plain = n.split('[').next().unwrap_or(n).to_string();
            if n.contains('[') && (n.contains("$(") || n.contains('`') || n.contains("${")) {
                self.opaque(format!(
                    "{} assigns to {}, a subscript holding code",
                    q(source),
                    q(n)
                ));
            }
            if bash_rules::risky_var(&plain) {
                self.opaque(format!(
                    "{} sets `{plain}`, which can make programs run other code",
                    q(source)
                ));
            }
            self.vars.insert(plain, Var::Unknown);
        }
    }

    /// Add the part for a command: one pattern per wrapper layer (the innermost from
    /// `inner` normalized words when known).
    fn record(&mut self, words: &[Word], starts: &[usize], source: &str, inner: Option<&[String]>) {
        let mut patterns = Vec::new();
        let mut always = Vec::new();
        let core = *starts.last().unwrap_or(&0);
        let inner_words: Vec<String> = match inner {
            Some(i) => i.to_vec(),
            None => words[core..].iter().map(|w| collapse(w.text())).collect(),
        };
        let arity = arity_prefix(&inner_words).join(" ");
        for &s in starts {
            let mut ws: Vec<String> = Vec::new();
            for (i, w) in words[s..core].iter().enumerate() {
                let t = collapse(w.text());
                ws.push(if i == 0 { basename(&t) } else { t });
            }
            let before = ws.join(" ");
            ws.extend(inner_words.iter().cloned());
            let pat = collapse(&ws.join(" "));
            if !patterns.contains(&pat) {
                patterns.push(pat);
            }
            let a = if before.is_empty() {
                format!("{arity} *")
            } else {
                format!("{before} {arity} *")
            };
            if !always.contains(&a) {
                always.push(a);
            }
        }
        self.out.parts.push(Part {
            source: source.to_string(),
            patterns,
            always,
        });
    }

    /// Drop git's global options (`-C DIR`, `-c k=v`, `--git-dir=…`, `--no-pager`, …) so the
    /// subcommand comes first; `-C`/`--git-dir`/`--work-tree` are paths the command touches,
    /// and an inline `-c` that defines an alias or a command git runs is opaque.
    fn git_globals(&mut self, args: Vec<Word>, source: &str) -> Vec<Word> {
        let mut i = 0usize;
        while i < args.len() {
            let t = args[i].text().to_string();
            if !t.starts_with('-') || t == "-" {
                break;
            }
            if t == "--" {
                i += 1;
                break;
            }
            let (opt, inline) = match t.split_once('=') {
                Some((o, v)) if o.starts_with("--") => (o.to_string(), Some(v.to_string())),
                _ => (t.clone(), None),
            };
            let takes = GIT_OPTS_WITH_VALUE.contains(&opt.as_str());
            let value: Option<Word> = match (&inline, takes) {
                (Some(v), _) => Some(args[i].part(v)),
                (None, true) => args.get(i + 1).cloned(),
                (None, false) => None,
            };
            // `-C.` style (attached value).
            let (opt, value) = if !takes
                && (t.starts_with("-C") || t.starts_with("-c"))
                && t.len() > 2
                && !t.starts_with("--")
            {
                (t[..2].to_string(), Some(Word::plain(&t[2..])))
            } else {
                (opt, value)
            };
            match opt.as_str() {
                "--exec-path" if value.is_some() => self.opaque(format!(
                    "{} runs git's subcommands from a directory given inline (`--exec-path=`)",
                    q(source)
                )),
                "-C" | "--git-dir" | "--work-tree" => {
                    if let Some(v) = &value {
                        self.path(v, false, source, true);
                        // A repository directory not named `.git`/`*.git` may hold hooks
                        // and configuration written as ordinary files.
                        let name = v.lit.as_deref().map(|l| l.trim_end_matches('/'));
                        if opt == "--git-dir" && !name.is_some_and(|n| n.ends_with(".git")) {
                            self.opaque(format!(
                                "{} uses the repository {}, whose hooks and configuration can \
                                 run commands",
                                q(source),
                                q(&v.raw)
                            ));
                        }
                    }
                }
                "-c" | "--config-env" => match value.as_ref().and_then(|v| v.lit.clone()) {
                    Some(kv) => {
                        let key = kv.split('=').next().unwrap_or("").to_ascii_lowercase();
                        if git_key_risky(&key) {
                            self.opaque(format!(
                                "{} sets `{key}` inline, which may define a git alias or a command git runs",
                                q(source)
                            ));
                        }
                    }
                    None => self.opaque(format!(
                        "{} sets git configuration that is only known when it runs",
                        q(source)
                    )),
                },
                _ => {}
            }
            let attached =
                t.len() > 2 && (t.starts_with("-C") || t.starts_with("-c")) && !t.starts_with("--");
            i += if (takes || opt == "-C" || opt == "-c") && inline.is_none() && !attached {
                2
            } else {
                1
            };
        }
        if let Some(w) = args[..(i + 1).min(args.len())]
            .iter()
            .find(|w| w.glob || w.lit.is_none())
        {
            // `git {push,x}`, `git pu?h`, `git $SUB`: the subcommand is only known when it runs.
            self.opaque(format!(
                "{} has {}, a git option or subcommand only known when it runs",
                q(source),
                q(&w.raw)
            ));
        }
        args.into_iter().skip(i).collect()
    }

    /// `cd`-like commands: their target is a path the command touches, and it moves the
    /// following commands. A `cd` may fail (a missing directory, no permission), leaving the
    /// old directory: afterwards both are possible, except after `&&` (see [`Walker::list`]).
    fn cd(&mut self, name: &str, args: &[Word], source: &str) {
        self.cd_seen += 1;
        let operands: Vec<&Word> = args
            .iter()
            .filter(|w| !w.text().starts_with('-') || w.text() == "-")
            .collect();
        let unknown = |s: &str| Cd::Unknown(s.to_string());
        let target: Result<String, ()> = match (name, operands.first()) {
            ("popd", _) => Err(()),
            ("pushd", None) => Err(()),
            (_, None) => {
                // A bare `cd` enters the home directory.
                self.path(&Word::plain("~"), false, source, true);
                Ok("~".into())
            }
            (_, Some(w)) => match w.lit.as_deref().filter(|_| !w.glob) {
                Some("-") | None => Err(()),
                Some(d) if d.starts_with('+') || (name == "pushd" && d.starts_with('-')) => Err(()),
                Some(d) if d.starts_with('~') && !(d == "~" || d.starts_with("~/")) => Err(()),
                Some(d) => {
                    let w = (*w).clone();
                    self.path(&w, false, source, true);
                    Ok(d.to_string())
                }
            },
        };
        if target.is_err() {
            // Whatever runs next reads that directory (`cd $D && ls`).
            self.unknown(
                format!("{} enters a directory only known when it runs", q(source)),
                false,
            );
        }
        let new = match (target, &self.cd) {
            (Err(()), _) => unknown(source),
            (Ok(_), Cd::Unknown(u)) => Cd::Unknown(u.clone()),
            (Ok(dir), Cd::Known(dirs)) => {
                if dir.starts_with('/') || dir.starts_with('~') {
                    Cd::Known(vec![dir])
                } else {
                    Cd::Known(
                        dirs.iter()
                            .map(|d| {
                                if d.is_empty() {
                                    dir.clone()
                                } else {
                                    format!("{}/{dir}", d.trim_end_matches('/'))
                                }
                            })
                            .collect(),
                    )
                }
            }
        };
        let any = Cd::union(&self.cd, &new);
        self.cd = match any {
            Cd::Known(v) if v.len() > MAX_CD_CANDIDATES => unknown(source),
            other => other,
        };
        self.cd_ok = Some(new);
        self.cd_ok_set_by_cd = true;
    }

    /// Scripts the command runs itself: `sh -c SCRIPT`, a shell reading stdin, `eval ARGS`,
    /// `source FILE`, `find … -exec CMD ;`, `watch CMD`.
    fn scripts(&mut self, name: &str, args: &[Word], source: &str, depth: usize) {
        if SHELLS.contains(&name) {
            let mut has_c = false;
            let mut reads_stdin = false;
            let mut i = 0usize;
            while i < args.len() {
                let t = args[i].text();
                if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 && t != "--" {
                    if t.starts_with("--") {
                        if matches!(t, "--rcfile" | "--init-file") {
                            i += 1;
                        }
                    } else {
                        if t[1..].contains('c') {
                            has_c = true;
                        }
                        if t[1..].contains('s') {
                            reads_stdin = true;
                        }
                        if t[1..].contains('o') || t[1..].contains('O') {
                            i += 1;
                        }
                    }
                    i += 1;
                    continue;
                }
                if t == "--" {
                    i += 1;
                }
                break;
            }
            let operand = args.get(i);
            if has_c {
                match operand {
                    Some(w) => match &w.lit {
                        Some(script) if self.built_from_input(script) => self.opaque(format!(
                            "the script of {} is built from the input when it runs",
                            q(source)
                        )),
                        Some(script) => {
                            let saved = self.cd.clone();
                            self.script(script, depth + 1);
                            self.cd = saved;
                        }
                        None => self.opaque(format!(
                            "the script of {} is not a literal: {}",
                            q(source),
                            q(&w.raw)
                        )),
                    },
                    None => self.opaque(format!("{} has `-c` without a script", q(source))),
                }
            } else if reads_stdin || operand.is_none() {
                self.opaque(format!(
                    "{} reads its script from stdin, a pipe or a here-document",
                    q(source)
                ));
            } else if let Some(w) = operand {
                // `bash script.sh`: runs a file.
                self.script_file(w, source);
            }
            return;
        }
        if let Some(inline) = bash_rules::interpreter(name) {
            self.interpreter(name, inline, args, source);
            return;
        }
        if let Some((_, opts)) = CODE_OPTIONS.iter().find(|(n, _)| *n == name) {
            let hit = args.iter().map(Word::text).find(|t| {
                opts.iter().any(|o| {
                    *t == *o
                        || t.starts_with(&format!("{o}="))
                        || (o.len() == 2 && !o.starts_with("--") && t.starts_with(o) && t.len() > 2)
                })
            });
            if let Some(t) = hit {
                self.opaque(format!(
                    "{} runs code given in its options (`{t}`), which is not analysed",
                    q(source)
                ));
            }
        }
        match name {
            "awk" | "gawk" | "mawk" | "nawk" => self.awk(args, source),
            "shopt" => {
                // Options that change what words mean (`cdable_vars`: `cd x` may enter `$x`;
                // `expand_aliases`; `extglob` patterns) are opaque; listing or harmless
                // globbing options are not.
                const HARMLESS: &[&str] = &[
                    "nullglob",
                    "failglob",
                    "globstar",
                    "nocaseglob",
                    "nocasematch",
                    "lastpipe",
                    "inherit_errexit",
                    "dotglob",
                    "checkwinsize",
                    "histappend",
                    "-s",
                    "-u",
                    "-q",
                    "-p",
                    "-o",
                ];
                if let Some(w) = args.iter().find(|w| !HARMLESS.contains(&w.text())) {
                    self.opaque(format!(
                        "{} sets {}, which can change what later words mean (alias expansion \
                         when `expand_aliases`)",
                        q(source),
                        q(&w.raw)
                    ));
                }
            }
            "sed" | "gsed" => self.sed(args, source),
            "trap" => {
                let ops: Vec<&Word> = args
                    .iter()
                    .filter(|w| !matches!(w.text(), "-p" | "-l" | "-P" | "--"))
                    .collect();
                if let Some(action) = ops.first().filter(|_| ops.len() >= 2) {
                    match &action.lit {
                        Some(code) => {
                            let saved = self.cd.clone();
                            self.script(code, depth + 1);
                            self.cd = saved;
                        }
                        None => self.opaque(format!(
                            "{} sets a trap whose code is only known when it runs",
                            q(source)
                        )),
                    }
                }
            }
            "mapfile" | "readarray" | "complete" | "compgen"
                if args.iter().any(|w| w.text().starts_with("-C")) =>
            {
                self.opaque(format!("{} runs a command given with `-C`", q(source)))
            }
            "bind" if args.iter().any(|w| w.text().starts_with("-x")) => {
                self.opaque(format!("{} binds a key to a command", q(source)))
            }
            "alias" if args.iter().any(|w| w.text().contains('=')) => self.opaque(format!(
                "{} defines an alias, so later command words may mean something else",
                q(source)
            )),
            "set"
                if args
                    .iter()
                    .any(|w| matches!(w.text(), "posix" | "keyword" | "--" | "-"))
                    || args.iter().any(|w| {
                        let t = w.text();
                        (t.starts_with('-') || t.starts_with('+'))
                            && !t.starts_with("--")
                            && t.contains('k')
                    }) =>
            {
                self.opaque(format!(
                    "{} changes the shell's mode or arguments (`posix` mode expands aliases)",
                    q(source)
                ))
            }
            "enable" | "hash" if !args.is_empty() && args.iter().any(|w| w.text() != "-r") => self
                .opaque(format!(
                    "{} changes which program or builtin a command name runs",
                    q(source)
                )),
            _ if runs_given_commands(name, args) => self.opaque(format!(
                "{} runs commands given to it, which are not analysed",
                q(source)
            )),
            "direnv" if args.first().map(Word::text) == Some("allow") => self.opaque(format!(
                "{} lets `.envrc` run commands whenever the directory is entered",
                q(source)
            )),
            "parallel" | "at" | "batch" => self.opaque(format!(
                "{} runs commands built from its input or later, which are not analysed",
                q(source)
            )),
            "crontab" if !args.iter().any(|w| matches!(w.text(), "-l" | "-r")) => {
                self.opaque(format!("{} installs commands to run later", q(source)))
            }
            "su" | "runuser" | "script" | "sudo" | "doas" | "sg" | "nix-shell" => {
                self.shell_runner(name, args, source, depth)
            }
            "make" | "gmake" => {
                // `make CC='rm -rf d'`: a variable given on the command line replaces the
                // makefile's, and recipes run it.
                const MAKE_CODE_VARS: &[&str] = &[
                    "SHELL",
                    ".SHELLFLAGS",
                    "RM",
                    "CC",
                    "CXX",
                    "CPP",
                    "LD",
                    "AR",
                    "AS",
                    "FC",
                    "YACC",
                    "LEX",
                    "INSTALL",
                    "MAKE",
                    "MAKEFLAGS",
                    "CP",
                    "MV",
                    "MKDIR",
                    "SED",
                ];
                if let Some(w) = args.iter().find(|w| {
                    let t = w.text();
                    !t.starts_with('-')
                        && t.split_once('=').is_some_and(|(n, _)| {
                            MAKE_CODE_VARS.contains(&n.trim_end_matches([':', '+', '?']))
                                || bash_rules::risky_var(n.trim_end_matches([':', '+', '?']))
                        })
                }) {
                    self.opaque(format!(
                        "{} sets {}, a make variable recipes may run",
                        q(source),
                        q(&w.raw)
                    ));
                }
                let file = args
                    .iter()
                    .position(|w| matches!(w.text(), "-f" | "--file" | "--makefile"))
                    .and_then(|i| args.get(i + 1))
                    .and_then(|w| w.lit.clone());
                let files: Vec<String> = match file {
                    Some(f) => vec![f],
                    None => vec!["GNUmakefile".into(), "makefile".into(), "Makefile".into()],
                };
                if files.iter().any(|f| self.is_written(f)) {
                    self.opaque(format!(
                        "{} runs a makefile written by the same command",
                        q(source)
                    ));
                }
            }
            "git" => self.git_runs(args, source, depth),
            "ssh" | "scp" | "sftp" | "rsync" => {
                let texts: Vec<&str> = args.iter().map(Word::text).collect();
                let risky = texts.iter().enumerate().any(|(i, t)| {
                    let lower = t.to_ascii_lowercase();
                    lower.contains("proxycommand")
                        || lower.contains("localcommand")
                        || lower.contains("knownhostscommand")
                        || (matches!(*t, "-S" | "-e" | "-F") && i + 1 < texts.len())
                        || t.starts_with("--rsh")
                        || t.starts_with("--rsync-path")
                        || (name != "ssh" && t.starts_with("-S"))
                });
                if risky {
                    self.opaque(format!(
                        "{} runs a command given in its options (ssh `ProxyCommand`, `-e`, `-S`)",
                        q(source)
                    ));
                } else if name == "ssh" {
                    self.ssh(args, source, depth);
                }
            }

            "eval" | "watch" => {
                let mut parts = Vec::new();
                let mut skip = false;
                for w in args {
                    if name == "watch" && parts.is_empty() {
                        if skip {
                            skip = false;
                            continue;
                        }
                        let t = w.text();
                        if t.starts_with('-') {
                            skip = matches!(t, "-n" | "--interval" | "-d" | "-q");
                            skip &= t != "-d";
                            continue;
                        }
                    }
                    match &w.lit {
                        Some(l) => parts.push(l.clone()),
                        None => {
                            self.opaque(format!(
                                "{} runs {}, which is only known when it runs",
                                q(source),
                                q(&w.raw)
                            ));
                            return;
                        }
                    }
                }
                if !parts.is_empty() {
                    // `eval` runs in this shell (its `cd` moves what follows); `watch` runs
                    // a child shell.
                    let saved = self.cd.clone();
                    self.script(&parts.join(" "), depth + 1);
                    if name == "watch" {
                        self.cd = saved;
                    }
                }
            }
            "source" | "." => {
                if let Some(w) = args.first() {
                    self.script_file(w, source);
                }
                // The script runs in this shell and may change directory.
                self.cd = Cd::Unknown(source.to_string());
            }
            "find" => {
                let mut i = 0usize;
                while i < args.len() {
                    if matches!(args[i].text(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                        let start = i + 1;
                        let mut end = start;
                        while end < args.len() && !matches!(args[end].text(), ";" | "+") {
                            end += 1;
                        }
                        if end > start {
                            let inner = args[start..end].to_vec();
                            let was = self.in_find_exec;
                            self.in_find_exec = true;
                            let saved = self.cd.clone();
                            self.simple(inner, source, depth);
                            self.cd = saved;
                            self.in_find_exec = was;
                        }
                        i = end;
                    }
                    i += 1;
                }
            }
            _ => {}
        }
    }

    /// Whether a literal script or command holds the `xargs -I` replace string (or `{}` of
    /// `find -exec`): then it is built from input when it runs.
    fn built_from_input(&self, text: &str) -> bool {
        match &self.xargs_repl {
            Some(r) => text.contains(r.as_str()),
            None => self.in_find_exec && text.contains("{}"),
        }
    }

    /// A script file a shell, an interpreter or `source` runs: a computed name, stdin, a
    /// descriptor or a process substitution (`bash <(…)`, `. /dev/stdin`) is opaque, and so
    /// is a file written by the same command; otherwise it is a path the command reads.
    fn script_file(&mut self, w: &Word, source: &str) {
        let Some(lit) = w.lit.as_deref() else {
            self.opaque(format!(
                "{} runs the script {}, which is only known when it runs",
                q(source),
                q(&w.raw)
            ));
            return;
        };
        if lit == "-"
            || lit.starts_with("/dev/")
            || lit.starts_with("/proc/")
            || lit.starts_with("/system/")
        {
            self.opaque(format!(
                "{} reads its script from stdin or a descriptor ({})",
                q(source),
                q(lit)
            ));
            return;
        }
        if self.built_from_input(lit) {
            self.opaque(format!(
                "{} runs a script named by the input when it runs",
                q(source)
            ));
            return;
        }
        if self.is_written(lit) {
            self.opaque(format!(
                "{} runs {}, a file written by the same command",
                q(source),
                q(lit)
            ));
            return;
        }
        let w = w.clone();
        self.path(&w, false, source, true);
    }

    /// An interpreter (`python`, `perl`, `node`, …): inline code (`-c`, `-e`, `-pe`) is
    /// opaque; so is a program read from stdin (no script operand) or from a file written
    /// by the same command.
    fn interpreter(&mut self, name: &str, inline: &[&str], args: &[Word], source: &str) {
        let mut i = 0usize;
        let mut no_script_needed = false;
        while i < args.len() {
            let t = args[i].text();
            if inline.contains(&t)
                || inline
                    .iter()
                    .any(|o| o.len() > 2 && t.starts_with(&format!("{o}=")))
            {
                self.opaque(format!(
                    "{} runs inline code, which is not analysed",
                    q(source)
                ));
                return;
            }
            if let Some(cluster) = t.strip_prefix('-').filter(|c| !c.starts_with('-')) {
                // `perl -pe CODE`, `python -Ic CODE`, `ruby -ne CODE`, `perl -e'…'`.
                let letters: Vec<char> = inline
                    .iter()
                    .filter_map(|o| o.strip_prefix('-').filter(|l| l.len() == 1))
                    .filter_map(|l| l.chars().next())
                    .collect();
                if cluster.chars().any(|c| letters.contains(&c)) {
                    self.opaque(format!(
                        "{} runs inline code, which is not analysed",
                        q(source)
                    ));
                    return;
                }
            }
            if matches!(
                t,
                "-m" | "--version" | "-V" | "-h" | "--help" | "-v" | "--check" | "-l" | "--list"
            ) {
                no_script_needed = true;
                if t == "-m" {
                    return;
                }
            }
            if name.starts_with("deno") || name == "bun" {
                // Subcommand interpreters: `deno eval CODE`, `bun run x`.
                if t == "eval" {
                    self.opaque(format!(
                        "{} runs inline code, which is not analysed",
                        q(source)
                    ));
                }
                return;
            }
            if !t.starts_with('-') || t == "-" {
                break;
            }
            i += 1;
        }
        match args.get(i) {
            Some(w) => self.script_file(w, source),
            None if no_script_needed => {}
            None => self.opaque(format!(
                "{} reads its program from stdin, a pipe or a here-document",
                q(source)
            )),
        }
    }

    /// `awk PROGRAM FILE…`: a program that runs commands or writes files is opaque, as is a
    /// program from a file (`-f`) written by the same command or an in-place edit.
    fn awk(&mut self, args: &[Word], source: &str) {
        let mut i = 0usize;
        let mut program: Option<&Word> = None;
        let mut from_file = false;
        while i < args.len() {
            let t = args[i].text();
            match t {
                "-f" | "--file" => {
                    from_file = true;
                    if let Some(w) = args.get(i + 1) {
                        self.script_file(w, source);
                    }
                    i += 2;
                    continue;
                }
                "-i" | "--include" | "-l" | "--load" | "-E" | "--exec" => {
                    self.opaque(format!(
                        "{} loads code or edits files in place (`{t}`)",
                        q(source)
                    ));
                    return;
                }
                "-e" | "--source" => {
                    program = args.get(i + 1);
                    i += 2;
                    continue;
                }
                "-F" | "-v" | "--assign" | "--field-separator" => {
                    i += 2;
                    continue;
                }
                "--" => {
                    i += 1;
                    break;
                }
                _ if t.starts_with('-') && t.len() > 1 => {
                    i += 1;
                    continue;
                }
                _ => break,
            }
        }
        if program.is_none() && !from_file {
            program = args.get(i);
        }
        match program {
            Some(w) => match &w.lit {
                Some(p) => {
                    if let Some(why) = bash_rules::awk_risk(p) {
                        self.opaque(format!("{} {why}", q(source)));
                    }
                }
                None => self.opaque(format!(
                    "the awk program of {} is only known when it runs",
                    q(source)
                )),
            },
            None if !from_file => self.opaque(format!("{} has no awk program", q(source))),
            None => {}
        }
    }

    /// `sed SCRIPT FILE…`: a script that writes or reads files or runs commands (`w`, `r`,
    /// `e`, `s///w`) is opaque unless `--sandbox` forbids them.
    fn sed(&mut self, args: &[Word], source: &str) {
        if args.iter().any(|w| w.text() == "--sandbox") {
            return;
        }
        let mut scripts: Vec<&Word> = Vec::new();
        let mut i = 0usize;
        let mut first_operand: Option<&Word> = None;
        while i < args.len() {
            let t = args[i].text();
            if matches!(t, "-e" | "--expression") {
                if let Some(w) = args.get(i + 1) {
                    scripts.push(w);
                }
                i += 2;
                continue;
            }
            if t.starts_with("--expression=") {
                scripts.push(&args[i]);
                i += 1;
                continue;
            }
            if matches!(t, "-f" | "--file") || t.starts_with("--file=") {
                if let Some(w) = args.get(i + 1).filter(|_| !t.contains('=')) {
                    self.script_file(w, source);
                }
                scripts.push(&args[i]);
                i += if t.contains('=') { 1 } else { 2 };
                continue;
            }
            if matches!(t, "-l" | "--line-length") {
                i += 2;
                continue;
            }
            if t.starts_with('-') && t.len() > 1 {
                if !t.starts_with("--") && t[1..].contains('e') && !t.ends_with('e') {
                    // `-ne's/a/b/'` style: the script is attached.
                    self.opaque(format!(
                        "{} has a script attached to its options",
                        q(source)
                    ));
                    return;
                }
                if !t.starts_with("--") && t.ends_with('e') && t.len() > 2 {
                    if let Some(w) = args.get(i + 1) {
                        scripts.push(w);
                    }
                    i += 2;
                    continue;
                }
                i += 1;
                continue;
            }
            if first_operand.is_none() {
                first_operand = Some(&args[i]);
            }
            i += 1;
        }
        if scripts.is_empty()
            && let Some(w) = first_operand
        {
            scripts.push(w);
        }
        for w in scripts {
            let t = w.text();
            if t.starts_with("-f") || t.starts_with("--file") {
                continue;
            }
            let text = t.strip_prefix("--expression=").unwrap_or(t);
            match &w.lit {
                Some(_) => {
                    if let Some(why) = bash_rules::sed_risk(text) {
                        self.opaque(format!("the sed script of {} {why}", q(source)));
                    }
                }
                None => self.opaque(format!(
                    "the sed script of {} is only known when it runs",
                    q(source)
                )),
            }
        }
    }

    /// `ssh HOST COMMAND…`: the command runs on the host, which may be this machine
    /// (`localhost`, an alias in `~/.ssh/config`), so it is analysed like `sh -c`.
    fn ssh(&mut self, args: &[Word], source: &str, depth: usize) {
        const WITH_VALUE: &str = "BbcDEeFIiJLlmOoPpQRSWw";
        let mut i = 0usize;
        while i < args.len() {
            let t = args[i].text();
            if t == "--" {
                i += 1;
                break;
            }
            if let Some(cluster) = t.strip_prefix('-').filter(|c| !c.is_empty()) {
                let takes = cluster
                    .chars()
                    .position(|c| WITH_VALUE.contains(c))
                    .is_some_and(|p| p + 1 == cluster.len());
                i += 1 + usize::from(takes);
                continue;
            }
            break;
        }
        // args[i] is the host; the rest is the remote command.
        let rest = args.get(i + 1..).unwrap_or(&[]);
        if rest.is_empty() {
            return;
        }
        let mut parts = Vec::new();
        for w in rest {
            match &w.lit {
                Some(l) => parts.push(l.clone()),
                None => {
                    self.opaque(format!(
                        "{} runs a remote command only known when it runs",
                        q(source)
                    ));
                    return;
                }
            }
        }
        let saved = self.cd.clone();
        self.script(&parts.join(" "), depth + 1);
        self.cd = saved;
    }

    /// Commands that start a shell: `su -c SCRIPT`, `script -c SCRIPT`, `sg GROUP SCRIPT`,
    /// `nix-shell --run SCRIPT`; without a script (or `sudo -s`, `doas -s`) the shell reads
    /// stdin, which is opaque.
    fn shell_runner(&mut self, name: &str, args: &[Word], source: &str, depth: usize) {
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        let script_at = texts.iter().position(|t| {
            matches!(
                *t,
                "-c" | "--command" | "--session-command" | "--run" | "--command="
            ) || t.starts_with("--command=")
                || t.starts_with("--run=")
                || (name == "script"
                    && t.starts_with('-')
                    && !t.starts_with("--")
                    && t.ends_with('c'))
        });
        let script: Option<Word> = match script_at {
            Some(i) => match texts[i].split_once('=') {
                Some((_, v)) => Some(args[i].part(v)),
                None => args.get(i + 1).cloned(),
            },
            None if name == "sg" => {
                // `sg GROUP CMD`.
                args.get(1).cloned()
            }
            None => None,
        };
        match (name, script) {
            (_, Some(w)) => self.wrapper_script(Some(&w), source, depth),
            ("sudo" | "doas", None) => {
                if texts.iter().any(|t| {
                    matches!(*t, "-s" | "-i" | "--shell" | "--login")
                        || (t.starts_with('-')
                            && !t.starts_with("--")
                            && (t.contains('s') || t.contains('i')))
                }) {
                    self.opaque(format!("{} starts a shell reading stdin", q(source)));
                }
            }
            ("nix-shell", None) => {}
            (_, None) => self.opaque(format!("{} starts a shell reading stdin", q(source))),
        }
        if name == "script"
            && let Some(file) = args
                .iter()
                .enumerate()
                .filter(|(i, w)| {
                    !w.text().starts_with('-') && script_at.is_none_or(|s| *i != s + 1)
                })
                .map(|(_, w)| w)
                .next()
        {
            self.path(file, true, source, true);
        }
    }

    /// Git subcommands that run commands given to them (`rebase --exec`, `submodule
    /// foreach`, `bisect run`, `--upload-pack=…`) or change configuration that runs code
    /// (`git config alias.p push`, `core.fsmonitor`).
    fn git_runs(&mut self, args: &[Word], source: &str, depth: usize) {
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        let sub = texts.first().copied().unwrap_or("");
        for t in &texts {
            if t.starts_with("--upload-pack")
                || t.starts_with("--template")
                || *t == "-O"
                || t.starts_with("--open-files-in-pager")
                || t.starts_with("--receive-pack")
                || t.starts_with("--exec=")
                || *t == "--exec" && sub == "archive"
                || t.starts_with("--extcmd")
                || t.starts_with("--tool=")
                || t.starts_with("--config=")
                || (sub == "clone" && (*t == "-u" || *t == "--config" || *t == "-c"))
                || (sub == "difftool" && *t == "-x")
                || (sub == "mergetool" && *t == "-t")
            {
                self.opaque(format!(
                    "{} runs a command or sets configuration given in its options (`{t}`)",
                    q(source)
                ));
                return;
            }
        }
        match sub {
            "rebase" => {
                let mut i = 1;
                while i < args.len() {
                    let t = texts[i];
                    let value = if matches!(t, "-x" | "--exec") {
                        i += 1;
                        args.get(i).cloned()
                    } else {
                        t.strip_prefix("--exec=").map(Word::plain)
                    };
                    if let Some(v) = value {
                        self.wrapper_script(Some(&v), source, depth);
                    }
                    i += 1;
                }
            }
            "submodule" if texts.contains(&"foreach") => {
                let at = texts.iter().position(|t| *t == "foreach").unwrap_or(0);
                let rest: Vec<&Word> = args[at + 1..]
                    .iter()
                    .filter(|w| !w.text().starts_with("--"))
                    .collect();
                let mut parts = Vec::new();
                for w in rest {
                    match &w.lit {
                        Some(l) => parts.push(l.clone()),
                        None => {
                            self.opaque(format!(
                                "{} runs a command only known when it runs",
                                q(source)
                            ));
                            return;
                        }
                    }
                }
                let saved = self.cd.clone();
                self.script(&parts.join(" "), depth + 1);
                self.cd = saved;
            }
            "bisect" if texts.get(1) == Some(&"run") => {
                let inner = args[2..].to_vec();
                if !inner.is_empty() {
                    let saved = self.cd.clone();
                    self.simple(inner, source, depth);
                    self.cd = saved;
                }
            }
            "filter-branch" | "filter-repo" => self.opaque(format!(
                "{} runs filter commands, which are not analysed",
                q(source)
            )),
            "config" => self.git_config(&args[1..], source),
            _ => {}
        }
    }

    /// `git config …`: setting (not reading) a key whose value git runs or that defines an
    /// alias is opaque; so is a key only known when it runs and `--edit`.
    fn git_config(&mut self, args: &[Word], source: &str) {
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        let reading = texts.iter().any(|t| {
            matches!(
                *t,
                "--get"
                    | "--get-all"
                    | "--get-regexp"
                    | "--get-urlmatch"
                    | "-l"
                    | "--list"
                    | "get"
                    | "list"
                    | "--show-origin"
                    | "--show-scope"
                    | "--unset"
                    | "--unset-all"
                    | "unset"
                    | "--get-color"
                    | "--get-colorbool"
            )
        });
        if texts.iter().any(|t| matches!(*t, "-e" | "--edit" | "edit")) {
            self.opaque(format!(
                "{} opens an editor on git's configuration",
                q(source)
            ));
            return;
        }
        let with_value = [
            "-f",
            "--file",
            "--blob",
            "--type",
            "--default",
            "--comment",
            "--value",
        ];
        let mut i = 0usize;
        let mut operands: Vec<&Word> = Vec::new();
        while i < args.len() {
            let t = texts[i];
            if with_value.contains(&t) {
                i += 2;
                continue;
            }
            if t.starts_with('-') {
                i += 1;
                continue;
            }
            operands.push(&args[i]);
            i += 1;
        }
        if operands.first().is_some_and(|w| {
            matches!(
                w.text(),
                "set" | "get" | "unset" | "list" | "rename-section" | "remove-section"
            )
        }) {
            operands.remove(0);
        }
        if reading {
            return;
        }
        let Some(key) = operands.first() else { return };
        match &key.lit {
            None => self.opaque(format!(
                "{} sets git configuration only known when it runs",
                q(source)
            )),
            Some(k) => {
                let k = k.to_ascii_lowercase();
                if operands.len() >= 2 && git_key_risky(&k) {
                    self.opaque(format!(
                        "{} sets `{k}`, which may define a git alias or a command git runs",
                        q(source)
                    ));
                }
            }
        }
    }

    /// Paths a command touches through its arguments: write targets of file-writing
    /// commands, and path-like arguments of any command.
    fn paths_of(&mut self, name: &str, args: &[Word], source: &str) {
        // (options taking a separate value, which operands are written)
        let with_value: &[&str] = match name {
            "truncate" => &["-s", "--size", "-r", "--reference"],
            "mkdir" => &["-m", "--mode"],
            "touch" => &["-d", "-t", "-r", "--date", "--reference"],
            "install" => &[
                "-m", "-o", "-g", "-S", "--mode", "--owner", "--group", "--suffix",
            ],
            "cp" | "mv" | "ln" => &["-S", "--suffix"],
            "sed" => &["-e", "-f", "-l", "--expression", "--file", "--line-length"],
            "curl" => &[
                "-o",
                "--output",
                "-d",
                "--data",
                "--data-binary",
                "--data-raw",
                "--data-urlencode",
                "-F",
                "--form",
                "-H",
                "--header",
                "-X",
                "-u",
                "-A",
                "-T",
                "--upload-file",
                "-K",
                "--config",
                "--output-dir",
                "-b",
                "-c",
                "--cookie",
                "--cookie-jar",
                "-e",
                "--referer",
            ],
            "wget" => &[
                "-O",
                "--output-document",
                "-P",
                "--directory-prefix",
                "-o",
                "--output-file",
                "-a",
                "--append-output",
                "-i",
                "--input-file",
            ],
            "sort" => &[
                "-o",
                "--output",
                "-T",
                "--temporary-directory",
                "-k",
                "-t",
                "-S",
            ],
            "gcc" | "g++" | "cc" | "c++" | "clang" | "clang++" | "ld" | "rustc" | "as" | "nasm" => {
                &[
                    "-o",
                    "-I",
                    "-L",
                    "-l",
                    "-D",
                    "-U",
                    "-x",
                    "--out-dir",
                    "-C",
                    "--edition",
                    "--crate-type",
                    "--crate-name",
                    "--target",
                ]
            }
            "tar" | "bsdtar" => &[
                "-f",
                "--file",
                "-C",
                "--directory",
                "-T",
                "--files-from",
                "-X",
                "--exclude-from",
                "-g",
                "--listed-incremental",
                "-b",
                "-K",
                "-N",
                "-V",
                "-H",
                "--format",
                "--owner",
                "--group",
                "--mode",
                "--transform",
                "--exclude",
            ],
            "unzip" => &["-d", "-x", "-P"],
            "zip" => &["-b", "-n", "-t", "-tt", "-P", "-x", "-i"],
            "rsync" => &[
                "-e",
                "--rsh",
                "--rsync-path",
                "--exclude",
                "--include",
                "--filter",
                "-f",
                "--exclude-from",
                "--include-from",
                "--files-from",
                "--backup-dir",
                "--temp-dir",
                "-T",
                "--partial-dir",
                "--log-file",
                "--password-file",
                "--chmod",
                "--chown",
                "--compare-dest",
                "--copy-dest",
                "--link-dest",
            ],
            "scp" => &["-P", "-i", "-o", "-F", "-c", "-l", "-S", "-J"],
            "dd" => &[],
            "git" if args.first().map(Word::text) == Some("format-patch") => {
                &["-o", "--output-directory"]
            }
            _ => &[],
        };
        // `find … -exec CMD ;`: CMD's arguments belong to CMD (see `scripts`).
        let args = match name {
            "find" => {
                let end = args
                    .iter()
                    .position(|w| matches!(w.text(), "-exec" | "-execdir" | "-ok" | "-okdir"))
                    .unwrap_or(args.len());
                &args[..end]
            }
            _ => args,
        };
        let mut operands: Vec<&Word> = Vec::new();
        let mut target_dir: Option<&Word> = None;
        let mut sed_inplace = false;
        let mut sed_script_given = false;
        let mut i = 0usize;
        let mut no_more_flags = false;
        while i < args.len() {
            let w = &args[i];
            let t = w.text();
            if !no_more_flags && t == "--" {
                no_more_flags = true;
                i += 1;
                continue;
            }
            if !no_more_flags && t.starts_with('-') && t.len() > 1 {
                let (opt, inline) = match t.split_once('=') {
                    Some((o, v)) => (o, Some(v)),
                    None => (t, None),
                };
                let value: Option<Word> = match inline {
                    Some(v) => Some(w.part(v)),
                    None if with_value.contains(&opt) => args.get(i + 1).cloned(),
                    None => None,
                };
                match (name, opt) {
                    ("cp" | "mv" | "ln" | "install", "-t" | "--target-directory") => {
                        if inline.is_none() {
                            target_dir = args.get(i + 1);
                            i += 1;
                        } else if let Some(v) = &value {
                            self.path(v, true, source, true);
                        }
                    }
                    ("sed", o) if o == "-i" || o.starts_with("--in-place") => sed_inplace = true,
                    ("sed", o)
                        if !o.starts_with("--")
                            && o[1..].contains('i')
                            && !with_value.contains(&o) =>
                    {
                        sed_inplace = true
                    }
                    ("sed", "-e" | "-f" | "--expression" | "--file") => sed_script_given = true,
                    ("curl", "-o" | "--output" | "--output-dir" | "-c" | "--cookie-jar")
                    | (
                        "wget",
                        "-O" | "--output-document" | "-P" | "--directory-prefix" | "-o"
                        | "--output-file" | "-a" | "--append-output",
                    )
                    | ("sort", "-o" | "--output")
                    | ("git", "-o" | "--output-directory")
                    | (
                        "gcc" | "g++" | "cc" | "c++" | "clang" | "clang++" | "ld" | "rustc" | "as"
                        | "nasm",
                        "-o" | "--out-dir",
                    )
                    | ("tar" | "bsdtar", "-C" | "--directory")
                    | ("unzip", "-d")
                    | (
                        "rsync",
                        "--backup-dir" | "--temp-dir" | "-T" | "--partial-dir" | "--log-file",
                    ) => {
                        if let Some(v) = value.as_ref().filter(|v| v.text() != "-") {
                            self.path(v, true, source, true);
                        }
                    }
                    (
                        "tar" | "bsdtar",
                        "-f"
                        | "--file"
                        | "-T"
                        | "--files-from"
                        | "-X"
                        | "--exclude-from"
                        | "-g"
                        | "--listed-incremental",
                    )
                    | ("curl", "-T" | "--upload-file" | "-K" | "--config" | "-b" | "--cookie")
                    | ("wget", "-i" | "--input-file")
                    | (
                        "rsync",
                        "--exclude-from" | "--include-from" | "--files-from" | "--password-file",
                    ) => {
                        if let Some(v) = value.as_ref().filter(|v| v.text() != "-") {
                            self.path(v, false, source, true);
                        }
                    }
                    (
                        "curl",
                        "-d" | "--data" | "--data-binary" | "--data-urlencode" | "-F" | "--form",
                    ) => {
                        // `@FILE` (`-F name=@FILE`, `<FILE`) sends a file's contents.
                        if let Some(v) = &value {
                            let t = v.text();
                            let file = t
                                .split_once('@')
                                .or_else(|| t.split_once('<'))
                                .map(|(_, f)| f.split(';').next().unwrap_or(f).to_string());
                            match (file, &v.lit) {
                                (Some(f), Some(_)) if !f.is_empty() && f != "-" => {
                                    self.path(&Word::plain(&f), false, source, true)
                                }
                                (_, None) if v.raw.contains('@') || v.raw.contains('<') => {
                                    self.path(v, false, source, true)
                                }
                                _ => {}
                            }
                        }
                    }
                    (_, o) if OUTPUT_OPTIONS.contains(&o) => {
                        // `--target-dir DIR`, `--output=FILE`: an output location.
                        let v = value.clone().or_else(|| args.get(i + 1).cloned());
                        if let Some(v) = v.filter(|v| v.text() != "-") {
                            self.path(&v, true, source, true);
                        }
                        if inline.is_none() && !with_value.contains(&opt) {
                            i += 1;
                        }
                    }
                    _ => {
                        if let Some(v) = &value {
                            self.path(v, false, source, false);
                        }
                    }
                }
                if inline.is_none() && with_value.contains(&opt) {
                    i += 1;
                }
                i += 1;
                continue;
            }
            operands.push(w);
            i += 1;
        }
        let written: Vec<&Word> = match name {
            "tee" | "rm" | "rmdir" | "unlink" | "shred" | "touch" | "mkdir" | "truncate" => {
                operands.clone()
            }
            "chmod" | "chown" | "chgrp" => operands.iter().skip(1).copied().collect(),
            // `mv` removes its sources too.
            "mv" if target_dir.is_some() || operands.len() >= 2 => {
                let mut v = operands.clone();
                v.extend(target_dir);
                v
            }
            "cp" | "mv" | "install" | "ln" => match target_dir {
                Some(d) => vec![d],
                None if operands.len() >= 2 => operands.last().copied().into_iter().collect(),
                None => Vec::new(),
            },
            "sed" if sed_inplace => operands
                .iter()
                .skip(usize::from(!sed_script_given))
                .copied()
                .collect(),
            _ => Vec::new(),
        };
        if name == "dd" {
            for w in &operands {
                if let Some(l) = &w.lit {
                    if let Some(v) = l.strip_prefix("of=") {
                        self.path(&Word::plain(v), true, source, true);
                    } else if let Some(v) = l.strip_prefix("if=") {
                        self.path(&Word::plain(v), false, source, true);
                    }
                } else if w.raw.contains("of=") {
                    self.opaque(format!(
                        "{} writes to {}, a path only known when it runs",
                        q(source),
                        q(&w.raw)
                    ));
                }
            }
        }
        if name == "find" {
            self.find_paths(args, source);
        }
        if name == "git" && args.first().map(Word::text) == Some("clone") {
            self.clone_paths(&args[1..], source);
        }
        let remote = |w: &Word| {
            matches!(name, "rsync" | "scp")
                && w.lit.as_deref().is_some_and(|l| {
                    l.split_once(':').is_some_and(|(h, _)| !h.contains('/'))
                        || l.starts_with("rsync://")
                })
        };
        let written: Vec<&Word> = match name {
            "rsync" | "scp" if operands.len() >= 2 => {
                operands.last().copied().into_iter().collect()
            }
            _ => written,
        };
        let required = matches!(
            name,
            "cp" | "mv" | "ln" | "install" | "rsync" | "scp" | "tee" | "rm" | "touch" | "mkdir"
        );
        for w in &written {
            if !remote(w) {
                self.path(w, true, source, true);
            }
        }
        if matches!(name, "cp" | "mv") {
            // A copied or moved symbolic link resolves from its new place.
            let preserving = name == "mv"
                || args.iter().any(|w| {
                    let t = w.text();
                    matches!(t, "--archive" | "--no-dereference" | "--recursive")
                        || t.starts_with("--preserve")
                        || (t.starts_with('-')
                            && !t.starts_with("--")
                            && t.contains(['a', 'd', 'P', 'r', 'R']))
                });
            if preserving
                && let Some(w) = written.last()
                && let Some(l) = w.lit.as_deref()
            {
                for c in self.candidates(l) {
                    if !self.link_dests.contains(&c) {
                        self.link_dests.push(c);
                    }
                }
            }
        }
        // The program text of `sed`/`awk` and the pattern of `grep` are not paths.
        let program_operand = match name {
            "sed" | "gsed" if !sed_script_given => operands.first().copied(),
            "awk" | "gawk" | "mawk" | "nawk"
                if !args
                    .iter()
                    .any(|w| matches!(w.text(), "-f" | "--file" | "-e" | "--source")) =>
            {
                operands.first().copied()
            }
            "grep" | "egrep" | "fgrep" | "rg"
                if !args.iter().any(|w| {
                    let t = w.text();
                    matches!(t, "-e" | "-f" | "--regexp" | "--file")
                        || t.starts_with("--regexp=")
                        || t.starts_with("--file=")
                }) =>
            {
                operands.first().copied()
            }
            _ => None,
        };
        // After something made links the analysis cannot see, every operand of a file
        // command may go through one.
        let links_made = self.links.is_some() || !self.link_dests.is_empty();
        for w in operands.iter().copied() {
            if written.iter().any(|x| std::ptr::eq(*x, w))
                || remote(w)
                || program_operand.is_some_and(|p| std::ptr::eq(p, w))
            {
                continue;
            }
            if w.lit.is_none() && FILE_COMMANDS.contains(&name) && self.bare_unknown(w) {
                self.unknown(
                    format!(
                        "{} reads {}, a path only known when it runs",
                        q(source),
                        q(&w.raw)
                    ),
                    false,
                );
                continue;
            }
            let required = required || (links_made && FILE_COMMANDS.contains(&name));
            self.path(w, false, source, required);
        }
        let first = args.first().map(Word::text).unwrap_or("");
        let makes_links = match name {
            "tar" | "bsdtar" => {
                args.iter().any(|w| {
                    let t = w.text();
                    matches!(t, "--extract" | "--get")
                        || (t.starts_with('-') && !t.starts_with("--") && t.contains('x'))
                }) || (!first.starts_with('-') && first.contains('x'))
            }
            "unzip" | "cpio" | "7z" | "7za" | "7zr" | "unrar" | "pax" | "rsync" | "ar" => true,
            "git" => matches!(
                first,
                "clone"
                    | "checkout"
                    | "switch"
                    | "pull"
                    | "merge"
                    | "reset"
                    | "restore"
                    | "stash"
                    | "am"
                    | "apply"
                    | "cherry-pick"
                    | "rebase"
                    | "worktree"
                    | "submodule"
                    | "read-tree"
                    | "checkout-index"
                    | "revert"
            ),
            "ln" => operands.iter().any(|w| w.lit.is_none() || w.glob),
            _ => false,
        };
        if makes_links && self.links.is_none() {
            self.links = Some(collapse(source));
        }
    }

    /// `find`: `-fprint FILE` and friends write FILE; `-delete` removes what it finds under
    /// its starting points (so they are written).
    fn find_paths(&mut self, args: &[Word], source: &str) {
        let mut i = 0usize;
        while i < args.len() {
            if matches!(args[i].text(), "-fprint" | "-fprint0" | "-fls" | "-fprintf") {
                if let Some(w) = args.get(i + 1) {
                    let w = w.clone();
                    self.path(&w, true, source, true);
                }
                i += 1;
            }
            i += 1;
        }
        if args.iter().any(|w| w.text() == "-delete") {
            let roots: Vec<Word> = args
                .iter()
                .take_while(|w| {
                    let t = w.text();
                    !t.starts_with('-') && !matches!(t, "(" | "!" | ")")
                })
                .cloned()
                .collect();
            if roots.is_empty() {
                self.path(&Word::plain("."), true, source, true);
            }
            for r in roots {
                self.path(&r, true, source, true);
            }
        }
    }

    /// `git clone [options] REPO [DIR]`: a local REPO is read, DIR is written.
    fn clone_paths(&mut self, args: &[Word], source: &str) {
        const WITH_VALUE: &[&str] = &[
            "-b",
            "--branch",
            "--depth",
            "-o",
            "--origin",
            "--reference",
            "--reference-if-able",
            "--separate-git-dir",
            "--template",
            "-j",
            "--jobs",
            "--filter",
            "--shallow-since",
            "--shallow-exclude",
            "--bundle-uri",
            "--server-option",
            "--revision",
        ];
        let mut operands: Vec<&Word> = Vec::new();
        let mut i = 0usize;
        while i < args.len() {
            let t = args[i].text();
            if t.starts_with('-') && t.len() > 1 {
                i += if WITH_VALUE.contains(&t) { 2 } else { 1 };
                continue;
            }
            operands.push(&args[i]);
            i += 1;
        }
        if let Some(repo) = operands.first() {
            let local = repo
                .lit
                .as_deref()
                .is_none_or(|r| !r.contains("://") && !r.contains('@'));
            if local {
                let w = (*repo).clone();
                self.path(&w, false, source, false);
            }
        }
        if let Some(dir) = operands.get(1) {
            let w = (*dir).clone();
            self.path(&w, true, source, true);
        }
    }

    /// The directories a relative literal path may be in (one per `cd` candidate); empty
    /// when the directory is unknown.
    fn candidates(&self, lit: &str) -> Vec<String> {
        if lit.starts_with('/') || lit.starts_with('~') {
            return vec![lit.to_string()];
        }
        match &self.cd {
            Cd::Known(dirs) => dirs
                .iter()
                .map(|d| {
                    if d.is_empty() {
                        lit.to_string()
                    } else {
                        format!("{}/{lit}", d.trim_end_matches('/'))
                    }
                })
                .collect(),
            Cd::Unknown(_) => Vec::new(),
        }
    }

    /// A word that is one bare expansion (`$x`, `"${x}"`, `$(…)`) whose value may be a path
    /// outside: a variable assigned from something only known when it runs, an environment
    /// variable naming a directory (`$HOME`), a positional parameter, or a command's output.
    fn bare_unknown(&self, w: &Word) -> bool {
        if w.skel != "\0" || w.raw.starts_with("<(") || w.raw.starts_with(">(") {
            // A process substitution is a `/dev/fd/N` pipe.
            return false;
        }
        let raw = w.raw.trim_matches('"');
        let name = raw
            .strip_prefix("${")
            .and_then(|r| r.strip_suffix('}'))
            .or_else(|| raw.strip_prefix('$'))
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        match name {
            Some(n) if n.chars().all(|c| c.is_ascii_digit()) => true,
            Some(n) => match self.vars.get(n) {
                Some(Var::Unknown) => true,
                Some(Var::Literal) => false,
                None => bash_rules::directory_var(n),
            },
            None => true,
        }
    }
}

/// Long options that by convention name where a program writes (`--target-dir DIR`,
/// `--output=FILE`): their value is a written path for any command.
const OUTPUT_OPTIONS: &[&str] = &[
    "--output",
    "--output-file",
    "--outfile",
    "--out-file",
    "--out-dir",
    "--outdir",
    "--output-dir",
    "--target-dir",
    "--log-file",
    "--logfile",
    "--prefix",
    "--destdir",
    "--install-dir",
    "--root",
];

/// Commands whose operands are files they read (or write): a bare computed operand
/// (`cat $X`, `cp "$(…)" .`) is a path only known when it runs.
const FILE_COMMANDS: &[&str] = &[
    "cat",
    "tac",
    "head",
    "tail",
    "less",
    "more",
    "nl",
    "od",
    "xxd",
    "hexdump",
    "base64",
    "strings",
    "wc",
    "sort",
    "uniq",
    "cut",
    "paste",
    "join",
    "comm",
    "diff",
    "cmp",
    "file",
    "stat",
    "du",
    "ls",
    "tree",
    "find",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "awk",
    "sed",
    "cp",
    "mv",
    "ln",
    "rm",
    "rmdir",
    "touch",
    "mkdir",
    "chmod",
    "chown",
    "chgrp",
    "tee",
    "dd",
    "tar",
    "zip",
    "unzip",
    "gzip",
    "gunzip",
    "zcat",
    "bzip2",
    "xz",
    "zstd",
    "rsync",
    "scp",
    "install",
    "truncate",
    "shred",
    "readlink",
    "realpath",
    "source",
    ".",
    "bash",
    "sh",
    "zsh",
    "python",
    "python3",
    "node",
    "perl",
    "ruby",
    "vim",
    "vi",
    "nano",
    "emacs",
    "code",
    "open",
    "xdg-open",
    "jq",
    "yq",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "patch",
];

/// Programs that run a command given to them in a form not analysed here (sandboxes,
/// file watchers, dev shells): `bwrap … CMD`, `watchexec -- CMD`, `cargo watch -s CMD`,
/// `nix develop -c CMD`.
fn runs_given_commands(name: &str, args: &[Word]) -> bool {
    let any = |f: &dyn Fn(&str) -> bool| args.iter().any(|w| f(w.text()));
    match name {
        "bwrap" | "proot" | "watchexec" | "entr" | "nodemon" | "flatpak-spawn" | "toolbox"
        | "distrobox-enter" | "distrobox" | "cargo-watch" => !args.is_empty(),
        "cargo" => {
            args.first().map(Word::text) == Some("watch")
                && any(&|t| {
                    matches!(t, "-x" | "-s" | "--exec" | "--shell" | "--")
                        || t.starts_with("--exec=")
                        || t.starts_with("--shell=")
                })
        }
        "nix" => any(&|t| matches!(t, "-c" | "--command" | "--run") || t.starts_with("--command=")),
        _ => false,
    }
}

/// Whether a node of `kind` is under `node`.
fn has_descendant(node: Node<'_>, kind: &str) -> bool {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if n.kind() == kind {
            return true;
        }
        let mut cur = n.walk();
        stack.extend(n.children(&mut cur));
    }
    false
}

/// The children of `node` with their field names (`name`, `argument`, `body`, …).
fn fielded(node: Node<'_>) -> Vec<(Option<&'static str>, Node<'_>)> {
    let mut cur = node.walk();
    node.children(&mut cur)
        .enumerate()
        .map(|(i, k)| (node.field_name_for_child(i as u32), k))
        .collect()
}

/// The first `ERROR` or missing node under `node`.
fn first_error(node: Node<'_>) -> Option<Node<'_>> {
    if node.is_error() || node.is_missing() {
        return Some(node);
    }
    let mut cur = node.walk();
    let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
    kids.into_iter()
        .filter(|k| k.has_error())
        .find_map(first_error)
}

/// A word node's literal value (quotes and backslashes removed) and its text.
fn word(node: Node<'_>, src: &str) -> Word {
    let raw = src[node.byte_range()].to_string();
    let mut glob = false;
    let lit = literal(node, src, &mut glob);
    let skel = match &lit {
        Some(l) => l.clone(),
        None => skeleton(node, src),
    };
    Word {
        lit,
        raw,
        glob,
        skel,
    }
}

/// The literal parts of a word node with each expansion replaced by `\0`.
fn skeleton(node: Node<'_>, src: &str) -> String {
    let text = &src[node.byte_range()];
    match node.kind() {
        "word" | "number" if node.named_child_count() == 0 => unescape_word(text),
        "raw_string" => text.trim_matches('\'').to_string(),
        "string_content" => unescape_double(text),
        "command_name" => node
            .named_child(0)
            .map(|c| skeleton(c, src))
            .unwrap_or_default(),
        "string" | "concatenation" | "translated_string" => {
            let mut out = String::new();
            let mut cur = node.walk();
            for c in node.children(&mut cur) {
                if c.is_named() {
                    out.push_str(&skeleton(c, src));
                } else if node.kind() == "concatenation" {
                    out.push_str(&src[c.byte_range()]);
                }
            }
            out
        }
        _ => "\0".to_string(),
    }
}

/// A literal word holding a subscript with code in it (`a[$(rm d)]`): bash runs the code
/// when it evaluates the word as a variable name or arithmetic.
fn holds_subscript_code(w: &Word) -> bool {
    w.lit.as_deref().is_some_and(|l| {
        l.contains('[') && (l.contains("$(") || l.contains('`') || l.contains("${"))
    })
}

/// Literal value of a word node, or `None` when it contains an expansion.
fn literal(node: Node<'_>, src: &str, glob: &mut bool) -> Option<String> {
    let text = &src[node.byte_range()];
    match node.kind() {
        "word" | "number" if node.named_child_count() == 0 => {
            if has_unquoted_glob(text) {
                *glob = true;
            }
            Some(unescape_word(text))
        }
        "command_name" => node.named_child(0).and_then(|c| literal(c, src, glob)),
        "raw_string" => Some(
            text.strip_prefix('\'')
                .and_then(|t| t.strip_suffix('\''))
                .unwrap_or(text)
                .to_string(),
        ),
        "string" => {
            let mut cur = node.walk();
            if node
                .named_children(&mut cur)
                .any(|c| c.kind() != "string_content")
            {
                return None;
            }
            let inner = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(text);
            if inner.contains('$') || inner.contains('`') {
                return None;
            }
            Some(unescape_double(inner))
        }
        "ansi_c_string" => decode_ansi_c(
            text.strip_prefix("$'")
                .and_then(|t| t.strip_suffix('\''))
                .unwrap_or(text),
        ),
        "translated_string" => node.named_child(0).and_then(|c| literal(c, src, glob)),
        "concatenation" => {
            let mut out = String::new();
            // The unquoted text with quoted parts masked, for brace expansion across the
            // parts (`{push,origin}` is three words in the tree).
            let mut unquoted = String::new();
            let mut cur = node.walk();
            for c in node.children(&mut cur) {
                if c.is_named() {
                    out.push_str(&literal(c, src, glob)?);
                    if c.kind() == "word" {
                        unquoted.push_str(&src[c.byte_range()]);
                    } else {
                        unquoted.push('Q');
                    }
                } else {
                    unquoted.push_str(&src[c.byte_range()]);
                    let t = &src[c.byte_range()];
                    if t.contains('$') || t.contains('`') {
                        return None;
                    }
                    if has_unquoted_glob(t) {
                        *glob = true;
                    }
                    out.push_str(t);
                }
            }
            if has_unquoted_glob(&unquoted) {
                *glob = true;
            }
            Some(out)
        }
        _ => None,
    }
}

/// Unquoted glob (`*`, `?`, `[`) or brace expansion (`{a,b}`, `{1..3}`) characters.
fn has_unquoted_glob(s: &str) -> bool {
    let mut esc = false;
    let mut brace = false;
    for c in s.chars() {
        if esc {
            esc = false;
            continue;
        }
        match c {
            '\\' => esc = true,
            '*' | '?' | '[' => return true,
            '{' => brace = true,
            ',' if brace => return true,
            '.' if brace => return true,
            _ => {}
        }
    }
    false
}

/// Remove line continuations (backslash-newline) the way bash does before splitting words:
/// everywhere except inside single quotes, `$'…'` and comments. The tree does not join them,
/// so `p\<newline>ush` would otherwise be two words.
fn join_continuations(s: &str) -> String {
    #[derive(PartialEq)]
    enum St {
        Normal,
        Single,
        AnsiC,
        Double,
        Comment,
    }
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut st = St::Normal;
    let mut i = 0usize;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match st {
            St::Normal | St::Double if c == '\\' => {
                if next == Some('\n') {
                    i += 2;
                    continue;
                }
                out.push(c);
                if let Some(n) = next {
                    out.push(n);
                }
                i += 2;
                continue;
            }
            St::Normal => match c {
                '\'' => st = St::Single,
                '"' => st = St::Double,
                '$' if next == Some('\'') => {
                    out.push(c);
                    out.push('\'');
                    i += 2;
                    st = St::AnsiC;
                    continue;
                }
                '#' if out.is_empty()
                    || out.ends_with(|p: char| p.is_whitespace() || ";&|(".contains(p)) =>
                {
                    st = St::Comment
                }
                _ => {}
            },
            St::Double if c == '"' => st = St::Normal,
            St::Single if c == '\'' => st = St::Normal,
            St::AnsiC if c == '\\' => {
                out.push(c);
                if let Some(n) = next {
                    out.push(n);
                }
                i += 2;
                continue;
            }
            St::AnsiC if c == '\'' => st = St::Normal,
            St::Comment if c == '\n' => st = St::Normal,
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The body of a backtick substitution as bash runs it: `\\`, `` \` `` and `\$` become the
/// character itself; other backslashes stay.
fn unescape_backtick(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\' && matches!(it.peek(), Some('\\' | '`' | '$')) {
            out.push(it.next().unwrap_or('\\'));
        } else {
            out.push(c);
        }
    }
    out
}

/// Backslash removal in an unquoted word (`\x` → `x`, backslash-newline → nothing).
fn unescape_word(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next() {
                Some('\n') | None => {}
                Some(n) => out.push(n),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Backslash removal inside double quotes (only before `$`, `` ` ``, `"`, `\` and newline).
fn unescape_double(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.peek() {
                Some('$' | '`' | '"' | '\\') => out.push(it.next().unwrap_or('\\')),
                Some('\n') => {
                    it.next();
                }
                _ => out.push(c),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Decode the body of a `$'…'` string (bash ANSI-C quoting); `None` for escapes this does
/// not know (`\c`), so the word stays non-literal.
fn decode_ansi_c(s: &str) -> Option<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut i = 0usize;
    let hex = |cs: &[char], max: usize| -> (u32, usize) {
        let mut v = 0u32;
        let mut n = 0usize;
        while n < max && n < cs.len() && cs[n].is_ascii_hexdigit() {
            v = v * 16 + cs[n].to_digit(16).unwrap_or(0);
            n += 1;
        }
        (v, n)
    };
    while i < chars.len() {
        let c = chars[i];
        if c != '\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let Some(&e) = chars.get(i + 1) else {
            out.push('\\');
            break;
        };
        i += 2;
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'e' | 'E' => out.push('\u{1b}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            'x' => {
                let (v, n) = hex(&chars[i..], 2);
                if n == 0 {
                    return None;
                }
                out.push(char::from_u32(v)?);
                i += n;
            }
            'u' | 'U' => {
                let (v, n) = hex(&chars[i..], if e == 'u' { 4 } else { 8 });
                if n == 0 {
                    return None;
                }
                out.push(char::from_u32(v)?);
                i += n;
            }
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                let mut n = 0;
                while n < 2 && i < chars.len() && ('0'..='7').contains(&chars[i]) {
                    v = v * 8 + chars[i].to_digit(8).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                out.push(char::from_u32(v)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
#[path = "bash_command_tests.rs"]
mod tests;
