//! The code's layout holds, checked by tests: no source file over 500 lines before its tests
//! (comments and blank lines count), no function over 100, no import circle between the files
//! of a crate (the crate root, which declares the modules and re-exports their names, apart),
//! every folder of code says what lives there in its module's first comment, and every type
//! name names one type (docs/architecture.md's glossary).

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    use crate::workspace::workspace_root;

    const MAX_CODE_LINES: usize = 500;
    const MAX_FUNCTION_LINES: usize = 100;

    /// Every file under `dir` whose name ends with `ext`, recursively.
    fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files(&path, ext, out);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }

    /// The source directories of the workspace's crates: `crates/*/src` and `xtask/src`.
    fn source_roots() -> Vec<PathBuf> {
        let root = workspace_root();
        let mut roots = vec![root.join("xtask/src")];
        for entry in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
            roots.push(entry.path().join("src"));
        }
        roots.sort();
        roots
    }

    /// A Rust file's lines as its code and its inline test modules (`#[cfg(test)]` then
    /// `mod NAME {`, to the `}` that closes it at the start of a line). Every line is read:
    /// other `#[cfg(test)]` items (a test-only `use` or function) are code.
    fn split_tests(text: &str) -> (Vec<&str>, Vec<&str>) {
        let lines: Vec<&str> = text.lines().collect();
        let (mut code, mut tests) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < lines.len() {
            let opens_tests = lines[i].starts_with("#[cfg(test)]")
                && lines
                    .get(i + 1)
                    .is_some_and(|next| next.starts_with("mod ") && next.trim_end().ends_with('{'));
            if opens_tests {
                while i < lines.len() && lines[i] != "}" {
                    tests.push(lines[i]);
                    i += 1;
                }
            } else {
                code.push(lines[i]);
            }
            i += 1;
        }
        (code, tests)
    }

    /// Lines without the blank and comment-only ones.
    fn rust_code<'a>(lines: &[&'a str]) -> Vec<&'a str> {
        lines
            .iter()
            .filter(|l| {
                let t = l.trim();
                !t.is_empty() && !t.starts_with("//")
            })
            .copied()
            .collect()
    }

    /// Every line of a file but those of its inline test modules, comments and blank lines
    /// included.
    fn code_lines(text: &str) -> usize {
        split_tests(text).0.len()
    }

    #[test]
    fn only_inline_test_modules_are_left_out_of_a_files_count() {
        let text = "use a;\n#[cfg(test)]\nuse b;\nfn f() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\nfn g() {}\n#[cfg(test)]\nmod more;\n";
        // use a, cfg + use b, fn f, fn g, cfg + mod more: 7.
        assert_eq!(code_lines(text), 7);
    }

    /// The type a line of code defines at a file's top level (a struct, enum, trait or type
    /// alias; not an associated type, which is indented), if it defines one.
    fn type_defined(line: &str) -> Option<String> {
        let rest = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .unwrap_or(line);
        let rest = ["struct ", "enum ", "trait ", "type "]
            .iter()
            .find_map(|k| rest.strip_prefix(k))?;
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        (!name.is_empty()).then_some(name)
    }

    /// A name two definitions share because they are one thing in two forms, as the glossary
    /// says: a model's layer as its description (kiln-contract) and as its Burn module
    /// (kiln-core).
    const ONE_THING_TWO_FORMS: [&str; 1] = ["Layer"];

    /// Every type name outside tests is defined once in the workspace: a reader who meets a
    /// name knows which type it is (docs/architecture.md's glossary).
    #[test]
    fn every_type_name_names_one_type() {
        assert_eq!(
            type_defined("pub(crate) struct Foo<'a> {"),
            Some("Foo".into())
        );
        assert_eq!(type_defined("    type Record: Answer;"), None);
        let mut defined: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for src in source_roots() {
            let mut paths = Vec::new();
            files(&src, ".rs", &mut paths);
            for path in paths
                .iter()
                .filter(|p| !is_test_file(p) && !p.components().any(|c| c.as_os_str() == "tests"))
            {
                let text = std::fs::read_to_string(path).unwrap();
                for name in split_tests(&text).0.into_iter().filter_map(type_defined) {
                    let at = path.strip_prefix(workspace_root()).unwrap_or(path);
                    defined
                        .entry(name)
                        .or_default()
                        .push(at.display().to_string());
                }
            }
        }
        let twice: Vec<String> = defined
            .iter()
            .filter(|(name, at)| at.len() > 1 && !ONE_THING_TWO_FORMS.contains(&name.as_str()))
            .map(|(name, at)| format!("{name}: {}", at.join(", ")))
            .collect();
        assert!(
            twice.is_empty(),
            "type names defined more than once (rename one, or say in the glossary why they \
             are one thing):\n{}",
            twice.join("\n")
        );
    }

    fn is_test_file(path: &Path) -> bool {
        path.file_name().is_some_and(|n| n == "tests.rs")
    }

    /// The functions of `code` (a file's lines outside its test modules) longer than
    /// [`MAX_FUNCTION_LINES`], as `(name, first line, lines)`: from its `fn` line to the `}`
    /// that closes it at the same indentation, its doc comment left out.
    fn long_functions(code: &[&str]) -> Vec<(String, usize, usize)> {
        let mut out = Vec::new();
        for (i, line) in code.iter().enumerate() {
            let indent = line.len() - line.trim_start().len();
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(at) = words.iter().position(|w| *w == "fn") else {
                continue;
            };
            let qualifiers = [
                "pub",
                "pub(crate)",
                "pub(super)",
                "const",
                "async",
                "unsafe",
            ];
            if !words[..at].iter().all(|w| qualifiers.contains(w)) || line.trim_end().ends_with(';')
            {
                continue;
            }
            let close = format!("{}}}", " ".repeat(indent));
            if let Some(len) = code[i + 1..].iter().position(|l| *l == close)
                && len + 2 > MAX_FUNCTION_LINES
            {
                let name = words.get(at + 1).copied().unwrap_or("?");
                let name = name.split(['(', '<']).next().unwrap_or(name).to_string();
                out.push((name, i + 1, len + 2));
            }
        }
        out
    }

    #[test]
    fn a_long_function_is_found_with_its_length() {
        let body = "    let x = 1;\n".repeat(MAX_FUNCTION_LINES);
        let text = format!(
            "/// Doc.\npub(crate) fn long(a: u8) -> u8 {{\n{body}}}\n\nfn short() {{\n    g();\n}}\n#[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{body}    }}\n}}\n"
        );
        let (code, _) = split_tests(&text);
        assert_eq!(
            long_functions(&code),
            [("long".to_string(), 2, MAX_FUNCTION_LINES + 2)]
        );
    }

    #[test]
    fn no_function_is_over_100_lines_outside_tests() {
        let mut sources = Vec::new();
        for dir in source_roots() {
            files(&dir, "rs", &mut sources);
        }
        let mut over = Vec::new();
        let in_tests = |p: &PathBuf| p.components().any(|c| c.as_os_str() == "tests");
        for path in sources.iter().filter(|p| !is_test_file(p) && !in_tests(p)) {
            let text = std::fs::read_to_string(path).unwrap();
            for (name, line, len) in long_functions(&split_tests(&text).0) {
                over.push(format!("{}:{line} {name} ({len} lines)", path.display()));
            }
        }
        assert!(
            over.is_empty(),
            "functions over {MAX_FUNCTION_LINES} lines: split them into their phases:\n{}",
            over.join("\n")
        );
    }

    #[test]
    fn no_source_file_is_over_500_lines_before_its_tests() {
        let mut sources = Vec::new();
        for dir in source_roots() {
            files(&dir, "rs", &mut sources);
        }
        files(&workspace_root().join("pytorch"), "py", &mut sources);
        let mut over = Vec::new();
        for path in sources.iter().filter(|p| !is_test_file(p)) {
            let text = std::fs::read_to_string(path).unwrap();
            let n = code_lines(&text);
            if n > MAX_CODE_LINES {
                over.push(format!("{} ({n})", path.display()));
            }
        }
        assert!(
            sources.len() > 50,
            "found only {} source files",
            sources.len()
        );
        assert!(
            over.is_empty(),
            "over {MAX_CODE_LINES} lines of code: {}; split them where one concept ends",
            over.join(", ")
        );
    }

    /// The file that opens a folder of code: `lib.rs` or `main.rs` at a crate's root, `mod.rs`
    /// or the `NAME.rs` beside `NAME/` below it; `None` for a folder that is no module.
    fn module_file(dir: &Path) -> Option<PathBuf> {
        ["lib.rs", "main.rs", "mod.rs"]
            .iter()
            .map(|f| dir.join(f))
            .chain([dir.with_extension("rs")])
            .find(|f| f.is_file())
    }

    #[test]
    fn every_folder_of_code_opens_with_what_lives_there() {
        let mut folders = Vec::new();
        let mut stack = source_roots();
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            stack.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            folders.push(dir);
        }
        let mut silent = Vec::new();
        for file in folders.iter().filter_map(|d| module_file(d)) {
            let text = std::fs::read_to_string(&file).unwrap();
            if !text.starts_with("//!") {
                silent.push(file.display().to_string());
            }
        }
        assert!(folders.len() > 30, "found only {} folders", folders.len());
        assert!(
            silent.is_empty(),
            "a folder's module file must open with a `//!` comment saying what lives there: {}",
            silent.join(", ")
        );
    }

    /// A module path (`["bench", "child"]`) for each file of the crate in `src`.
    fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
        let mut all = Vec::new();
        files(src, "rs", &mut all);
        let mut out = BTreeMap::new();
        for path in all {
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            // Binaries under src/bin are crates of their own; the crate root stays out.
            if parts.first().is_some_and(|p| p == "bin") || parts == ["lib"] || parts == ["main"] {
                continue;
            }
            out.insert(parts, path);
        }
        out
    }

    /// The names the crate root (`src`'s lib.rs or main.rs) re-exports (`pub use a::X;`,
    /// `pub use a::{X, Y};`, `pub use a::*;`), each with the module it comes from: a path
    /// through the root (`crate::X`) is an import of that module.
    fn reexports(
        src: &Path,
        known: &BTreeMap<Vec<String>, PathBuf>,
    ) -> BTreeMap<String, Vec<String>> {
        const ITEMS: &[&str] = &["fn", "struct", "enum", "const", "trait", "type", "static"];
        let mut out = BTreeMap::new();
        let root = ["lib.rs", "main.rs"]
            .iter()
            .find_map(|f| std::fs::read_to_string(src.join(f)).ok())
            .unwrap_or_default();
        // One statement at a time, a `pub use` that rustfmt wrapped over lines included.
        let code = rust_code(&split_tests(&root).0).join(" ");
        for statement in code.split(';') {
            let statement = statement.split_whitespace().collect::<Vec<_>>().join(" ");
            let Some(rest) = statement.split_once("pub use ").map(|(_, r)| r) else {
                continue;
            };
            let rest = rest
                .replace("{ ", "{")
                .replace(" }", "}")
                .replace(",}", "}");
            let (module, names) = match rest.split_once("::{") {
                Some((m, names)) => (m, names.trim_end_matches('}').to_string()),
                None => match rest.rsplit_once("::") {
                    Some((m, name)) => (m, name.to_string()),
                    None => continue,
                },
            };
            let module: Vec<String> = module.split("::").map(String::from).collect();
            let Some(file) = known.get(&module) else {
                continue;
            };
            for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if name != "*" {
                    let name = name.rsplit(" as ").next().unwrap_or(name).trim();
                    out.insert(name.to_string(), module.clone());
                    continue;
                }
                // Every public item of the module.
                let text = std::fs::read_to_string(file).unwrap_or_default();
                for l in rust_code(&split_tests(&text).0) {
                    let words: Vec<&str> = l.split_whitespace().collect();
                    if let ["pub", kind, item, ..] = words[..]
                        && ITEMS.contains(&kind)
                    {
                        let item: String = item
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        out.insert(item, module.clone());
                    }
                }
            }
        }
        out
    }

    /// The module paths that `code` (of the module `me`) names: `crate::a::b`, `super::c`,
    /// `self::d` and a child's `e::f`, each resolved to the longest known module.
    fn references(
        code: &[&str],
        me: &[String],
        known: &BTreeMap<Vec<String>, PathBuf>,
        reexported: &BTreeMap<String, Vec<String>>,
    ) -> BTreeSet<Vec<String>> {
        let text = code
            .iter()
            .filter(|l| !l.trim_start().starts_with("pub use"))
            .copied()
            .collect::<Vec<_>>()
            .join("\n");
        let mut out = BTreeSet::new();
        let bytes = text.as_bytes();
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let mut i = 0;
        while i < bytes.len() {
            // Not a path's start: inside a word, after `::`, or a visibility (`pub(super)`).
            let visibility = bytes[..i].ends_with(b"pub(") || bytes[..i].ends_with(b"pub(in ");
            if !word(bytes[i])
                || (i > 0 && (word(bytes[i - 1]) || bytes[i - 1] == b':'))
                || visibility
            {
                i += 1;
                continue;
            }
            // A path starts here: read `seg::seg::...`, and a `{` group's first names.
            let mut segments = Vec::new();
            let mut j = i;
            loop {
                let start = j;
                while j < bytes.len() && word(bytes[j]) {
                    j += 1;
                }
                segments.push(text[start..j].to_string());
                if text[j..].starts_with("::") && j + 2 < bytes.len() && word(bytes[j + 2]) {
                    j += 2;
                } else {
                    break;
                }
            }
            let mut groups = vec![segments.clone()];
            if text[j..].starts_with("::{") {
                let close = text[j..].find('}').map_or(text.len(), |k| j + k);
                groups = text[j + 3..close]
                    .split(',')
                    .map(|item| {
                        let mut p = segments.clone();
                        p.extend(
                            item.trim()
                                .split("::")
                                .map(str::trim)
                                .filter(|s| !s.is_empty())
                                .map(String::from),
                        );
                        p
                    })
                    .collect();
                j = close;
            }
            for path in groups {
                let absolute: Vec<String> = match path.first().map(String::as_str) {
                    // `crate::X` where the root re-exports X: X's module.
                    Some("crate") => match path.get(1).and_then(|n| reexported.get(n)) {
                        Some(module) if !known.contains_key(&path[1..2]) => module.clone(),
                        _ => path[1..].to_vec(),
                    },
                    Some("super") => {
                        let mut base = me.to_vec();
                        let mut rest = &path[..];
                        while rest.first().is_some_and(|s| s == "super") {
                            base.pop();
                            rest = &rest[1..];
                        }
                        base.extend(rest.iter().cloned());
                        base
                    }
                    Some("self") => me.iter().chain(&path[1..]).cloned().collect(),
                    Some(_) if path.len() > 1 => me.iter().chain(&path).cloned().collect(),
                    _ => continue,
                };
                let target = (1..=absolute.len())
                    .rev()
                    .map(|n| absolute[..n].to_vec())
                    .find(|p| known.contains_key(p));
                if let Some(t) = target.filter(|t| t.as_slice() != me) {
                    out.insert(t);
                }
            }
            i = j.max(i + 1);
        }
        out
    }

    /// The circles of `edges`, each once, as its files in order.
    fn circles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
        let mut found = BTreeSet::new();
        for start in edges.keys() {
            // Depth-first from `start`, back to it.
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            let mut seen = BTreeSet::new();
            while let Some((node, path)) = stack.pop() {
                for next in edges.get(&node).into_iter().flatten() {
                    if next == start {
                        let mut circle: Vec<String> = path.iter().map(|p| p.join("::")).collect();
                        let min = (0..circle.len()).min_by_key(|&k| &circle[k]).unwrap_or(0);
                        circle.rotate_left(min);
                        found.insert(circle);
                    } else if seen.insert(next.clone()) {
                        let mut longer = path.clone();
                        longer.push(next.clone());
                        stack.push((next.clone(), longer));
                    }
                }
            }
        }
        found.into_iter().collect()
    }

    /// Whether the module `me` is test code as a whole: a `tests` module, or declared under
    /// `#[cfg(test)]` (`#[cfg(test)] mod contract;`) by its parent file.
    fn test_only(src: &Path, me: &[String], known: &BTreeMap<Vec<String>, PathBuf>) -> bool {
        if me.iter().any(|m| m == "tests") {
            return true;
        }
        let parent = match &me[..me.len() - 1] {
            [] => ["lib.rs", "main.rs"]
                .iter()
                .map(|f| src.join(f))
                .find(|p| p.exists()),
            up => known.get(up).cloned(),
        };
        let text = parent
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let declared = [
            format!("mod {};", me[me.len() - 1]),
            format!("pub mod {};", me[me.len() - 1]),
        ];
        lines
            .windows(2)
            .any(|w| w[0] == "#[cfg(test)]" && declared.iter().any(|d| w[1] == d))
    }

    /// A crate's imports between its files, read from every line: `(code, tests)`, the
    /// arrows of its code and those of its test modules and test-only files, apart.
    type Edges = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;
    fn crate_edges(src: &Path) -> (Edges, Edges) {
        let known = modules(src);
        let reexported = reexports(src, &known);
        let (mut code_edges, mut test_edges) = (Edges::new(), Edges::new());
        for (me, path) in &known {
            let text = std::fs::read_to_string(path).unwrap();
            let (code, tests) = split_tests(&text);
            let refs = |lines: &[&str]| references(&rust_code(lines), me, &known, &reexported);
            if test_only(src, me, &known) {
                test_edges.insert(
                    me.clone(),
                    refs(&code).union(&refs(&tests)).cloned().collect(),
                );
                code_edges.insert(me.clone(), BTreeSet::new());
            } else {
                code_edges.insert(me.clone(), refs(&code));
                test_edges.insert(me.clone(), refs(&tests));
            }
        }
        (code_edges, test_edges)
    }

    /// The problems of a crate's imports: circles between its files' code and arrows from a
    /// module up to the module that holds it. A test may use any module it tests with (its
    /// arrows are counted apart).
    fn import_problems(src: &Path) -> Vec<String> {
        let (code, _) = crate_edges(src);
        let mut problems: Vec<String> = circles(&code)
            .into_iter()
            .map(|c| format!("{}: circle {}", src.display(), c.join(" -> ")))
            .collect();
        for (me, to) in &code {
            for up in to
                .iter()
                .filter(|t| t.len() < me.len() && me.starts_with(t))
            {
                problems.push(format!(
                    "{}: {} reaches back up to {}, which holds it: move what both need down",
                    src.display(),
                    me.join("::"),
                    up.join("::")
                ));
            }
        }
        problems
    }

    #[test]
    fn no_crate_has_an_import_circle() {
        let all: Vec<String> = source_roots()
            .iter()
            .flat_map(|src| import_problems(src))
            .collect();
        assert!(all.is_empty(), "import problems:\n{}", all.join("\n"));
    }

    /// A planted circle through a line after a `#[cfg(test)]` that is not the test module is
    /// found.
    #[test]
    fn a_circle_planted_past_a_cfg_test_line_is_found() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path();
        std::fs::write(src.join("main.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
        std::fs::write(
            src.join("a.rs"),
            "use crate::b::X;\n#[cfg(test)]\nuse std::fmt;\npub fn f() {}\n",
        )
        .unwrap();
        std::fs::write(
            src.join("b.rs"),
            "pub struct X;\n#[cfg(test)]\nfn helper() {}\npub fn g() { crate::a::f() }\n",
        )
        .unwrap();
        std::fs::write(
            src.join("c.rs"),
            "pub fn h() {}\n#[cfg(test)]\nmod tests {\n    fn t() { crate::a::f(); }\n}\n",
        )
        .unwrap();
        let problems = import_problems(src);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].ends_with("circle a -> b"), "{problems:?}");
        // A test module's arrows are counted apart: c's test of a is no arrow of c's code.
        std::fs::write(src.join("a.rs"), "pub fn f() { crate::c::h() }\n").unwrap();
        std::fs::write(src.join("b.rs"), "pub struct X;\n").unwrap();
        let problems = import_problems(src);
        assert!(problems.is_empty(), "{problems:?}");
        let (code, tests) = crate_edges(src);
        assert!(code[&vec!["c".to_string()]].is_empty());
        assert_eq!(tests[&vec!["c".to_string()]].len(), 1);
    }

    #[test]
    fn a_circle_is_found_and_named() {
        let known: BTreeMap<Vec<String>, PathBuf> = ["a", "b", "c", "c::d"]
            .iter()
            .map(|m| (m.split("::").map(String::from).collect(), PathBuf::new()))
            .collect();
        let a = vec!["a".to_string()];
        let d = vec!["c".to_string(), "d".to_string()];
        let refs = references(
            &[
                "use crate::{b::X, c::d::Y};",
                "pub(super) fn f(x: super::a::T) {}",
            ],
            &a,
            &known,
            &BTreeMap::new(),
        );
        assert_eq!(
            refs.iter().map(|p| p.join("::")).collect::<Vec<_>>(),
            ["b", "c::d"]
        );
        assert_eq!(
            references(
                &["use super::super::a::Z;", "super::f();"],
                &d,
                &known,
                &BTreeMap::new()
            )
            .iter()
            .map(|p| p.join("::"))
            .collect::<Vec<_>>(),
            ["a", "c"]
        );
        // Through the root: `crate::Z` where the root says `pub use b::Z`.
        let reexported = BTreeMap::from([("Z".to_string(), vec!["b".to_string()])]);
        assert_eq!(
            references(&["fn g(z: crate::Z) {}"], &a, &known, &reexported)
                .iter()
                .map(|p| p.join("::"))
                .collect::<Vec<_>>(),
            ["b"]
        );
        let mut edges = BTreeMap::new();
        edges.insert(a.clone(), refs);
        edges.insert(d.clone(), BTreeSet::from([a.clone()]));
        assert_eq!(
            circles(&edges),
            vec![vec!["a".to_string(), "c::d".to_string()]]
        );
        edges.insert(d, BTreeSet::new());
        assert!(circles(&edges).is_empty());
    }

    #[test]
    fn re_exports_over_several_lines_and_globs_name_their_module() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path();
        std::fs::write(
            src.join("lib.rs"),
            "pub mod a;\npub mod b;\n// pub use c::Gone;\npub use a::{\n    One,\n    Two as Deux,\n};\npub use b::*;\n",
        )
        .unwrap();
        std::fs::write(src.join("a.rs"), "pub struct One;\npub struct Two;\n").unwrap();
        std::fs::write(src.join("b.rs"), "pub fn three() {}\nfn hidden() {}\n").unwrap();
        let known = modules(src);
        let names = reexports(src, &known);
        let module = |n: &str| names.get(n).map(|m| m.join("::"));
        assert_eq!(module("One").as_deref(), Some("a"));
        assert_eq!(module("Deux").as_deref(), Some("a"));
        assert_eq!(module("three").as_deref(), Some("b"));
        assert_eq!(module("hidden"), None);
        assert_eq!(module("Gone"), None);
    }
}
