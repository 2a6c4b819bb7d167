//! Short options with an attached value (`-o../x`, `-xfa.tar`, `-C..`): how getopt splits
//! them, so the value is checked like the spaced spelling (`-o ../x`).

/// The splits of a short-option word `-LETTERS[VALUE]` that may carry an attached value, as
/// (`-L`, value) pairs, best first.
///
/// getopt reads letters left to right and the first letter that takes a value consumes the
/// rest of the word: when `takes(-L)` holds for some letter with text after it, that split is
/// the only one. Otherwise the command's options are unknown, so every split whose value looks
/// like a path is returned (the rest starts with `.`, `/` or `~`, or contains `/` after the
/// first letter): an over-approximation that makes an unknown option's path checked, never
/// skipped. Long options (`--x`), `-` and words without letters give nothing. Letters end at
/// the first character that is not ASCII alphanumeric.
pub(super) fn short_attached(t: &str, takes: &dyn Fn(&str) -> bool) -> Vec<(String, String)> {
    let Some(body) = t.strip_prefix('-').filter(|b| !b.starts_with('-')) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, c) in body.char_indices() {
        if !c.is_ascii_alphanumeric() {
            break;
        }
        let opt = format!("-{c}");
        let rest = &body[i + c.len_utf8()..];
        if rest.is_empty() {
            break;
        }
        if takes(&opt) {
            return vec![(opt, rest.to_string())];
        }
        let path_like = rest.starts_with(['.', '/', '~']) || (i == 0 && rest.contains('/'));
        if path_like {
            out.push((opt, rest.to_string()));
        }
    }
    out
}

/// Short options that name where a command writes (`sort -o FILE`, `cp -t DIR`), attached or
/// not: the value is a written path.
pub(super) fn writes_short(name: &str, opt: &str) -> bool {
    matches!(
        (name, opt),
        ("curl", "-o" | "-c")
            | ("wget", "-O" | "-P" | "-o" | "-a")
            | ("sort", "-o")
            | ("git", "-o")
            | (
                "gcc" | "g++" | "cc" | "c++" | "clang" | "clang++" | "ld" | "rustc" | "as" | "nasm",
                "-o"
            )
            | ("tar" | "bsdtar", "-C")
            | ("unzip", "-d")
            | ("patch", "-o" | "-d" | "-B")
            | ("rsync", "-T")
            | ("cp" | "mv" | "ln" | "install", "-t")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_taking_letter_consumes_the_rest() {
        let takes = |o: &str| o == "-f";
        assert_eq!(
            short_attached("-xfa.tar", &takes),
            vec![("-f".into(), "a.tar".into())]
        );
        assert_eq!(short_attached("-xf", &takes), vec![]);
        assert_eq!(short_attached("--file=x", &takes), vec![]);
        assert_eq!(short_attached("-", &takes), vec![]);
    }

    #[test]
    fn unknown_letters_give_every_path_like_split() {
        let none = |_: &str| false;
        assert_eq!(
            short_attached("-o../x", &none),
            vec![("-o".into(), "../x".into())]
        );
        assert_eq!(
            short_attached("-C..", &none),
            vec![("-C".into(), "..".into())]
        );
        assert!(short_attached("-vo../x", &none).contains(&("-o".into(), "../x".into())));
        assert_eq!(short_attached("-la", &none), vec![]);
        assert_eq!(short_attached("-n5", &none), vec![]);
    }
}
