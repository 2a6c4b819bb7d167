//! `troupe-bench`: run N scripted sessions of M steps through ONE troupe runtime against an
//! in-process `troupe-mock`, and report wall time, CPU time, RSS, steps/s and the per-step
//! orchestrator overhead (step wall time − provider time − tool time).
//!
//! ```text
//! cargo run --release -p troupe-bench -- --sessions N --steps M [--parallel P] [--tools|--no-tools]
//!                                        [--db PATH] [--json] [--chunk-size C] [--delay-ms D]
//! ```
//!
//! See `bench/README.md` for what each number means and how precise it is.

// The report is one `json!` literal with many keys.
#![recursion_limit = "256"]

mod callgrind;
mod measure;
mod mockthread;
mod options;
mod probe;
mod report;
mod run;
mod script;
mod step_cpu;
mod threads;
mod timed;

use std::process::ExitCode;

use clap::Parser;

use crate::options::Args;
use crate::run::run;

// jemalloc with small thread caches, as every troupe binary (`troupe_actors::memory`).
troupe_actors::troupe_allocator!();

fn main() -> ExitCode {
    let args = Args::parse();
    let (print_script, init_workspace) = (args.print_script, args.init_workspace.clone());
    let settings = match args.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("troupe-bench: {e}");
            return ExitCode::from(2);
        }
    };
    if print_script {
        let script = script::build_script(
            settings.steps,
            settings.turns,
            settings.mix,
            settings.chunk_size,
            settings.delay_ms,
        );
        println!("{}", script.to_json());
        return ExitCode::SUCCESS;
    }
    if let Some(dir) = init_workspace {
        return match script::prepare_workspace(
            &dir,
            settings.files,
            settings.gitignore,
            settings.snapshots,
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!(
                    "troupe-bench: cannot create the workspace {}: {e}",
                    dir.display()
                );
                ExitCode::from(1)
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("troupe-bench: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(&settings)) {
        Ok(report) => {
            if settings.json {
                println!("{}", report.json);
            } else {
                print!("{}", report.human);
            }
            match report.first_error {
                None => ExitCode::SUCCESS,
                Some(e) => {
                    eprintln!(
                        "troupe-bench: {} of {} sessions failed; first error: {e}",
                        report.failed, settings.sessions
                    );
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            eprintln!("troupe-bench: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
#[path = "main_tests.rs"]
mod tests;
