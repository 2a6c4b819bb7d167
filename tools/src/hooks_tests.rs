//! Hook runner tests: real `sh` processes, payload on stdin, reply on stdout.

use super::*;
use std::collections::BTreeMap;

fn sh(script: &str) -> HookCommand {
    HookCommand {
        command: vec!["sh".into(), "-c".into(), script.into()],
        environment: BTreeMap::new(),
        tools: Vec::new(),
        timeout: Some(5_000),
    }
}

fn hooks(f: impl FnOnce(&mut HooksConfig)) -> Hooks {
    let mut c = HooksConfig::default();
    f(&mut c);
    Hooks::new(c)
}

fn cwd() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[tokio::test]
async fn before_hook_sees_the_payload_and_blocks_with_its_reason() {
    let d = cwd();
    // The hook checks the payload itself: only a bash call with `rm` in it is blocked.
    let h = hooks(|c| {
        c.tool_execute_before.push(sh(
            r#"p=$(cat); case "$p" in *'"tool":"bash"'*'rm -rf'*) echo '{"block":"no rm -rf here"}';; *) echo '{}';; esac"#,
        ))
    });
    let blocked = h
        .tool_before(
            d.path(),
            "ses_1",
            "call_1",
            "bash",
            json!({"command": "rm -rf /"}),
        )
        .await;
    assert_eq!(
        blocked,
        Before::Block("Blocked by a tool.execute.before hook: no rm -rf here".into())
    );
    let ok = h
        .tool_before(
            d.path(),
            "ses_1",
            "call_2",
            "bash",
            json!({"command": "ls"}),
        )
        .await;
    assert_eq!(ok, Before::Run(json!({"command": "ls"})));
}

#[tokio::test]
async fn before_hooks_chain_rewritten_arguments_and_honour_tool_patterns() {
    let d = cwd();
    let mut first = sh(r#"cat >/dev/null; echo '{"args":{"command":"ls -la"}}'"#);
    first.tools = vec!["ba?h".into()];
    let mut second = sh(
        r#"p=$(cat); case "$p" in *'ls -la'*) echo '{}';; *) echo '{"block":"saw old args"}';; esac"#,
    );
    second.tools = vec!["bash".into()];
    let mut other = sh("cat >/dev/null; echo '{\"block\":\"not for bash\"}'");
    other.tools = vec!["edit".into()];
    let h = hooks(|c| c.tool_execute_before.extend([first, second, other]));
    let out = h
        .tool_before(d.path(), "s", "c", "bash", json!({"command": "ls"}))
        .await;
    assert_eq!(out, Before::Run(json!({"command": "ls -la"})));
    assert!(!h.has_tool_hooks("read"));
    assert!(h.has_tool_hooks("edit"));
}

#[tokio::test]
async fn a_failing_or_confused_before_hook_blocks() {
    let d = cwd();
    let cases = [
        (
            "cat >/dev/null; echo oops >&2; exit 3",
            "failed (exit code 3): oops",
        ),
        ("cat >/dev/null; echo 'not json'", "invalid JSON"),
        ("cat >/dev/null; echo '[1]'", "an array, not a JSON object"),
        (
            "cat >/dev/null; echo '{\"blok\":\"x\"}'",
            "unknown key `blok`",
        ),
        ("cat >/dev/null; echo '{\"block\":1}'", "not a string"),
        ("cat >/dev/null; echo '{\"args\":\"rm\"}'", "not an object"),
    ];
    for (script, want) in cases {
        let h = hooks(|c| c.tool_execute_before.push(sh(script)));
        match h.tool_before(d.path(), "s", "c", "bash", json!({})).await {
            Before::Block(msg) => {
                assert!(
                    msg.starts_with("Blocked: tool.execute.before hook"),
                    "{msg}"
                );
                assert!(msg.contains(want), "{script}: {msg}");
            }
            other => panic!("{script}: {other:?}"),
        }
    }
    let h = hooks(|c| {
        c.tool_execute_before.push(HookCommand {
            command: vec!["/nonexistent/hook".into()],
            environment: BTreeMap::new(),
            tools: vec![],
            timeout: None,
        })
    });
    match h.tool_before(d.path(), "s", "c", "bash", json!({})).await {
        Before::Block(msg) => assert!(msg.contains("could not start"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_slow_hook_is_killed_with_what_it_started_and_blocks() {
    let d = cwd();
    let pidfile = d.path().join("pid");
    let mut slow = sh(&format!("sleep 30 & echo $! > {}; wait", pidfile.display()));
    slow.timeout = Some(300);
    let h = hooks(|c| c.tool_execute_before.push(slow));
    let started = std::time::Instant::now();
    let out = h.tool_before(d.path(), "s", "c", "bash", json!({})).await;
    assert_eq!(
        out,
        Before::Block(
            "Blocked: tool.execute.before hook `sh -c sleep 30 & echo $! > ".to_string()
                + &pidfile.display().to_string()
                + "; wait` timed out after 300 ms and was killed"
        )
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    // The background sleep it started is gone too.
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while alive(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(pid), "the hook's child {pid} survived");
}

#[tokio::test]
async fn after_hook_rewrites_output_and_title_and_a_failure_withholds_it() {
    let d = cwd();
    let h = hooks(|c| {
        c.tool_execute_after.push(sh(
            r#"p=$(cat); case "$p" in *'"output":"secret=42"'*) echo '{"output":"secret=[redacted]","title":"cleaned"}';; *) echo '{}';; esac"#,
        ))
    });
    let out = crate::ToolOutput {
        title: "t".into(),
        output: "secret=42".into(),
        metadata: Map::new(),
    };
    let got = h
        .tool_after(d.path(), "s", "c", "bash", &json!({}), out.clone())
        .await
        .unwrap();
    assert_eq!(got.output, "secret=[redacted]");
    assert_eq!(got.title, "cleaned");
    let failing = hooks(|c| c.tool_execute_after.push(sh("cat >/dev/null; exit 1")));
    let e = failing
        .tool_after(d.path(), "s", "c", "bash", &json!({}), out)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("exit code 1"), "{e}");
}

#[tokio::test]
async fn chat_params_replace_sampling_and_merge_options() {
    let d = cwd();
    let h = hooks(|c| {
        c.chat_params.push(sh(
            r#"p=$(cat); case "$p" in *'"agent":"build"'*'"modelID":"m1"'*) echo '{"temperature":0.1,"topP":null,"options":{"seed":7}}';; *) exit 9;; esac"#,
        ))
    });
    let mut params = Map::new();
    params.insert("temperature".into(), json!(0.7));
    params.insert("topP".into(), json!(0.9));
    params.insert("options".into(), json!({"keep": true}));
    let got = h
        .chat_params(d.path(), "s", "build", "p", "m1", params)
        .await
        .unwrap();
    assert_eq!(
        Value::Object(got),
        json!({"temperature": 0.1, "topP": null, "options": {"keep": true, "seed": 7}})
    );
}

#[tokio::test]
async fn shell_env_collects_variables_and_refuses_bad_ones() {
    let d = cwd();
    let h = hooks(|c| {
        c.shell_env
            .push(sh(r#"cat >/dev/null; echo '{"env":{"A":"1","B":"x"}}'"#));
        c.shell_env
            .push(sh(r#"cat >/dev/null; echo '{"env":{"A":"2"}}'"#));
    });
    let env = h.shell_env(d.path(), "s", "c", "ls").await.unwrap();
    assert_eq!(
        env,
        vec![("B".to_string(), "x".to_string()), ("A".into(), "2".into())]
    );
    let bad = hooks(|c| {
        c.shell_env
            .push(sh(r#"cat >/dev/null; echo '{"env":{"A=B":"1"}}'"#))
    });
    assert!(bad.shell_env(d.path(), "s", "c", "ls").await.is_err());
}

#[tokio::test]
async fn permission_hook_decides_or_leaves_it_to_the_user() {
    let d = cwd();
    let h = hooks(|c| {
        c.permission_asked.push(sh(
            r#"p=$(cat); case "$p" in *'"permission":"edit"'*) echo '{"status":"deny"}';; *) echo '{"status":"ask"}';; esac"#,
        ))
    });
    let meta = json!({});
    assert_eq!(
        h.permission_asked(d.path(), "s", "edit", &["a.txt".into()], &meta)
            .await
            .unwrap(),
        Some(PermissionDecision::Deny)
    );
    assert_eq!(
        h.permission_asked(d.path(), "s", "bash", &["ls".into()], &meta)
            .await
            .unwrap(),
        None
    );
    let bad = hooks(|c| {
        c.permission_asked
            .push(sh(r#"cat >/dev/null; echo '{"status":"yes"}'"#))
    });
    assert!(
        bad.permission_asked(d.path(), "s", "edit", &[], &meta)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn hooks_get_their_environment_without_the_server_password() {
    let d = cwd();
    let mut h = sh(
        r#"cat >/dev/null; printf '{"env":{"POINT":"%s","X":"%s","PW":"%s"}}' "$TROUPE_HOOK" "$X" "${TROUPE_SERVER_PASSWORD-unset}""#,
    );
    h.environment.insert("X".into(), "from-config".into());
    let hooks = hooks(|c| c.shell_env.push(h));
    // The password is removed even if troupe's own environment has one; the test cannot set
    // it process-wide safely, so it checks that an unset one stays unset.
    let env = hooks.shell_env(d.path(), "s", "c", "ls").await.unwrap();
    assert_eq!(
        env,
        vec![
            ("POINT".to_string(), "shell.env".to_string()),
            ("X".into(), "from-config".into()),
            ("PW".into(), "unset".into())
        ]
    );
}

#[tokio::test]
async fn a_big_payload_does_not_deadlock_a_hook_that_replies_first() {
    let d = cwd();
    // Replies at once, never reads stdin: our write must not block the read of the reply.
    let h = hooks(|c| {
        c.tool_execute_after
            .push(sh(r#"echo '{"output":"short"}'"#))
    });
    let out = crate::ToolOutput {
        title: "t".into(),
        output: "x".repeat(4 << 20),
        metadata: Map::new(),
    };
    let got = h
        .tool_after(d.path(), "s", "c", "read", &json!({}), out)
        .await
        .unwrap();
    assert_eq!(got.output, "short");
}
