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
    pub(super) fn awk(&mut self, args: &[Word], source: &str) {
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
    pub(super) fn sed(&mut self, args: &[Word], source: &str) {
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

    /// Commands that start a shell: `su -c SCRIPT`, `script -c SCRIPT`, `sg GROUP SCRIPT`,
    /// `nix-shell --run SCRIPT`; without a script (or `sudo -s`, `doas -s`) the shell reads
    /// stdin, which is opaque.
    pub(super) fn shell_runner(&mut self, name: &str, args: &[Word], source: &str, depth: usize) {
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
}
