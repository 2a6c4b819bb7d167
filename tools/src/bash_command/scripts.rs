//! Code a command runs itself: `sh -c`, `eval`, `source`, interpreters with inline code, `sed`/`awk` programs, `ssh`, `find -exec`.

use super::*;

/// Options whose value is code the program runs (`tar --to-command=CMD`, `vim -c CMD`,
/// `sort --compress-program=CMD`, `man -P CMD`): (program, options).
pub(super) const CODE_OPTIONS: &[(&str, &[&str])] = &[
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
        // startup.el also reads the one-dash spellings and `--execute` (`-eval`).
        &[
            "--eval",
            "-eval",
            "--execute",
            "-execute",
            "-l",
            "--load",
            "-load",
            "-f",
            "--funcall",
            "-funcall",
            "--script",
            "-script",
            "-x",
        ],
    ),
    // `-e`/`--execute` run wgetrc commands (`use_askpass=CMD`, `output_document=FILE`), as
    // does a `--config` file.
    ("wget", &["--use-askpass", "-e", "--execute", "--config"]),
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

/// ssh_config(5) keywords (lower case) that `-o` may set without asking: they tune
/// authentication, algorithms, timeouts, logging and the terminal, and name no program,
/// library or file.
const SSH_PLAIN_OPTIONS: &[&str] = &[
    "stricthostkeychecking",
    "batchmode",
    "connecttimeout",
    "connectionattempts",
    "serveraliveinterval",
    "serveralivecountmax",
    "tcpkeepalive",
    "loglevel",
    "port",
    "user",
    "identitiesonly",
    "passwordauthentication",
    "pubkeyauthentication",
    "kbdinteractiveauthentication",
    "challengeresponseauthentication",
    "gssapiauthentication",
    "preferredauthentications",
    "numberofpasswordprompts",
    "compression",
    "requesttty",
    "hostkeyalgorithms",
    "pubkeyacceptedkeytypes",
    "pubkeyacceptedalgorithms",
    "kexalgorithms",
    "ciphers",
    "macs",
    "addressfamily",
    "checkhostip",
    "hashknownhosts",
    "updatehostkeys",
    "visualhostkey",
    "exitonforwardfailure",
    "forwardagent",
    "forwardx11",
    "escapechar",
    "hostname",
    "hostkeyalias",
];

/// gawk's long options that take a value (`--file=F`, `--source TEXT`), matched in any
/// abbreviation getopt_long accepts (source: gawk(1) "Command-Line Options").
const AWK_LONG_VALUES: &[&str] = &[
    "--file",
    "--source",
    "--exec",
    "--include",
    "--load",
    "--assign",
    "--field-separator",
];

/// awk's short options that take a value, attached or the next word (`-f F`, `-e'…'`, `-W
/// OPT`; gawk(1), mawk(1)).
const AWK_SHORT_VALUES: &str = "fFveEilW";

/// gawk's short options whose optional value is only attached (`-d[FILE]`, `-o[FILE]`): the
/// rest of their word is that value.
const AWK_OPTIONAL_VALUES: &str = "dDLop";

/// GNU make's long options that take the next word as their value when not given one with
/// `=` (make(1); `--jobs`, `--load-average`, `--output-sync`, `--debug` and `--shuffle` take
/// theirs only attached).
const MAKE_LONG_VALUES: &[&str] = &[
    "--file",
    "--makefile",
    "--directory",
    "--include-dir",
    "--old-file",
    "--assume-old",
    "--what-if",
    "--new-file",
    "--assume-new",
    "--eval",
    "--jobserver-style",
    "--jobserver-auth",
];

/// The makefiles `make` is given (`-f F`, `-fF`, `-sf F`, `--file=F`, `--makefile F` and
/// their abbreviations, GNU make's getopt_long), in order, and the directory `-C DIR` moves
/// to before it reads them (a later `-C` is relative to an earlier one; `""` for none).
///
/// Every option's value is skipped as getopt skips it (`make -W -fx` reads the default
/// makefiles: `-fx` is the value of `-W`), short ones through [`cluster_value`]: `j`, `l` and
/// `O` take an optional value that is only attached.
fn make_files(args: &[Word]) -> (String, Vec<Word>) {
    let mut files = Vec::new();
    let mut dir = String::new();
    let mut i = 0usize;
    while i < args.len() {
        let w = &args[i];
        let t = w.text();
        i += 1;
        if t == "--" {
            break;
        }
        let (opt, value) = if t.starts_with("--") {
            match long_word(MAKE_LONG_VALUES, t) {
                Some((o, Some(v))) => (o, Some(w.part(v))),
                Some((o, None)) => {
                    i += 1;
                    (o, args.get(i - 1).cloned())
                }
                None => continue,
            }
        } else if t.len() > 1 && t.starts_with('-') {
            let stop = |c: char| "jlO".contains(c);
            match cluster_value(w, args, &mut i, stop, |c| "fCIWoE".contains(c)) {
                Some(('f', v)) => ("--file", v),
                Some(('C', v)) => ("--directory", v),
                _ => continue,
            }
        } else {
            continue;
        };
        let Some(v) = value else { continue };
        match opt {
            "--file" | "--makefile" => files.push(v),
            "--directory" => {
                let d = v.text().trim_end_matches('/');
                dir = if d.starts_with('/') || dir.is_empty() {
                    d.to_string()
                } else {
                    format!("{dir}/{d}")
                };
            }
            _ => {}
        }
    }
    (dir, files)
}

/// Whether every `-o KEY=VALUE` given to `ssh`, `scp` or `sftp` (alone, attached or
/// ending a cluster: `-vo KEY=V`; the options end at the first operand, as OpenSSH's
/// getopt reads them) sets a key of [`SSH_PLAIN_OPTIONS`]. Any other key may run a
/// command or load a library (`ProxyCommand`, `LocalCommand`, `KnownHostsCommand`,
/// `PKCS11Provider`, `SecurityKeyProvider`, `XAuthLocation`, `RemoteCommand` on a host
/// that may be this one), name a file ssh writes (`ControlPath`, `UserKnownHostsFile`
/// other than `/dev/null`) or one it reads (`IdentityFile`) (ssh_config(5)).
fn ssh_options_plain(args: &[Word], code: &str, values: &str) -> bool {
    let letters = format!("{code}{values}");
    let mut i = 0usize;
    while i < args.len() {
        let w = &args[i];
        let t = w.text();
        i += 1;
        if t == "--" || t.len() < 2 || !t.starts_with('-') {
            break;
        }
        let Some(('o', value)) = cluster_value(w, args, &mut i, |_| false, |c| letters.contains(c))
        else {
            continue;
        };
        let Some(text) = value.as_ref().and_then(|v| v.lit.as_deref()) else {
            return false;
        };
        let text = text.trim_start();
        let at = text.find(['=', ' ', '\t']).unwrap_or(text.len());
        let key = text[..at].to_ascii_lowercase();
        let val = text[at..].trim_start_matches([' ', '\t', '=']).trim();
        let plain = SSH_PLAIN_OPTIONS.contains(&key.as_str())
            || (key.ends_with("knownhostsfile") && val == "/dev/null");
        if !plain {
            return false;
        }
    }
    true
}

/// Whether the `watch` option word `t` takes the next word as its value: `-n SECS`, `-q
/// CYCLES` (alone or ending a cluster, `-tn 1`), `--interval`/`--equexit` spelled whole or
/// abbreviated without `=` (procps watch(1), getopt_long).
fn watch_takes_next(t: &str) -> bool {
    if t.starts_with("--") {
        return matches!(
            long_word(&["--interval", "--equexit", "--differences"], t),
            Some(("--interval" | "--equexit", None))
        );
    }
    // `-d[permanent]` takes an optional value, attached only.
    let cluster: String = t[1..].chars().take_while(|c| *c != 'd').collect();
    cluster.len() == t.len() - 1 && (cluster.ends_with('n') || cluster.ends_with('q'))
}

/// Letters of [`CODE_OPTIONS`] that run code wherever they stand in a short-option cluster
/// (`tar -xvI CMD`, `make -sE TEXT`, `man -aP CMD`), with the letters that take a value and
/// so end the cluster, for the programs that read clusters with getopt (sources: their man
/// pages).
fn code_letters(name: &str) -> (&'static str, &'static str) {
    match name {
        "tar" | "bsdtar" => ("IF", "fCTXgbKNVH"),
        "make" | "gmake" => ("E", "CfIjlWoO"),
        "man" => ("PH", "CLmMSsepRrETX"),
        _ => ("", ""),
    }
}

impl Walker {
    /// Scripts the command runs itself: `sh -c SCRIPT`, a shell reading stdin, `eval ARGS`,
    /// `source FILE`, `find … -exec CMD ;`, `watch CMD`.
    pub(super) fn scripts(&mut self, name: &str, args: &[Word], source: &str, depth: usize) {
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
            let longs: Vec<&str> = opts
                .iter()
                .copied()
                .filter(|o| o.starts_with("--"))
                .collect();
            let (letters, values) = code_letters(name);
            let old_style = matches!(name, "tar" | "bsdtar")
                && args
                    .first()
                    .map(Word::text)
                    .is_some_and(|t| !t.starts_with('-') && t.contains(['I', 'F']));
            let hit = args.iter().map(Word::text).find(|t| {
                opts.iter().any(|o| {
                    *t == *o
                        || t.starts_with(&format!("{o}="))
                        || (o.len() == 2 && !o.starts_with("--") && t.starts_with(o) && t.len() > 2)
                }) || long_option(&[t], &longs)
                    || short_cluster(&[t], letters, values)
            });
            let hit = hit.or(old_style.then(|| args[0].text()));
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
            _ if runners::runs_given_commands(name, args) => self.opaque(format!(
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
                // makefile's, and recipes run it. Besides every risky variable (`SHELL`, `CC`,
                // `CXX`, `CPP`, `LD`, `AR`, `AS`, `MAKE`, `MAKEFLAGS`, …), make's own program
                // variables.
                const MAKE_CODE_VARS: &[&str] = &[
                    ".SHELLFLAGS",
                    "RM",
                    "FC",
                    "YACC",
                    "LEX",
                    "INSTALL",
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
                // A makefile given is a script file (stdin with `-f -`, a computed name or
                // one written by the same command is opaque); the default ones only matter
                // when the command wrote one.
                let (dir, given) = make_files(args);
                let join = |f: &str| {
                    if dir.is_empty() || f.starts_with('/') {
                        f.to_string()
                    } else {
                        format!("{dir}/{f}")
                    }
                };
                if given.is_empty()
                    && ["GNUmakefile", "makefile", "Makefile"]
                        .iter()
                        .any(|f| self.is_written(&join(f)))
                {
                    self.opaque(format!(
                        "{} runs a makefile written by the same command",
                        q(source)
                    ));
                }
                for w in given {
                    let w = match w.lit.as_deref() {
                        Some(l) if l != "-" => Word::plain(&join(l)),
                        _ => w,
                    };
                    self.script_file(&w, source);
                }
            }
            "git" => self.git_runs(args, source, depth),
            "ssh" | "scp" | "sftp" | "rsync" => {
                let texts: Vec<&str> = args.iter().map(Word::text).collect();
                // Letters that name a program, a configuration that runs one or a library ssh
                // loads (`-I PKCS11LIB`), wherever they stand in a cluster (`rsync -avze
                // CMD`, `scp -rS CMD`, `ssh -Fconf`, `ssh -vI lib.so`, `sftp -D CMD`), and the
                // letters taking a value, which end the cluster (ssh(1), scp(1), sftp(1),
                // rsync(1)).
                let (code, values) = match name {
                    "ssh" => ("FI", "BbcDEeiJLlmOoPpQRSWw"),
                    "scp" => ("DFS", "ciJloPX"),
                    "sftp" => ("DFS", "BbcilJoPRs"),
                    _ => ("e", "BfMT@"),
                };
                let risky = (name != "rsync" && !ssh_options_plain(args, code, values))
                    || texts.iter().enumerate().any(|(i, t)| {
                        let lower = t.to_ascii_lowercase();
                        lower.contains("proxycommand")
                            || lower.contains("localcommand")
                            || lower.contains("knownhostscommand")
                            || (matches!(*t, "-S" | "-e" | "-F") && i + 1 < texts.len())
                            || t.starts_with("--rsh")
                            || t.starts_with("--rsync-path")
                            || (name != "ssh" && t.starts_with("-S"))
                            || short_cluster(&[t], code, values)
                    });
                if risky {
                    self.opaque(format!(
                        "{} runs a command or loads a library given in its options (ssh \
                         `ProxyCommand`, `PKCS11Provider`, `-I`, `-e`, `-S`)",
                        q(source)
                    ));
                } else if name == "ssh" {
                    self.ssh(args, source, depth);
                }
            }
            // `ssh-keygen -D PKCS11LIB` and `-w PROVIDER` load the library into ssh-keygen;
            // `ssh-add -s PKCS11LIB`/`-S PROVIDER` have the agent load it (ssh-keygen(1),
            // ssh-add(1)).
            "ssh-keygen" | "ssh-add" => {
                let texts: Vec<&str> = args.iter().map(Word::text).collect();
                let (code, values) = match name {
                    "ssh-keygen" => ("Dw", "CEFIJMNOPRVZabfgjmnrstYz"),
                    _ => ("sS", "eHhMmt"),
                };
                if short_cluster(&texts, code, values) {
                    self.opaque(format!(
                        "{} loads a library given in its options",
                        q(source)
                    ));
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
                            skip = watch_takes_next(t);
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
    pub(super) fn built_from_input(&self, text: &str) -> bool {
        match &self.xargs_repl {
            Some(r) => text.contains(r.as_str()),
            None => self.in_find_exec && text.contains("{}"),
        }
    }

    /// A script file a shell, an interpreter or `source` runs: a computed name, stdin, a
    /// descriptor or a process substitution (`bash <(…)`, `. /dev/stdin`) is opaque, and so
    /// is a file written by the same command; otherwise it is a path the command reads.
    pub(super) fn script_file(&mut self, w: &Word, source: &str) {
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
    pub(super) fn interpreter(&mut self, name: &str, inline: &[&str], args: &[Word], source: &str) {
        let mut i = 0usize;
        let mut no_script_needed = false;
        // Long spellings of the inline-code options, abbreviated too (`julia --ev`, `fish
        // --comm`: getopt_long); gdb reads long options with one dash as well
        // (getopt_long_only: `-eval-command`, `-iex`).
        let long_only = name == "gdb";
        let longs: Vec<String> = inline
            .iter()
            .filter(|o| o.starts_with("--") || (long_only && o.len() > 2))
            .map(|o| format!("--{}", o.trim_start_matches('-')))
            .collect();
        let longs: Vec<&str> = longs.iter().map(String::as_str).collect();
        while i < args.len() {
            let t = args[i].text();
            let as_long = match t.strip_prefix('-') {
                Some(rest) if long_only && rest.len() > 1 && !rest.starts_with('-') => {
                    format!("--{rest}")
                }
                _ => t.to_string(),
            };
            if inline.contains(&t)
                || inline
                    .iter()
                    .any(|o| o.len() > 2 && t.starts_with(&format!("{o}=")))
                || long_option(&[as_long.as_str()], &longs)
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
    ///
    /// Every program counts (`-e A -e B` runs both), in every spelling getopt_long reads: an
    /// attached or clustered short option (`-e'…'`, `-be …`), a long one abbreviated or with
    /// `=` (`--sour=…`), and gawk's `-W source=…` (gawk(1): `-W` names a long option).
    pub(super) fn awk(&mut self, args: &[Word], source: &str) {
        let mut i = 0usize;
        let mut programs: Vec<Word> = Vec::new();
        let mut from_file = false;
        while i < args.len() {
            let w = &args[i];
            let t = w.text();
            if t == "--" {
                i += 1;
                break;
            }
            if !t.starts_with('-') || t.len() < 2 {
                break;
            }
            i += 1;
            // The option (`-x` or its long name) and its value: attached (`-e'…'`,
            // `--file=F`) or the next word.
            let next = |i: &mut usize| {
                *i += 1;
                args.get(*i - 1).cloned()
            };
            let (opt, value): (String, Option<Word>) = if t.starts_with("--") {
                match long_word(AWK_LONG_VALUES, t) {
                    Some((o, Some(v))) => (o.to_string(), Some(w.part(v))),
                    Some((o, None)) => (o.to_string(), next(&mut i)),
                    None => continue,
                }
            } else {
                let Some((c, v)) = cluster_value(
                    w,
                    args,
                    &mut i,
                    |c| AWK_OPTIONAL_VALUES.contains(c),
                    |c| AWK_SHORT_VALUES.contains(c),
                ) else {
                    continue;
                };
                if c != 'W' {
                    (format!("-{c}"), v)
                } else {
                    // `-W source=TEXT`, `-W exec FILE`: the long option it names.
                    let Some(v) = v.filter(|v| v.lit.is_some()) else {
                        self.opaque(format!(
                            "{} has a `-W` option only known when it runs",
                            q(source)
                        ));
                        return;
                    };
                    match long_word(AWK_LONG_VALUES, &format!("--{}", v.text())) {
                        Some((o, Some(inline))) => (o.to_string(), Some(Word::plain(inline))),
                        Some((o, None)) => (o.to_string(), next(&mut i)),
                        None => continue,
                    }
                }
            };
            match opt.as_str() {
                "-f" | "--file" => {
                    from_file = true;
                    if let Some(v) = &value {
                        self.script_file(v, source);
                    }
                }
                "-e" | "--source" => programs.extend(value),
                "-F" | "-v" | "--assign" | "--field-separator" => {}
                // `-i`/`--include`, `-l`/`--load`, `-E`/`--exec`.
                _ => {
                    self.opaque(format!(
                        "{} loads code or edits files in place (`{t}`)",
                        q(source)
                    ));
                    return;
                }
            }
        }
        if programs.is_empty() && !from_file {
            programs.extend(args.get(i).cloned());
        }
        if programs.is_empty() && !from_file {
            self.opaque(format!("{} has no awk program", q(source)));
        }
        for w in &programs {
            match &w.lit {
                Some(p) => {
                    if let Some(why) = bash_rules::awk_risk(p) {
                        self.opaque(format!("{} {why}", q(source)));
                        return;
                    }
                }
                None => {
                    self.opaque(format!(
                        "the awk program of {} is only known when it runs",
                        q(source)
                    ));
                    return;
                }
            }
        }
    }

    /// `sed SCRIPT FILE…`: a script that writes or reads files or runs commands (`w`, `r`,
    /// `e`, `s///w`) is opaque unless `--sandbox` forbids them.
    ///
    /// Scripts are found in every spelling GNU sed's getopt_long reads: `-e S`, `-eS`, `-ne
    /// S`, `--expression=S` and its abbreviations (`--expr=S`); script files likewise (`-fF`,
    /// `--file=F`, `--fil F`). `--sandbox` counts only as an option (not after `--`, not as
    /// the value of another option), and only spelled whole.
    pub(super) fn sed(&mut self, args: &[Word], source: &str) {
        const SED_LONG_VALUES: &[&str] = &["--expression", "--file", "--line-length"];
        let mut scripts: Vec<Word> = Vec::new();
        let mut first_operand: Option<&Word> = None;
        let mut from_file = false;
        let mut sandbox = false;
        let mut opts_done = false;
        let mut i = 0usize;
        let next = |i: &mut usize| {
            *i += 1;
            args.get(*i - 1).cloned()
        };
        while i < args.len() {
            let w = &args[i];
            let t = w.text();
            i += 1;
            if opts_done || !t.starts_with('-') || t.len() < 2 {
                first_operand = first_operand.or(Some(w));
                continue;
            }
            if t == "--" {
                opts_done = true;
                continue;
            }
            // The option letter or long name that takes a value, and that value.
            let (opt, value): (&str, Option<Word>) = if t.starts_with("--") {
                sandbox |= t == "--sandbox";
                match long_word(SED_LONG_VALUES, t) {
                    Some((o, Some(v))) => (o, Some(w.part(v))),
                    Some((o, None)) => (o, next(&mut i)),
                    None => continue,
                }
            } else {
                // A cluster: `-i[SUFFIX]` takes the rest as its suffix; `-e`, `-f`, `-l`
                // take the rest or the next word.
                let Some((c, v)) = cluster_value(
                    w,
                    args,
                    &mut i,
                    |c| c == 'i',
                    |c| matches!(c, 'e' | 'f' | 'l'),
                ) else {
                    continue;
                };
                let opt = match c {
                    'e' => "-e",
                    'f' => "-f",
                    _ => "-l",
                };
                (opt, v)
            };
            match opt {
                "-e" | "--expression" => scripts.extend(value),
                "-f" | "--file" => {
                    from_file = true;
                    if let Some(v) = &value {
                        self.script_file(v, source);
                    }
                }
                _ => {}
            }
        }
        if sandbox {
            return;
        }
        if scripts.is_empty()
            && !from_file
            && let Some(w) = first_operand
        {
            scripts.push(w.clone());
        }
        for w in scripts {
            match &w.lit {
                Some(text) => {
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
    pub(super) fn ssh(&mut self, args: &[Word], source: &str, depth: usize) {
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
        self.joined_script(rest, source, "remote command", depth);
    }

    /// `su -s SHELL` / `runuser --shell=SHELL`: su runs SHELL with `-c SCRIPT` (or reading
    /// stdin) in place of the user's shell, and SHELL may be any program (`su -s
    /// /usr/bin/gawk -c 'BEGIN{…}'` runs an awk program, not the script analysed as bash).
    /// A SHELL that is not one of [`SHELLS`] is opaque, in every spelling util-linux su's
    /// getopt_long reads (`-sX`, `-ls X`, `--sh=X`, `--shell X`).
    fn su_shell(&mut self, args: &[Word], source: &str) {
        const LONG_VALUES: &[&str] = &[
            "--command",
            "--session-command",
            "--group",
            "--supp-group",
            "--shell",
            "--whitelist-environment",
            "--user",
        ];
        let mut i = 0usize;
        while i < args.len() {
            let w = &args[i];
            let t = w.text();
            i += 1;
            if t == "--" {
                break;
            }
            let shell = if t.starts_with("--") {
                match long_word(LONG_VALUES, t) {
                    Some(("--shell", Some(v))) => Some(w.part(v)),
                    Some((o, None)) => {
                        i += 1;
                        args.get(i - 1).filter(|_| o == "--shell").cloned()
                    }
                    _ => None,
                }
            } else if t.len() > 1 && t.starts_with('-') {
                match cluster_value(w, args, &mut i, |_| false, |c| "cgGswu".contains(c)) {
                    Some(('s', v)) => v,
                    _ => None,
                }
            } else {
                None
            };
            if let Some(sh) = shell
                && !sh
                    .lit
                    .as_deref()
                    .is_some_and(|l| SHELLS.contains(&basename(l).as_str()))
            {
                self.opaque(format!(
                    "{} runs {} as its shell, which may read its script as another language",
                    q(source),
                    q(&sh.raw)
                ));
            }
        }
    }

    /// Commands that start a shell: `su -c SCRIPT`, `script -c SCRIPT`, `sg GROUP SCRIPT`,
    /// `nix-shell --run SCRIPT`; without a script (or `sudo -s`, `doas -s`) the shell reads
    /// stdin, which is opaque.
    pub(super) fn shell_runner(&mut self, name: &str, args: &[Word], source: &str, depth: usize) {
        if matches!(name, "su" | "runuser") {
            self.su_shell(args, source);
        }
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
                    matches!(*t, "-s" | "-i")
                        || long_option(&[t], &["--shell", "--login"])
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
}
