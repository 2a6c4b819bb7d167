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
//! What cannot be known before the command runs is reported in [`Analysis::opaque`] (one
//! reason each): a command word that is not a literal, a shell reading its script from stdin, a
//! pipe or a here-document, `eval`/`source` of a non-literal, git aliases defined inline, a
//! write to a path that is not a literal, and parse errors. The permission layer turns each
//! into at least an "ask" when the ruleset restricts `bash` at all (fail closed).
//!
//! Every path a command touches is reported in [`Analysis::paths`]: redirection targets,
//! write targets of `tee`/`dd of=`/`cp`/`mv`/`install`/`ln`/`rm`/`touch`/`mkdir`/`sed -i`/…,
//! and path-like arguments of any command (absolute, `~`, or containing `..`), joined to the
//! directory of an earlier literal `cd`.

use tree_sitter::{Node, Parser};

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

/// Wrappers skipped to find the command they run, with their options that take a separate
/// value (`sudo -u root rm x` → `rm x`). `timeout` also takes its duration, `env` its
/// `NAME=value` arguments.
const WRAPPERS: &[(&str, &[&str])] = &[
    (
        "sudo",
        &[
            "-u",
            "-g",
            "-h",
            "-p",
            "-C",
            "-D",
            "-r",
            "-t",
            "-U",
            "-T",
            "--user",
            "--group",
            "--host",
            "--prompt",
            "--chdir",
            "--role",
            "--type",
            "--other-user",
            "--close-from",
            "--command-timeout",
        ],
    ),
    ("doas", &["-u", "-C"]),
    ("env", &["-u", "-C", "--unset", "--chdir"]),
    ("nohup", &[]),
    ("time", &["-f", "-o", "--format", "--output"]),
    ("command", &[]),
    ("exec", &["-a"]),
    ("builtin", &[]),
    ("nice", &["-n", "--adjustment"]),
    ("ionice", &["-c", "-n", "-p", "--class", "--classdata"]),
    ("setsid", &[]),
    ("stdbuf", &["-i", "-o", "-e"]),
    ("unbuffer", &[]),
    ("chronic", &[]),
    ("coproc", &[]),
    ("caffeinate", &["-t", "-w"]),
    (
        "xargs",
        &[
            "-a",
            "-d",
            "-E",
            "-I",
            "-L",
            "-n",
            "-P",
            "-s",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-lines",
            "--max-procs",
            "--max-chars",
            "--replace",
            "--eof",
        ],
    ),
    ("timeout", &["-s", "-k", "--signal", "--kill-after"]),
];

/// Shells whose script is analysed (`-c SCRIPT`), or which read it from stdin.
const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "busybox",
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

/// Git config keys (prefix match, lower case) whose value is a command git runs: an inline
/// `-c KEY=…` with one of them makes the command opaque.
const GIT_EXEC_KEYS: &[&str] = &[
    "alias.",
    "core.sshcommand",
    "core.pager",
    "core.editor",
    "core.fsmonitor",
    "core.hookspath",
    "core.gitproxy",
    "core.askpass",
    "diff.external",
    "sequence.editor",
    "credential.helper",
    "gpg.program",
    "gpg.ssh.program",
    "filter.",
    "pager.",
    "uploadpack.packobjectshook",
    "merge.tool",
    "diff.tool",
    "remote.",
    "url.",
    "include.",
    "includeif.",
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

/// Result of [`analyze`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Every simple command, in source order (`cd` gives none: its path is in `paths`).
    pub parts: Vec<Part>,
    /// Why the command's meaning cannot be known before it runs, one sentence each naming
    /// the offending text (deduplicated).
    pub opaque: Vec<String>,
    /// Paths the command touches (deduplicated).
    pub paths: Vec<PathUse>,
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
        cd: Cd::Here,
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
    /// The working directory.
    Here,
    /// A literal directory (relative, absolute or `~`-based).
    Dir(String),
    /// Only known when the command runs (`cd $X`, `cd -`, `popd`).
    Unknown(String),
}

/// One shell word: its value after quote removal when it is a literal, and its text as
/// written.
#[derive(Debug, Clone)]
struct Word {
    lit: Option<String>,
    raw: String,
    /// Unquoted glob or brace characters: the value is only known after expansion.
    glob: bool,
}

impl Word {
    fn plain(s: &str) -> Word {
        Word {
            lit: Some(s.to_string()),
            raw: s.to_string(),
            glob: false,
        }
    }

    /// Text for patterns: the literal value, else the text as written.
    fn text(&self) -> &str {
        self.lit.as_deref().unwrap_or(&self.raw)
    }
}

struct Walker {
    out: Analysis,
    cd: Cd,
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
            "subshell" | "command_substitution" | "process_substitution" => {
                let saved = self.cd.clone();
                self.children(node, src, depth);
                self.cd = saved;
            }
            "function_definition" => {
                let saved = self.cd.clone();
                self.children(node, src, depth);
                self.cd = saved;
            }
            "file_redirect" => self.redirect(node, src, depth),
            _ => self.children(node, src, depth),
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

    /// Record a path use. `required`: the word is known to be a path (a redirection or write
    /// target), so a non-literal value is opaque; otherwise only path-like literals count.
    fn path(&mut self, w: &Word, write: bool, source: &str, required: bool) {
        let Some(lit) = w.lit.as_deref().filter(|_| !w.glob || !required) else {
            if required || write {
                self.opaque(format!(
                    "{} {} {}, a path only known when it runs",
                    q(source),
                    if write { "writes to" } else { "reads" },
                    q(&w.raw)
                ));
            }
            return;
        };
        if lit.is_empty() || lit == "{}" {
            // `{}`: the placeholder of `find -exec` / `xargs -I{}`; the files are under the
            // paths given to `find`.
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
        if SPECIAL_PATHS.contains(&lit) || lit.starts_with("/dev/fd/") {
            return;
        }
        let absolute = lit.starts_with('/') || lit.starts_with('~');
        let joined = match (&self.cd, absolute) {
            (_, true) | (Cd::Here, _) => lit.to_string(),
            (Cd::Dir(d), false) => format!("{}/{lit}", d.trim_end_matches('/')),
            (Cd::Unknown(how), false) => {
                let how = how.clone();
                self.opaque(format!(
                    "{} touches {}, relative to a directory only known when it runs (after {})",
                    q(source),
                    q(lit),
                    q(&how)
                ));
                return;
            }
        };
        let use_ = PathUse {
            path: joined,
            write,
            source: collapse(source),
        };
        if !self.out.paths.contains(&use_) {
            self.out.paths.push(use_);
        }
    }

    /// A `command` node: words, prefix assignments and redirections.
    fn command(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut words: Vec<Word> = Vec::new();
        let mut cur = node.walk();
        let kids: Vec<(Option<&str>, Node<'_>)> = node
            .children(&mut cur)
            .enumerate()
            .map(|(i, k)| (node.field_name_for_child(i as u32), k))
            .collect();
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
        // Leading assignments (only possible here for `find -exec`-built commands).
        let mut k = words
            .iter()
            .take_while(|w| w.lit.as_deref().is_some_and(is_assignment))
            .count();
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
            if name == "env"
                && words[k + 1..].iter().any(|w| {
                    w.lit.as_deref().is_some_and(|s| {
                        s == "-S" || s.starts_with("--split-string") || (s.starts_with("-S"))
                    })
                })
            {
                self.opaque(format!(
                    "{} splits a string into a command (`env -S`), which is not analysed",
                    q(source)
                ));
            }
            let Some((wrapper, opts)) = WRAPPERS.iter().find(|(n, _)| *n == name) else {
                break name;
            };
            let mut j = k + 1;
            while j < words.len() {
                let t = words[j].text().to_string();
                if t == "--" {
                    j += 1;
                    break;
                }
                if t.starts_with('-') && t.len() > 1 {
                    j += if opts.contains(&t.as_str()) { 2 } else { 1 };
                } else if *wrapper == "env" && is_assignment(&t) {
                    j += 1;
                } else {
                    break;
                }
            }
            if *wrapper == "timeout" {
                j += 1;
            }
            if j >= words.len() {
                break name;
            }
            k = j;
        };
        let core = *starts.last().unwrap_or(&0);
        let mut args: Vec<Word> = words[core + 1..].to_vec();
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
        self.scripts(&name, &args, source, depth);
        self.paths_of(&name, &args, source);
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
                (Some(v), _) => Some(Word::plain(v)),
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
                    }
                }
                "-c" | "--config-env" => match value.as_ref().and_then(|v| v.lit.clone()) {
                    Some(kv) => {
                        let key = kv.split('=').next().unwrap_or("").to_ascii_lowercase();
                        if GIT_EXEC_KEYS.iter().any(|p| key.starts_with(p)) {
                            self.opaque(format!(
                                "{} sets `{key}` inline, which defines a git alias or a command git runs",
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
        args.into_iter().skip(i).collect()
    }

    /// `cd`-like commands: their target is a path the command touches, and it moves the
    /// following commands.
    fn cd(&mut self, name: &str, args: &[Word], source: &str) {
        let operands: Vec<&Word> = args
            .iter()
            .filter(|w| !w.text().starts_with('-') || w.text() == "-")
            .collect();
        if name == "popd" {
            self.cd = Cd::Unknown(source.to_string());
            return;
        }
        match operands.first() {
            None => self.cd = Cd::Dir("~".into()),
            Some(w) => match w.lit.as_deref().filter(|_| !w.glob) {
                Some("-") | None => self.cd = Cd::Unknown(source.to_string()),
                Some(dir) => {
                    self.path(w, false, source, true);
                    let dir = dir.to_string();
                    self.cd = match &self.cd {
                        _ if dir.starts_with('/') || dir.starts_with('~') => Cd::Dir(dir),
                        Cd::Here => Cd::Dir(dir),
                        Cd::Dir(d) => Cd::Dir(format!("{}/{dir}", d.trim_end_matches('/'))),
                        Cd::Unknown(u) => Cd::Unknown(u.clone()),
                    };
                }
            },
        }
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
                self.path(w, false, source, false);
            }
            return;
        }
        match name {
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
                    let saved = self.cd.clone();
                    self.script(&parts.join(" "), depth + 1);
                    self.cd = saved;
                }
            }
            "source" | "." => match args.first() {
                Some(w) if w.lit.is_some() => self.path(w, false, source, true),
                Some(w) => self.opaque(format!(
                    "{} runs the script {}, which is only known when it runs",
                    q(source),
                    q(&w.raw)
                )),
                None => {}
            },
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
                            self.simple(inner, source, depth);
                        }
                        i = end;
                    }
                    i += 1;
                }
            }
            "shopt" if args.iter().any(|w| w.text() == "expand_aliases") => {
                self.opaque(format!(
                    "{} turns on alias expansion, so later command words may mean something else",
                    q(source)
                ));
            }
            _ => {}
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
                "-o", "--output", "-d", "--data", "-H", "--header", "-X", "-u", "-A",
            ],
            "wget" => &["-O", "--output-document", "-P", "--directory-prefix", "-o"],
            "dd" => &[],
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
                    Some(v) => Some(Word::plain(v)),
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
                    ("curl", "-o" | "--output")
                    | ("wget", "-O" | "--output-document" | "-P" | "--directory-prefix") => {
                        if let Some(v) = value.as_ref().filter(|v| v.text() != "-") {
                            self.path(v, true, source, true);
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
        for w in &written {
            self.path(w, true, source, true);
        }
        for w in operands {
            if !written.iter().any(|x| std::ptr::eq(*x, w)) {
                self.path(w, false, source, false);
            }
        }
    }
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
    Word { lit, raw, glob }
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
            let mut cur = node.walk();
            for c in node.children(&mut cur) {
                if c.is_named() {
                    out.push_str(&literal(c, src, glob)?);
                } else {
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
