//! The README stays a front page, and it and docs/architecture.md tell the truth about the
//! workspace: checked by tests.

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use clap::CommandFactory;

    use crate::flags::Cli;

    /// The names a flag is typed by: its long name and its visible aliases (`--model` for
    /// `--models`).
    fn long_names(a: &clap::Arg) -> impl Iterator<Item = &str> {
        a.get_long()
            .into_iter()
            .chain(a.get_visible_aliases().into_iter().flatten())
    }

    fn readme() -> String {
        std::fs::read_to_string(crate::workspace::workspace_root().join("README.md")).unwrap()
    }

    /// The lines of the fenced block that follows `heading`.
    fn block_after(text: &str, heading: &str) -> Vec<String> {
        let rest = text
            .split_once(&format!("\n{heading}\n"))
            .unwrap_or_else(|| panic!("no {heading:?} section"))
            .1;
        let inside = rest
            .split_once("```\n")
            .and_then(|(_, r)| r.split_once("\n```"))
            .unwrap_or_else(|| panic!("{heading}: no fenced block"))
            .0;
        inside.lines().map(str::to_string).collect()
    }

    #[test]
    fn the_readme_is_a_front_page_that_opens_with_the_two_commands() {
        let text = readme();
        let lines = text.lines().count();
        assert!(
            lines <= 150,
            "README.md has {lines} lines: move the rest to docs/"
        );
        let first = text
            .split_once("```\n")
            .and_then(|(_, r)| r.split_once("\n```"))
            .unwrap()
            .0;
        assert_eq!(first, "cargo xtask bench-all --quick\ncargo xtask test");
        for license in ["LICENSE-MIT", "LICENSE-APACHE"] {
            assert!(
                crate::workspace::workspace_root().join(license).is_file(),
                "{license}"
            );
        }
    }

    #[test]
    fn the_layout_names_every_crate_and_nothing_that_is_gone() {
        let root = crate::workspace::workspace_root();
        let listed: BTreeSet<String> = block_after(&readme(), "## Layout")
            .iter()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        for path in &listed {
            assert!(
                root.join(path).exists(),
                "README's Layout names {path}, which is gone"
            );
        }
        let mut crates: Vec<String> = std::fs::read_dir(root.join("crates"))
            .unwrap()
            .map(|e| format!("crates/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        crates.extend(["xtask".into(), "pytorch".into(), "docs".into()]);
        for c in crates {
            assert!(listed.contains(&c), "README's Layout misses {c}");
        }
    }

    #[test]
    fn the_commands_section_lists_every_command_and_only_those() {
        let text = readme();
        let section = text
            .split_once("\n## Commands\n")
            .expect("a Commands section")
            .1
            .split("\n## ")
            .next()
            .unwrap();
        let listed: BTreeSet<String> = section
            .lines()
            .filter_map(|l| l.strip_prefix("- `cargo xtask "))
            .filter_map(|l| l.split([' ', '`']).next().map(str::to_string))
            .collect();
        let known: BTreeSet<String> = Cli::command()
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name().to_string())
            .collect();
        assert_eq!(
            listed, known,
            "README's Commands against `cargo xtask --help`"
        );
    }

    #[test]
    fn the_architecture_page_names_every_crate_and_nothing_that_is_gone() {
        let root = crate::workspace::workspace_root();
        let text = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
        // Every `crates/...` path it names exists.
        for name in text.split('`').skip(1).step_by(2) {
            if let Some(rest) = name.strip_prefix("crates/") {
                let dir = rest.split('/').next().unwrap_or_default();
                assert!(
                    root.join("crates").join(dir).is_dir(),
                    "docs/architecture.md names crates/{dir}, which is gone"
                );
            }
        }
        for entry in std::fs::read_dir(root.join("crates")).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                text.contains(&format!("`crates/{name}`")),
                "docs/architecture.md misses crates/{name}"
            );
        }
    }

    /// A doc that names a file of this repository (a path from one of its top folders, in
    /// backticks: `crates/kiln-core/src/warmup.rs`) names one that exists; the recipe's
    /// example crate (`kiln-mine`) aside. Burn's files and a user's are named without such a
    /// path and are not checked.
    /// The README and docs/*.md, each with its text.
    fn documents() -> Vec<(std::path::PathBuf, String)> {
        let root = crate::workspace::workspace_root();
        let mut docs = vec![root.join("README.md")];
        for entry in std::fs::read_dir(root.join("docs")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                docs.push(path);
            }
        }
        docs.sort();
        docs.into_iter()
            .map(|p| {
                let text = std::fs::read_to_string(&p).unwrap();
                (p, text)
            })
            .collect()
    }

    /// Each `--flag` a line shows after `cargo xtask CMD` that CMD has not (`CMD --flag` with
    /// the line's place), read up to the end of the command: a closing backtick, a table's
    /// `|`, a comment, `&&`, `;`, or cargo's `--` (what follows goes to cargo test).
    fn flags_not_of_their_command(cli: &clap::Command, line: &str) -> Vec<String> {
        let mut wrong = Vec::new();
        for (at, _) in line.match_indices("cargo xtask ") {
            let rest = &line[at + "cargo xtask ".len()..];
            let command = rest.split(['`', '|', '#']).next().unwrap_or("");
            let mut words = command.split_whitespace();
            let Some(name) = words.next() else { continue };
            let Some(sub) = cli.find_subcommand(name) else {
                continue;
            };
            for word in words.take_while(|w| !["--", "&&", ";", "||"].contains(w)) {
                let word = word.trim_start_matches(['[', '(']);
                let Some(flag) = word.strip_prefix("--") else {
                    continue;
                };
                let flag: String = flag
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                let known = sub
                    .get_arguments()
                    .any(|a| long_names(a).any(|l| l == flag))
                    || flag == "help";
                if !flag.is_empty() && !known {
                    wrong.push(format!("{name} --{flag}"));
                }
            }
        }
        wrong
    }

    /// A doc cannot show a flag its command does not have: every `cargo xtask CMD ... --flag`
    /// in the README and docs/*.md is checked against CMD's own parser (clap's description of
    /// `cargo xtask`), so a renamed or removed flag fails here until the docs follow.
    #[test]
    fn every_flag_a_doc_shows_with_its_command_is_that_commands() {
        let cli = Cli::command();
        let mut wrong = Vec::new();
        for (path, text) in documents() {
            for (i, line) in text.lines().enumerate() {
                for w in flags_not_of_their_command(&cli, line) {
                    wrong.push(format!("{}:{}: {w}", path.display(), i + 1));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "docs show flags their command does not have:\n{}",
            wrong.join("\n")
        );
        // A planted flag is caught; a real one, a placeholder and cargo's own are not.
        let planted = "run `cargo xtask bench-all --quick --no-such-flag 3` first";
        assert_eq!(
            flags_not_of_their_command(&cli, planted),
            ["bench-all --no-such-flag"]
        );
        let fine = "`cargo xtask bench-all [--out DIR] --burn 0.22.1` and `cargo xtask test -- \
                    --nocapture`";
        assert!(flags_not_of_their_command(&cli, fine).is_empty());
    }

    /// Flags of other programs a doc names alone: a runner's own (what xtask hands the runner
    /// it starts: `kiln-flex --cell FILE`), Slurm's `sbatch` (docs/fleet.md), cargo's.
    const RUNNER_FLAGS: [&str; 8] = [
        "probe",
        "cell",
        "verify",
        "explain",
        "infer",
        "export",
        "exclusive",
        "features",
    ];

    /// Every `--flag` a doc shows in backticks alone (`--lr`) or after `cargo xtask` is a flag
    /// of some command of `cargo xtask` (or of a runner: [`RUNNER_FLAGS`]): a doc cannot name a
    /// flag no parser has. A span that starts with another program (`cargo build`, `sbatch`,
    /// `vulkaninfo`) is that program's.
    #[test]
    fn every_flag_a_doc_names_is_some_commands() {
        let cli = Cli::command();
        let mut known: BTreeSet<String> = RUNNER_FLAGS.iter().map(|s| s.to_string()).collect();
        known.insert("help".into());
        for sub in cli.get_subcommands() {
            for a in sub.get_arguments() {
                known.extend(long_names(a).map(str::to_string));
            }
        }
        let span = regex::Regex::new(r"`([^`]*)`").unwrap();
        let flag = regex::Regex::new(r"(?:^|[\s\[(])--([a-z][a-z0-9-]*)").unwrap();
        let mut unknown = Vec::new();
        for (path, text) in documents() {
            for (i, line) in text.lines().enumerate() {
                for s in span.captures_iter(line) {
                    let text = s[1].trim_start_matches(['[', '(']);
                    if !(text.starts_with("--") || text.starts_with("cargo xtask ")) {
                        continue;
                    }
                    for f in flag.captures_iter(text) {
                        if !known.contains(&f[1]) {
                            unknown.push(format!("{}:{}: --{}", path.display(), i + 1, &f[1]));
                        }
                    }
                }
            }
        }
        assert!(
            unknown.is_empty(),
            "docs name flags no command has:\n{}",
            unknown.join("\n")
        );
    }

    /// docs/usage.md's flag reference is the parser's own description of every command
    /// (`cargo xtask CMD --help` and it agree, flag for flag, default for default);
    /// `KILN_BLESS=1` writes it again.
    #[test]
    fn flag_reference_is_the_parsers() {
        use crate::flags::reference::{HEADING, flag_reference};
        let path = crate::workspace::workspace_root().join("docs/usage.md");
        let usage = std::fs::read_to_string(&path).unwrap();
        let hand = usage.find(HEADING).map_or(&usage[..], |at| &usage[..at]);
        let want = format!("{hand}{}", flag_reference(&Cli::command()));
        if std::env::var_os("KILN_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
            return;
        }
        assert!(
            usage == want,
            "docs/usage.md's flag reference is not the parser's: KILN_BLESS=1 cargo test -p \
             xtask flag_reference writes it again"
        );
    }

    #[test]
    fn every_repository_path_a_doc_names_exists() {
        let root = crate::workspace::workspace_root();
        let pattern =
            regex::Regex::new(r"`((?:crates|xtask|bench|docs|datasets|fuzz|\.ci)/[^`\s:]+)")
                .unwrap();
        let mut docs = vec![root.join("README.md")];
        for entry in std::fs::read_dir(root.join("docs")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                docs.push(path);
            }
        }
        let sources: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("crates"))
            .unwrap()
            .map(|c| c.unwrap().path().join("src"))
            .chain([root.join("xtask/src")])
            .collect();
        let mut gone = Vec::new();
        for doc in &docs {
            let text = std::fs::read_to_string(doc).unwrap();
            for (i, line) in text.lines().enumerate() {
                for c in pattern.captures_iter(line) {
                    let path = c[1].trim_end_matches(['.', ',', ')']);
                    // Placeholders (`docs/results/DATE-CPU-TAG-WHAT`, `RUN[...]`, globs), the
                    // recipe's example, and folders made at run time (`datasets/cache/`).
                    let placeholder = path.contains(['…', '<', '*', '['])
                        || path.contains("kiln-mine")
                        || path.ends_with('/')
                        || path
                            .split(['/', '-'])
                            .any(|w| w.len() >= 3 && w.chars().all(|c| c.is_ascii_uppercase()));
                    // A path inside a crate's source (`bench/plan.rs`: kiln-engine's) counts.
                    let found = root.join(path).exists()
                        || sources.iter().any(|src| src.join(path).exists());
                    if !placeholder && !found {
                        gone.push(format!("{}:{}: {path}", doc.display(), i + 1));
                    }
                }
            }
        }
        assert!(docs.len() > 10, "{docs:?}");
        assert!(
            gone.is_empty(),
            "docs name files that do not exist:\n{}",
            gone.join("\n")
        );
    }

    /// docs/backends.md has a row for every backend xtask discovers, naming its crate (the
    /// recipe's promise: a new backend crate fails here until its row is written).
    #[test]
    fn every_backend_has_its_row_in_docs_backends() {
        let root = crate::workspace::workspace_root();
        let text = std::fs::read_to_string(root.join("docs/backends.md")).unwrap();
        for b in crate::backends::all() {
            let home = match &b.source {
                crate::backends::Source::Cargo { package, .. } => package.clone(),
                crate::backends::Source::Python { script } => script.to_string(),
            };
            let row = format!("| `{}` | `{home}` |", b.name);
            assert!(
                text.lines().any(|l| l.starts_with(&row)),
                "docs/backends.md has no row for backend {} (a line starting `{row}`)",
                b.name
            );
        }
    }

    /// The picture of the crates in docs/architecture.md is their dependencies: every crate
    /// on one floor, and every dependency on a workspace crate (`[dependencies]`) drawn down.
    #[test]
    fn the_architecture_picture_draws_every_crate_above_what_it_links() {
        let root = crate::workspace::workspace_root();
        let text = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
        let meta = cargo_metadata::MetadataCommand::new()
            .current_dir(&root)
            .no_deps()
            .exec()
            .unwrap();
        let names: BTreeSet<&str> = meta.packages.iter().map(|p| p.name.as_str()).collect();
        let mut floors = std::collections::BTreeMap::new();
        let mut floor = None;
        for line in block_after(&text, "## The crates") {
            let mut words = line.split_whitespace().peekable();
            if let Some(n) = words.peek().and_then(|w| w.parse::<u32>().ok()) {
                floor = Some(n);
                words.next();
            }
            for name in words.map_while(|w| names.get(w).copied()) {
                let at = floor.expect("the picture's first line names its floor");
                assert!(floors.insert(name, at).is_none(), "{name} drawn twice");
            }
        }
        let drawn: BTreeSet<&str> = floors.keys().copied().collect();
        assert_eq!(drawn, names, "the picture against the workspace's crates");
        for package in &meta.packages {
            for dep in &package.dependencies {
                let normal = dep.kind == cargo_metadata::DependencyKind::Normal;
                if let (true, Some(below)) = (normal, floors.get(dep.name.as_str())) {
                    let at = floors[package.name.as_str()];
                    assert!(
                        *below < at,
                        "{} (floor {at}) links {} (floor {below}): draw it lower or cut the link",
                        package.name,
                        dep.name
                    );
                }
            }
        }
    }

    /// The committed back-to-back pairs of repeat sets: `cargo xtask bench-all --quick
    /// --repeats 3 --backends flex,tch,pytorch`, run twice in a row on one machine.
    const PAIRS: &[(&str, &str)] = &[
        (
            "2026-11-30-epyc-f26m2-quick-repeats3",
            "2026-11-30-epyc-f26m2-quick-repeats3-rerun",
        ),
        (
            "2026-12-03-epyc-f25m17-quick-repeats3",
            "2026-12-03-epyc-f25m17-quick-repeats3-rerun",
        ),
    ];

    /// docs/methodology.md says how often the second set's medians fell inside the first set's
    /// intervals for the next run: recounted from the records, so the sentence cannot drift.
    #[test]
    fn methodology_says_how_often_the_second_set_fell_inside_the_first_sets_intervals() {
        let dir = crate::workspace::workspace_root().join("docs/results");
        let rows = |name: &str| {
            let loaded = kiln_report::read::load(&[dir.join(name).join("results.jsonl")]).unwrap();
            kiln_report::repeats::combine(&loaded.records)
        };
        let (mut held, mut held_unfloored, mut checked) = (0, 0, 0);
        for (first, second) in PAIRS {
            let (first, second) = (rows(first), rows(second));
            for a in first.iter().filter(|r| r.between_runs.is_some()) {
                let b = second
                    .iter()
                    .find(|b| b.backend == a.backend && b.between_runs.is_some())
                    .unwrap();
                let next = b.epoch_seconds.as_ref().unwrap().median;
                let mut stats = a.epoch_seconds.clone().unwrap();
                let inside = |s: &kiln_contract::Stats| {
                    let (lo, hi) = s.prediction_interval().unwrap();
                    usize::from(lo <= next && next <= hi)
                };
                held += inside(&stats);
                stats.floor = None;
                held_unfloored += inside(&stats);
                checked += 1;
            }
        }
        let unfloored = format!("fall inside for {held_unfloored} of {checked} rows of both pairs");
        assert_eq!(
            checked,
            3 * PAIRS.len(),
            "flex, tch and pytorch in each set"
        );
        let methodology =
            std::fs::read_to_string(crate::workspace::workspace_root().join("docs/methodology.md"))
                .unwrap();
        let said = format!("inside for {held} of {checked} rows");
        assert!(
            methodology.contains(&said),
            "docs/methodology.md should say `{said}` ({} pairs)",
            PAIRS.len()
        );
        assert!(
            methodology.contains(&unfloored),
            "docs/methodology.md should say `{unfloored}` (without the drift floor)"
        );
        for (first, second) in PAIRS {
            assert!(
                methodology.contains(first) && methodology.contains(second),
                "docs/methodology.md should name the pair {first}, {second}"
            );
        }
    }

    /// Every committed run directory is named `DATE-CPU-TAG-WHAT` by the rule `cargo xtask
    /// submit` names a run with (`kiln_report::site::name::run_origin`): DATE the first day
    /// (UTC) its records started on (explain's and verify's records carry none: their CPU
    /// alone is checked), CPU the processor's line and TAG its family and model, from the
    /// fingerprints of every record of the directory (results, explain or verify).
    #[test]
    fn committed_runs_are_named_by_their_records_date_and_cpu() {
        use kiln_report::site::name::run_origin;
        #[derive(serde::Deserialize)]
        struct Line {
            #[serde(default)]
            started_at: u64,
            #[serde(default)]
            fingerprint: Option<kiln_contract::Fingerprint>,
        }
        let results = crate::workspace::workspace_root().join("docs/results");
        let mut wrong = Vec::new();
        let mut checked = 0;
        for entry in std::fs::read_dir(&results).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let mut lines: Vec<Line> = Vec::new();
            for file in ["results.jsonl", "explain.jsonl", "verify.jsonl"] {
                let Ok(text) = std::fs::read_to_string(entry.path().join(file)) else {
                    continue;
                };
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    match serde_json::from_str(line) {
                        Ok(l) => lines.push(l),
                        Err(e) => wrong.push(format!("{name}/{file}: {e}")),
                    }
                }
            }
            // A directory without records (a build's sizes, say) has nothing to check.
            if lines.is_empty() {
                continue;
            }
            let blank = kiln_contract::Fingerprint::default();
            let origin = run_origin(
                lines
                    .iter()
                    .map(|l| (l.started_at, l.fingerprint.as_ref().unwrap_or(&blank))),
            );
            let (day, cpu) = match origin {
                Ok(o) => o,
                Err(why) => {
                    wrong.push(format!("{name}: {why}"));
                    continue;
                }
            };
            let expected = match &day {
                Some(day) => format!("{day}-{cpu}-"),
                None => format!("-{cpu}-"),
            };
            let (named, shown) = match day {
                Some(_) => (name.starts_with(&expected), expected),
                None => (
                    name.get(10..)
                        .is_some_and(|rest| rest.starts_with(&expected)),
                    format!("DATE{expected}"),
                ),
            };
            if !named {
                wrong.push(format!("{name}: its records make it {shown}WHAT"));
            }
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} run directories checked");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// The README's results table is the report Kiln renders from the committed records of the
    /// run it names: each row's epoch time, interval, ratio and accuracy, cell by cell.
    #[test]
    fn the_readme_results_table_is_the_report_of_its_committed_run() {
        let run = "docs/results/2026-11-30-epyc-f26m2-quick-repeats3";
        let text = readme();
        assert!(text.contains(run), "the README no longer names {run}");
        let path = crate::workspace::workspace_root()
            .join(run)
            .join("results.jsonl");
        let loaded = kiln_report::read::load(&[path]).unwrap();
        let report = kiln_report::render::markdown(&loaded.records, None);
        let mut rows = 0;
        for line in text
            .lines()
            .filter(|l| l.starts_with("| ") && l.contains(" / cpu |"))
        {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let [label, epoch, ratio, accuracy] = cells[..] else {
                panic!("README row {line:?}: four cells expected");
            };
            let (median, interval) = epoch.split_once(" (").unwrap();
            let interval = interval.trim_end_matches(')');
            let rendered = report
                .lines()
                .find(|l| l.starts_with(&format!("| {label} (")))
                .unwrap_or_else(|| panic!("{label}: no such row in the rendered report"));
            for want in [
                format!("| {median} (next run {interval};"),
                format!("| {ratio} |"),
                format!("| {accuracy} (n="),
            ] {
                assert!(
                    rendered.contains(&want),
                    "{label}: {want:?} not in {rendered:?}"
                );
            }
            rows += 1;
        }
        assert_eq!(rows, 3, "flex, tch and pytorch");
    }

    /// ± has one meaning in Kiln, the 95% interval for the next run: every document that
    /// writes a `± N` says so in those words (reports.md gives the formula, and the report's
    /// own column headers say it).
    #[test]
    fn every_document_with_a_plus_minus_says_what_it_means() {
        let root = crate::workspace::workspace_root();
        let mut docs = vec![root.join("README.md")];
        for e in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "md") {
                docs.push(e.path());
            }
        }
        let pm = regex::Regex::new(r"± ?[0-9]").unwrap();
        let mut unsaid = Vec::new();
        let mut checked = 0;
        for doc in docs {
            let text = std::fs::read_to_string(&doc).unwrap();
            if pm.is_match(&text) {
                checked += 1;
                if !text.contains("95% interval for the next run") {
                    unsaid.push(doc.display().to_string());
                }
            }
        }
        assert!(checked >= 4, "only {checked} documents with a ±");
        assert!(unsaid.is_empty(), "± without its meaning in {unsaid:?}");
    }

    /// The pages workflow builds the site with a command `cargo xtask` takes, the one `.ci/run`
    /// runs (and the browser test opens what it builds).
    #[test]
    fn the_pages_workflow_runs_the_site_command_ci_runs() {
        use clap::Parser;
        let root = crate::workspace::workspace_root();
        let workflow = std::fs::read_to_string(root.join(".github/workflows/pages.yml")).unwrap();
        let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
        let command = workflow
            .lines()
            .find_map(|l| l.trim().strip_prefix("run: cargo xtask site"))
            .expect("pages.yml runs `cargo xtask site`");
        let args: Vec<&str> = ["xtask", "site"]
            .into_iter()
            .chain(command.split_whitespace())
            .collect();
        Cli::try_parse_from(&args).unwrap();
        assert!(command.trim_start().starts_with("--out "), "{command}");
        assert!(
            ci.contains("cargo xtask site --out "),
            ".ci/run does not build the site"
        );
        assert!(
            workflow.contains("actions/deploy-pages"),
            "pages.yml does not deploy"
        );
    }
}
