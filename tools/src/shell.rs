//! Bash command analysis for permission checks (OpenCode `tool/shell.ts` + `permission/arity.ts`,
//! §6.4), without tree-sitter: a quote-aware splitter turns a command line into sub-commands,
//! each of which becomes a `bash` permission pattern; `always` gets the command's arity prefix
//! plus `" *"`; arguments of file commands are collected for the `external_directory` check.

/// Commands that change directory: they give no `bash` pattern, but their path argument is
/// checked against the project (OpenCode FILES, cd-like subset).
pub const CD_COMMANDS: &[&str] = &["cd", "chdir", "popd", "pushd"];

/// Commands whose non-flag arguments are paths checked for `external_directory`
/// (OpenCode FILES, POSIX subset).
pub const FILE_COMMANDS: &[&str] = &[
    "cd", "chdir", "popd", "pushd", "rm", "cp", "mv", "mkdir", "touch", "chmod", "chown", "cat",
];

/// How many leading tokens name "the command" for `always` patterns (subset of OpenCode's
/// `permission/arity.ts` dictionary; the longest matching prefix wins, unknown commands use 1).
pub const ARITY: &[(&str, usize)] = &[
    ("git", 2),
    ("npm", 2),
    ("npm run", 3),
    ("npm exec", 3),
    ("pnpm", 2),
    ("pnpm run", 3),
    ("yarn", 2),
    ("yarn run", 3),
    ("bun", 2),
    ("bun run", 3),
    ("deno", 2),
    ("deno task", 3),
    ("npx", 2),
    ("bunx", 2),
    ("cargo", 2),
    ("go", 2),
    ("docker", 2),
    ("docker compose", 3),
    ("podman", 2),
    ("kubectl", 2),
    ("helm", 2),
    ("gh", 3),
    ("pip", 2),
    ("pip3", 2),
    ("uv", 2),
    ("uv run", 3),
    ("poetry", 2),
    ("poetry run", 3),
    ("brew", 2),
    ("apt", 2),
    ("apt-get", 2),
    ("systemctl", 2),
    ("rustup", 2),
    ("make", 2),
    ("terraform", 2),
    ("aws", 3),
    ("gcloud", 3),
];

/// Wrappers skipped when finding the command name (`sudo rm x` → `rm`).
const WRAPPERS: &[&str] = &[
    "sudo", "env", "nohup", "time", "command", "exec", "builtin", "nice",
];

/// Result of [`bash_permission_patterns`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BashPermissions {
    /// One pattern per sub-command: its full source text, trimmed (cd-like commands excluded).
    pub patterns: Vec<String>,
    /// Arity prefix + `" *"` per sub-command (deduplicated), e.g. `git checkout *`.
    pub always: Vec<String>,
    /// Literal path arguments of file commands (`cd rm cp mv mkdir touch chmod chown cat`),
    /// `~` not yet expanded; dynamic words (`$`, backticks) are skipped. The bash tool resolves
    /// them against the working directory for the `external_directory` ask.
    pub path_args: Vec<String>,
}

/// A shell word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// Text with quotes removed.
    pub text: String,
    /// Contains an unquoted or double-quoted `$` or a backtick (value unknown statically).
    pub dynamic: bool,
    /// Was quoted (at least partly): never a redirection operator.
    pub quoted: bool,
}

/// Split a command line into sub-commands on top-level `&&`, `||`, `;`, `|`, `&`, newlines
/// and `(`/`)` grouping; quotes, `$(…)`, backticks, comments and here-document bodies are
/// respected. Each returned sub-command is trimmed and non-empty.
///
/// `cd x && rm -rf y` → `["cd x", "rm -rf y"]`.
pub fn split_commands(command: &str) -> Vec<String> {
    split_impl(command, false)
        .pieces
        .into_iter()
        .map(|(text, _)| text)
        .filter(|t| !t.is_empty())
        .collect()
}

/// What ended a piece of [`split_impl`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    /// `;`, `&&`, `||`, `|&`, `&`, a newline, `(` or the end of input.
    Sep,
    /// A single `|`: a pipe, or between the alternatives of a `case` pattern list.
    Pipe,
    /// `)`: ends a subshell, or a `case` pattern list.
    CloseParen,
    /// `;;`, `;&` or `;;&`: ends a `case` item.
    CaseEnd,
}

/// Output of [`split_impl`].
struct Split {
    /// Trimmed pieces (possibly empty) with what ended them.
    pieces: Vec<(String, Term)>,
    /// Bodies of here-documents whose delimiter is unquoted (they undergo `$(…)` and
    /// backtick expansion); only collected in permission mode.
    heredoc_bodies: Vec<String>,
}

/// The splitter behind [`split_commands`]. In permission mode (`perm`), process
/// substitutions `<(…)`/`>(…)` stay inside their word (instead of `(`/`)` splitting them)
/// and unquoted here-document bodies are kept for substitution scanning.
fn split_impl(command: &str, perm: bool) -> Split {
    let chars: Vec<char> = command.chars().collect();
    let mut out: Vec<(String, Term)> = Vec::new();
    let mut heredoc_bodies: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut i = 0usize;
    // (delimiter, strip leading tabs, delimiter was unquoted)
    let mut pending_heredocs: Vec<(String, bool, bool)> = Vec::new();
    let push = |cur: &mut String, out: &mut Vec<(String, Term)>, term: Term| {
        out.push((cur.trim().to_string(), term));
        cur.clear();
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                cur.push(c);
                if let Some(&n) = chars.get(i + 1) {
                    if n != '\n' {
                        cur.push(n);
                    }
                    i += 1;
                }
                i += 1;
            }
            '\'' => {
                let end = find_from(&chars, i + 1, |ch| ch == '\'').unwrap_or(chars.len() - 1);
                cur.extend(&chars[i..=end]);
                i = end + 1;
            }
            '"' => {
                let end = skip_double(&chars, i + 1);
                cur.extend(&chars[i..end.min(chars.len())]);
                i = end;
            }
            '`' => {
                let end = skip_backtick(&chars, i + 1);
                cur.extend(&chars[i..end.min(chars.len())]);
                i = end;
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                let end = skip_paren(&chars, i + 2);
                cur.extend(&chars[i..end.min(chars.len())]);
                i = end;
            }
            '<' | '>' if perm && chars.get(i + 1) == Some(&'(') => {
                let end = skip_paren(&chars, i + 2);
                cur.extend(&chars[i..end.min(chars.len())]);
                i = end;
            }
            '#' if cur.is_empty() || cur.ends_with(char::is_whitespace) => {
                // Comment to end of line.
                let end = find_from(&chars, i, |ch| ch == '\n').unwrap_or(chars.len());
                i = end;
            }
            '<' if chars.get(i + 1) == Some(&'<') && chars.get(i + 2) != Some(&'<') => {
                // Here-document: remember the delimiter; its body is skipped at the newline.
                let mut j = i + 2;
                let strip_tabs = chars.get(j) == Some(&'-');
                if strip_tabs {
                    j += 1;
                }
                while chars.get(j).is_some_and(|c| *c == ' ' || *c == '\t') {
                    j += 1;
                }
                let start = j;
                while chars
                    .get(j)
                    .is_some_and(|c| !c.is_whitespace() && !";|&()<>".contains(*c))
                {
                    j += 1;
                }
                let raw = &chars[start..j];
                let unquoted = !raw.iter().any(|c| matches!(c, '\'' | '"' | '\\'));
                let delim: String = raw
                    .iter()
                    .filter(|c| !matches!(c, '\'' | '"' | '\\'))
                    .collect();
                if !delim.is_empty() {
                    pending_heredocs.push((delim, strip_tabs, unquoted));
                }
                cur.extend(&chars[i..j]);
                i = j;
            }
            '\n' => {
                push(&mut cur, &mut out, Term::Sep);
                i += 1;
                for (delim, strip_tabs, unquoted) in std::mem::take(&mut pending_heredocs) {
                    // Skip body lines until the delimiter line.
                    let mut body = String::new();
                    loop {
                        if i >= chars.len() {
                            break;
                        }
                        let end = find_from(&chars, i, |ch| ch == '\n').unwrap_or(chars.len());
                        let line: String = chars[i..end].iter().collect();
                        i = (end + 1).min(chars.len());
                        let cmp = if strip_tabs {
                            line.trim_start_matches('\t')
                        } else {
                            line.as_str()
                        };
                        if cmp == delim {
                            break;
                        }
                        body.push_str(&line);
                        body.push('\n');
                    }
                    if perm && unquoted && !body.is_empty() {
                        heredoc_bodies.push(body);
                    }
                }
            }
            ';' => {
                push(&mut cur, &mut out, Term::Sep);
                i += 1;
                // `;;`, `;&`, `;;&` end a `case` item.
                if chars.get(i) == Some(&';') {
                    i += 1;
                    if chars.get(i) == Some(&'&') {
                        i += 1;
                    }
                    if let Some(last) = out.last_mut() {
                        last.1 = Term::CaseEnd;
                    }
                } else if chars.get(i) == Some(&'&') {
                    i += 1;
                    if let Some(last) = out.last_mut() {
                        last.1 = Term::CaseEnd;
                    }
                }
            }
            '(' => {
                push(&mut cur, &mut out, Term::Sep);
                i += 1;
            }
            ')' => {
                push(&mut cur, &mut out, Term::CloseParen);
                i += 1;
            }
            '|' => {
                // `||` and `|&` are one operator.
                if matches!(chars.get(i + 1), Some('|') | Some('&')) {
                    push(&mut cur, &mut out, Term::Sep);
                    i += 2;
                } else {
                    push(&mut cur, &mut out, Term::Pipe);
                    i += 1;
                }
            }
            '&' => {
                let prev = cur.chars().last();
                let next = chars.get(i + 1).copied();
                if next == Some('&') {
                    push(&mut cur, &mut out, Term::Sep);
                    i += 2;
                } else if matches!(prev, Some('>') | Some('<')) || next == Some('>') {
                    // Redirection: `2>&1`, `&>file`, `<&3`.
                    cur.push(c);
                    i += 1;
                } else {
                    push(&mut cur, &mut out, Term::Sep);
                    i += 1;
                }
            }
            _ => {
                cur.push(c);
                i += 1;
            }
        }
    }
    push(&mut cur, &mut out, Term::Sep);
    Split {
        pieces: out,
        heredoc_bodies,
    }
}

fn find_from(chars: &[char], from: usize, pred: impl Fn(char) -> bool) -> Option<usize> {
    (from..chars.len()).find(|&j| pred(chars[j]))
}

/// Index just past the closing `"` (string starts at `from`).
fn skip_double(chars: &[char], from: usize) -> usize {
    let mut j = from;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            '`' => j = skip_backtick(chars, j + 1),
            '$' if chars.get(j + 1) == Some(&'(') => j = skip_paren(chars, j + 2),
            _ => j += 1,
        }
    }
    chars.len()
}

fn skip_backtick(chars: &[char], from: usize) -> usize {
    let mut j = from;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            '`' => return j + 1,
            _ => j += 1,
        }
    }
    chars.len()
}

/// Index just past the `)` closing a `$(` whose body starts at `from`.
fn skip_paren(chars: &[char], from: usize) -> usize {
    let mut depth = 1usize;
    let mut j = from;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            '\'' => j = find_from(chars, j + 1, |c| c == '\'').map_or(chars.len(), |e| e + 1),
            '"' => j = skip_double(chars, j + 1),
            '`' => j = skip_backtick(chars, j + 1),
            '(' => {
                depth += 1;
                j += 1;
            }
            ')' => {
                depth -= 1;
                j += 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => j += 1,
        }
    }
    chars.len()
}

/// Split one sub-command into words (quote removal, escapes, `$(…)` kept verbatim and marked
/// dynamic).
pub fn tokenize(segment: &str) -> Vec<Word> {
    let chars: Vec<char> = segment.chars().collect();
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut dynamic = false;
    let mut quoted = false;
    let mut i = 0;
    let flush = |cur: &mut String,
                 in_word: &mut bool,
                 dynamic: &mut bool,
                 quoted: &mut bool,
                 words: &mut Vec<Word>| {
        if *in_word {
            words.push(Word {
                text: std::mem::take(cur),
                dynamic: *dynamic,
                quoted: *quoted,
            });
        }
        *in_word = false;
        *dynamic = false;
        *quoted = false;
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => {
                flush(
                    &mut cur,
                    &mut in_word,
                    &mut dynamic,
                    &mut quoted,
                    &mut words,
                );
                i += 1;
            }
            '\\' => {
                in_word = true;
                if let Some(&n) = chars.get(i + 1) {
                    cur.push(n);
                }
                i += 2;
            }
            '\'' => {
                in_word = true;
                quoted = true;
                let end = find_from(&chars, i + 1, |ch| ch == '\'').unwrap_or(chars.len());
                cur.extend(&chars[i + 1..end]);
                i = end + 1;
            }
            '"' => {
                in_word = true;
                quoted = true;
                let end = skip_double(&chars, i + 1);
                let inner_end = if end > i + 1 && chars.get(end - 1) == Some(&'"') {
                    end - 1
                } else {
                    end
                };
                let inner: String = chars[i + 1..inner_end.min(chars.len())].iter().collect();
                if inner.contains('$') || inner.contains('`') {
                    dynamic = true;
                }
                // Drop backslashes that escape `"`, `\`, `$`, `` ` `` inside double quotes.
                let mut it = inner.chars().peekable();
                while let Some(ch) = it.next() {
                    if ch == '\\'
                        && it
                            .peek()
                            .is_some_and(|n| matches!(n, '"' | '\\' | '$' | '`'))
                    {
                        if let Some(n) = it.next() {
                            cur.push(n);
                        }
                    } else {
                        cur.push(ch);
                    }
                }
                i = end;
            }
            '`' => {
                in_word = true;
                dynamic = true;
                let end = skip_backtick(&chars, i + 1);
                cur.extend(&chars[i..end.min(chars.len())]);
                i = end;
            }
            '$' => {
                in_word = true;
                dynamic = true;
                if chars.get(i + 1) == Some(&'(') {
                    let end = skip_paren(&chars, i + 2);
                    cur.extend(&chars[i..end.min(chars.len())]);
                    i = end;
                } else {
                    cur.push(c);
                    i += 1;
                }
            }
            _ => {
                in_word = true;
                cur.push(c);
                i += 1;
            }
        }
    }
    flush(
        &mut cur,
        &mut in_word,
        &mut dynamic,
        &mut quoted,
        &mut words,
    );
    words
}

fn is_assignment(w: &Word) -> bool {
    if w.quoted {
        return false;
    }
    match w.text.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

fn is_redirection(w: &Word) -> bool {
    !w.quoted && {
        let t = w.text.trim_start_matches(|c: char| c.is_ascii_digit());
        t.starts_with('>') || t.starts_with('<') || t.starts_with("&>")
    }
}

/// The command words of a sub-command: leading `VAR=value` assignments and wrappers
/// (`sudo`, `env`, `nohup`, `time`, …) skipped; redirections dropped, together with their
/// target when the operator stands alone (`> file`).
pub fn command_words(segment: &str) -> Vec<Word> {
    let words = tokenize(segment);
    let mut out: Vec<Word> = Vec::new();
    let mut skip_next = false;
    for w in words {
        if skip_next {
            skip_next = false;
            continue;
        }
        if is_redirection(&w) {
            let op = w.text.trim_start_matches(|c: char| c.is_ascii_digit());
            if matches!(
                op,
                ">" | ">>" | "<" | "&>" | ">|" | "<<" | "<<-" | "<<<" | "&>>"
            ) {
                skip_next = true;
            }
            continue;
        }
        if out.is_empty() && (is_assignment(&w) || WRAPPERS.contains(&w.text.as_str())) {
            continue;
        }
        out.push(w);
    }
    out
}

/// Arity prefix of a command's words (longest dictionary match in [`ARITY`], else 1 word;
/// never more words than there are). Flags are not counted as sub-command words.
pub fn arity_prefix(words: &[String]) -> Vec<String> {
    if words.is_empty() {
        return Vec::new();
    }
    let mut arity = 1usize;
    let mut best_len = 0usize;
    for (key, n) in ARITY {
        let parts: Vec<&str> = key.split(' ').collect();
        if parts.len() <= words.len()
            && parts.iter().zip(words).all(|(a, b)| a == b)
            && parts.len() > best_len
        {
            best_len = parts.len();
            arity = *n;
        }
    }
    let mut out = Vec::new();
    for (idx, w) in words.iter().enumerate() {
        if idx >= arity || (idx > 0 && w.starts_with('-')) {
            break;
        }
        out.push(w.clone());
    }
    out
}

/// Compute the `bash` permission request parts for a command line (§6.4): one pattern per
/// simple command (its source text), `always` = arity prefix + `" *"`, plus the literal path
/// arguments of file commands for the `external_directory` check.
///
/// OpenCode checks every `command` node of a tree-sitter parse; without a parser this walks
/// the same commands: top-level list members (see [`split_commands`]), commands inside
/// `$(…)`, backticks, `<(…)`/`>(…)` and unquoted here-document bodies (the outer command's
/// text stays a pattern too), bodies of `{ …; }`, `if`/`while`/`until`/`for`/`case`
/// (leading reserved words such as `then`, `do`, `!`, `time` are stripped, `for`/`select`
/// headers and `case` patterns give no pattern), and the scripts of `sh -c …`, `eval …` and
/// `find … -exec … ;`. Each command also yields its text without leading `VAR=value`
/// assignments and without wrappers (`sudo`, `env`, `nohup`, `xargs`, …, see
/// [`command_variants`]), so `rm *` matches `FOO=1 sudo rm x`. Each pattern has an `always`
/// entry that covers it: the text before the innermost command + its arity prefix + `" *"`
/// (`sudo rm -rf x` → `["sudo rm *", "rm *"]`).
///
/// Path arguments after a literal `cd DIR` are prefixed with `DIR` (OpenCode resolves them
/// all against the fixed working directory; following the `cd` is stricter), so
/// `cd x && rm -rf y` → patterns `["rm -rf y"]`, always `["rm *"]`, path_args
/// `["x", "x/y"]` (cd gives no pattern; see [`CD_COMMANDS`]). After a `cd` whose target is
/// unknown (`cd`, `cd -`, `cd $X`, `popd`) arguments are again taken as given. A `cd` inside
/// a substitution or `sh -c` does not move the outer commands.
pub fn bash_permission_patterns(command: &str) -> BashPermissions {
    let mut res = BashPermissions::default();
    // Directory changed by earlier literal `cd`s, relative to the working directory (or
    // absolute / `~`-based).
    let mut cd_prefix: Option<String> = None;
    analyze(command, 0, &mut cd_prefix, &mut res);
    res
}

/// Nesting limit for substitutions / `sh -c` scripts. Deeper text is still checked as one
/// pattern per command, it is just not descended into further.
const MAX_NESTING: usize = 32;

/// Reserved words and grouping tokens that may start a piece before the actual command.
const RESERVED_PREFIXES: &[&str] = &[
    "{", "}", "!", "then", "do", "else", "elif", "if", "while", "until", "fi", "done", "esac",
    "coproc",
];

/// Wrappers unwrapped by [`command_variants`], with their options that take a separate
/// argument (`sudo -u root rm x` → `rm x`).
const UNWRAP: &[(&str, &[&str])] = &[
    (
        "sudo",
        &[
            "-u",
            "-g",
            "-h",
            "-p",
            "-C",
            "-D",
            "-r",
            "-t",
            "-U",
            "-T",
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
        ],
    ),
    ("doas", &["-u", "-C"]),
    (
        "env",
        &["-u", "-C", "-S", "--unset", "--chdir", "--split-string"],
    ),
    ("nohup", &[]),
    ("time", &["-f", "-o", "--format", "--output"]),
    ("command", &[]),
    ("exec", &["-a"]),
    ("builtin", &[]),
    ("nice", &["-n", "--adjustment"]),
    ("ionice", &["-c", "-n", "-p", "--class", "--classdata"]),
    ("setsid", &[]),
    ("stdbuf", &["-i", "-o", "-e"]),
    (
        "xargs",
        &[
            "-a",
            "-d",
            "-E",
            "-I",
            "-L",
            "-n",
            "-P",
            "-s",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-lines",
            "--max-procs",
            "--max-chars",
            "--replace",
            "--eof",
        ],
    ),
    ("timeout", &["-s", "-k", "--signal", "--kill-after"]),
    ("watch", &["-n", "--interval"]),
];

/// Shells whose `-c SCRIPT` argument is analysed as a command line.
const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish"];

/// Analyse one command line (top level, or a substitution / `-c` script body at `depth`).
fn analyze(command: &str, depth: usize, cd_prefix: &mut Option<String>, res: &mut BashPermissions) {
    let split = split_impl(command, true);
    for body in &split.heredoc_bodies {
        for sub in substitution_bodies(body, true) {
            nested(&sub, depth, cd_prefix, res);
        }
    }
    // `case` state: the next piece ended by `)` is a pattern list, not a command.
    let mut case_pattern_next = false;
    for (raw, term) in split.pieces {
        for sub in substitution_bodies(&raw, false) {
            nested(&sub, depth, cd_prefix, res);
        }
        if raw.is_empty() {
            if term == Term::CaseEnd {
                case_pattern_next = true;
            }
            continue;
        }
        if case_pattern_next && term == Term::Pipe {
            // `a|b)`: one alternative of the pattern list.
            continue;
        }
        if case_pattern_next && term == Term::CloseParen {
            case_pattern_next = false;
            continue;
        }
        match strip_reserved(&raw) {
            Stripped::Command(text, saw_esac) => {
                if saw_esac {
                    case_pattern_next = false;
                }
                if !text.is_empty() {
                    simple_command(&text, depth, cd_prefix, res);
                }
            }
            Stripped::Header => {}
            Stripped::Case => {
                // `case W in P)` carries its first pattern; `case W in` + newline does not.
                case_pattern_next = term != Term::CloseParen;
                continue;
            }
        }
        if term == Term::CaseEnd {
            case_pattern_next = true;
        }
    }
}

/// Analyse a nested command line (its `cd`s do not leak out).
fn nested(command: &str, depth: usize, cd_prefix: &Option<String>, res: &mut BashPermissions) {
    if depth >= MAX_NESTING {
        return;
    }
    let mut inner_prefix = cd_prefix.clone();
    analyze(command, depth + 1, &mut inner_prefix, res);
}

/// Result of [`strip_reserved`].
enum Stripped {
    /// The command text left after leading reserved words (may be empty: `fi`, `}`), and
    /// whether an `esac` was among them.
    Command(String, bool),
    /// A `for`/`select` header: no command.
    Header,
    /// A `case WORD in [PATTERN]` header: no command; patterns follow.
    Case,
}

/// Strip leading reserved words and grouping tokens (`then rm x` → `rm x`,
/// `function f { rm x` → `rm x`, `time -p ls` → `ls`).
fn strip_reserved(piece: &str) -> Stripped {
    let mut text = piece.trim();
    let mut saw_esac = false;
    loop {
        let Some((word, rest)) = first_raw_word(text) else {
            return Stripped::Command(String::new(), saw_esac);
        };
        saw_esac |= word == "esac";
        match word {
            w if RESERVED_PREFIXES.contains(&w) => text = rest,
            "time" => {
                text = rest;
                if let Some(("-p", r)) = first_raw_word(text) {
                    text = r;
                }
            }
            "function" => {
                // `function NAME`, then an optional `{`.
                text = first_raw_word(rest).map_or("", |(_, r)| r);
            }
            "for" | "select" => return Stripped::Header,
            "case" => return Stripped::Case,
            _ => return Stripped::Command(text.to_string(), saw_esac),
        }
    }
}

/// The first word of `s` (quote-aware, unquoted whitespace ends it) and the trimmed rest.
fn first_raw_word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    let span = raw_word_spans(s).into_iter().next()?;
    Some((&s[span.0..span.1], s[span.1..].trim_start()))
}

/// Byte spans of the words of `s`: quotes, escapes, `$(…)`, backticks and `<(…)`/`>(…)`
/// stay inside their word.
fn raw_word_spans(s: &str) -> Vec<(usize, usize)> {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let only: Vec<char> = chars.iter().map(|(_, c)| *c).collect();
    let byte_at = |idx: usize| chars.get(idx).map_or(s.len(), |(b, _)| *b);
    let mut spans = Vec::new();
    let mut i = 0usize;
    let mut start: Option<usize> = None;
    while i < only.len() {
        let c = only[i];
        if c.is_whitespace() {
            if let Some(st) = start.take() {
                spans.push((byte_at(st), byte_at(i)));
            }
            i += 1;
            continue;
        }
        if start.is_none() {
            start = Some(i);
        }
        i = match c {
            '\\' => i + 2,
            '\'' => find_from(&only, i + 1, |ch| ch == '\'').map_or(only.len(), |e| e + 1),
            '"' => skip_double(&only, i + 1),
            '`' => skip_backtick(&only, i + 1),
            '$' | '<' | '>' if only.get(i + 1) == Some(&'(') => skip_paren(&only, i + 2),
            _ => i + 1,
        };
    }
    if let Some(st) = start {
        spans.push((byte_at(st), s.len()));
    }
    spans
}

/// Bodies of the command substitutions (`$(…)`, backticks) and process substitutions
/// (`<(…)`, `>(…)`) at the top level of `s` (nested ones are found when the bodies are
/// analysed); single-quoted text is skipped. `$((…))` arithmetic is not a command, but
/// substitutions inside it are returned. `heredoc`: `s` is a here-document body, where quotes
/// are literal.
pub fn substitution_bodies(s: &str, heredoc: bool) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    scan_substitutions(&chars, 0, chars.len(), heredoc, &mut out);
    out
}

fn scan_substitutions(
    chars: &[char],
    from: usize,
    to: usize,
    in_double: bool,
    out: &mut Vec<String>,
) {
    let to = to.min(chars.len());
    let mut i = from;
    while i < to {
        match chars[i] {
            '\\' => i += 2,
            '\'' if !in_double => {
                i = find_from(chars, i + 1, |c| c == '\'').map_or(to, |e| e + 1);
            }
            '"' if !in_double => {
                let end = skip_double(chars, i + 1).min(to);
                let inner_end = if end > i + 1 && chars.get(end - 1) == Some(&'"') {
                    end - 1
                } else {
                    end
                };
                scan_substitutions(chars, i + 1, inner_end, true, out);
                i = end;
            }
            '`' => {
                let end = skip_backtick(chars, i + 1).min(to);
                let inner_end = if end > i + 1 && chars.get(end - 1) == Some(&'`') {
                    end - 1
                } else {
                    end
                };
                // Inside backticks `\$`, `` \` `` and `\\` stand for the character itself.
                let mut body = String::new();
                let mut j = i + 1;
                while j < inner_end {
                    if chars[j] == '\\'
                        && j + 1 < inner_end
                        && matches!(chars[j + 1], '$' | '`' | '\\')
                    {
                        body.push(chars[j + 1]);
                        j += 2;
                    } else {
                        body.push(chars[j]);
                        j += 1;
                    }
                }
                out.push(body);
                i = end;
            }
            '$' if i + 1 < to && chars[i + 1] == '(' => {
                let end = skip_paren(chars, i + 2).min(to);
                let closed = end >= i + 3 && chars.get(end - 1) == Some(&')');
                let arithmetic = chars.get(i + 2) == Some(&'(')
                    && end >= i + 5
                    && chars.get(end - 2) == Some(&')')
                    && skip_paren(chars, i + 3) == end - 1;
                if arithmetic {
                    scan_substitutions(chars, i + 3, end - 2, false, out);
                } else {
                    let inner_end = if closed { end - 1 } else { end };
                    out.push(chars[i + 2..inner_end].iter().collect());
                }
                i = end;
            }
            '<' | '>' if !in_double && i + 1 < to && chars[i + 1] == '(' => {
                let end = skip_paren(chars, i + 2).min(to);
                let inner_end = if end >= i + 3 && chars.get(end - 1) == Some(&')') {
                    end - 1
                } else {
                    end
                };
                out.push(chars[i + 2..inner_end].iter().collect());
                i = end;
            }
            _ => i += 1,
        }
    }
}

/// Patterns for one simple command: its text, then the text without leading `VAR=value`
/// assignments, then the text after each wrapper ([`UNWRAP`]: `sudo`, `env`, `nohup`,
/// `xargs`, `timeout`, … with their options), each a suffix of the previous one and
/// deduplicated. `FOO=1 sudo -u root rm x` → `["FOO=1 sudo -u root rm x",
/// "sudo -u root rm x", "rm x"]`. The last entry is the innermost command.
pub fn command_variants(text: &str) -> Vec<String> {
    let text = text.trim();
    let spans = raw_word_spans(text);
    let unquoted = |k: usize| {
        spans
            .get(k)
            .and_then(|(a, b)| tokenize(&text[*a..*b]).into_iter().next())
    };
    // `NAME=…` with an unquoted valid name (the value may be quoted).
    let assignment = |k: usize| {
        spans.get(k).is_some_and(|(a, b)| {
            text[*a..*b].split_once('=').is_some_and(|(name, _)| {
                !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit())
            })
        })
    };
    let mut out = vec![text.to_string()];
    let push = |k: usize, out: &mut Vec<String>| {
        if k < spans.len() {
            let v = text[spans[k].0..].to_string();
            if !out.contains(&v) {
                out.push(v);
            }
        }
    };
    let mut k = 0usize;
    loop {
        while k < spans.len() && assignment(k) {
            k += 1;
        }
        push(k, &mut out);
        let Some(name) = unquoted(k).filter(|w| !w.quoted).map(|w| basename(&w.text)) else {
            break;
        };
        let Some((wrapper, opts)) = UNWRAP.iter().find(|(n, _)| *n == name) else {
            break;
        };
        k += 1;
        while k < spans.len() {
            let w = unquoted(k).map(|w| w.text).unwrap_or_default();
            if w == "--" {
                k += 1;
                break;
            }
            if w.starts_with('-') {
                k += if opts.contains(&w.as_str()) { 2 } else { 1 };
            } else if *wrapper == "env" && assignment(k) {
                k += 1;
            } else {
                break;
            }
        }
        if *wrapper == "timeout" {
            // The duration.
            k += 1;
        }
        if k >= spans.len() {
            break;
        }
    }
    out
}

fn basename(s: &str) -> String {
    s.rsplit('/').next().unwrap_or(s).to_string()
}

/// Words of a command with redirections (and their separate targets) and leading
/// assignments dropped; wrappers are kept.
fn plain_words(segment: &str) -> Vec<Word> {
    let mut out: Vec<Word> = Vec::new();
    let mut skip_next = false;
    for w in tokenize(segment) {
        if skip_next {
            skip_next = false;
            continue;
        }
        if is_redirection(&w) {
            let op = w.text.trim_start_matches(|c: char| c.is_ascii_digit());
            skip_next = matches!(
                op,
                ">" | ">>" | "<" | "&>" | ">|" | "<<" | "<<-" | "<<<" | "&>>"
            );
            continue;
        }
        if out.is_empty() && is_assignment(&w) {
            continue;
        }
        out.push(w);
    }
    out
}

/// Record one simple command (reserved words already stripped).
fn simple_command(
    text: &str,
    depth: usize,
    cd_prefix: &mut Option<String>,
    res: &mut BashPermissions,
) {
    let variants = command_variants(text);
    let core = variants.last().map_or(text, String::as_str).to_string();
    let words = plain_words(&core);
    let Some(first) = words.first() else {
        return;
    };
    let name = basename(&first.text);
    let is_cd = CD_COMMANDS.contains(&name.as_str());
    if FILE_COMMANDS.contains(&name.as_str()) {
        let mut args = Vec::new();
        for w in &words[1..] {
            if w.dynamic || w.text.is_empty() || (!w.quoted && w.text.starts_with('-')) {
                continue;
            }
            if (name == "chmod" || name == "chown") && is_mode_or_owner(&w.text) {
                continue;
            }
            let arg = join_prefix(cd_prefix.as_deref(), &w.text);
            if !res.path_args.contains(&arg) {
                res.path_args.push(arg.clone());
            }
            args.push(arg);
        }
        if is_cd {
            let literal = words.len() == 2 && !words[1].dynamic && words[1].text != "-";
            *cd_prefix = if literal && (name == "cd" || name == "chdir" || name == "pushd") {
                args.into_iter().next()
            } else {
                None
            };
        }
    }
    // Scripts run by the command: `sh -c SCRIPT`, `eval ARGS`, `find … -exec CMD ;`.
    for script in inner_scripts(&core, &name, &words) {
        nested(&script, depth, cd_prefix, res);
    }
    if is_cd {
        return;
    }
    let texts: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
    let arity = arity_prefix(&texts).join(" ");
    for v in &variants {
        if !res.patterns.contains(v) {
            res.patterns.push(v.clone());
        }
        let before = v.strip_suffix(core.as_str()).unwrap_or("").trim_end();
        let always = if before.is_empty() {
            format!("{arity} *")
        } else {
            format!("{before} {arity} *")
        };
        if !res.always.contains(&always) {
            res.always.push(always);
        }
    }
}

/// Command lines that `core` runs itself: the script of `sh -c SCRIPT` (any flag cluster
/// containing `c`), the joined arguments of `eval`, and each `find … -exec|-execdir|-ok|-okdir
/// CMD … ;|+`.
fn inner_scripts(core: &str, name: &str, words: &[Word]) -> Vec<String> {
    let mut out = Vec::new();
    if SHELLS.contains(&name) {
        let mut has_c = false;
        for w in &words[1..] {
            let t = w.text.as_str();
            if !w.quoted && (t.starts_with('-') || t.starts_with('+')) && t != "--" && t.len() > 1 {
                if !t.starts_with("--") && t[1..].contains('c') {
                    has_c = true;
                }
                continue;
            }
            if has_c {
                out.push(w.text.clone());
            }
            break;
        }
    } else if name == "eval" {
        let args: Vec<&str> = words[1..].iter().map(|w| w.text.as_str()).collect();
        if !args.is_empty() {
            out.push(args.join(" "));
        }
    } else if name == "find" {
        let core = core.trim();
        let spans = raw_word_spans(core);
        let texts: Vec<String> = spans
            .iter()
            .map(|(a, b)| {
                tokenize(&core[*a..*b])
                    .into_iter()
                    .next()
                    .map(|w| w.text)
                    .unwrap_or_default()
            })
            .collect();
        let mut k = 0usize;
        while k < spans.len() {
            if matches!(texts[k].as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                let start = k + 1;
                let mut end = start;
                while end < spans.len() && texts[end] != ";" && texts[end] != "+" {
                    end += 1;
                }
                if end > start {
                    out.push(core[spans[start].0..spans[end - 1].1].to_string());
                }
                k = end;
            }
            k += 1;
        }
    }
    out
}

/// `arg` seen from inside `prefix` (absolute and `~` arguments are kept as they are).
fn join_prefix(prefix: Option<&str>, arg: &str) -> String {
    match prefix {
        Some(p) if !arg.starts_with('/') && !arg.starts_with('~') => {
            format!("{}/{arg}", p.trim_end_matches('/'))
        }
        _ => arg.to_string(),
    }
}

/// `chmod` modes (`755`, `+x`, `u+rw,g-w`) and `chown` owners (`user:group`) are not paths.
fn is_mode_or_owner(s: &str) -> bool {
    s.chars().all(|c| c.is_ascii_digit())
        || s.chars().all(|c| "ugoa+-=rwxXst,".contains(c))
        || (s.contains(':') && !s.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_operators() {
        let cases: &[(&str, &[&str])] = &[
            ("cd x && rm -rf y", &["cd x", "rm -rf y"]),
            ("a || b; c | d\ne", &["a", "b", "c", "d", "e"]),
            ("echo 'a && b' && ls", &["echo 'a && b'", "ls"]),
            ("echo \"x; y\" ; pwd", &["echo \"x; y\"", "pwd"]),
            ("ls 2>&1 | grep x", &["ls 2>&1", "grep x"]),
            (
                "sleep 30 & sleep 30; wait",
                &["sleep 30", "sleep 30", "wait"],
            ),
            ("echo $(a && b) && c", &["echo $(a && b)", "c"]),
            (
                "(cd a; make) && ls # trailing && comment",
                &["cd a", "make", "ls"],
            ),
            ("cat <<EOF > f\nrm -rf /\nEOF\nls", &["cat <<EOF > f", "ls"]),
            ("echo a\\;b", &["echo a\\;b"]),
        ];
        for (input, expected) in cases {
            assert_eq!(split_commands(input), *expected, "input: {input}");
        }
    }

    #[test]
    fn cd_and_rm_give_two_patterns_minus_cd() {
        let p = bash_permission_patterns("cd x && rm -rf y");
        assert_eq!(p.patterns, vec!["rm -rf y"]);
        assert_eq!(p.always, vec!["rm *"]);
        assert_eq!(p.path_args, vec!["x", "x/y"]);
        let p = bash_permission_patterns("cd /tmp/a && cd b && cat c ~/d && cd - && rm e");
        assert_eq!(
            p.path_args,
            vec!["/tmp/a", "/tmp/a/b", "/tmp/a/b/c", "~/d", "e"]
        );
        let split = split_commands("cd x && rm -rf y");
        assert_eq!(split.len(), 2);
    }

    #[test]
    fn arity_always() {
        let p = bash_permission_patterns("git checkout -b x && npm run dev -- --port 3 && ls -la");
        assert_eq!(
            p.patterns,
            vec!["git checkout -b x", "npm run dev -- --port 3", "ls -la"]
        );
        assert_eq!(p.always, vec!["git checkout *", "npm run dev *", "ls *"]);
        let p = bash_permission_patterns("FOO=1 sudo docker compose up -d");
        assert_eq!(
            p.always,
            vec![
                "FOO=1 sudo docker compose up *",
                "sudo docker compose up *",
                "docker compose up *"
            ]
        );
        let p = bash_permission_patterns("git");
        assert_eq!(p.always, vec!["git *"]);
    }

    #[test]
    fn path_args_skip_flags_dynamic_and_modes() {
        let p = bash_permission_patterns(
            "chmod 755 /etc/x && cat \"$HOME/a\" 'b c' > out.txt && rm -- -f",
        );
        assert_eq!(p.path_args, vec!["/etc/x", "b c"]);
        let p = bash_permission_patterns("echo /etc/passwd");
        assert!(p.path_args.is_empty());
    }

    /// `rm *` (OpenCode wildcard: `rm` followed by anything, or `rm` alone).
    fn rm_rule_hits(p: &BashPermissions) -> bool {
        p.patterns.iter().any(|x| x == "rm" || x.starts_with("rm "))
    }

    #[test]
    fn nested_and_compound_commands_give_their_own_patterns() {
        let cases: &[(&str, &[&str])] = &[
            ("echo $(rm -rf v1)", &["rm -rf v1", "echo $(rm -rf v1)"]),
            ("echo `rm -rf v2`", &["rm -rf v2", "echo `rm -rf v2`"]),
            (
                "echo \"$(rm -rf v)\"",
                &["rm -rf v", "echo \"$(rm -rf v)\""],
            ),
            ("echo '$(rm -rf v)'", &["echo '$(rm -rf v)'"]),
            (
                "diff <(rm a) >(rm b) c",
                &["rm a", "rm b", "diff <(rm a) >(rm b) c"],
            ),
            (
                "echo $(echo $(rm x))",
                &["rm x", "echo $(rm x)", "echo $(echo $(rm x))"],
            ),
            (
                "echo `echo \\`rm x\\``",
                &["rm x", "echo `rm x`", "echo `echo \\`rm x\\``"],
            ),
            ("echo $((1 + $(rm x)))", &["rm x", "echo $((1 + $(rm x)))"]),
            ("echo $((1 + 2))", &["echo $((1 + 2))"]),
            ("{ rm -rf v3; }", &["rm -rf v3"]),
            ("if true; then rm -rf v4; fi", &["true", "rm -rf v4"]),
            (
                "if ! ls; then :; elif rm a; then :; else rm b; fi",
                &["ls", ":", "rm a", "rm b"],
            ),
            ("for d in x; do rm -rf v5; done", &["rm -rf v5"]),
            ("for d in $(rm y); do :; done", &["rm y", ":"]),
            ("while true; do rm z; done < list", &["true", "rm z"]),
            ("until false; do rm z; done", &["false", "rm z"]),
            ("time -p rm t", &["rm t"]),
            ("! rm n", &["rm n"]),
            ("f() { rm a; }; f", &["f", "rm a"]),
            ("function g { rm b; }", &["rm b"]),
            ("case $x in a) rm y;; b|c) ls;; esac", &["rm y", "ls"]),
            (
                "case \"$x\" in\n  (a) rm y ;;\n  *) echo $(rm w) ;;\nesac",
                &["rm y", "rm w", "echo $(rm w)"],
            ),
            ("case x in", &[]),
            ("cat <<EOF\n$(rm h)\nEOF", &["rm h", "cat <<EOF"]),
            ("cat <<'EOF'\n$(rm h)\nEOF", &["cat <<'EOF'"]),
            ("FOO=1 rm x", &["FOO=1 rm x", "rm x"]),
            (
                "FOO=\"a b\" BAR=2 rm x",
                &["FOO=\"a b\" BAR=2 rm x", "rm x"],
            ),
            ("command rm x", &["command rm x", "rm x"]),
            ("exec rm x", &["exec rm x", "rm x"]),
            ("nohup rm x &", &["nohup rm x", "rm x"]),
            ("sudo -u root rm x", &["sudo -u root rm x", "rm x"]),
            ("env -i FOO=1 rm x", &["env -i FOO=1 rm x", "rm x"]),
            ("ls | xargs -0 rm -f", &["ls", "xargs -0 rm -f", "rm -f"]),
            (
                "timeout -s KILL 5 rm x",
                &["timeout -s KILL 5 rm x", "rm x"],
            ),
            (
                "A=1 sudo env B=2 nohup rm x",
                &[
                    "A=1 sudo env B=2 nohup rm x",
                    "sudo env B=2 nohup rm x",
                    "env B=2 nohup rm x",
                    "nohup rm x",
                    "rm x",
                ],
            ),
            ("bash -c 'rm -rf q'", &["rm -rf q", "bash -c 'rm -rf q'"]),
            (
                "sh -ec \"ls && rm q\"",
                &["ls", "rm q", "sh -ec \"ls && rm q\""],
            ),
            ("eval 'rm e'", &["rm e", "eval 'rm e'"]),
            (
                "find . -name '*.o' -exec rm {} \\;",
                &["rm {}", "find . -name '*.o' -exec rm {} \\;"],
            ),
            ("sudo", &["sudo"]),
            ("env", &["env"]),
            ("fi", &[]),
            ("}", &[]),
        ];
        for (input, expected) in cases {
            let p = bash_permission_patterns(input);
            assert_eq!(p.patterns, *expected, "input: {input:?}");
            assert_eq!(
                p.patterns.is_empty(),
                p.always.is_empty(),
                "input: {input:?}"
            );
        }
    }

    #[test]
    fn rm_deny_reaches_every_variant() {
        for cmd in [
            "echo $(rm -rf v1)",
            "echo `rm -rf v2`",
            "{ rm -rf v3; }",
            "if true; then rm -rf v4; fi",
            "for d in x; do rm -rf v5; done",
            "while :; do rm -rf v; break; done",
            "case a in a) rm -rf v;; esac",
            "cat <(rm -rf v)",
            "FOO=1 rm -rf v",
            "command rm -rf v",
            "exec rm -rf v",
            "nohup rm -rf v",
            "sudo rm -rf v",
            "env rm -rf v",
            "echo v | xargs rm -rf",
            "bash -c 'rm -rf v'",
            "x=$(rm -rf v)",
            "(rm -rf v)",
            "echo \"${X:-$(rm -rf v)}\"",
        ] {
            let p = bash_permission_patterns(cmd);
            assert!(rm_rule_hits(&p), "{cmd:?} escaped: {:?}", p.patterns);
        }
    }

    #[test]
    fn always_covers_every_pattern() {
        let p = bash_permission_patterns("sudo rm -rf x && echo $(git status -s)");
        assert_eq!(
            p.patterns,
            vec![
                "sudo rm -rf x",
                "rm -rf x",
                "git status -s",
                "echo $(git status -s)"
            ]
        );
        assert_eq!(
            p.always,
            vec!["sudo rm *", "rm *", "git status *", "echo *"]
        );
        let p = bash_permission_patterns("FOO=1 cd a && rm b");
        assert_eq!(p.patterns, vec!["rm b"]);
        assert_eq!(p.path_args, vec!["a", "a/b"]);
    }

    #[test]
    fn nested_cd_does_not_move_outer_commands() {
        let p = bash_permission_patterns("cd a && echo $(cd b && rm c) && rm d");
        assert_eq!(p.path_args, vec!["a", "a/b", "a/b/c", "a/d"]);
        let p = bash_permission_patterns("sudo rm /etc/x");
        assert_eq!(p.path_args, vec!["/etc/x"]);
    }

    #[test]
    fn odd_input_does_not_panic() {
        // Deterministic pseudo-random strings over shell metacharacters.
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
            let _ = bash_permission_patterns(&s);
            let _ = split_commands(&s);
        }
        for s in [
            "$(", "`", "<(", "\"$(\"", "\"$\"(", "$((", "$((1)", "case", "esac)", "\\",
        ] {
            let _ = bash_permission_patterns(s);
        }
        let deep = format!("{}rm x{}", "$(".repeat(200), ")".repeat(200));
        let _ = bash_permission_patterns(&deep);
    }

    #[test]
    fn tokenizes_quotes() {
        let w = tokenize(r#"a "b c" 'd e' f\ g "$X""#);
        let texts: Vec<&str> = w.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, vec!["a", "b c", "d e", "f g", "$X"]);
        assert!(w[4].dynamic);
        assert!(!w[1].dynamic);
    }
}
