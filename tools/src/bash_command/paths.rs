//! Paths a command touches, joined to every directory an earlier `cd` may have left.

use super::*;

impl Walker {
    /// Record a path only known when it runs.
    pub(super) fn unknown(&mut self, reason: String, write: bool) {
        let u = UnknownPath { reason, write };
        if !self.out.unknown_paths.contains(&u) {
            self.out.unknown_paths.push(u);
        }
    }

    /// Record a path use. `required`: the word is known to be a path (a redirection or write
    /// target), so a non-literal value is unknown; otherwise only path-like words count (a
    /// literal that is absolute, `~`-based, climbs with `..` or holds a `/`; a computed word
    /// with a `/` or `..` in its literal parts).
    pub(super) fn path(&mut self, w: &Word, write: bool, source: &str, required: bool) {
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
    pub(super) fn path_literal(&mut self, lit: &str, write: bool, source: &str, required: bool) {
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
            || lit.ends_with("/..")
            // `outlink/secret`: a relative path through a directory that may be a symbolic
            // link out of the project (the permission layer resolves it on the disk).
            || (lit.contains('/') && !lit.contains("://"));
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
            (Cd::Known(dirs), false) => joined_under(dirs, &lit),
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
                && !self.own_git_config
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
                recursive: self.recursive.is_some() && !write,
                filtered: self.recursive == Some(true) && !write,
                listed: self.listing && !write,
                named: self.naming && !write,
                source: collapse(source),
            };
            // One entry per path, write and command: a recursive read of a path also named
            // plainly (`cp -r src d`) marks that entry.
            match self
                .out
                .paths
                .iter_mut()
                .find(|p| p.path == use_.path && p.write == use_.write && p.source == use_.source)
            {
                Some(p) => {
                    p.listed |= use_.listed;
                    p.named |= use_.named;
                    if use_.recursive {
                        p.filtered = if p.recursive {
                            p.filtered && use_.filtered
                        } else {
                            use_.filtered
                        };
                        p.recursive = true;
                    }
                }
                None => self.out.paths.push(use_),
            }
        }
    }

    /// A directory whose every name the command lists, links followed (see
    /// [`PathUse::listed`]).
    pub(super) fn listing_walk(&mut self, w: &Word, source: &str) {
        let was = std::mem::replace(&mut self.listing, true);
        self.path(w, false, source, true);
        self.listing = was;
    }

    /// A directory (or file) whose every file the command reads (see
    /// [`PathUse::recursive`]; `filtered`: [`PathUse::filtered`]).
    pub(super) fn recursive_read(&mut self, w: &Word, filtered: bool, source: &str) {
        let was = self.recursive;
        self.recursive = Some(filtered);
        self.path(w, false, source, true);
        self.recursive = was;
    }

    /// The directories a relative literal path may be in (one per `cd` candidate); empty
    /// when the directory is unknown.
    pub(super) fn candidates(&self, lit: &str) -> Vec<String> {
        if lit.starts_with('/') || lit.starts_with('~') {
            return vec![lit.to_string()];
        }
        match &self.cd {
            Cd::Known(dirs) => joined_under(dirs, lit),
            Cd::Unknown(_) => Vec::new(),
        }
    }

    /// A word that is one bare expansion (`$x`, `"${x}"`, `$(…)`) whose value may be a path
    /// outside: a variable assigned from something only known when it runs, an environment
    /// variable naming a directory (`$HOME`), a positional parameter, or a command's output.
    pub(super) fn bare_unknown(&self, w: &Word) -> bool {
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
