//! The report's file formats, in one registry: each renders one file from the records (and,
//! for the HTML page, the charts and log links xtask gathers). `cargo xtask report` takes a
//! `--FLAG FILE` per format from [`FORMATS`], and a run directory gets every format that names
//! a file there. A new format is a renderer and one line in [`FORMATS`].

use kiln_contract::Record;

use crate::html::HtmlParts;

/// What a format renders from.
pub struct ExportInputs<'a> {
    pub records: &'a [Record],
    /// The row speed-ups are relative to (a prefix of backend/device/precision).
    pub baseline: Option<&'a str>,
    /// The page's title, charts and log links (the HTML page shows them; others ignore them).
    pub parts: HtmlParts,
}

/// One file format.
#[derive(Debug)]
pub struct Format {
    /// Its flag on `cargo xtask report` (`--csv FILE`).
    pub flag: &'static str,
    /// The flag's help line.
    pub help: &'static str,
    /// The file it is written to in every run directory, if it is.
    pub run_file: Option<&'static str>,
    /// Whether it shows the charts and logs (xtask draws them only when a format does).
    pub shows_charts: bool,
    pub render: fn(&ExportInputs) -> String,
}

/// Every file format, in the order `--help` lists them.
pub const FORMATS: &[Format] = &[
    Format {
        flag: "csv",
        help: "Also write the table as CSV to this file (every record field, one row per cell)",
        run_file: Some("results.csv"),
        shows_charts: false,
        render: |i| crate::render::csv(i.records),
    },
    Format {
        flag: "json",
        help: "Also write the merged records as a JSON array to this file",
        run_file: None,
        shows_charts: false,
        render: |i| crate::render::json(i.records),
    },
    Format {
        flag: "html",
        help: "Also write a self-contained HTML page (tables, charts, fingerprints, logs linked)",
        run_file: Some("report.html"),
        shows_charts: true,
        render: |i| crate::html::html(i.records, i.baseline, &i.parts),
    },
    Format {
        flag: "latex",
        help: "Also write the model tables as LaTeX (booktabs) for a paper",
        run_file: None,
        shows_charts: false,
        render: |i| crate::latex::latex(i.records, i.baseline),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_run_files_name_one_format_each() {
        let mut flags: Vec<&str> = FORMATS.iter().map(|f| f.flag).collect();
        flags.sort();
        flags.dedup();
        assert_eq!(flags.len(), FORMATS.len());
        let files: Vec<&str> = FORMATS.iter().filter_map(|f| f.run_file).collect();
        assert_eq!(files, ["results.csv", "report.html"]);
        let format = |flag: &str| FORMATS.iter().find(|f| f.flag == flag);
        assert!(format("latex").is_some_and(|f| !f.shows_charts));
        assert!(
            format("svg").is_none(),
            "the charts are files of their own, drawn by xtask"
        );
    }
}
