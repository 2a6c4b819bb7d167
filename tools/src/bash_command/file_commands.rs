//! Operands of file commands (`cp`, `mv`, `rm`, `tee`, `dd`, `find`, `git clone`, …): what each reads and writes.

use super::*;

/// Long options that by convention name where a program writes (`--target-dir DIR`,
/// `--output=FILE`): their value is a written path for any command.
pub(super) const OUTPUT_OPTIONS: &[&str] = &[
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
pub(super) const FILE_COMMANDS: &[&str] = &[
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
pub(super) fn runs_given_commands(name: &str, args: &[Word]) -> bool {
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
        // `socat - EXEC:cmd`, `nc -e cmd`, `ncat --sh-exec cmd`.
        "socat" => any(&|t| {
            let up = t.to_ascii_uppercase();
            up.contains("EXEC:") || up.contains("SYSTEM:")
        }),
        "nc" | "ncat" | "netcat" => any(&|t| {
            matches!(t, "--exec" | "--sh-exec" | "--lua-exec")
                || t.starts_with("--exec=")
                || t.starts_with("--sh-exec=")
                || t.starts_with("--lua-exec=")
                || (t.starts_with('-') && !t.starts_with("--") && t.contains(['e', 'c']))
        }),
        _ => false,
    }
}

/// What [`Walker::recursive_operands`] needs from `paths_of`'s parse of a command.
pub(super) struct RecursiveOperands<'a, 'w> {
    /// The non-option words.
    pub operands: &'a [&'w Word],
    /// The pattern or program operand (`grep PATTERN`), which is no path.
    pub program: Option<&'w Word>,
    /// The operands written (`cp`'s destination).
    pub written: &'a [&'w Word],
    /// A `find` that runs a command on what it finds (`-exec`, `-ok`).
    pub find_runs: bool,
}

impl Walker {
    /// Paths a command touches through its arguments: write targets of file-writing
    /// commands, and path-like arguments of any command.
    pub(super) fn paths_of(&mut self, name: &str, args: &[Word], source: &str) {
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
            "patch" => &[
                "-o",
                "--output",
                "-d",
                "--directory",
                "-B",
                "--prefix",
                "-i",
                "--input",
                "-p",
                "-r",
                "--reject-file",
                "-D",
                "-F",
                "-z",
                "--suffix",
            ],
            "make" | "gmake" => &[
                "-C",
                "--directory",
                "-f",
                "--file",
                "-I",
                "-j",
                "-l",
                "-o",
                "-W",
            ],
            "grep" | "egrep" | "fgrep" => {
                &["-f", "--file", "-e", "--regexp", "-m", "-A", "-B", "-C"]
            }
            "cut" => &["-d", "--delimiter", "-f", "-c", "-b"],
            "awk" | "gawk" | "mawk" | "nawk" => {
                &["-f", "--file", "-v", "-F", "-e", "--source", "-i"]
            }
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
        let find_runs = name == "find"
            && args
                .iter()
                .any(|w| matches!(w.text(), "-exec" | "-execdir" | "-ok" | "-okdir"));
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
                // `-o../x`: the attached value of a short option (the best split decides;
                // other path-like splits of an unknown option cluster are read paths).
                let takes = |o: &str| with_value.contains(&o) || writes_short(name, o);
                let mut splits = short_attached(t, &takes).into_iter();
                let best = splits.next();
                for (_, v) in splits {
                    self.path(&w.part(&v), false, source, false);
                }
                let (opt, inline) = match (&best, t.split_once('=')) {
                    (Some((o, v)), _) => (o.as_str(), Some(v.as_str())),
                    (None, Some((o, v))) => (o, Some(v)),
                    (None, None) => (t, None),
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
                    | ("patch", "-o" | "--output" | "-d" | "--directory" | "-B" | "--prefix")
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
                    // Separators, fields and programs, not paths (`cut -d/`, `awk -F/`).
                    ("awk" | "gawk" | "mawk" | "nawk", "-F" | "-v" | "-e" | "--source")
                    | ("cut", "-d" | "--delimiter" | "-f" | "-c" | "-b")
                    | ("sort", "-t" | "-k" | "-S")
                    | ("grep" | "egrep" | "fgrep", "-e" | "--regexp") => {}
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
                // `cp a.txt{,.bak}`: one word that expands to source and destination.
                None if operands.len() == 1 && operands[0].glob => operands.clone(),
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
                if !args.iter().any(|w| {
                    let t = w.text();
                    matches!(t, "--file" | "--source")
                        || t.starts_with("--file=")
                        || t.starts_with("--source=")
                        || (t.starts_with('-') && !t.starts_with("--") && t.contains(['f', 'e']))
                }) =>
            {
                operands.first().copied()
            }
            "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" | "ugrep" | "ug"
                if !args.iter().any(|w| {
                    let t = w.text();
                    matches!(t, "--regexp" | "--file")
                        || t.starts_with("--regexp=")
                        || t.starts_with("--file=")
                        || (t.starts_with('-') && !t.starts_with("--") && t.contains(['f', 'e']))
                }) =>
            {
                operands.first().copied()
            }
            _ => None,
        };
        let operands_read = RecursiveOperands {
            operands: &operands,
            program: program_operand,
            written: &written,
            find_runs,
        };
        self.recursive_operands(name, args, operands_read, source);
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
            match w.lit.as_deref() {
                // A file command's glob operand (`cat sub/*`, `head *.env`) is a read the
                // permission layer matches on the disk; a glob that may match `.`/`..` and
                // brace expansions go through `path` (unknown, or several words).
                Some(l)
                    if w.glob
                        && FILE_COMMANDS.contains(&name)
                        && !l.contains('{')
                        && !l
                            .split('/')
                            .any(|c| c.starts_with('.') && c.contains(['*', '?', '['])) =>
                {
                    let l = l.to_string();
                    self.path_literal(&l, false, source, true)
                }
                // A file command's operand is a file even without a `/` (`cat outlink`).
                Some(l) if !w.glob && FILE_COMMANDS.contains(&name) => {
                    let l = l.to_string();
                    self.path_literal(&l, false, source, true)
                }
                _ => self.path(w, false, source, required),
            }
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

    /// Operands whose every file the command reads: `grep -r PATTERN DIR…` (`.` without
    /// one), `rg`/`ag`/`ack` (recursive by default), `find ROOT… -exec …`, `tar c DIR`,
    /// `cp -r`/`scp -r`/`rsync -a` sources, `zip -r`, `diff -r`, `git grep` and
    /// `git diff --no-index A B`.
    pub(super) fn recursive_operands(
        &mut self,
        name: &str,
        args: &[Word],
        ops: RecursiveOperands<'_, '_>,
        source: &str,
    ) {
        let RecursiveOperands {
            operands,
            program,
            written,
            find_runs,
        } = ops;
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        // A short-option cluster holding one of `letters` before a letter taking a value.
        let cluster = |letters: &str, values: &str| {
            texts.iter().any(|t| {
                t.strip_prefix('-')
                    .filter(|c| !c.starts_with('-'))
                    .is_some_and(|c| {
                        c.chars()
                            .take_while(|ch| !values.contains(*ch))
                            .any(|ch| letters.contains(ch))
                    })
            })
        };
        let long = |names: &[&str]| {
            texts.iter().any(|t| {
                names
                    .iter()
                    .any(|n| t == n || t.starts_with(&format!("{n}=")))
            })
        };
        let others = || -> Vec<Word> {
            operands
                .iter()
                .filter(|w| {
                    !program.is_some_and(|p| std::ptr::eq(p, **w))
                        && !written.iter().any(|x| std::ptr::eq(*x, **w))
                })
                .map(|w| (*w).clone())
                .collect()
        };
        let mut filtered = false;
        let (recursive, default_dot): (Vec<Word>, bool) = match name {
            "grep" | "egrep" | "fgrep"
                if cluster("rR", "efABCmdD")
                    || long(&["--recursive", "--dereference-recursive"])
                    || texts.contains(&"--directories=recurse")
                    || texts.windows(2).any(|p| p == ["-d", "recurse"]) =>
            {
                (others(), true)
            }
            "rg" | "ag" | "ack" | "ugrep" | "ug" if !texts.contains(&"--files") => {
                // `rg` and `ag` skip hidden and ignored files unless told otherwise.
                filtered = matches!(name, "rg" | "ag")
                    && !texts.iter().any(|t| {
                        t.starts_with("--hidden")
                            || t.starts_with("--no-ignore")
                            || t.starts_with("--unrestricted")
                            || t.starts_with("--skip-vcs-ignores")
                            || t.starts_with("--all-")
                            || (t.starts_with('-')
                                && !t.starts_with("--")
                                && t.contains(['u', 'U', '.', 'a']))
                    });
                (others(), true)
            }
            "find" if find_runs => {
                let roots: Vec<Word> = args
                    .iter()
                    .take_while(|w| {
                        let t = w.text();
                        !t.starts_with('-') && !matches!(t, "(" | "!" | ")")
                    })
                    .cloned()
                    .collect();
                (roots, true)
            }
            "tar" | "bsdtar"
                if long(&["--create", "--append", "--update"])
                    || cluster("cru", "fCTXgbKNVH")
                    || texts
                        .first()
                        .is_some_and(|t| !t.starts_with('-') && t.contains(['c', 'r', 'u'])) =>
            {
                (others(), false)
            }
            "cp" | "scp" | "rsync"
                if cluster("rRa", "tSeTf") || long(&["--recursive", "--archive"]) =>
            {
                (others(), false)
            }
            "zip" if cluster("rR", "bntPxi") || long(&["--recurse-paths"]) => {
                (others().into_iter().skip(1).collect(), false)
            }
            "diff" if cluster("r", "xXIFSLCU") || long(&["--recursive"]) => (others(), false),
            "git" => match texts.first().copied() {
                Some("grep") => (Vec::new(), true),
                Some("diff") if texts.contains(&"--no-index") => {
                    let ops: Vec<Word> = args[1..]
                        .iter()
                        .filter(|w| !w.text().starts_with('-') || w.text() == "-")
                        .cloned()
                        .collect();
                    (ops, false)
                }
                _ => return,
            },
            _ => return,
        };
        if recursive.is_empty() && default_dot {
            self.recursive_read(&Word::plain("."), filtered, source);
        }
        for w in &recursive {
            if w.text() == "-" {
                continue;
            }
            self.recursive_read(w, filtered, source);
        }
    }

    /// `find`: `-fprint FILE` and friends write FILE; `-delete` removes what it finds under
    /// its starting points (so they are written).
    pub(super) fn find_paths(&mut self, args: &[Word], source: &str) {
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
    pub(super) fn clone_paths(&mut self, args: &[Word], source: &str) {
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
}
