//! docs/usage.md's flag reference, written from the parser itself (clap describes every
//! command it parses): a table per command of each flag, its value, its default and its help.
//! A test holds the committed page to it; `KILN_BLESS=1 cargo test -p xtask flag_reference`
//! writes it again.

use std::fmt::Write;

/// The heading the reference starts at; everything from it to the end of usage.md is generated.
pub const HEADING: &str = "## Every flag, from the code";

/// The reference of every command of `cli`, from [`HEADING`] on.
pub fn flag_reference(cli: &clap::Command) -> String {
    let mut out = format!(
        "{HEADING}\n\nWritten from the parser (`KILN_BLESS=1 cargo test -p xtask flag_reference` \
         writes it again; a test fails when it and the code differ): what each command's \
         `--help` prints, as tables.\n"
    );
    for sub in cli.get_subcommands() {
        let _ = write!(
            out,
            "\n### {}\n\n{}\n\n| Flag | Value | Default | What it does |\n|---|---|---|---|\n",
            sub.get_name(),
            one_line(&sub.get_about().map(|a| a.to_string()).unwrap_or_default())
        );
        for a in sub.get_arguments() {
            if a.is_hide_set() || matches!(a.get_id().as_str(), "help" | "version") {
                continue;
            }
            let aliases: String = a
                .get_visible_aliases()
                .into_iter()
                .flatten()
                .map(|alias| format!(" or `--{alias}`"))
                .collect();
            let name = match a.get_long() {
                Some(long) => format!("`--{long}`{aliases}"),
                None => format!("`{}` (positional)", a.get_id().as_str().to_uppercase()),
            };
            let switch = a.get_num_args().is_some_and(|n| n.max_values() == 0)
                || !a.get_action().takes_values();
            let value = if switch {
                String::new()
            } else {
                a.get_value_names()
                    .map(|v| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "))
                    .unwrap_or_else(|| a.get_id().as_str().to_uppercase())
            };
            let default = a
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(",");
            let help = a.get_long_help().or(a.get_help()).map(|h| h.to_string());
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} |",
                cell(&value),
                cell(&default),
                cell(&help.unwrap_or_default())
            );
        }
    }
    out
}

/// Help text on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A table cell: one line, its pipes escaped, code-quoted where it is a value.
fn cell(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}
