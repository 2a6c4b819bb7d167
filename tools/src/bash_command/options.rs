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
        // `less -o FILE` copies a piped input to FILE (`-O` overwrites it unasked; less(1)).
        "less" => &["-o", "-O", "--log-file", "--LOG-FILE"],
        // `ssh -E FILE` appends its log to FILE (ssh(1)).
        "ssh" => &["-E"],
        "dd" => &[],
        "git" if args.first().map(Word::text) == Some("format-patch") => {
            &["-o", "--output-directory"]
        }
        // `git archive -o FILE` writes FILE (git-archive(1)).
        "git" if args.first().map(Word::text) == Some("archive") => {
            &["-o", "--output", "--format", "--remote"]
        }
        _ => &[],
    }
}

/// Long options of `name` that [`Walker::paths_of`] reads by name but that take no value from
/// the next word in [`options_with_value`]'s sense (`sed --in-place[=SUFFIX]`; `cp
/// --target-directory`, whose value the loop takes itself).
fn other_longs(name: &str) -> &'static [&'static str] {
    match name {
        "cp" | "mv" | "ln" | "install" => &["--target-directory"],
        "sed" => &["--in-place"],
        _ => &[],
    }
}

/// The long option `opt` (`--name`, without `=VALUE`) of the command `name` as the command
/// reads it: a GNU abbreviation (`--out` for `sort --output`, `--in-pl` for `sed --in-place`)
/// becomes the one option it names, so it is checked like the full spelling (getopt_long
/// and git's parse-options take any prefix that names one option; an exact name wins).
///
/// The names known for `name` are its [`options_with_value`] and [`other_longs`]; for a
/// command without any, [`OUTPUT_OPTIONS`]. A prefix of several known names, or of none, is
/// returned unchanged: several is an error for the program itself, and an option we do not
/// know stays read as the unknown option it is (its value checked as a read path).
pub(super) fn canonical_long<'a>(
    name: &str,
    with_value: &'static [&'static str],
    opt: &'a str,
) -> &'a str {
    if !opt.starts_with("--") || opt.len() <= 2 {
        return opt;
    }
    let extra = other_longs(name);
    let own = with_value
        .iter()
        .chain(extra)
        .filter(|o| o.starts_with("--"));
    let known: Vec<&'static str> = if with_value.is_empty() && extra.is_empty() {
        OUTPUT_OPTIONS.to_vec()
    } else {
        own.copied().collect()
    };
    resolve_long(&known, opt).unwrap_or(opt)
}

/// The name among `names` that the long option `opt` (`--name`, without `=VALUE`) selects:
/// the exact name, else the only name `opt` is a prefix of; `None` for a prefix of several
/// names or of none, and for `--` alone.
///
/// This is how GNU `getopt_long`, git's parse-options and Perl's Getopt::Long read a long
/// option: any unambiguous prefix names the option (`--to-com` is tar's `--to-command`), and
/// an exact name wins over longer names it is a prefix of.
pub(super) fn resolve_long<'n>(names: &[&'n str], opt: &str) -> Option<&'n str> {
    if !opt.starts_with("--") || opt.len() <= 2 {
        return None;
    }
    if let Some(exact) = names.iter().find(|n| **n == opt) {
        return Some(exact);
    }
    let mut matches = names.iter().filter(|n| n.starts_with(opt));
    match (matches.next(), matches.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// A long-option word `--name[=VALUE]` read against the options `names` (see
/// [`resolve_long`]): the option it selects and the value attached with `=`, if any.
/// `None` for a word that is no long option or selects none of `names`.
pub(super) fn long_word<'n, 'w>(
    names: &[&'n str],
    word: &'w str,
) -> Option<(&'n str, Option<&'w str>)> {
    let (key, inline) = match word.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (word, None),
    };
    resolve_long(names, key).map(|n| (n, inline))
}

/// Whether a word of `args` is one of the long options `longs` in any spelling
/// [`long_option`] accepts, or a short-option cluster (`-rf`, not `--…`) holding one of the
/// letters `shorts`.
pub(super) fn has_option(args: &[Word], longs: &[&str], shorts: &str) -> bool {
    let texts: Vec<&str> = args.iter().map(Word::text).collect();
    long_option(&texts, longs) || short_cluster(&texts, shorts, "")
}

/// Whether a word of `texts` is one of the long options `names` (`--name` or `--name=VALUE`),
/// or an abbreviation of one (`--recur`, `--reg=x`): GNU `getopt_long` takes any prefix that
/// names one option; a prefix shared by several is an error, so reading it as ours only asks
/// more.
pub(super) fn long_option(texts: &[&str], names: &[&str]) -> bool {
    texts.iter().any(|t| {
        let key = t.split('=').next().unwrap_or(t);
        key.len() > 2 && key.starts_with("--") && names.iter().any(|n| n.starts_with(key))
    })
}

/// Whether a short-option cluster of `texts` (`-abc`, not `--…`) holds one of `letters`
/// before a letter in `values` (an option taking a value, whose rest is that value).
pub(super) fn short_cluster(texts: &[&str], letters: &str, values: &str) -> bool {
    texts.iter().any(|t| {
        t.strip_prefix('-')
            .filter(|c| !c.starts_with('-'))
            .is_some_and(|c| {
                c.chars()
                    .take_while(|ch| !values.contains(*ch))
                    .any(|ch| letters.contains(ch))
            })
    })
}

/// The first letter of the short-option cluster `w` (`-abcVALUE`, getopt's reading) that
/// `takes` a value, with that value: the rest of the word, or else the next word of `args`
/// (`*i`, the index of the word after `w`, then moves past it). Letters from the first one
/// that `stop`s the scan on (one whose optional value is only attached) are not looked at.
/// `None` when no letter takes a value.
pub(super) fn cluster_value(
    w: &Word,
    args: &[Word],
    i: &mut usize,
    stop: impl Fn(char) -> bool,
    takes: impl Fn(char) -> bool,
) -> Option<(char, Option<Word>)> {
    let body = w.text().get(1..)?;
    let (at, c) = body
        .char_indices()
        .take_while(|(_, c)| !stop(*c))
        .find(|(_, c)| takes(*c))?;
    let rest = &body[at + c.len_utf8()..];
    let value = if rest.is_empty() {
        *i += 1;
        args.get(*i - 1).cloned()
    } else {
        Some(w.part(rest))
    };
    Some((c, value))
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
            | ("less", "-o" | "-O")
            | ("ssh", "-E")
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
