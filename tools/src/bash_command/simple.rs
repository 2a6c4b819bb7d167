//! Simple commands: words, `VAR=x` prefixes, wrappers, equivalent spellings, and the [`Part`] each becomes.

use super::*;

/// `rm` with the non-option words of a deleting command (`shred -u f` → `rm f`).
fn rm_of(texts: &[String]) -> String {
    let ops: Vec<&str> = texts
        .iter()
        .filter(|t| !t.starts_with('-'))
        .map(String::as_str)
        .collect();
    format!("rm {}", ops.join(" ")).trim_end().to_string()
}

impl Walker {
    /// A `command` node: words, prefix assignments and redirections.
    pub(super) fn command(&mut self, node: Node<'_>, src: &str, depth: usize) {
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
    pub(super) fn simple(&mut self, words: Vec<Word>, source: &str, depth: usize) {
        self.last_cmd_cd = self.cd.clone();
        let saved_repl = self.xargs_repl.clone();
        self.simple_inner(words, source, depth);
        self.xargs_repl = saved_repl;
        if !self.cd_ok_set_by_cd {
            self.cd_ok = None;
        }
        self.cd_ok_set_by_cd = false;
    }

    pub(super) fn simple_inner(&mut self, words: Vec<Word>, source: &str, depth: usize) {
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
            if lit.contains('/') && !lit.starts_with(['/', '~']) {
                // `./outlink/run.sh`: the program file is read, wherever a link sends it.
                let lit = lit.to_string();
                self.path_literal(&lit, false, source, true);
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
                    // `env --uns X`, `timeout --sig KILL`: an abbreviation is the option it
                    // names (getopt_long), so it takes its value and is checked like it.
                    let known: Vec<&str> = spec
                        .long_values
                        .iter()
                        .chain(spec.script_long)
                        .chain(bash_rules::wrapper_other_longs(spec.name))
                        .copied()
                        .collect();
                    let opt = resolve_long(&known, &opt).map_or(opt, str::to_string);
                    if spec.name == "sudo" && opt == "--edit" {
                        self.sudo_edit(source);
                    }
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
                        if spec.name == "sudo" && *c == 'e' {
                            self.sudo_edit(source);
                        }
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
        self.evaluated_args(&name, &args, source, depth);
        self.runners(&name, &args, source, depth);
        // Before `paths_of`, which notes the links a checkout or extraction may make.
        self.tree_writes(&name, &args, source);
        self.paths_of(&name, &args, source);
        self.xargs_fed(&words, &starts, &name, source);
        self.assigns(&name, &args, source);
    }

    /// An option value of a wrapper that is a path: the directory the command runs in
    /// (`env -C DIR`, `sudo -D DIR`), a file it reads (`xargs -a FILE`) or writes
    /// (`strace -o FILE`). A value that changes which program the command's words run is
    /// opaque: the name it runs under (`env -a NAME`, `exec -a NAME`, `chpst -b NAME`, read
    /// as the program by multi-call binaries: `env -a git-push git origin` is `git push`,
    /// `env -a rm busybox -rf d` runs `rm`) and the directories searched for it (BSD `env
    /// -P DIR`).
    pub(super) fn wrapper_value(&mut self, wrapper: &str, opt: &str, v: &Word, source: &str) {
        if matches!(
            (wrapper, opt),
            ("env", "-a" | "--argv0" | "-P") | ("exec", "-a") | ("chpst", "-b")
        ) {
            self.opaque(format!(
                "{} runs its command under the name or from the directory {} (`{opt}`), so \
                 which program runs is not what its words say",
                q(source),
                q(&v.raw)
            ));
        }
        let (is_path, write) = match (wrapper, opt) {
            ("env", "-C" | "--chdir")
            | ("sudo", "-D" | "--chdir" | "-R" | "--chroot")
            | ("run0", "-D" | "--chdir")
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
        if matches!(wrapper, "systemd-run" | "run0") {
            self.unit_value(opt, v, source);
        }
    }

    /// A value `systemd-run` or `run0` gives the unit it starts: a variable it sets
    /// (`-E NAME=VALUE`, `--setenv`) is checked like `env NAME=VALUE`, and a property (`-p
    /// KEY=VALUE`, `--property`) other than a resource limit or a timeout is opaque: the
    /// `Exec*` properties are command lines the unit runs (`-p ExecStartPre='rm -rf d'`),
    /// others set its environment, root or program search path (systemd.exec(5),
    /// systemd.service(5)).
    fn unit_value(&mut self, opt: &str, v: &Word, source: &str) {
        const SAFE_PROPERTIES: &[&str] = &[
            "Memory",
            "CPU",
            "Tasks",
            "IO",
            "Nice",
            "Runtime",
            "Timeout",
            "Limit",
            "OOM",
            "Description",
        ];
        let setenv = matches!(opt, "-E" | "--setenv");
        if !setenv && !matches!(opt, "-p" | "--property") {
            return;
        }
        match v.lit.as_deref() {
            Some(l) if setenv => self.env_assignment(l, source),
            Some(l) if SAFE_PROPERTIES.iter().any(|p| l.starts_with(p)) => {}
            _ => self.opaque(format!(
                "{} gives the unit it starts {} (`{opt}`), which can run other commands",
                q(source),
                q(&v.raw)
            )),
        }
    }

    /// `sudo -e FILE…` (`--edit`, and `sudoedit`): the words after the options are files
    /// sudo copies, opens in an editor and writes back, not a command (sudo(8)).
    pub(super) fn sudo_edit(&mut self, source: &str) {
        self.opaque(format!(
            "{} opens files in an editor and writes them back (`sudo -e`)",
            q(source)
        ));
    }

    /// Whether a path (as written, relative to the current directory candidates) was
    /// written earlier in the command.
    pub(super) fn is_written(&self, lit: &str) -> bool {
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
    pub(super) fn env_assignment(&mut self, text: &str, source: &str) {
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
    pub(super) fn wrapper_script(&mut self, w: Option<&Word>, source: &str, depth: usize) {
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

    /// The command that `words` join into (`git submodule foreach CMD…`, `ssh HOST CMD…`),
    /// analysed as a script of its own; a word only known when it runs makes it opaque
    /// ("SOURCE runs a `what` only known when it runs").
    pub(super) fn joined_script<'w>(
        &mut self,
        words: impl IntoIterator<Item = &'w Word>,
        source: &str,
        what: &str,
        depth: usize,
    ) {
        let mut parts = Vec::new();
        for w in words {
            match &w.lit {
                Some(l) => parts.push(l.clone()),
                None => {
                    self.opaque(format!(
                        "{} runs a {what} only known when it runs",
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

    /// Another spelling of the same action, matched against the rules too: `git send-pack`
    /// and `git http-push` push, as do `git subtree push` and `git lfs push`; `find -delete`
    /// removes files like `rm`.
    pub(super) fn equivalents(&self, name: &str, args: &[Word]) -> Option<String> {
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
            // `git annex sync` and `gh repo sync` push to remotes; `rimraf` is `rm -rf`.
            ("git", Some("annex"))
                if matches!(
                    texts.get(1).map(String::as_str),
                    Some("sync" | "push" | "copy")
                ) =>
            {
                Some(
                    format!("git push {}", texts[2..].join(" "))
                        .trim_end()
                        .to_string(),
                )
            }
            ("gh", Some("repo")) if texts.get(1).map(String::as_str) == Some("sync") => Some(
                format!("git push {}", texts[2..].join(" "))
                    .trim_end()
                    .to_string(),
            ),
            ("rimraf" | "del-cli", _) => Some(format!("rm -rf {}", texts.join(" "))),
            // Other programs that delete the files they are given (README: they match `rm *`
            // like `find -delete`): `unlink f`, `shred -u f`, `srm`, `trash-put`,
            // `gio remove`, `git rm f`, `git clean -f`, `rsync --delete SRC DEST`.
            ("unlink" | "srm" | "wipe" | "trash" | "trash-put" | "rmtrash", _) => {
                Some(rm_of(&texts))
            }
            ("gio", Some("remove" | "trash" | "rm")) => Some(rm_of(&texts[1..])),
            ("shred", _)
                if texts.iter().any(|t| {
                    long_option(&[t.as_str()], &["--remove"])
                        || t == "--unlink"
                        || (t.starts_with('-') && !t.starts_with("--") && t.contains('u'))
                }) =>
            {
                Some(rm_of(&texts))
            }
            ("git", Some("rm")) if !texts.iter().any(|t| t == "--cached") => {
                Some(rm_of(&texts[1..]))
            }
            ("git", Some("clean"))
                if !texts.iter().any(|t| {
                    t == "--dry-run"
                        || (t.starts_with('-') && !t.starts_with("--") && t.contains('n'))
                }) =>
            {
                let paths: Vec<String> = texts[1..]
                    .iter()
                    .filter(|t| !t.starts_with('-'))
                    .cloned()
                    .collect();
                Some(format!(
                    "rm -r {}",
                    if paths.is_empty() {
                        ".".to_string()
                    } else {
                        paths.join(" ")
                    }
                ))
            }
            ("rsync", _)
                if texts
                    .iter()
                    .any(|t| t.starts_with("--delete") || t == "--remove-source-files") =>
            {
                Some(format!("rm -r {}", texts.join(" ")))
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
    pub(super) fn assigns(&mut self, name: &str, args: &[Word], source: &str) {
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
    pub(super) fn record(
        &mut self,
        words: &[Word],
        starts: &[usize],
        source: &str,
        inner: Option<&[String]>,
    ) {
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
}
