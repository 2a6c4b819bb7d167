//! Options of the commands the analysis knows: which take a value (`sort -o FILE`), which
//! name where a command writes (`--output=FILE`, `cp -t DIR`), whether a command was given
//! one (`grep -e`), and how getopt splits short options with an attached value (`-o../x`,
//! `-xfa.tar`, `-C..`), so the value is checked like the spaced spelling (`-o ../x`).

use super::*;

/// Long options that by convention name where a program writes (`--target-dir DIR`,
/// `--output=FILE`): their value is a written path for any command.
pub(super) const OUTPUT_OPTIONS: &[&str] = &[
    "--output",
    "--output-file",
    "--outfile",
    "--out-file",
    "--out-dir",
    "--outdir",
    "--output-dir",
    "--target-dir",
    "--log-file",
    "--logfile",
    "--prefix",
    "--destdir",
    "--install-dir",
    "--root",
];

/// Options of the command `name` that take the next word as their value (`sort -o FILE`,
/// `tar -C DIR`, `cut -d /`), for [`Walker::paths_of`]; `args` are the words after the
/// command name (`git format-patch` has its own). Sources: the programs' man pages.
pub(super) fn options_with_value(name: &str, args: &[Word]) -> &'static [&'static str] {
    match name {
        "truncate" => &["-s", "--size", "-r", "--reference"],
        "mkdir" => &["-m", "--mode"],
        "touch" => &["-d", "-t", "-r", "--date", "--reference"],
        "install" => &[
            "-m", "-o", "-g", "-S", "--mode", "--owner", "--group", "--suffix",
        ],
        "cp" | "mv" | "ln" => &["-S", "--suffix"],
        "sed" => &["-e", "-f", "-l", "--expression", "--file", "--line-length"],
        "curl" => &[
            "-o",
            "--output",
            "-d",
            "--data",
            "--data-binary",
            "--data-raw",
            "--data-urlencode",
            "-F",
            "--form",
            "-H",
            "--header",
            "-X",
            "-u",
            "-A",
            "-T",
            "--upload-file",
            "-K",
            "--config",
            "--output-dir",
            "-b",
            "-c",
            "--cookie",
            "--cookie-jar",
            "-e",
            "--referer",
        ],
        "wget" => &[
            "-O",
            "--output-document",
            "-P",
            "--directory-prefix",
            "-o",
            "--output-file",
            "-a",
            "--append-output",
            "-i",
            "--input-file",
        ],
        "sort" => &[
            "-o",
            "--output",
            "-T",
            "--temporary-directory",
            "-k",
            "-t",
            "-S",
        ],
        "gcc" | "g++" | "cc" | "c++" | "clang" | "clang++" | "ld" | "rustc" | "as" | "nasm" => &[
            "-o",
            "-I",
            "-L",
            "-l",
            "-D",
            "-U",
            "-x",
            "--out-dir",
            "-C",
            "--edition",
            "--crate-type",
            "--crate-name",
            "--target",
        ],
        "tar" | "bsdtar" => &[
            "-f",
            "--file",
            "-C",
            "--directory",
            "-T",
            "--files-from",
            "-X",
            "--exclude-from",
            "-g",
            "--listed-incremental",
            "-b",
            "-K",
            "-N",
            "-V",
            "-H",
            "--format",
            "--owner",
            "--group",
            "--mode",
            "--transform",
            "--exclude",
        ],
        "unzip" => &["-d", "-x", "-P"],
        "patch" => &[
            "-o",
            "--output",
            "-d",
            "--directory",
            "-B",
            "--prefix",
            "-i",
            "--input",
            "-p",
            "-r",
            "--reject-file",
            "-D",
            "-F",
            "-z",
            "--suffix",
        ],
        "make" | "gmake" => &[
            "-C",
            "--directory",
            "-f",
            "--file",
            "-I",
            "-j",
            "-l",
            "-o",
            "-W",
        ],
        "grep" | "egrep" | "fgrep" | "rgrep" => {
            &["-f", "--file", "-e", "--regexp", "-m", "-A", "-B", "-C"]
        }
        "cut" => &["-d", "--delimiter", "-f", "-c", "-b"],
        "awk" | "gawk" | "mawk" | "nawk" => &["-f", "--file", "-v", "-F", "-e", "--source", "-i"],
        "zip" => &["-b", "-n", "-t", "-tt", "-P", "-x", "-i"],
        "rsync" => &[
            "-e",
            "--rsh",
            "--rsync-path",
            "--exclude",
            "--include",
            "--filter",
            "-f",
            "--exclude-from",
            "--include-from",
            "--files-from",
            "--backup-dir",
            "--temp-dir",
            "-T",
            "--partial-dir",
            "--log-file",
            "--password-file",
            "--chmod",
            "--chown",
            "--compare-dest",
            "--copy-dest",
            "--link-dest",
        ],
        "scp" => &["-P", "-i", "-o", "-F", "-c", "-l", "-S", "-J"],
        "dd" => &[],
        "git" if args.first().map(Word::text) == Some("format-patch") => {
            &["-o", "--output-directory"]
        }
        _ => &[],
    }
}

/// Whether a word of `args` is one of the long options `longs` (alone or as `--opt=VALUE`) or
/// a short-option cluster (`-rf`, not `--…`) holding one of the letters `shorts`.
pub(super) fn has_option(args: &[Word], longs: &[&str], shorts: &[char]) -> bool {
    args.iter().any(|w| {
        let t = w.text();
        longs.iter().any(|l| {
            t.strip_prefix(l)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
        }) || (t.starts_with('-') && !t.starts_with("--") && t.contains(shorts))
    })
}

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
