//! Git's ignore rules matched in this process, so a fingerprint walk skips exactly what
//! `git add --all` leaves out without asking git (`git ls-files --ignored`, `git
//! check-ignore`: ~1.5 ms of CPU per process on a small VM).
//!
//! Patterns are parsed and matched by gix-ignore / gix-glob (a port of git's `dir.c` pattern
//! parsing and `wildmatch.c`); what this module adds is the order git applies them in
//! (gitignore(5), and `prep_exclude` / `last_matching_pattern` in git's `dir.c`):
//!
//! - the lists, highest priority first: the `.gitignore` of the path's own directory, then
//!   each parent's up to the top, then the shadow `info/exclude` (which holds the project's
//!   own `info/exclude` and troupe's exclusions); within one list the last matching line
//!   decides, and a `!` line un-ignores;
//! - a directory the rules exclude is excluded as a whole: nothing below it can be
//!   re-included, and git reads no `.gitignore` below it;
//! - a tracked file is never ignored: a directory the rules exclude is still walked when
//!   the last staged tree holds files under it, and those files (only those) are kept.
//!
//! What git and gix could read differently is refused, and git decides instead (fail
//! closed): a rule file holding a NUL byte (git stops a pattern there), a carriage return
//! not before a line feed (git drops only the one before `\n`), a `.gitignore` that is not
//! a regular file (git does not follow a symlinked one), a global excludes file with any
//! pattern (which of several git reads depends on configuration order), a shadow
//! configuration `git init` would not write (`plain_config`), or any `core.ignoreCase`;
//! and patterns where gix-glob 0.27's wildmatch is known to differ from git's ([`risky`],
//! found by a hostile review: character classes, `**` that is not a whole path component,
//! patterns of only tabs or form feeds, more stars than its recursion limit allows).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gix_ignore::glob::pattern::Case;
use gix_ignore::glob::search::pattern::List;
use gix_ignore::search::Ignore;
use gix_object::bstr::ByteSlice;

use crate::fingerprint::{Stat, no_patterns, plain_config};
use crate::stage::Staged;

/// One parsed rule file, rooted at its directory.
pub(crate) type RuleList = List<Ignore>;

/// Parsed rule files kept between walks, per absolute path, with the `lstat` they were
/// read under: a file whose stat is unchanged and was not racy then is not read again.
#[derive(Debug, Default)]
pub(crate) struct RuleCache {
    /// Per file: its stat when read, whether that stat was racy then (within the margin of
    /// the walk that read it: a rewrite in the same clock tick may keep it), the list.
    lists: HashMap<PathBuf, (Stat, bool, Arc<RuleList>)>,
}

/// Why the rules could not be matched in process (git decides instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused(pub(crate) String);

/// Reads rule file text as git's `add_patterns_from_buffer` does: a UTF-8 byte order mark
/// at the start is skipped, lines end at `\n` (a `\r` before it is dropped), a last line
/// without `\n` counts. `base`: the file's directory relative to the work tree (`a/b/`,
/// empty for the top or for `info/exclude`). Refused: text git and gix could split or
/// truncate differently (see the module docs).
pub(crate) fn parse(text: &[u8], source: &Path, base: &[u8]) -> Result<RuleList, Refused> {
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    if text.contains(&0) {
        return Err(Refused(format!("{}: a NUL byte", source.display())));
    }
    if text
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'\r' && text.get(i + 1) != Some(&b'\n'))
    {
        return Err(Refused(format!(
            "{}: a carriage return not ending a line",
            source.display()
        )));
    }
    if let Some(line) = text.split(|b| *b == b'\n').find(|l| risky(l)) {
        return Err(Refused(format!(
            "{}: a pattern git and gix may match differently: {:?}",
            source.display(),
            String::from_utf8_lossy(line)
        )));
    }
    // gix skips any byte order mark it recognizes (UTF-16, UTF-7, ...), git only UTF-8's:
    // a leading empty line leaves gix none to find. A last line gets its `\n`, so a `\r`
    // there is dropped as git drops it.
    let mut buf = Vec::with_capacity(text.len() + 2);
    buf.push(b'\n');
    buf.extend_from_slice(text);
    if !buf.ends_with(b"\n") {
        buf.push(b'\n');
    }
    let mut list = List::from_bytes(&buf, source.to_path_buf(), None, Ignore::default());
    list.base = (!base.is_empty()).then(|| base.into());
    Ok(list)
}

/// Most `*` in one pattern matched in process: gix-glob's wildmatch answers "no match" past
/// 64 levels of recursion (`RECURSION_LIMIT`), one per star at most; git has no such limit.
const MAX_STARS: usize = 20;

/// Whether a rule file line (as git splits them, `\r` before `\n` included) is one gix-glob
/// may match otherwise than git (each found by the hostile review, `rules_hostile_tests`):
/// - `[:` anywhere: gix's `[[:blank:]]` takes line breaks, its `[[:space:]]` only a space,
///   and a `[:` that opens no class drops members of the set;
/// - `**` that is not a whole path component (`ab**/c`): git matches the literal prefix,
///   then the rest as a pattern starting with `**`, which crosses directories;
/// - a pattern of only whitespace that is not all spaces (`\t`, form feed): gix drops it,
///   git matches names of those bytes;
/// - more than [`MAX_STARS`] stars.
fn risky(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.first().is_none_or(|b| *b == b'#') {
        return false;
    }
    let core = line.strip_prefix(b"!").unwrap_or(line);
    if !core.is_empty()
        && core.iter().all(u8::is_ascii_whitespace)
        && core.iter().any(|b| *b != b' ')
    {
        return true;
    }
    if line.windows(2).any(|w| w == b"[:") {
        return true;
    }
    if line.iter().filter(|b| **b == b'*').count() > MAX_STARS {
        return true;
    }
    // Every run of two or more stars must be exactly `**` between slashes (or the ends).
    let mut i = 0;
    while i < line.len() {
        if line[i] != b'*' {
            i += 1;
            continue;
        }
        let start = i;
        while i < line.len() && line[i] == b'*' {
            i += 1;
        }
        let run = i - start;
        if run >= 2 {
            let before_ok =
                start == 0 || line[start - 1] == b'/' || (start == 1 && line[0] == b'!');
            let after_ok =
                i == line.len() || line[i] == b'/' || line[i..].iter().all(|b| *b == b' ');
            if run != 2 || !before_ok || !after_ok {
                return true;
            }
        }
    }
    false
}

/// Whether the rule lists `lists` (outermost first) exclude `key` (a path relative to the
/// work tree, `/`-separated, no trailing `/`) as a directory (`is_dir`) or not: the
/// innermost list with a matching line decides, by its last matching line.
pub(crate) fn excluded(lists: &[Arc<RuleList>], key: &[u8], is_dir: bool) -> bool {
    let path = key.as_bstr();
    let basename = key.iter().rposition(|b| *b == b'/').map(|p| p + 1);
    lists
        .iter()
        .rev()
        .find_map(|list| {
            gix_ignore::search::pattern_matching_relative_path(
                list,
                path,
                basename,
                Some(is_dir),
                Case::Sensitive,
            )
        })
        .is_some_and(|m| !m.pattern.is_negative())
}

/// What a walk needs to match git's ignore rules itself: the rule files outside the work
/// tree, what is tracked, and the cache of parsed files.
pub(crate) struct Matcher<'a> {
    /// The shadow `info/exclude`.
    pub(crate) info_exclude: PathBuf,
    /// The shadow configuration.
    pub(crate) config: PathBuf,
    /// Every global excludes file (the default one and each `core.excludesFile`).
    pub(crate) global_excludes: &'a [PathBuf],
    /// The process-wide configuration is plain (`GitFiles::plain`).
    pub(crate) global_plain: bool,
    /// The last stage, when its files are what git counts as tracked (`None`: nothing is).
    pub(crate) tracked: Option<&'a Staged>,
    /// Parsed rule files.
    pub(crate) cache: &'a mut RuleCache,
    /// The lists outside the work tree, once [`Matcher::prepare`] read them.
    pub(crate) outside: Vec<Arc<RuleList>>,
}

impl Matcher<'_> {
    /// Reads the rule and configuration files outside the work tree (blocking), after the
    /// walk recorded their stat (`stats`, by path): so a change after the read shows as a
    /// changed stat next time.
    pub(crate) fn prepare(
        &mut self,
        stats: &HashMap<PathBuf, Option<Stat>>,
        taken: i128,
    ) -> Result<(), Refused> {
        if !self.global_plain {
            return Err(Refused("the global configuration is not plain".into()));
        }
        let config = match std::fs::read(&self.config) {
            Ok(c) => String::from_utf8_lossy(&c).to_ascii_lowercase(),
            Err(e) => return Err(Refused(format!("{}: {e}", self.config.display()))),
        };
        if !plain_config(&config) {
            return Err(Refused("the shadow configuration is not plain".into()));
        }
        for file in self.global_excludes {
            match std::fs::read(file) {
                Ok(text) if !no_patterns(&String::from_utf8_lossy(&text)) => {
                    return Err(Refused(format!("{}: global patterns", file.display())));
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Refused(format!("{}: {e}", file.display()))),
            }
        }
        let info = self.info_exclude.clone();
        match stats.get(&info).copied().flatten() {
            Some(stat) => {
                let list = self.load(&info, stat, b"", taken)?;
                self.outside = vec![list];
            }
            None => self.outside.clear(),
        }
        Ok(())
    }

    /// The rule list of the file at `path` (blocking), read again unless the cache holds it
    /// under `stat`, which was not racy when it was read nor is at `taken` (the walk's
    /// start). `base` as in [`parse`].
    pub(crate) fn load(
        &mut self,
        path: &Path,
        stat: Stat,
        base: &[u8],
        taken: i128,
    ) -> Result<Arc<RuleList>, Refused> {
        if let Some((then, racy, list)) = self.cache.lists.get(path)
            && *then == stat
            && !racy
            && !then.racy(taken)
        {
            return Ok(list.clone());
        }
        let text = std::fs::read(path).map_err(|e| Refused(format!("{}: {e}", path.display())))?;
        let list = Arc::new(parse(&text, path, base)?);
        self.cache
            .lists
            .insert(path.to_path_buf(), (stat, stat.racy(taken), list.clone()));
        Ok(list)
    }

    /// Whether `key` (a file) is tracked.
    pub(crate) fn tracked(&self, key: &[u8]) -> bool {
        self.tracked.is_some_and(|s| s.files().contains_key(key))
    }

    /// Whether any tracked file lies under the directory `key`.
    pub(crate) fn tracked_under(&self, key: &[u8]) -> bool {
        let Some(staged) = self.tracked else {
            return false;
        };
        let mut prefix = key.to_vec();
        prefix.push(b'/');
        under(staged.files(), &prefix)
    }
}

/// Whether a key of `files` starts with `prefix`.
fn under<V>(files: &BTreeMap<Vec<u8>, V>, prefix: &[u8]) -> bool {
    files
        .range(prefix.to_vec()..)
        .next()
        .is_some_and(|(k, _)| k.starts_with(prefix))
}
