//! Skills: folders with a `SKILL.md` (YAML front matter `name` and `description`, body =
//! instructions) that an agent loads on demand with the `skill` tool (OpenCode `skill/`,
//! the layout Claude Code and other agents share).
//!
//! Where they are found, nearest first (the first skill of a name wins):
//! 1. for each directory from the session directory up to the worktree (as instruction files
//!    are found), `.troupe/skills/*/SKILL.md`, `.claude/skills/*/SKILL.md` and
//!    `.agents/skills/*/SKILL.md`;
//! 2. `<global config dir>/skills/*/SKILL.md`.
//!
//! A file that cannot be read or whose front matter is bad is reported as a [`SkillProblem`]
//! naming the file; the other skills still load.
//!
//! Reads files synchronously: call it inside `spawn_blocking`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::markdown::project_dirs;

/// The project folders skills are searched in, below each project directory, in order.
pub const PROJECT_SKILL_DIRS: [&str; 3] = [".troupe/skills", ".claude/skills", ".agents/skills"];
/// The skill file in each skill folder.
pub const SKILL_FILE: &str = "SKILL.md";
/// Most bundled files listed when a skill is loaded (OpenCode lists 10).
pub const MAX_LISTED_FILES: usize = 10;

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// `name` from the front matter: what `skill {name}` loads and what permission patterns
    /// match.
    pub name: String,
    /// `description` from the front matter: when to use it (shown to the model).
    pub description: String,
    /// Absolute path of its `SKILL.md`.
    pub location: PathBuf,
    /// The instructions: the file's text after the front matter, trimmed.
    pub body: String,
}

impl Skill {
    /// The skill's folder (the parent of `SKILL.md`).
    pub fn dir(&self) -> &Path {
        self.location.parent().unwrap_or(&self.location)
    }

    /// Up to [`MAX_LISTED_FILES`] files bundled in the skill's folder besides `SKILL.md`
    /// (recursive, hidden files and folders skipped, sorted), absolute paths.
    pub fn bundled_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![self.dir().to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            let mut entries: Vec<_> = entries.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let path = e.path();
                if e.file_name().to_string_lossy().starts_with('.') || path == self.location {
                    continue;
                }
                match e.file_type() {
                    Ok(ft) if ft.is_dir() => stack.push(path),
                    Ok(ft) if ft.is_file() => out.push(path),
                    _ => {}
                }
            }
        }
        out.sort();
        out.truncate(MAX_LISTED_FILES);
        out
    }
}

/// A `SKILL.md` that was skipped: its path and why (with the line for YAML errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillProblem {
    /// The file.
    pub location: PathBuf,
    /// What is wrong, e.g. `front matter has no "description"`.
    pub message: String,
}

impl std::fmt::Display for SkillProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location.display(), self.message)
    }
}

/// What [`discover`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skills {
    /// The skills, sorted by name; one per name (the nearest).
    pub skills: Vec<Skill>,
    /// Files that were skipped, in search order.
    pub problems: Vec<SkillProblem>,
}

impl Skills {
    /// The skill called exactly `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// The skill names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.skills.iter().map(|s| s.name.as_str()).collect()
    }
}

/// The folders searched for skills, in precedence order (see the module docs): each project
/// directory from `directory` up to `worktree` (just `directory` when it is not inside the
/// worktree) with [`PROJECT_SKILL_DIRS`], then `<global_dir>/skills`.
pub fn skill_roots(directory: &Path, worktree: &Path, global_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = project_dirs(directory, worktree);
    // project_dirs lists outermost first; the nearest directory takes precedence.
    dirs.reverse();
    let mut out: Vec<PathBuf> = dirs
        .iter()
        .flat_map(|d| PROJECT_SKILL_DIRS.iter().map(move |s| d.join(s)))
        .collect();
    out.push(global_dir.join("skills"));
    out
}

/// Find the skills of a session in `directory` (worktree `worktree`) and the global config
/// directory `global_dir`. Missing folders are no error; each unreadable or invalid
/// `SKILL.md` becomes a [`SkillProblem`]. A name found again further out is ignored.
pub fn discover(directory: &Path, worktree: &Path, global_dir: &Path) -> Skills {
    let mut found = Skills::default();
    let mut names = HashSet::new();
    let mut seen_files = HashSet::new();
    for root in skill_roots(directory, worktree, global_dir) {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut folders: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        folders.sort();
        for folder in folders {
            let file = folder.join(SKILL_FILE);
            if !file.is_file() {
                continue;
            }
            let key = std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone());
            if !seen_files.insert(key) {
                continue;
            }
            match load(&file) {
                Ok(skill) => {
                    if names.insert(skill.name.clone()) {
                        found.skills.push(skill);
                    }
                }
                Err(message) => found.problems.push(SkillProblem {
                    location: file,
                    message,
                }),
            }
        }
    }
    found.skills.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// Read and parse one `SKILL.md`. Errors: the message (without the path).
pub fn load(file: &Path) -> Result<Skill, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read it: {e}"))?;
    let mut skill = parse(&text)?;
    skill.location = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    Ok(skill)
}

/// Parse the text of a `SKILL.md` (location left empty). The front matter is required and
/// must be a YAML mapping with non-empty string `name` and `description`. Errors: what is
/// wrong, with the file line for YAML errors.
pub fn parse(text: &str) -> Result<Skill, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(
            "no front matter: the file must start with a `---` line, then `name:` and `description:`, then `---`"
                .into(),
        );
    }
    let start = text.find('\n').map(|i| i + 1).unwrap_or(text.len());
    let mut offset = start;
    let mut end = None;
    for line in text[start..].split_inclusive('\n') {
        if line.trim_end() == "---" {
            end = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let Some((fm_end, body_start)) = end else {
        return Err("front matter is not closed with a `---` line".into());
    };
    // A blank first line keeps YAML line numbers equal to file lines.
    let fm = format!("\n{}", &text[start..fm_end]);
    let value: Value = serde_norway::from_str(&fm).map_err(|e| match e.location() {
        Some(l) => format!("invalid YAML front matter at line {}: {e}", l.line()),
        None => format!("invalid YAML front matter: {e}"),
    })?;
    let Value::Object(fields) = value else {
        return Err("front matter must be a mapping with `name` and `description`".into());
    };
    let field = |key: &str| -> Result<String, String> {
        match fields.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Some(Value::String(_)) => Err(format!("front matter `{key}` is empty")),
            Some(other) => Err(format!(
                "front matter `{key}` must be a string, got {}",
                crate::permission::json_kind(other)
            )),
            None => Err(format!("front matter has no `{key}`")),
        }
    };
    let name = field("name")?;
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("front matter `name` {name:?} contains whitespace"));
    }
    let description = field("description")?;
    Ok(Skill {
        name,
        description,
        location: PathBuf::new(),
        body: text[body_start..].trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn skill_md(name: &str, desc: &str, body: &str) -> String {
        format!("---\nname: {name}\ndescription: {desc}\n---\n\n{body}\n")
    }

    #[test]
    fn parses_front_matter_and_body() {
        let s = parse("---\nname: pdf\ndescription: \"Read PDFs: text and tables\"\nlicense: MIT\n---\n# PDF\n\nUse pdftotext.\n").unwrap();
        assert_eq!(s.name, "pdf");
        assert_eq!(s.description, "Read PDFs: text and tables");
        assert_eq!(s.body, "# PDF\n\nUse pdftotext.");
    }

    #[test]
    fn bad_front_matter_says_what_is_wrong() {
        assert!(
            parse("# no front matter")
                .unwrap_err()
                .contains("no front matter")
        );
        assert!(parse("---\nname: x\n").unwrap_err().contains("not closed"));
        assert_eq!(
            parse("---\nname: x\n---\nbody").unwrap_err(),
            "front matter has no `description`"
        );
        assert_eq!(
            parse("---\nname: [a]\ndescription: d\n---\n").unwrap_err(),
            "front matter `name` must be a string, got an array"
        );
        assert!(
            parse("---\nname: x\ndescription: d\n---\n")
                .map(|s| s.body.is_empty())
                .unwrap()
        );
        let e = parse("---\nname: x\ndescription: [unclosed\n---\n").unwrap_err();
        assert!(e.starts_with("invalid YAML front matter at line"), "{e}");
        assert!(parse("---\nname: two words\ndescription: d\n---\n").is_err());
        assert!(parse("---\n- a\n---\n").unwrap_err().contains("mapping"));
    }

    #[test]
    fn discovery_order_precedence_and_problems() {
        let tmp = tempfile::tempdir().unwrap();
        let wt = tmp.path().join("repo");
        let sub = wt.join("pkg");
        let global = tmp.path().join("global");
        for (root, dir, name, description, body) in [
            (&wt, ".claude/skills", "review", "outer review", "outer"),
            (&sub, ".troupe/skills", "review", "inner review", "inner"),
            (&wt, ".agents/skills", "deploy", "ship it", "steps"),
            (&global, "skills", "notes", "global notes", "n"),
            (&global, "skills", "review", "global review", "g"),
        ] {
            write(
                &root.join(dir).join(name).join("SKILL.md"),
                &skill_md(name, description, body),
            );
        }
        write(
            &wt.join(".troupe/skills/broken/SKILL.md"),
            "---\nname: broken\n---\n",
        );
        // A folder without SKILL.md and a stray file are ignored.
        std::fs::create_dir_all(wt.join(".troupe/skills/empty")).unwrap();
        write(&wt.join(".troupe/skills/README.md"), "x");

        let found = discover(&sub, &wt, &global);
        assert_eq!(found.names(), vec!["deploy", "notes", "review"]);
        assert_eq!(found.get("review").unwrap().description, "inner review");
        assert_eq!(found.get("review").unwrap().body, "inner");
        assert_eq!(found.problems.len(), 1);
        let p = found.problems[0].to_string();
        assert!(
            p.contains(".troupe/skills/broken/SKILL.md") && p.contains("no `description`"),
            "{p}"
        );
        // Outside the worktree only the directory itself is searched.
        let lone = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&lone).unwrap();
        assert_eq!(
            discover(&lone, &wt, &global).names(),
            vec!["notes", "review"]
        );
    }

    #[test]
    fn bundled_files_skip_the_skill_file_and_hidden_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        write(&dir.join("SKILL.md"), &skill_md("s", "d", "b"));
        write(&dir.join("scripts/run.sh"), "echo");
        write(&dir.join("reference.md"), "r");
        write(&dir.join(".secret"), "x");
        let s = load(&dir.join("SKILL.md")).unwrap();
        assert_eq!(
            s.bundled_files(),
            vec![dir.join("reference.md"), dir.join("scripts/run.sh")]
        );
    }
}
