//! The one supervisor of the processes xtask starts and waits on: cargo building the runners,
//! a cell's runner streaming its events, a probe, explain's and verify's one-shot requests.
//! Standard output is read line by line by a thread and handed out as it comes, with a tick
//! when nothing came (so the caller can show progress, enforce its limits, notice Ctrl-C);
//! standard error goes to a file or, line by line, to a handler in a thread of its own; both
//! pipes are drained, so a chatty child cannot stall. The end gives the exit status (none when
//! the deadline killed it) and the child's peak resident memory as the kernel counted it.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Where a child's standard error goes.
pub enum Stderr {
    /// Into this file, as the child writes it (a cell's log).
    File(File),
    /// Each line to this handler, in a thread of its own, as it comes.
    Lines(Box<dyn FnMut(&str) + Send>),
}

/// What came from the child's standard output.
pub enum Out {
    Line(String),
    /// Nothing for the tick's length.
    Quiet,
    /// Its standard output closed (it has ended, or is about to).
    Closed,
}

/// How a supervised child ended.
pub struct Ended {
    /// `None`: killed at its deadline.
    pub status: Option<ExitStatus>,
    /// Its peak resident set size in bytes (`wait4`), where the OS says.
    pub max_rss: Option<u64>,
}

/// A running child under supervision.
pub struct Supervised {
    child: Child,
    lines: Receiver<String>,
    stderr: Option<JoinHandle<()>>,
}

/// The lines of `read`, invalid UTF-8 replaced (a stray byte must not end the reading).
fn lines_of(read: impl std::io::Read) -> impl Iterator<Item = String> {
    BufReader::new(read)
        .split(b'\n')
        .map_while(Result::ok)
        .map(|l| {
            String::from_utf8_lossy(&l)
                .trim_end_matches('\r')
                .to_string()
        })
}

impl Supervised {
    /// Start `cmd` with no standard input.
    pub fn spawn(cmd: &mut Command, stderr: Stderr) -> Result<Self> {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut handler = None;
        match stderr {
            Stderr::File(f) => {
                cmd.stderr(Stdio::from(f));
            }
            Stderr::Lines(h) => {
                cmd.stderr(Stdio::piped());
                handler = Some(h);
            }
        }
        let mut child = cmd.spawn()?;
        let stderr = match (handler, child.stderr.take()) {
            (Some(mut handle), Some(pipe)) => Some(std::thread::spawn(move || {
                for line in lines_of(pipe) {
                    handle(&line);
                }
            })),
            _ => None,
        };
        let stdout = child.stdout.take().context("the child's stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in lines_of(stdout) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            lines,
            stderr,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line of its standard output, waiting at most `tick` for it.
    pub fn next(&self, tick: Duration) -> Out {
        match self.lines.recv_timeout(tick) {
            Ok(line) => Out::Line(line),
            Err(RecvTimeoutError::Timeout) => Out::Quiet,
            Err(RecvTimeoutError::Disconnected) => Out::Closed,
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Wait for it to end, killing it at `deadline`, and for its standard error's last lines
    /// to be handled.
    pub fn finish(mut self, deadline: Option<Instant>) -> Result<Ended> {
        let ended = wait(&mut self.child, deadline)?;
        if let Some(t) = self.stderr.take() {
            let _ = t.join();
        }
        Ok(ended)
    }
}

/// Reap `child` (polling while a deadline may still kill it, blocking otherwise), with its
/// peak memory where `wait4` exists.
fn wait(child: &mut Child, deadline: Option<Instant>) -> Result<Ended> {
    let mut killed = false;
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        let pid = child.id() as libc::pid_t;
        loop {
            let mut status = 0;
            // SAFETY: wait4 writes only into the status and the zeroed rusage we own.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            let poll = !killed && deadline.is_some();
            let flags = if poll { libc::WNOHANG } else { 0 };
            let got = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
            if got == pid {
                // Linux reports KiB, macOS bytes.
                let raw = usage.ru_maxrss.max(0) as u64;
                let bytes = if cfg!(target_os = "macos") {
                    raw
                } else {
                    raw * 1024
                };
                let status = ExitStatus::from_raw(status);
                return Ok(Ended {
                    status: (!killed).then_some(status),
                    max_rss: Some(bytes),
                });
            }
            if got < 0 {
                break; // not ours to reap after all: std's wait below says why
            }
            if !killed && deadline.is_some_and(|d| Instant::now() >= d) {
                let _ = child.kill();
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    loop {
        if let Some(status) = child.try_wait().context("waiting for the child")? {
            return Ok(Ended {
                status: (!killed).then_some(status),
                max_rss: None,
            });
        }
        if !killed && deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = child.kill();
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run `cmd` once, for at most `limit` (then it is killed: status `None`): its standard output
/// whole, each line of its standard error to `on_stderr`. Probes and explain's and verify's
/// requests.
pub fn run_once(
    cmd: &mut Command,
    limit: Duration,
    on_stderr: impl FnMut(&str) + Send + 'static,
) -> Result<(Option<ExitStatus>, String)> {
    let deadline = Instant::now() + limit;
    let child = Supervised::spawn(cmd, Stderr::Lines(Box::new(on_stderr)))?;
    let mut stdout = String::new();
    // Past the deadline, `finish` kills it.
    while Instant::now() < deadline {
        match child.next(Duration::from_millis(100)) {
            Out::Line(l) => {
                stdout.push_str(&l);
                stdout.push('\n');
            }
            Out::Quiet => {}
            Out::Closed => break,
        }
    }
    let ended = child.finish(Some(deadline))?;
    Ok((ended.status, stdout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        cmd
    }

    #[cfg(unix)]
    #[test]
    fn both_pipes_are_drained_and_every_stderr_line_is_handled() {
        // 1 MiB on each pipe: far more than a pipe buffer holds.
        let seen = Arc::new(Mutex::new(0usize));
        let count = seen.clone();
        let (status, stdout) = run_once(
            &mut sh("head -c 1048576 /dev/zero | tr '\\0' x; echo; \
                     head -c 1048576 /dev/zero | tr '\\0' y >&2; echo >&2; \
                     echo last >&2; echo '{\"done\":1}'"),
            Duration::from_secs(20),
            move |l| *count.lock().unwrap() += l.len(),
        )
        .unwrap();
        assert!(status.unwrap().success());
        assert!(
            stdout.ends_with("{\"done\":1}\n"),
            "{}",
            &stdout[stdout.len() - 20..]
        );
        assert_eq!(*seen.lock().unwrap(), 1048576 + 4);
    }

    #[cfg(unix)]
    #[test]
    fn a_child_past_its_limit_is_killed_and_has_no_status() {
        let started = Instant::now();
        let (status, stdout) = run_once(
            &mut sh("echo early; exec sleep 30"),
            Duration::from_millis(300),
            |_| {},
        )
        .unwrap();
        assert!(status.is_none());
        assert_eq!(stdout, "early\n");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_end_says_the_peak_memory_of_the_child() {
        let dir = tempfile::tempdir().unwrap();
        let log = File::create(dir.path().join("err")).unwrap();
        // Python is in CI; `sh` itself stays small. 64 MiB held, then released.
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            "b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); print(1)",
        ]);
        let child = Supervised::spawn(&mut cmd, Stderr::File(log)).unwrap();
        let mut lines = Vec::new();
        loop {
            match child.next(Duration::from_millis(100)) {
                Out::Line(l) => lines.push(l),
                Out::Quiet => {}
                Out::Closed => break,
            }
        }
        let ended = child.finish(None).unwrap();
        assert!(ended.status.unwrap().success());
        assert_eq!(lines, ["1"]);
        assert!(ended.max_rss.unwrap() > 64 << 20, "{:?}", ended.max_rss);
    }
}
