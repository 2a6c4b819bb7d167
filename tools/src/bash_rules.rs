//! Tables and small scanners behind [`crate::bash_command`]'s fail-closed analysis (issue 11):
//! which wrappers run the command after their options, which environment variables make a
//! program run code or read other configuration, which interpreters take inline code, and
//! what inside a `sed` or `awk` program writes files or runs commands.
//!
//! Sources: the man pages of the listed programs (options taking a value), bash(1)
//! ("INVOCATION", "Shell Variables", "ARITHMETIC EVALUATION"), git(1) ("ENVIRONMENT
//! VARIABLES"), ld.so(8), GNU sed "Commands" and GNU awk "I/O Statements".

/// A command that runs another command given by its remaining words.
pub(crate) struct WrapperSpec {
    /// The wrapper's file name.
    pub name: &'static str,
    /// Short options (letters) that take a value, attached (`-uroot`) or as the next word.
    pub short_values: &'static str,
    /// Long options that take the next word as their value (`--user root`); `--opt=value`
    /// never takes the next word.
    pub long_values: &'static [&'static str],
    /// Words after the options that are not the command (`timeout 5`, `taskset 0x3`,
    /// `chroot DIR`, `flock FILE`).
    pub positional: usize,
    /// Short option letters whose value is a shell script (`flock -c`, `runuser -c`).
    pub script_short: &'static str,
    /// Long options whose value is a shell script.
    pub script_long: &'static [&'static str],
}

const fn w(
    name: &'static str,
    short_values: &'static str,
    long_values: &'static [&'static str],
    positional: usize,
) -> WrapperSpec {
    WrapperSpec {
        name,
        short_values,
        long_values,
        positional,
        script_short: "",
        script_long: &[],
    }
}

/// Wrappers skipped to find the command they run (`sudo -u root rm x` → `rm x`).
pub(crate) const WRAPPERS: &[WrapperSpec] = &[
    w(
        "sudo",
        "ughpCDrtUTR",
        &[
            "--user",
            "--group",
            "--host",
            "--prompt",
            "--chdir",
            "--role",
            "--type",
            "--other-user",
            "--close-from",
            "--command-timeout",
            "--chroot",
        ],
        0,
    ),
    w("doas", "uC", &[], 0),
    w("env", "uCS", &["--unset", "--chdir", "--split-string"], 0),
    w("nohup", "", &[], 0),
    w("time", "fo", &["--format", "--output"], 0),
    w("command", "", &[], 0),
    w("exec", "a", &[], 0),
    w("builtin", "", &[], 0),
    w("nice", "n", &["--adjustment"], 0),
    w(
        "ionice",
        "cnpPu",
        &["--class", "--classdata", "--pid", "--pgid", "--uid"],
        0,
    ),
    w("setsid", "", &[], 0),
    w("stdbuf", "ioe", &["--input", "--output", "--error"], 0),
    w("unbuffer", "", &[], 0),
    w("chronic", "", &[], 0),
    w("coproc", "", &[], 0),
    w("caffeinate", "tw", &[], 0),
    w(
        "xargs",
        "adEILnPs",
        &[
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-lines",
            "--max-procs",
            "--max-chars",
            "--eof",
            "--process-slot-var",
        ],
        0,
    ),
    w("timeout", "sk", &["--signal", "--kill-after"], 1),
    w("taskset", "", &[], 1),
    w(
        "chrt",
        "T",
        &["--sched-runtime", "--sched-period", "--sched-deadline"],
        1,
    ),
    WrapperSpec {
        script_short: "c",
        script_long: &["--command"],
        ..w(
            "flock",
            "wEzn",
            &["--timeout", "--conflict-exit-code", "--wait"],
            1,
        )
    },
    w(
        "unshare",
        "SGRw",
        &["--setuid", "--setgid", "--root", "--wd"],
        0,
    ),
    w("chroot", "", &["--userspec", "--groups"], 1),
    w(
        "nsenter",
        "tSGe",
        &["--target", "--setuid", "--setgid", "--env"],
        0,
    ),
    w("firejail", "", &[], 0),
    w(
        "systemd-run",
        "pEuMHs",
        &[
            "--property",
            "--setenv",
            "--unit",
            "--machine",
            "--host",
            "--uid",
            "--gid",
            "--nice",
            "--working-directory",
            "--slice",
            "--description",
            "--service-type",
            "--on-active",
            "--on-boot",
            "--on-startup",
            "--on-unit-active",
            "--on-unit-inactive",
            "--on-calendar",
            "--on-timer-change",
            "--on-clock-change",
            "--timer-property",
            "--path-property",
            "--socket-property",
            "--expand-environment",
        ],
        0,
    ),
    WrapperSpec {
        script_short: "c",
        script_long: &["--command"],
        ..w(
            "runuser",
            "ugGcsw",
            &[
                "--user",
                "--group",
                "--supp-group",
                "--shell",
                "--whitelist-environment",
            ],
            0,
        )
    },
    w("busybox", "", &[], 0),
    w("pkexec", "", &["--user"], 0),
    w("fakeroot", "lsi", &["--lib", "--faked"], 0),
    w("strace", "oepsuEbIXPaS", &[], 0),
    w("ltrace", "oenpsuEAaLS", &[], 0),
    w("catchsegv", "", &[], 0),
    w("nocache", "n", &[], 0),
    w(
        "torsocks",
        "uapPi",
        &["--user", "--pass", "--address", "--port"],
        0,
    ),
    w("proxychains", "f", &[], 0),
    w("proxychains4", "f", &[], 0),
    w(
        "xvfb-run",
        "nsfepw",
        &[
            "--server-num",
            "--server-args",
            "--auth-file",
            "--error-file",
            "--xauth-protocol",
            "--wait",
        ],
        0,
    ),
    w("dbus-run-session", "", &[], 0),
    w("tini", "pe", &[], 0),
    w("dumb-init", "r", &["--rewrite"], 0),
    w("chpst", "uUbenlLmdofpcr", &[], 0),
    w("sg", "", &[], 1),
    // Runners of another program: `valgrind --tool=x CMD`, `npx [-p PKG] CMD` (`-c SCRIPT`).
    w("valgrind", "", &[], 0),
    WrapperSpec {
        script_short: "c",
        script_long: &["--call"],
        ..w("npx", "p", &["--package"], 0)
    },
    w("bunx", "p", &["--package"], 0),
    // Privilege, limit, scheduling and memory-policy wrappers (util-linux, numactl, …).
    w(
        "setpriv",
        "",
        &[
            "--reuid",
            "--regid",
            "--ruid",
            "--euid",
            "--rgid",
            "--egid",
            "--groups",
            "--inh-caps",
            "--ambient-caps",
            "--bounding-set",
            "--securebits",
            "--pdeathsig",
            "--selinux-label",
            "--apparmor-profile",
            "--landlock-access",
            "--landlock-rule",
        ],
        0,
    ),
    // `prlimit --nofile=1024 CMD`: resource options take their value attached only.
    w("prlimit", "po", &["--pid", "--output"], 0),
    w(
        "numactl",
        "ipmNCPw",
        &[
            "--interleave",
            "--preferred",
            "--preferred-many",
            "--membind",
            "--cpunodebind",
            "--physcpubind",
            "--weighted-interleave",
        ],
        0,
    ),
    w(
        "cpulimit",
        "lpecs",
        &["--limit", "--pid", "--exe", "--cpu", "--signal"],
        0,
    ),
    w("trickle", "wtlnduLP", &[], 0),
    w("eatmydata", "", &[], 0),
    w("faketime", "p", &["--date-prog"], 1),
    w("dbus-launch", "", &[], 0),
    w("ssh-agent", "aEPtO", &[], 0),
    w("setarch", "", &[], 1),
    w("linux32", "", &[], 0),
    w("linux64", "", &[], 0),
    w("sshpass", "fdpP", &[], 0),
    w(
        "systemd-inhibit",
        "",
        &["--what", "--who", "--why", "--mode"],
        0,
    ),
    w("cgexec", "g", &[], 0),
    w("aa-exec", "pn", &["--profile", "--namespace"], 0),
    w("sandbox-exec", "fnpD", &[], 0),
    w("rlwrap", "bCDefFgHlOpPqmMSstwz", &[], 0),
];

/// Programs that look like a wrapper from their first word but run their second word's
/// command: `uv run CMD`, `poetry run CMD`, `bundle exec CMD` (`(program, subcommand)`).
pub(crate) const SUBCOMMAND_WRAPPERS: &[(&str, &str)] = &[
    ("uv", "run"),
    ("poetry", "run"),
    ("pipenv", "run"),
    ("pdm", "run"),
    ("hatch", "run"),
    ("bundle", "exec"),
    ("mise", "exec"),
    ("mise", "x"),
    ("asdf", "exec"),
    ("direnv", "exec"),
    ("npm", "exec"),
    ("pnpm", "exec"),
    ("pnpm", "dlx"),
    ("yarn", "dlx"),
    ("yarn", "exec"),
    ("bun", "x"),
];

/// Interpreters and the options whose value is inline code (`python -c CODE`,
/// `node -e CODE`). Each runs its program from stdin when given neither inline code nor a
/// script file.
pub(crate) const INTERPRETERS: &[(&str, &[&str])] = &[
    ("python", &["-c"]),
    ("python2", &["-c"]),
    ("python3", &["-c"]),
    ("pypy", &["-c"]),
    ("pypy3", &["-c"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("node", &["-e", "-p", "--eval", "--print"]),
    ("nodejs", &["-e", "-p", "--eval", "--print"]),
    ("bun", &["-e", "-p", "--eval", "--print"]),
    ("deno", &["eval"]),
    ("php", &["-r", "-B", "-R", "-E"]),
    ("lua", &["-e"]),
    ("luajit", &["-e"]),
    ("Rscript", &["-e"]),
    ("julia", &["-e", "-E", "--eval", "--print"]),
    ("osascript", &["-e"]),
    (
        "pwsh",
        &[
            "-c",
            "-command",
            "-Command",
            "-encodedcommand",
            "-EncodedCommand",
        ],
    ),
    ("powershell", &["-c", "-command", "-Command"]),
    ("tclsh", &[]),
    ("wish", &[]),
    ("expect", &["-c"]),
    ("guile", &["-c", "-e"]),
    ("racket", &["-e"]),
    ("sbcl", &["--eval"]),
    ("groovy", &["-e"]),
    ("scala", &["-e"]),
    ("jshell", &[]),
    ("irb", &[]),
    ("gdb", &["-ex", "--eval-command"]),
    ("fish", &["-c", "--command", "-C", "--init-command"]),
    ("tcsh", &["-c"]),
    ("csh", &["-c"]),
    ("nu", &["-c", "--commands"]),
    ("xonsh", &["-c"]),
    ("elvish", &["-c"]),
];

/// Whether `name` (a file name) is an interpreter of [`INTERPRETERS`], including versioned
/// names (`python3.12`).
pub(crate) fn interpreter(name: &str) -> Option<&'static [&'static str]> {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS
        .iter()
        .find(|(n, _)| *n == name || *n == base)
        .map(|(_, opts)| *opts)
}

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
    "LESS",
    "LESSOPEN",
    "LESSCLOSE",
    "LESSKEY",
    "SSH_ASKPASS",
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
const RISKY_PREFIXES: &[&str] = &[
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

/// What a `sed` program does besides editing its stream: `Some(reason)` when a command or
/// flag writes a file (`w`, `W`, `s///w`), reads one (`r`, `R`) or runs a command (`e`,
/// `s///e`). Scans the GNU sed grammar loosely and errs towards reporting.
pub(crate) fn sed_risk(script: &str) -> Option<&'static str> {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0usize;
    let n = chars.len();
    let skip_ws = |i: &mut usize| {
        while *i < n && (chars[*i].is_whitespace() || chars[*i] == ';') {
            *i += 1;
        }
    };
    while i < n {
        skip_ws(&mut i);
        if i >= n {
            break;
        }
        // Address: numbers, `$`, `/re/`, `\cREc`, `first~step`, `addr1,addr2`, `!`.
        loop {
            if i >= n {
                break;
            }
            let c = chars[i];
            if c.is_ascii_digit() || matches!(c, '$' | ',' | '~' | '+' | '!' | ' ' | '\t') {
                i += 1;
            } else if c == '/' || c == '\\' {
                let delim = if c == '\\' {
                    i += 1;
                    match chars.get(i) {
                        Some(&d) => d,
                        None => break,
                    }
                } else {
                    '/'
                };
                i += 1;
                while i < n && chars[i] != delim {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                // Address flags `I` and `M`.
                while i < n && matches!(chars[i], 'I' | 'M') {
                    i += 1;
                }
            } else {
                break;
            }
        }
        if i >= n {
            break;
        }
        let cmd = chars[i];
        i += 1;
        match cmd {
            'w' | 'W' => return Some("writes a file (`w`)"),
            'r' | 'R' => return Some("reads a file (`r`)"),
            'e' => return Some("runs a command (`e`)"),
            's' | 'y' => {
                let Some(&delim) = chars.get(i) else { break };
                if delim == '\n' || delim == '\\' {
                    return Some("uses an unusual delimiter");
                }
                i += 1;
                for _ in 0..2 {
                    while i < n && chars[i] != delim {
                        if chars[i] == '\\' {
                            i += 1;
                        }
                        i += 1;
                    }
                    i += 1;
                }
                if cmd == 's' {
                    while i < n && !matches!(chars[i], ';' | '\n' | '}') {
                        match chars[i] {
                            'w' | 'W' => return Some("writes a file (`s///w`)"),
                            'e' => return Some("runs a command (`s///e`)"),
                            'r' | 'R' => return Some("reads a file"),
                            _ => {}
                        }
                        i += 1;
                    }
                }
            }
            'a' | 'i' | 'c' => {
                // Text to the end of the line (one-liner GNU form).
                while i < n && chars[i] != '\n' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            ':' | 'b' | 't' | 'T' => {
                while i < n && !matches!(chars[i], ';' | '\n') {
                    i += 1;
                }
            }
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'l' | 'n' | 'N' | 'p' | 'P'
            | 'q' | 'Q' | 'x' | 'z' | 'F' | '#' => {
                if cmd == '#' {
                    while i < n && chars[i] != '\n' {
                        i += 1;
                    }
                } else if matches!(cmd, 'q' | 'Q' | 'l' | 'L') {
                    while i < n && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            _ => return Some("uses a command troupe does not know"),
        }
    }
    None
}

/// What an `awk` program does besides printing: `Some(reason)` when it runs a command
/// (`system(…)`, a pipe into or out of a command) or writes a file (`print > "f"`). Errs
/// towards reporting: a `>` after `print`/`printf` in the same statement counts.
pub(crate) fn awk_risk(program: &str) -> Option<&'static str> {
    if program.contains("system") {
        return Some("runs a command (`system`)");
    }
    if program.replace("||", "").contains('|') {
        return Some("pipes into or out of a command");
    }
    if program.contains("getline") && program.contains('<') {
        return Some("reads a file (`getline <`)");
    }
    if program.contains("@load") || program.contains("@include") {
        return Some("loads an extension");
    }
    for stmt in program.split([';', '\n', '{', '}']) {
        if let Some(at) = stmt.find("print")
            && stmt[at..].contains('>')
        {
            return Some("writes a file (`print >`)");
        }
    }
    None
}

/// Brace expansion of a word's literal value (`{a,b}c` → `ac bc`, `{1..3}`), or `None`
/// when it would give more than 64 words or the braces are not an expansion.
pub(crate) fn expand_braces(s: &str) -> Option<Vec<String>> {
    let mut out = vec![s.to_string()];
    for _ in 0..8 {
        let mut next = Vec::new();
        let mut changed = false;
        for item in &out {
            match expand_one(item)? {
                Some(v) => {
                    changed = true;
                    next.extend(v);
                }
                None => next.push(item.clone()),
            }
            if next.len() > 64 {
                return None;
            }
        }
        out = next;
        if !changed {
            return Some(out);
        }
    }
    None
}

/// Expand the first brace group of `s`: `Some(None)` when there is none, `None` when it
/// would give too many words.
fn expand_one(s: &str) -> Option<Option<Vec<String>>> {
    expand_group(s).ok()
}

/// [`expand_one`]'s work: `Ok(None)` without a brace group, `Err` for a too large range.
fn expand_group(s: &str) -> Result<Option<Vec<String>>, ()> {
    let chars: Vec<char> = s.chars().collect();
    let Some(open) = chars.iter().position(|&c| c == '{') else {
        return Ok(None);
    };
    let mut depth = 0i32;
    let mut close = None;
    let mut commas = Vec::new();
    for (i, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            ',' if depth == 1 => commas.push(i),
            _ => {}
        }
    }
    let Some(close) = close else { return Ok(None) };
    let pre: String = chars[..open].iter().collect();
    let post: String = chars[close + 1..].iter().collect();
    let body: String = chars[open + 1..close].iter().collect();
    let alts: Vec<String> = if commas.is_empty() {
        let Some((a, b)) = body.split_once("..") else {
            return Ok(None);
        };
        let b = b.split("..").next().unwrap_or(b);
        match (a.parse::<i64>(), b.parse::<i64>()) {
            (Ok(x), Ok(y)) => {
                if (x - y).abs() > 64 {
                    return Err(());
                }
                let (lo, hi) = (x.min(y), x.max(y));
                (lo..=hi).map(|v| v.to_string()).collect()
            }
            _ => {
                let (Some(ca), Some(cb)) = (a.chars().next(), b.chars().next()) else {
                    return Ok(None);
                };
                if a.chars().count() != 1 || b.chars().count() != 1 {
                    return Ok(None);
                }
                let (lo, hi) = (ca.min(cb) as u32, ca.max(cb) as u32);
                if hi - lo > 64 {
                    return Err(());
                }
                (lo..=hi)
                    .filter_map(char::from_u32)
                    .map(|c| c.to_string())
                    .collect()
            }
        }
    } else {
        let mut v = Vec::new();
        let mut start = open + 1;
        for &c in &commas {
            v.push(chars[start..c].iter().collect());
            start = c + 1;
        }
        v.push(chars[start..close].iter().collect());
        v
    };
    Ok(Some(
        alts.into_iter()
            .map(|a| format!("{pre}{a}{post}"))
            .collect(),
    ))
}

#[cfg(test)]
#[path = "bash_rules_tests.rs"]
mod tests;
