//! Tracking the directory commands run in across `cd`, `pushd`, `popd` (a `cd` may fail).

use super::*;

/// Directory the next commands run in, relative to the working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cd {
    /// One of these literal directories (relative to the working directory, absolute, or
    /// `~`-based; `""` is the working directory itself): a `cd` that may have failed leaves
    /// both the old and the new directory possible.
    Known(Vec<String>),
    /// Only known when the command runs (`cd $X`, `cd -`, `popd`, a function that `cd`s).
    Unknown(String),
}

/// The relative path `p` joined under each of `dirs` (candidates of [`Cd::Known`]; `""` is
/// the working directory, where `p` stays as it is).
pub(super) fn joined_under(dirs: &[String], p: &str) -> Vec<String> {
    dirs.iter()
        .map(|d| {
            if d.is_empty() {
                p.to_string()
            } else {
                format!("{}/{p}", d.trim_end_matches('/'))
            }
        })
        .collect()
}

/// More candidate directories than this make the directory unknown.
pub(super) const MAX_CD_CANDIDATES: usize = 8;

impl Cd {
    pub(super) fn here() -> Cd {
        Cd::Known(vec![String::new()])
    }

    /// Either state (after a command that may or may not have changed directory).
    pub(super) fn union(a: &Cd, b: &Cd) -> Cd {
        match (a, b) {
            (Cd::Unknown(u), _) | (_, Cd::Unknown(u)) => Cd::Unknown(u.clone()),
            (Cd::Known(x), Cd::Known(y)) => {
                let mut v = x.clone();
                for d in y {
                    if !v.contains(d) {
                        v.push(d.clone());
                    }
                }
                Cd::Known(v)
            }
        }
    }
}

impl Walker {
    /// `cd`-like commands: their target is a path the command touches, and it moves the
    /// following commands. A `cd` may fail (a missing directory, no permission), leaving the
    /// old directory: afterwards both are possible, except after `&&` (see [`Walker::list`]).
    pub(super) fn cd(&mut self, name: &str, args: &[Word], source: &str) {
        self.cd_seen += 1;
        let operands: Vec<&Word> = args
            .iter()
            .filter(|w| !w.text().starts_with('-') || w.text() == "-")
            .collect();
        let unknown = |s: &str| Cd::Unknown(s.to_string());
        let target: Result<String, ()> = match (name, operands.first()) {
            ("popd", _) => Err(()),
            ("pushd", None) => Err(()),
            (_, None) => {
                // A bare `cd` enters the home directory.
                self.path(&Word::plain("~"), false, source, true);
                Ok("~".into())
            }
            (_, Some(w)) => match w.lit.as_deref().filter(|_| !w.glob) {
                Some("-") | None => Err(()),
                Some(d) if d.starts_with('+') || (name == "pushd" && d.starts_with('-')) => Err(()),
                Some(d) if d.starts_with('~') && !(d == "~" || d.starts_with("~/")) => Err(()),
                Some(d) => {
                    let w = (*w).clone();
                    self.path(&w, false, source, true);
                    Ok(d.to_string())
                }
            },
        };
        if target.is_err() {
            // Whatever runs next reads that directory (`cd $D && ls`).
            self.unknown(
                format!("{} enters a directory only known when it runs", q(source)),
                false,
            );
        }
        let new = match (target, &self.cd) {
            (Err(()), _) => unknown(source),
            (Ok(_), Cd::Unknown(u)) => Cd::Unknown(u.clone()),
            (Ok(dir), Cd::Known(dirs)) => {
                if dir.starts_with('/') || dir.starts_with('~') {
                    Cd::Known(vec![dir])
                } else {
                    Cd::Known(joined_under(dirs, &dir))
                }
            }
        };
        let any = Cd::union(&self.cd, &new);
        self.cd = match any {
            Cd::Known(v) if v.len() > MAX_CD_CANDIDATES => unknown(source),
            other => other,
        };
        self.cd_ok = Some(new);
        self.cd_ok_set_by_cd = true;
    }
}
