//! Programs that run other programs given on their command line in their own syntax
//! (`fd -x CMD`, `rg --pre CMD`, `hyperfine 'SCRIPT'`, `less +!CMD`), commands whose
//! arguments come from their input (`xargs CMD < list`), and programs whose command is not
//! analysed at all (sandboxes, file watchers, dev shells: [`runs_given_commands`]).

use super::*;

/// Commands that write the files named by their operands: when `xargs` gives them file
/// names from its input, those are unknown written paths.
const WRITERS: &[&str] = &[
    "rm", "rmdir", "unlink", "shred", "touch", "mkdir", "truncate", "tee", "cp", "mv", "ln",
    "install", "chmod", "chown", "chgrp", "sed", "gsed", "dd", "patch", "rsync",
];

/// Value-taking options of `hyperfine` whose value is a shell command (the others are
/// skipped with their value; every positional word is a benchmarked command).
const HYPERFINE_SCRIPTS: &[&str] = &[
    "-p",
    "--prepare",
    "-c",
    "--cleanup",
    "-s",
    "--setup",
    "--conclude",
];

/// Value-taking options of `hyperfine` that are not commands (`-L NAME VALUES` takes two).
const HYPERFINE_VALUES: &[&str] = &[
    "-w",
    "--warmup",
    "-m",
    "--min-runs",
    "-M",
    "--max-runs",
    "-r",
    "--runs",
    "-u",
    "--time-unit",
    "-n",
    "--command-name",
    "--style",
    "--sort",
    "--export-asciidoc",
    "--export-csv",
    "--export-json",
    "--export-markdown",
    "--export-orgmode",
    "--output",
    "--input",
    "-D",
    "--parameter-step-size",
    "--reference",
];

/// Long options of `less` (and `--init-command` of other pagers) whose value is commands the
/// pager runs or a lesskey file or text defining them (less(1) "OPTIONS", lesskey(1)).
const LESS_CODE_LONGS: &[&str] = &[
    "--lesskey-file",
    "--lesskey-src",
    "--lesskey-content",
    "--cmd",
    "--init-command",
];

/// Flags of a shell (`SHELLS`, or fish) that `hyperfine --shell` may add without asking
/// (none reads a file or takes a value).
const HYPERFINE_SHELL_FLAGS: &[&str] = &["--norc", "--noprofile", "--posix", "-e", "-u", "-x"];

/// Arguments that only ask a program about itself (`--version`, `--help`), so it reads no
/// commands.
fn only_describes(args: &[Word]) -> bool {
    !args.is_empty()
        && args.iter().all(|w| {
            matches!(
                w.text(),
                "--version" | "-version" | "-V" | "--help" | "-help" | "-h"
            )
        })
}

/// Whether `name` (a vim long option without its `--`) is one that neither runs commands nor
/// names a file or a server: vim and neovim compare long names ignoring case and accept any
/// text after some of them (vim's `main.c`: `STRNICMP(arg, "cmd", 3)` reads `--CMD` and
/// `--Cmd` as `--cmd`; `--remote-send`/`--remote-expr` run keys and expressions in another
/// vim, `--startuptime`/`--log` write a file, nvim's `--embed` reads RPC calls from stdin), so
/// every other long option is taken as one that runs commands.
fn vim_plain_long(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "help" | "version" | "clean" | "headless" | "nofork" | "ttyfail" | "not-a-term"
    ) || ["literal", "noplugin"].iter().any(|p| lower.starts_with(p))
}

impl Walker {
    /// `hyperfine -S SHELL`: hyperfine runs `SHELL -c COMMAND` for each benchmarked command,
    /// and SHELL may be any command line (hyperfine(1): "the name or the path to the shell
    /// executable, or a full command line"), so `-S 'rm -rf d'` runs `rm`. Allowed: `default`,
    /// `none`, or a shell of `SHELLS` (or fish) with only the flags of
    /// [`HYPERFINE_SHELL_FLAGS`] (the commands it runs are analysed as hyperfine's operands);
    /// anything else is opaque.
    fn hyperfine_shell(&mut self, v: Option<&Word>, source: &str) {
        let Some(v) = v else { return };
        let plain = v.lit.as_deref().is_some_and(|l| {
            let mut words = l.split_whitespace();
            let first = words.next().unwrap_or("");
            let base = first.rsplit('/').next().unwrap_or(first);
            matches!(l.trim(), "default" | "none")
                || ((SHELLS.contains(&base) || base == "fish")
                    && words.all(|w| HYPERFINE_SHELL_FLAGS.contains(&w)))
        });
        if !plain {
            self.opaque(format!(
                "{} runs its benchmarks through the command line {} (`--shell`), which is not \
                 analysed",
                q(source),
                q(&v.raw)
            ));
        }
    }

    /// `xargs CMD` without a replace string: CMD gets file names read from xargs' input (a
    /// file, a pipe, a here-string), which are paths only known when it runs.
    pub(super) fn xargs_fed(&mut self, words: &[Word], starts: &[usize], name: &str, source: &str) {
        let layers = &starts[..starts.len().saturating_sub(1)];
        let fed = layers.iter().any(|&s| {
            words[s]
                .lit
                .as_deref()
                .is_some_and(|l| basename(l) == "xargs")
        });
        if fed && self.xargs_repl.is_none() {
            self.unknown(
                format!(
                    "{} gives `{name}` arguments read from its input when it runs",
                    q(source)
                ),
                WRITERS.contains(&name),
            );
        }
    }

    /// Commands run by programs in their own option syntax: analysed when literal, opaque
    /// otherwise.
    pub(super) fn runners(&mut self, name: &str, args: &[Word], source: &str, depth: usize) {
        match name {
            // `fd PATTERN -x CMD ARGS…` / `-X`: the rest of the words are the command.
            "fd" | "fdfind" => {
                if let Some(i) = args
                    .iter()
                    .position(|w| matches!(w.text(), "-x" | "--exec" | "-X" | "--exec-batch"))
                {
                    let end = args[i + 1..]
                        .iter()
                        .position(|w| w.text() == ";")
                        .map_or(args.len(), |p| i + 1 + p);
                    if end > i + 1 {
                        self.run_words(args[i + 1..end].to_vec(), source, depth);
                    } else {
                        self.opaque(format!("{} runs a command without naming it", q(source)));
                    }
                } else {
                    // The other spellings clap reads: `--exec=CMD`, a cluster ending in or
                    // holding `x`/`X` (`-Hx CMD`, `-xrm`).
                    let texts: Vec<&str> = args.iter().map(Word::text).collect();
                    if texts
                        .iter()
                        .any(|t| t.starts_with("--exec=") || t.starts_with("--exec-batch="))
                        || short_cluster(&texts, "xX", "dEteSojc")
                    {
                        self.opaque(format!(
                            "{} runs a command given in its options, which is not analysed",
                            q(source)
                        ));
                    }
                }
            }
            // `rg --pre CMD`: CMD runs on every file searched.
            "rg" => {
                for (i, w) in args.iter().enumerate() {
                    let t = w.text();
                    let v = match t.strip_prefix("--pre=") {
                        Some(v) => Some(w.part(v)),
                        None if t == "--pre" => args.get(i + 1).cloned(),
                        None => None,
                    };
                    if let Some(v) = v {
                        self.run_words(vec![v], source, depth);
                    }
                }
            }
            "hyperfine" => {
                let mut i = 0usize;
                while i < args.len() {
                    let t = args[i].text().to_string();
                    let (opt, inline) = match t.split_once('=') {
                        Some((o, v)) if o.starts_with("--") => (o.to_string(), Some(v.to_string())),
                        _ => (t.clone(), None),
                    };
                    if matches!(opt.as_str(), "-S" | "--shell") {
                        let v = match &inline {
                            Some(v) => Some(args[i].part(v)),
                            None => args.get(i + 1).cloned(),
                        };
                        self.hyperfine_shell(v.as_ref(), source);
                        i += if inline.is_some() { 1 } else { 2 };
                        continue;
                    }
                    if HYPERFINE_SCRIPTS.contains(&opt.as_str()) {
                        let v = match &inline {
                            Some(v) => Some(args[i].part(v)),
                            None => args.get(i + 1).cloned(),
                        };
                        self.wrapper_script(v.as_ref(), source, depth);
                        i += if inline.is_some() { 1 } else { 2 };
                        continue;
                    }
                    if let Some(cluster) = opt
                        .strip_prefix('-')
                        .filter(|c| c.len() > 1 && !c.starts_with('-'))
                    {
                        // `-p'CMD'`, `-Np CMD`: flags, then a letter whose value is the rest
                        // of the word or the next word (clap).
                        let at = cluster
                            .char_indices()
                            .find(|(_, c)| "pcswmMrSunLPD".contains(*c));
                        let mut taken = 0;
                        if let Some((at, c)) = at {
                            let rest = &cluster[at + c.len_utf8()..];
                            // `-L NAME VALUES`, `-P NAME MIN MAX` take more words.
                            taken = match c {
                                'L' => 1,
                                'P' => 2,
                                _ => 0,
                            };
                            let v = if rest.is_empty() {
                                taken += 1;
                                args.get(i + 1).cloned()
                            } else {
                                Some(args[i].part(rest))
                            };
                            if "pcs".contains(c) {
                                self.wrapper_script(v.as_ref(), source, depth);
                            } else if c == 'S' {
                                self.hyperfine_shell(v.as_ref(), source);
                            }
                        }
                        i += 1 + taken;
                        continue;
                    }
                    if opt.starts_with('-') && opt.len() > 1 {
                        let skip = match opt.as_str() {
                            "-L" | "--parameter-list" => 2,
                            "-P" | "--parameter-scan" => 3,
                            o if HYPERFINE_VALUES.contains(&o) => 1,
                            _ => 0,
                        };
                        i += 1 + if inline.is_some() { 0 } else { skip };
                        continue;
                    }
                    let w = args[i].clone();
                    self.wrapper_script(Some(&w), source, depth);
                    i += 1;
                }
            }
            "sqlite3" | "sqlite" | "duckdb" => self.sql_shell(name, args, source),
            // Database clients whose command language has a shell escape (`\\! cmd`,
            // `system cmd`) and which read it from stdin without `-c`/`-e` (those are opaque
            // in `CODE_OPTIONS`).
            "psql" | "mysql" | "mariadb" | "gnuplot" | "dc" | "ftp" | "lftp" | "smbclient"
            | "ghci" | "octave" | "R" | "mongo" | "mongosh" | "sqlcmd"
                if !only_describes(args) =>
            {
                self.opaque(format!(
                    "{} reads commands (which can run a shell) from stdin or its arguments",
                    q(source)
                ))
            }
            // Line editors read their commands from stdin; `!cmd` runs a shell (`red` is the
            // restricted `ed` without it).
            "ed" | "ex" | "nex" | "exim" if !only_describes(args) => self.opaque(format!(
                "{} reads editor commands from stdin, where `!cmd` runs a shell",
                q(source)
            )),
            // vim runs editor commands from `+CMD`, `-c`, `-S`, `-s`, `-u`, `-e`/`-E` (Ex mode
            // reading stdin) and writes the files of `-W`/`-w` (keys typed), `-i` (viminfo,
            // on exit) and `-V20FILE` (vim(1)).
            "vi" | "vim" | "nvim" | "view" | "gvim" | "vimdiff" | "rvim" | "nvi" | "elvis"
            | "vile" | "rview" | "gview" | "evim" | "eview" | "gvimdiff" | "vimx" => {
                if let Some(w) = args.iter().find(|w| {
                    let t = w.text();
                    t.starts_with('+')
                        || matches!(t, "-e" | "-E" | "-s" | "-es" | "-Es" | "-u" | "-U" | "-x")
                        || (t.starts_with('-')
                            && !t.starts_with("--")
                            && t.len() > 1
                            && t[1..].contains(['e', 'E', 's', 'u', 'U', 'c', 'S', 'W', 'w', 'i']))
                        // `-V20FILE` writes its messages to FILE; `-V20` alone does not.
                        || t.strip_prefix("-V").is_some_and(|v| {
                            !v.trim_start_matches(|c: char| c.is_ascii_digit()).is_empty()
                        })
                        || t.strip_prefix("--")
                            .is_some_and(|l| !l.is_empty() && !vim_plain_long(l))
                }) {
                    self.opaque(format!(
                        "{} runs editor commands or writes files given in its options ({}), \
                         where `!cmd` runs a shell",
                        q(source),
                        q(&w.raw)
                    ));
                }
            }
            // `run0` without a command opens a shell reading stdin; `systemd-run` without one
            // does with `--shell`, and otherwise starts a unit named in its options.
            "run0" | "systemd-run" if !only_describes(args) => self.opaque(format!(
                "{} starts a shell or a unit whose command is not given",
                q(source)
            )),
            "sudoedit" => self.sudo_edit(source),
            "tmux" | "screen" | "byobu" | "zellij" | "dtach" | "abduco" => {
                self.multiplexer(name, args, source)
            }
            // `less +'!CMD'`, `more +…`: commands for the pager, which can run a shell. less
            // also runs the commands of a lesskey file or text (`-k F`, `--lesskey-src=F`,
            // `--lesskey-content=TEXT`: key bindings to `!cmd` and an `#env` section that can
            // set `LESSOPEN`, lesskey(1)) and of `--cmd` (run at the first prompt); it reads
            // any unambiguous prefix of a long name and short options in clusters whose
            // string or number option takes the rest (`-ikFILE`; less(1), option.c).
            "less" | "more" | "most" => {
                if let Some(w) = args.iter().find(|w| {
                    let t = w.text();
                    t.starts_with('+')
                        || long_option(&[&t.to_ascii_lowercase()], LESS_CODE_LONGS)
                        || (name == "less" && short_cluster(&[t], "k", "bDhjoOpPtTxyz#\""))
                }) {
                    self.opaque(format!(
                        "{} gives the pager the commands {}, which can run a shell",
                        q(source),
                        q(&w.raw)
                    ));
                }
            }
            _ => {}
        }
    }

    /// `sqlite3 [OPTIONS] [DB [SQL…]]` (and `duckdb`): dot-commands (`.shell`, `.system`,
    /// `.output`, `.load`, …) and some SQL functions (`edit()`, `writefile()`,
    /// `load_extension()`) run programs or write files; without SQL operands it reads them
    /// from stdin. Only SQL and the listed read-only dot-commands given as literal operands
    /// pass.
    fn sql_shell(&mut self, name: &str, args: &[Word], source: &str) {
        const VALUES: &[&str] = &[
            "-cmd",
            "-init",
            "-separator",
            "-newline",
            "-nullvalue",
            "-mmap",
            "-vfs",
            "-lookaside",
            "-pagecache",
            "-heap",
            "-maxsize",
            "-escape",
            "-c",
            "-s",
            "-f",
        ];
        const SAFE_DOT: &[&str] = &[
            ".tables",
            ".schema",
            ".fullschema",
            ".indexes",
            ".indices",
            ".databases",
            ".dump",
            ".headers",
            ".header",
            ".mode",
            ".help",
            ".show",
            ".width",
            ".nullvalue",
            ".separator",
            ".dbinfo",
            ".stats",
            ".echo",
            ".bail",
            ".changes",
            ".eqp",
            ".print",
            ".version",
            ".timer",
            ".quit",
            ".exit",
        ];
        const RISKY_SQL: &[&str] = &[
            "load_extension",
            "writefile",
            "readfile",
            "edit(",
            "fts3_tokenizer",
            "attach",
            "vacuum",
            "lsdir",
            "fsdir",
        ];
        if only_describes(args) {
            return;
        }
        let mut i = 0usize;
        let mut operands: Vec<&Word> = Vec::new();
        while i < args.len() {
            let t = args[i].text();
            if t.starts_with('-') && t.len() > 1 && operands.is_empty() {
                let opt = format!("-{}", t.trim_start_matches('-'));
                if opt == "-A" || opt == "-archive" {
                    self.opaque(format!("{} runs an archive command", q(source)));
                    return;
                }
                i += if VALUES.contains(&opt.as_str()) { 2 } else { 1 };
                continue;
            }
            operands.push(&args[i]);
            i += 1;
        }
        let sql = operands.get(1..).unwrap_or(&[]);
        if sql.is_empty() {
            self.opaque(format!(
                "{} reads its commands from stdin, where `.shell`/`.system` run programs",
                q(source)
            ));
            return;
        }
        for w in sql {
            let Some(text) = w.lit.as_deref() else {
                self.opaque(format!(
                    "{} runs {}, only known when it runs",
                    q(source),
                    q(&w.raw)
                ));
                return;
            };
            let lower = text.to_ascii_lowercase();
            let dot = lower.lines().map(str::trim_start).find(|l| {
                l.starts_with('.') && !SAFE_DOT.contains(&l.split_whitespace().next().unwrap_or(""))
            });
            let risky = RISKY_SQL.iter().find(|r| lower.contains(*r));
            if dot.is_some() || risky.is_some() {
                self.opaque(format!(
                    "{} runs {} in {name}, which can run programs or write files",
                    q(source),
                    q(text)
                ));
                return;
            }
        }
    }

    /// Terminal multiplexers run shell commands given to them (`tmux new -d CMD`,
    /// `tmux send-keys`, `screen -dm CMD`, `#(cmd)` in formats) or from configuration: only
    /// listing and killing sessions pass.
    fn multiplexer(&mut self, name: &str, args: &[Word], source: &str) {
        const TMUX_SAFE: &[&str] = &[
            "ls",
            "list-sessions",
            "list-windows",
            "lsw",
            "list-panes",
            "lsp",
            "list-clients",
            "lsc",
            "has-session",
            "has",
            "kill-session",
            "kill-server",
            "kill-window",
            "killw",
            "kill-pane",
            "killp",
            "capture-pane",
            "capturep",
        ];
        const SCREEN_SAFE: &[&str] = &["-ls", "-list", "-wipe", "-v", "-version", "--version"];
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        let safe = match name {
            "tmux" => {
                let mut i = 0usize;
                let mut ok = true;
                while i < texts.len() && texts[i].starts_with('-') {
                    let t = texts[i];
                    if t == "-V" {
                        break;
                    }
                    if t.contains(['f', 'c']) {
                        ok = false;
                    }
                    i += if matches!(t, "-L" | "-S" | "-T") {
                        2
                    } else {
                        1
                    };
                }
                let sub = texts.get(i).copied();
                ok && (texts.first() == Some(&"-V") || sub.is_some_and(|s| TMUX_SAFE.contains(&s)))
                    && args.iter().all(|w| {
                        w.lit.is_some() && !w.text().contains("#(") && !w.text().ends_with(';')
                    })
            }
            "screen" => !texts.is_empty() && texts.iter().all(|t| SCREEN_SAFE.contains(t)),
            _ => false,
        };
        if !safe {
            self.opaque(format!(
                "{} runs shell commands given to it or typed into its sessions",
                q(source)
            ));
        }
    }

    /// A command given as words by another program: analysed like a simple command in the
    /// current directory.
    fn run_words(&mut self, words: Vec<Word>, source: &str, depth: usize) {
        let saved = self.cd.clone();
        let was = self.in_find_exec;
        self.in_find_exec = true;
        self.simple(words, source, depth);
        self.in_find_exec = was;
        self.cd = saved;
    }
}

/// Programs that run a command given to them in a form not analysed here (sandboxes,
/// file watchers, dev shells): `bwrap … CMD`, `watchexec -- CMD`, `cargo watch -s CMD`,
/// `nix develop -c CMD`.
pub(super) fn runs_given_commands(name: &str, args: &[Word]) -> bool {
    let any = |f: &dyn Fn(&str) -> bool| args.iter().any(|w| f(w.text()));
    match name {
        "bwrap" | "proot" | "watchexec" | "entr" | "nodemon" | "flatpak-spawn" | "toolbox"
        | "distrobox-enter" | "distrobox" | "cargo-watch" => !args.is_empty(),
        "cargo" => {
            let texts: Vec<&str> = args.iter().map(Word::text).collect();
            args.first().map(Word::text) == Some("watch")
                && (any(&|t| {
                    matches!(t, "-x" | "-s" | "--exec" | "--shell" | "--")
                        || t.starts_with("--exec=")
                        || t.starts_with("--shell=")
                }) || short_cluster(&texts[1..], "xs", ""))
        }
        "nix" => any(&|t| matches!(t, "-c" | "--command" | "--run") || t.starts_with("--command=")),
        // Sandboxes, containers and job launchers whose command follows options not modelled
        // here; `capsh -- -c CMD` hands its words to a shell.
        "nsjail" | "systemd-nspawn" | "runcon" | "capsh" | "schedtool" | "mpirun" | "mpiexec"
        | "srun" => !args.is_empty(),
        // `perf stat CMD`, `ip netns exec NS CMD`.
        "perf" => {
            args.len() > 1
                && matches!(
                    args[0].text(),
                    "record"
                        | "stat"
                        | "trace"
                        | "ftrace"
                        | "mem"
                        | "c2c"
                        | "lock"
                        | "sched"
                        | "kmem"
                        | "kwork"
                        | "script"
                        | "kvm"
                )
        }
        "ip" => any(&|t| t == "exec"),
        // The dynamic loader runs the program it is given (`/lib64/ld-linux-x86-64.so.2
        // /bin/rm -rf d`), with libraries of `--preload`/`--audit` and another argv0
        // (ld.so(8)).
        n if n == "ld.so"
            || n.starts_with("ld-linux")
            || n.starts_with("ld64.so")
            || n.starts_with("ld-musl") =>
        {
            !args.is_empty()
        }
        // `socat - EXEC:cmd`, `nc -e cmd`, `ncat --sh-exec cmd`.
        "socat" => any(&|t| {
            let up = t.to_ascii_uppercase();
            up.contains("EXEC:") || up.contains("SYSTEM:")
        }),
        "nc" | "ncat" | "netcat" => has_option(args, &["--exec", "--sh-exec", "--lua-exec"], "ec"),
        _ => false,
    }
}
