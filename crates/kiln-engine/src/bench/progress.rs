//! Progress on standard error while cells run: on a terminal, a bar for the run and one for the
//! running cell (indicatif, fitted to the terminal's width); elsewhere (logs, CI) a plain line
//! now and then.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where the matrix is, for progress lines.
pub(super) struct Position {
    pub index: usize,
    pub total: usize,
    /// Upper bound of the seconds the cells after this one will take.
    pub later_seconds: f64,
}

/// The run's progress display.
pub(super) struct Display {
    bars: Option<Bars>,
    last_line: Instant,
}

struct Bars {
    multi: MultiProgress,
    run: ProgressBar,
    cell: Option<ProgressBar>,
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl Display {
    /// A display for a run of `cells` cells: bars on a terminal, plain lines elsewhere.
    pub(super) fn new(cells: usize) -> Self {
        let bars = std::io::stderr().is_terminal().then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let run = multi.add(ProgressBar::new(cells as u64));
            run.set_style(style("{prefix} {bar:16} {pos}/{len} cells {wide_msg}"));
            run.set_prefix("run ");
            Bars {
                multi,
                run,
                cell: None,
            }
        });
        Display {
            bars,
            last_line: Instant::now() - Duration::from_secs(3600),
        }
    }

    /// A cell starts: `steps` is its total number of training steps.
    pub(super) fn start_cell(&mut self, steps: u64) {
        if let Some(b) = &mut self.bars {
            let bar = b.multi.add(ProgressBar::new(steps.max(1)));
            bar.set_style(style("{prefix} {bar:16} {pos}/{len} steps {wide_msg}"));
            bar.set_prefix("cell");
            b.cell = Some(bar);
        }
    }

    /// Progress inside the running cell `label`: `done` steps, `text` for the status (the bar
    /// shows the text alone: the cell's label was printed when it started).
    pub(super) fn status(&mut self, done: u64, label: &str, text: &str, run_eta: &str) {
        match &mut self.bars {
            Some(b) => {
                if let Some(cell) = &b.cell {
                    cell.set_position(done);
                    cell.set_message(text.to_string());
                }
                b.run.set_message(run_eta.to_string());
            }
            None if self.last_line.elapsed() >= Duration::from_secs(30) => {
                eprintln!("{label}: {text} | {run_eta}");
                self.last_line = Instant::now();
            }
            None => {}
        }
    }

    /// The running cell is over (recorded or not).
    pub(super) fn finish_cell(&mut self) {
        if let Some(b) = &mut self.bars {
            if let Some(cell) = b.cell.take() {
                cell.finish_and_clear();
                b.multi.remove(&cell);
            }
            b.run.inc(1);
        }
    }

    /// A line that stays (printed above the bars on a terminal).
    pub(super) fn line(&mut self, text: &str) {
        match &self.bars {
            Some(b) => {
                let _ = b.multi.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    /// Remove the bars (the run is over).
    pub(super) fn finish(&mut self) {
        if let Some(b) = self.bars.take() {
            b.run.finish_and_clear();
            let _ = b.multi.clear();
        }
    }
}
