//! git's global options, aliases, and configuration that makes git run other programs.

use super::*;

/// Git global options that take a separate value (`git -C dir push` → `git push`).
pub(super) const GIT_OPTS_WITH_VALUE: &[&str] = &[
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
pub(super) const GIT_SAFE_KEYS: &[&str] = &[
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
pub(super) fn git_key_risky(key: &str) -> bool {
    !GIT_SAFE_KEYS.iter().any(|p| {
        if p.ends_with('.') {
            key.starts_with(p)
        } else {
            key == *p
        }
    })
}

impl Walker {
    /// Drop git's global options (`-C DIR`, `-c k=v`, `--git-dir=…`, `--no-pager`, …) so the
    /// subcommand comes first; `-C`/`--git-dir`/`--work-tree` are paths the command touches,
    /// and an inline `-c` that defines an alias or a command git runs is opaque.
    pub(super) fn git_globals(&mut self, args: Vec<Word>, source: &str) -> Vec<Word> {
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

    /// Git subcommands that run commands given to them (`rebase --exec`, `submodule
    /// foreach`, `bisect run`, `--upload-pack=…`) or change configuration that runs code
    /// (`git config alias.p push`, `core.fsmonitor`).
    pub(super) fn git_runs(&mut self, args: &[Word], source: &str, depth: usize) {
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        let sub = texts.first().copied().unwrap_or("");
        // Short options whose value (attached, `-O'cmd'`, in a cluster, `-nOcmd`, or the next
        // word) is a command, per subcommand, with the letters that take some other value
        // (which end a cluster).
        let (code_letters, value_letters) = match sub {
            "grep" => ("O", "efABCm"),
            "clone" => ("uc", "objl"),
            "ls-remote" => ("u", ""),
            "difftool" => ("xt", "X"),
            "mergetool" => ("t", "O"),
            "instaweb" => ("db", "p"),
            _ => ("", ""),
        };
        for t in texts.iter().skip(1) {
            let Some(cluster) = t.strip_prefix('-').filter(|c| !c.starts_with('-')) else {
                continue;
            };
            for c in cluster.chars() {
                if code_letters.contains(c) {
                    self.opaque(format!(
                        "{} runs a command given in its options (`-{c}` in `{t}`)",
                        q(source)
                    ));
                    return;
                }
                if value_letters.contains(c) || !c.is_ascii_alphanumeric() {
                    break;
                }
            }
        }
        // Long options in every spelling parse-options (and send-email's Getopt::Long)
        // reads: whole, abbreviated (`--upload-p=…`), with `=` or the value in the next word.
        let long = |t: &str, names: &[&str]| long_option(&[t], names);
        let with_eq = |t: &str, names: &[&str]| t.contains('=') && long(t, names);
        for t in &texts {
            if *t == "-O"
                || t.starts_with("--tool=")
                || long(
                    t,
                    &[
                        "--upload-pack",
                        "--template",
                        "--open-files-in-pager",
                        "--receive-pack",
                        "--extcmd",
                        "--httpd",
                        "--browser",
                    ],
                )
                // `--exec` is also `--upload-pack`/`--receive-pack` of `ls-remote`,
                // `fetch-pack`, `push` and `send-pack`; `rebase --exec CMD` is analysed below.
                || (sub != "rebase" && long(t, &["--exec"]))
                || with_eq(t, &["--exec", "--config"])
                || (matches!(sub, "difftool" | "mergetool") && long(t, &["--tool"]))
                || (sub == "send-email"
                    && !matches!(t.split('=').next(), Some("--to" | "--cc"))
                    && long(
                        t,
                        &[
                            "--smtp-server",
                            "--to-cmd",
                            "--cc-cmd",
                            "--header-cmd",
                            "--sendmail-cmd",
                        ],
                    ))
                || (sub == "clone" && (*t == "-u" || *t == "-c" || long(t, &["--config"])))
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
                    let cluster_x = t
                        .strip_prefix('-')
                        .filter(|c| !c.starts_with('-'))
                        .and_then(|c| c.split_once('x'))
                        .filter(|(before, _)| !before.contains(['s', 'X', 'C']));
                    let value = if t == "-x" || long_word(&["--exec"], t) == Some(("--exec", None))
                    {
                        i += 1;
                        args.get(i).cloned()
                    } else if let Some((_, rest)) = cluster_x {
                        // `-x'cmd'`, `-ix cmd`: the letters before `x` take no value.
                        if rest.is_empty() {
                            i += 1;
                            args.get(i).cloned()
                        } else {
                            Some(args[i].part(rest))
                        }
                    } else {
                        t.strip_prefix("--exec=").map(|v| args[i].part(v))
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
                self.joined_script(rest, source, "command", depth);
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
    ///
    /// The file a change is written to is a written path: the `--file`/`-f` value (spelled
    /// `-f F`, `-fF`, `-zf F`, `--file=F`, `--fil F`: parse-options reads clusters and
    /// abbreviations), `~/.gitconfig` for `--global` and `/etc/gitconfig` for `--system`
    /// (git-config(1) "FILES"). A change is anything but a read: `set`, `unset`,
    /// `rename-section`, `remove-section`, `--add`, `--replace-all`, `--unset[-all]`, or a
    /// key with a value. A `--file` that is only read is a read path.
    pub(super) fn git_config(&mut self, args: &[Word], source: &str) {
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        let with_value = [
            "--file",
            "--blob",
            "--type",
            "--default",
            "--comment",
            "--value",
        ];
        // The words that are options (not the value of one: `--comment --get`), the
        // operands, and the files named by `--file`.
        let mut options: Vec<&str> = Vec::new();
        let mut operands: Vec<&Word> = Vec::new();
        let mut files: Vec<Word> = Vec::new();
        let mut i = 0usize;
        let mut opts_done = false;
        while i < args.len() {
            let w = &args[i];
            let t = texts[i];
            i += 1;
            if opts_done || !t.starts_with('-') || t == "-" {
                operands.push(w);
                continue;
            }
            if t == "--" {
                opts_done = true;
                continue;
            }
            options.push(t);
            if t.starts_with("--") {
                // `--comm user.name`: an abbreviation takes its value from the next word
                // too (parse-options).
                let (opt, value) = match long_word(&with_value, t) {
                    Some((o, Some(v))) => (o, Some(w.part(v))),
                    Some((o, None)) => {
                        i += 1;
                        (o, args.get(i - 1).cloned())
                    }
                    None => continue,
                };
                if opt == "--file" {
                    files.extend(value);
                }
            } else if let Some(('f', v)) =
                cluster_value(w, args, &mut i, |_| false, |c| matches!(c, 'f' | 't'))
            {
                files.extend(v);
            }
        }
        // `git config get …` (a subcommand only as the first operand).
        let sub = operands.first().map(|w| w.text()).filter(|s| {
            matches!(
                *s,
                "set" | "get" | "unset" | "list" | "rename-section" | "remove-section" | "edit"
            )
        });
        let reading = matches!(sub, Some("get" | "list" | "unset"))
            || options.iter().any(|t| {
                matches!(
                    *t,
                    "--get"
                        | "--get-all"
                        | "--get-regexp"
                        | "--get-urlmatch"
                        | "-l"
                        | "--list"
                        | "--show-origin"
                        | "--show-scope"
                        | "--unset"
                        | "--unset-all"
                        | "--get-color"
                        | "--get-colorbool"
                )
            });
        if sub == Some("edit")
            || options
                .iter()
                .any(|t| short_cluster(&[t], "e", "ft") || long_option(&[t], &["--edit"]))
        {
            self.opaque(format!(
                "{} opens an editor on git's configuration",
                q(source)
            ));
            return;
        }
        if sub.is_some() {
            operands.remove(0);
        }
        let changes = match sub {
            Some(s) => !matches!(s, "get" | "list"),
            None => {
                long_option(
                    &options,
                    &[
                        "--add",
                        "--replace-all",
                        "--unset",
                        "--unset-all",
                        "--rename-section",
                        "--remove-section",
                    ],
                ) || (!reading && operands.len() >= 2)
            }
        };
        let mut written = files;
        if changes && written.is_empty() {
            if long_option(&options, &["--global"]) {
                written.push(Word::plain("~/.gitconfig"));
            }
            if long_option(&options, &["--system"]) {
                written.push(Word::plain("/etc/gitconfig"));
            }
        }
        for f in &written {
            self.path(f, changes, source, true);
        }
        if changes && written.is_empty() {
            // No file, --global or --system: the repository's own configuration
            // (`--worktree`: the worktree's), an edit of a file in the project. Its keys are
            // checked below, so the write is not opaque (`own_git_config`).
            let file = if long_option(&options, &["--worktree"]) {
                ".git/config.worktree"
            } else {
                ".git/config"
            };
            self.own_git_config = true;
            self.path(&Word::plain(file), true, source, true);
            self.own_git_config = false;
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
}

/// Formatters that rewrite the project's files in place (`cargo fmt`, `gofmt -w`), as
/// (program, first argument or `""` for any, options that make them only check).
const FORMATTERS: &[(&str, &str, &[&str])] = &[
    ("cargo", "fmt", &["--check"]),
    ("cargo", "fix", &[]),
    ("go", "fmt", &[]),
    ("gofmt", "", &["-l", "-d"]),
    ("rustfmt", "", &["--check"]),
    ("prettier", "", &["--check", "-c", "--list-different", "-l"]),
    ("black", "", &["--check", "--diff"]),
    ("isort", "", &["--check", "--check-only", "-c", "--diff"]),
    ("ruff", "format", &["--check", "--diff"]),
];

impl Walker {
    /// Commands that change files of the working tree without naming them: git subcommands
    /// that check out, reset, apply or remove (`git checkout -- f`, `git stash`,
    /// `git reset --hard`), archive extraction into the current directory, and formatters.
    /// Each writes the directory it runs in (`.`), so the `edit` rules judge it.
    pub(super) fn tree_writes(&mut self, name: &str, args: &[Word], source: &str) {
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        let has = |o: &[&str]| texts.iter().any(|t| o.contains(t));
        let first = texts.first().copied().unwrap_or("");
        let writes = match name {
            "git" => match first {
                "checkout" | "switch" | "restore" | "am" | "mv" | "merge" | "pull" | "rebase"
                | "cherry-pick" | "revert" | "checkout-index" | "worktree" | "bisect"
                | "sparse-checkout" | "filter-branch" | "filter-repo" | "submodule" => true,
                "stash" => !matches!(texts.get(1).copied(), Some("list" | "show")),
                "reset" => long_option(&texts, &["--hard", "--merge", "--keep"]),
                "apply" => !has(&["--check", "--stat", "--numstat", "--summary", "--cached"]),
                "rm" => !has(&["--cached"]),
                "clean" => !has(&["-n", "--dry-run"]),
                "read-tree" => short_cluster(&texts, "u", ""),
                // Patch files land in the current directory unless sent to stdout.
                "format-patch" => !has(&["--stdout"]),
                _ => false,
            },
            "tar" | "bsdtar" => {
                let extract = long_option(&texts, &["--extract", "--get"])
                    || short_cluster(&texts, "x", "")
                    || (!first.starts_with('-') && first.contains('x'));
                let elsewhere = texts
                    .iter()
                    .any(|t| t.starts_with("-C") || t.starts_with("--directory"));
                extract && !elsewhere
            }
            "unzip" => !texts.iter().any(|t| {
                t.starts_with("-d") || matches!(*t, "-l" | "-t" | "-v" | "-p" | "-Z" | "-z")
            }),
            _ => FORMATTERS.iter().any(|(prog, sub, check)| {
                *prog == name && (sub.is_empty() || *sub == first) && !has(check)
            }),
        };
        if writes {
            self.path(&Word::plain("."), true, source, true);
        }
    }
}
