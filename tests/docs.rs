//! Every code block of the README and of `docs/`, tested the way `rustdoc` tests code:
//! each says how it is tested in an HTML comment on the line before it (invisible where
//! the Markdown is read):
//!
//! - `<!-- doc: run -->`: run here, in order, with `bash -euo pipefail` in the checkout,
//!   `maestro` and the C library installed in a prefix that stands for `/opt/maestro` (the
//!   block's `/opt/maestro` is that prefix), each within 15 minutes (a release build
//!   among them), leaving no file in the checkout that git does not ignore;
//! - `<!-- doc: elsewhere TESTFILE FUNCTION -->`: run by that integration test (it must
//!   exist: the test file holds the function); checked as `check` blocks are;
//! - `<!-- doc: check -->`: not run (it needs a cluster, an installation, another host),
//!   but checked: shell syntax (`bash -n`), every path of the checkout it names exists,
//!   and every option a `maestro` command (or a pool tool's) gives is one it takes;
//! - `<!-- doc: synopsis -->`: each `maestro ...` line names exactly the options the
//!   command's `--help` lists (so a synopsis never misses nor invents one);
//! - `<!-- doc: text -->`: output samples, configuration, code of another language.
//!
//! A block without a marker fails, saying where.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{maestro, repo, run};

/// How a block is tested.
#[derive(Clone, Debug, PartialEq, Eq)]
enum How {
    Run,
    Elsewhere { file: String, function: String },
    Check,
    Synopsis,
    Text,
}

/// A code block of a Markdown file.
#[derive(Debug)]
struct Block {
    /// `FILE:LINE` of its first line.
    at: String,
    how: Result<How, String>,
    /// A fenced block's language (`python`, `yaml`, ...); empty for shell and indented
    /// blocks.
    lang: String,
    text: String,
}

/// README.md, then the book's chapters in the order of `docs/SUMMARY.md` (the order `run`
/// blocks run in: a chapter may use what an earlier one built), then any other Markdown
/// file under `docs/`.
fn documents() -> Vec<PathBuf> {
    let book = repo().join("docs");
    let summary = std::fs::read_to_string(book.join("SUMMARY.md")).expect("docs/SUMMARY.md");
    let mut docs = vec![repo().join("README.md")];
    docs.extend(links(&summary).into_iter().map(|l| book.join(l)));
    for p in files_under(&book, "md", &[]) {
        if !docs.contains(&p) {
            docs.push(p);
        }
    }
    docs
}

/// The files ending in `.ext` under `dir`, sorted, not looking into directories named in
/// `skip`.
fn files_under(dir: &Path, ext: &str, skip: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, skip: &[&str], into: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                if !skip.iter().any(|s| e.file_name() == **s) {
                    walk(&p, ext, skip, into);
                }
            } else if p.extension().is_some_and(|x| x == ext) {
                into.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, ext, skip, &mut files);
    files.sort();
    files
}

/// The targets of a text's Markdown links (`[text](target)`), anchors and web addresses
/// left out.
fn links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|t| t.split('#').next().unwrap_or(t).to_string())
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

/// The marker `<!-- doc: ... -->` of a line, if it is one.
fn marker(line: &str) -> Option<Result<How, String>> {
    let inner = line
        .trim()
        .strip_prefix("<!-- doc:")?
        .strip_suffix("-->")?
        .trim();
    let words: Vec<&str> = inner.split_whitespace().collect();
    Some(match words.as_slice() {
        ["run"] => Ok(How::Run),
        ["check"] => Ok(How::Check),
        ["synopsis"] => Ok(How::Synopsis),
        ["text"] => Ok(How::Text),
        ["elsewhere", file, function] => Ok(How::Elsewhere {
            file: file.to_string(),
            function: function.to_string(),
        }),
        _ => Err(format!("unknown marker {line:?}")),
    })
}

/// The code blocks of `path` (fenced, and indented by four spaces after a blank line),
/// each with the marker among the HTML comments right before it.
fn blocks(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).expect("read a document");
    let name = path
        .strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    // The HTML comments right before the current line (a marker among them).
    let mut comments: Vec<&str> = Vec::new();
    let mut blank_before = true;
    while i < lines.len() {
        let line = lines[i];
        let fence = line.trim_start().starts_with("```");
        let indented = line.starts_with("    ") && blank_before && !line.trim().is_empty();
        if fence || indented {
            let start = i;
            let lang = if fence {
                line.trim_start().trim_start_matches('`').trim().to_string()
            } else {
                String::new()
            };
            let mut body = Vec::new();
            if fence {
                i += 1;
                while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                    body.push(lines[i]);
                    i += 1;
                }
                i += 1;
            } else {
                while i < lines.len()
                    && (lines[i].starts_with("    ") || lines[i].trim().is_empty())
                {
                    body.push(lines[i].get(4..).unwrap_or(""));
                    i += 1;
                }
                while body.last().is_some_and(|l| l.trim().is_empty()) {
                    body.pop();
                }
            }
            let how = comments
                .iter()
                .find_map(|c| marker(c))
                .unwrap_or_else(|| Err("no <!-- doc: ... --> marker before it".into()));
            found.push(Block {
                at: format!("{name}:{}", start + 1),
                how,
                lang: if matches!(lang.as_str(), "sh" | "bash" | "console") {
                    String::new()
                } else {
                    lang
                },
                text: body.join("\n"),
            });
            comments.clear();
            blank_before = true;
            continue;
        }
        if line.trim_start().starts_with("<!--") {
            comments.push(line);
        } else if !line.trim().is_empty() {
            comments.clear();
        }
        blank_before = line.trim().is_empty();
        i += 1;
    }
    found
}

fn all_blocks() -> Vec<Block> {
    documents().iter().flat_map(|d| blocks(d)).collect()
}

/// The block's logical lines: `\` continuations joined, comments removed.
fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let line = strip_comment(line);
        match line.trim_end().strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(&line);
                let whole = std::mem::take(&mut cur);
                if !whole.trim().is_empty() {
                    out.push(whole);
                }
            }
        }
    }
    out
}

/// `line` without a `#` comment (one outside quotes, after a blank or at the start).
fn strip_comment(line: &str) -> String {
    let (mut quote, mut prev) = (None, ' ');
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return line[..i].to_string(),
            _ => {}
        }
        prev = c;
    }
    line.to_string()
}

/// The simple commands of a logical line, each as words (quotes removed; `$(...)` kept
/// as one word).
fn commands(line: &str) -> Vec<Vec<String>> {
    let mut cmds = vec![Vec::new()];
    let mut word = String::new();
    let (mut quote, mut depth) = (None::<char>, 0usize);
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let end_word = |word: &mut String, cmds: &mut Vec<Vec<String>>| {
        if !word.is_empty() {
            cmds.last_mut()
                .expect("a command")
                .push(std::mem::take(word));
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') if depth == 0 => quote = Some(c),
            (None, '(') if word.ends_with('$') || depth > 0 => {
                depth += 1;
                word.push(c);
            }
            (None, ')') if depth > 0 => {
                depth -= 1;
                word.push(c);
            }
            (None, c) if depth > 0 => word.push(c),
            (None, '|' | '&' | ';') => {
                end_word(&mut word, &mut cmds);
                cmds.push(Vec::new());
                while chars.get(i + 1).is_some_and(|&n| n == '|' || n == '&') {
                    i += 1;
                }
            }
            (None, c) if c.is_whitespace() => end_word(&mut word, &mut cmds),
            (None, '\\') => {
                i += 1;
                if let Some(&n) = chars.get(i) {
                    word.push(n);
                }
            }
            (None, c) => word.push(c),
        }
        i += 1;
    }
    end_word(&mut word, &mut cmds);
    cmds.retain(|c| !c.is_empty());
    cmds
}

/// An option a program's `-h` lists.
#[derive(Debug, Clone)]
struct Opt {
    names: Vec<String>,
    takes_value: bool,
}

/// What a program (and subcommand) takes, from its `-h`.
#[derive(Debug, Default)]
struct Cli {
    subcommands: BTreeSet<String>,
    options: Vec<Opt>,
}

/// mpirun's habits `maestro run` accepts without listing them (told in its help's end).
const HABITS: [&str; 3] = ["-np", "--oversubscribe", "--allow-run-as-root"];

impl Cli {
    /// Reads `program ARGS... -h`.
    fn of(program: &Path, args: &[String]) -> Cli {
        let out = run(
            Command::new(program).args(args).arg("-h"),
            Duration::from_secs(30),
        );
        assert_eq!(
            out.code(),
            Some(0),
            "{} {args:?} -h: {out:?}",
            program.display()
        );
        let mut cli = Cli::default();
        let mut section = "";
        for line in out.stdout.lines() {
            if !line.starts_with(' ') {
                section = line;
                continue;
            }
            let t = line.trim_start();
            if section.starts_with("Commands:") {
                if let Some(w) = t.split_whitespace().next() {
                    cli.subcommands.insert(w.to_string());
                }
            } else if section.starts_with("Options:") && t.starts_with('-') {
                // `-n, --np <NPROCS>  Number of ranks [alias: --nprocs]`
                let head = t.split("  ").next().unwrap_or(t);
                let mut names: Vec<String> = head
                    .split([',', ' '])
                    .filter(|w| w.starts_with('-'))
                    .map(str::to_string)
                    .collect();
                for marker in ["[alias: ", "[aliases: "] {
                    if let Some(rest) = t.split(marker).nth(1) {
                        let list = rest.split(']').next().unwrap_or("");
                        names.extend(list.split(", ").map(|a| a.trim().to_string()));
                    }
                }
                cli.options.push(Opt {
                    names,
                    takes_value: head.contains('<'),
                });
            }
        }
        cli
    }

    /// The command `words` (program first) runs: the subcommands named in front, what that
    /// (sub)command takes, and the number of words its path took.
    fn resolve(program: &Path, words: &[impl AsRef<str>]) -> (Vec<String>, Cli, usize) {
        let mut path = Vec::new();
        let mut cli = Cli::of(program, &path);
        for w in words.iter().skip(1).map(AsRef::as_ref) {
            if !cli.subcommands.contains(w) {
                break;
            }
            path.push(w.to_string());
            cli = Cli::of(program, &path);
        }
        let taken = 1 + path.len();
        (path, cli, taken)
    }

    fn option(&self, name: &str) -> Option<&Opt> {
        self.options
            .iter()
            .find(|o| o.names.iter().any(|n| n == name))
    }

    /// An option's name as synopses are compared: its long name, else its short one.
    fn canonical(o: &Opt) -> String {
        o.names
            .iter()
            .find(|n| n.starts_with("--"))
            .or(o.names.first())
            .cloned()
            .unwrap_or_default()
    }

    /// The options a synopsis should name: all but help and version.
    fn documented(&self) -> BTreeSet<String> {
        self.options
            .iter()
            .map(Cli::canonical)
            .filter(|n| !["--help", "--version"].contains(&n.as_str()))
            .collect()
    }
}

/// The program a command runs that this test knows the options of: `maestro` (by any
/// path), or a tool of the pool built as an example.
fn known_program(word: &str) -> Option<PathBuf> {
    let base = word.rsplit('/').next().unwrap_or(word);
    if base == "maestro" {
        return Some(maestro());
    }
    ["pool_tracer", "pool_archiver", "pool_librarian"]
        .contains(&base)
        .then(|| common::example(base))
}

/// A command's words after its `VAR=value` assignments.
fn program_words(cmd: &[String]) -> &[String] {
    let skip = cmd
        .iter()
        .take_while(|w| {
            w.split_once('=').is_some_and(|(k, _)| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        })
        .count();
    &cmd[skip..]
}

/// Checks the options `words` (a known program's command) gives: each one it takes.
fn check_options(program: &Path, words: &[String]) -> Result<(), String> {
    let (path, cli, taken) = Cli::resolve(program, words);
    let rest = &words[taken..];
    let running = path.first().is_some_and(|p| p == "run");
    let mut i = 0;
    while i < rest.len() {
        let w = &rest[i];
        i += 1;
        if w == "--" {
            break;
        }
        if !w.starts_with('-') || w == "-" {
            // `maestro run`'s program: the rest is the program's own.
            if running {
                break;
            }
            continue;
        }
        let name = w.split('=').next().unwrap_or(w);
        if HABITS.contains(&name) && running {
            i += usize::from(name == "-np");
            continue;
        }
        match cli.option(name) {
            Some(o) => i += usize::from(o.takes_value && !w.contains('=')),
            None => {
                return Err(format!(
                    "{} {}: no option {name} (it takes {:?})",
                    program.display(),
                    path.join(" "),
                    cli.options.iter().map(|o| &o.names).collect::<Vec<_>>()
                ));
            }
        }
    }
    Ok(())
}

/// The words of a block that name a path of the checkout (`scripts/...`, `examples/...`
/// and the like), as a shell in the block's directory would see them.
fn check_paths(text: &str) -> Result<(), String> {
    const TOP: [&str; 8] = [
        "scripts/",
        "examples/",
        "capi/",
        "docs/",
        "tests/",
        "python/",
        "pool/",
        ".ci/",
    ];
    let mut cwd = repo();
    for line in logical_lines(text) {
        for cmd in commands(&line) {
            let words = program_words(&cmd);
            if words.first().is_some_and(|w| w == "cd") {
                if let Some(d) = words.get(1) {
                    cwd = cwd.join(d);
                }
                continue;
            }
            for w in words {
                let w = w.split_once('=').map_or(w.as_str(), |(_, v)| v);
                if w.contains('$') || w.contains('*') || w.contains('{') {
                    continue;
                }
                if TOP.iter().any(|t| w.starts_with(t)) && !cwd.join(w).exists() {
                    return Err(format!(
                        "{w} does not exist (in {})",
                        cwd.strip_prefix(repo()).unwrap_or(&cwd).display()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `bash -n` of the block.
fn check_syntax(text: &str) -> Result<(), String> {
    let out = run(
        Command::new("bash").args(["-n", "-c", text]),
        Duration::from_secs(30),
    );
    (out.code() == Some(0))
        .then_some(())
        .ok_or_else(|| format!("bash -n: {}", out.stderr.trim()))
}

/// The checks of a `check` (and `run`, `elsewhere`) block: none for code of another
/// language.
fn check(block: &Block) -> Result<(), String> {
    if !block.lang.is_empty() {
        return Ok(());
    }
    check_syntax(&block.text)?;
    check_paths(&block.text)?;
    for line in logical_lines(&block.text) {
        for cmd in commands(&line) {
            let words = program_words(&cmd);
            if let Some(program) = words.first().and_then(|w| known_program(w)) {
                check_options(&program, words)?;
            }
        }
    }
    Ok(())
}

/// Every block says how it is tested, and every marker is known.
#[test]
fn every_code_block_says_how_it_is_tested() {
    let bad: Vec<String> = all_blocks()
        .into_iter()
        .filter_map(|b| b.how.err().map(|e| format!("{}: {e}", b.at)))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The blocks not run here are still commands that parse, name what exists and give
/// options their programs take; those run elsewhere name a test that exists.
#[test]
fn blocks_not_run_here_are_checked() {
    let mut failures = Vec::new();
    for b in all_blocks() {
        let result = match &b.how {
            Ok(How::Check) => check(&b),
            Ok(How::Elsewhere { file, function }) => {
                let src = std::fs::read_to_string(repo().join(file)).unwrap_or_default();
                let defined = [
                    format!("fn {function}("),
                    format!("def {function}("),
                    format!("mod {function} "),
                ];
                if defined.iter().any(|d| src.contains(d.as_str())) {
                    check(&b)
                } else {
                    Err(format!("{file} has no test {function}"))
                }
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            failures.push(format!("{}: {e}", b.at));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Each synopsis line names exactly the options its command's help lists.
#[test]
fn synopses_name_every_option_and_no_other() {
    let mut failures = Vec::new();
    for b in all_blocks()
        .into_iter()
        .filter(|b| b.how == Ok(How::Synopsis))
    {
        for line in synopses(&b.text) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(program) = words.first().and_then(|w| known_program(w)) else {
                failures.push(format!(
                    "{}: {line:?} is no synopsis of a known program",
                    b.at
                ));
                continue;
            };
            let (path, cli, _) = Cli::resolve(&program, &words);
            let named: BTreeSet<String> = words
                .iter()
                .flat_map(|w| w.split(['[', ']', '|', '(', ')']))
                .filter(|w| w.starts_with('-') && w.len() > 1 && *w != "--")
                .map(|w| w.split('=').next().unwrap_or(w).to_string())
                .map(|w| cli.option(&w).map_or(w, Cli::canonical))
                .collect();
            let listed = cli.documented();
            let missing: Vec<_> = listed.difference(&named).collect();
            let unknown: Vec<_> = named.difference(&listed).collect();
            if !missing.is_empty() || !unknown.is_empty() {
                failures.push(format!(
                    "{}: {} {}: the synopsis misses {missing:?} and names {unknown:?}, which it does not take",
                    b.at,
                    program.display(),
                    path.join(" ")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The synopses of a block: a line that starts a command, with the indented lines after
/// it (comments removed).
fn synopses(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = strip_comment(line);
        match out.last_mut() {
            Some(last) if line.starts_with(char::is_whitespace) => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ if line.trim().is_empty() => {}
            _ => out.push(line.trim().to_string()),
        }
    }
    out
}

/// The files of the checkout that git neither tracks nor ignores.
fn untracked() -> String {
    let out = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(repo())
        .output()
        .expect("git status");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("??"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Every `run` block runs, as written and in order, to success in the checkout, with the
/// environment the README's installation section sets (the C library's prefix for
/// `/opt/maestro`, its `bin` on `PATH`, `PKG_CONFIG_PATH`) and Open MPI's consent to run
/// as root; none leaves a file the checkout does not ignore.
#[test]
fn blocks_marked_run_run() {
    let c = common::capi::installed();
    let prefix = c.prefix.to_str().expect("a UTF-8 prefix").to_string();
    let tmp = tempfile::tempdir().expect("tempdir");
    // A block starts the single-node Slurm, whose ports are fixed: one at a time.
    let _slurm = common::FileLock::acquire(Path::new(common::SLURM_LOCK));
    let before = untracked();
    let mut failures = Vec::new();
    for b in all_blocks().into_iter().filter(|b| b.how == Ok(How::Run)) {
        let script = format!(
            "set -euo pipefail\n{}\n",
            b.text.replace("/opt/maestro", &prefix)
        );
        let path = format!("{prefix}/bin:{}", std::env::var("PATH").unwrap_or_default());
        let out = run(
            Command::new("bash")
                .args(["-c", &script])
                .current_dir(repo())
                .env("PATH", path)
                .env("PKG_CONFIG_PATH", format!("{prefix}/lib/pkgconfig"))
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                .env("TMPDIR", tmp.path())
                .env_remove("MSTRO_POOL_MANAGER_INFO"),
            Duration::from_secs(900),
        );
        if out.code() != Some(0) {
            failures.push(format!("{}: {out:?}", b.at));
        }
        let after = untracked();
        if after != before {
            failures.push(format!("{}: it left files in the checkout:\n{after}", b.at));
        }
    }
    // A block that failed half-way may have left its Slurm running.
    let _ = run(
        Command::new(repo().join("scripts/slurm-local.sh"))
            .arg("stop")
            .env("SLURM_LOCAL_DIR", "/tmp/sl"),
        Duration::from_secs(60),
    );
    let _ = std::fs::remove_dir_all("/tmp/sl");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every link of the README and the book names a file that is there (the book's own
/// check, without a plugin: `mdbook build` does not fail on a broken link).
#[test]
fn every_link_of_the_docs_leads_somewhere() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("a document");
        let dir = doc.parent().expect("a directory");
        for target in links(&text) {
            if !dir.join(&target).exists() {
                broken.push(format!("{}: {target}", doc.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
}

#[test]
fn the_block_parser_takes_shell_as_written() {
    assert_eq!(
        commands("A=1 maestro run -n 3 ./x 'a b' && echo \"$(date)\"; ls | wc -l"),
        vec![
            vec!["A=1", "maestro", "run", "-n", "3", "./x", "a b"],
            vec!["echo", "$(date)"],
            vec!["ls"],
            vec!["wc", "-l"],
        ]
    );
    assert_eq!(
        logical_lines("a \\\n  b # comment\n# whole\nc '#' d"),
        vec!["a    b ", "c '#' d"]
    );
    assert_eq!(
        marker("<!-- doc: elsewhere tests/pgen.rs f -->"),
        Some(Ok(How::Elsewhere {
            file: "tests/pgen.rs".into(),
            function: "f".into()
        }))
    );
    assert!(marker("<!-- doc: sometimes -->").is_some_and(|m| m.is_err()));
}

/// The configuration reference is what `maestro reference` generates from the code's own
/// tables (the variables the library reads, every command's options).
#[test]
fn the_configuration_reference_is_current() {
    let out = run(
        Command::new(maestro()).arg("reference"),
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let file = std::fs::read_to_string(repo().join("docs/configuration.md")).expect("reference");
    assert!(
        out.stdout == file,
        "docs/configuration.md is stale: regenerate it with `maestro reference > docs/configuration.md`"
    );
}

/// Every `MSTRO_*` variable the code reads (`var("MSTRO_...")`, `getenv`, a clap `env =`, a
/// `..._ENV` constant) is in the configuration reference's table.
#[test]
fn every_variable_the_code_reads_is_in_the_reference() {
    let reference =
        std::fs::read_to_string(repo().join("docs/configuration.md")).expect("reference");
    let listed: BTreeSet<&str> = reference
        .lines()
        .filter_map(|l| l.strip_prefix("| `MSTRO_"))
        .filter_map(|l| l.split('`').next())
        .collect();
    let files = files_under(&repo(), "rs", &["target", "tests", ".git", "fuzz"]);
    let mut missing = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for line in text.lines() {
            let reads = [
                "var(",
                "var_os(",
                "getenv(",
                "env_text(",
                "env = ",
                ": &str = ",
            ]
            .iter()
            .any(|r| line.contains(r));
            if !reads {
                continue;
            }
            for piece in line.split("\"MSTRO_").skip(1) {
                let name: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if piece[name.len()..].starts_with('"') && !listed.contains(name.as_str()) {
                    missing.insert(format!("MSTRO_{name} ({})", f.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "read by the code but not in the reference (add them to mstro::session::variables::VARIABLES): {missing:?}"
    );
    assert!(listed.len() >= 20, "the reference lists {listed:?}");
}
