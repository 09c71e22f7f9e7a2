//! The report's model tables as LaTeX for a paper: one `table` per model with booktabs rules
//! (`\usepackage{booktabs}`), the same cells as the Markdown and HTML tables, the notes as a
//! list under each table.

use std::fmt::Write as _;

use crate::table::model_tables;
use kiln_contract::schema::Record;

/// `text` with LaTeX's special characters escaped, and the Unicode signs Kiln's cells use
/// written as LaTeX (a table compiles with pdflatex as it is).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\textbackslash{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            '×' => out.push_str("$\\times$"),
            '±' => out.push_str("$\\pm$"),
            '–' => out.push_str("--"),
            '—' => out.push_str("---"),
            '≈' => out.push_str("$\\approx$"),
            '≥' => out.push_str("$\\geq$"),
            '≤' => out.push_str("$\\leq$"),
            '·' => out.push_str("$\\cdot$"),
            '…' => out.push_str("\\ldots{}"),
            '⚠' => out.push_str("(!)"),
            c => out.push(c),
        }
    }
    out
}

/// The model tables of `records` (speed-ups over `baseline`, as in the report) as LaTeX.
pub fn latex(records: &[Record], baseline: Option<&str>) -> String {
    let mut out = String::from(
        "% Kiln's model tables (cargo xtask report --latex); needs \\usepackage{booktabs}.\n",
    );
    for t in model_tables(records, baseline) {
        // Numbers right-aligned, text left: a column is numeric when every row's cell sorts.
        let align: String = (0..t.columns.len())
            .map(|i| {
                let numeric = !t.rows.is_empty()
                    && t.rows
                        .iter()
                        .all(|r| r.cells.get(i).is_some_and(|c| c.sort.is_some()));
                if numeric { 'r' } else { 'l' }
            })
            .collect();
        let _ = writeln!(out, "\\begin{{table}}[htbp]\n\\centering");
        let _ = writeln!(out, "\\caption{{{}}}", escape(&t.model));
        let _ = writeln!(out, "\\begin{{tabular}}{{{align}}}\n\\toprule");
        let header: Vec<String> = t.columns.iter().map(|(_, title)| escape(title)).collect();
        let _ = writeln!(out, "{} \\\\\n\\midrule", header.join(" & "));
        for row in &t.rows {
            let cells: Vec<String> = row.cells.iter().map(|c| escape(&c.text)).collect();
            let _ = writeln!(out, "{} \\\\", cells.join(" & "));
        }
        let _ = writeln!(out, "\\bottomrule\n\\end{{tabular}}");
        if !t.notes.is_empty() {
            let _ = writeln!(out, "\\begin{{itemize}}");
            for note in &t.notes {
                let _ = writeln!(out, "\\item {}", escape(note));
            }
            let _ = writeln!(out, "\\end{{itemize}}");
        }
        let _ = writeln!(out, "\\end{{table}}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_characters_are_escaped() {
        assert_eq!(
            escape("50% of a_b & {c} #1 $2 ~ ^ \\"),
            "50\\% of a\\_b \\& \\{c\\} \\#1 \\$2 \\textasciitilde{} \\textasciicircum{} \
             \\textbackslash{}"
        );
        assert_eq!(escape("1.5× ± 2–3"), "1.5$\\times$ $\\pm$ 2--3");
    }

    #[test]
    fn each_model_is_a_booktabs_table_with_every_row() {
        let rows = [
            crate::fields::tests_support::timed("flex", 10.0),
            crate::fields::tests_support::timed("ndarray", 20.0),
        ];
        let tex = latex(&rows, None);
        assert_eq!(tex.matches("\\begin{table}").count(), 1);
        assert!(tex.contains("\\caption{mnist-cnn}"), "{tex}");
        assert!(tex.contains("\\toprule") && tex.contains("\\midrule"));
        assert!(tex.contains("\\bottomrule") && tex.contains("\\end{tabular}"));
        // A header and one line a row, each with as many cells as the tabular has columns.
        let body: Vec<&str> = tex.lines().filter(|l| l.ends_with("\\\\")).collect();
        assert_eq!(body.len(), 3, "{tex}");
        let columns = tex
            .lines()
            .find_map(|l| l.strip_prefix("\\begin{tabular}{"))
            .map(|a| a.trim_end_matches('}').len())
            .unwrap();
        for line in body {
            assert_eq!(line.matches(" & ").count() + 1, columns, "{line}");
        }
        assert!(tex.contains("flex") && tex.contains("ndarray"));
    }
}
