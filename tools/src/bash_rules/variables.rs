//! Environment variables that change what a command does: those that make a program run
//! code or read configuration the analysis does not see (`BASH_ENV`, `LD_PRELOAD`,
//! `GIT_SSH_COMMAND`, …), by exact name, prefix and suffix, minus harmless look-alikes; and
//! those that name a directory outside the project (`cat $HOME`).
//!
//! Sources: bash(1) ("INVOCATION", "Shell Variables"), git(1) ("ENVIRONMENT VARIABLES"),
//! ld.so(8), and the man pages of the programs named.

/// Variables a program reads its code, its commands or its configuration from (so setting
/// them makes what a command does unknown): exact names.
const RISKY_VARS: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "PATH",
    "CDPATH",
    "HOME",
    "SHELL",
    "SHELLOPTS",
    "BASHOPTS",
    "POSIXLY_CORRECT",
    "PS4",
    "PROMPT_COMMAND",
    "GLOBIGNORE",
    "BASH_XTRACEFD",
    "EXECIGNORE",
    "FIGNORE",
    "INPUTRC",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "BROWSER",
    "SSH_ASKPASS",
    "SSH_SK_PROVIDER",
    "SUDO_ASKPASS",
    "CC",
    "CXX",
    "CPP",
    "LD",
    "AR",
    "AS",
    "NM",
    "RANLIB",
    "STRIP",
    "OBJCOPY",
    "MAKE",
    "MAKEFLAGS",
    "MFLAGS",
    "GNUMAKEFLAGS",
    "MAKEFILES",
    "RUSTC",
    "RUSTDOC",
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "CARGO",
    "CARGO_ENCODED_RUSTFLAGS",
    "GOFLAGS",
    "CGO_CFLAGS",
    "CGO_LDFLAGS",
    "CFLAGS",
    "CXXFLAGS",
    "LDFLAGS",
    "CPPFLAGS",
    "GCONV_PATH",
    "HOSTALIASES",
    "LOCPATH",
    "NLSPATH",
    "OPENSSL_CONF",
    "OPENSSL_ENGINES",
    "KUBECONFIG",
    "DOCKER_CONFIG",
    "CLASSPATH",
    "TMPDIR",
    "ZDOTDIR",
    "VIMINIT",
    "EXINIT",
    "MYVIMRC",
    "EMACSLOADPATH",
    "WGETRC",
    "CURL_HOME",
    "NETRC",
    "GNUPGHOME",
    "TERMINFO",
    "TERMINFO_DIRS",
    "PROFILE",
    "ENV_FILE",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "PERL5DB",
    "RUBYOPT",
    "RUBYLIB",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "GIT_DIR",
];

/// Prefixes of variables with the same risk (`LD_PRELOAD`, `GIT_SSH_COMMAND`,
/// `BASH_FUNC_f%%`, `npm_config_script_shell`, `PYTHONSTARTUP`, `XDG_CONFIG_HOME`).
///
/// `LESS` covers every variable less reads: `LESS` (options, `-k FILE` among them),
/// `LESSOPEN`/`LESSCLOSE` (commands run on each file: `LESSOPEN='|cmd %s'`), the lesskey
/// files and texts `LESSKEY`, `LESSKEYIN`, `LESSKEY_CONTENT` and their `_SYSTEM` forms,
/// `LESSEDIT` and `LESSGLOBALTAGS` (commands), `LESSHISTFILE` (a file it writes),
/// `LESSMETACHARS`/`LESSMETAESCAPE` (how file names are quoted for the shell) (less(1)
/// "ENVIRONMENT VARIABLES"). `RSYNC_` covers `RSYNC_RSH` and `RSYNC_CONNECT_PROG`, commands
/// rsync runs (rsync(1) "ENVIRONMENT VARIABLES").
const RISKY_PREFIXES: &[&str] = &[
    "LESS",
    "RSYNC_",
    "LD_",
    "DYLD_",
    "BASH_",
    "GIT_",
    "PYTHON",
    "NPM_CONFIG_",
    "YARN_",
    "PNPM_",
    "BUN_",
    "XDG_",
    "CARGO_TARGET_",
    "CARGO_BUILD_",
    "CARGO_HOME",
    "RUSTUP_",
    "PIP_",
    "UV_",
    "POETRY_",
    "CONDA",
    "VIRTUAL_ENV",
    "GEM_",
    "BUNDLE_",
    "GRADLE_",
    "MAVEN_",
    "DOCKER_",
    "AWS_CONFIG",
    "AWS_SHARED",
    "SYSTEMD_",
    "DBUS_",
];

/// Suffixes of variables with the same risk (`FOO_COMMAND`, `X_EDITOR`, `RUSTC_WRAPPER`).
const RISKY_SUFFIXES: &[&str] = &[
    "_COMMAND", "_CMD", "_EDITOR", "_PAGER", "_OPTIONS", "_OPTS", "OPT", "_WRAPPER", "_RUNNER",
    "_LINKER", "_ASKPASS", "_HOOK", "_HOOKS", "_PROGRAM", "_SHELL", "_PRELOAD", "PATH", "_CONFIG",
    "_CONF", "RC", "_HOME", "_EXEC", "_PLUGIN", "_PLUGINS",
];

/// Harmless variables that match a risky pattern above but only change formatting, locale or
/// logging.
const SAFE_VARS: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
    "GIT_TERMINAL_PROMPT",
    "GIT_TRACE",
    "GIT_FLUSH",
    "GIT_OPTIONAL_LOCKS",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONIOENCODING",
    "PYTHONHASHSEED",
    "PYTHONUTF8",
    "PYTHONWARNINGS",
    "PYTHONFAULTHANDLER",
    "PYTHONTRACEMALLOC",
    "PYTHONDEVMODE",
    "NPM_CONFIG_LOGLEVEL",
    "NPM_CONFIG_YES",
    "NPM_CONFIG_FUND",
    "NPM_CONFIG_AUDIT",
    "CARGO_TERM_COLOR",
    "CARGO_TERM_VERBOSE",
    "CARGO_TERM_QUIET",
    "CARGO_TERM_PROGRESS_WHEN",
    "CARGO_INCREMENTAL",
    "CARGO_BUILD_JOBS",
    "UV_NO_PROGRESS",
    "PIP_NO_INPUT",
    "PIP_DISABLE_PIP_VERSION_CHECK",
    "DOCKER_BUILDKIT",
    "SYSTEMD_COLORS",
];

/// Whether setting the variable `name` (on a command, exported, or in the shell) can make a
/// program run code or read configuration the analysis does not see. Plain names that no
/// common program reads (`FOO`, `PORT`, `DATABASE_URL`) are not risky.
pub(crate) fn risky_var(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    if SAFE_VARS.contains(&up.as_str()) {
        return false;
    }
    RISKY_VARS.contains(&up.as_str())
        || RISKY_PREFIXES.iter().any(|p| up.starts_with(p))
        || RISKY_SUFFIXES.iter().any(|s| up.ends_with(s))
        || name.contains('%')
}

/// Environment variables that hold a directory outside the project (used bare as a path,
/// `cat $HOME` reads outside).
pub(crate) fn directory_var(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    matches!(
        up.as_str(),
        "HOME" | "OLDPWD" | "TMPDIR" | "TMP" | "TEMP" | "USERPROFILE" | "SHELL" | "MAIL"
    ) || up.ends_with("DIR")
        || up.ends_with("HOME")
        || up.ends_with("PATH")
        || up.ends_with("FILE")
        || up.ends_with("ROOT")
        || up.ends_with("PREFIX")
        || up.starts_with("XDG_")
}
