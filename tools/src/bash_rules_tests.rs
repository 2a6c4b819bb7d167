use super::*;

#[test]
fn sed_programs_that_write_read_or_run() {
    for s in [
        "s/a/b/",
        "s|a|b|g",
        "1d",
        "/x/d;s/a/b/2",
        "$!N;P;D",
        "y/abc/xyz/",
        "s/a\\/w/b/",
        "/start/,/end/{s/a/b/;p}",
        "10q",
        "s/x/we/g",
    ] {
        assert_eq!(sed_risk(s), None, "{s}");
    }
    for s in [
        "w /tmp/x",
        "s/a/b/w ../out",
        "s/a/b/e",
        "1e rm -rf d",
        "r /etc/passwd",
        "/x/W out",
        "s/a/b/;w f",
        "1!G;h;$!d;e ls",
    ] {
        assert!(sed_risk(s).is_some(), "{s}");
    }
}

#[test]
fn awk_programs_that_run_or_write() {
    for p in [
        "{print $1}",
        "NR>5",
        "$3 > 100 {print}",
        "{ if ($1 > 2) print $1 }",
        "a || b",
    ] {
        assert_eq!(awk_risk(p), None, "{p}");
    }
    for p in [
        "BEGIN{system(\"rm -rf d\")}",
        "{print > \"../x\"}",
        "{print | \"sh\"}",
        "BEGIN{\"id\" | getline x}",
        "{printf \"%s\", $0 >> \"f\"}",
        "BEGIN { while ((getline l < \"/etc/passwd\") > 0) print l }",
    ] {
        assert!(awk_risk(p).is_some(), "{p}");
    }
}

#[test]
fn risky_and_harmless_variables() {
    for v in [
        "BASH_ENV",
        "ENV",
        "BASH_FUNC_x%%",
        "GIT_EXTERNAL_DIFF",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_KEY_0",
        "GIT_SSH_COMMAND",
        "GIT_PAGER",
        "LD_PRELOAD",
        "PAGER",
        "EDITOR",
        "PATH",
        "RUSTC_WRAPPER",
        "PYTHONSTARTUP",
        "NODE_OPTIONS",
        "npm_config_script_shell",
        "XDG_CONFIG_HOME",
        "CDPATH",
        "PS4",
        "PROMPT_COMMAND",
        "LESSOPEN",
        "LESSKEYIN",
        "LESSKEY_CONTENT",
        "LESSGLOBALTAGS",
    ] {
        assert!(risky_var(v), "{v}");
    }
    for v in [
        "FOO",
        "LANG",
        "LC_ALL",
        "TZ",
        "NO_COLOR",
        "RUST_LOG",
        "RUST_BACKTRACE",
        "CI",
        "PORT",
        "NODE_ENV",
        "PYTHONUNBUFFERED",
        "GIT_AUTHOR_NAME",
        "CARGO_TERM_COLOR",
        "DATABASE_URL",
    ] {
        assert!(!risky_var(v), "{v}");
    }
}

#[test]
fn brace_expansion() {
    assert_eq!(
        expand_braces("{..,.}/x").unwrap(),
        vec!["../x".to_string(), "./x".to_string()]
    );
    assert_eq!(expand_braces("a{1..3}").unwrap(), vec!["a1", "a2", "a3"]);
    assert_eq!(
        expand_braces("git {push,pull}").unwrap(),
        vec!["git push", "git pull"]
    );
    assert_eq!(expand_braces("x{a,{b,c}}").unwrap(), vec!["xa", "xb", "xc"]);
    assert_eq!(expand_braces("{x}").unwrap(), vec!["{x}"]);
    assert!(expand_braces("{1..100000}").is_none());
}

#[test]
fn versioned_interpreters() {
    assert!(interpreter("python3.12").is_some());
    assert!(interpreter("perl").is_some());
    assert!(interpreter("ls").is_none());
}
