//! Every measured figure the docs state comes from a committed record. A test reads each figure
//! (a number with a unit: `168 s`, `3.11×`, `82.7%`, `45 MB`, ...) and resolves it, or fails
//! naming the doc, the line and the figure.
//!
//! The ledger (`docs/figures.json`) binds figures to where their values are. An entry names its
//! doc and figure as written, optionally `near` (text on the figure's line before it, when one
//! doc states the same figure for different things), and one of
//! - `source`: `FILE[:LINE]#/json/pointer` (a record file; `:LINE` the Nth line of a `.jsonl`),
//!   or `RUN[key=value,...]#/pointer`: the row of that run's report whose fields match (its
//!   records with each cell's repeats combined, `kiln_report::repeats::combine`; a row's
//!   `/next_run/low` and `/next_run/high` are the 95% interval for the next run's epoch time);
//!   or two of those as `A / B` (a ratio), `A / B - 1` (a change), `1 - A / B` (a loss),
//!   `A - B` (a difference). The value, in the figure's unit, must round to the figure;
//! - `source` that is a plain file with `quote`: text the file holds verbatim (a log's `3m27s`);
//! - `constant`: a constant of Kiln's code, by its path (`kiln_contract::BUSY_SHARE`).
//!
//! In the README and docs/results.md every figure must be bound so, and a test raises each one's
//! last digit and requires the check to fail. Elsewhere an entry may instead say `why` a figure
//! is not a measurement (an example, a flag's value), and a figure also resolves when it appears,
//! as written, in a run directory the doc links.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

/// The repository's root: the docs, the ledger and the committed runs live there.
fn workspace_root() -> std::path::PathBuf {
    kiln_contract::testing::package_dir(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One ledger entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    doc: String,
    figure: String,
    #[serde(default)]
    near: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    quote: Option<String>,
    #[serde(default)]
    constant: Option<String>,
    /// What the value is, or why the figure is not a measurement.
    why: String,
}

impl Entry {
    fn bound(&self) -> bool {
        self.source.is_some() || self.constant.is_some()
    }
}

const LEDGER: &str = "docs/figures.json";
/// The docs whose every figure is bound to a record or a constant.
const STRICT: [&str; 2] = ["README.md", "docs/results.md"];

/// Where usage.md's generated flag reference starts (xtask's `flags::reference::HEADING`).
const GENERATED_FLAGS: &str = "## Every flag, from the code";

/// The constants of Kiln's code that docs quote, by the path the ledger names them with.
fn constant(name: &str) -> Option<f64> {
    Some(match name {
        "kiln_contract::BUSY_SHARE" => kiln_contract::BUSY_SHARE,
        "kiln_contract::memory::MIN_GROWTH_SHARE" => kiln_contract::memory::MIN_GROWTH_SHARE,
        "kiln_contract::stats::PREDICTION_LEVEL" => kiln_contract::stats::PREDICTION_LEVEL,
        "kiln_report::ab::P_VALUE" => kiln_report::ab::P_VALUE,
        "kiln_report::infer::AGREEMENT" => kiln_report::infer::AGREEMENT,
        "kiln_report::infer::OVERHEAD_SHARE" => kiln_report::infer::OVERHEAD_SHARE,
        "kiln_contract::infer::SERIES_SECONDS" => kiln_contract::infer::SERIES_SECONDS,
        "kiln_contract::infer::THROUGHPUT_SECONDS" => kiln_contract::infer::THROUGHPUT_SECONDS,
        "kiln_contract::TimingRules::KILN.late_floor_seconds" => {
            kiln_contract::TimingRules::KILN.late_floor_seconds
        }
        _ => return None,
    })
}

fn figure_pattern() -> Regex {
    Regex::new(
        r"(?:^|[^\w.])([0-9][0-9,]*(?:\.[0-9]+)?) ?((?:h|min) [0-9]+ ?(?:min|s)|ms|s|%|×|MB|MiB|GB|GiB|KiB|min|minutes|seconds|hours|h|images/s)(?:[^\w]|$)",
    )
    .unwrap()
}

/// A figure where a doc states it: the line (from 1), its byte range there, its text.
struct Found {
    line: usize,
    start: usize,
    end: usize,
    text: String,
}

/// The figures of `text`, as written (`168 s`), where they are.
fn find(text: &str) -> Vec<Found> {
    let pattern = figure_pattern();
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        // Overlapping matches share their delimiters: scan from each match's number.
        let mut at = 0;
        while let Some(c) = pattern.captures_at(line, at) {
            let (number, unit) = (c.get(1).unwrap(), c.get(2).unwrap());
            found.push(Found {
                line: i + 1,
                start: number.start(),
                end: unit.end(),
                text: line[number.start()..unit.end()].to_string(),
            });
            at = unit.end();
        }
    }
    found
}

fn figures(text: &str) -> Vec<String> {
    find(text).into_iter().map(|f| f.text).collect()
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
        "%" => (0.01, "%"),
        other => (1.0, other),
    }
}

/// Whether `shown` (a doc's figure) is one of `recorded` (figures of the records' own
/// files, in base units) rounded to the digits it shows (`45 ms` quotes `45.3 ms`, `12.1 s`
/// quotes `12,071 ms`).
fn quotes(shown: &str, recorded: &[(f64, String)]) -> bool {
    let Some((_, unit)) = in_base(shown) else {
        return false;
    };
    recorded
        .iter()
        .any(|(v, u)| *u == unit && rounds_to(*v, shown))
}

/// A figure in base units (`12,071 ms`: 12.071, "s").
fn in_base(figure: &str) -> Option<(f64, String)> {
    let (value, unit, _) = parse(figure)?;
    let (scale, unit) = base(unit);
    Some((value * scale, unit.to_string()))
}

/// Whether `value` (seconds, bytes, a share 0..1, or a plain number) is `figure` as
/// written: converted to the figure's unit and rounded to its last digit.
fn rounds_to(value: f64, figure: &str) -> bool {
    let Some((shown, unit, decimals)) = parse(figure) else {
        return false;
    };
    let scaled = value / base(unit.trim()).0;
    let half = 0.5 * 10f64.powi(-(decimals as i32));
    (scaled - shown).abs() <= half + 1e-9
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
            } else if let Some(t) = file_text(&path) {
                text.push_str(&t);
                text.push('\n');
            }
        }
    }
    text
}

/// A run's file as text: a text file, or a gzip-compressed one (`ci.log.gz`: long logs are
/// committed compressed); `None` for anything else.
fn file_text(path: &Path) -> Option<String> {
    use std::io::Read as _;
    if path.extension().is_some_and(|e| e == "gz") {
        let file = std::fs::File::open(path).ok()?;
        let mut text = String::new();
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .ok()?;
        Some(text)
    } else {
        std::fs::read_to_string(path).ok()
    }
}

/// The rows of a run's report as JSON: its records with each cell's repeats combined, each
/// with the 95% interval for the next run's epoch time at `/next_run`.
fn run_rows(root: &Path, run: &str) -> Result<Vec<Value>, String> {
    let results = root.join(run).join(kiln_report::read::RESULTS_FILE);
    let loaded =
        kiln_report::read::load(std::slice::from_ref(&results)).map_err(|e| e.to_string())?;
    Ok(kiln_report::repeats::combine(&loaded.records)
        .iter()
        .map(|r| {
            let mut row = serde_json::to_value(r).unwrap_or_default();
            let interval = r
                .epoch_seconds
                .as_ref()
                .and_then(|s| s.prediction_interval());
            if let Some((low, high)) = interval {
                row["next_run"] = serde_json::json!({"low": low.max(0.0), "high": high});
            }
            row
        })
        .collect())
}

/// The report rows of the runs the ledger names, each run read and combined once.
type Rows = RefCell<BTreeMap<String, Vec<Value>>>;

/// The one row of `run` whose fields are `selector`'s (`backend=flex,batch_size=512`; a
/// key may be a path, `obtained/method`).
fn select_row(root: &Path, rows: &Rows, run: &str, selector: &str) -> Result<Value, String> {
    let wanted: Vec<(&str, &str)> = selector
        .split(',')
        .map(|kv| kv.split_once('=').ok_or(format!("{kv}: give key=value")))
        .collect::<Result<_, _>>()?;
    let matches = |row: &Value| {
        wanted.iter().all(|(k, v)| {
            row.pointer(&format!("/{k}")).is_some_and(|x| match x {
                Value::String(s) => s == v,
                Value::Number(n) => v.parse::<f64>().ok() == n.as_f64(),
                _ => false,
            })
        })
    };
    if !rows.borrow().contains_key(run) {
        let read = run_rows(root, run)?;
        rows.borrow_mut().insert(run.to_string(), read);
    }
    let mut found: Vec<Value> = rows.borrow()[run]
        .iter()
        .filter(|r| matches(r))
        .cloned()
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        n => Err(format!("{run}[{selector}]: {n} rows match, name one")),
    }
}

/// The value at `source`: one `FILE[:LINE]#/pointer` or `RUN[SELECTOR]#/pointer`, or
/// `A / B`, `A / B - 1`, `1 - A / B`, `A - B` of those.
fn source_value(root: &Path, rows: &Rows, source: &str) -> Result<f64, String> {
    let value = |s: &str| source_value(root, rows, s);
    if let Some(share) = source.strip_prefix("1 - ") {
        return Ok(1.0 - value(share)?);
    }
    if let Some(ratio) = source.strip_suffix(" - 1") {
        return Ok(value(ratio)? - 1.0);
    }
    if let Some((a, b)) = source.split_once(" / ") {
        return Ok(value(a)? / value(b)?);
    }
    if let Some((a, b)) = source.split_once(" - ") {
        return Ok(value(a)? - value(b)?);
    }
    let (place, pointer) = source
        .split_once('#')
        .ok_or_else(|| format!("{source}: give FILE#/json/pointer"))?;
    let document = if let Some((run, selector)) = place.split_once('[') {
        select_row(root, rows, run, selector.trim_end_matches(']'))?
    } else {
        let (file, line) = match place.rsplit_once(':') {
            Some((f, n)) => (f, n.parse::<usize>().map_err(|e| format!("{source}: {e}"))?),
            None => (place, 1),
        };
        let text = std::fs::read_to_string(root.join(file))
            .map_err(|e| format!("{source}: cannot read {file}: {e}"))?;
        let json = if file.ends_with(".jsonl") {
            text.lines().nth(line - 1).unwrap_or_default()
        } else {
            &text
        };
        serde_json::from_str(json).map_err(|e| format!("{source}: {e}"))?
    };
    document
        .pointer(pointer)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("{source}: no number at {pointer}"))
}

/// Whether `quote` states a value that rounds to `figure` (a log's `3m27s` is `3 min 27 s`).
fn quote_states(quote: &str, figure: &str) -> bool {
    let spelled = Regex::new(r"([0-9]+)m([0-9]+)s").unwrap();
    let quote = spelled.replace_all(quote, "$1 min $2 s");
    let stated: Vec<(f64, String)> = figures(&quote).iter().filter_map(|f| in_base(f)).collect();
    quotes(figure, &stated)
}

/// Why `e` does not hold its figure, if it does not.
fn entry_problem(root: &Path, rows: &Rows, e: &Entry) -> Option<String> {
    let at = format!("{LEDGER}: {} {:?}", e.doc, e.figure);
    if e.why.trim().is_empty() {
        return Some(format!("{at}: say why"));
    }
    match (&e.source, &e.quote, &e.constant) {
        (Some(file), Some(quote), None) => {
            let held =
                std::fs::read_to_string(root.join(file)).is_ok_and(|t| t.contains(quote.as_str()));
            if !held {
                Some(format!("{at}: {file} does not hold {quote:?}"))
            } else if !quote_states(quote, &e.figure) {
                Some(format!("{at}: {quote:?} states no value that rounds to it"))
            } else {
                None
            }
        }
        (Some(source), None, None) => match source_value(root, rows, source) {
            Ok(v) if rounds_to(v, &e.figure) => None,
            Ok(v) => Some(format!("{at} is not {source}'s value {v} as written")),
            Err(why) => Some(format!("{at}: {why}")),
        },
        (None, None, Some(name)) => match constant(name) {
            Some(v) if rounds_to(v, &e.figure) => None,
            Some(v) => Some(format!("{at} is not {name} ({v}) as written")),
            None => Some(format!(
                "{at}: no constant {name} (crates/kiln-report/tests/figures.rs)"
            )),
        },
        (None, None, None) => None,
        _ => Some(format!(
            "{at}: give a source, a source and a quote, or a constant"
        )),
    }
}

/// The ledger, with each entry's problem checked once.
struct Ledger {
    entries: Vec<Entry>,
    problems: Vec<String>,
}

fn ledger(root: &Path) -> Ledger {
    let text = std::fs::read_to_string(root.join(LEDGER)).unwrap();
    let entries: Vec<Entry> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{LEDGER}: {e}"));
    let rows = Rows::default();
    let problems = entries
        .iter()
        .filter_map(|e| entry_problem(root, &rows, e))
        .collect();
    Ledger { entries, problems }
}

/// The entry (its index) that binds a figure of `doc` whose line reads `before` up to it:
/// one whose `near` is in `before`, else one naming no `near`.
fn entry_for(
    ledger: &Ledger,
    doc: &str,
    before: &str,
    figure: &str,
) -> Result<Option<usize>, String> {
    let candidates: Vec<usize> = (0..ledger.entries.len())
        .filter(|&i| {
            let e = &ledger.entries[i];
            e.doc == doc
                && e.figure == figure
                && e.near.as_ref().is_none_or(|n| before.contains(n.as_str()))
        })
        .collect();
    let near: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&i| ledger.entries[i].near.is_some())
        .collect();
    let pick = if near.is_empty() { candidates } else { near };
    match pick.len() {
        0 => Ok(None),
        1 => Ok(Some(pick[0])),
        _ => Err(format!(
            "{doc}: {figure:?} after {before:?}: {} entries of {LEDGER} fit; tell them apart with `near`",
            pick.len()
        )),
    }
}

/// The figures of `doc` (its text `text`) that nothing binds; the entries used, by index.
fn unresolved(
    root: &Path,
    ledger: &Ledger,
    doc: &str,
    text: &str,
    used: &mut BTreeSet<usize>,
) -> Vec<String> {
    let strict = STRICT.contains(&doc);
    let recorded: Vec<(f64, String)> = if strict {
        Vec::new()
    } else {
        let runs: String = linked_runs(text)
            .iter()
            .map(|r| run_text(root, r))
            .collect();
        figures(&runs).iter().filter_map(|f| in_base(f)).collect()
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut problems = Vec::new();
    for f in find(text) {
        let at = format!("{doc}:{}: {:?}", f.line, f.text);
        match entry_for(ledger, doc, &lines[f.line - 1][..f.start], &f.text) {
            Err(why) => problems.push(why),
            Ok(Some(i)) if strict && !ledger.entries[i].bound() => problems.push(format!(
                "{at} is bound to nothing in {LEDGER}: give its record field or constant"
            )),
            Ok(Some(i)) => {
                used.insert(i);
            }
            Ok(None) if strict => problems.push(format!(
                "{at} is not in {LEDGER}: bind it to its record field"
            )),
            Ok(None) if !quotes(&f.text, &recorded) => problems.push(format!(
                "{at} is in no run directory it links and not in {LEDGER}"
            )),
            Ok(None) => {}
        }
    }
    problems
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

/// `figure` with its last digit raised by one (`168 s`: `169 s`, `0.39 s`: `0.30 s`).
fn perturbed(figure: &str) -> String {
    let last = figure.rfind(|c: char| c.is_ascii_digit()).unwrap();
    let digit = figure.as_bytes()[last] - b'0';
    format!(
        "{}{}{}",
        &figure[..last],
        (digit + 1) % 10,
        &figure[last + 1..]
    )
}

#[test]
fn figures_are_read_as_written_and_checked_against_their_value() {
    assert_eq!(
        figures("flex 168 s (165 s–168 s, CV 0.9%), 3.11× faster, 45 MB; 16 MiB, 2,000 images/s"),
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
    assert!(rounds_to(0.0125, "1.25%") && rounds_to(0.0125, "1.3%") && rounds_to(1.05, "105%"));
    assert!(!rounds_to(0.0125, "1.4%"));
    assert!(rounds_to(121.66, "121.7×") && !rounds_to(121.66, "121×"));
    let recorded: Vec<(f64, String)> = ["45.3 ms", "13,195 ms"]
        .iter()
        .filter_map(|f| in_base(f))
        .collect();
    assert!(quotes("45 ms", &recorded) && quotes("13,195 ms", &recorded));
    assert!(!quotes("46 ms", &recorded) && !quotes("45 s", &recorded));
    assert!(quotes("13.2 s", &recorded) && !quotes("13.3 s", &recorded));
    assert!(quote_states("crates compiled in 3m27s", "3 min 27 s"));
    assert!(quote_states("12071 ms (91%), 532.77×", "533×"));
    assert!(quote_states("| 0.069% |", "0.07%") && !quote_states("| 0.069% |", "0.08%"));
    assert_eq!(perturbed("168 s"), "169 s");
    assert_eq!(perturbed("1 h 9 min"), "1 h 0 min");
}

#[test]
fn every_figure_in_the_docs_comes_from_a_record_or_the_ledger() {
    let root = workspace_root();
    let ledger = ledger(&root);
    let mut problems = ledger.problems.clone();
    let mut used = BTreeSet::new();
    let mut checked = 0;
    for doc in docs(&root) {
        let mut text = std::fs::read_to_string(root.join(&doc)).unwrap();
        // usage.md's flag reference is the parser's own help (flags' defaults and examples),
        // written and held by xtask's `flag_reference_is_the_parsers`: no measurement.
        if let Some(at) = text.find(GENERATED_FLAGS) {
            text.truncate(at);
        }
        checked += find(&text).len();
        problems.extend(unresolved(&root, &ledger, &doc, &text, &mut used));
    }
    for (i, e) in ledger.entries.iter().enumerate() {
        if !used.contains(&i) {
            problems.push(format!(
                "{LEDGER}: {} no longer states {:?}{}; remove the entry",
                e.doc,
                e.figure,
                e.near
                    .as_ref()
                    .map_or(String::new(), |n| format!(" near {n:?}"))
            ));
        }
    }
    assert!(checked > 100, "only {checked} figures found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A bound figure changed in its last digit is a figure no record holds: the check fails on
/// each one of the README's and docs/results.md's.
#[test]
fn a_figure_changed_by_one_digit_fails_the_check() {
    let root = workspace_root();
    let ledger = ledger(&root);
    let mut passed = BTreeMap::new();
    for doc in STRICT {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for f in find(&text) {
            let line = lines[f.line - 1];
            let changed = format!(
                "{}{}{}",
                &line[..f.start],
                perturbed(&f.text),
                &line[f.end..]
            );
            let mut unused = BTreeSet::new();
            if unresolved(&root, &ledger, doc, &changed, &mut unused).is_empty() {
                passed.insert(format!("{doc}:{}", f.line), f.text);
            }
        }
    }
    assert!(passed.is_empty(), "changed and still passing: {passed:?}");
    let planted = "flex took 999 s per epoch";
    let problems = unresolved(&root, &ledger, STRICT[0], planted, &mut BTreeSet::new());
    assert!(
        problems.len() == 1 && problems[0].contains("999 s"),
        "{problems:?}"
    );
}
