//! Tables and small scanners behind [`crate::bash_command`]'s fail-closed analysis (issue 11):
//! which wrappers run the command after their options, which environment variables make a
//! program run code or read other configuration, which interpreters take inline code, and
//! what inside a `sed` or `awk` program writes files or runs commands.
//!
//! Sources: the man pages of the listed programs (options taking a value), bash(1)
//! ("INVOCATION", "Shell Variables", "ARITHMETIC EVALUATION"), git(1) ("ENVIRONMENT
//! VARIABLES"), ld.so(8), GNU sed "Commands" and GNU awk "I/O Statements".
//!
//! This file holds the wrappers and interpreters; `variables`, `programs` and `braces` hold
//! the rest.

mod braces;
mod programs;
mod variables;

pub(crate) use braces::expand_braces;
pub(crate) use programs::{awk_risk, sed_risk};
pub(crate) use variables::{directory_var, risky_var};

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
    // sudo's getopt string `+Aa:BbC:c:D:Eeg:Hh::iKklNnPp:R:r:SsT:t:U:u:Vv` (parse_args.c):
    // `-a TYPE` (BSD auth) and `-c CLASS` (login class) take a value where sudo is built
    // with them; `-h` takes the next word as a host when it stands alone.
    w(
        "sudo",
        "ughpCDrtUTRac",
        &[
            "--auth-type",
            "--login-class",
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
    // OpenBSD doas(1): `-a STYLE`, `-C CONFIG`, `-u USER`.
    w("doas", "uCa", &[], 0),
    // systemd's run0(1): `-u`/`-g`/`-D` and the long options taking a value.
    w(
        "run0",
        "ugD",
        &[
            "--user",
            "--group",
            "--chdir",
            "--unit",
            "--property",
            "--description",
            "--slice",
            "--nice",
            "--setenv",
            "--background",
            "--machine",
            "--shell-prompt-prefix",
            "--lightweight",
            "--area",
        ],
        0,
    ),
    // GNU env (coreutils ≥ 9.2 `-a`/`--argv0`) and BSD env (`-P ALTPATH`, `-L`/`-U
    // USER[/CLASS]`): letters that take a value, attached or the next word.
    w(
        "env",
        "uCSaPLU",
        &["--unset", "--chdir", "--split-string", "--argv0"],
        0,
    ),
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
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        ],
        0,
    ),
    w("timeout", "sk", &["--signal", "--kill-after"], 1),
    w("taskset", "", &[], 1),
    w(
        "chrt",
        "TPD",
        &["--sched-runtime", "--sched-period", "--sched-deadline"],
        1,
    ),
    WrapperSpec {
        script_short: "c",
        script_long: &["--command"],
        // `-n` (`--nonblock`) takes no value (flock(1)).
        ..w(
            "flock",
            "wE",
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
    // `-e`/`--env` (util-linux 2.40) takes no value; `-W`/`--wdns` does (nsenter(1)).
    w(
        "nsenter",
        "tSGW",
        &["--target", "--setuid", "--setgid", "--wdns"],
        0,
    ),
    w("firejail", "", &[], 0),
    w(
        "systemd-run",
        "pEuMHsC",
        &[
            "--capsule",
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
    w("toybox", "", &[], 0),
    w("pkexec", "", &["--user"], 0),
    w("fakeroot", "lsi", &["--lib", "--faked"], 0),
    w("strace", "oepsuEbIXPaS", &["--output"], 0),
    w("ltrace", "oenpsuEAaLS", &["--output"], 0),
    w("catchsegv", "", &[], 0),
    w("nocache", "n", &[], 0),
    // `-i` (`--isolate`) takes no value (torsocks(1)).
    w(
        "torsocks",
        "uapP",
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

/// Long options of the wrapper `name` that [`WRAPPERS`] does not list as taking the next word
/// but that the analysis reads by name (`xargs --replace[=R]`, `--eof[=E]`,
/// `--max-lines[=N]`, whose value is only attached), so that their abbreviations resolve to
/// them (GNU getopt_long; xargs(1)).
pub(crate) fn wrapper_other_longs(name: &str) -> &'static [&'static str] {
    match name {
        "xargs" => &["--replace", "--eof", "--max-lines"],
        // sudo's long options without a value (parse_args.c), so that `--login` is not read
        // as an abbreviation of `--login-class` and takes no word.
        "sudo" => &[
            "--background",
            "--preserve-env",
            "--edit",
            "--set-home",
            "--login",
            "--remove-timestamp",
            "--list",
            "--preserve-groups",
            "--shell",
            "--validate",
            "--askpass",
            "--bell",
            "--help",
            "--reset-timestamp",
            "--no-update",
            "--non-interactive",
            "--stdin",
            "--version",
        ],
        _ => &[],
    }
}

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
    // getopt_long_only: `-ex`/`--ex`, `-iex` (before the program loads), any prefix of the
    // long names.
    (
        "gdb",
        &["-ex", "--eval-command", "-iex", "--init-eval-command"],
    ),
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

#[cfg(test)]
#[path = "bash_rules_tests.rs"]
mod tests;
