//! Progress on standard error while cells run.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Progress display on standard error: one rewritten line on a terminal, a line now and then
/// otherwise.
pub(super) struct Display {
    tty: bool,
    last_line: Instant,
    width: usize,
}

impl Display {
    pub(super) fn new() -> Self {
        Display {
            tty: std::io::stderr().is_terminal(),
            last_line: Instant::now() - Duration::from_secs(3600),
            width: 0,
        }
    }

    pub(super) fn status(&mut self, text: &str) {
        if self.tty {
            let pad = self.width.saturating_sub(text.chars().count());
            eprint!("\r{text}{}", " ".repeat(pad));
            self.width = text.chars().count();
        } else if self.last_line.elapsed() >= Duration::from_secs(30) {
            eprintln!("{text}");
            self.last_line = Instant::now();
        }
    }

    pub(super) fn line(&mut self, text: &str) {
        if self.tty && self.width > 0 {
            eprint!("\r{}\r", " ".repeat(self.width));
            self.width = 0;
        }
        eprintln!("{text}");
    }
}

/// Where the matrix is, for progress lines.
pub(super) struct Position {
    pub index: usize,
    pub total: usize,
    /// Upper bound of the seconds the cells after this one will take.
    pub later_seconds: f64,
}
