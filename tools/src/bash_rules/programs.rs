//! What inside a `sed` or `awk` program writes files, reads files or runs commands: loose
//! scanners of the program text that err towards reporting.
//!
//! Sources: GNU sed "Commands", GNU awk "I/O Statements".

/// What a `sed` program does besides editing its stream: `Some(reason)` when a command or
/// flag writes a file (`w`, `W`, `s///w`), reads one (`r`, `R`) or runs a command (`e`,
/// `s///e`). Scans the GNU sed grammar loosely and errs towards reporting.
pub(crate) fn sed_risk(script: &str) -> Option<&'static str> {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0usize;
    let n = chars.len();
    let skip_ws = |i: &mut usize| {
        while *i < n && (chars[*i].is_whitespace() || chars[*i] == ';') {
            *i += 1;
        }
    };
    while i < n {
        skip_ws(&mut i);
        if i >= n {
            break;
        }
        // Address: numbers, `$`, `/re/`, `\cREc`, `first~step`, `addr1,addr2`, `!`.
        loop {
            if i >= n {
                break;
            }
            let c = chars[i];
            if c.is_ascii_digit() || matches!(c, '$' | ',' | '~' | '+' | '!' | ' ' | '\t') {
                i += 1;
            } else if c == '/' || c == '\\' {
                let delim = if c == '\\' {
                    i += 1;
                    match chars.get(i) {
                        Some(&d) => d,
                        None => break,
                    }
                } else {
                    '/'
                };
                i += 1;
                while i < n && chars[i] != delim {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                // Address flags `I` and `M`.
                while i < n && matches!(chars[i], 'I' | 'M') {
                    i += 1;
                }
            } else {
                break;
            }
        }
        if i >= n {
            break;
        }
        let cmd = chars[i];
        i += 1;
        match cmd {
            'w' | 'W' => return Some("writes a file (`w`)"),
            'r' | 'R' => return Some("reads a file (`r`)"),
            'e' => return Some("runs a command (`e`)"),
            's' | 'y' => {
                let Some(&delim) = chars.get(i) else { break };
                if delim == '\n' || delim == '\\' {
                    return Some("uses an unusual delimiter");
                }
                i += 1;
                for _ in 0..2 {
                    while i < n && chars[i] != delim {
                        if chars[i] == '\\' {
                            i += 1;
                        }
                        i += 1;
                    }
                    i += 1;
                }
                if cmd == 's' {
                    while i < n && !matches!(chars[i], ';' | '\n' | '}') {
                        match chars[i] {
                            'w' | 'W' => return Some("writes a file (`s///w`)"),
                            'e' => return Some("runs a command (`s///e`)"),
                            'r' | 'R' => return Some("reads a file"),
                            _ => {}
                        }
                        i += 1;
                    }
                }
            }
            'a' | 'i' | 'c' => {
                // Text to the end of the line (one-liner GNU form).
                while i < n && chars[i] != '\n' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            ':' | 'b' | 't' | 'T' => {
                while i < n && !matches!(chars[i], ';' | '\n') {
                    i += 1;
                }
            }
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'l' | 'n' | 'N' | 'p' | 'P'
            | 'q' | 'Q' | 'x' | 'z' | 'F' | '#' => {
                if cmd == '#' {
                    while i < n && chars[i] != '\n' {
                        i += 1;
                    }
                } else if matches!(cmd, 'q' | 'Q' | 'l' | 'L') {
                    while i < n && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            _ => return Some("uses a command troupe does not know"),
        }
    }
    None
}

/// What an `awk` program does besides printing: `Some(reason)` when it runs a command
/// (`system(…)`, a pipe into or out of a command) or writes a file (`print > "f"`). Errs
/// towards reporting: a `>` after `print`/`printf` in the same statement counts.
pub(crate) fn awk_risk(program: &str) -> Option<&'static str> {
    if program.contains("system") {
        return Some("runs a command (`system`)");
    }
    if program.replace("||", "").contains('|') {
        return Some("pipes into or out of a command");
    }
    if program.contains("getline") && program.contains('<') {
        return Some("reads a file (`getline <`)");
    }
    if program.contains("@load") || program.contains("@include") {
        return Some("loads an extension");
    }
    for stmt in program.split([';', '\n', '{', '}']) {
        if let Some(at) = stmt.find("print")
            && stmt[at..].contains('>')
        {
            return Some("writes a file (`print >`)");
        }
    }
    None
}
