//! Every measured figure the README and docs state comes from a committed record: a test reads
//! each figure (a number with a unit: `168 s`, `3.11×`, `82.7%`, `45 MB`, ...) and resolves it,
//! or fails naming the doc and the figure.
//!
//! A figure resolves when
//! - it appears, as written, in a file of a run directory under docs/results that the same doc
//!   links (its report, logs, records, `timings.json`): the doc quotes that run; or
//! - the ledger (`docs/figures.json`) holds it for that doc, either with a `source`, a record
//!   file and a JSON pointer (`docs/results/DIR/timings.json#/phases_seconds/table_printed`)
//!   whose value, in the figure's unit, rounds to the figure; or as `not measured` with the
//!   reason (a protocol constant, a threshold, the article's own figures).

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use regex::Regex;
    use serde::Deserialize;

    /// One ledger entry.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Entry {
        doc: String,
        figure: String,
        /// Where the figure's value is: `FILE#/json/pointer` (FILE relative to the workspace;
        /// `FILE:N#/...` the Nth line of a `.jsonl`), or two of those as `A / B` (a ratio),
        /// `A / B - 1` (a change), `1 - A / B` (a loss) or `A - B` (a difference); or `FILE` with `quote`. Absent
        /// for a figure that is not a measurement.
        #[serde(default)]
        source: Option<String>,
        /// Text that `source` holds verbatim (a log line's `17m41s`).
        #[serde(default)]
        quote: Option<String>,
        /// Why the figure is not a measurement, or what the source's value is.
        why: String,
    }

    const LEDGER: &str = "docs/figures.json";

    fn figure_pattern() -> Regex {
        Regex::new(
            r"(?:^|[^\w.])([0-9][0-9,]*(?:\.[0-9]+)?) ?((?:h|min) [0-9]+ ?(?:min|s)|ms|s|%|×|MB|MiB|GB|GiB|KiB|min|minutes|seconds|hours|h|images/s)(?:[^\w]|$)",
        )
        .unwrap()
    }

    /// The figures of `text`, as written (`168 s`).
    fn figures(text: &str) -> Vec<String> {
        let pattern = figure_pattern();
        let mut found = Vec::new();
        for line in text.lines() {
            // Overlapping matches share their delimiters: scan from each match's number.
            let mut at = 0;
            while let Some(c) = pattern.captures_at(line, at) {
                let (number, unit) = (c.get(1).unwrap(), c.get(2).unwrap());
                found.push(line[number.start()..unit.end()].to_string());
                at = unit.end();
            }
        }
        found
    }

    /// A figure as its number and unit (`13,195 ms`: 13195, "ms").
    fn parse(figure: &str) -> Option<(f64, &str, usize)> {
        let split = figure
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
            .unwrap_or(figure.len());
        let number = &figure[..split];
        // `17 min 41 s`: seconds; `4 h 5 min`: minutes.
        if let Some((big, small)) = figure[split..].trim().split_once(' ') {
            let (whole, rest): (f64, f64) = (
                number.parse().ok()?,
                small
                    .trim_end_matches(['s', 'm', 'i', 'n', ' '])
                    .parse()
                    .ok()?,
            );
            return Some(match big {
                "h" => (whole * 60.0 + rest, "min", 0),
                _ => (whole * 60.0 + rest, "s", 0),
            });
        }
        let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
        let value = number.replace(',', "").parse().ok()?;
        Some((value, figure[split..].trim(), decimals))
    }

    /// A unit's scale to its base (seconds, bytes), and the base's name; other units are
    /// their own base.
    fn base(unit: &str) -> (f64, &str) {
        match unit {
            "ms" => (1e-3, "s"),
            "s" | "seconds" => (1.0, "s"),
            "min" | "minutes" => (60.0, "s"),
            "h" | "hours" => (3600.0, "s"),
            "MB" => (1e6, "B"),
            "GB" => (1e9, "B"),
            "KiB" => (1024.0, "B"),
            "MiB" => ((1u64 << 20) as f64, "B"),
            "GiB" => ((1u64 << 30) as f64, "B"),
            other => (1.0, other),
        }
    }

    /// Whether `shown` (a doc's figure) is one of `recorded` (figures of the records' own
    /// files, in base units) rounded to the digits it shows (`45 ms` quotes `45.3 ms`, `12.1 s`
    /// quotes `12,071 ms`).
    fn quotes(shown: &str, recorded: &[(f64, String)]) -> bool {
        let Some((value, unit, decimals)) = parse(shown) else {
            return false;
        };
        let (scale, unit) = base(unit);
        let half = (0.5 * 10f64.powi(-(decimals as i32)) + 1e-9) * scale;
        recorded
            .iter()
            .any(|(v, u)| u == unit && (v - value * scale).abs() <= half)
    }

    /// A figure in base units (`12,071 ms`: 12.071, "s").
    fn in_base(figure: &str) -> Option<(f64, String)> {
        let (value, unit, _) = parse(figure)?;
        let (scale, unit) = base(unit);
        Some((value * scale, unit.to_string()))
    }

    /// The run directories `text` links (`results/DATE-...`), as paths under the workspace.
    fn linked_runs(text: &str) -> Vec<String> {
        let pattern = Regex::new(r"results/(\d{4}-\d\d-\d\d-[A-Za-z0-9.-]+)").unwrap();
        let mut runs: Vec<String> = pattern
            .captures_iter(text)
            .map(|c| format!("docs/results/{}", c[1].trim_end_matches(['.', '-'])))
            .collect();
        runs.sort();
        runs.dedup();
        runs
    }

    /// Every text file of a run directory, concatenated, and the report this Kiln renders from
    /// its records (a doc may quote the current report of a committed run).
    fn run_text(root: &Path, run: &str) -> String {
        let mut text = String::new();
        let results = root.join(run).join(kiln_report::read::RESULTS_FILE);
        if let Ok(loaded) = kiln_report::read::load(std::slice::from_ref(&results)) {
            text.push_str(&kiln_report::render::markdown(&loaded.records, None));
        }
        let mut stack = vec![root.join(run)];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if let Ok(t) = std::fs::read_to_string(&path) {
                    text.push_str(&t);
                    text.push('\n');
                }
            }
        }
        text
    }

    /// The value at `source`: one `FILE[:LINE]#/pointer`, or `A / B`, `A / B - 1`, `A - B`.
    fn source_value(root: &Path, source: &str) -> Result<f64, String> {
        if let Some(share) = source.strip_prefix("1 - ") {
            return Ok(1.0 - source_value(root, share)?);
        }
        if let Some(ratio) = source.strip_suffix(" - 1") {
            return Ok(source_value(root, ratio)? - 1.0);
        }
        if let Some((a, b)) = source.split_once(" / ") {
            return Ok(source_value(root, a)? / source_value(root, b)?);
        }
        if let Some((a, b)) = source.split_once(" - ") {
            return Ok(source_value(root, a)? - source_value(root, b)?);
        }
        let (file, pointer) = source
            .split_once('#')
            .ok_or_else(|| format!("{source}: give FILE#/json/pointer"))?;
        let (file, line) = match file.rsplit_once(':') {
            Some((f, n)) => (f, n.parse::<usize>().map_err(|e| format!("{source}: {e}"))?),
            None => (file, 1),
        };
        let text = std::fs::read_to_string(root.join(file))
            .map_err(|e| format!("{source}: cannot read {file}: {e}"))?;
        let document = if file.ends_with(".jsonl") {
            text.lines().nth(line - 1).unwrap_or_default()
        } else {
            &text
        };
        let json: serde_json::Value =
            serde_json::from_str(document).map_err(|e| format!("{source}: {e}"))?;
        json.pointer(pointer)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| format!("{source}: no number at {pointer}"))
    }

    /// Whether `value` (seconds, bytes, a share 0..1, or a plain number) is `figure` as
    /// written: converted to the figure's unit and rounded to its last digit.
    fn rounds_to(value: f64, figure: &str) -> bool {
        let Some((shown, unit, decimals)) = parse(figure) else {
            return false;
        };
        let scaled = match unit.trim() {
            "s" | "seconds" => value,
            "ms" => value * 1e3,
            "min" | "minutes" => value / 60.0,
            "h" | "hours" => value / 3600.0,
            "MB" => value / 1e6,
            "GB" => value / 1e9,
            "KiB" => value / 1024.0,
            "MiB" => value / (1u64 << 20) as f64,
            "GiB" => value / (1u64 << 30) as f64,
            "%" if value <= 1.0 => value * 100.0,
            _ => value,
        };
        let half = 0.5 * 10f64.powi(-(decimals as i32));
        (scaled - shown).abs() <= half + 1e-9
    }

    fn docs(root: &Path) -> Vec<String> {
        let mut docs = vec!["README.md".to_string()];
        let mut more: Vec<String> = std::fs::read_dir(root.join("docs"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".md"))
            .map(|n| format!("docs/{n}"))
            .collect();
        more.sort();
        docs.extend(more);
        docs
    }

    #[test]
    fn figures_are_read_as_written_and_checked_against_their_value() {
        assert_eq!(
            figures(
                "flex 168 s (165 s–168 s, CV 0.9%), 3.11× faster, 45 MB; 16 MiB, 2,000 images/s"
            ),
            [
                "168 s",
                "165 s",
                "168 s",
                "0.9%",
                "3.11×",
                "45 MB",
                "16 MiB",
                "2,000 images/s"
            ]
        );
        assert_eq!(
            figures("in 17 min 41 s, then 1 h 5 min"),
            ["17 min 41 s", "1 h 5 min"]
        );
        assert!(rounds_to(1061.0, "17 min 41 s") && !rounds_to(1063.0, "17 min 41 s"));
        assert!(figures("kiln-flex 2.5 batch 128, 20 epochs, f25m1").is_empty());
        assert!(rounds_to(168.4, "168 s") && !rounds_to(168.6, "168 s"));
        assert!(rounds_to(1605.0, "26.8 min") && rounds_to(1605.0, "27 min"));
        assert!(rounds_to(44_788_320.0, "45 MB") && rounds_to(44_788_320.0, "42.7 MiB"));
        assert!(rounds_to(0.0125, "1.25%") && rounds_to(0.0125, "1.3%"));
        assert!(!rounds_to(0.0125, "1.4%"));
        assert!(rounds_to(121.66, "121.7×") && !rounds_to(121.66, "121×"));
        let recorded: Vec<(f64, String)> = ["45.3 ms", "13,195 ms"]
            .iter()
            .filter_map(|f| in_base(f))
            .collect();
        assert!(quotes("45 ms", &recorded) && quotes("13,195 ms", &recorded));
        assert!(!quotes("46 ms", &recorded) && !quotes("45 s", &recorded));
        assert!(quotes("13.2 s", &recorded) && !quotes("13.3 s", &recorded));
    }

    #[test]
    fn every_figure_in_the_docs_comes_from_a_record_or_the_ledger() {
        let root = crate::workspace::workspace_root();
        let text = std::fs::read_to_string(root.join(LEDGER)).unwrap();
        let ledger: Vec<Entry> =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{LEDGER}: {e}"));
        let mut problems = Vec::new();
        let mut by_doc: BTreeMap<(&str, &str), &Entry> = BTreeMap::new();
        for e in &ledger {
            assert!(
                !e.why.trim().is_empty(),
                "{LEDGER}: {} {}: say why",
                e.doc,
                e.figure
            );
            if let (Some(source), Some(quote)) = (&e.source, &e.quote) {
                let held = std::fs::read_to_string(root.join(source))
                    .is_ok_and(|t| t.contains(quote.as_str()));
                if !held {
                    problems.push(format!(
                        "{}: {:?}: {source} does not hold {quote:?}",
                        e.doc, e.figure
                    ));
                }
            } else if let Some(source) = &e.source {
                match source_value(&root, source) {
                    Ok(v) if rounds_to(v, &e.figure) => {}
                    Ok(v) => problems.push(format!(
                        "{}: {:?} is not {source}'s value {v} as written",
                        e.doc, e.figure
                    )),
                    Err(why) => problems.push(format!("{}: {:?}: {why}", e.doc, e.figure)),
                }
            }
            by_doc.insert((&e.doc, &e.figure), e);
        }
        let mut used = std::collections::BTreeSet::new();
        let mut checked = 0;
        for doc in docs(&root) {
            let text = std::fs::read_to_string(root.join(&doc)).unwrap();
            let runs: String = linked_runs(&text)
                .iter()
                .map(|r| run_text(&root, r))
                .collect();
            let recorded: Vec<(f64, String)> =
                figures(&runs).iter().filter_map(|f| in_base(f)).collect();
            for figure in figures(&text) {
                checked += 1;
                if let Some(e) = by_doc.get(&(doc.as_str(), figure.as_str())) {
                    used.insert((e.doc.clone(), e.figure.clone()));
                } else if !quotes(&figure, &recorded) {
                    problems.push(format!(
                        "{doc}: {figure:?} is in no run directory it links and not in {LEDGER}"
                    ));
                }
            }
        }
        for e in &ledger {
            if !used.contains(&(e.doc.clone(), e.figure.clone())) {
                problems.push(format!(
                    "{LEDGER}: {} no longer states {:?}; remove the entry",
                    e.doc, e.figure
                ));
            }
        }
        assert!(checked > 100, "only {checked} figures found");
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
