//! The interactive chat (bare `troupe` in a terminal), driven through a pseudo-terminal with
//! `expectrl`: a prompt, a tool call, Ctrl-C during a turn, `/quit`.

use std::time::Duration;

use expectrl::{ControlCode, Eof, Expect, Session};
use serde_json::json;
use troupe_testkit::{Conversation, Fault, MockServer, Script, Step};

mod common;
use common::*;

/// How long one `expect` may wait before the test fails (a hung chat fails, it does not hang
/// the suite); not a timing assertion.
const EXPECT_DEADLINE: Duration = Duration::from_secs(30);

/// `expect` that shows what the terminal received when the needle does not come.
fn want<N: expectrl::Needle>(chat: &mut expectrl::session::OsSession, needle: N, what: &str) {
    if let Err(e) = chat.expect(needle) {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = chat.try_read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        panic!(
            "{what}: {e}; the terminal showed:\n{}",
            String::from_utf8_lossy(&seen)
        );
    }
}

#[test]
fn chat_prompt_tool_call_interrupt_and_quit() {
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // Three conversations, chosen by the first user message of each session.
    let script = Script::new(vec![
        Conversation::new(vec![Step::text("Hello from the model.")]).matching("say hello"),
        Conversation::new(vec![
            Step::tool("glob", json!({"pattern": "*.md"})),
            Step::text("There is one markdown file."),
        ])
        .matching("list markdown"),
        Conversation::new(vec![
            Step::text("this never ends").with_fault(Fault::hang_after(0)),
        ])
        .matching("hang forever"),
    ]);
    let server = tokio_rt
        .block_on(MockServer::start(script))
        .expect("mock server");
    let p = CliProject::new(&server.base_url());
    std::fs::write(p.root.join("README.md"), "# hi\n").expect("README");

    let mut cmd = p.std_command(&[]);
    cmd.env("TERM", "xterm");
    let mut chat = Session::spawn(cmd).expect("spawn troupe in a pty");
    chat.set_expect_timeout(Some(EXPECT_DEADLINE));
    want(&mut chat, "/help for commands", "banner");
    want(&mut chat, "build> ", "prompt");

    // A prompt and its answer.
    chat.send_line("say hello").expect("send");
    want(&mut chat, "Hello from the model.", "answer");
    want(&mut chat, "build> ", "prompt again");

    // A new session, then a tool call.
    chat.send_line("/new").expect("send /new");
    want(&mut chat, "a new session starts", "/new");
    chat.send_line("list markdown").expect("send");
    want(&mut chat, "✓ glob *.md", "tool line");
    want(
        &mut chat,
        "There is one markdown file.",
        "answer after the tool",
    );
    want(&mut chat, "build> ", "prompt again");

    // Ctrl-C during a turn stops the turn, not the chat.
    chat.send_line("/new").expect("send /new");
    want(&mut chat, "a new session starts", "/new");
    chat.send_line("hang forever").expect("send");
    want(
        &mut chat,
        "waiting for model",
        "activity line while waiting",
    );
    chat.send(ControlCode::EndOfText).expect("Ctrl-C");
    want(&mut chat, "stopping the turn", "interrupt notice");
    want(&mut chat, "build> ", "the chat goes on");

    // Commands.
    chat.send_line("/agent explore").expect("send");
    want(&mut chat, "is a subagent", "subagent refused");
    chat.send_line("/agent plan").expect("send");
    want(&mut chat, "plan> ", "agent switched");
    chat.send_line("/sessions").expect("send");
    want(&mut chat, "ses_", "session list");

    chat.send_line("/quit").expect("send /quit");
    want(&mut chat, Eof, "exits");
    let status = format!("{:?}", chat.get_process().wait().expect("wait"));
    assert!(
        status.starts_with("Exited(") && status.ends_with(", 0)"),
        "clean exit: {status}"
    );
    let sessions = tokio_rt.block_on(p.sessions());
    assert_eq!(sessions.len(), 3, "three sessions: {sessions:#?}");
    tokio_rt.block_on(server.shutdown());
}

/// `/undo` hides the last prompt and restores the file its step wrote; `/redo` brings both
/// back; with nothing left, `/undo` says so.
#[test]
fn chat_undo_and_redo() {
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let script = Script::single(vec![
        Step::tool("write", json!({"filePath": "made.txt", "content": "new\n"})),
        Step::text("Wrote it."),
    ]);
    let server = tokio_rt
        .block_on(MockServer::start(script))
        .expect("mock server");
    let p = CliProject::empty();
    let mut config = mock_config(&server.base_url());
    config["permission"] = json!({"edit": "allow"});
    p.write_config(&config.to_string());
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&p.root)
        .status()
        .expect("git runs");
    assert!(git.success(), "git init");
    let made = p.root.join("made.txt");

    let mut cmd = p.std_command(&[]);
    cmd.env("TERM", "xterm");
    let mut chat = Session::spawn(cmd).expect("spawn troupe in a pty");
    chat.set_expect_timeout(Some(EXPECT_DEADLINE));
    want(&mut chat, "build> ", "prompt");
    chat.send_line("/undo").expect("send");
    want(&mut chat, "nothing to undo", "undo before any prompt");

    chat.send_line("write the file").expect("send");
    want(&mut chat, "Wrote it.", "answer");
    want(&mut chat, "build> ", "prompt again");
    assert_eq!(
        std::fs::read_to_string(&made).ok().as_deref(),
        Some("new\n")
    );

    chat.send_line("/undo").expect("send");
    want(&mut chat, "1 file(s) restored", "undo");
    want(&mut chat, "build> ", "prompt after undo");
    assert!(!made.exists(), "the file the undone step wrote is gone");
    chat.send_line("/undo").expect("send");
    want(&mut chat, "nothing to undo", "nothing further back");

    chat.send_line("/redo").expect("send");
    want(&mut chat, "redone", "redo");
    want(&mut chat, "build> ", "prompt after redo");
    assert_eq!(
        std::fs::read_to_string(&made).ok().as_deref(),
        Some("new\n")
    );
    chat.send_line("/redo").expect("send");
    want(&mut chat, "nothing to redo", "nothing to redo");

    chat.send_line("/quit").expect("send /quit");
    want(&mut chat, Eof, "exits");
    let _ = chat.get_process().wait();
    tokio_rt.block_on(server.shutdown());
}
