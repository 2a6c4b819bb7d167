//! The bench workload: the per-session workspace files and the mock provider script.
//!
//! One default conversation (no matcher) serves every session: the mock picks step `i` for a
//! request holding `i` assistant messages (testkit README, "Conversation"), so every session
//! walks the same `M` steps independently. All tool paths are relative, so each tool resolves
//! them against its own session's directory and sessions never touch each other's files.

use std::path::Path;

use serde_json::{Value, json};
use troupe_testkit::{Conversation, Exhausted, Script, Step};

/// The tools of a tool step, in rotation order. `--sessions 1 --steps 6` therefore runs the
/// README target session: list, read, write, glob, grep, then a text answer.
pub const ROTATION: [&str; 5] = ["list", "read", "write", "glob", "grep"];

/// Name of the small file `read` reads (created by [`create_workspace`]).
pub const READ_FILE: &str = "notes.md";

/// The word `grep` looks for (present in [`READ_FILE`] and `src/lib.rs`).
pub const GREP_WORD: &str = "troupe";

/// The `.gitignore` of `--gitignore` workspaces: rules as most projects have (the bench's
/// own files match none of them).
pub const GITIGNORE: &str = "target/\n*.log\nnode_modules/\n";

/// Text of the final step of every conversation.
pub const FINAL_TEXT: &str = "Done: listed, read, wrote, globbed and grepped the workspace.";

/// Which tools the non-final steps call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolMix {
    /// `list`, `read`, `write`, `glob`, `grep` in rotation ([`ROTATION`]).
    Rotate,
    /// `read` of [`READ_FILE`] only (the cheapest tool: one small file read).
    ReadOnly,
}

/// The tool name and arguments of tool step `index` (0-based) under `mix`. Paths are relative
/// to the session directory; `write` names a fresh file per step (`out/step-<index>.txt`), so a
/// write never overwrites a file (no read-before-write rule can fire).
pub fn tool_call(mix: ToolMix, index: usize) -> (&'static str, Value) {
    let name = match mix {
        ToolMix::Rotate => ROTATION[index % ROTATION.len()],
        ToolMix::ReadOnly => "read",
    };
    let args = match name {
        "list" => json!({"path": "."}),
        "read" => json!({"filePath": READ_FILE}),
        "write" => json!({
            "filePath": format!("out/step-{index}.txt"),
            "content": format!("bench output of step {index}\n"),
        }),
        "glob" => json!({"pattern": "*.md"}),
        _ => json!({"pattern": GREP_WORD}),
    };
    (name, args)
}

/// The mock script: one conversation without matchers of `turns` turns of `steps` steps
/// (`steps ≥ 1`, `turns ≥ 1`): in each turn, steps `0..steps-1` call one tool each
/// ([`tool_call`], numbered across turns) and the last answers [`FINAL_TEXT`]. Each step
/// streams in chunks of `chunk_size` characters with `delay_ms` between SSE events. A request
/// past the end gets HTTP 400 (`Exhausted::Error`), so a runaway loop fails loudly.
pub fn build_script(
    steps: usize,
    turns: usize,
    mix: ToolMix,
    chunk_size: usize,
    delay_ms: u64,
) -> Script {
    let steps = steps.max(1);
    let total = steps * turns.max(1);
    let mut out = Vec::with_capacity(total);
    for i in 0..total {
        if i % steps == steps - 1 {
            out.push(Step::text(FINAL_TEXT));
        } else {
            let (name, args) = tool_call(mix, i);
            out.push(Step::tool(name, args));
        }
    }
    let out = out
        .into_iter()
        .map(|s| {
            let s = s.with_chunk_size(chunk_size.max(1));
            if delay_ms > 0 {
                s.with_delay_ms(delay_ms)
            } else {
                s
            }
        })
        .collect();
    Script::new(vec![Conversation::new(out).on_exhausted(Exhausted::Error)])
}

/// Create one session workspace at `dir` (blocking; run it off the async workers): the
/// directory, [`READ_FILE`], `README.md` and `src/lib.rs` (a few hundred bytes in all).
pub fn create_workspace(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(
        dir.join(READ_FILE),
        "# Notes\n\nThis workspace belongs to the troupe bench.\nIt is small on purpose.\n",
    )?;
    std::fs::write(
        dir.join("README.md"),
        "# bench workspace\n\nSee notes.md.\n",
    )?;
    std::fs::write(
        dir.join("src").join("lib.rs"),
        "//! A tiny crate for the troupe bench.\npub fn answer() -> u32 {\n    42\n}\n",
    )?;
    Ok(())
}

/// Adds `n` small text files (`files/d<k>/f<i>.txt`, 100 per directory, a few lines each) to
/// a workspace: the project size the snapshot cost is measured on.
pub fn add_files(dir: &Path, n: usize) -> std::io::Result<()> {
    for i in 0..n {
        let sub = dir.join("files").join(format!("d{}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&sub)?;
        }
        std::fs::write(
            sub.join(format!("f{i}.txt")),
            format!("file {i}\nsome text of the bench project\nline three\n"),
        )?;
    }
    Ok(())
}

/// A session workspace as a run uses it (blocking): [`create_workspace`], `files` extra
/// files ([`add_files`]), a [`GITIGNORE`] when `gitignore`, a git repository with one
/// commit when `git` ([`git_init`]).
pub fn prepare_workspace(
    dir: &Path,
    files: usize,
    gitignore: bool,
    git: bool,
) -> std::io::Result<()> {
    create_workspace(dir)?;
    add_files(dir, files)?;
    if gitignore {
        std::fs::write(dir.join(".gitignore"), GITIGNORE)?;
    }
    if git {
        git_init(dir)?;
    }
    Ok(())
}

/// Makes a workspace a git repository with one commit (as a user's project would be), so
/// snapshots are on for it.
pub fn git_init(dir: &Path) -> std::io::Result<()> {
    let git = |args: &[&str]| -> std::io::Result<()> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=bench",
                "-c",
                "user.email=bench@example.invalid",
            ])
            .args(args)
            .output()?;
        if out.status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "bench workspace"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_steps_mirror_the_readme_session() {
        let script = build_script(6, 1, ToolMix::Rotate, 16, 0);
        let v: Value = serde_json::from_str(&script.to_json()).expect("script json");
        let steps = v["conversations"][0]["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), 6);
        let names: Vec<&str> = steps[..5]
            .iter()
            .map(|s| s["tool_calls"][0]["name"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(names, ["list", "read", "write", "glob", "grep"]);
        assert_eq!(steps[5]["text"], FINAL_TEXT);
        assert!(
            steps[5]
                .get("tool_calls")
                .is_none_or(|t| t.as_array().is_some_and(|a| a.is_empty()))
        );
        script.validate().expect("valid");
    }

    #[test]
    fn one_step_is_text_only_and_read_only_mix_reads() {
        let v: Value = serde_json::from_str(&build_script(1, 1, ToolMix::Rotate, 16, 0).to_json())
            .expect("json");
        assert_eq!(
            v["conversations"][0]["steps"].as_array().map(Vec::len),
            Some(1)
        );
        for i in 0..7 {
            assert_eq!(tool_call(ToolMix::ReadOnly, i).0, "read");
        }
        // Rotation wraps and writes never reuse a file name.
        assert_eq!(tool_call(ToolMix::Rotate, 5).0, "list");
        assert_ne!(
            tool_call(ToolMix::Rotate, 2).1,
            tool_call(ToolMix::Rotate, 7).1
        );
    }

    #[test]
    fn several_turns_end_each_with_a_text_step() {
        let v: Value =
            serde_json::from_str(&build_script(4, 3, ToolMix::ReadOnly, 16, 0).to_json())
                .expect("json");
        let steps = v["conversations"][0]["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), 12);
        for (i, s) in steps.iter().enumerate() {
            let text = i % 4 == 3;
            assert_eq!(s["text"] == FINAL_TEXT, text, "step {i}: {s}");
        }
    }

    #[test]
    fn workspace_has_the_files_the_tools_need() {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = d.path().join("ws-0");
        create_workspace(&ws).expect("create");
        let notes = std::fs::read_to_string(ws.join(READ_FILE)).expect("notes");
        assert!(notes.contains(GREP_WORD));
        assert!(ws.join("README.md").is_file());
        assert!(ws.join("src/lib.rs").is_file());
    }
}
