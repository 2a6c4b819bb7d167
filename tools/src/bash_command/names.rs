//! Arguments bash evaluates as variable names or arithmetic, where a subscript runs code:
//! `let 'x[$(cmd)]=1'`, `unset 'x[$(cmd)]'`, `test -v 'x[$(cmd)]'`, `printf -v`, `read`,
//! `mapfile`, `wait -p`, `getopts`, the declaration builtins (`declare`, `typeset`, `local`,
//! `export`, `readonly`, whose quoted `x=(…)` values are parsed again as array assignments),
//! `compgen -W` (its word list is expanded) and `fc` (which runs commands from the history).
//!
//! Source: bash(1) "Arrays" (a subscript is expanded and evaluated when the name is used),
//! "ARITHMETIC EVALUATION", and the builtins' descriptions; checked against bash 5.2, where
//! each of the forms above ran the command in the subscript or value.

use super::*;

/// The declaration builtins: their operands are `NAME[=VALUE]`.
pub(super) const DECLARATION_BUILTINS: &[&str] =
    &["declare", "typeset", "local", "export", "readonly"];

/// Text that runs a command when bash expands it again: `$(`, a backtick, or `${` (whose
/// `@P` transformation or default value can run one).
pub(super) fn holds_code(s: &str) -> bool {
    s.contains("$(") || s.contains('`') || s.contains("${")
}

/// The name part of `NAME[SUB]=VALUE` (up to the first `=` outside brackets) and the value.
fn split_assignment(s: &str) -> (&str, Option<&str>) {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            '=' if depth <= 0 => {
                let name = s[..i].strip_suffix('+').unwrap_or(&s[..i]);
                return (name, Some(&s[i + 1..]));
            }
            _ => {}
        }
    }
    (s, None)
}

impl Walker {
    /// Why the variable name `w` (as a builtin receives it) may run code when bash evaluates
    /// it: a subscript that is not a plain number, `@`, `*` or an identifier whose value is
    /// known, or a name only known when it runs. `None` for a plain name.
    pub(super) fn name_risk(&self, w: &Word) -> Option<String> {
        let Some(lit) = w.lit.as_deref() else {
            if self.bare_known(w) {
                return None;
            }
            return Some(format!(
                "{} is a variable name only known when it runs (a subscript in it would run code)",
                q(&w.raw)
            ));
        };
        let open = lit.find('[')?;
        let close = lit.rfind(']').filter(|c| *c > open).unwrap_or(lit.len());
        let sub = lit[open + 1..close].trim();
        let digits = sub.strip_prefix('-').unwrap_or(sub);
        let plain = matches!(sub, "@" | "*")
            || (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()))
            || (sub.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && sub.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && self.vars.get(sub) != Some(&Var::Unknown));
        (!plain).then(|| {
            format!(
                "{} has a subscript holding code or an expression (`{sub}`), which bash expands \
                 and evaluates",
                q(lit)
            )
        })
    }

    /// A word that is one expansion of a variable whose value this command assigned from a
    /// literal (`x=a; unset "$x"`).
    fn bare_known(&self, w: &Word) -> bool {
        let raw = w.raw.trim_matches('"');
        raw.strip_prefix("${")
            .and_then(|r| r.strip_suffix('}'))
            .or_else(|| raw.strip_prefix('$'))
            .is_some_and(|n| self.vars.get(n) == Some(&Var::Literal))
    }

    fn name_opaque(&mut self, w: &Word, source: &str, depth: usize) {
        let Some(why) = self.name_risk(w) else { return };
        self.opaque(format!("{} evaluates a variable name: {why}", q(source)));
        // The subscript is expanded like double-quoted text: the commands in it are walked
        // too, so a rule that denies them decides (`unset 'a[$(rm d)]'` is denied by `rm *`).
        if let Some(lit) = w.lit.as_deref()
            && let Some(open) = lit.find('[')
            && holds_code(lit)
        {
            let close = lit.rfind(']').filter(|c| *c > open).unwrap_or(lit.len());
            let sub = &lit[open + 1..close];
            let saved = self.cd.clone();
            self.script(
                &format!("__subscript=\"{}\"", sub.replace('"', "\\\"")),
                depth + 1,
            );
            self.cd = saved;
        }
    }

    /// One operand of a declaration builtin (`NAME`, `NAME=VALUE`): the name is checked as
    /// above; a value holding code is parsed again when the name is an array (`declare -a
    /// x='($(cmd))'`); a computed value is, under `-a`/`-A`.
    pub(super) fn declaration_operand(
        &mut self,
        w: &Word,
        arrays: bool,
        source: &str,
        depth: usize,
    ) {
        match w.lit.as_deref() {
            Some(lit) => {
                let (name, value) = split_assignment(lit);
                self.name_opaque(&Word::plain(name), source, depth);
                if let Some(v) = value.filter(|v| holds_code(v)) {
                    self.opaque(format!(
                        "{} gives {} a value holding code, which bash parses again for an array",
                        q(source),
                        q(v)
                    ));
                }
            }
            None => {
                let name_end = w.skel.find('=').unwrap_or(w.skel.len());
                let name = &w.skel[..name_end];
                if name.contains('\0') {
                    self.name_opaque(w, source, depth);
                } else {
                    self.name_opaque(&Word::plain(name), source, depth);
                    let value = &w.skel[name_end..];
                    if holds_code(value) || (arrays && value.contains('\0')) {
                        self.opaque(format!(
                            "{} gives an array a value only known when it runs, which bash \
                             parses again (code in it runs): {}",
                            q(source),
                            q(&w.raw)
                        ));
                    }
                }
            }
        }
    }

    /// The value of a declaration builtin's `NAME=VALUE` operand as the tree shows it (a
    /// `variable_assignment`): see [`Walker::declaration_operand`].
    pub(super) fn declaration_value(&mut self, v: &Word, arrays: bool, source: &str) {
        let held = match &v.lit {
            Some(l) => holds_code(l),
            None => holds_code(&v.skel) || arrays,
        };
        if held {
            self.opaque(format!(
                "{} gives {} a value bash may parse again as an array assignment (code in it \
                 runs)",
                q(source),
                q(&v.raw)
            ));
        }
    }

    /// `let EXPR…`: each argument is an arithmetic expression, analysed like `(( EXPR ))`
    /// (commands in its subscripts are found, unknown values are opaque); text holding code
    /// is opaque in any case.
    pub(super) fn let_args(&mut self, args: &[Word], source: &str, depth: usize) {
        for w in args {
            let text = match &w.lit {
                Some(l) => l.clone(),
                None => {
                    // Expansions give text that is evaluated again: a command's output or a
                    // value only known when it runs may hold code.
                    let raw = w.raw.replace("$((", "");
                    if raw.contains("$(") || raw.contains('`') {
                        self.opaque(format!(
                            "{} evaluates a command's output as arithmetic: {}",
                            q(source),
                            q(&w.raw)
                        ));
                    }
                    if self.expands_unknown(&w.raw) {
                        self.opaque(format!(
                            "{} evaluates a value only known when it runs as arithmetic: {}",
                            q(source),
                            q(&w.raw)
                        ));
                    }
                    w.skel.replace('\0', "0")
                }
            };
            if holds_code(&text) {
                self.opaque(format!(
                    "{} evaluates {} as arithmetic, where a subscript runs code",
                    q(source),
                    q(&text)
                ));
            }
            let saved = self.cd.clone();
            self.script(&format!("(( {text} ))"), depth + 1);
            self.cd = saved;
        }
    }

    /// Whether `raw` expands a variable whose value is only known when it runs (assigned
    /// from a command, read, or a positional parameter).
    fn expands_unknown(&self, raw: &str) -> bool {
        let b = raw.as_bytes();
        let mut i = 0usize;
        while i < b.len() {
            if b[i] == b'$' {
                let mut j = i + 1;
                if b.get(j) == Some(&b'{') {
                    j += 1;
                }
                let start = j;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                    j += 1;
                }
                let name = &raw[start..j];
                if name.starts_with(|c: char| c.is_ascii_digit())
                    || matches!(b.get(start), Some(b'@' | b'*'))
                    || self.vars.get(name) == Some(&Var::Unknown)
                {
                    return true;
                }
                i = j.max(i + 1);
            } else {
                i += 1;
            }
        }
        false
    }

    /// Builtins that evaluate some of their arguments as variable names or arithmetic (see
    /// the module docs).
    pub(super) fn evaluated_args(&mut self, name: &str, args: &[Word], source: &str, depth: usize) {
        // Short options: (letters taking a value, letters whose value is a name).
        let (values, name_letters): (&str, &str) = match name {
            "read" => ("adinNptu", "a"),
            "mapfile" | "readarray" => ("dnOsuCc", ""),
            "wait" => ("p", "p"),
            "printf" => ("v", "v"),
            "unset" => ("", ""),
            "getopts" => ("", ""),
            "let" => {
                let ops: Vec<Word> = args.iter().filter(|w| w.text() != "--").cloned().collect();
                self.let_args(&ops, source, depth);
                return;
            }
            "test" | "[" => {
                for (i, w) in args.iter().enumerate() {
                    if matches!(w.text(), "-v" | "-R")
                        && let Some(n) = args.get(i + 1)
                    {
                        self.name_opaque(n, source, depth);
                    }
                }
                return;
            }
            "compgen" | "complete" => {
                for (i, w) in args.iter().enumerate() {
                    let t = w.text();
                    let list = if t == "-W" {
                        args.get(i + 1).cloned()
                    } else if t.starts_with('-') && !t.starts_with("--") && t.contains('W') {
                        let at = t.find('W').unwrap_or(0);
                        if at + 1 < t.len() {
                            Some(w.part(&t[at + 1..]))
                        } else {
                            args.get(i + 1).cloned()
                        }
                    } else {
                        None
                    };
                    if let Some(l) = list
                        && (l.lit.is_none() || holds_code(l.text()))
                    {
                        self.opaque(format!(
                            "{} expands the word list {}, which can run code",
                            q(source),
                            q(&l.raw)
                        ));
                    }
                }
                return;
            }
            "fc" if !args.iter().any(|w| {
                let t = w.text();
                t.starts_with('-') && !t.starts_with("--") && t.contains('l')
            }) =>
            {
                self.opaque(format!(
                    "{} runs commands from the history or an editor",
                    q(source)
                ));
                return;
            }
            n if DECLARATION_BUILTINS.contains(&n) => {
                let arrays = args.iter().any(|w| {
                    let t = w.text();
                    (t.starts_with('-') || t.starts_with('+')) && t.contains(['a', 'A'])
                });
                let mut opts_done = false;
                for w in args {
                    let t = w.text();
                    if !opts_done && (t.starts_with('-') || t.starts_with('+')) && w.lit.is_some() {
                        if t == "--" {
                            opts_done = true;
                        }
                        continue;
                    }
                    opts_done = true;
                    self.declaration_operand(w, arrays, source, depth);
                }
                return;
            }
            _ => return,
        };
        let mut names: Vec<Word> = Vec::new();
        let mut operands: Vec<&Word> = Vec::new();
        let mut i = 0usize;
        let mut opts_done = false;
        while i < args.len() {
            let w = &args[i];
            let t = w.text();
            if !opts_done && t == "--" {
                opts_done = true;
                i += 1;
                continue;
            }
            if !opts_done && t.starts_with('-') && t.len() > 1 {
                let body: Vec<char> = t[1..].chars().collect();
                for (ci, c) in body.iter().enumerate() {
                    if values.contains(*c) {
                        let rest: String = body[ci + 1..].iter().collect();
                        let v = if rest.is_empty() {
                            i += 1;
                            args.get(i).cloned()
                        } else {
                            Some(w.part(&rest))
                        };
                        if name_letters.contains(*c)
                            && let Some(v) = v
                        {
                            names.push(v);
                        }
                        break;
                    }
                }
                i += 1;
                continue;
            }
            if name == "printf" || name == "wait" {
                break;
            }
            operands.push(w);
            i += 1;
        }
        match name {
            "read" | "mapfile" | "readarray" | "unset" => {
                names.extend(operands.into_iter().cloned())
            }
            "getopts" => names.extend(operands.get(1).map(|w| (*w).clone())),
            _ => {}
        }
        for n in &names {
            self.name_opaque(n, source, depth);
        }
    }
}
