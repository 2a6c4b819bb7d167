//! Directories a command reads whole (`grep -r`, `rg`, `tar c`, `cp -r`, `find … -exec`,
//! `git grep`), marked recursive for the permission layer to list; and the operands `find`
//! (`-fprint`, `-delete`) and `git clone` read and write.

use super::*;

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
        let cluster = |letters: &str, values: &str| short_cluster(&texts, letters, values);
        let long = |names: &[&str]| long_option(&texts, names);
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
                    || directories_recurse(&texts) =>
            {
                (others(), true)
            }
            // `rgrep` is `grep -r`.
            "rgrep" => (others(), true),
            "rg" | "ag" | "ack" | "ugrep" | "ug" if !texts.contains(&"--files") => {
                // `rg` and `ag` skip hidden and ignored files unless told otherwise, and follow
                // no symbolic link unless told to (`-L`/`--follow`; ag `-f`): a walk that
                // follows links is read as `grep -R` reads it, every file and link included
                // (more than rg reads, never less), so a link out of the project is checked.
                let short =
                    |t: &&str, c: char| t.starts_with('-') && !t.starts_with("--") && t.contains(c);
                // ag reads abbreviations (`--fol`, `--hid`: getopt_long); rg does not, so
                // reading them for rg only asks more.
                let follows = long(&["--follow"])
                    || texts.iter().any(|t| {
                        t.starts_with("--follow")
                            || (name == "rg" && short(t, 'L'))
                            || (name == "ag" && short(t, 'f'))
                    });
                let unfiltered = [
                    "--hidden",
                    "--no-ignore",
                    "--unrestricted",
                    "--skip-vcs-ignores",
                    "--all-types",
                    "--all-text",
                ];
                filtered = matches!(name, "rg" | "ag")
                    && !follows
                    && !long(&unfiltered)
                    && !texts.iter().any(|t| {
                        unfiltered[..4].iter().any(|u| t.starts_with(u))
                            || t.starts_with("--all-")
                            || (t.starts_with('-')
                                && !t.starts_with("--")
                                && (t.contains(['u', 'U', '.', 'a'])
                                    || (name == "ag" && t.contains('t'))))
                    });
                (others(), true)
            }
            "find" if find_runs => (find_roots(args), true),
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

    /// Operands whose every name the command lists with symbolic links followed into
    /// directories ([`PathUse::listed`]): `ls -RL` (and `dir`, `vdir`), `find -L`/`find …
    /// -follow` (and `bfs`), `tree -l`, `du -L`, `rg -L --files`, `fd -L`, `getfacl -RL`,
    /// and `chown`/`chgrp`/`setfacl`/`chcon -RL`, which change what they reach (`.`
    /// without one). Without following, a link under them is listed as a link
    /// and a link named as an operand is checked as the operand.
    pub(super) fn listing_walks(
        &mut self,
        name: &str,
        args: &[Word],
        operands: &[&Word],
        source: &str,
    ) {
        let texts: Vec<&str> = args.iter().map(Word::text).collect();
        let has = |long: &str| long_option(&texts, &[long]);
        let short = |letter: &str, values: &str| short_cluster(&texts, letter, values);
        let all = || operands.iter().map(|w| (*w).clone()).collect::<Vec<_>>();
        let recursive_logical = short("R", "") && (short("L", "") || has("--logical"))
            || has("--recursive") && (short("L", "") || has("--logical"));
        let roots: Vec<Word> = match name {
            "ls" | "dir" | "vdir"
                if (short("R", "ITw") || has("--recursive"))
                    && (short("L", "ITw") || has("--dereference")) =>
            {
                all()
            }
            "find" | "bfs"
                if find_leading_options(args).any(|t| t == "-L") || texts.contains(&"-follow") =>
            {
                find_roots(args)
            }
            // tree's value options (`-L 3`, `-P pat`) take the next word; the rest of their
            // cluster is still options.
            "tree" if short("l", "") || has("--follow") => all(),
            "du" if short("L", "BdtX") || has("--dereference") => all(),
            // `rg --files` lists, `fd` finds (after its pattern, `.` when no directory).
            "rg" if (short("L", "") || has("--follow")) && texts.contains(&"--files") => all(),
            "fd" | "fdfind" if short("L", "") || has("--follow") => {
                operands.iter().skip(1).map(|w| (*w).clone()).collect()
            }
            "getfacl" | "getfattr" if recursive_logical => all(),
            // They change what they reach: the owner, the ACLs, the security context of
            // every file a link leads to (the first operand of `chown`/`chgrp` is the owner).
            "chown" | "chgrp" if recursive_logical => {
                operands.iter().skip(1).map(|w| (*w).clone()).collect()
            }
            "setfacl" | "chcon" if recursive_logical => all(),
            _ => return,
        };
        if roots.is_empty() {
            self.listing_walk(&Word::plain("."), source);
        }
        for w in &roots {
            self.listing_walk(w, source);
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
            let roots = find_roots(args);
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
            "--ref-format",
            "-u",
            "--upload-pack",
            "-c",
            "--config",
        ];
        let mut operands: Vec<&Word> = Vec::new();
        let mut i = 0usize;
        while i < args.len() {
            let t = args[i].text();
            if t.starts_with('-') && t.len() > 1 {
                // `--orig NAME`: an abbreviation takes the next word like the whole name
                // (parse-options).
                let takes = WITH_VALUE.contains(&t)
                    || (!t.contains('=') && long_word(WITH_VALUE, t).is_some());
                i += if takes { 2 } else { 1 };
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

/// Whether grep is told to recurse with `--directories=recurse` in any spelling: the
/// option abbreviated (`--dir=recurse`), its value in the next word (`--directories
/// recurse`, `-d recurse`) or attached (`-drecurse`, `-id recurse`), the value abbreviated
/// (`rec`).
fn directories_recurse(texts: &[&str]) -> bool {
    let recurse = |v: &str| v.len() >= 3 && "recurse".starts_with(v);
    texts.iter().enumerate().any(|(i, t)| {
        let next = texts.get(i + 1).copied().unwrap_or("");
        if let Some(long) = t.strip_prefix("--") {
            let (key, value) = match long.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (long, None),
            };
            return !key.is_empty()
                && "directories".starts_with(key)
                && recurse(value.unwrap_or(next));
        }
        // A short cluster: letters up to `d`, whose value is the rest or the next word.
        t.strip_prefix('-').is_some_and(|c| {
            c.find('d').is_some_and(|at| {
                let rest = &c[at + 1..];
                recurse(if rest.is_empty() { next } else { rest })
            })
        })
    })
}

/// How many of `find`'s words are its leading options (`-H`, `-L`, `-P`, `-O<level>`,
/// `-D <flags>`), which come before the starting points.
fn find_leading_count(args: &[Word]) -> usize {
    let mut n = 0;
    while let Some(t) = args.get(n).map(Word::text) {
        match t {
            "-H" | "-L" | "-P" => n += 1,
            "-D" => n += 2,
            _ if t.starts_with("-O") => n += 1,
            _ => break,
        }
    }
    n.min(args.len())
}

/// `find`'s leading options (see [`find_leading_count`]).
fn find_leading_options(args: &[Word]) -> impl Iterator<Item = &str> {
    args[..find_leading_count(args)].iter().map(Word::text)
}

/// The starting points of `find` (after its leading options, the words before the first
/// option or expression): `find -L a b -name x` → `a b`.
fn find_roots(args: &[Word]) -> Vec<Word> {
    args[find_leading_count(args)..]
        .iter()
        .take_while(|w| {
            let t = w.text();
            !t.starts_with('-') && !matches!(t, "(" | "!" | ")")
        })
        .cloned()
        .collect()
}
