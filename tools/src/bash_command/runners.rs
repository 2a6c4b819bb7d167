//! Programs that run other programs given on their command line in their own syntax
//! (`fd -x CMD`, `rg --pre CMD`, `hyperfine 'SCRIPT'`, `less +!CMD`), and commands whose
//! arguments come from their input (`xargs CMD < list`).

use super::*;

/// Commands that write the files named by their operands: when `xargs` gives them file
/// names from its input, those are unknown written paths.
const WRITERS: &[&str] = &[
    "rm", "rmdir", "unlink", "shred", "touch", "mkdir", "truncate", "tee", "cp", "mv", "ln",
    "install", "chmod", "chown", "chgrp", "sed", "gsed", "dd", "patch", "rsync",
];

/// Value-taking options of `hyperfine` whose value is a shell command (the others are
/// skipped with their value; every positional word is a benchmarked command).
const HYPERFINE_SCRIPTS: &[&str] = &[
    "-p",
    "--prepare",
    "-c",
    "--cleanup",
    "-s",
    "--setup",
    "--conclude",
];

/// Value-taking options of `hyperfine` that are not commands (`-L NAME VALUES` takes two).
const HYPERFINE_VALUES: &[&str] = &[
    "-w",
    "--warmup",
    "-m",
    "--min-runs",
    "-M",
    "--max-runs",
    "-r",
    "--runs",
    "-S",
    "--shell",
    "-u",
    "--time-unit",
    "-n",
    "--command-name",
    "--style",
    "--sort",
    "--export-asciidoc",
    "--export-csv",
    "--export-json",
    "--export-markdown",
    "--export-orgmode",
    "--output",
    "--input",
    "-D",
    "--parameter-step-size",
    "--reference",
];

impl Walker {
    /// `xargs CMD` without a replace string: CMD gets file names read from xargs' input (a
    /// file, a pipe, a here-string), which are paths only known when it runs.
    pub(super) fn xargs_fed(&mut self, words: &[Word], starts: &[usize], name: &str, source: &str) {
        let layers = &starts[..starts.len().saturating_sub(1)];
        let fed = layers.iter().any(|&s| {
            words[s]
                .lit
                .as_deref()
                .is_some_and(|l| basename(l) == "xargs")
        });
        if fed && self.xargs_repl.is_none() {
            self.unknown(
                format!(
                    "{} gives `{name}` arguments read from its input when it runs",
                    q(source)
                ),
                WRITERS.contains(&name),
            );
        }
    }

    /// Commands run by programs in their own option syntax: analysed when literal, opaque
    /// otherwise.
    pub(super) fn runners(&mut self, name: &str, args: &[Word], source: &str, depth: usize) {
        match name {
            // `fd PATTERN -x CMD ARGS…` / `-X`: the rest of the words are the command.
            "fd" | "fdfind" => {
                if let Some(i) = args
                    .iter()
                    .position(|w| matches!(w.text(), "-x" | "--exec" | "-X" | "--exec-batch"))
                {
                    let end = args[i + 1..]
                        .iter()
                        .position(|w| w.text() == ";")
                        .map_or(args.len(), |p| i + 1 + p);
                    if end > i + 1 {
                        self.run_words(args[i + 1..end].to_vec(), source, depth);
                    } else {
                        self.opaque(format!("{} runs a command without naming it", q(source)));
                    }
                }
            }
            // `rg --pre CMD`: CMD runs on every file searched.
            "rg" => {
                for (i, w) in args.iter().enumerate() {
                    let t = w.text();
                    let v = match t.strip_prefix("--pre=") {
                        Some(v) => Some(w.part(v)),
                        None if t == "--pre" => args.get(i + 1).cloned(),
                        None => None,
                    };
                    if let Some(v) = v {
                        self.run_words(vec![v], source, depth);
                    }
                }
            }
            "hyperfine" => {
                let mut i = 0usize;
                while i < args.len() {
                    let t = args[i].text().to_string();
                    let (opt, inline) = match t.split_once('=') {
                        Some((o, v)) if o.starts_with("--") => (o.to_string(), Some(v.to_string())),
                        _ => (t.clone(), None),
                    };
                    if HYPERFINE_SCRIPTS.contains(&opt.as_str()) {
                        let v = match &inline {
                            Some(v) => Some(args[i].part(v)),
                            None => args.get(i + 1).cloned(),
                        };
                        self.wrapper_script(v.as_ref(), source, depth);
                        i += if inline.is_some() { 1 } else { 2 };
                        continue;
                    }
                    if opt.starts_with('-') && opt.len() > 1 {
                        let skip = match opt.as_str() {
                            "-L" | "--parameter-list" => 2,
                            "-P" | "--parameter-scan" => 3,
                            o if HYPERFINE_VALUES.contains(&o) => 1,
                            _ => 0,
                        };
                        i += 1 + if inline.is_some() { 0 } else { skip };
                        continue;
                    }
                    let w = args[i].clone();
                    self.wrapper_script(Some(&w), source, depth);
                    i += 1;
                }
            }
            // `less +'!CMD'`, `more +…`: commands for the pager, which can run a shell.
            "less" | "more" | "most" => {
                if let Some(w) = args
                    .iter()
                    .find(|w| w.text().starts_with('+') || w.text().starts_with("--init-command"))
                {
                    self.opaque(format!(
                        "{} gives the pager the commands {}, which can run a shell",
                        q(source),
                        q(&w.raw)
                    ));
                }
            }
            _ => {}
        }
    }

    /// A command given as words by another program: analysed like a simple command in the
    /// current directory.
    fn run_words(&mut self, words: Vec<Word>, source: &str, depth: usize) {
        let saved = self.cd.clone();
        let was = self.in_find_exec;
        self.in_find_exec = true;
        self.simple(words, source, depth);
        self.in_find_exec = was;
        self.cd = saved;
    }
}
