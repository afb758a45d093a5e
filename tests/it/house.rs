//! The house rules, checked on the source itself (ARCHITECTURE.md says
//! why): no file of `src/` over 450 lines of code, no folder with more than
//! 12 files, the top-level modules importing one another without a cycle,
//! and no cycle of three or more files anywhere.
//!
//! The reading is deliberately plain: it follows `use` statements and
//! written-out `crate::`/`super::`/`self::` paths (re-exports followed to the
//! file that defines a name), and skips each file's `#[cfg(test)]` module.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_CODE_LINES: usize = 450;
const MAX_FILES_PER_FOLDER: usize = 12;

struct Source {
    /// The module path: `["backend", "redis", "script"]`; `[]` is lib.rs.
    module: Vec<String>,
    /// The file, relative to `src/`.
    file: String,
    /// The code without comments and without the test module.
    code: String,
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files
        .into_iter()
        .map(|path| {
            let file = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let mut module: Vec<String> = file
                .trim_end_matches(".rs")
                .split('/')
                .map(String::from)
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let text = fs::read_to_string(&path).unwrap();
            Source {
                module,
                file,
                code: without_tests(&without_comments(&text)),
            }
        })
        .collect()
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Everything from a `#[cfg(test)]` module on (test modules close files here).
fn without_tests(code: &str) -> String {
    let lines: Vec<&str> = code.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|next| next.trim_start().starts_with("mod "))
        })
        .unwrap_or(lines.len());
    lines[..end].join("\n")
}

fn code_lines(code: &str) -> usize {
    code.lines().filter(|line| !line.trim().is_empty()).count()
}

/// The paths one `use` tree names: `a::{b, c::{d as e}}` → `a::b`, `a::c::d`
/// (with the name each is known by here).
fn expand(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String, bool)>, public: bool) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let mut base = prefix.to_vec();
        base.extend(segments(&tree[..open]));
        let inner = &tree[open + 1..tree.rfind('}').unwrap()];
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&inner[start..i], &base, out, public);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&inner[start..], &base, out, public);
        return;
    }
    if tree.is_empty() || tree.ends_with('*') {
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path, Some(alias.trim().to_string())),
        None => (tree, None),
    };
    let mut full = prefix.to_vec();
    full.extend(segments(path));
    if full.last().is_some_and(|s| s == "self") {
        full.pop();
    }
    let name = alias.unwrap_or_else(|| full.last().cloned().unwrap_or_default());
    out.push((full, name, public));
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The `use` statements of a file: (path, the name it gives, re-exported?).
fn uses(code: &str) -> Vec<(Vec<String>, String, bool)> {
    let mut out = Vec::new();
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_start();
        let (public, tree) = if let Some(tree) = line.strip_prefix("use ") {
            (false, tree)
        } else if let Some((_, tree)) = line
            .split_once(") use ")
            .filter(|_| line.starts_with("pub("))
        {
            (true, tree)
        } else if let Some(tree) = line.strip_prefix("pub use ") {
            (true, tree)
        } else {
            continue;
        };
        let mut statement = tree.to_string();
        while !statement.contains(';') {
            match lines.next() {
                Some(more) => statement.push_str(more),
                None => break,
            }
        }
        let statement = statement.split(';').next().unwrap_or_default();
        expand(statement, &[], &mut out, public);
    }
    out
}

/// Written-out paths outside `use` statements: `crate::a::b`, `super::a`.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        let mut rest = code;
        while let Some(at) = find_word(rest, start) {
            let tail = &rest[at..];
            let len = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            out.push(segments(&tail[..len]));
            rest = &tail[start.len()..];
        }
    }
    out
}

fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(word) {
        let at = from + at;
        let before = text[..at].chars().next_back();
        if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

struct House {
    sources: Vec<Source>,
    by_module: HashMap<Vec<String>, usize>,
    /// Per file: re-exported name → the path it names.
    exports: Vec<HashMap<String, Vec<String>>>,
}

impl House {
    fn new() -> Self {
        let sources = sources();
        let by_module = sources
            .iter()
            .enumerate()
            .map(|(i, s)| (s.module.clone(), i))
            .collect();
        let exports = sources
            .iter()
            .map(|s| {
                uses(&s.code)
                    .into_iter()
                    .filter(|(_, _, public)| *public)
                    .map(|(path, name, _)| (name, path))
                    .collect()
            })
            .collect();
        Self {
            sources,
            by_module,
            exports,
        }
    }

    /// A path written in file `from` made absolute, or `None` if it leaves the crate.
    fn absolute(&self, from: usize, path: &[String]) -> Option<Vec<String>> {
        let here = &self.sources[from].module;
        let mut module = here.clone();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                module.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().is_some_and(|s| s == "super") {
                    module.pop();
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                let mut child = here.clone();
                child.push(first.to_string());
                if !self.by_module.contains_key(&child) {
                    return None;
                }
            }
            None => return None,
        }
        module.extend(rest.iter().cloned());
        Some(module)
    }

    /// The file that defines what an absolute path names.
    fn file_of(&self, path: &[String], depth: usize) -> Option<usize> {
        let cut = (0..=path.len())
            .rev()
            .find(|&n| self.by_module.contains_key(&path[..n]))?;
        let file = self.by_module[&path[..cut]];
        if depth < 8 {
            if let Some(name) = path.get(cut) {
                if let Some(target) = self.exports[file].get(name) {
                    let target = self.absolute(file, target)?;
                    if target != path {
                        return self.file_of(&target, depth + 1).or(Some(file));
                    }
                }
            }
        }
        Some(file)
    }

    fn edges(&self) -> BTreeSet<(usize, usize)> {
        let mut edges = BTreeSet::new();
        for (from, source) in self.sources.iter().enumerate() {
            let paths = uses(&source.code)
                .into_iter()
                .map(|(path, _, _)| path)
                .chain(inline_paths(&source.code));
            for path in paths {
                let Some(path) = self.absolute(from, &path) else {
                    continue;
                };
                if let Some(to) = self.file_of(&path, 0) {
                    if to != from {
                        edges.insert((from, to));
                    }
                }
            }
        }
        edges
    }
}

fn top(source: &Source) -> String {
    source
        .module
        .first()
        .cloned()
        .unwrap_or_else(|| "lib".into())
}

/// Simple cycles of at least `min` nodes, each reported once (from its
/// smallest node).
fn cycles<N: Ord + Clone>(edges: &BTreeSet<(N, N)>, min: usize) -> Vec<Vec<N>> {
    let mut next: BTreeMap<N, Vec<N>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a.clone()).or_default().push(b.clone());
    }
    let mut found = Vec::new();
    let mut budget = 2_000_000;
    for start in next.keys() {
        let mut path = vec![start.clone()];
        search(&next, start, &mut path, min, &mut found, &mut budget);
    }
    found
}

fn search<N: Ord + Clone>(
    next: &BTreeMap<N, Vec<N>>,
    start: &N,
    path: &mut Vec<N>,
    min: usize,
    found: &mut Vec<Vec<N>>,
    budget: &mut usize,
) {
    // A few cycles are enough to say what is wrong.
    if found.len() >= 20 || *budget == 0 {
        return;
    }
    *budget -= 1;
    for n in next.get(path.last().unwrap()).into_iter().flatten() {
        if n == start && path.len() >= min {
            found.push(path.clone());
        } else if n > start && !path.contains(n) {
            path.push(n.clone());
            search(next, start, path, min, found, budget);
            path.pop();
        }
    }
}

#[test]
fn no_file_is_over_450_lines_of_code() {
    let long: Vec<String> = sources()
        .iter()
        .map(|s| (s.file.clone(), code_lines(&s.code)))
        .filter(|(_, n)| *n > MAX_CODE_LINES)
        .map(|(file, n)| format!("src/{file}: {n}"))
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_CODE_LINES} lines of code: {long:?}"
    );
}

#[test]
fn no_folder_holds_more_than_12_files() {
    let mut per_folder: BTreeMap<String, usize> = BTreeMap::new();
    for source in sources() {
        let folder = source
            .file
            .rsplit_once('/')
            .map_or("", |(dir, _)| dir)
            .to_string();
        *per_folder.entry(folder).or_default() += 1;
    }
    let full: Vec<_> = per_folder
        .into_iter()
        .filter(|(_, n)| *n > MAX_FILES_PER_FOLDER)
        .collect();
    assert!(
        full.is_empty(),
        "folders over {MAX_FILES_PER_FOLDER} files: {full:?}"
    );
}

#[test]
fn the_top_level_modules_import_one_another_without_a_cycle() {
    let house = House::new();
    let edges: BTreeSet<(String, String)> = house
        .edges()
        .into_iter()
        .map(|(a, b)| (top(&house.sources[a]), top(&house.sources[b])))
        .filter(|(a, b)| a != b && a != "lib" && b != "lib")
        .collect();
    let found = cycles(&edges, 2);
    let why: Vec<String> = found
        .iter()
        .map(|cycle| {
            let mut steps = Vec::new();
            for (i, a) in cycle.iter().enumerate() {
                let b = &cycle[(i + 1) % cycle.len()];
                let files: Vec<_> = house
                    .edges()
                    .into_iter()
                    .filter(|&(x, y)| top(&house.sources[x]) == *a && top(&house.sources[y]) == *b)
                    .map(|(x, y)| format!("{} → {}", house.sources[x].file, house.sources[y].file))
                    .collect();
                steps.push(format!("{a} → {b} ({})", files.join(", ")));
            }
            steps.join("; ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "cycles between modules:\n{}",
        why.join("\n")
    );
}

#[test]
fn no_three_files_or_more_import_in_a_circle() {
    let house = House::new();
    let edges = house.edges();
    let found: Vec<String> = cycles(&edges, 3)
        .iter()
        .map(|cycle| {
            let names: Vec<&str> = cycle
                .iter()
                .map(|&i| house.sources[i].file.as_str())
                .collect();
            names.join(" → ")
        })
        .collect();
    assert!(found.is_empty(), "cycles of files:\n{}", found.join("\n"));
}
