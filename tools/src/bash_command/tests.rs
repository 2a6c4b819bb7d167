use super::*;

fn pats(cmd: &str) -> Vec<String> {
    analyze(cmd).patterns_with_sources().0
}

fn paths(cmd: &str) -> Vec<String> {
    analyze(cmd)
        .paths
        .iter()
        .map(|p| format!("{}{}", if p.write { "W " } else { "R " }, p.path))
        .collect()
}

#[test]
fn commands_everywhere_in_the_tree() {
    let cases: &[(&str, &[&str])] = &[
        ("cd x && rm -rf y", &["rm -rf y"]),
        ("a || b; c | d\ne", &["a", "b", "c", "d", "e"]),
        ("echo 'a && b' && ls", &["echo a && b", "ls"]),
        ("echo \"x; y\" ; pwd", &["echo x; y", "pwd"]),
        ("ls 2>&1 | grep x", &["ls", "grep x"]),
        ("sleep 30 & sleep 30; wait", &["sleep 30", "wait"]),
        ("(cd a; make) && ls # trailing && comment", &["make", "ls"]),
        ("cat <<EOF > f\nrm -rf /\nEOF\nls", &["cat", "ls"]),
        ("echo a\\;b", &["echo a;b"]),
        ("echo $(rm -rf v1)", &["rm -rf v1", "echo $(rm -rf v1)"]),
        ("echo `rm -rf v2`", &["rm -rf v2", "echo `rm -rf v2`"]),
        (
            "echo \"$(rm -rf v)\"",
            &["rm -rf v", "echo \"$(rm -rf v)\""],
        ),
        ("echo '$(rm -rf v)'", &["echo $(rm -rf v)"]),
        (
            "diff <(rm a) >(rm b) c",
            &["rm a", "rm b", "diff <(rm a) >(rm b) c"],
        ),
        (
            "echo $(echo $(rm x))",
            &["rm x", "echo $(rm x)", "echo $(echo $(rm x))"],
        ),
        ("echo $((1 + $(rm x)))", &["rm x", "echo $((1 + $(rm x)))"]),
        ("{ rm -rf v3; }", &["rm -rf v3"]),
        (
            "if ! ls; then :; elif rm a; then :; else rm b; fi",
            &["ls", ":", "rm a", "rm b"],
        ),
        ("for d in $(rm y); do :; done", &["rm y", ":"]),
        ("while true; do rm z; done < list", &["true", "rm z"]),
        ("until false; do rm z; done", &["false", "rm z"]),
        ("! rm n", &["rm n"]),
        ("function g { rm b; }", &["rm b"]),
        ("case $x in a) rm y;; b|c) ls;; esac", &["rm y", "ls"]),
        ("cat <<EOF\n$(rm h)\nEOF", &["cat", "rm h"]),
        ("FOO=1 rm x", &["rm x"]),
        ("FOO=\"a b\" BAR=2 rm x", &["rm x"]),
        ("command rm x", &["command rm x", "rm x"]),
        ("nohup rm x &", &["nohup rm x", "rm x"]),
        ("env -i FOO=1 rm x", &["env -i FOO=1 rm x", "rm x"]),
        ("ls | xargs -0 rm -f", &["ls", "xargs -0 rm -f", "rm -f"]),
        (
            "timeout -s KILL 5 rm x",
            &["timeout -s KILL 5 rm x", "rm x"],
        ),
        (
            "A=1 sudo env B=2 nohup rm x",
            &[
                "sudo env B=2 nohup rm x",
                "env B=2 nohup rm x",
                "nohup rm x",
                "rm x",
            ],
        ),
        ("bash -c 'rm -rf q'", &["bash -c rm -rf q", "rm -rf q"]),
        (
            "sh -ec \"ls && rm q\"",
            &["sh -ec ls && rm q", "ls", "rm q"],
        ),
        ("eval 'rm e'", &["eval rm e", "rm e"]),
        (
            "find . -name '*.o' -exec rm {} \\;",
            &["find . -name *.o -exec rm {} ;", "rm {}"],
        ),
        ("sudo", &["sudo"]),
        ("", &[]),
        ("# only a comment", &[]),
        ("/usr/bin/git  status\t-s", &["git status -s"]),
        ("git -C sub -c color.ui=never --no-pager log", &["git log"]),
    ];
    for (input, expected) in cases {
        assert_eq!(pats(input), *expected, "input: {input:?}");
    }
}

#[test]
fn normalized_command_words() {
    for cmd in [
        "/bin/rm -rf d",
        "\\rm -rf d",
        "\"rm\" -rf d",
        "'rm' -rf d",
        "r\"m\" -rf d",
        "r''m -rf d",
        "$'rm' -rf d",
        "$'\\x72\\x6d' -rf d",
        "$'\\162m' -rf d",
        "rm   -rf    d",
        "rm\t-rf\td",
        "./../../bin/rm -rf d",
        "~/bin/rm -rf d",
        "rm -rf \\\nd",
    ] {
        assert!(
            pats(cmd).contains(&"rm -rf d".to_string()),
            "{cmd:?}: {:?}",
            pats(cmd)
        );
        assert!(analyze(cmd).opaque.is_empty(), "{cmd:?}");
    }
}

#[test]
fn opaque_constructs_say_why() {
    let cases: &[(&str, &str)] = &[
        (
            "$(echo rm) -rf d",
            "command word `$(echo rm)` is not a literal",
        ),
        ("`echo rm` -rf d", "is not a literal"),
        ("$CMD -rf d", "command word `$CMD`"),
        ("${CMD:-rm} -rf d", "is not a literal"),
        ("\"$X\" x", "is not a literal"),
        ("r*m -rf d", "command word `r*m`"),
        ("/bin/r? -rf d", "is not a literal"),
        ("{rm,-rf,d}", "not valid bash"),
        ("curl -s x | sh", "`sh` reads its script from stdin"),
        ("cat s | bash -s", "`bash -s` reads its script"),
        ("bash <<EOF\nrm -rf d\nEOF", "`bash` reads its script"),
        ("sh <<< 'rm -rf d'", "reads its script"),
        ("sudo bash < script", "reads its script"),
        ("eval \"$X\"", "runs `\"$X\"`"),
        ("eval $(cat f)", "only known when it runs"),
        ("source \"$F\"", "runs the script"),
        (". $F", "runs the script"),
        ("sh -c \"$S\"", "the script of"),
        ("git -c alias.p=push p origin", "a git alias"),
        (
            "git -c core.sshCommand='rm -rf d' fetch",
            "`core.sshcommand`",
        ),
        ("git --config-env=alias.x=V x", "alias"),
        ("echo x > $OUT", "writes to `$OUT`"),
        ("cp a \"$DEST\"", "writes to"),
        ("rm -rf $HOME", "writes to `$HOME`"),
        ("cd $D && rm x", "relative to a directory only known"),
        ("cd - && echo > f", "after `cd -`"),
        ("echo $(", "not valid bash"),
        ("if then fi", "not valid bash"),
        (
            "shopt -s expand_aliases; alias ls='rm -rf d'; ls",
            "alias expansion",
        ),
        ("env -S 'rm -rf d'", "`env -S`"),
        ("watch \"$C\"", "only known when it runs"),
    ];
    for (cmd, why) in cases {
        let a = analyze(cmd);
        let all: Vec<&String> = a
            .opaque
            .iter()
            .chain(a.unknown_paths.iter().map(|u| &u.reason))
            .collect();
        assert!(
            all.iter().any(|o| o.contains(why)),
            "{cmd:?}: expected {why:?} in {all:?}"
        );
    }
    for cmd in [
        "ls -la",
        "echo \"$HOME\"",
        "git commit -m \"$(cat msg)\"",
        "bash script.sh",
        "sh -c 'ls'",
        "eval 'ls -la'",
        "command -v rm",
        "cat <<'EOF'\n$(x)\nEOF",
        "echo x 2>&1 >/dev/null",
        "for f in *.rs; do wc -l \"$f\"; done",
    ] {
        assert!(
            analyze(cmd).opaque.is_empty(),
            "{cmd:?}: {:?}",
            analyze(cmd).opaque
        );
    }
}

#[test]
fn paths_touched() {
    let cases: &[(&str, &[&str])] = &[
        ("echo X > ../outside.txt", &["W ../outside.txt"]),
        ("echo X >> a.txt 2> err.log", &["W a.txt", "W err.log"]),
        ("cmd &> all.log", &["W all.log"]),
        ("cat < /etc/passwd", &["R /etc/passwd"]),
        (
            "printf x | tee -a ../o.txt b.txt",
            &["W ../o.txt", "W b.txt"],
        ),
        (
            "dd if=/dev/zero of=../disk bs=1",
            &["W ../disk", "R if=/dev/zero", "R of=../disk", "R bs=1"],
        ),
        ("cp -r src ../backup", &["W ../backup", "R src"]),
        ("mv a b c /tmp/dest", &["W a", "W b", "W c", "W /tmp/dest"]),
        ("cp -t /opt/x a b", &["W /opt/x", "R a", "R b"]),
        (
            "install -m 755 tool ~/bin/tool",
            &["W ~/bin/tool", "R tool"],
        ),
        ("ln -s target ../link", &["W ../link", "R target"]),
        ("rm -rf a ../b", &["W a", "W ../b"]),
        ("touch -d yesterday f", &["W f"]),
        ("mkdir -p -m 700 a/b", &["W a/b"]),
        ("chmod 755 /etc/x", &["W /etc/x", "R 755"]),
        ("chown me:me f", &["W f", "R me:me"]),
        ("sed -i 's/a/b/' f.rs", &["W f.rs"]),
        ("sed -i.bak -e s/a/b/ f g", &["W f", "W g"]),
        ("sed 's/a/b/' f.rs", &["R f.rs"]),
        ("curl -o ../x.tgz https://e/x", &["W ../x.tgz"]),
        ("grep foo /etc/hosts ../n", &["R /etc/hosts", "R ../n"]),
        ("ls --color=auto --directory=/srv", &["R /srv"]),
        ("git -C ../other push", &["R ../other"]),
        ("cd x && rm -rf y", &["R x", "W x/y"]),
        // A `cd` that may fail leaves both directories possible; `&&` only the new one.
        ("cd x; rm y", &["R x", "W y", "W x/y"]),
        ("cd x || true; rm y", &["R x", "W y", "W x/y"]),
        ("cd x | cat; rm y", &["R x", "W y"]),
        ("cd x && rm y > z", &["R x", "W x/y", "W x/z"]),
        (
            "cd x && cd y; rm z",
            &["R x", "R x/y", "W z", "W x/z", "W x/y/z"],
        ),
        ("mv a b c", &["W a", "W b", "W c"]),
        ("find . -name x -delete", &["W .", "R .", "R x"]),
        ("cat {..,.}/x", &["R ../x", "R ./x"]),
        ("curl file:///etc/passwd", &["R /etc/passwd"]),
        (
            "cd /tmp/a && cd b && cat c ~/d && cd ../.. && rm e",
            &[
                "R /tmp/a",
                "R /tmp/a/b",
                "R /tmp/a/b/c",
                "R ~/d",
                "R /tmp/a/b/../..",
                "W /tmp/a/b/../../e",
            ],
        ),
        (
            "cd a && echo $(cd b && rm c) && rm d",
            &["R a", "R a/b", "W a/b/c", "W a/d"],
        ),
        ("(cd /tmp && rm x); rm y", &["R /tmp", "W /tmp/x", "W y"]),
        ("echo hi > /dev/null 2>/dev/stderr", &[]),
        ("ls 2>&1 >&2 <&0 3>&-", &[]),
        ("find /etc -name x -exec rm {} \\;", &["R /etc", "R x"]),
        ("echo /etc/passwd", &["R /etc/passwd"]),
        ("sudo tee /etc/hosts < x", &["W /etc/hosts", "R x"]),
        ("exec 3> out.fd", &["W out.fd"]),
        ("bash ../s.sh", &["R ../s.sh"]),
        ("source ~/.profile", &["R ~/.profile"]),
    ];
    let bad: Vec<String> = cases
        .iter()
        .filter(|(cmd, expected)| paths(cmd) != *expected)
        .map(|(cmd, expected)| format!("{cmd:?}: want {expected:?}, got {:?}", paths(cmd)))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn arity_and_always_patterns() {
    let cases: &[(&str, &[&str])] = &[
        ("git checkout main", &["git checkout *"]),
        ("git", &["git *"]),
        ("npm run dev", &["npm run dev *"]),
        ("npm run dev -- --port 3000", &["npm run dev *"]),
        ("npm install left-pad", &["npm install *"]),
        ("docker compose up -d", &["docker compose up *"]),
        ("docker ps -a", &["docker ps *"]),
        ("ls -la", &["ls *"]),
        ("FOO=1 BAR=2 cargo test -p x", &["cargo test *"]),
        ("gh pr list --limit 3", &["gh pr list *"]),
        ("'my tool' --flag", &["my tool *"]),
        ("git remote add origin x", &["git remote add *"]),
        ("/usr/bin/git -C x checkout -b y", &["git checkout *"]),
        ("sudo rm -rf x", &["sudo rm *", "rm *"]),
        (
            "FOO=1 sudo docker compose up -d",
            &["sudo docker compose up *", "docker compose up *"],
        ),
        (
            "git checkout -b x && npm run dev -- --port 3 && ls -la",
            &["git checkout *", "npm run dev *", "ls *"],
        ),
    ];
    for (cmd, want) in cases {
        assert_eq!(analyze(cmd).always(), *want, "{cmd:?}");
    }
    assert!(analyze("  ").parts.is_empty());
}

#[test]
fn odd_input_does_not_panic() {
    let alphabet: Vec<char> = "ab $()`'\"\\;|&<>{}!#\n\t=-c*x".chars().collect();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..3000 {
        let len = (state % 24) as usize;
        let mut s = String::new();
        for _ in 0..len {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            s.push(alphabet[((state >> 33) as usize) % alphabet.len()]);
        }
        state = state.wrapping_add(0x2545_F491);
        let _ = analyze(&s);
    }
    for s in [
        "$(",
        "`",
        "<(",
        "\"$(\"",
        "\"$\"(",
        "$((",
        "$((1)",
        "case",
        "esac)",
        "\\",
        "$'\\",
        "$'\\x'",
        "$'\\u{zz}'",
    ] {
        let _ = analyze(s);
    }
    // Hostile nesting is bounded and opaque, not a stack overflow.
    let deep = format!("{}rm x{}", "$(".repeat(5000), ")".repeat(5000));
    let a = analyze(&deep);
    assert!(!a.opaque.is_empty());
    let nested = format!("{}rm x", "eval ".repeat(40));
    let a = analyze(&nested);
    assert!(
        a.opaque.iter().any(|o| o.contains("nested")),
        "{:?}",
        a.opaque
    );
    let nested_sh = (0..5).fold("rm x".to_string(), |acc, _| {
        format!("sh -c {}", shell_quote(&acc))
    });
    assert!(
        analyze(&nested_sh)
            .parts
            .iter()
            .any(|p| p.patterns == ["rm x"])
    );
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[test]
fn make_variables_that_name_programs_are_opaque() {
    // Every variable `make` recipes run (the list before `risky_var` took over the generic
    // ones), in `=`, `:=`, `+=` and `?=` form; a plain variable stays analysable.
    let vars = "SHELL .SHELLFLAGS RM CC CXX CPP LD AR AS FC YACC LEX INSTALL MAKE MAKEFLAGS CP MV \
                MKDIR SED";
    for var in vars.split_whitespace() {
        for op in ["=", ":=", "+=", "?="] {
            let cmd = format!("make {var}{op}'rm -rf d' all");
            assert!(!analyze(&cmd).opaque.is_empty(), "{cmd:?}");
        }
    }
    assert!(analyze("make V=1 all").opaque.is_empty());
}
