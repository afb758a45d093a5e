//! The house rules, checked on the source itself (ARCHITECTURE.md says
//! why): no file of `src/` over 450 lines of code, no folder with more than
//! 12 files, the top-level modules importing one another without a cycle,
//! no cycle of three or more files anywhere, and no glob imports (which
//! would hide one).
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
    if tree.is_empty() {
        return;
    }
    // A glob is read as an import of everything the module holds (its
    // name is `*`): what it brings in is not written anywhere.
    if tree.ends_with('*') {
        let mut full = prefix.to_vec();
        full.extend(segments(tree));
        out.push((full, "*".to_string(), public));
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

/// The code without its `use` statements (read by [`uses`]).
fn without_uses(code: &str) -> String {
    let mut kept = Vec::new();
    let mut in_use = false;
    for line in code.lines() {
        let trimmed = line.trim_start();
        let starts = trimmed.starts_with("use ")
            || trimmed.starts_with("pub use ")
            || (trimmed.starts_with("pub(") && trimmed.contains(") use "));
        if starts || in_use {
            in_use = !line.contains(';');
        } else {
            kept.push(line);
        }
    }
    kept.join("\n")
}

/// Written-out paths outside `use` statements: `crate::a::b`, `super::a`.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        let mut rest = code;
        while let Some(at) = find_word(rest, start) {
            let tail = &rest[at..];
            // `pub(in crate::a)` says who may see a name, not what it uses.
            if rest[..at].ends_with("pub(in ") {
                rest = &tail[start.len()..];
                continue;
            }
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
        Self::of(sources())
    }

    fn of(sources: Vec<Source>) -> Self {
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

    /// The files a path leads to: the one defining what it names, or for a
    /// glob (`a::*`), the module's file and every file whose names it
    /// re-exports.
    fn files_of(&self, path: &[String]) -> Vec<usize> {
        let Some(module) = path.strip_suffix(&["*".to_string()]) else {
            return self.file_of(path, 0).into_iter().collect();
        };
        let Some(&file) = self.by_module.get(module) else {
            return Vec::new();
        };
        let mut files = vec![file];
        for target in self.exports[file].values() {
            if let Some(target) = self.absolute(file, target) {
                files.extend(self.file_of(&target, 0));
            }
        }
        files
    }

    /// Paths written from a child module on (`slot::slot(…)` in the file
    /// that declares `mod slot`), outside `use` statements.
    fn child_paths(&self, from: usize) -> Vec<Vec<String>> {
        let here = &self.sources[from].module;
        let code = without_uses(&self.sources[from].code);
        let mut out = Vec::new();
        for (module, _) in self.by_module.iter() {
            if module.len() != here.len() + 1 || !module.starts_with(here) {
                continue;
            }
            let child = format!("{}::", module[here.len()]);
            let mut rest = code.as_str();
            while let Some(at) = find_word(rest, &child) {
                let tail = &rest[at..];
                let len = tail
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(tail.len());
                out.push(
                    std::iter::once("self".to_owned())
                        .chain(segments(&tail[..len]))
                        .collect(),
                );
                rest = &tail[child.len()..];
            }
        }
        out
    }

    fn edges(&self) -> BTreeSet<(usize, usize)> {
        let mut edges = BTreeSet::new();
        for (from, source) in self.sources.iter().enumerate() {
            // A re-export (`pub use`) is where a name is published, not a
            // dependency of the file: who imports the name is led to the
            // file that defines it (`file_of`).
            let paths = uses(&source.code)
                .into_iter()
                .filter(|(_, _, public)| !public)
                .map(|(path, _, _)| path)
                .chain(inline_paths(&without_uses(&source.code)))
                .chain(self.child_paths(from));
            for path in paths {
                let Some(path) = self.absolute(from, &path) else {
                    continue;
                };
                for to in self.files_of(&path) {
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

/// The strongly connected components of more than `max` nodes: the groups
/// of nodes each of which reaches every other (Tarjan's algorithm, linear
/// in the edges: no search budget to run out of). A group of three or more
/// is a circle of that many, or of two-node circles chained together.
fn tangles<N: Ord + Clone>(edges: &BTreeSet<(N, N)>, max: usize) -> Vec<Vec<N>> {
    let mut nodes: BTreeSet<N> = BTreeSet::new();
    for (a, b) in edges {
        nodes.insert(a.clone());
        nodes.insert(b.clone());
    }
    let nodes: Vec<N> = nodes.into_iter().collect();
    let index_of = |n: &N| nodes.binary_search(n).unwrap();
    let mut next = vec![Vec::new(); nodes.len()];
    for (a, b) in edges {
        next[index_of(a)].push(index_of(b));
    }
    // Tarjan's algorithm, iterative: (node, next edge to follow).
    let mut order = vec![usize::MAX; nodes.len()];
    let mut low = vec![0; nodes.len()];
    let mut on_stack = vec![false; nodes.len()];
    let (mut stack, mut count, mut found) = (Vec::new(), 0, Vec::new());
    for root in 0..nodes.len() {
        if order[root] != usize::MAX {
            continue;
        }
        let mut calls = vec![(root, 0)];
        while let Some(&mut (v, ref mut edge)) = calls.last_mut() {
            if *edge == 0 && order[v] == usize::MAX {
                order[v] = count;
                low[v] = count;
                count += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = next[v].get(*edge) {
                *edge += 1;
                if order[w] == usize::MAX {
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(order[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == order[v] {
                let mut group = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    group.push(nodes[w].clone());
                    if w == v {
                        break;
                    }
                }
                if group.len() > max {
                    group.sort();
                    found.push(group);
                }
            }
        }
    }
    found
}

/// A shortest way from `from` to `to` inside `group` (both ends given).
fn way<N: Ord + Clone>(edges: &BTreeSet<(N, N)>, group: &[N], from: &N, to: &N) -> Vec<N> {
    let mut came_from: BTreeMap<N, N> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([from.clone()]);
    while let Some(n) = queue.pop_front() {
        if n == *to {
            let mut way = vec![n];
            while let Some(prev) = came_from.get(way.last().unwrap()) {
                way.push(prev.clone());
            }
            way.reverse();
            return way;
        }
        for (_, b) in edges.iter().filter(|(a, b)| *a == n && group.contains(b)) {
            if b != from && !came_from.contains_key(b) {
                came_from.insert(b.clone(), n.clone());
                queue.push_back(b.clone());
            }
        }
    }
    vec![from.clone(), to.clone()]
}

/// A shortest way round from `from` back to itself inside `group`.
fn circle<N: Ord + Clone>(edges: &BTreeSet<(N, N)>, group: &[N], from: &N) -> Vec<N> {
    edges
        .iter()
        .filter(|(a, b)| b == from && group.contains(a))
        .map(|(a, _)| way(edges, group, from, a))
        .min_by_key(Vec::len)
        .unwrap_or_else(|| vec![from.clone()])
}

/// The groups of files tied by a circle of three or more. Within a
/// strongly connected group, a one-way import `a → b` closes a circle
/// of at least three with the way back from `b` to `a`; if every import is
/// mutual, the group holds such a circle exactly when its pairs do not
/// form a tree (a hub importing and imported by each of its spokes is
/// pairs, not a circle). Each group comes with one such circle.
fn circles_of_three<N: Ord + Clone>(edges: &BTreeSet<(N, N)>) -> Vec<(Vec<N>, Vec<N>)> {
    let mut found = Vec::new();
    for group in tangles(edges, 2) {
        let inside: Vec<&(N, N)> = edges
            .iter()
            .filter(|(a, b)| group.contains(a) && group.contains(b))
            .collect();
        let one_way = inside
            .iter()
            .find(|(a, b)| !edges.contains(&(b.clone(), a.clone())));
        if let Some((a, b)) = one_way {
            // `b` … `a`, then `a → b` closes it.
            found.push((group.clone(), way(edges, &group, b, a)));
        } else if inside.len() / 2 != group.len() - 1 {
            found.push((group.clone(), group.clone()));
        }
    }
    found
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
    let found: Vec<Vec<String>> = tangles(&edges, 1)
        .iter()
        .map(|group| circle(&edges, group, &group[0]))
        .collect();
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
    let file = |i: &usize| house.sources[*i].file.clone();
    let found: Vec<String> = circles_of_three(&edges)
        .iter()
        .map(|(group, way)| {
            let names: Vec<String> = group.iter().map(file).collect();
            let way: Vec<String> = way.iter().map(file).collect();
            let inside: Vec<String> = edges
                .iter()
                .filter(|(a, b)| group.contains(a) && group.contains(b))
                .map(|(a, b)| format!("{} → {}", file(a), file(b)))
                .collect();
            format!(
                "{} files tied: {}\n  a circle: {} → back\n  imports among them: {}",
                names.len(),
                names.join(", "),
                way.join(" → "),
                inside.join(", ")
            )
        })
        .collect();
    assert!(
        found.is_empty(),
        "files tied in circles:\n{}",
        found.join("\n")
    );
}

/// Library code names what it imports: a glob (`use super::*;`) hides
/// which file a name comes from, and with it the circles the check above
/// looks for. (Test modules, skipped here, may use `super::*`.)
#[test]
fn library_code_imports_no_globs() {
    let globs: Vec<String> = sources()
        .iter()
        .flat_map(|s| {
            uses(&s.code)
                .into_iter()
                .filter(|(_, name, _)| name == "*")
                .map(|(path, _, _)| format!("src/{}: use {}", s.file, path.join("::")))
        })
        .collect();
    assert!(globs.is_empty(), "glob imports: {globs:?}");
}

/// Three files importing one another through their module's globs, as
/// `layer/content_bytes/` once did, are found tied in a circle: a glob
/// leads to every file the module re-exports from.
#[test]
fn the_circle_check_sees_through_globs() {
    let source = |file: &str, code: &str| Source {
        module: file
            .trim_end_matches(".rs")
            .trim_end_matches("/mod")
            .split('/')
            .map(String::from)
            .collect(),
        file: file.to_string(),
        code: code.to_string(),
    };
    let planted = |glob: &str| {
        House::of(vec![
            source(
                "bytes/mod.rs",
                "mod body;\nmod layer;\nmod service;\npub use body::Body;\n\
                 pub use layer::Layer;\npub use service::Service;\n",
            ),
            source(
                "bytes/body.rs",
                &format!("{glob}\npub struct Body(Layer);\n"),
            ),
            source(
                "bytes/layer.rs",
                &format!("{glob}\npub struct Layer(Service);\n"),
            ),
            source(
                "bytes/service.rs",
                &format!("{glob}\npub struct Service(Body);\n"),
            ),
        ])
    };
    let found = circles_of_three(&planted("use super::*;").edges());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0.len(), 3, "body, layer and service: {found:?}");
    // Written out, the same names make the same circle.
    let named = House::of(vec![
        source("bytes/mod.rs", "mod body;\nmod layer;\nmod service;\n"),
        source("bytes/body.rs", "use super::layer::Layer;\n"),
        source("bytes/layer.rs", "use super::service::Service;\n"),
        source("bytes/service.rs", "use super::body::Body;\n"),
    ]);
    assert_eq!(circles_of_three(&named.edges()).len(), 1);
}

/// The check itself finds what it is there to find: circles planted in a
/// made-up graph, however far into it and however many nodes it has.
#[test]
fn the_circle_check_finds_a_planted_circle() {
    // A long chain with many ways through (what exhausted a budgeted
    // search), and a circle of three at its far end.
    let mut edges = BTreeSet::new();
    for i in 0..2_000u32 {
        for j in 1..=6 {
            edges.insert((i, i + j));
        }
    }
    assert!(tangles(&edges, 2).is_empty());
    edges.insert((2_003, 1_990));
    let found = tangles(&edges, 2);
    assert_eq!(found.len(), 1, "{found:?}");
    // (2,000 to 2,002 lead nowhere: they are not in the circle.)
    let expected: Vec<u32> = (1_990..2_000).chain([2_003]).collect();
    assert_eq!(found[0], expected);
    let way = circle(&edges, &found[0], &found[0][0]);
    assert!(way.len() >= 2, "{way:?}");
    assert_eq!(circles_of_three(&edges).len(), 1);
    // Two files importing each other are allowed, and so is a hub with its
    // spokes each importing it; pairs closing a circle, or a one-way
    // import back, are not.
    let pair: BTreeSet<(u32, u32)> = [(1, 2), (2, 1)].into();
    assert!(circles_of_three(&pair).is_empty());
    let hub: BTreeSet<(u32, u32)> = [(1, 2), (2, 1), (1, 3), (3, 1), (1, 4), (4, 1)].into();
    assert!(circles_of_three(&hub).is_empty());
    let ring: BTreeSet<(u32, u32)> = [(1, 2), (2, 1), (2, 3), (3, 2), (3, 1), (1, 3)].into();
    assert_eq!(circles_of_three(&ring).len(), 1);
    let spoke_to_spoke: BTreeSet<(u32, u32)> = hub.iter().copied().chain([(2, 3)]).collect();
    let found = circles_of_three(&spoke_to_spoke);
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0].1,
        vec![3, 1, 2],
        "the circle 2 → 3 → 1 → 2, from 3"
    );
}
