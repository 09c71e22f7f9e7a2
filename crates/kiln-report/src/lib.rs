//! Kiln's reports, made from the records its runners write (`kiln-contract`, the contract both
//! sides share): one table model (`table`), a record's fields as text (`fields`) and the
//! sections under it (`sections`, `batch`, `warnings`), the outputs (`render`: Markdown, terminal and CSV;
//! `html`; `latex`; the SVG charts, `chart`; the registry of file formats in `export`), the
//! reader of a run's files (`read`), what a smoke run expects of its rows (`check`), repeats
//! combined into rows (`repeats`), and the comparisons (`ab` between two Burns; `explain`'s and
//! `verify`'s tables); the results site of every machine's runs (`site`). No runner links this crate, so a runner's build never compiles a report.

pub mod ab;
pub mod batch;
pub mod chart;
pub mod check;
pub mod explain;
pub mod export;
pub mod fields;
pub mod html;
pub mod infer;
pub mod latex;
pub mod machines;
pub mod read;
pub mod render;
pub mod repeats;
pub mod sections;
#[cfg(feature = "site")]
pub mod site;
pub mod table;
pub mod units;
pub mod verify;
pub mod warnings;
