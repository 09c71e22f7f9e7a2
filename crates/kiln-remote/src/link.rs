//! Kiln's own link to a `serve` process, beside Burn's remote server: JSON lines over TCP on the
//! port after Burn's. It tells a client which machine and device it is about to train on (Burn's
//! protocol does not say), checks the same token as Burn's server, and answers pings, so the
//! client can measure the round trip before a cell.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use kiln_contract::{DeviceReport, Fingerprint, ServedBurn};
use serde::{Deserialize, Serialize};

/// How long a client waits to connect to, or hear from, Kiln's server.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Pings whose median is the round trip (after one that opens the path).
const PINGS: usize = 10;

/// What a client asks.
#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "ask", rename_all = "kebab-case")]
pub enum Ask {
    /// The server's machine and devices; refused without the server's token.
    Info { token: Option<String> },
    /// An empty round trip.
    Ping,
}

/// What the server hosts, and on which machine.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Info {
    /// The backend the served devices compute with (`flex`).
    pub backend: String,
    pub backend_version: String,
    /// The served devices, in the order a client indexes them (`#0`, `#1`, ...).
    pub devices: Vec<DeviceReport>,
    /// The server's machine (its `burn_version`: the Burn the server was built against).
    pub fingerprint: Fingerprint,
    /// The other Burns the same `cargo xtask serve --burn ...` hosts, each on its own port:
    /// Burn's remote protocol is each version's own, so a client talks to its Burn's server.
    #[serde(default)]
    pub other_burns: Vec<ServedBurn>,
}

/// What the server answers.
#[derive(Serialize, Deserialize, Debug)]
#[serde(tag = "answer", rename_all = "kebab-case")]
pub enum LinkAnswer {
    Info(Box<Info>),
    Pong,
    Refused { why: String },
}

/// Compare tokens without an early exit on the first differing byte.
fn same_token(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The answer to one ask.
fn answer(ask: &str, info: &Info, token: Option<&str>) -> LinkAnswer {
    match serde_json::from_str::<Ask>(ask) {
        Ok(Ask::Ping) => LinkAnswer::Pong,
        Ok(Ask::Info { token: given }) => match (token, given.as_deref()) {
            (None, _) => LinkAnswer::Info(Box::new(info.clone())),
            (Some(expected), Some(given)) if same_token(given, expected) => {
                LinkAnswer::Info(Box::new(info.clone()))
            }
            (Some(_), Some(_)) => LinkAnswer::Refused {
                why: "wrong token".into(),
            },
            (Some(_), None) => LinkAnswer::Refused {
                why: "this server needs a token and none was given".into(),
            },
        },
        Err(e) => LinkAnswer::Refused {
            why: format!("not a Kiln request: {e}"),
        },
    }
}

/// The longest request line the server reads (an info request with a token is well under
/// 1 KiB): a longer one is refused and its connection closed, so no client makes the server
/// hold more than this per connection.
pub const MAX_LINE: usize = 64 * 1024;

/// Connections answered at once (a thread each); past it, a new one gets one refusal line and
/// is closed.
pub const MAX_CONNECTIONS: usize = 64;

/// How long one request may take to arrive, from its first byte's wait to its newline: an idle
/// or trickling connection gives its place back after this.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// Why a request line could not be read.
#[derive(Debug, PartialEq)]
enum LineError {
    TooLong,
    TooSlow,
    Closed,
}

/// Read one line of at most [`MAX_LINE`] bytes (without its newline) within `deadline`.
fn read_line(read: &mut BufReader<TcpStream>, deadline: Duration) -> Result<String, LineError> {
    let until = Instant::now() + deadline;
    let mut line = Vec::new();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LineError::TooSlow);
        }
        let _ = read.get_ref().set_read_timeout(Some(left));
        let buf = match read.fill_buf() {
            Ok([]) => return Err(LineError::Closed),
            Ok(buf) => buf,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(LineError::TooSlow);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(LineError::Closed),
        };
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len() + take > MAX_LINE {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&buf[..take]);
        read.consume(take + usize::from(done));
        if done {
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
    }
}

/// Write one answer line; false when the client is gone.
fn send(write: &mut impl Write, reply: &LinkAnswer) -> bool {
    let Ok(text) = serde_json::to_string(reply) else {
        return false;
    };
    writeln!(write, "{text}")
        .and_then(|()| write.flush())
        .is_ok()
}

/// Answer the requests of one connection until it closes, errs, or breaks a bound.
fn converse(stream: TcpStream, info: &Info, token: Option<&str>) {
    let Ok(write) = stream.try_clone() else {
        return;
    };
    let mut write = std::io::BufWriter::new(write);
    let mut read = BufReader::new(stream);
    loop {
        // A request past a bound is refused and its connection closed; a bad request is
        // refused and the connection goes on.
        let (reply, close) = match read_line(&mut read, REQUEST_DEADLINE) {
            Ok(line) => (answer(&line, info, token), false),
            Err(LineError::TooLong) => (
                LinkAnswer::Refused {
                    why: format!("a request line longer than {} KiB", MAX_LINE / 1024),
                },
                true,
            ),
            Err(LineError::TooSlow) => (
                LinkAnswer::Refused {
                    why: format!(
                        "no whole request within {} s; reconnect to ask again",
                        REQUEST_DEADLINE.as_secs()
                    ),
                },
                true,
            ),
            Err(LineError::Closed) => return,
        };
        if !send(&mut write, &reply) {
            return;
        }
        if close {
            // Read (and drop) what the client still sends, briefly and boundedly, before
            // closing: closing on unread data resets the connection, and the client would lose
            // the refusal it was just sent.
            let stream = read.get_ref();
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
            let _ = std::io::copy(&mut stream.take(16 * MAX_LINE as u64), &mut std::io::sink());
            return;
        }
    }
}

/// Answer every connection to `listener`, each on a thread of its own, at most
/// [`MAX_CONNECTIONS`] at once, forever.
pub fn serve(listener: TcpListener, info: Info, token: Option<String>) {
    let info = std::sync::Arc::new(info);
    let token = std::sync::Arc::new(token);
    let open = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for stream in listener.incoming().flatten() {
        use std::sync::atomic::Ordering;
        if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let mut stream = stream;
            send(
                &mut stream,
                &LinkAnswer::Refused {
                    why: format!(
                        "busy: {MAX_CONNECTIONS} connections are open; an idle one closes \
                         within {} s, try again then",
                        REQUEST_DEADLINE.as_secs()
                    ),
                },
            );
            continue;
        }
        let (info, token, held) = (info.clone(), token.clone(), open.clone());
        let spawned = std::thread::Builder::new().spawn(move || {
            converse(stream, &info, token.as_deref());
            held.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A connection to Kiln's server at `addr` (`host:port`).
pub struct Client {
    addr: String,
    read: BufReader<TcpStream>,
    write: TcpStream,
}

impl Client {
    /// Connect, or say why not.
    pub fn connect(addr: &str) -> Result<Client, String> {
        let unreachable = |why: String| {
            format!(
                "cannot reach Kiln's server at {addr} ({why}): is `cargo xtask serve` running \
                 there, and is its port after Burn's reachable from here?"
            )
        };
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| unreachable(e.to_string()))?
            .collect();
        let mut last = String::from("the name has no address");
        for a in addrs {
            match TcpStream::connect_timeout(&a, TIMEOUT) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    stream
                        .set_read_timeout(Some(TIMEOUT))
                        .map_err(|e| unreachable(e.to_string()))?;
                    let write = stream.try_clone().map_err(|e| unreachable(e.to_string()))?;
                    return Ok(Client {
                        addr: addr.to_string(),
                        read: BufReader::new(stream),
                        write,
                    });
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(unreachable(last))
    }

    fn ask(&mut self, ask: &Ask) -> Result<LinkAnswer, String> {
        let text = serde_json::to_string(ask).map_err(|e| e.to_string())?;
        let lost =
            |e: std::io::Error| format!("Kiln's server at {} stopped answering: {e}", self.addr);
        writeln!(self.write, "{text}").map_err(lost)?;
        let mut line = String::new();
        let n = self.read.read_line(&mut line).map_err(lost)?;
        if n == 0 {
            return Err(format!(
                "Kiln's server at {} closed the connection",
                self.addr
            ));
        }
        serde_json::from_str(&line).map_err(|e| {
            format!(
                "{} answered something that is not Kiln's link ({e}): is it a `cargo xtask \
                 serve` of the same Kiln?",
                self.addr
            )
        })
    }

    /// The server's machine and devices, with `token`.
    pub fn info(&mut self, token: Option<&str>) -> Result<Info, String> {
        match self.ask(&Ask::Info {
            token: token.map(str::to_string),
        })? {
            LinkAnswer::Info(info) => Ok(*info),
            LinkAnswer::Refused { why } => Err(format!(
                "the server at {} refused this client: {why} (give the server's token with \
                 --token T or KILN_REMOTE_TOKEN)",
                self.addr
            )),
            LinkAnswer::Pong => Err(format!("{} answered a ping to an info request", self.addr)),
        }
    }

    /// The median round trip of [`PINGS`] pings, after one.
    pub fn round_trip(&mut self) -> Result<f64, String> {
        median_seconds(PINGS, || match self.ask(&Ask::Ping)? {
            LinkAnswer::Pong => Ok(()),
            other => Err(format!("{} answered {other:?} to a ping", self.addr)),
        })
    }
}

/// The median seconds of `n` runs of `f`, after one run that is not counted (it opens the path:
/// a connection's first use, a first allocation).
pub fn median_seconds(n: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let mut times = Vec::with_capacity(n);
    for i in 0..=n {
        let started = Instant::now();
        f()?;
        if i > 0 {
            times.push(started.elapsed().as_secs_f64());
        }
    }
    Ok(kiln_contract::stats::median(&times).unwrap_or(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> Info {
        Info {
            backend: "flex".into(),
            backend_version: "0.22.1".into(),
            devices: Vec::new(),
            fingerprint: Fingerprint::default(),
            other_burns: Vec::new(),
        }
    }

    #[test]
    fn a_token_server_answers_only_its_token() {
        let ask = |t: Option<&str>| {
            serde_json::to_string(&Ask::Info {
                token: t.map(str::to_string),
            })
            .unwrap()
        };
        assert!(matches!(
            answer(&ask(Some("s3")), &info(), Some("s3")),
            LinkAnswer::Info(_)
        ));
        assert!(matches!(
            answer(&ask(Some("s4")), &info(), Some("s3")),
            LinkAnswer::Refused { why } if why == "wrong token"
        ));
        assert!(matches!(
            answer(&ask(Some("s")), &info(), Some("s3")),
            LinkAnswer::Refused { .. }
        ));
        assert!(matches!(
            answer(&ask(None), &info(), Some("s3")),
            LinkAnswer::Refused { .. }
        ));
        assert!(matches!(
            answer(&ask(None), &info(), None),
            LinkAnswer::Info(_)
        ));
        assert!(matches!(
            answer("GET / HTTP/1.1", &info(), None),
            LinkAnswer::Refused { .. }
        ));
    }

    #[test]
    fn a_client_gets_the_info_and_a_round_trip_over_tcp() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || serve(listener, info(), Some("tok".into())));
        let mut client = Client::connect(&addr).unwrap();
        assert!(client.round_trip().unwrap() > 0.0);
        assert_eq!(client.info(Some("tok")).unwrap().backend, "flex");
        let refused = client.info(Some("nope")).unwrap_err();
        assert!(refused.contains("wrong token"), "{refused}");
        assert!(refused.contains("KILN_REMOTE_TOKEN"), "{refused}");
    }

    /// A server on a free loopback port, and its address.
    fn server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || serve(listener, info(), None));
        addr
    }

    /// The first answer line the server gives on `stream`.
    fn first_answer(stream: TcpStream) -> String {
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        line
    }

    #[test]
    fn a_line_past_the_bound_is_refused_and_the_server_keeps_answering() {
        let addr = server();
        let mut long = TcpStream::connect(&addr).unwrap();
        // Four times the bound without a newline: the server stops reading at the bound.
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..4 {
            if long.write_all(&chunk).is_err() {
                break;
            }
        }
        let answer = first_answer(long);
        assert!(answer.contains("longer than 64 KiB"), "{answer}");
        let mut client = Client::connect(&addr).unwrap();
        assert!(client.round_trip().is_ok());
        // Garbage and bad JSON are refused, and the same connection goes on.
        let mut raw = TcpStream::connect(&addr).unwrap();
        raw.write_all(b"\x00\xffgarbage\n{\"ask\":\"nope\"}\n{\"ask\":\"ping\"}\n")
            .unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let lines: Vec<String> = BufReader::new(raw)
            .lines()
            .take(3)
            .map(Result::unwrap)
            .collect();
        assert!(lines[0].contains("not a Kiln request") && lines[1].contains("not a Kiln request"));
        assert!(lines[2].contains("pong"), "{lines:?}");
    }

    #[test]
    fn connections_past_the_bound_are_refused_and_idle_ones_give_their_place_back() {
        let addr = server();
        let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS)
            .map(|_| TcpStream::connect(&addr).unwrap())
            .collect();
        // The server counts a connection once it accepts it: wait for the last one.
        std::thread::sleep(Duration::from_millis(300));
        let refused = first_answer(TcpStream::connect(&addr).unwrap());
        assert!(
            refused.contains("busy: 64 connections are open"),
            "{refused}"
        );
        // Each idle connection is told so and closed after the request deadline, and a
        // client gets through again.
        let told = first_answer(idle.into_iter().next().unwrap());
        assert!(told.contains("no whole request within 10 s"), "{told}");
        std::thread::sleep(Duration::from_millis(300));
        let mut client = Client::connect(&addr).unwrap();
        assert!(client.round_trip().is_ok());
    }

    #[test]
    fn nothing_listening_is_a_clear_error() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let Err(why) = Client::connect(&format!("127.0.0.1:{port}")) else {
            panic!("connected to a closed port");
        };
        assert!(why.contains("cargo xtask serve"), "{why}");
    }

    #[test]
    fn the_median_leaves_out_the_first_run_and_stops_at_an_error() {
        let mut calls = 0;
        let t = median_seconds(4, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 5);
        assert!(t >= 0.0);
        let err = median_seconds(4, || Err("gone".into())).unwrap_err();
        assert_eq!(err, "gone");
    }
}
