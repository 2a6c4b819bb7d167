//! Path resolution and the permission asks shared by the built-in tools (OpenCode §6.3:
//! `external_directory` for anything outside the project, then the tool's own permission).

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};

use crate::{PermissionReply, PermissionRequest, ToolContext, ToolError};

/// Whether a path names a file or a directory; decides which directory the
/// `external_directory` pattern covers (the directory itself, or the file's parent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// A file (or something that may become one): the pattern is `<parent>/*`.
    File,
    /// A directory: the pattern is `<dir>/*`.
    Directory,
}

/// Ask `permission` for `patterns` through `ctx.permissions`. `Deny(msg)` becomes
/// [`ToolError::PermissionDenied`]; an abort while waiting becomes [`ToolError::Aborted`].
pub async fn ask(
    ctx: &ToolContext,
    permission: &str,
    patterns: Vec<String>,
    always: Vec<String>,
    metadata: Value,
) -> Result<(), ToolError> {
    let req = PermissionRequest {
        permission: permission.to_string(),
        patterns,
        always,
        metadata,
        ..Default::default()
    };
    ask_request(ctx, req).await
}

/// Ask a prepared request through `ctx.permissions` (see [`ask`]); a plain user rejection
/// becomes [`ToolError::PermissionRejected`].
pub async fn ask_request(ctx: &ToolContext, req: PermissionRequest) -> Result<(), ToolError> {
    let fut = ctx.permissions.ask(req);
    tokio::select! {
        reply = fut => match reply {
            PermissionReply::Allow | PermissionReply::AllowAlways => Ok(()),
            PermissionReply::Deny(msg) => Err(ToolError::PermissionDenied(msg)),
            PermissionReply::Reject(msg) => Err(ToolError::PermissionRejected(msg)),
        },
        _ = ctx.abort.cancelled() => Err(ToolError::Aborted),
    }
}

/// Resolve the path argument `p` of a file tool: `~` and `~/rest` are `home` and
/// `home/rest` (then outside the project unless home is inside it, so they go through the
/// `external_directory` ask like any absolute path), other relative paths are relative to
/// `directory`, absolute paths are unchanged. Not normalized (callers apply [`normalize`]).
///
/// Errors ([`ToolError::Failed`], naming `p`): a `~user` form (a shell would look up that
/// user's home; a tool does not guess, and the file `./~name` is written so), a `~` when
/// `home` is unknown or not absolute.
pub fn resolve_in(directory: &Path, p: &str, home: Option<&Path>) -> Result<PathBuf, ToolError> {
    let Some(after) = p.strip_prefix('~') else {
        let path = Path::new(p);
        return Ok(if path.is_absolute() {
            path.to_path_buf()
        } else {
            directory.join(path)
        });
    };
    if !(after.is_empty() || after.starts_with('/')) {
        let user = after.split('/').next().unwrap_or(after);
        return Err(ToolError::Failed(format!(
            "Cannot resolve the path {p}: `~{user}` would be the home directory of the user \
             {user:?}, which the file tools do not look up. Give the absolute path, `~/…` for \
             your own home directory, or `./{p}` for a file named like that in the working \
             directory."
        )));
    }
    let home = home.filter(|h| h.is_absolute()).ok_or_else(|| {
        ToolError::Failed(format!(
            "Cannot resolve the path {p}: the home directory is unknown (HOME is not set to an \
             absolute path). Give the absolute path instead."
        ))
    })?;
    // `~//etc` is under home like in a shell, not `/etc` (`join` would replace an absolute
    // rest).
    Ok(home.join(after.trim_start_matches('/')))
}

/// Lexically normalise a path: drop `.`, apply `..` (never above the root). No file access.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in path.components() {
        match comp {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The real location of `path` (absolute): the longest existing prefix is canonicalized
/// (symlinks and `..` resolved physically); the non-existing rest is applied lexically.
/// One trip to the blocking pool ([`real_path_blocking`]).
pub async fn real_path(path: &Path) -> PathBuf {
    let p = path.to_path_buf();
    let fallback = p.clone();
    tokio::task::spawn_blocking(move || real_path_blocking(&p))
        .await
        .unwrap_or(fallback)
}

/// [`real_path`] on the calling thread (blocking file-system calls). An existing path is
/// canonicalized at once; otherwise prefix by prefix up to the first missing component. A
/// dangling symbolic link on the way is followed to where it points (a write through it
/// creates its target there: `proj/dangle -> /elsewhere/new.txt` is `/elsewhere/new.txt`),
/// up to [`MAX_LINK_HOPS`] links, past which the kernel refuses the path too (`ELOOP`).
pub fn real_path_blocking(path: &Path) -> PathBuf {
    real_path_hops(path, 0)
}

/// How many symbolic links [`real_path_blocking`] follows by hand before it stops: Linux's
/// own limit (`MAXSYMLINKS`, 40), after which opening the path fails with `ELOOP`.
const MAX_LINK_HOPS: usize = 40;

fn real_path_hops(path: &Path, hops: usize) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        // Every prefix exists: prefix-by-prefix resolution gives the same path.
        return p;
    }
    let mut real = PathBuf::new();
    let mut exists = true;
    for comp in path.components() {
        match comp {
            Component::Prefix(_) | Component::RootDir => real.push(comp),
            Component::CurDir => {}
            Component::ParentDir => {
                // `real` is canonical while it exists, so popping is the physical parent.
                real.pop();
            }
            Component::Normal(c) => {
                let next = real.join(c);
                if exists {
                    match std::fs::canonicalize(&next) {
                        Ok(p) => real = p,
                        Err(_) => {
                            exists = false;
                            real = match std::fs::read_link(&next) {
                                // A dangling link: the path goes on where it points.
                                Ok(target) if hops < MAX_LINK_HOPS => {
                                    real_path_hops(&real.join(target), hops + 1)
                                }
                                _ => next,
                            };
                        }
                    }
                } else {
                    real = next;
                }
            }
        }
    }
    real
}

/// `target` relative to `base` (both absolute, normalised), with `..` steps when `target` is
/// outside (like Node's `path.relative`). Returns `"."`-free text; equal paths give `""`.
pub fn relative_path(base: &Path, target: &Path) -> String {
    let b: Vec<Component> = base.components().collect();
    let t: Vec<Component> = target.components().collect();
    let common = b.iter().zip(t.iter()).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = Vec::new();
    for _ in common..b.len() {
        parts.push("..".into());
    }
    for c in &t[common..] {
        parts.push(c.as_os_str().to_string_lossy().into_owned());
    }
    parts.join("/")
}

/// Roots that count as "inside the project" among the real session directory and the real
/// worktree (a worktree of `/` is ignored, as OpenCode does for non-git projects).
fn project_roots(directory: PathBuf, worktree: PathBuf) -> Vec<PathBuf> {
    let mut roots = Vec::with_capacity(2);
    for r in [directory, worktree] {
        if r.parent().is_some() && !roots.contains(&r) {
            roots.push(r);
        }
    }
    roots
}

fn absolute(p: &Path) -> PathBuf {
    // Not normalized lexically: [`real_path`] applies `..` to the real parent, so
    // `link/../x` is judged where the kernel would put it.
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        cwd.join(p)
    }
}

/// Where a tool's path argument lies, as the permission checks need it: everything
/// [`locate`] finds in one trip to the blocking pool (the file tools' checks used to take a
/// trip each; issue 19's profile found those trips the runtime's main source of context
/// switches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The real location ([`real_path_blocking`] of the absolute path).
    pub real: PathBuf,
    /// Whether `real` lies inside the real session directory or the real worktree (a
    /// worktree of `/` does not count, as in OpenCode for non-git projects).
    pub inside: bool,
    /// The permission pattern: `real` relative to the real worktree (`"."` for the worktree
    /// itself; `../…` when outside).
    pub rel: String,
    /// [`PathKind::Directory`] for an existing directory (symlinks followed), otherwise
    /// [`PathKind::File`] (a missing path counts as a file).
    pub kind: PathKind,
}

/// [`Located`] on the calling thread (blocking file-system calls: a `realpath` of `path`,
/// `directory` and `worktree`, and a `stat` of the real path). A relative path is taken from the
/// process's working directory, as the kernel would.
pub fn locate_blocking(directory: &Path, worktree: &Path, path: &Path) -> Located {
    let real = real_path_blocking(&absolute(path));
    // The kind of the real location: `x/missing/..` is the directory `x`, though the path as
    // written cannot be `stat`ed.
    let kind = match std::fs::metadata(&real) {
        Ok(m) if m.is_dir() => PathKind::Directory,
        _ => PathKind::File,
    };
    let dir = real_path_blocking(&absolute(directory));
    let root = real_path_blocking(&absolute(worktree));
    let rel = relative_path(&root, &real);
    let inside = project_roots(dir, root).iter().any(|r| real.starts_with(r));
    Located {
        real,
        inside,
        rel: if rel.is_empty() { ".".into() } else { rel },
        kind,
    }
}

/// [`locate_blocking`] of `path` for `ctx`'s session directory and worktree, in one trip to
/// the blocking pool. Should the trip fail (a panic in the pool), the path counts as outside
/// the project, so the `external_directory` ask still guards it.
pub async fn locate(ctx: &ToolContext, path: &Path) -> Located {
    let (directory, worktree, p) = (
        ctx.directory.clone(),
        ctx.worktree.clone(),
        path.to_path_buf(),
    );
    tokio::task::spawn_blocking(move || locate_blocking(&directory, &worktree, &p))
        .await
        .unwrap_or_else(|_| Located {
            real: absolute(path),
            inside: false,
            rel: relative_path(&absolute(&ctx.worktree), &absolute(path)),
            kind: PathKind::File,
        })
}

/// What [`locate_and`] did: the tool's work done in the same trip, or the path located and
/// the work's input handed back for the usual asks.
pub enum Trip<T, S> {
    /// No question was needed (inside the project, the rules allow the permission): the
    /// work ran; here is what it returned.
    Done(Located, T),
    /// A question may be needed: the work did not run; `S` is its input, back to the caller.
    Ask(Located, S),
}

/// [`locate`] `path` and, in the same trip to the blocking pool, run `work` on `input` when
/// no question is needed first: the real location lies inside the project (no
/// `external_directory` ask) and the turn's rules alone allow `permission` for
/// `patterns(&located)` ([`crate::PermissionAsker::gate`]). Otherwise nothing but the
/// location is done and the caller asks as usual, then makes its own trip: same checks,
/// same order, same results either way, one trip to the blocking pool fewer when the rules
/// settle it (issue 19: the trips were the runtime's main source of context switches).
///
/// Errors: [`ToolError::Aborted`] when the call was aborted before the work would start
/// (nothing done); [`ToolError::Failed`] ("internal error: …") when the trip panicked.
pub async fn locate_and<S, T>(
    ctx: &ToolContext,
    path: &Path,
    permission: &'static str,
    patterns: impl FnOnce(&Located) -> Vec<String> + Send + 'static,
    input: S,
    work: impl FnOnce(&Located, S) -> T + Send + 'static,
) -> Result<Trip<T, S>, ToolError>
where
    S: Send + 'static,
    T: Send + 'static,
{
    let gate = ctx.permissions.gate().await;
    let (directory, worktree, p, abort) = (
        ctx.directory.clone(),
        ctx.worktree.clone(),
        path.to_path_buf(),
        ctx.abort.clone(),
    );
    tokio::task::spawn_blocking(move || {
        let at = locate_blocking(&directory, &worktree, &p);
        let settled = at.inside
            && gate
                .as_ref()
                .is_some_and(|g| g.allows(permission, &patterns(&at)));
        if !settled {
            return Ok(Trip::Ask(at, input));
        }
        // An allowed ask still loses to an abort (`ask_request`'s select).
        if abort.is_cancelled() {
            return Err(ToolError::Aborted);
        }
        let out = work(&at, input);
        Ok(Trip::Done(at, out))
    })
    .await
    .map_err(|e| ToolError::Failed(format!("internal error: {e}")))?
}

/// True when the real location of `path` lies inside the session directory or the worktree
/// (see [`Located::inside`]; one trip to the blocking pool).
pub async fn is_inside_project(ctx: &ToolContext, path: &Path) -> bool {
    locate(ctx, path).await.inside
}

/// The permission pattern for `path`: its real location relative to the real worktree
/// (see [`Located::rel`]; one trip to the blocking pool).
pub async fn worktree_relative(ctx: &ToolContext, path: &Path) -> String {
    locate(ctx, path).await.rel
}

/// If `target` resolves outside the project, ask `external_directory` (see
/// [`check_external`]); one trip to the blocking pool. Inside the project this is a no-op.
pub async fn assert_external_directory(
    ctx: &ToolContext,
    target: &Path,
    kind: PathKind,
) -> Result<(), ToolError> {
    check_external(ctx, &locate(ctx, target).await, kind).await
}

/// If the located path lies outside the project, ask `external_directory` with pattern
/// `<dir>/*` (dir = the real path for [`PathKind::Directory`], its parent for a file), with
/// metadata `{filepath, parentDir}`. Inside the project this is a no-op; no file-system call.
pub async fn check_external(
    ctx: &ToolContext,
    at: &Located,
    kind: PathKind,
) -> Result<(), ToolError> {
    if at.inside {
        return Ok(());
    }
    let real = &at.real;
    let dir = match kind {
        PathKind::Directory => real.clone(),
        PathKind::File => real
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| real.clone()),
    };
    let glob = external_glob(&dir);
    ask(
        ctx,
        "external_directory",
        vec![glob.clone()],
        vec![glob],
        json!({"filepath": real.to_string_lossy(), "parentDir": dir.to_string_lossy()}),
    )
    .await
}

/// `<dir>/*` with `/` separators (`/*` for the root).
pub fn external_glob(dir: &Path) -> String {
    let d = dir.to_string_lossy().replace('\\', "/");
    let d = d.trim_end_matches('/');
    format!("{d}/*")
}

/// Errors unless `dir` is an existing directory ([`ToolError::Failed`]): `"{not_a_directory}:
/// {dir}"` when it is another kind of file, `"Directory not found: {dir}"` when it is missing
/// or cannot be read. Blocking (one `stat`): call it inside the tool's trip to the pool.
pub fn require_directory(dir: &Path, not_a_directory: &str) -> Result<(), ToolError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(ToolError::Failed(format!(
            "{not_a_directory}: {}",
            dir.display()
        ))),
        Err(_) => Err(ToolError::Failed(format!(
            "Directory not found: {}",
            dir.display()
        ))),
    }
}

/// What a non-regular, non-directory file is ("a FIFO (named pipe)", "a socket", …), or
/// `None` for a regular file or a directory.
pub fn special_kind(ft: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_file() || ft.is_dir() {
        None
    } else if ft.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if ft.is_socket() {
        Some("a socket")
    } else if ft.is_char_device() {
        Some("a character device")
    } else if ft.is_block_device() {
        Some("a block device")
    } else {
        Some("not a regular file")
    }
}

/// The error for a tool asked to `verb` ("read", "write", "edit") a special file: opening a
/// FIFO, socket or device can block forever or never end (issue 24.4), so the file tools
/// refuse them. `Failed("Cannot read /p/f: it is a FIFO (named pipe), not a regular file…")`.
pub fn special_file_error(verb: &str, shown: &str, kind: &str) -> ToolError {
    ToolError::Failed(format!(
        "Cannot {verb} {shown}: it is {kind}, not a regular file. The {verb} tool only works on \
         regular files (reading or writing a pipe, socket or device can block forever); use bash \
         with a timeout if you really need it."
    ))
}

/// Open `path` for reading without ever blocking on a FIFO or device (`O_NONBLOCK`), then
/// check on the open descriptor that it is a regular file (closing the race between a
/// `stat` and the `open`). Errors name the file: `Cannot read <shown>: …`. Blocking: call it
/// inside the tool's trip to the pool.
pub fn open_regular(path: &Path, verb: &str, shown: &str) -> Result<std::fs::File, ToolError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| ToolError::Failed(format!("Cannot {verb} file {shown}: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| ToolError::Failed(format!("Cannot {verb} file {shown}: {e}")))?;
    if let Some(kind) = special_kind(meta.file_type()) {
        return Err(special_file_error(verb, shown, kind));
    }
    Ok(file)
}

/// Read all of a regular file (see [`open_regular`]); blocking.
pub fn read_regular_blocking(path: &Path, verb: &str, shown: &str) -> Result<Vec<u8>, ToolError> {
    use std::io::Read;
    let mut file = open_regular(path, verb, shown)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| ToolError::Failed(format!("Cannot {verb} file {shown}: {e}")))?;
    Ok(bytes)
}

/// [`read_regular_blocking`] in one trip to the blocking pool.
pub async fn read_regular(path: &Path, verb: &str, shown: &str) -> Result<Vec<u8>, ToolError> {
    let (p, v, s) = (path.to_path_buf(), verb.to_string(), shown.to_string());
    crate::builtin::blocking(move || read_regular_blocking(&p, &v, &s)).await?
}

/// Create or replace the content of `path` with `bytes`, refusing (before truncating
/// anything) a path that turns out to be a FIFO, socket or device: the open is
/// non-blocking and the type is checked on the open descriptor. Blocking: call it inside
/// the tool's trip to the pool.
pub fn write_regular(path: &Path, verb: &str, shown: &str, bytes: &[u8]) -> Result<(), ToolError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |e: std::io::Error| ToolError::Failed(format!("Cannot write file {shown}: {e}"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        // Truncated after the type check below (set_len), never a device at open.
        .truncate(false)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // A FIFO without a reader refuses a non-blocking open for writing.
            Some(libc::ENXIO) => special_file_error(verb, shown, "a FIFO (named pipe)"),
            _ => fail(e),
        })?;
    let meta = file.metadata().map_err(fail)?;
    if let Some(kind) = special_kind(meta.file_type()) {
        return Err(special_file_error(verb, shown, kind));
    }
    file.set_len(0).map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.flush().map_err(fail)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod test_support {
    /// Create a FIFO at `path` (with the `mkfifo` command: no unsafe code in tests).
    pub fn mkfifo(path: &std::path::Path) {
        let st = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(st.success(), "mkfifo {}", path.display());
    }

    use std::sync::{Arc, Mutex};

    use futures::future::BoxFuture;

    use crate::{PermissionAsker, PermissionReply, PermissionRequest};

    /// Records every request; denies the permissions listed in `deny`. With `gated`, it also
    /// has a gate ([`PermissionAsker::gate`]) allowing every permission not in `deny`, as a
    /// turn whose rules allow them would: then the tools ask only what the gate leaves open.
    #[derive(Default)]
    pub struct Recorder {
        pub seen: Mutex<Vec<PermissionRequest>>,
        pub deny: Vec<String>,
        pub gated: bool,
    }

    /// The gate of a gated [`Recorder`]: everything but its `deny` list.
    struct AllBut(Vec<String>);

    impl crate::RuleGate for AllBut {
        fn allows(&self, permission: &str, _patterns: &[String]) -> bool {
            !self.0.iter().any(|d| d == permission)
        }
    }

    impl Recorder {
        pub fn new() -> Arc<Self> {
            Arc::new(Self::default())
        }
        /// A [`ToolContext::simple`] context for `dir` whose permission requests a new
        /// recorder records (and allows), with that recorder.
        pub fn context(dir: &std::path::Path) -> (crate::ToolContext, Arc<Self>) {
            let rec = Self::new();
            let mut ctx = crate::ToolContext::simple(dir);
            ctx.permissions = rec.clone();
            (ctx, rec)
        }
        pub fn denying(perm: &str) -> Arc<Self> {
            Arc::new(Self {
                seen: Mutex::new(Vec::new()),
                deny: vec![perm.to_string()],
                gated: false,
            })
        }
        /// A gated recorder (see [`Recorder`]) denying the permissions in `deny`.
        pub fn gated(deny: &[&str]) -> Arc<Self> {
            Arc::new(Self {
                seen: Mutex::new(Vec::new()),
                deny: deny.iter().map(|d| d.to_string()).collect(),
                gated: true,
            })
        }
        pub fn requests(&self) -> Vec<PermissionRequest> {
            self.seen.lock().map(|g| g.clone()).unwrap_or_default()
        }
        pub fn permissions(&self) -> Vec<String> {
            self.requests().into_iter().map(|r| r.permission).collect()
        }
    }

    impl PermissionAsker for Recorder {
        fn ask(&self, req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
            let deny = self.deny.contains(&req.permission);
            let perm = req.permission.clone();
            if let Ok(mut g) = self.seen.lock() {
                g.push(req);
            }
            Box::pin(async move {
                if deny {
                    PermissionReply::Deny(format!("denied {perm}"))
                } else {
                    PermissionReply::Allow
                }
            })
        }

        fn allowed(
            &self,
            permission: &str,
            patterns: Vec<String>,
        ) -> BoxFuture<'static, Vec<bool>> {
            let allow = !self.deny.iter().any(|d| d == permission);
            let n = patterns.len();
            Box::pin(async move { vec![allow; n] })
        }

        fn gate(&self) -> BoxFuture<'static, Option<Arc<dyn crate::RuleGate>>> {
            let gate = self
                .gated
                .then(|| Arc::new(AllBut(self.deny.clone())) as Arc<dyn crate::RuleGate>);
            Box::pin(async move { gate })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::Recorder;
    use super::*;

    #[test]
    fn relative_and_normalize() {
        assert_eq!(
            relative_path(Path::new("/a/b"), Path::new("/a/b/c/d")),
            "c/d"
        );
        assert_eq!(
            relative_path(Path::new("/a/b"), Path::new("/etc/passwd")),
            "../../etc/passwd"
        );
        assert_eq!(relative_path(Path::new("/a/b"), Path::new("/a/b")), "");
        assert_eq!(
            normalize(Path::new("/a/b/../../etc/./x")),
            PathBuf::from("/etc/x")
        );
        assert_eq!(external_glob(Path::new("/")), "/*");
    }

    #[test]
    fn tilde_is_home_and_other_users_are_refused() {
        let dir = Path::new("/work/proj");
        let home = Some(Path::new("/home/u"));
        let ok = |p: &str| resolve_in(dir, p, home).unwrap();
        assert_eq!(ok("~"), PathBuf::from("/home/u"));
        assert_eq!(ok("~/"), PathBuf::from("/home/u/"));
        assert_eq!(ok("~/x/new.txt"), PathBuf::from("/home/u/x/new.txt"));
        assert_eq!(ok("~//etc/passwd"), PathBuf::from("/home/u/etc/passwd"));
        assert_eq!(ok("a/~/b"), PathBuf::from("/work/proj/a/~/b"));
        assert_eq!(ok("./~x"), PathBuf::from("/work/proj/./~x"));
        assert_eq!(ok("/abs/~"), PathBuf::from("/abs/~"));
        for p in ["~root/.ssh/id_rsa", "~bob", "~x.txt"] {
            let e = resolve_in(dir, p, home).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("Cannot resolve the path {p}: `~")),
                "{e}"
            );
            assert!(e.contains("do not look up"), "{e}");
        }
        for h in [None, Some(Path::new("relative/home"))] {
            let e = resolve_in(dir, "~/x", h).unwrap_err().to_string();
            assert!(e.contains("the home directory is unknown"), "{e}");
        }
    }

    proptest::proptest! {
        /// A `~`-prefixed path never lands inside the project unless home is inside it: it is
        /// home itself or under it (no `..` generated), and it is refused rather than joined
        /// to the working directory when home is unknown or for `~user`.
        #[test]
        fn tilde_paths_stay_under_home(
            segs in proptest::collection::vec("[a-z~._-]{0,6}", 0..5),
            home_inside in proptest::bool::ANY,
            user in "[a-z][a-z0-9._-]{0,8}",
        ) {
            let dir = Path::new("/work/proj");
            let home = if home_inside { PathBuf::from("/work/proj/h") } else { PathBuf::from("/home/u") };
            let segs: Vec<&str> = segs.iter().map(String::as_str).filter(|s| *s != "..").collect();
            let rest = segs.join("/");
            for p in [format!("~/{rest}"), format!("~//{rest}"), "~".to_string()] {
                let got = normalize(&resolve_in(dir, &p, Some(&home)).unwrap());
                proptest::prop_assert!(got.starts_with(&home), "{p} -> {got:?}");
                proptest::prop_assert_eq!(got.starts_with(dir), home_inside, "{} -> {:?}", p, got);
                proptest::prop_assert!(resolve_in(dir, &p, None).is_err());
            }
            let other = format!("~{user}/{rest}");
            proptest::prop_assert!(resolve_in(dir, &other, Some(&home)).is_err());
        }
    }

    /// Trial on main: `write {filePath: "~/x/new.txt"}` created a directory named `~` in the
    /// project unasked. `~` is now home, outside the project: `external_directory` is asked
    /// (denied here, so nothing is written anywhere) and no `~` appears in the project.
    #[tokio::test]
    async fn tilde_write_asks_external_and_creates_no_tilde_dir() {
        use crate::Tool;
        let proj = tempfile::tempdir().unwrap();
        let Some(home) = dirs::home_dir() else {
            return;
        };
        if proj.path().starts_with(&home) {
            return; // home contains the temporary directory: `~` could be inside it.
        }
        let rec = Recorder::denying("external_directory");
        let mut ctx = ToolContext::simple(proj.path());
        ctx.permissions = rec.clone();
        let name = "troupe-tilde-test-never-created";
        let err = crate::builtin::write::WriteTool
            .execute(
                json!({"filePath": format!("~/{name}/new.txt"), "content": "x"}),
                ctx.clone(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::PermissionDenied(_)), "{err}");
        assert!(!proj.path().join("~").exists());
        assert!(!home.join(name).exists());
        let req = &rec.requests()[0];
        assert_eq!(req.permission, "external_directory");
        let real_home = std::fs::canonicalize(&home).unwrap_or(home.clone());
        assert_eq!(req.patterns, vec![external_glob(&real_home.join(name))]);
        // read looks in home too, not in `proj/~`.
        let err = crate::builtin::read::ReadTool
            .execute(json!({"filePath": format!("~/{name}/x.txt")}), ctx.clone())
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::PermissionDenied(_)), "{err}");
        let err = crate::builtin::read::ReadTool
            .execute(json!({"filePath": "~root/.ssh/id_rsa"}), ctx)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("do not look up"), "{err}");
    }

    /// Every field of [`locate_blocking`] on links, `..` after a link, missing tails and the
    /// project root, against the kernel's answer (`canonicalize`, `metadata`).
    #[test]
    fn locate_reads_where_a_path_really_is() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(d.path()).unwrap();
        let proj = base.join("proj");
        std::fs::create_dir_all(proj.join("sub")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(proj.join("a.txt"), "a").unwrap();
        std::fs::write(base.join("outside/secret"), "s").unwrap();
        symlink(base.join("outside"), proj.join("outlink")).unwrap();
        symlink(proj.join("sub"), proj.join("dirlink")).unwrap();
        // Dangling links: to a new file outside, to one inside, through a chain, in a loop.
        symlink(base.join("outside/new.txt"), proj.join("dangle")).unwrap();
        symlink("../outside/d2/x", proj.join("dangle_rel")).unwrap();
        symlink("sub/fresh", proj.join("dangle_in")).unwrap();
        symlink("dangle", proj.join("chain")).unwrap();
        symlink("loop_b", proj.join("loop_a")).unwrap();
        symlink("loop_a", proj.join("loop_b")).unwrap();
        use PathKind::{Directory as D, File as F};
        let cases: [(&str, bool, &str, PathKind); 19] = [
            ("a.txt", true, "a.txt", F),
            ("sub", true, "sub", D),
            ("", true, ".", D),
            ("missing/new.txt", true, "missing/new.txt", F),
            ("outlink/secret", false, "../outside/secret", F),
            ("outlink", false, "../outside", D),
            ("outlink/../a.txt", false, "../a.txt", F),
            ("dirlink/../a.txt", true, "a.txt", F),
            ("dirlink/new/x", true, "sub/new/x", F),
            ("../outside/new", false, "../outside/new", F),
            ("outlink/new/../secret", false, "../outside/secret", F),
            // `..` after a missing name: the kind is the real location's.
            ("outlink/missing/..", false, "../outside", D),
            ("sub/missing/..", true, "sub", D),
            ("dangle", false, "../outside/new.txt", F),
            ("dangle_rel", false, "../outside/d2/x", F),
            ("dangle_in", true, "sub/fresh", F),
            ("chain", false, "../outside/new.txt", F),
            ("dangle/more", false, "../outside/new.txt/more", F),
            ("loop_a", true, "loop_a", F),
        ];
        for (p, inside, rel, kind) in cases {
            let path = proj.join(p);
            let at = locate_blocking(&proj, &proj, &path);
            assert_eq!(
                (at.inside, at.rel.as_str(), at.kind),
                (inside, rel, kind),
                "{p}"
            );
            let real = if rel == "." {
                proj.clone()
            } else {
                normalize(&proj.join(rel))
            };
            assert_eq!(at.real, real, "{p}");
            if let Ok(c) = std::fs::canonicalize(&path) {
                assert_eq!(at.real, c, "{p}");
            }
        }
        // The session directory counts as inside even when the worktree is elsewhere; a
        // worktree of `/` does not make everything inside.
        let at = locate_blocking(&proj.join("sub"), Path::new("/"), &proj.join("sub/x"));
        assert!(at.inside);
        assert_eq!(at.rel, proj.join("sub/x").to_string_lossy()[1..]);
        let at = locate_blocking(&proj.join("sub"), Path::new("/"), &proj.join("a.txt"));
        assert!(!at.inside);
    }

    /// Review find: a dangling link in the project to a new file outside let `write` (and
    /// `edit` creating a file, and a bash redirection) create it with only `edit` asked. The
    /// link is now followed to where the write lands: `external_directory` is asked there.
    #[tokio::test]
    async fn writing_through_a_dangling_link_asks_where_it_lands() {
        use crate::Tool;
        let d = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(d.path()).unwrap();
        let proj = base.join("proj");
        std::fs::create_dir_all(&proj).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::os::unix::fs::symlink(base.join("outside/new.txt"), proj.join("dangle")).unwrap();
        let rec = Recorder::denying("external_directory");
        let mut ctx = ToolContext::simple(&proj);
        ctx.permissions = rec.clone();
        let write = crate::builtin::write::WriteTool
            .execute(json!({"filePath": "dangle", "content": "x"}), ctx.clone())
            .await;
        let edit = crate::builtin::edit::EditTool
            .execute(
                json!({"filePath": "dangle", "oldString": "", "newString": "x"}),
                ctx.clone(),
            )
            .await;
        let bash =
            crate::builtin::bash_permission::check(&ctx, "echo x > dangle", &proj, "t").await;
        for r in [write.map(|_| ()), edit.map(|_| ()), bash] {
            assert!(matches!(r, Err(ToolError::PermissionDenied(_))), "{r:?}");
        }
        assert!(!base.join("outside/new.txt").exists());
        let reqs = rec.requests();
        assert_eq!(reqs[0].permission, "external_directory");
        assert_eq!(reqs[0].patterns, vec![external_glob(&base.join("outside"))]);
    }

    #[tokio::test]
    async fn dotdot_escape_asks_external() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proj");
        std::fs::create_dir(&root).unwrap();
        let (ctx, rec) = Recorder::context(&root);
        let target = ctx.resolve("../../etc/passwd").unwrap();
        assert!(!is_inside_project(&ctx, &target).await);
        assert_external_directory(&ctx, &target, PathKind::File)
            .await
            .unwrap();
        let reqs = rec.requests();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].permission, "external_directory");
        let expected_dir = real_path(&normalize(&root.join("../../etc"))).await;
        assert_eq!(reqs[0].patterns, vec![external_glob(&expected_dir)]);
    }

    #[tokio::test]
    async fn symlink_pointing_outside_is_external() {
        let outside = tempfile::tempdir().unwrap();
        let proj = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), proj.path().join("link")).unwrap();
        let rec = Recorder::denying("external_directory");
        let mut ctx = ToolContext::simple(proj.path());
        ctx.permissions = rec.clone();
        let target = ctx.resolve("link/secret.txt").unwrap();
        let err = assert_external_directory(&ctx, &target, PathKind::File)
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::PermissionDenied(_)));
        let real_outside = std::fs::canonicalize(outside.path()).unwrap();
        assert_eq!(
            rec.requests()[0].patterns,
            vec![external_glob(&real_outside)]
        );
        // A file really inside is not external.
        std::fs::write(proj.path().join("in.txt"), "x").unwrap();
        assert!(is_inside_project(&ctx, &ctx.resolve("in.txt").unwrap()).await);
        assert!(is_inside_project(&ctx, &ctx.resolve("new/dir/file.txt").unwrap()).await);
    }
}
