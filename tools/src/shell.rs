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
    let chars: Vec<char> = command.chars().collect();
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut i = 0usize;
    let mut pending_heredocs: Vec<(String, bool)> = Vec::new();
    let push = |cur: &mut String, out: &mut Vec<String>| {
        let t = cur.trim();
        if !t.is_empty() {
            out.push(t.to_string());
        }
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
                let delim: String = chars[start..j]
                    .iter()
                    .filter(|c| !matches!(c, '\'' | '"' | '\\'))
                    .collect();
                if !delim.is_empty() {
                    pending_heredocs.push((delim, strip_tabs));
                }
                cur.extend(&chars[i..j]);
                i = j;
            }
            '\n' => {
                push(&mut cur, &mut out);
                i += 1;
                for (delim, strip_tabs) in std::mem::take(&mut pending_heredocs) {
                    // Skip body lines until the delimiter line.
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
                    }
                }
            }
            ';' | '(' | ')' => {
                push(&mut cur, &mut out);
                i += 1;
            }
            '|' => {
                push(&mut cur, &mut out);
                // `||` and `|&` are one operator.
                i += if matches!(chars.get(i + 1), Some('|') | Some('&')) {
                    2
                } else {
                    1
                };
            }
            '&' => {
                let prev = cur.chars().last();
                let next = chars.get(i + 1).copied();
                if next == Some('&') {
                    push(&mut cur, &mut out);
                    i += 2;
                } else if matches!(prev, Some('>') | Some('<')) || next == Some('>') {
                    // Redirection: `2>&1`, `&>file`, `<&3`.
                    cur.push(c);
                    i += 1;
                } else {
                    push(&mut cur, &mut out);
                    i += 1;
                }
            }
            _ => {
                cur.push(c);
                i += 1;
            }
        }
    }
    push(&mut cur, &mut out);
    out
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
/// sub-command (full text), `always` = arity prefix + `" *"`, plus the literal path
/// arguments of file commands for the `external_directory` check.
///
/// Path arguments after a literal `cd DIR` are prefixed with `DIR` (OpenCode resolves them
/// all against the fixed working directory; following the `cd` is stricter), so
/// `cd x && rm -rf y` → patterns `["rm -rf y"]`, always `["rm *"]`, path_args
/// `["x", "x/y"]` (cd gives no pattern; see [`CD_COMMANDS`]). After a `cd` whose target is
/// unknown (`cd`, `cd -`, `cd $X`, `popd`) arguments are again taken as given.
pub fn bash_permission_patterns(command: &str) -> BashPermissions {
    let mut res = BashPermissions::default();
    // Directory changed by earlier literal `cd`s, relative to the working directory (or
    // absolute / `~`-based).
    let mut cd_prefix: Option<String> = None;
    for seg in split_commands(command) {
        let words = command_words(&seg);
        let Some(first) = words.first() else {
            continue;
        };
        let name = first
            .text
            .rsplit('/')
            .next()
            .unwrap_or(&first.text)
            .to_string();
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
                cd_prefix = if literal && (name == "cd" || name == "chdir" || name == "pushd") {
                    args.into_iter().next()
                } else {
                    None
                };
            }
        }
        if is_cd {
            continue;
        }
        if !res.patterns.contains(&seg) {
            res.patterns.push(seg.clone());
        }
        let texts: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
        let always = format!("{} *", arity_prefix(&texts).join(" "));
        if !res.always.contains(&always) {
            res.always.push(always);
        }
    }
    res
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
        assert_eq!(p.always, vec!["docker compose up *"]);
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

    #[test]
    fn tokenizes_quotes() {
        let w = tokenize(r#"a "b c" 'd e' f\ g "$X""#);
        let texts: Vec<&str> = w.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, vec!["a", "b c", "d e", "f g", "$X"]);
        assert!(w[4].dynamic);
        assert!(!w[1].dynamic);
    }
}
