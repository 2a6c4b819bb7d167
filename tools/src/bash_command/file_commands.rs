//! Operands of file commands (`cp`, `mv`, `rm`, `tee`, `dd`, `sed -i`, `curl -o`, …): what each
//! reads and writes, parsed with the option tables of `options`; directories read whole are
//! left to `recursive`.

use super::recursive::RecursiveOperands;
use super::*;

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

impl Walker {
    /// Paths a command touches through its arguments: write targets of file-writing
    /// commands, and path-like arguments of any command.
    pub(super) fn paths_of(&mut self, name: &str, args: &[Word], source: &str) {
        let with_value = options_with_value(name, args);
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
                let opt = canonical_long(name, with_value, opt);
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
                    ("sed", "-i" | "--in-place") => sed_inplace = true,
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
                    | ("less", "-o" | "-O" | "--log-file" | "--LOG-FILE")
                    | ("ssh", "-E")
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
                    t.starts_with("--preserve")
                        || long_option(
                            &[t],
                            &["--archive", "--no-dereference", "--recursive", "--preserve"],
                        )
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
            // A program given by option (`-e`, `--file=…`, `-E`, gawk's `-W source=…`): the
            // operands are all files.
            "awk" | "gawk" | "mawk" | "nawk"
                if !has_option(args, &["--file", "--source", "--exec"], "feEW") =>
            {
                operands.first().copied()
            }
            "grep" | "egrep" | "fgrep" | "rgrep" | "rg" | "ack" | "ugrep" | "ug"
                if !has_option(args, &["--regexp", "--file"], "fe") =>
            {
                operands.first().copied()
            }
            // ag's `-f` is `--follow`, not a pattern file: its pattern is always the first
            // operand.
            "ag" => operands.first().copied(),
            _ => None,
        };
        let operands_read = RecursiveOperands {
            operands: &operands,
            program: program_operand,
            written: &written,
            find_runs,
        };
        self.recursive_operands(name, args, operands_read, source);
        self.listing_walks(name, args, &operands, source);
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
                    let naming = matches!(name, "ls" | "du" | "tree" | "stat" | "find");
                    let was = std::mem::replace(&mut self.naming, naming);
                    self.path_literal(&l, false, source, true);
                    self.naming = was;
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
                let texts: Vec<&str> = args.iter().map(Word::text).collect();
                long_option(&texts, &["--extract", "--get"])
                    || short_cluster(&texts, "x", "")
                    || (!first.starts_with('-') && first.contains('x'))
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
}
