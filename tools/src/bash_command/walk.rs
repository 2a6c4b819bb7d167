//! Walking the syntax tree: lists, pipelines, compound commands, expansions, redirections.

use super::*;

impl Walker {
    pub(super) fn opaque(&mut self, reason: String) {
        if !self.out.opaque.contains(&reason) {
            self.out.opaque.push(reason);
        }
    }

    /// Parse and walk one script (the whole command line, or a script run by a command).
    pub(super) fn script(&mut self, text: &str, depth: usize) {
        if depth > MAX_NESTING {
            self.opaque(format!(
                "scripts nested more than {MAX_NESTING} levels deep are not analysed: {}",
                q(text)
            ));
            return;
        }
        let mut parser = Parser::new();
        if parser
            .set_language(&tree_sitter_bash::LANGUAGE.into())
            .is_err()
        {
            self.opaque("the bash parser could not be loaded".into());
            return;
        }
        let joined = join_continuations(text);
        let text = joined.as_str();
        let Some(tree) = parser.parse(text, None) else {
            self.opaque(format!("the command could not be parsed: {}", q(text)));
            return;
        };
        let root = tree.root_node();
        if root.has_error() {
            let at = first_error(root)
                .map(|n| q(&text[n.byte_range()]))
                .unwrap_or_else(|| q(text));
            self.opaque(format!(
                "the command is not valid bash (parse error near {at})"
            ));
        }
        self.walk(root, text, depth);
    }

    pub(super) fn walk(&mut self, node: Node<'_>, src: &str, depth: usize) {
        if self.level >= MAX_TREE_DEPTH {
            self.opaque(format!(
                "the command nests more than {MAX_TREE_DEPTH} levels deep and is not analysed"
            ));
            return;
        }
        self.level += 1;
        self.walk_node(node, src, depth);
        self.level -= 1;
    }

    pub(super) fn walk_node(&mut self, node: Node<'_>, src: &str, depth: usize) {
        match node.kind() {
            "command" => self.command(node, src, depth),
            "command_substitution" if src[node.byte_range()].starts_with('`') => {
                // Inside backticks `\\`, `\``, `\$` stand for the character itself before the
                // body is parsed (bash "Command Substitution"); the tree does not do that, so
                // the body is parsed again after undoing them.
                let text = &src[node.byte_range()];
                let body = text[1..].strip_suffix('`').unwrap_or(&text[1..]);
                let saved = self.cd.clone();
                self.script(&unescape_backtick(body), depth + 1);
                self.cd = saved;
            }
            "subshell" | "command_substitution" | "process_substitution" | "pipeline" => {
                // A child process: its `cd` does not move what comes after.
                let saved = self.cd.clone();
                self.children(node, src, depth);
                self.cd = saved;
                self.cd_ok = None;
            }
            "function_definition" => {
                // The body runs when the function is called, in the calling shell: a body
                // that changes directory leaves every later directory unknown.
                let saved = self.cd.clone();
                let seen = self.cd_seen;
                self.children(node, src, depth);
                self.cd = saved;
                self.cd_ok = None;
                if self.cd_seen != seen {
                    let text = collapse(&src[node.byte_range()]);
                    self.cd = Cd::Unknown(text);
                }
            }
            "list" => self.list(node, src, depth),
            "heredoc_redirect" => {
                self.heredoc(node, src, depth);
                self.children(node, src, depth);
            }
            "redirected_statement" => {
                // The tree hangs `a && b > f` as `(a && b) > f`; bash redirects `b` only,
                // in the directory `b` runs in.
                let kids = fielded(node);
                let mut body_was_list = false;
                for (f, k) in &kids {
                    if *f == Some("body") {
                        body_was_list = k.kind() == "list";
                        self.walk(*k, src, depth);
                    }
                }
                let after = self.cd.clone();
                let ok = self.cd_ok.clone();
                if body_was_list {
                    self.cd = self.last_cmd_cd.clone();
                }
                for (f, k) in &kids {
                    if *f != Some("body") {
                        self.walk(*k, src, depth);
                    }
                }
                self.cd = after;
                self.cd_ok = ok;
            }
            "negated_command" => {
                self.children(node, src, depth);
                self.cd_ok = None;
            }
            "file_redirect" => self.redirect(node, src, depth),
            "variable_assignment" => self.assignment(node, src, depth),
            "for_statement" => self.for_loop(node, src, depth),
            "arithmetic_expansion" => {
                self.arith(node, src);
                self.children(node, src, depth);
            }
            "compound_statement" if node.child(0).is_some_and(|c| c.kind() == "((") => {
                self.arith(node, src);
                self.children(node, src, depth);
            }
            "c_style_for_statement" => {
                let kids = fielded(node);
                for (f, k) in kids {
                    if matches!(f, Some("initializer" | "condition" | "update")) {
                        self.arith(k, src);
                    }
                }
                self.children(node, src, depth);
            }
            "subscript" => {
                if let Some(ix) = node.child_by_field_name("index") {
                    self.arith(ix, src);
                }
                self.children(node, src, depth);
            }
            "expansion" => {
                self.expansion(node, src);
                self.children(node, src, depth);
            }
            "test_command" => {
                self.test_command(node, src);
                self.children(node, src, depth);
            }
            "declaration_command" | "unset_command" => {
                let text = collapse(&src[node.byte_range()]);
                let mut cur = node.walk();
                let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
                let words: Vec<(Node<'_>, Word)> = kids
                    .iter()
                    .skip(1)
                    .filter(|k| k.is_named() && k.kind() != "comment")
                    .map(|k| {
                        let w = if k.kind() == "variable_name" {
                            Word::plain(&src[k.byte_range()])
                        } else {
                            word(*k, src)
                        };
                        (*k, w)
                    })
                    .collect();
                let arrays = words.iter().any(|(k, w)| {
                    k.kind() != "variable_assignment"
                        && w.lit
                            .as_deref()
                            .is_some_and(|t| t.starts_with(['-', '+']) && t.contains(['a', 'A']))
                });
                if node.kind() == "unset_command" {
                    let args: Vec<Word> = words.into_iter().map(|(_, w)| w).collect();
                    self.evaluated_args("unset", &args, &text, depth);
                } else {
                    let mut opts_done = false;
                    for (k, w) in &words {
                        if k.kind() == "variable_assignment" {
                            opts_done = true;
                            // `declare x[\$\(cmd\)]=1`: the builtin gets the subscript after
                            // quote removal and evaluates it (a plain assignment does not).
                            if let Some(n) = k.child_by_field_name("name") {
                                let name =
                                    unescape_word(&src[n.byte_range()].replace(['\'', '"'], ""));
                                if names::holds_code(&name) {
                                    self.declaration_operand(
                                        &Word::plain(&name),
                                        arrays,
                                        &text,
                                        depth,
                                    );
                                }
                            }
                            if let Some(v) = k
                                .child_by_field_name("value")
                                .filter(|v| v.kind() != "array")
                            {
                                // (`x=(…)` as written is an array assignment the tree shows
                                // and walks; a string value is parsed again.)
                                let v = word(v, src);
                                self.declaration_value(&v, arrays, &text);
                            }
                            continue;
                        }
                        if w.lit.as_deref() == Some("-n") {
                            // `declare -n r=…`: a name reference, whose target is only known
                            // when it runs.
                            self.opaque(format!("{} declares a name reference", q(&text)));
                        }
                        let t = w.text();
                        if !opts_done && w.lit.is_some() && t.starts_with(['-', '+']) {
                            opts_done = t == "--";
                            continue;
                        }
                        opts_done = true;
                        self.declaration_operand(w, arrays, &text, depth);
                    }
                }
                self.children(node, src, depth);
            }
            _ => self.children(node, src, depth),
        }
    }

    /// A here-document whose delimiter is not quoted expands `$(…)`, backticks and `${…}` in
    /// its body, which the tree does not always show (`<<-`, backticks): the body is parsed
    /// again as the inside of a double-quoted string. A body that will not parse is opaque.
    pub(super) fn heredoc(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut cur = node.walk();
        let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
        let quoted = kids
            .iter()
            .find(|k| k.kind() == "heredoc_start")
            .is_some_and(|k| src[k.byte_range()].contains(['\'', '"', '\\']));
        if quoted {
            return;
        }
        let Some(body) = kids.iter().find(|k| k.kind() == "heredoc_body") else {
            return;
        };
        let text = &src[body.byte_range()];
        if !(text.contains("$(") || text.contains('`') || text.contains("${")) {
            return;
        }
        let before = self.out.opaque.len();
        let saved = self.cd.clone();
        // An assignment records no command of its own; its value's substitutions are walked.
        self.script(
            &format!("__heredoc=\"{}\"", text.replace('"', "\\\"")),
            depth + 1,
        );
        self.cd = saved;
        if self.out.opaque.len() > before {
            self.opaque(format!(
                "the here-document of {} expands text troupe could not parse",
                q(&src[node.byte_range()])
            ));
        }
    }

    /// `a && b`, `a || b`: `b` runs in the directory `a` left when it succeeded (`&&`) or
    /// failed (`||`); afterwards either is possible.
    pub(super) fn list(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut cur = node.walk();
        let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
        let op = kids
            .iter()
            .find(|k| !k.is_named() && matches!(k.kind(), "&&" | "||"))
            .map(|k| k.kind());
        let (Some(op), [left, .., right]) = (op, kids.as_slice()) else {
            self.children(node, src, depth);
            return;
        };
        self.cd_ok = None;
        self.walk(*left, src, depth);
        let any_left = self.cd.clone();
        let ok_left = self.cd_ok.take().unwrap_or_else(|| any_left.clone());
        if op == "&&" {
            self.cd = ok_left.clone();
        }
        self.walk(*right, src, depth);
        let any_right = self.cd.clone();
        let ok_right = self.cd_ok.take().unwrap_or_else(|| any_right.clone());
        self.cd = Cd::union(&any_left, &any_right);
        self.cd_ok = Some(if op == "&&" {
            ok_right
        } else {
            Cd::union(&ok_left, &ok_right)
        });
    }

    /// `NAME=value` (alone, before a command, or in `export`/`declare`/`local`): a variable
    /// that makes programs run other code is opaque; a value holding subscript code is
    /// opaque; a path-like literal value is a path the command touches.
    pub(super) fn assignment(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let text = collapse(&src[node.byte_range()]);
        let name_node = node.child_by_field_name("name");
        let name = name_node
            .map(|n| match n.kind() {
                "subscript" => n
                    .child_by_field_name("name")
                    .map(|x| src[x.byte_range()].to_string())
                    .unwrap_or_default(),
                _ => src[n.byte_range()].to_string(),
            })
            .unwrap_or_default();
        if bash_rules::risky_var(&name) {
            self.opaque(format!(
                "{} sets `{name}`, which can make programs run other code or read other \
                 configuration",
                q(&text)
            ));
        }
        let state = match node.child_by_field_name("value") {
            None => Var::Literal,
            Some(v) => {
                let w = word(v, src);
                if holds_subscript_code(&w) {
                    self.opaque(format!(
                        "{} stores code that arithmetic evaluation would run",
                        q(&text)
                    ));
                }
                if let Some(l) = &w.lit {
                    self.path(&w, false, &text, false);
                    // A literal holding code runs it wherever bash expands it again (an
                    // array declaration, arithmetic).
                    if names::holds_code(l) {
                        Var::Unknown
                    } else {
                        Var::Literal
                    }
                } else if v.kind() == "arithmetic_expansion" {
                    // `$(( … ))` is always a number.
                    Var::Literal
                } else {
                    Var::Unknown
                }
            }
        };
        if !name.is_empty() {
            self.vars.insert(name, state);
        }
        self.children(node, src, depth);
    }

    /// `for NAME in WORDS`: NAME holds each word (known when they are literals, which are
    /// paths the command touches when path-like).
    pub(super) fn for_loop(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let text = collapse(&src[node.byte_range()]);
        let mut known = true;
        let kids = fielded(node);
        for (f, k) in &kids {
            if *f == Some("value") {
                let w = word(*k, src);
                if w.lit.is_some() {
                    self.path(&w, false, &text, false);
                } else if !(w.raw.starts_with("$(seq ") || w.raw.starts_with("`seq ")) {
                    // (`$(seq 1 5)` gives numbers.)
                    known = false;
                }
            }
        }
        if let Some(v) = node.child_by_field_name("variable") {
            let name = src[v.byte_range()].to_string();
            if bash_rules::risky_var(&name) {
                self.opaque(format!(
                    "{} sets `{name}`, which can make programs run other code",
                    q(&text)
                ));
            }
            self.vars
                .insert(name, if known { Var::Literal } else { Var::Unknown });
        }
        self.children(node, src, depth);
    }

    /// An arithmetic context (`$(( ))`, `(( ))`, a subscript, `[[ a -eq b ]]`): bash
    /// evaluates variables' values as expressions, and a subscript in them runs `$( )`. A
    /// variable whose value is unknown, quoted text or a command's output is opaque.
    pub(super) fn arith(&mut self, node: Node<'_>, src: &str) {
        let text = collapse(&src[node.byte_range()]);
        let mut stack = vec![node];
        let mut steps = 0usize;
        while let Some(n) = stack.pop() {
            steps += 1;
            if steps > 10_000 {
                break;
            }
            match n.kind() {
                "string" | "raw_string" | "ansi_c_string" | "translated_string" => {
                    self.opaque(format!(
                        "quoted text in the arithmetic {} is evaluated as an expression",
                        q(&text)
                    ));
                    return;
                }
                "command_substitution" | "process_substitution" => {
                    self.opaque(format!(
                        "a command's output is evaluated as an arithmetic expression in {}",
                        q(&text)
                    ));
                    return;
                }
                "variable_name" | "word" => {
                    let t = &src[n.byte_range()];
                    if self.vars.get(t) == Some(&Var::Unknown) {
                        self.opaque(format!(
                            "`{t}`, whose value is only known when it runs, is evaluated as an \
                             arithmetic expression in {}",
                            q(&text)
                        ));
                        return;
                    }
                }
                _ => {}
            }
            let mut cur = n.walk();
            stack.extend(n.children(&mut cur));
        }
    }

    /// `${…}`: `${x@P}` expands the value as a prompt (running `$( )` in it), `${!x}` names
    /// another variable (a subscript in it runs code), offsets are arithmetic, and
    /// `${X:=v}` assigns.
    pub(super) fn expansion(&mut self, node: Node<'_>, src: &str) {
        let text = collapse(&src[node.byte_range()]);
        if (text.contains("$(") || text.contains('`'))
            && !has_descendant(node, "command_substitution")
        {
            // `${x#$(rm d)}`: the tree shows the pattern as a plain word.
            self.opaque(format!(
                "{} holds a command substitution troupe could not parse",
                q(&text)
            ));
        }
        if text.contains("@P") || text.contains("@A") {
            self.opaque(format!(
                "{} expands a value as a prompt or assignment, which can run code",
                q(&text)
            ));
        }
        let mut cur = node.walk();
        let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
        let name = kids
            .iter()
            .find(|k| k.kind() == "variable_name")
            .map(|k| src[k.byte_range()].to_string());
        let indirect = kids.get(1).is_some_and(|k| k.kind() == "!")
            && !text.ends_with("[@]}")
            && !text.ends_with("[*]}")
            && !text.ends_with("*}")
            && !text.ends_with("@}");
        if indirect
            && name
                .as_ref()
                .is_none_or(|n| self.vars.get(n) == Some(&Var::Unknown))
        {
            self.opaque(format!(
                "{} names a variable that is only known when it runs",
                q(&text)
            ));
        }
        if kids.iter().any(|k| matches!(k.kind(), ":=" | "="))
            && let Some(n) = name.as_ref().filter(|n| bash_rules::risky_var(n))
        {
            self.opaque(format!(
                "{} sets `{n}`, which can make programs run other code",
                q(&text)
            ));
        }
        if kids.iter().any(|k| k.kind() == ":") {
            // `${s:off:len}`: offset and length are arithmetic.
            let mut after = false;
            for k in &kids {
                if k.kind() == ":" {
                    after = true;
                } else if after && k.is_named() {
                    self.arith(*k, src);
                }
            }
        }
    }

    /// `[[ … ]]`: `-eq`-style operands are arithmetic, `-v NAME` evaluates a subscript.
    pub(super) fn test_command(&mut self, node: Node<'_>, src: &str) {
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            if matches!(n.kind(), "binary_expression" | "unary_expression") {
                let op = n
                    .child_by_field_name("operator")
                    .map(|o| src[o.byte_range()].to_string())
                    .unwrap_or_default();
                let mut cur = n.walk();
                let kids: Vec<Node<'_>> = n.named_children(&mut cur).collect();
                match op.as_str() {
                    "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge" => {
                        for k in kids.iter().filter(|k| k.kind() != "test_operator") {
                            self.arith(*k, src);
                        }
                    }
                    "-v" | "-R" => {
                        for k in kids.iter().filter(|k| k.kind() != "test_operator") {
                            let w = word(*k, src);
                            if w.lit.is_none() || holds_subscript_code(&w) {
                                self.opaque(format!(
                                    "{} tests a variable name holding code or only known when \
                                     it runs",
                                    q(&src[n.byte_range()])
                                ));
                            }
                        }
                    }
                    _ => {}
                }
            }
            let mut cur = n.walk();
            stack.extend(n.named_children(&mut cur));
        }
    }

    pub(super) fn children(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut cur = node.walk();
        let kids: Vec<Node<'_>> = node.children(&mut cur).collect();
        for k in kids {
            self.walk(k, src, depth);
        }
    }

    /// A `file_redirect` (`>`, `>>`, `&>`, `2>`, `<`, `>&`, …): its target is a path read or
    /// written by the command.
    pub(super) fn redirect(&mut self, node: Node<'_>, src: &str, depth: usize) {
        let mut op = String::new();
        let mut dests: Vec<Node<'_>> = Vec::new();
        let mut cur = node.walk();
        for (i, k) in node.children(&mut cur).enumerate() {
            if node.field_name_for_child(i as u32) == Some("destination") {
                dests.push(k);
            } else if !k.is_named() {
                op.push_str(&src[k.byte_range()]);
            }
        }
        let write = op.contains('>');
        let source = collapse(&src[node.byte_range()]);
        for d in dests {
            // Substitutions inside the target run too.
            self.walk(d, src, depth);
            let w = word(d, src);
            if op.contains('&') && !op.starts_with('&') && !op.ends_with("&>") {
                // `>&2`, `<&0`, `>&-`: duplicates a descriptor (a file name here is a write).
                if w.lit.as_deref().is_some_and(|s| {
                    s == "-" || s.trim_end_matches('-').chars().all(|c| c.is_ascii_digit())
                }) {
                    continue;
                }
            }
            self.path(&w, write, &source, true);
        }
    }
}
