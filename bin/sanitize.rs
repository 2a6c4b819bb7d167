//! Text from outside (model output, tool output, provider error messages) made safe to print
//! on a terminal (issue 24.8): a provider error carrying `ESC]0;…` retitled the terminal and
//! `ESC[2J` cleared it.

use std::borrow::Cow;

/// `s` without terminal control: escape sequences are dropped whole (CSI `ESC [ … final`,
/// OSC/DCS/APC/PM/SOS strings up to BEL or `ESC \`, and two-byte `ESC x`), as are the other
/// C0 controls except newline and tab, DEL, and the C1 controls U+0080–U+009F (8-bit CSI and
/// OSC among them). A carriage return before a newline is kept; a lone one (which would let
/// text overwrite the line) is dropped. Borrowed when nothing had to go.
pub fn terminal_safe(s: &str) -> Cow<'_, str> {
    let clean = |c: char| !(c.is_control() && c != '\n' && c != '\t' && c != '\r') && c != '\u{7f}';
    let lone_cr = s
        .match_indices('\r')
        .any(|(i, _)| !s[i + 1..].starts_with('\n'));
    if s.chars().all(clean) && !lone_cr {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\u{1b}' => match it.next() {
                // CSI: parameters and intermediates, then one final byte in @..~.
                Some('[') => {
                    for d in it.by_ref() {
                        if ('@'..='~').contains(&d) {
                            break;
                        }
                    }
                }
                // String sequences: up to BEL or ST (ESC \).
                Some(']' | 'P' | '_' | '^' | 'X') => skip_string(&mut it),
                // Two-byte sequences (ESC 7, ESC c, …) and a trailing ESC.
                _ => {}
            },
            '\u{9b}' => {
                for d in it.by_ref() {
                    if ('@'..='~').contains(&d) {
                        break;
                    }
                }
            }
            '\u{9d}' | '\u{90}' | '\u{9f}' | '\u{9e}' | '\u{98}' => skip_string(&mut it),
            '\r' if it.peek() == Some(&'\n') => out.push('\r'),
            c if clean(c) && c != '\r' => out.push(c),
            _ => {}
        }
    }
    Cow::Owned(out)
}

fn skip_string(it: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(d) = it.next() {
        match d {
            '\u{7}' | '\u{9c}' => break,
            '\u{1b}' => {
                if it.peek() == Some(&'\\') {
                    it.next();
                }
                break;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(
            terminal_safe("héllo\n\tworld\r\n"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn provider_error_with_escapes() {
        // The input: a title change and a screen clear inside an error message.
        let msg = "bad gateway\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[1;31mred\u{1b}[0m done";
        assert_eq!(terminal_safe(msg), "bad gatewayred done");
        // OSC ended by ST, 8-bit CSI and OSC, two-byte ESC, lone CR, BEL, DEL, backspace.
        let msg =
            "a\u{1b}]8;;http://x\u{1b}\\b\u{9b}2Jc\u{9d}0;t\u{7}d\u{1b}ce\rf\u{7}\u{7f}\u{8}g";
        assert_eq!(terminal_safe(msg), "abcdefg");
        // A trailing lone ESC (a sequence split across deltas) is dropped.
        assert_eq!(terminal_safe("end\u{1b}"), "end");
        assert_eq!(terminal_safe("x\r\ny"), "x\r\ny");
    }
}
