//! Bypasses of issue 11's "fail closed" found by a fresh tester (each row a command that ran
//! and should not have), with the spellings around them that must keep working; plus a
//! property test over short options with attached path values.

mod bash_support;

use std::path::{Path, PathBuf};

use bash_support::{EXT, PLAN_EDIT, PUSH, RM, Row, check_rows, project};
use proptest::prelude::*;
use troupe_agents::permission::Action;

use Action::{Allow as A, Ask as K, Deny as D};

const UNKNOWN_EXT: &str = "external_directory: needs approval because";
const OPAQUE: &str = "bash: needs approval because";
const PLAN_UNKNOWN: &str = "needs approval because";

/// The tester's project: `outlink -> ../outside` (holding `secret`), `list.txt` naming
/// `../outside/secret`, a few files, and a git repository.
fn tester_project() -> (tempfile::TempDir, PathBuf) {
    let (d, proj) = project();
    let outside = d.path().join("outside");
    std::fs::write(outside.join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(&outside, proj.join("outlink")).unwrap();
    for (f, text) in [
        ("list.txt", "../outside/secret\n"),
        ("a.txt", "a\n"),
        ("z.txt", "z\n"),
        ("tracked.txt", "t\n"),
    ] {
        std::fs::write(proj.join(f), text).unwrap();
    }
    (d, proj)
}

/// (ruleset, command, expected action, text the message must contain).
const ROWS: &[Row] = &[
    // 1. Paths attached to short options.
    ("extdeny", "sort -o../outside/x a.txt", D, EXT),
    ("extdeny", "sort -o ../outside/x a.txt", D, EXT),
    ("extdeny", "curl -o../outside/x http://example.com", D, EXT),
    ("extdeny", "wget -O../outside/x http://example.com", D, EXT),
    ("extdeny", "cp -t../outside a.txt", D, EXT),
    ("extdeny", "tar -xf a.tar -C../outside", D, EXT),
    ("extdeny", "unzip -d../outside a.zip", D, EXT),
    ("extdeny", "patch -o../outside/x a.txt", D, EXT),
    ("extdeny", "gcc -o../outside/x a.c", D, EXT),
    ("extdeny", "rustc -o../outside/x a.rs", D, EXT),
    ("extdeny", "make -C..", D, EXT),
    ("extdeny", "grep -f../outside/secret a.txt", D, EXT),
    ("extdeny", "awk -f../outside/x a.txt", D, EXT),
    ("extdeny", "git -C.. status", D, EXT),
    ("extdeny", "somecmd -vo../outside/x", D, EXT),
    ("issue", "sort -o../outside/x a.txt", D, EXT),
    // … and the separators and in-project values that stay allowed.
    ("extdeny", "cut -d/ -f1 a.txt", A, ""),
    ("extdeny", "awk -F/ '{print $1}' a.txt", A, ""),
    ("extdeny", "sort -t/ -k2 a.txt", A, ""),
    ("extdeny", "sed -i.bak s/a/b/ a.txt", A, ""),
    ("extdeny", "gcc -Isrc -osub/x a.c", A, ""),
    ("extdeny", "tar -xfa.tar -Csub", A, ""),
    // 2. The plan agent's edit guarantee through bash.
    ("plan", "cp a.txt{,.bak}", D, PLAN_EDIT),
    ("plan", "sort -oa.txt z.txt", D, PLAN_EDIT),
    ("plan", "git checkout -- tracked.txt", D, PLAN_EDIT),
    ("plan", "git restore tracked.txt", D, PLAN_EDIT),
    ("plan", "git stash", D, PLAN_EDIT),
    ("plan", "git reset --hard", D, PLAN_EDIT),
    ("plan", "git apply x.diff", D, PLAN_EDIT),
    ("plan", "git am x.patch", D, PLAN_EDIT),
    ("plan", "git mv a.txt b.txt", D, PLAN_EDIT),
    ("plan", "git rm a.txt", D, PLAN_EDIT),
    ("plan", "git clean -fd", D, PLAN_EDIT),
    ("plan", "xargs -a list.txt rm", K, PLAN_UNKNOWN),
    ("plan", "cp -tsub a.txt", D, PLAN_EDIT),
    ("plan", "tar -Csub -xf a.tar", D, PLAN_EDIT),
    ("plan", "tar -xf a.tar", D, PLAN_EDIT),
    ("plan", "cargo fmt", D, PLAN_EDIT),
    // … while reading and inspecting stays allowed.
    ("plan", "git status", A, ""),
    ("plan", "git stash list", A, ""),
    ("plan", "git apply --check x.diff", A, ""),
    ("plan", "git clean -n", A, ""),
    ("plan", "cargo fmt --check", A, ""),
    ("plan", "git diff", A, ""),
    // 3. A symlink in the project pointing outside.
    ("extdeny", "cat outlink/secret", D, EXT),
    ("extdeny", "head outlink/secret", D, EXT),
    ("extdeny", "base64 outlink/secret", D, EXT),
    ("extdeny", "grep -r s outlink", D, EXT),
    // A pattern given by option, long form abbreviated (`--reg` = `--regexp`): the first
    // operand is then a file, not the pattern (it was taken for the pattern and unchecked).
    ("extdeny", "grep --reg=x outlink/secret", D, EXT),
    ("extdeny", "grep --regex x outlink/secret", D, EXT),
    ("extdeny", "grep --fi=pats outlink/secret", D, EXT),
    ("extdeny", "awk --so='{print}' outlink/secret", D, EXT),
    ("extdeny", "awk --fil=prog.awk outlink/secret", D, EXT),
    // … also when the link is met inside a walked directory or matched by a glob.
    ("extdeny", "grep -R s .", D, EXT),
    ("extdeny", "grep -R s src", A, ""),
    // `rg`/`ag` follow links only when told to (`-L`, `--follow`; ag `-f`), then like `grep -R`.
    ("extdeny", "rg -L s .", D, EXT),
    ("extdeny", "rg --follow s", D, EXT),
    ("extdeny", "rg -iL s .", D, EXT),
    ("extdeny", "rg -L --no-ignore s .", D, EXT),
    ("extdeny", "ag -f s .", D, EXT),
    ("extdeny", "ag --follow s", D, EXT),
    ("extdeny", "rg -L s src", A, ""),
    ("extdeny", "cat */secret", D, EXT),
    ("extdeny", "ls outlink", D, EXT),
    // A glob shown by a listing is each match named (`ls *` lists what `outlink` leads to;
    // it was allowed); a reader's glob reads only the files it matches.
    ("extdeny", "ls *", D, EXT),
    ("extdeny", "ls o*", D, EXT),
    ("extdeny", "ls -l ./*", D, EXT),
    ("extdeny", "du -aD *", D, EXT),
    ("extdeny", "stat -L o*", D, EXT),
    ("extdeny", "find -H o*", D, EXT),
    ("extdeny", "tree o*", D, EXT),
    ("extdeny", "ls s*", A, ""),
    ("extdeny", "ls src/*", A, ""),
    ("extdeny", "cat *", A, ""),
    ("extdeny", "zip -r x.zip outlink", D, EXT),
    ("extdeny", "tar -chf x.tar outlink", D, EXT),
    ("extdeny", "find -L outlink", D, EXT),
    ("extdeny", "./outlink/script.sh", D, EXT),
    ("extdeny", "mycmd outlink/secret", D, EXT),
    // Listings that follow links into directories show the names (and `du` the sizes)
    // of what a link leads to: checked like `ls outlink` (they were allowed).
    ("extdeny", "ls -RL .", D, EXT),
    ("extdeny", "ls -R -L", D, EXT),
    ("extdeny", "ls --recursive --dereference", D, EXT),
    ("extdeny", "find -L .", D, EXT),
    ("extdeny", "find -L . -name secret", D, EXT),
    ("extdeny", "find -H -L .", D, EXT),
    ("extdeny", "find . -follow -type f", D, EXT),
    ("extdeny", "tree -l", D, EXT),
    ("extdeny", "tree -al .", D, EXT),
    ("extdeny", "du -aL .", D, EXT),
    ("extdeny", "du --dereference -s", D, EXT),
    ("extdeny", "chown -RL me .", D, EXT),
    ("extdeny", "chgrp -R -L staff .", D, EXT),
    // … and what a hostile pass found next: long forms and their abbreviations (GNU
    // getopt_long takes any unambiguous prefix), other names of the same tools, other
    // link-following tools, and option letters read the way each tool reads them.
    ("extdeny", "chown --recursive -L root .", D, EXT),
    ("extdeny", "chgrp --recur -L staff .", D, EXT),
    ("extdeny", "setfacl -R -L -m u:x:r .", D, EXT),
    ("extdeny", "chcon -RL t .", D, EXT),
    ("extdeny", "getfacl --recursive --logical .", D, EXT),
    ("extdeny", "getfattr -R -L .", D, EXT),
    ("extdeny", "ls --rec -L .", D, EXT),
    ("extdeny", "dir -RL .", D, EXT),
    ("extdeny", "vdir -R --dereference .", D, EXT),
    ("extdeny", "tree -Ll 3 .", D, EXT),
    ("extdeny", "tree -Pl '*' .", D, EXT),
    ("extdeny", "fd -L s", D, EXT),
    ("extdeny", "fd --follow", D, EXT),
    ("extdeny", "bfs -L .", D, EXT),
    ("extdeny", "bfs . -follow", D, EXT),
    ("extdeny", "rg --files -L .", D, EXT),
    ("extdeny", "grep --deref s .", D, EXT),
    ("extdeny", "grep --dereference-r s .", D, EXT),
    ("extdeny", "grep -drecurse s .", D, EXT),
    ("extdeny", "grep --directories recurse s .", D, EXT),
    ("extdeny", "grep --dir=rec s .", D, EXT),
    ("extdeny", "rgrep s outlink", D, EXT),
    ("extdeny", "rgrep s .", D, EXT),
    ("extdeny", "diff --recu -N . src", D, EXT),
    ("extdeny", "tar --cre -hvf /dev/null .", D, EXT),
    ("extdeny", "cp --recur . src/copy", D, EXT),
    ("extdeny", "ag -f s", D, EXT),
    ("extdeny", "ag -fl s", D, EXT),
    // … without following, or where no link leads out, they stay allowed.
    ("extdeny", "ls -R .", A, ""),
    ("extdeny", "ls -lRa", A, ""),
    ("extdeny", "find . -name secret", A, ""),
    ("extdeny", "find -L src -name '*.rs'", A, ""),
    ("extdeny", "tree -a", A, ""),
    ("extdeny", "tree -l src", A, ""),
    ("extdeny", "du -sh .", A, ""),
    ("extdeny", "du -L src", A, ""),
    ("extdeny", "ls -RL src", A, ""),
    ("extdeny", "chgrp -RL staff src", A, ""),
    ("extdeny", "chgrp -R staff .", A, ""),
    ("extdeny", "rgrep s src", A, ""),
    ("extdeny", "fd s", A, ""),
    ("extdeny", "fd -L s src", A, ""),
    ("extdeny", "rg --files", A, ""),
    ("extdeny", "getfacl -R .", A, ""),
    ("extdeny", "tree -L 3 .", A, ""),
    ("extdeny", "grep -d skip s .", A, ""),
    ("extdeny", "ag s src", A, ""),
    ("extdeny", "cat src/a.rs", A, ""),
    ("extdeny", "ls src", A, ""),
    ("extdeny", "./src/run.sh", A, ""),
    // 4. xargs fed from a file, a here-string or stdin.
    ("extdeny", "xargs cat < list.txt", K, UNKNOWN_EXT),
    ("extdeny", "xargs -a list.txt cat", K, UNKNOWN_EXT),
    ("extdeny", "xargs cat <<< ../outside/secret", K, UNKNOWN_EXT),
    ("extdeny", "cat $(cat list.txt)", K, UNKNOWN_EXT),
    // 5. Programs that run other programs.
    ("issue", "fd -x rm", D, RM),
    ("issue", "fd . -X rm", D, RM),
    ("issue", "rg --pre rm x", D, RM),
    ("issue", "rg --pre=rm x", D, RM),
    ("issue", "valgrind rm d", D, RM),
    ("issue", "valgrind --tool=memcheck rm d", D, RM),
    ("issue", "hyperfine 'rm -rf d'", D, RM),
    ("issue", "hyperfine -w 3 --prepare 'rm -rf d' 'ls'", D, RM),
    ("issue", "less +'!rm -rf d' a.txt", K, OPAQUE),
    ("issue", "npx rimraf d", D, RM),
    ("issue", "npx -y rimraf d", D, RM),
    ("issue", "pnpm dlx rimraf d", D, RM),
    ("issue", "git annex sync", D, PUSH),
    ("issue", "gh repo sync", D, PUSH),
    ("issue", "fd -e rs", A, ""),
    ("issue", "hyperfine 'ls'", A, ""),
    // hyperfine runs `SHELL -c CMD` and `--shell` takes any command line: `-S 'rm -rf d'`
    // ran rm (allowed before); a plain shell stays allowed.
    ("issue", "hyperfine -S 'rm -rf d' true", K, OPAQUE),
    ("issue", "hyperfine --shell='rm -rf d' true", K, OPAQUE),
    ("issue", "hyperfine -NS 'rm -rf d' true", K, OPAQUE),
    ("issue", "hyperfine -S \"$X\" true", K, OPAQUE),
    ("issue", "hyperfine -S 'bash --rcfile x.sh' true", K, OPAQUE),
    ("issue", "hyperfine -S 'rm -rf d' 'ls'", K, OPAQUE),
    ("issue", "hyperfine -S zsh 'ls'", A, ""),
    ("issue", "hyperfine --shell='bash --norc' 'ls'", A, ""),
    ("issue", "hyperfine -N -S none 'ls'", A, ""),
    ("issue", "hyperfine -S bash 'rm -rf d'", D, RM),
    ("issue", "less a.txt", A, ""),
    ("issue", "npx tsc", A, ""),
    // 6. Git configuration on the command line that runs programs.
    (
        "issue",
        "git -c core.sshCommand='sh -c id' fetch",
        K,
        OPAQUE,
    ),
    ("issue", "git -c core.fsmonitor=./x status", K, OPAQUE),
    ("issue", "git -c core.hooksPath=h commit -m x", K, OPAQUE),
    ("issue", "git -c core.pager=x log", K, OPAQUE),
    ("issue", "git -c alias.st='!rm -rf d' st", K, OPAQUE),
    ("issue", "git -ccore.pager=x log", K, OPAQUE),
    ("issue", "git --config-env=core.pager=X log", K, OPAQUE),
    ("issue", "git -c color.ui=never log", A, ""),
    // 7. Options a program reads in more spellings than the exact name: GNU getopt_long,
    // git's parse-options and Perl's Getopt::Long take any unambiguous prefix of a long
    // option (`--to-com` is tar's `--to-command`), with `=VALUE` or the value in the next
    // word; getopt reads short options in clusters (`-xvI CMD`) with attached values.
    // Each row ran unasked (or was not denied) before.
    // Options whose value is code (`CODE_OPTIONS`), abbreviated or clustered.
    ("issue", "tar -xf a.tar --to-com='rm -rf d'", K, OPAQUE),
    ("issue", "tar -xf a.tar --to-com 'rm -rf d'", K, OPAQUE),
    ("issue", "tar -cf a.tar --use-comp=sh src", K, OPAQUE),
    (
        "issue",
        "tar -cf a.tar --checkpoint-a=exec=sh src",
        K,
        OPAQUE,
    ),
    ("issue", "tar -xvIsh -f a.tar", K, OPAQUE),
    ("issue", "tar xIf sh a.tar", K, OPAQUE),
    ("issue", "sort --compress-p=sh a.txt", K, OPAQUE),
    ("issue", "man --pag=sh ls", K, OPAQUE),
    ("issue", "make --ev='x:=$(shell rm -rf d)'", K, OPAQUE),
    ("issue", "make -sE 'x:=$(shell rm -rf d)'", K, OPAQUE),
    ("issue", "zip --unzip-c=sh -T z.zip a.txt", K, OPAQUE),
    // wget runs wgetrc commands given with `-e` (`use_askpass=CMD`, `output_document=F`).
    ("issue", "wget -e use_askpass=sh http://x", K, OPAQUE),
    // Inline code of interpreters: getopt_long (julia, fish) and gdb's getopt_long_only,
    // which also reads `-iex` and one-dash long names.
    ("issue", "julia --ev 'run(`rm -rf d`)' x.jl", K, OPAQUE),
    ("issue", "fish --comm 'rm -rf d'", K, OPAQUE),
    ("issue", "gdb -batch -iex 'shell rm -rf d'", K, OPAQUE),
    ("issue", "gdb -batch --ev 'shell rm -rf d' prog", K, OPAQUE),
    // awk programs: every `-e`, attached, after `--field-separator`'s abbreviated value,
    // with `=`, through gawk's `-W`, and `--load` abbreviated.
    (
        "issue",
        "gawk --sour='BEGIN{system(\"rm -rf d\")}' a.txt",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "gawk --source='BEGIN{system(\"rm -rf d\")}' a.txt",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "gawk -e 'BEGIN{system(\"rm -rf d\")}' -e 'BEGIN{}' a.txt",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "gawk -e'BEGIN{system(\"rm -rf d\")}' a.txt",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "gawk --field-s : 'BEGIN{system(\"rm -rf d\")}' a.txt",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "gawk -W source='BEGIN{system(\"rm -rf d\")}' a.txt",
        K,
        OPAQUE,
    ),
    ("issue", "gawk --lo=x.so 'BEGIN{}' a.txt", K, OPAQUE),
    ("extdeny", "gawk --exe outlink/secret a.txt", D, EXT),
    ("extdeny", "gawk -W source='{print}' outlink/secret", D, EXT),
    // sed scripts and script files in every spelling; `--sandbox` only as an option.
    (
        "issue",
        "sed --expr='s/a/b/w ../outside/x' a.txt",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "sed 's/a/b/w ../outside/x' a.txt -- --sandbox",
        K,
        OPAQUE,
    ),
    ("extdeny", "sed --file=outlink/secret a.txt", D, EXT),
    ("extdeny", "sed -foutlink/x a.txt", D, EXT),
    // git options that run a command or set configuration, in every spelling.
    ("issue", "git ls-remote --upload-p='rm -rf d' .", K, OPAQUE),
    ("issue", "git ls-remote --exec 'rm -rf d' .", K, OPAQUE),
    (
        "issue",
        "git clone --conf core.sshCommand=x http://h/r",
        K,
        OPAQUE,
    ),
    ("issue", "git difftool --extc=x", K, OPAQUE),
    ("issue", "git difftool --tool x", K, OPAQUE),
    ("issue", "git rebase --exe 'rm -rf d' HEAD~1", D, RM),
    ("issue", "git rebase --exe='rm -rf d' HEAD~1", K, OPAQUE),
    ("issue", "git send-email --to-cm=x a.patch", K, OPAQUE),
    ("issue", "git instaweb --http=x", K, OPAQUE),
    ("issue", "git config --ed", K, OPAQUE),
    // `git config`: an abbreviated value option takes the next word; a word that is
    // the value of an option, an operand or after `--` does not make it a read.
    (
        "issue",
        "git config --comm user.name core.pager x",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "git config --comment --get core.pager x",
        K,
        OPAQUE,
    ),
    ("issue", "git config alias.zz '!rm -rf d' list", K, OPAQUE),
    ("issue", "git config core.pager x -- --get", K, OPAQUE),
    // Wrappers: an abbreviated option takes its value, so the command is the right word;
    // `flock -n`, `xargs --eof` and `--max-lines` take none.
    ("issue", "env --uns ls rm -rf d", D, RM),
    ("issue", "env --split-s='rm -rf d'", K, OPAQUE),
    ("issue", "timeout --sig KILL 5 rm -rf d", D, RM),
    ("issue", "flock -n lk rm -rf d", D, RM),
    ("issue", "xargs --eof rm -rf d", D, RM),
    ("issue", "strace --output a.txt rm -rf d", D, RM),
    ("issue", "sudo --sh", K, OPAQUE),
    ("issue", "watch --int 1 rm -rf d", D, RM),
    ("issue", "watch -tn 1 rm -rf d", D, RM),
    ("extdeny", "env --chd=outlink cat secret", D, EXT),
    ("extdeny", "xargs --arg=outlink/secret cat", D, EXT),
    // Programs and configuration ssh, scp, sftp and rsync run, in clusters.
    ("issue", "rsync -ave 'sh -c x' a.txt h:y", K, OPAQUE),
    ("issue", "scp -rS x a.txt h:y", K, OPAQUE),
    ("issue", "ssh -Fx h", K, OPAQUE),
    ("issue", "sftp -D x", K, OPAQUE),
    // Other spellings of deleting, running a written makefile, and running commands.
    ("issue", "shred --rem a.txt", D, RM),
    (
        "issue",
        "echo 'all:; rm -rf d' > e.mk; make --file=e.mk",
        K,
        OPAQUE,
    ),
    ("issue", "fd . --exec=rm", K, OPAQUE),
    ("issue", "fd . -Hx rm", K, OPAQUE),
    ("issue", "hyperfine -p'rm -rf d' ls", D, RM),
    ("issue", "cargo watch -qs 'rm -rf d'", K, OPAQUE),
    // Writes of the working tree and of named files, for the plan agent.
    ("plan", "git reset --har", D, PLAN_EDIT),
    ("plan", "git read-tree -mu HEAD", D, PLAN_EDIT),
    ("plan", "tar --extr -f a.tar", D, PLAN_EDIT),
    ("plan", "git archive -o a.txt HEAD", D, PLAN_EDIT),
    ("plan", "git format-patch HEAD~1", D, PLAN_EDIT),
    // Links an extraction may make, and links followed by an abbreviated `ag --follow`.
    (
        "extdeny",
        "tar --extr -f a.tar; cat x/secret",
        K,
        UNKNOWN_EXT,
    ),
    ("extdeny", "ag --fol s", D, EXT),
    // … and the ordinary spellings around them stay allowed.
    ("issue", "tar -xzvf a.tar", A, ""),
    ("issue", "make -s test", A, ""),
    ("issue", "git ls-remote .", A, ""),
    ("issue", "git send-email --to x@y a.patch", A, ""),
    ("issue", "git config --get core.pager", A, ""),
    ("issue", "git config get core.pager", A, ""),
    ("issue", "git config user.name x", A, ""),
    ("issue", "git help --config", A, ""),
    ("issue", "awk -F: '{print $1}' a.txt", A, ""),
    ("issue", "sed -ne 's/a/b/p' a.txt", A, ""),
    ("issue", "sed --sandbox 's/a/b/w x' a.txt", A, ""),
    ("issue", "rsync -av a.txt h:y", A, ""),
    ("issue", "fd -H x", A, ""),
    ("issue", "watch -n1 ls", A, ""),
    ("issue", "julia x.jl", A, ""),
    ("plan", "git reset HEAD~1", A, ""),
    ("plan", "git format-patch --stdout HEAD~1", A, ""),
    ("plan", "tar -tf a.tar", A, ""),
    // 8. Leftovers of the seventh audit, each shown to run unasked (or be misread) first.
    // vim and neovim compare long option names ignoring case and accept text after some
    // (vim `main.c`: `STRNICMP(arg, "cmd", 3)`, so `--CMD` and `--Cmd` are `--cmd`);
    // `--remote-send`/`--remote-expr` run keys and expressions in a running vim, nvim's
    // `--embed` takes RPC calls from stdin and `--startuptime` writes the file it names.
    // Every long option but the plain ones is opaque, in any case; `-C` is `compatible`.
    // `-W F`/`-w F` (keys typed), `-i F` (viminfo) and `-V20F` write F.
    ("issue", "vim --CMD '!rm -rf d' a.txt", K, OPAQUE),
    ("issue", "vim --Cmd '!rm -rf d' a.txt", K, OPAQUE),
    ("issue", "nvim --cMd '!rm -rf d' a.txt", K, OPAQUE),
    ("issue", "view --CMD '!rm -rf d' a.txt", K, OPAQUE),
    ("issue", "rview --CMD '!rm -rf d' a.txt", K, OPAQUE),
    ("issue", "vim --remote-send ':!rm -rf d<CR>'", K, OPAQUE),
    (
        "issue",
        "vim --REMOTE-EXPR 'system(\"rm -rf d\")'",
        K,
        OPAQUE,
    ),
    ("issue", "nvim --embed", K, OPAQUE),
    ("extdeny", "vim --STARTUPTIME a.txt z.txt", K, OPAQUE),
    ("plan", "vim -W a.txt z.txt", K, PLAN_UNKNOWN),
    ("plan", "vim -i a.txt z.txt", K, PLAN_UNKNOWN),
    ("extdeny", "vim -V20a.txt z.txt", K, OPAQUE),
    ("issue", "vim -V20 z.txt", A, ""),
    ("issue", "vim -C a.txt", A, ""),
    ("issue", "vim --clean --noplugin a.txt", A, ""),
    ("issue", "vim --version", A, ""),
    // less runs the commands of a lesskey file or text (`-k F`, `--lesskey-src=F`, less ≥
    // 582; `--lesskey-content=TEXT`, less ≥ 643: keys bound to `!cmd`, and an `#env`
    // section that sets `LESSOPEN`) and of `--cmd` (at the first prompt), with any
    // unambiguous prefix of a long name and `k` anywhere in a cluster before a letter that
    // takes a value (less(1), lesskey(1), option.c `findopt_name`). Every variable less
    // reads is risky (`LESSKEYIN`, `LESSKEY_CONTENT`, `LESSEDIT`, `LESSGLOBALTAGS` were
    // not; `LESSOPEN`/`LESSCLOSE` run a command on each file), and `-o F`/`-O F` write F.
    ("issue", "less --lesskey-src=k a.txt", K, OPAQUE),
    ("issue", "less --lesskey-s k a.txt", K, OPAQUE),
    ("issue", "less --lesskey-file=k a.txt", K, OPAQUE),
    ("issue", "less -k k a.txt", K, OPAQUE),
    ("issue", "less -ikk a.txt", K, OPAQUE),
    (
        "issue",
        "less --lesskey-content='#env\nLESSOPEN=|rm -rf d %s' a.txt",
        K,
        OPAQUE,
    ),
    ("issue", "less --cmd='!rm -rf d' a.txt", K, OPAQUE),
    ("issue", "LESSKEYIN=k less a.txt", K, OPAQUE),
    ("issue", "LESSKEY_CONTENT=x less a.txt", K, OPAQUE),
    ("issue", "env LESSKEYIN_SYSTEM=k less a.txt", K, OPAQUE),
    ("issue", "export LESSEDIT='rm -rf d'; less a.txt", K, OPAQUE),
    ("issue", "LESSGLOBALTAGS=x less -t x", K, OPAQUE),
    ("issue", "LESSOPEN='|rm -rf d %s' less a.txt", K, OPAQUE),
    ("issue", "env LESSOPEN='|rm -rf d %s' less a.txt", K, OPAQUE),
    (
        "issue",
        "export LESSOPEN='|rm -rf d %s'; less a.txt",
        K,
        OPAQUE,
    ),
    ("plan", "cat z.txt | less -o a.txt", D, PLAN_EDIT),
    ("plan", "cat z.txt | less -SOa.txt", D, PLAN_EDIT),
    ("issue", "less -iN a.txt", A, ""),
    ("issue", "less -Pkeep a.txt", A, ""),
    // env's `-a NAME`/`--argv0=NAME` (coreutils ≥ 9.2) takes a value: `env -a ls rm -rf d`
    // runs `rm` (it was read as `ls rm -rf d`), and the name is what multi-call programs
    // run (`git-push` makes git push, `rm` makes busybox rm), so it is opaque, as are
    // `exec -a` and BSD env's `-P DIR` (where the command is looked up). `-u`, `-C`, `-S`
    // keep being read in every spelling.
    ("issue", "env -a ls rm -rf d", D, RM),
    ("issue", "env --argv0 ls rm -rf d", D, RM),
    ("issue", "env --ar ls rm -rf d", D, RM),
    ("issue", "env -ials rm -rf d", D, RM),
    ("issue", "env -a git-push git origin main", K, OPAQUE),
    ("issue", "env -a rm busybox -rf d", K, OPAQUE),
    ("issue", "exec -a rm busybox -rf d", K, OPAQUE),
    ("issue", "env -P sub ls", K, OPAQUE),
    ("issue", "env -Psub ls", K, OPAQUE),
    ("issue", "env -L me rm -rf d", D, RM),
    ("issue", "env -iuX -C sub rm -rf d", D, RM),
    ("issue", "env -iuX -S 'rm -rf d'", K, OPAQUE),
    ("issue", "env --un=X --chd sub rm -rf d", D, RM),
    ("extdeny", "env -iC ../outside cat x", D, EXT),
    ("extdeny", "env -0C../outside cat x", D, EXT),
    ("issue", "env -u HOME ls", A, ""),
    ("issue", "env -i ls", A, ""),
    // sudo's `-a TYPE` (BSD auth) and `-c CLASS` (login class) take a value (getopt string
    // `+Aa:BbC:c:D:Eeg:Hh::iKklNnPp:R:r:SsT:t:U:u:Vv`, parse_args.c), as do
    // `--auth-type`/`--login-class`: `sudo -a ls rm -rf d` runs `rm`. Its other long options
    // are known too, so an exact `--login` is not `--login-class`. doas takes `-a STYLE`;
    // run0 (systemd ≥ 256) is a wrapper like sudo; `systemd-run -C` (`--capsule`) takes a
    // value; a unit's `-p Exec*=` property is a command it runs and its `-E`/`--setenv`
    // variables are checked like `env`'s; `su -s SHELL` runs SHELL with `-c SCRIPT`.
    ("issue", "sudo -a ls rm -rf d", D, RM),
    ("issue", "sudo -c ls rm -rf d", D, RM),
    ("issue", "sudo -Ealogin rm -rf d", D, RM),
    ("issue", "sudo --auth-type x rm -rf d", D, RM),
    ("issue", "sudo --au x rm -rf d", D, RM),
    ("issue", "sudo --login-class x rm -rf d", D, RM),
    ("issue", "sudo --login rm -rf d", D, RM),
    ("issue", "sudo -unobody rm -rf d", D, RM),
    ("issue", "sudo -Eu root rm -rf d", D, RM),
    ("issue", "sudo -h host rm -rf d", D, RM),
    ("issue", "sudo --pro x --close-from=5 rm -rf d", D, RM),
    ("issue", "doas -a x rm -rf d", D, RM),
    ("issue", "run0 rm -rf d", D, RM),
    ("issue", "run0 -u x rm -rf d", D, RM),
    ("issue", "run0 --chdir=sub -g g rm -rf d", D, RM),
    ("extdeny", "run0 -D ../outside cat x", D, EXT),
    ("issue", "run0", K, OPAQUE),
    ("issue", "systemd-run -C x rm -rf d", D, RM),
    (
        "issue",
        "systemd-run -p ExecStartPre='/bin/rm -rf d' true",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "systemd-run -E LESSOPEN='|rm -rf d %s' less a.txt",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "run0 --setenv=LESSOPEN='|rm -rf d %s' less a.txt",
        K,
        OPAQUE,
    ),
    ("issue", "systemd-run --user --shell", K, OPAQUE),
    (
        "issue",
        "su -s ./x -c 'BEGIN{\"rm -rf d\" | getline}' root",
        K,
        OPAQUE,
    ),
    ("issue", "su --shell=./x -c ls root", K, OPAQUE),
    ("issue", "su -ls./x -c ls root", K, OPAQUE),
    ("issue", "runuser --sh ./x -c ls root", K, OPAQUE),
    ("issue", "su -c 'rm -rf d' root", D, RM),
    ("issue", "systemd-run -p MemoryMax=1G ls", A, ""),
    ("issue", "su -s bash -c ls root", A, ""),
    ("issue", "sudo -u root ls", A, ""),
    // `sudo -e FILE` (`--edit`, `sudoedit`) edits and writes FILE back; toybox runs its
    // applets like busybox; the dynamic loader runs the program it is given (ld.so(8)).
    ("plan", "sudo -e a.txt", K, PLAN_UNKNOWN),
    ("plan", "sudo -ne a.txt", K, PLAN_UNKNOWN),
    ("plan", "sudo --edit a.txt", K, PLAN_UNKNOWN),
    ("plan", "sudoedit a.txt", K, PLAN_UNKNOWN),
    ("issue", "toybox rm -rf d", D, RM),
    ("issue", "ld-linux-x86-64.so.2 ./rm -rf d", K, OPAQUE),
    ("issue", "./ld.so rm -rf d", K, OPAQUE),
    // ssh loads the PKCS#11 library of `-I LIB` and of `-o PKCS11Provider=`/
    // `SecurityKeyProvider=`, runs `XAuthLocation` and `RemoteCommand` (on a host that may be
    // this one), and writes `ControlPath` sockets and `-E` logs; only known-plain `-o` keys
    // pass now, in every spelling. `ssh-keygen -D`/`-w` and `ssh-add -s`/`-S` load a
    // library; `RSYNC_RSH`, `RSYNC_CONNECT_PROG` (rsync(1)) and `SSH_SK_PROVIDER` are
    // commands and libraries given by variable.
    ("issue", "ssh -I x.so h", K, OPAQUE),
    ("issue", "ssh -vI x.so h", K, OPAQUE),
    ("issue", "ssh -Ix.so h", K, OPAQUE),
    ("issue", "ssh -o PKCS11Provider=x.so h", K, OPAQUE),
    ("issue", "ssh -oPKCS11Provider=x.so h", K, OPAQUE),
    ("issue", "ssh -vo 'pkcs11provider x.so' h", K, OPAQUE),
    ("issue", "ssh -o SecurityKeyProvider=x.so h", K, OPAQUE),
    (
        "issue",
        "ssh -o RemoteCommand='rm -rf d' localhost",
        K,
        OPAQUE,
    ),
    ("issue", "ssh -o XAuthLocation=./x -X h", K, OPAQUE),
    (
        "issue",
        "ssh -o ControlPath=a.txt -o ControlMaster=yes h",
        K,
        OPAQUE,
    ),
    ("issue", "scp -o PKCS11Provider=x.so a.txt h:y", K, OPAQUE),
    ("issue", "sftp -oPKCS11Provider=x.so h", K, OPAQUE),
    ("issue", "ssh-keygen -D x.so", K, OPAQUE),
    ("issue", "ssh-keygen -t ed25519-sk -w x.so", K, OPAQUE),
    ("issue", "ssh-add -s x.so", K, OPAQUE),
    ("issue", "ssh-add -S x.so", K, OPAQUE),
    ("issue", "SSH_SK_PROVIDER=x.so ssh-add -K", K, OPAQUE),
    (
        "issue",
        "RSYNC_CONNECT_PROG='rm -rf d %H' rsync rsync://h/x .",
        K,
        OPAQUE,
    ),
    ("issue", "RSYNC_RSH='rm -rf d' rsync a.txt h:y", K, OPAQUE),
    ("plan", "ssh -E a.txt h", D, PLAN_EDIT),
    (
        "issue",
        "ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null h ls",
        A,
        "",
    ),
    ("issue", "ssh -p 2222 -o BatchMode=yes h uptime", A, ""),
    ("issue", "ssh -i k h rm -rf d", D, RM),
    ("issue", "ssh-keygen -t ed25519 -f k -N ''", A, ""),
    ("issue", "ssh-add -l", A, ""),
    ("issue", "scp -P 22 a.txt h:y", A, ""),
    // `git config --file=F`/`-f F` writes F when it changes anything (a key with a value,
    // `set`, `unset`, `--add`, `--replace-all`, `--unset`, `--rename-section`,
    // `--remove-section`; git-config(1)); it was checked as a read, so the plan agent could
    // overwrite any file. `--global` writes `~/.gitconfig` and `--system` `/etc/gitconfig`
    // (outside the project; they were not checked at all). Reading stays a read.
    ("plan", "git config --file=a.txt user.name x", D, PLAN_EDIT),
    ("plan", "git config --file a.txt user.name x", D, PLAN_EDIT),
    ("plan", "git config -f a.txt user.name x", D, PLAN_EDIT),
    ("plan", "git config -fa.txt user.name x", D, PLAN_EDIT),
    ("plan", "git config -zf a.txt user.name x", D, PLAN_EDIT),
    ("plan", "git config --fil a.txt user.name x", D, PLAN_EDIT),
    (
        "plan",
        "git config -f a.txt --unset user.name",
        D,
        PLAN_EDIT,
    ),
    (
        "plan",
        "git config -f a.txt --add user.name x",
        D,
        PLAN_EDIT,
    ),
    (
        "plan",
        "git config -f a.txt --remove-section user",
        D,
        PLAN_EDIT,
    ),
    ("plan", "git config -f a.txt set user.name x", D, PLAN_EDIT),
    ("plan", "git config set -f a.txt user.name x", D, PLAN_EDIT),
    ("plan", "git config -f a.txt unset user.name", D, PLAN_EDIT),
    ("plan", "git config --global user.name x", D, PLAN_EDIT),
    (
        "extdeny",
        "git config --file=../outside/x user.name x",
        D,
        EXT,
    ),
    ("extdeny", "git config --global user.name x", D, EXT),
    ("extdeny", "git config --system user.name x", D, EXT),
    // Without a file, `--global` or `--system`, `git config` writes the repository's own
    // `.git/config` (`--worktree`: `.git/config.worktree`): an edit, which plan may not make;
    // it was checked as no write at all. Reading it stays a read.
    ("plan", "git config user.name x", D, PLAN_EDIT),
    ("plan", "git config --local user.name x", D, PLAN_EDIT),
    ("plan", "git config set user.name x", D, PLAN_EDIT),
    ("plan", "git config --unset user.name", D, PLAN_EDIT),
    ("plan", "git config --worktree user.name x", D, PLAN_EDIT),
    ("plan", "git config --get user.name", A, ""),
    ("plan", "git config get user.name", A, ""),
    ("plan", "git config -l", A, ""),
    ("plan", "git config -f a.txt --get user.name", A, ""),
    ("plan", "git config -f a.txt user.name", A, ""),
    ("plan", "git config -f a.txt -l", A, ""),
    ("plan", "git config --global --get user.name", A, ""),
    // make's makefiles (scripts.rs `make_files`) were found by peeking at option clusters
    // without skipping the values of the other options: `make -W -fx` reads the default
    // makefile (`-fx` is the value of `-W`, getopt), but `x` was checked instead of the
    // `Makefile` just written. Values are now skipped through `cluster_value` and make's
    // long options; the makefiles are looked for in the `-C` directory make moves to first,
    // and a makefile read from stdin (`-f -`) is opaque.
    (
        "issue",
        "echo 'all:; rm -rf d' > Makefile; make -W -fx",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "echo 'all:; rm -rf d' > Makefile; make -sI -fx",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "echo 'all:; rm -rf d' > Makefile; make --what-if -fx",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "echo 'all:; rm -rf d' > Makefile; make --assume-o -fx",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "echo 'all:; rm -rf d' > sub/Makefile; make -C sub",
        K,
        OPAQUE,
    ),
    (
        "issue",
        "echo 'all:; rm -rf d' > sub/e.mk; make -C sub -f e.mk",
        K,
        OPAQUE,
    ),
    ("issue", "echo 'all:; rm -rf d' | make -f -", K, OPAQUE),
    (
        "issue",
        "echo 'all:; rm -rf d' > Makefile; make -j -f x",
        A,
        "",
    ),
    ("issue", "make -C sub -f x.mk test", A, ""),
];

#[tokio::test]
async fn tester_bypasses_are_closed() {
    let (_d, proj) = tester_project();
    check_rows(&proj, ROWS).await;
}

/// Bypasses that need a project without a link out (a `git grep` there reads the whole
/// project, so the link would decide first): an abbreviated `git grep --open-files-in-pager`,
/// and a link copied with its target kept (`cp --no-d`, abbreviated `--no-dereference`),
/// which resolves from its new place.
#[tokio::test]
async fn abbreviated_options_in_a_project_without_an_outward_link() {
    let (_d, proj) = project();
    std::os::unix::fs::symlink("..", proj.join("sub/up")).unwrap();
    let rows: &[Row] = &[
        ("issue", "git grep --open-files=x y", K, OPAQUE),
        (
            "extdeny",
            "cp --no-d sub/up lnk; cat lnk/outside/secret",
            K,
            UNKNOWN_EXT,
        ),
        (
            "extdeny",
            "cp --pres=links sub/up lnk; cat lnk/outside/secret",
            K,
            UNKNOWN_EXT,
        ),
        (
            "extdeny",
            "cp -P sub/up lnk; cat lnk/outside/secret",
            K,
            UNKNOWN_EXT,
        ),
        ("issue", "git grep x", A, ""),
    ];
    check_rows(&proj, rows).await;
}

/// A link to an outside directory that holds only directories: a listing through it shows
/// their names, so it is checked though no file is there (a walk of files found nothing).
#[tokio::test]
async fn a_listing_through_a_link_to_a_directory_without_files_is_checked() {
    let (d, proj) = project();
    let outside = d.path().join("outside");
    std::fs::create_dir_all(outside.join("only-dirs/inner")).unwrap();
    std::os::unix::fs::symlink(outside.join("only-dirs"), proj.join("dirlink")).unwrap();
    let rows: &[Row] = &[
        ("extdeny", "ls -RL .", D, EXT),
        ("extdeny", "find -L . -type d", D, EXT),
        ("extdeny", "tree -l -d", D, EXT),
        ("extdeny", "ls -R .", A, ""),
    ];
    check_rows(&proj, rows).await;
}

/// Long options whose value is code, for
/// `code_options_are_opaque_in_every_abbreviation`: (command with `{}` where the option
/// stands, the option's name, the length of its shortest unambiguous prefix for the program,
/// a value). Sources: the programs' option tables (tar, sort, make, man-db, gawk, sed, env,
/// git, gdb, julia, fish).
const CODE_LONG_OPTIONS: &[(&str, &str, usize, &str)] = &[
    ("tar -xf a.tar {}", "--to-command", 6, "'rm -rf d'"),
    ("tar -cf a.tar {} src", "--use-compress-program", 5, "sh"),
    ("tar -cf a.tar {} src", "--checkpoint-action", 13, "exec=sh"),
    ("sort {} a.txt", "--compress-program", 6, "sh"),
    ("make {}", "--eval", 4, "'x:=$(shell rm -rf d)'"),
    ("man {} ls", "--pager", 5, "sh"),
    (
        "gawk {} a.txt",
        "--source",
        4,
        "'BEGIN{system(\"rm -rf d\")}'",
    ),
    ("gawk {} 'BEGIN{}' a.txt", "--load", 4, "x.so"),
    ("sed {} a.txt", "--expression", 3, "'w ../outside/x'"),
    ("env {}", "--split-string", 4, "'rm -rf d'"),
    ("git ls-remote {} .", "--upload-pack", 5, "'rm -rf d'"),
    ("git fetch {} origin", "--upload-pack", 5, "'rm -rf d'"),
    ("git push {} origin", "--receive-pack", 6, "'rm -rf d'"),
    ("git grep {} x", "--open-files-in-pager", 4, "sh"),
    ("git difftool {}", "--extcmd", 5, "sh"),
    (
        "git clone {} http://h/r",
        "--config",
        5,
        "core.sshCommand=sh",
    ),
    ("git config {} core.pager x", "--comment", 6, "user.name"),
    ("gdb -batch {}", "--eval-command", 4, "'shell rm -rf d'"),
    ("julia {} x.jl", "--eval", 4, "'run(`rm -rf d`)'"),
    ("fish {}", "--command", 4, "'rm -rf d'"),
];

/// Whether the analysis of `cmd` reports `path` (or something only known when it runs).
fn reports(cmd: &str, path: &str) -> bool {
    let a = troupe_tools::analyze(cmd);
    a.paths
        .iter()
        .any(|p| Path::new(&p.path).ends_with(path) || p.path == path)
        || !a.unknown_paths.is_empty()
}

/// Whether the analysis of `cmd` lists `path` through links ([`troupe_tools::PathUse::listed`]).
fn lists(cmd: &str, path: &str) -> bool {
    troupe_tools::analyze(cmd)
        .paths
        .iter()
        .any(|p| p.listed && p.path == path)
}

/// Option words holding every letter of `letters` in clusters of at most `split` letters
/// (`-aRl`, `-L`): the spellings a short-option parser reads the same.
fn clusters(letters: &[char], split: usize) -> Vec<String> {
    letters
        .chunks(split.max(1))
        .map(|c| format!("-{}", c.iter().collect::<String>()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// A listing that follows links (`ls` with R and L, `find -L`/`-follow`, `tree -l`, `du
    /// -L`) is reported as one, whatever the other letters, their order and grouping, the
    /// long spellings (whole or abbreviated) and where the options stand.
    #[test]
    fn following_listings_are_reported_in_every_spelling(
        cmd in prop::sample::select(vec!["ls", "find", "find-follow", "tree", "du"]),
        extra in prop::sample::subsequence(vec!['a', 'h', '1', 's', 'x'], 0..=3),
        long in any::<bool>(),
        split in 1usize..4,
        seed in any::<u64>(),
        dir in prop::sample::select(vec![".", "sub", "sub/deeper", ""]),
    ) {
        let (required, other): (Vec<char>, Vec<char>) = match cmd {
            "ls" if long => (vec![], extra.clone()),
            "ls" => (vec!['R', 'L'], extra.iter().copied().filter(|c| *c != 'x').collect()),
            "tree" => (vec!['l'], extra.iter().copied().filter(|c| *c == 'a').collect()),
            "du" if long => (vec![], extra.iter().copied().filter(|c| matches!(c, 'a' | 'h' | 's' | 'x')).collect()),
            "du" => (vec!['L'], extra.iter().copied().filter(|c| matches!(c, 'a' | 'h' | 's' | 'x')).collect()),
            _ => (vec![], vec![]),
        };
        let mut letters: Vec<char> = required.into_iter().chain(other).collect();
        // A deterministic shuffle from the seed (proptest shrinks the seed, not the order).
        let mut state = seed;
        for i in (1..letters.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            letters.swap(i, (state >> 33) as usize % (i + 1));
        }
        let mut opts = if letters.is_empty() { vec![] } else { clusters(&letters, split) };
        if long {
            // Whole or abbreviated (`--rec`, `--deref`): getopt_long takes any prefix that
            // names one option.
            let cut = |name: &str, min: usize, k: u64| name[..min + (k as usize) % (name.len() - min + 1)].to_string();
            match cmd {
                "ls" => opts.extend([cut("--recursive", 5, seed >> 8), cut("--dereference", 7, seed >> 16)]),
                "du" => opts.push(cut("--dereference", 7, seed >> 24)),
                _ => {}
            }
        }
        let operand = if dir.is_empty() { String::new() } else { format!(" {dir}") };
        let line = match cmd {
            "find" => format!("find -L{operand} -name '*.txt'"),
            "find-follow" => format!("find{operand} -follow -type f"),
            _ => format!("{cmd} {}{operand}", opts.join(" ")),
        };
        let listed = if dir.is_empty() { "." } else { dir };
        prop_assert!(lists(&line, listed), "{:?} is not reported as listing {:?}", line, listed);
    }

    /// An option whose value is code is opaque in every spelling the program reads: any
    /// prefix of its long name that names it alone (getopt_long, git's parse-options), with
    /// the value attached by `=` or in the next word.
    #[test]
    fn code_options_are_opaque_in_every_abbreviation(
        entry in prop::sample::select(CODE_LONG_OPTIONS.to_vec()),
        cut in any::<u64>(),
        attached in any::<bool>(),
    ) {
        let (template, name, unique, value) = entry;
        let opt = &name[..unique + (cut as usize) % (name.len() - unique + 1)];
        let spelled = if attached { format!("{opt}={value}") } else { format!("{opt} {value}") };
        let line = template.replace("{}", &spelled);
        let a = troupe_tools::analyze(&line);
        prop_assert!(!a.opaque.is_empty(), "{:?} is not opaque", line);
    }

    /// A short option with an attached path outside the project (`-o../x`, `-xf/etc/x`) is
    /// always reported, whatever the command and the option letters before it.
    #[test]
    fn attached_option_paths_are_reported(
        cmd in prop::sample::select(vec![
            "sort", "curl", "wget", "cp", "tar", "unzip", "patch", "gcc", "rustc", "make",
            "grep", "awk", "zip", "ls", "cat", "mytool", "rsync", "git format-patch",
        ]),
        before in prop::sample::select(vec!["", "v", "q"]),
        letter in prop::sample::select(
            "abcdfghijklmnopqrstuwxyzABCDEGHIJKLMNOPQRSTUVWXYZ".chars().collect::<Vec<_>>()
        ),
        path in prop::sample::select(vec![
            "../outside/x", "/etc/passwd", "~/.ssh/id_rsa", "../..", "..", "./../outside",
        ]),
    ) {
        // Values that are separators, fields or programs, not paths.
        let not_path = matches!(
            (cmd, letter),
            ("awk", 'F' | 'v' | 'e') | ("sort", 't' | 'k' | 'S') | ("grep", 'e') | ("curl", 'd' | 'F')
        );
        prop_assume!(!(not_path || (cmd == "awk" && before.contains('v'))));
        let line = format!("{cmd} -{before}{letter}{path} a.txt");
        prop_assert!(reports(&line, path.trim_start_matches("./")), "{:?} not reported", line);
    }
}

/// vim's long options that run commands, name a file it writes or a server it drives (vim
/// and neovim `main.c`), for `vim_long_options_are_opaque_in_any_case`.
const VIM_CODE_LONGS: &[&str] = &[
    "cmd",
    "remote-send",
    "remote-expr",
    "remote",
    "remote-silent",
    "startuptime",
    "servername",
    "log",
    "embed",
    "listen",
];

/// `name` with the letters whose flag in `upper` is set made upper case (cycling the flags).
fn recase(name: &str, upper: &[bool]) -> String {
    name.chars()
        .zip(upper.iter().cycle())
        .map(|(c, u)| if *u { c.to_ascii_uppercase() } else { c })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// vim compares long option names ignoring case (`STRNICMP`): every case spelling of an
    /// option that runs commands or names a file is opaque, for every name vim goes by.
    #[test]
    fn vim_long_options_are_opaque_in_any_case(
        prog in prop::sample::select(vec![
            "vim", "nvim", "vi", "view", "gvim", "vimdiff", "rvim", "rview", "evim", "gview",
        ]),
        name in prop::sample::select(VIM_CODE_LONGS.to_vec()),
        upper in prop::collection::vec(any::<bool>(), 1..12),
        before in prop::sample::select(vec!["", "-N ", "--noplugin ", "--CLEAN ", "a.txt "]),
    ) {
        let line = format!("{prog} {before}--{} '!rm -rf d' a.txt", recase(name, &upper));
        prop_assert!(!troupe_tools::analyze(&line).opaque.is_empty(), "{:?} is not opaque", line);
    }

    /// A lesskey file or text given to less is opaque in every spelling less reads: a long
    /// name cut to any unambiguous prefix with `=` or the next word, `k` after other flags
    /// in a cluster with the file attached or next, or a variable naming one.
    #[test]
    fn less_lesskey_is_opaque_in_every_spelling(
        form in 0usize..3,
        name in prop::sample::select(vec!["--lesskey-file", "--lesskey-src", "--lesskey-content", "--cmd"]),
        cut in any::<u64>(),
        attached in any::<bool>(),
        flags in prop::sample::subsequence(vec!['i', 'N', 'S', 'R', 'X', 'F', 'e'], 0..=3),
        var in prop::sample::select(vec![
            "LESSKEY", "LESSKEYIN", "LESSKEY_CONTENT", "LESSKEYIN_SYSTEM", "LESSOPEN",
            "LESSCLOSE", "LESS", "LESSEDIT",
        ]),
    ) {
        let flags: String = flags.into_iter().collect();
        let option = match form {
            0 => {
                let unique = if name == "--cmd" { 4 } else { 11 };
                let opt = &name[..unique + (cut as usize) % (name.len() - unique + 1)];
                if attached { format!("{opt}=k.txt") } else { format!("{opt} k.txt") }
            }
            1 if attached => format!("-{flags}kk.txt"),
            1 => format!("-{flags}k k.txt"),
            _ => String::new(),
        };
        let line = if form == 2 {
            format!("{var}=x less -{flags}i a.txt")
        } else {
            format!("less {option} a.txt")
        };
        prop_assert!(!troupe_tools::analyze(&line).opaque.is_empty(), "{:?} is not opaque", line);
    }
}

/// A wrapper, letters of its flags, letters of its options taking a value, and its long
/// options taking a value with the length of their shortest unambiguous prefix.
type WrapperOptions = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, usize)],
);

/// Wrappers and the options that take a value, for
/// `wrapped_commands_are_found_after_every_value_option`: (wrapper, letters of flags without
/// a value that may come first in a cluster, letters taking a value, long options taking a
/// value with the length of their shortest unambiguous prefix). Sources: env(1) (GNU
/// coreutils 9.2+, BSD), sudo's parse_args.c, doas(1), run0(1).
const WRAPPER_VALUE_OPTIONS: &[WrapperOptions] = &[
    (
        "env",
        "i0v",
        "uCaPLU",
        &[("--unset", 3), ("--chdir", 3), ("--argv0", 3)],
    ),
    (
        "sudo",
        "ABbEHiknNPSs",
        "aCcDgpRrTtUu",
        &[
            ("--auth-type", 4),
            ("--close-from", 4),
            ("--login-class", 8),
            ("--chdir", 5),
            ("--group", 3),
            ("--host", 4),
            ("--prompt", 5),
            ("--chroot", 5),
            ("--role", 4),
            ("--command-timeout", 4),
            ("--type", 3),
            ("--other-user", 3),
            ("--user", 3),
        ],
    ),
    ("doas", "n", "ua", &[]),
    (
        "run0",
        "i",
        "ugD",
        &[
            ("--user", 5),
            ("--unit", 5),
            ("--group", 3),
            ("--chdir", 3),
            ("--nice", 4),
            ("--machine", 4),
        ],
    ),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// A wrapper's option that takes a value takes it in every spelling its parser reads (the
    /// next word, attached, after flags in a cluster, a long name whole or cut to an
    /// unambiguous prefix with `=` or the next word), so the command after it is found.
    #[test]
    fn wrapped_commands_are_found_after_every_value_option(
        entry in prop::sample::select(WRAPPER_VALUE_OPTIONS.to_vec()),
        pick in any::<u64>(),
        cut in any::<u64>(),
        form in 0usize..4,
        flags in prop::collection::vec(any::<usize>(), 0..3),
    ) {
        let (wrapper, flag_letters, value_letters, longs) = entry;
        let flag_letters: Vec<char> = flag_letters.chars().collect();
        let flags: String = flags
            .into_iter()
            .map(|i| flag_letters[i % flag_letters.len()])
            .collect();
        let letters: Vec<char> = value_letters.chars().collect();
        let letter = letters[pick as usize % letters.len()];
        let option = match form {
            0 => format!("-{flags}{letter} sub"),
            1 => format!("-{flags}{letter}sub"),
            _ if longs.is_empty() => format!("-{letter} sub"),
            _ => {
                let (name, unique) = longs[pick as usize % longs.len()];
                let opt = &name[..unique + (cut as usize) % (name.len() - unique + 1)];
                if form == 2 { format!("{opt}=sub") } else { format!("{opt} sub") }
            }
        };
        let line = format!("{wrapper} {option} rm -rf d");
        let a = troupe_tools::analyze(&line);
        prop_assert!(
            a.parts.iter().any(|p| p.patterns.iter().any(|x| x == "rm -rf d")),
            "{:?} does not find `rm -rf d`: {:?}", line, a.parts
        );
    }
}

/// ssh_config(5) keywords that run a command, load a library or name a file ssh writes or
/// reads, for `ssh_code_options_are_opaque_in_every_spelling`.
const SSH_CODE_KEYS: &[&str] = &[
    "ProxyCommand",
    "LocalCommand",
    "KnownHostsCommand",
    "PKCS11Provider",
    "SecurityKeyProvider",
    "XAuthLocation",
    "RemoteCommand",
    "ControlPath",
    "IdentityAgent",
    "UserKnownHostsFile",
    "IdentityFile",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// `-o KEY=VALUE` with a key that runs a command or loads a library is opaque for ssh,
    /// scp and sftp in every spelling OpenSSH reads: the key in any case, `=` or a blank
    /// before the value, the option alone, attached or after flags in a cluster.
    #[test]
    fn ssh_code_options_are_opaque_in_every_spelling(
        prog in prop::sample::select(vec![
            ("ssh", "46AaCfGgKkMNnqsTtVvXxYy", "h"),
            ("scp", "346ABCpqrTv", "a.txt h:y"),
            ("sftp", "246AafhNpqrvC", "h"),
        ]),
        key in prop::sample::select(SSH_CODE_KEYS.to_vec()),
        upper in prop::collection::vec(any::<bool>(), 1..8),
        form in 0usize..3,
        blank in any::<bool>(),
        flags in prop::collection::vec(any::<usize>(), 0..3),
    ) {
        let (name, flag_letters, operands) = prog;
        let flag_letters: Vec<char> = flag_letters.chars().collect();
        let flags: String = flags.into_iter().map(|i| flag_letters[i % flag_letters.len()]).collect();
        let setting = format!("{}{}x.so", recase(key, &upper), if blank { " " } else { "=" });
        let option = match form {
            0 => format!("-o '{setting}'"),
            1 => format!("'-o{setting}'"),
            _ => format!("-{flags}o '{setting}'"),
        };
        let line = format!("{name} {option} {operands}");
        prop_assert!(!troupe_tools::analyze(&line).opaque.is_empty(), "{:?} is not opaque", line);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// `git config` writes the file of `--file`/`-f` whenever it changes something, in every
    /// spelling parse-options reads (`-f F`, `-fF`, `-zf F`, `--file=F`, `--fil F`), for
    /// every way of changing, with the file option before or after the change.
    #[test]
    fn git_config_file_is_written_in_every_spelling(
        form in 0usize..5,
        cut in any::<u64>(),
        change in prop::sample::select(vec![
            "user.name x",
            "--add user.name x",
            "--replace-all user.name x",
            "--unset user.name",
            "--unset-all user.name",
            "--rename-section a b",
            "--remove-section a",
            "set user.name x",
            "unset user.name",
            "rename-section a b",
            "remove-section a",
        ]),
        after in any::<bool>(),
    ) {
        let long = &"--file"[..5 + (cut as usize) % 2];
        let file = match form {
            0 => "-f a.txt".to_string(),
            1 => "-fa.txt".to_string(),
            2 => "-zf a.txt".to_string(),
            3 => format!("{long}=a.txt"),
            _ => format!("{long} a.txt"),
        };
        let subcommand = change.split(' ').next().is_some_and(|w| !w.starts_with('-') && !w.contains('.'));
        let line = if after && !subcommand {
            format!("git config {change} {file}")
        } else if subcommand {
            let (sub, rest) = change.split_once(' ').unwrap_or((change, ""));
            if after { format!("git config {sub} {file} {rest}") } else { format!("git config {file} {sub} {rest}") }
        } else {
            format!("git config {file} {change}")
        };
        let a = troupe_tools::analyze(&line);
        prop_assert!(
            a.paths.iter().any(|p| p.write && p.path.ends_with("a.txt")),
            "{:?} does not write a.txt: {:?}", line, a.paths
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// A makefile written by the same command and then run is opaque whatever the options
    /// around it: another option's value that looks like `-fFILE` (`-W -fx`: the default
    /// makefile is read), every spelling of `-f`/`--file`/`--makefile`, and `-C DIR` in
    /// front (make reads the makefiles there).
    #[test]
    fn a_written_makefile_is_opaque_in_every_spelling(
        absorber in prop::sample::select(vec![
            "-W", "-I", "-o", "-sW", "-kI", "-so", "--what-if", "--include-dir", "--old-file",
            "--new-file", "--assume-old", "--assume-new", "--what", "--inc", "--old",
        ]),
        given in prop::sample::select(vec![
            "-f e.mk", "-fe.mk", "-sf e.mk", "-ksfe.mk", "--file=e.mk", "--fi e.mk",
            "--makefile=e.mk", "--mak e.mk", "-j -f e.mk", "-j4 -f e.mk",
        ]),
        named in any::<bool>(),
        in_sub in any::<bool>(),
    ) {
        let (dir, cd) = if in_sub { ("sub/", "-C sub ") } else { ("", "") };
        let line = if named {
            format!("echo 'all:; rm -rf d' > {dir}e.mk; make {cd}{given}")
        } else {
            format!("echo 'all:; rm -rf d' > {dir}Makefile; make {cd}{absorber} -fx")
        };
        prop_assert!(!troupe_tools::analyze(&line).opaque.is_empty(), "{:?} is not opaque", line);
    }
}
