//! What a bash command reads goes through the `read` rules, as the read tool does: under the
//! build agent's default ruleset (`read`: `*.env` and `*.env.*` ask, `*.env.example` allowed)
//! `cat .env` asks however the command and the path are spelled, and ordinary reads pass.

#[allow(dead_code)] // the shared module's other rulesets are for the other files
mod bash_support;

use bash_support::{decide, project};
use proptest::prelude::*;
use troupe_agents::AgentSet;
use troupe_agents::permission::{Action, Ruleset};

/// The build agent's rules with no user configuration.
fn defaults() -> Ruleset {
    AgentSet::from_config_value(None, None, None, "t")
        .unwrap()
        .get("build")
        .unwrap()
        .permission
        .clone()
}

fn secret_project() -> (tempfile::TempDir, std::path::PathBuf) {
    let (d, proj) = project();
    for f in [".env", ".env.local", ".env.example", "sub/.env"] {
        std::fs::write(proj.join(f), "KEY=secret\n").unwrap();
    }
    (d, proj)
}

#[tokio::test]
async fn reads_of_env_files_ask_and_other_reads_pass() {
    let (_d, proj) = secret_project();
    for (command, want) in [
        ("cat .env", Action::Ask),
        ("cat src/a.rs", Action::Allow),
        ("cat .env.example", Action::Allow),
        ("head -n 1 .env.local", Action::Ask),
        ("grep KEY sub/.env", Action::Ask),
        ("wc -l src/a.rs .env", Action::Ask),
        ("cp .env copy.txt", Action::Ask),
        ("cd sub && cat .env", Action::Ask),
        ("cat < .env", Action::Ask),
        ("source .env", Action::Ask),
        (". ./.env", Action::Ask),
        ("while read l; do echo \"$l\"; done < .env", Action::Ask),
        ("ls sub", Action::Allow),
        ("cd sub && ls", Action::Allow),
    ] {
        let (got, why) = decide(defaults(), &proj, command).await;
        assert_eq!(got, want, "{command}: {why}");
        if want == Action::Ask {
            assert!(why.contains(".env"), "{command}: {why}");
        }
    }
}

/// Spellings of the path `.env` relative to the project root.
fn env_spelling() -> impl Strategy<Value = String> {
    let prefix = prop::sample::select(vec!["", "./", "sub/../", "src/../", "./src/../"]);
    let quote = prop::sample::select(vec!["plain", "single", "double", "backslash", "split"]);
    (prefix, quote).prop_map(|(prefix, quote)| {
        let p = format!("{prefix}.env");
        match quote {
            "single" => format!("'{p}'"),
            "double" => format!("\"{p}\""),
            "backslash" => format!("{prefix}\\.env"),
            "split" => format!("{prefix}.e\"\"nv"),
            _ => p,
        }
    })
}

fn reader() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "cat",
        "head -n 3",
        "tail -1",
        "less",
        "more",
        "grep KEY",
        "sort",
        "base64",
        "od -c",
        "xxd",
        "strings",
        "nl",
        "awk 1",
        "sed -n p",
        "cut -c1-3",
        "tac",
        "diff src/a.rs",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// However a reader and the path are spelled, reading `.env` is never allowed unasked.
    #[test]
    fn any_spelling_of_reading_env_is_not_allowed(cmd in reader(), path in env_spelling()) {
        let tokio_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (_d, proj) = secret_project();
        let command = format!("{cmd} {path}");
        let (got, why) = tokio_rt.block_on(decide(defaults(), &proj, &command));
        prop_assert_ne!(got, Action::Allow, "{} was allowed ({})", command, why);
    }
}
